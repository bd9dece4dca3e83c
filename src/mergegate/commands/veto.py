"""`mergegate veto PATH`: push a signed veto of an approved job that has not started."""

from __future__ import annotations

from pathlib import Path

import click

from mergegate.commands import output
from mergegate.commands.options import branch_options, json_option
from mergegate.git.refnames import branch_name
from mergegate.operations.veto import veto as run_veto
from mergegate.runner.claims import holder


@click.command("veto")
@click.argument("path")
@click.option(
    "--blob", default=None, help="The revision to veto (default: the file as it is on approved)."
)
@branch_options
@json_option
def command(
    path: str, blob: str | None, repo: Path, remote: str, branch: str, no_fetch: bool, as_json: bool
) -> int:
    """Stop an approved job that has not started: push a signed veto to approved.

    Signed with your git signing key, which must be an approver key. A veto
    that arrives after the job started has no effect.

    \b
    Example:
      mergegate veto jobs/deploy.yaml
    """
    return main(
        path=path,
        blob=blob,
        repo=repo,
        remote=remote,
        branch=branch,
        fetch=not no_fetch,
        as_json=as_json,
    )


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
