"""`mergegate audit log`: the records, readable, filtered by job and time."""

from __future__ import annotations

from pathlib import Path

from mergegate.commands import output
from mergegate.git.refnames import branch_name
from mergegate.operations.audit_log import describe, open_view, parse_since, select


def main(
    *,
    repo: Path,
    remote: str,
    branch: str,
    fetch: bool,
    job: str | None,
    since: str | None,
    events: tuple[str, ...],
    as_json: bool,
) -> int:
    branch = branch_name(branch, remote)  # every spelling of the approved branch
    after = parse_since(since) if since is not None else None
    view = open_view(repo_path=repo, remote=remote, branch=branch, fetch=fetch)
    records = view.records()
    chosen = select(records, job=job, since=after, events=events)
    if as_json:
        output.emit(
            {"records": [dict(r.fields) for r in chosen], "total": len(records), "tip": view.tip}
        )
        return 0
    for r in chosen:
        event = r.event
        shown = str(r.get("status")) if event == "finished" else event
        output.line(
            f"{r.seq:>6} {str(r['time'])[:19]} {output.state(shown, 10)} "
            f"{output.brief(describe(r))}"
        )
    if not chosen:
        output.line("no records" + (" match" if records else " yet"))
    return 0
