"""Command line: parse, call one `mergegate.commands.<name>.main`, map errors to exit codes.

Each command's glue (calling the domain, printing) lives in its own module
under `mergegate/commands/`; this module only declares the options. One
handler turns every MergegateError into `error: <what> (<file>:<line>)` and a `hint:`.
"""

from __future__ import annotations

import gc
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from mergegate import __version__
from mergegate.errors import MergegateError, UsageError


class _Flags:
    """What the error handler must know about the parsed command line."""

    debug = False
    as_json = False


def _set_debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        _Flags.debug = True


def _set_json(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        _Flags.as_json = True
    return value


class _Group(click.Group):
    """Every subcommand also accepts --debug, so it works after the command name too."""

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        if not isinstance(cmd, click.Group):
            cmd.params.append(
                click.Option(
                    ["--debug"],
                    is_flag=True,
                    expose_value=False,
                    callback=_set_debug,
                    help="Show tracebacks.",
                )
            )
        super().add_command(cmd, name)


def _repo_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--repo",
        "repo",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("."),
        show_default=True,
        help="The gate repository.",
    )(f)


def _branch_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--no-fetch", "no_fetch", is_flag=True, help="Read the remote-tracking branch as it is."
    )(f)
    f = click.option(
        "--branch", default="approved", show_default=True, help="The approved branch."
    )(f)
    f = click.option(
        "--remote",
        default="origin",
        show_default=True,
        help="Remote to fetch from (and, for commands that push, push to).",
    )(f)
    return _repo_option(f)


def _trust_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--trust-root",
        "trust_root",
        envvar="MERGEGATE_TRUST_ROOT",
        default=None,
        metavar="COMMIT",
        help="Pinned trust root, or MERGEGATE_TRUST_ROOT (default: the first commit of approved "
        "with a policy, with a warning).",
    )(f)


def _json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        callback=_set_json,
        help="Print one JSON object (stable format); errors too.",
    )(f)


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="mergegate")
@click.option(
    "--debug", is_flag=True, callback=_set_debug, expose_value=False, help="Show tracebacks."
)
def cli() -> None:
    """mergegate: run a job only after a signed, policy-checked merge into `approved`.

    \b
    Example:
      mergegate demo                                   # the whole flow on a throwaway gate
      mergegate init --key ~/.ssh/id_ed25519.pub
      mergegate propose backup --push -- restic backup /srv
      mergegate inbox                                  # what waits for approval
      mergegate approve origin/propose/backup --merge
      mergegate run --once
      mergegate show backup
      mergegate verify

    Exit codes: 0 ok, 1 a job failed or was refused, 2 bad input, 3 integrity.
    See it work: mergegate demo. Each command: mergegate COMMAND --help.
    """


