"""`mergegate approve BRANCH`: sign an approval commit (or the merge) and push it."""

from __future__ import annotations

from pathlib import Path

from mergegate.commands import output
from mergegate.git.refnames import branch_name as bare_branch
from mergegate.operations.proposals import approve as run_approve


def main(
    *,
    branch_name: str,
    merge: bool,
    base: str,
    remote: str,
    fetch: bool,
    repo: Path,
    trust_root: str | None,
    as_json: bool,
) -> int:
    base = bare_branch(
        base, remote
    )  # origin/approved, refs/remotes/origin/approved, ... all name approved
    result = run_approve(
        repo_path=repo,
        branch_name=branch_name,
        base=base,
        remote=remote,
        merge=merge,
        fetch=fetch,
        trust=trust_root,
    )
    if as_json:
        output.emit(
            {
                "commit": result.commit,
                "kind": result.kind,
                "pushed_to": result.pushed_to,
                "files": [f.as_json() for f in result.report.files],
            }
        )
        return 0
    for f in result.report.files:
        output.line(f"{output.state(f.state, 8)} {f.path}: {f.reason}")
    # Full ids: what was signed, and the proposal commit it approves, leave no room for a
    # look-alike.
    output.line(
        f"signed {result.kind} {result.commit} of {result.report.head} pushed to {result.pushed_to}"
    )
    return 0
