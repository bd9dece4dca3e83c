"""`mergegate audit log`: the records, readable, filtered by job and time."""

from __future__ import annotations

from pathlib import Path

import click

from mergegate.audit.records import Finished
from mergegate.commands import output
from mergegate.commands.options import branch_options, json_option
from mergegate.git.refnames import branch_name
from mergegate.operations.audit_log import describe, open_view, parse_since, select


@click.command("log")
@branch_options
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
    type=click.Choice(
        ["started", "finished", "rejected", "vetoed", "scanned", "policy", "emergency"]
    ),
    help="Only these events (repeatable); emergency: every start on a signed emergency.",
)
@json_option
def command(
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
      mergegate audit log --event emergency
    """
    return main(
        repo=repo,
        remote=remote,
        branch=branch,
        fetch=not no_fetch,
        job=job,
        since=since,
        events=events,
        as_json=as_json,
    )


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
            {"records": [r.as_json() for r in chosen], "total": len(records), "tip": view.tip}
        )
        return 0
    for r in chosen:
        shown = str(r.status) if isinstance(r, Finished) else r.event
        output.line(
            f"{r.seq:>6} {r.time[:19]} {output.state(shown, 10)} {output.brief(describe(r))}"
        )
    if not chosen:
        output.line("no records" + (" match" if records else " yet"))
    return 0