@cli.command()
@_branch_options
@_trust_option
@_json_option
@click.option("--once", is_flag=True, help="Process what is pending, then exit.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds between polls.",
)
@click.option(
    "--runner-name", default="runner", show_default=True, help="Name written into every record."
)
@click.option(
    "--signing-key",
    default=None,
    help="Sign audit commits: ssh private key path or OpenPGP key id.",
)
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep full redacted output here.",
)
@click.option(
    "--shutdown-grace",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    metavar="SECONDS",
    help="On SIGINT/SIGTERM, let the job in flight run this long "
    "before its process tree is killed.",
)
@click.option(
    "--lock-wait",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    metavar="SECONDS",
    help="Wait this long for another pass in this clone to finish before refusing.",
)
@click.option(
    "--max-backoff",
    type=click.FloatRange(min=0.1),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="Longest wait between polls while the remote is unreachable (the loop).",
)
@click.option(
    "--dry-run",
    "dry_run",
    is_flag=True,
    help="Say what one pass would claim, run and record; write, push and run nothing.",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="LABEL",
    help="This runner's label (repeatable): it claims only jobs whose runs_on it has all of.",
)
@click.option(
    "--job",
    "job",
    default=None,
    metavar="PATH",
    help="With --once: claim and run only this job's runnable revision (a matrix entry of "
    "`mergegate plan`).",
)
@click.option(
    "--parallel",
    type=click.IntRange(min=1, max=256),
    default=1,
    show_default=True,
    metavar="N",
    help="Run up to N jobs at once (their claims go in one push).",
)
def run(
    repo: Path,
    remote: str,
    branch: str,
    no_fetch: bool,
    trust_root: str | None,
    as_json: bool,
    once: bool,
    interval: float,
    runner_name: str,
    signing_key: str | None,
    output_dir: Path | None,
    shutdown_grace: float,
    lock_wait: float,
    max_backoff: float,
    dry_run: bool,
    parallel: int,
    labels: tuple[str, ...],
    job: str | None,
) -> int:
    """Run every newly approved job and push its records to the branch mergegate/audit.

    The first SIGINT or SIGTERM stops claiming; the job in flight gets
    --shutdown-grace seconds, then is killed and recorded `interrupted`, and
    the records are pushed before the runner exits. With --json, each pass
    (and, in the loop, each outage and recovery) is one JSON object per line.

    A runner with --label claims only jobs whose runs_on it has all of; a job
    without runs_on is claimed by any runner. --job PATH claims and runs that
    one revision and records nothing else (exit 0 if another runner has it).

    \b
    Example:
      mergegate run --once --runner-name ci-1 --json
      mergegate run --interval 30 --runner-name host-1   # the poll loop
      mergegate run --once --label gpu --label linux     # only jobs it has the labels for
      mergegate run --once --job jobs/deploy.yaml        # one entry of a `mergegate plan` matrix
      mergegate run --dry-run                            # what a pass would do
      mergegate run --once --parallel 8                  # up to 8 jobs at once
    """
    from mergegate.commands import run as command

    if dry_run:
        return command.dry_run(
            repo=repo,
            remote=remote,
            branch=branch,
            fetch=not no_fetch,
            trust_root=trust_root,
            as_json=as_json,
            runner_name=runner_name,
            signing_key=signing_key,
            labels=labels,
        )
    return command.main(
        repo=repo,
        remote=remote,
        branch=branch,
        fetch=not no_fetch,
        trust_root=trust_root,
        as_json=as_json,
        once=once,
        interval=interval,
        runner_name=runner_name,
        signing_key=signing_key,
        output_dir=output_dir,
        shutdown_grace=shutdown_grace,
        lock_wait=lock_wait,
        max_backoff=max_backoff,
        parallel=parallel,
        labels=labels,
        job=job,
    )


@cli.command()
@_branch_options
@_trust_option
@_json_option
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="LABEL",
    help="Only jobs a runner with these labels may claim "
    "(repeatable; default: every runnable job).",
)
@click.option(
    "--github",
    is_flag=True,
    help="Also write matrix=, count= and more= to $GITHUB_OUTPUT (automatic when "
    "GITHUB_ACTIONS=true).",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    metavar="N",
    help="At most N entries (GitHub refuses a matrix of more than 256); the rest wait for the next "
    "plan.",
)
def plan(
    repo: Path,
    remote: str,
    branch: str,
    no_fetch: bool,
    trust_root: str | None,
    as_json: bool,
    labels: tuple[str, ...],
    github: bool,
    limit: int,
) -> int:
    """List the jobs a runner would claim now, as a GitHub Actions matrix with --json.

    The same planning as a pass (`run --dry-run`); nothing is written. Each
    entry is one revision: path, job, blob, commit, attempt and runs_on. Run an
    entry with `mergegate run --once --job PATH`: the same at-most-once claim.

    \b
    Example:
      mergegate plan
      mergegate plan --json            # {"include": [{"path": "jobs/a.yaml", ...}]}
      mergegate plan --github          # in Actions: matrix=... count=N in $GITHUB_OUTPUT
    """
    from mergegate.commands import plan as command

    return command.main(
        repo=repo,
        remote=remote,
        branch=branch,
        fetch=not no_fetch,
        trust_root=trust_root,
        as_json=as_json,
        labels=labels,
        github=github,
        limit=limit,
    )


