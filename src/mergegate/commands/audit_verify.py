"""`mergegate audit verify`: the hash chain and append-only history of the records."""

from __future__ import annotations

from pathlib import Path

import click

from mergegate.commands import output
from mergegate.commands.options import branch_options, json_option
from mergegate.git.refnames import branch_name
from mergegate.operations.audit_verify import verify_audit


@click.command("verify")
@branch_options
@json_option
def command(repo: Path, remote: str, branch: str, no_fetch: bool, as_json: bool) -> int:
    """Verify the hash chain and every commit of mergegate/audit (linear, append-only, signed).

    \b
    Example:
      mergegate audit verify --json
    """
    return main(repo=repo, remote=remote, branch=branch, fetch=not no_fetch, as_json=as_json)


def main(*, repo: Path, remote: str, branch: str, fetch: bool, as_json: bool) -> int:
    branch = branch_name(branch, remote)  # every spelling of the approved branch
    # With --json an integrity error is printed by the one error handler as {"ok": false, "error",
    # "file", "line", "hint"}.
    report = verify_audit(repo_path=repo, remote=remote, branch=branch, fetch=fetch)
    if as_json:
        output.emit(
            {"ok": True, "records": report.records, "files": report.files, "tip": report.tip}
        )
    elif not report.tip:
        output.line(
            "ok: no records yet (the first `mergegate run` creates the branch mergegate/audit)"
        )
    else:
        output.line(
            f"ok: {report.records} records in {report.files} file(s) verified at {report.tip[:12]} "
            "(mergegate/audit)"
        )
    return 0
