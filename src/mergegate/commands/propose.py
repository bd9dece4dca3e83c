"""`mergegate propose ID -- ARGV...`: a job on a branch from approved, judged as `check` judges
it."""

from __future__ import annotations

from pathlib import Path

import click

from mergegate.commands import output
from mergegate.commands.options import json_option, repo_option, trust_option
from mergegate.operations.propose import Draft, parse_env, propose


@click.command("propose")
@click.argument("job", metavar="ID")
@click.argument("argv", nargs=-1, required=True, metavar="-- ARGV...")
@click.option(
    "--description",
    default=None,
    help="What the job does, for the approver (also the commit message body).",
)
@click.option(
    "--timeout",
    type=click.IntRange(min=1),
    default=None,
    metavar="SECONDS",
    help="timeout_seconds of the job.",
)
@click.option("--cwd", default=None, help="Working directory inside the repository.")
@click.option(
    "--env",
    "env",
    multiple=True,
    metavar="NAME=VALUE",
    help="An environment variable for the job (repeatable; never a secret).",
)
@click.option(
    "--retries",
    type=click.IntRange(min=0, max=100),
    default=None,
    metavar="N",
    help="retries of the job: run again up to N times after a failed or timed-out attempt (at most "
    "the policy's max_retries).",
)
@click.option(
    "--idempotent",
    is_flag=True,
    help="The job may run again after a runner died mid-run (a lost attempt is retried).",
)
@click.option(
    "--runs-on",
    "runs_on",
    multiple=True,
    metavar="LABEL",
    help="A label a runner must have to claim the job (repeatable).",
)
@click.option(
    "--branch", "branch_name", default=None, help="Proposal branch (default: propose/ID)."
)
@click.option("--push", is_flag=True, help="Push the branch (without force).")
@click.option(
    "--open-pr",
    "open_pr",
    is_flag=True,
    help="Also open a pull request against the base (needs GITHUB_TOKEN).",
)
@click.option(
    "--even-if-denied",
    "even_if_denied",
    is_flag=True,
    help="Propose a job the policy in force denies (to go with a policy change that allows it).",
)
@click.option(
    "--base",
    default="approved",
    show_default=True,
    help="The approved branch (approved, origin/approved, ...).",
)
@click.option(
    "--remote", default="origin", show_default=True, help="Remote to fetch from and push to."
)
@click.option(
    "--no-fetch", "no_fetch", is_flag=True, help="Use the remote-tracking branches as they are."
)
@repo_option
@trust_option
@json_option
def command(
    job: str,
    argv: tuple[str, ...],
    description: str | None,
    timeout: int | None,
    cwd: str | None,
    env: tuple[str, ...],
    retries: int | None,
    idempotent: bool,
    runs_on: tuple[str, ...],
    branch_name: str | None,
    push: bool,
    open_pr: bool,
    even_if_denied: bool,
    base: str,
    remote: str,
    no_fetch: bool,
    repo: Path,
    trust_root: str | None,
    as_json: bool,
) -> int:
    """Propose jobs/ID.yaml running ARGV, on a branch from approved.

    The file is validated and judged exactly as `mergegate check` would judge
    it before any branch points at it; an invalid job (exit 2) or one the
    policy in force would deny (exit 1, unless --even-if-denied) is refused
    and nothing is written.
    The commit is signed when git is configured to sign (commit.gpgsign).
    Proposing the same content again returns the existing branch.
    Everything after `--` is the command, passed as it is (no shell).

    \b
    Example:
      mergegate propose backup --description "nightly backup" --push -- restic backup /srv
    """
    return main(
        job=job,
        argv=argv,
        description=description,
        timeout=timeout,
        cwd=cwd,
        env=env,
        retries=retries,
        idempotent=idempotent,
        runs_on=runs_on,
        branch=branch_name,
        push=push,
        open_pr=open_pr,
        base=base,
        remote=remote,
        fetch=not no_fetch,
        repo=repo,
        trust_root=trust_root,
        as_json=as_json,
        even_if_denied=even_if_denied,
    )


def main(
    *,
    job: str,
    argv: tuple[str, ...],
    description: str | None,
    timeout: int | None,
    cwd: str | None,
    env: tuple[str, ...],
    branch: str | None,
    push: bool,
    open_pr: bool,
    base: str,
    remote: str,
    fetch: bool,
    repo: Path,
    trust_root: str | None,
    as_json: bool,
    even_if_denied: bool = False,
    retries: int | None = None,
    idempotent: bool = False,
    runs_on: tuple[str, ...] = (),
) -> int:
    draft = Draft(
        job=job,
        command=argv,
        description=description,
        timeout_seconds=timeout,
        cwd=cwd,
        env=parse_env(env),
        retries=retries,
        idempotent=idempotent,
        runs_on=runs_on,
    )
    result = propose(
        draft,
        repo_path=repo,
        base=base,
        remote=remote,
        branch=branch,
        push=push,
        fetch=fetch,
        trust=trust_root,
        open_pr=open_pr,
        even_if_denied=even_if_denied,
    )
    if as_json:
        output.emit(result.as_json())
        return 0
    for f in result.report.files:
        output.line(f"{output.state(f.state, 8)} {f.path}: {f.reason}")
        if f.approvals:
            output.line(f"         approvals: {f.approvals}")
    signed = "signed" if result.signed else "unsigned"
    if result.created:
        output.line(
            f"proposed {result.path} on branch {result.branch} ({result.commit[:12]}, {signed})"
        )
    else:
        output.line(
            f"already proposed: {result.path} with this content is on branch {result.branch} "
            f"({result.commit[:12]})"
        )
    if result.pushed_to:
        output.line(f"pushed to {result.pushed_to}")
    if result.pull is not None:
        verb = "opened" if result.pull_created else "already open:"
        output.line(f"{verb} pull request #{result.pull} {result.pull_url}")
        output.line(
            f"next: an approver reviews pull request #{result.pull} and merges it (merge commit or "
            "squash)"
        )
    elif result.pushed_to:
        output.line(
            f"next: an approver reviews it and runs `mergegate approve {result.pushed_to} --merge`"
        )
    else:
        output.line(f"next: git push {remote} {result.branch} (or propose again with --push)")
    return 0