@cli.command()
@_branch_options
@_trust_option
@_json_option
@click.option(
    "--state",
    "states",
    multiple=True,
    metavar="STATE",
    type=click.Choice(
        [
            "queued",
            "retrying",
            "waiting",
            "running",
            "succeeded",
            "failed",
            "timed_out",
            "interrupted",
            "lost",
            "rejected",
            "vetoed",
            "not run",
        ]
    ),
    help="Only jobs in this state (repeatable).",
)
def status(
    repo: Path,
    remote: str,
    branch: str,
    no_fetch: bool,
    trust_root: str | None,
    as_json: bool,
    states: tuple[str, ...],
) -> int:
    """Show every job on approved with its state.

    States: queued (approved, waiting for a runner: with its runs_on labels, if
    any), retrying (waiting for the backoff before its next attempt), waiting (for
    GitHub review evidence), running, succeeded, failed, timed_out, interrupted,
    lost, rejected, vetoed, not run.

    \b
    Example:
      mergegate status --state queued --state running
      mergegate status --json
    """
    from mergegate.commands import status as command

    return command.main(
        repo=repo,
        remote=remote,
        branch=branch,
        fetch=not no_fetch,
        trust_root=trust_root,
        as_json=as_json,
        states=states,
    )


@cli.command()
@click.argument("ref", default="HEAD")
@click.option(
    "--base", default="approved", show_default=True, help="The approved branch to compare with."
)
@click.option(
    "--remote",
    default="origin",
    show_default=True,
    help="Remote to fetch the base (and REF, if remote) from.",
)
@click.option(
    "--no-fetch", "no_fetch", is_flag=True, help="Use the remote-tracking branches as they are."
)
@_repo_option
@_trust_option
@_json_option
@click.option(
    "--github",
    is_flag=True,
    help="Also write Actions annotations, a step summary and outputs (automatic when "
    "GITHUB_ACTIONS=true).",
)
def check(
    ref: str,
    base: str,
    remote: str,
    no_fetch: bool,
    repo: Path,
    trust_root: str | None,
    as_json: bool,
    github: bool,
) -> int:
    """Validate the jobs REF adds or changes and judge them by the policy in force.

    REF defaults to HEAD (the current branch); a branch that only exists on the
    remote is read from there. Exit 0 if all would be allowed, 1 if any would be
    denied, 2 if a file is invalid.

    \b
    Example (a pull request check):
      mergegate check origin/add-backup-job --json
    """
    from mergegate.commands import check as command

    return command.main(
        ref=ref,
        base=base,
        remote=remote,
        fetch=not no_fetch,
        repo=repo,
        trust_root=trust_root,
        as_json=as_json,
        github=github,
    )


@cli.command()
@click.argument("branch_name", metavar="BRANCH")
@click.option(
    "--merge",
    is_flag=True,
    help="Make the signed merge into approved instead of an approval commit.",
)
@click.option("--base", default="approved", show_default=True, help="The approved branch.")
@click.option(
    "--remote", default="origin", show_default=True, help="Remote to fetch from and push to."
)
@click.option(
    "--no-fetch", "no_fetch", is_flag=True, help="Use the remote-tracking branches as they are."
)
@_repo_option
@_trust_option
@_json_option
def approve(
    branch_name: str,
    merge: bool,
    base: str,
    remote: str,
    no_fetch: bool,
    repo: Path,
    trust_root: str | None,
    as_json: bool,
) -> int:
    """Sign an approval of BRANCH (with your git signing key) and push it.

    Shows what `check` says first and refuses invalid or denied jobs.

    \b
    Example:
      mergegate approve add-backup-job          # approval commit on the branch
      mergegate approve add-backup-job --merge  # signed merge into approved
    """
    from mergegate.commands import approve as command

    return command.main(
        branch_name=branch_name,
        merge=merge,
        base=base,
        remote=remote,
        fetch=not no_fetch,
        repo=repo,
        trust_root=trust_root,
        as_json=as_json,
    )


