"""`mergegate veto PATH`: push a signed veto of an approved job that has not started."""

from __future__ import annotations

from pathlib import Path

from mergegate.commands import output
from mergegate.git.refnames import branch_name
from mergegate.operations.proposals import veto as run_veto
from mergegate.runner.claims import holder


def main(
    *, path: str, blob: str | None, repo: Path, remote: str, branch: str, fetch: bool, as_json: bool
) -> int:
    branch = branch_name(branch, remote)  # every spelling of the approved branch
    result = run_veto(
        repo_path=repo, path=path, blob=blob, remote=remote, branch=branch, fetch=fetch
    )
    if result.started:
        first = result.started[0]
        output.warn(
            [
                f"{result.path} at {result.blob[:7]} already started (seq {first.seq}, runner "
                f"{holder(first)}): "
                "a veto stops only what has not started; this one stops any later attempt (a retry)"
            ]
        )
    if as_json:
        output.emit(
            {
                "commit": result.commit,
                "path": result.path,
                "blob": result.blob,
                "pushed_to": result.pushed_to,
                "already_started": [r.seq for r in result.started],
            }
        )
        return 0
    output.line(
        f"signed veto {result.commit[:12]} of {result.path} at {result.blob[:7]} pushed to "
        f"{result.pushed_to}"
    )
    return 0
