"""`mergegate propose ID -- ARGV...`: a job on a branch from approved, judged as `check` judges
it."""

from __future__ import annotations

from pathlib import Path

from mergegate.commands import output
from mergegate.operations.propose import Draft, parse_env, propose


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