@cli.command()
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
@_repo_option
@_trust_option
@_json_option
def propose(
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
    from mergegate.commands import propose as command

    return command.main(
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


@cli.command()
@click.argument("path")
@click.option(
    "--blob", default=None, help="The revision to veto (default: the file as it is on approved)."
)
@_branch_options
@_json_option
def veto(
    path: str, blob: str | None, repo: Path, remote: str, branch: str, no_fetch: bool, as_json: bool
) -> int:
    """Stop an approved job that has not started: push a signed veto to approved.

    Signed with your git signing key, which must be an approver key. A veto
    that arrives after the job started has no effect.

    \b
    Example:
      mergegate veto jobs/deploy.yaml
    """
    from mergegate.commands import veto as command

    return command.main(
        path=path,
        blob=blob,
        repo=repo,
        remote=remote,
        branch=branch,
        fetch=not no_fetch,
        as_json=as_json,
    )


@cli.command()
@_branch_options
@_trust_option
@_json_option
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="One line per commit with its verdict (default: a short summary).",
)
def verify(
    repo: Path,
    remote: str,
    branch: str,
    no_fetch: bool,
    trust_root: str | None,
    as_json: bool,
    verbose: bool,
) -> int:
    """Re-judge the whole history of approved and cross-check the records on mergegate/audit.

    Exit 0 when every commit was judged, every started job was validly approved and
    the chain is intact; 1 when the walk stopped at a commit whose GitHub evidence
    is not recorded yet (incomplete); 2 for bad input or an unreachable remote;
    3 for a violation. GitHub is never asked; --no-fetch works with no network.

    \b
    Example (an auditor on a fresh clone, then offline):
      mergegate verify --trust-root 1a2b3c4 --json
      mergegate verify --no-fetch
    """
    from mergegate.commands import verify as command

    return command.main(
        repo=repo,
        remote=remote,
        branch=branch,
        fetch=not no_fetch,
        trust_root=trust_root,
        as_json=as_json,
        verbose=verbose,
    )


@cli.group(cls=_Group)
def audit() -> None:
    """Inspect the audit log (the branch mergegate/audit).

    \b
    Example:
      mergegate audit log --job backup
      mergegate audit verify
    """


@audit.command("verify")
@_branch_options
@_json_option
def audit_verify(repo: Path, remote: str, branch: str, no_fetch: bool, as_json: bool) -> int:
    """Verify the hash chain and every commit of mergegate/audit (linear, append-only, signed).

    \b
    Example:
      mergegate audit verify --json
    """
    from mergegate.commands import audit_verify as command

    return command.main(
        repo=repo, remote=remote, branch=branch, fetch=not no_fetch, as_json=as_json
    )


@audit.command("log")
@_branch_options
@click.option("--job", "job", default=None, metavar="ID", help="Only records of this job.")
@click.option(
    "--since",
    default=None,
    metavar="DATE",
    help="Only records at or after DATE (YYYY-MM-DD or ISO 8601, UTC).",
)
@click.option(
    "--event",
    "events",
    multiple=True,
    type=click.Choice(["started", "finished", "rejected", "vetoed", "scanned", "policy"]),
    help="Only these events (repeatable).",
)
@_json_option
def audit_log(
    repo: Path,
    remote: str,
    branch: str,
    no_fetch: bool,
    job: str | None,
    since: str | None,
    events: tuple[str, ...],
    as_json: bool,
) -> int:
    """Print the records, oldest first, after checking the whole chain.

    \b
    Example:
      mergegate audit log --job backup --since 2026-12-01
      mergegate audit log --event finished --json
    """
    from mergegate.commands import audit_log as command

    return command.main(
        repo=repo,
        remote=remote,
        branch=branch,
        fetch=not no_fetch,
        job=job,
        since=since,
        events=events,
        as_json=as_json,
    )


@cli.command()
@_repo_option
@click.option("--approver", default=None, help="Approver name (default: git user.name).")
@click.option("--email", default=None, help="Approver email, used to spot self-approval.")
@click.option(
    "--key",
    default=None,
    help="Approver ssh public key: a file or a key line (default: git user.signingkey).",
)
@click.option(
    "--solo",
    is_flag=True,
    help="One-person setup: allow self-approval, policy changes need one approver.",
)
@click.option("--branch", default="approved", show_default=True)
@click.option(
    "--github",
    is_flag=True,
    help="Also write the GitHub Actions pull-request check and runner workflows.",
)
@click.option(
    "--action",
    default=None,
    metavar="OWNER/REPO@COMMIT",
    help="With --github: the mergegate action to use, pinned to a commit id.",
)
@click.option(
    "--fan-out",
    "fan_out",
    is_flag=True,
    help="With --github: the runner workflow fans each merge out over a matrix, one entry per job "
    "(docs/github.md).",
)
@_json_option
def init(
    repo: Path,
    approver: str | None,
    email: str | None,
    key: str | None,
    solo: bool,
    branch: str,
    github: bool,
    action: str | None,
    fan_out: bool,
    as_json: bool,
) -> int:
    """Write a deny-by-default policy and jobs/, and create the approved branch.

    No records are written: the first `mergegate run` creates the branch mergegate/audit.

    An existing policy/policy.yaml is validated and kept as it is (then
    --approver, --key, --email and --solo are ignored, with a warning). The
    commit init makes is the trust root.

    \b
    Example:
      mergegate init --approver alice --key ~/.ssh/id_ed25519.pub
      mergegate init --github --action OWNER/mergegate@COMMIT   # plus the Actions workflows
      mergegate init --github --fan-out --action OWNER/mergegate@COMMIT   # one matrix entry per job
      export MERGEGATE_TRUST_ROOT=$(mergegate init --json | jq -r .trust_root)
    """
    from mergegate.commands import init as command

    return command.main(
        repo=repo,
        approver=approver,
        email=email,
        key=key,
        solo=solo,
        branch=branch,
        github=github,
        action=action,
        fan_out=fan_out,
        as_json=as_json,
    )


@cli.command()
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--repo",
    "root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    help="Where the working tree is (default: the one holding the current directory).",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only problems.")
@_json_option
def lint(files: tuple[Path, ...], root: Path, quiet: bool, as_json: bool) -> int:
    """Validate job and policy files offline: schema, ids, paths, credential shapes.

    The same parsers the runner uses; whether the policy in force allows a
    command is `mergegate check`'s question. Exit 0 if all are valid, 2 if not.
    A pre-commit hook: id `mergegate-lint` in this repository's .pre-commit-hooks.yaml.

    \b
    Example:
      mergegate lint jobs/backup.yaml policy/policy.yaml
    """
    from mergegate.commands import lint as command

    return command.main(files=files, root=root, as_json=as_json, quiet=quiet)


@cli.command()
@click.argument("job", metavar="JOB")
@_branch_options
@_trust_option
@_json_option
def show(
    job: str,
    repo: Path,
    remote: str,
    branch: str,
    no_fetch: bool,
    trust_root: str | None,
    as_json: bool,
) -> int:
    """One screen about one job: file, revisions, votes, records, what happens next.

    Every revision approved brought, with the votes that counted and why the
    others did not (the judge's own verdict), each attempt with its status,
    duration and output tail, and what the next runner pass will do.

    \b
    Example:
      mergegate show backup
    """
    from mergegate.commands import show as command

    return command.main(
        job=job,
        repo=repo,
        remote=remote,
        branch=branch,
        fetch=not no_fetch,
        trust_root=trust_root,
        as_json=as_json,
    )


@cli.command()
@click.argument(
    "directory", metavar="[DIR]", required=False, type=click.Path(file_okay=False, path_type=Path)
)
def demo(directory: Path | None) -> int:
    """Build a throwaway gate and walk through the whole flow, printing every command.

    In DIR (default: a new temporary directory): a local bare remote, ssh keys
    for alice and bob, `init`, `propose`, `check`, `approve --merge`, `run`,
    `status`, `audit verify` and `verify`. Needs only git and ssh-keygen; your
    own git config is never read or changed (HOME points inside DIR).

    \b
    Example:
      mergegate demo /tmp/gate-demo
    """
    from mergegate.commands import demo as command

    return command.main(directory=directory)


@cli.command()
@_repo_option
@click.option(
    "--remote",
    default="origin",
    show_default=True,
    help="Remote to fetch from and push proposals to.",
)
@click.option("--base", default="approved", show_default=True, help="The approved branch.")
@click.option(
    "--no-push",
    "no_push",
    is_flag=True,
    help="Never push: proposals stay local branches for a person to push.",
)
@_trust_option
def mcp(repo: Path, remote: str, base: str, no_push: bool, trust_root: str | None) -> int:
    """Serve MCP over stdio so AI agents can propose jobs (never approve, veto or run).

    Tools: propose_job, check_proposal, list_jobs, job_status, show_job; every
    result is JSON. There is no tool that approves, vetoes or runs, by design:
    a job runs only after a person's signed merge. Needs the MCP SDK:
    `pip install '.[mcp]'` in the mergegate checkout you installed from.

    \b
    Example (an MCP client's server entry):
      {"command": "mergegate", "args": ["mcp", "--repo", "/path/to/gate"]}
    """
    from mergegate.commands import mcp as command

    return command.main(
        repo=repo, remote=remote, base=base, trust_root=trust_root, allow_push=not no_push
    )


@cli.command()
@click.option(
    "--base",
    default="approved",
    show_default=True,
    help="The approved branch (approved, origin/approved, ...).",
)
@click.option(
    "--remote", default="origin", show_default=True, help="Remote whose branches are proposals."
)
@click.option(
    "--no-fetch", "no_fetch", is_flag=True, help="Use the remote-tracking branches as they are."
)
@_repo_option
@_trust_option
@_json_option
def inbox(
    base: str, remote: str, no_fetch: bool, repo: Path, trust_root: str | None, as_json: bool
) -> int:
    """Proposals waiting for a decision, with check's verdict and who may approve.

    Every branch on the remote (and, with GITHUB_TOKEN, every open pull
    request against approved) that adds or changes a job or policy file,
    judged as `mergegate check` judges it, with the approvals each file still
    needs and the approvers whose vote would count.

    \b
    Example:
      mergegate inbox
    """
    from mergegate.commands import inbox as command
    from mergegate.git.refnames import branch_name

    return command.main(
        repo=repo,
        remote=remote,
        base=branch_name(base, remote),
        fetch=not no_fetch,
        trust_root=trust_root,
        as_json=as_json,
    )


def main(argv: list[str] | None = None) -> int:
    _Flags.debug = _Flags.as_json = False
    try:
        code = cli.main(args=argv, prog_name="mergegate", standalone_mode=False)
    except MergegateError as exc:
        if _Flags.debug:
            raise
        from mergegate.redaction import redact_text

        message, hint = redact_text(str(exc)), redact_text(exc.hint) if exc.hint else None
        click.echo(f"error: {message}", err=True)
        if hint:
            click.echo(f"hint: {hint}", err=True)
        _json_error(redact_text(exc.message), file=exc.file, line=exc.line, hint=hint)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.exceptions.NoArgsIsHelpError as exc:
        exc.show()  # a group named alone (`mergegate audit`): its help is the answer
        return UsageError.exit_code
    except click.ClickException as exc:
        # A bad flag or argument is an error like any other: one line, and a hint that leads on.
        ctx = getattr(exc, "ctx", None)
        hint = (
            f"{ctx.command_path if ctx is not None else 'mergegate'} --help shows how to call "
            "it, with an example"
        )
        click.echo(f"error: {exc.format_message()}", err=True)
        click.echo(f"hint: {hint}", err=True)
        _json_error(exc.format_message(), hint=hint)
        return UsageError.exit_code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one line for the person; the traceback is for --debug
        if _Flags.debug:
            raise
        hint = "run again with --debug for a traceback, and report it"
        click.echo(f"error: unexpected {type(exc).__name__}: {exc}", err=True)
        click.echo(f"hint: {hint}", err=True)
        _json_error(f"unexpected {type(exc).__name__}: {exc}", hint=hint)
        return 1
    return int(code) if isinstance(code, int) else 0


def _json_error(
    message: str, *, file: str | None = None, line: int | None = None, hint: str | None = None
) -> None:
    """With --json, the error is also one JSON object on stdout, so a script never parses stderr."""
    if _Flags.as_json:
        from mergegate.commands import output

        output.emit({"error": message, "file": file, "line": line, "hint": hint, "ok": False})


def entry() -> None:
    code = main()
    # The process ends now. Left to itself, Python's exit would walk every object still tracked once
    # more
    # (20 to 35 ms of CPU after `audit verify`, every command alike) to free cycles that die with
    # the
    # process anyway; frozen, they are not walked (issue 12).
    gc.freeze()
    sys.exit(code)
