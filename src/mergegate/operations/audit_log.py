"""Reading the gate's records for people: `audit log`, `show`, `inbox`.

Records are read only through audit.py (`read_all` checks the whole chain), at the commit that holds
them; `View.records_at` is the one place that knows which commit that is.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from mergegate.audit import log as audit
from mergegate.audit.records import (
    Finished,
    PolicyChange,
    Record,
    Refusal,
    Scanned,
    Started,
    parse_time,
)
from mergegate.errors import UsageError
from mergegate.facts.branches import Branch, open_branch, refuse_old_layout
from mergegate.git.repo import Repo
from mergegate.text import shown


@dataclass(frozen=True)
class View:
    """One consistent read of a gate: approved's tip and where its records are."""

    repo: Repo
    source: Branch
    tip: str
    records_tip: str | None  # the branch mergegate/audit (None before the first runner pass)

    @property
    def records_at(self) -> str | None:
        return self.records_tip

    def records(self) -> list[Record]:
        return audit.read_all(self.repo, self.records_at)


def open_view(*, repo_path: Path, remote: str, branch: str, fetch: bool) -> View:
    repo = Repo(repo_path)
    source = open_branch(repo, remote=remote, branch=branch, fetch=fetch)
    tip = source.tip()
    records_tip = source.audit_tip()
    source.check_not_rewritten(tip, records_tip)
    refuse_old_layout(repo, tip, records_tip)
    return View(repo, source, tip, records_tip)


def parse_since(text: str) -> datetime:
    """A date (2026-12-01, midnight UTC) or an ISO 8601 time; a bad one is a usage error."""
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise UsageError(
            f"--since {text!r} is not a date",
            hint="use YYYY-MM-DD or an ISO 8601 time such as 2026-12-01T09:30Z",
        ) from None
    return when if when.tzinfo is not None else when.replace(tzinfo=UTC)


def record_time(record: Record) -> datetime:
    """A record's time; one without a readable, zoned time sorts first (it is shown, never a
    crash)."""
    return parse_time(record.time) or datetime.min.replace(tzinfo=UTC)


def select(
    records: Iterable[Record],
    *,
    job: str | None = None,
    since: datetime | None = None,
    events: Sequence[str] = (),
) -> list[Record]:
    chosen = []
    for record in records:
        if job is not None and record.job != job:
            continue
        if since is not None and record_time(record) < since:
            continue
        if events and record.event not in events and not _emergency(record, events):
            continue
        chosen.append(record)
    return chosen


def _emergency(record: Record, events: Sequence[str]) -> bool:
    """`--event emergency`: every start on a signed emergency (break-glass)."""
    return "emergency" in events and isinstance(record, Started) and record.emergency is not None


def describe(record: Record) -> str:
    """One line of what a record says, without its chain fields."""
    who = record.job or record.path or ""
    if isinstance(record, Finished):
        took = record.duration_ms
        extra = f"{record.status}" + (f" in {took / 1000:.1f}s" if took is not None else "")
        if record.exit_code is not None:
            extra += f", exit {record.exit_code}"
        if record.reason:
            extra += f": {record.reason}"
    elif isinstance(record, Refusal):
        extra = record.reason or ""
    elif isinstance(record, Started):
        extra = f"run {record.run_id}" if record.run_id else ""
        if record.emergency is not None:
            used = record.emergency
            extra += f"; emergency by {', '.join(used.by)}: '{shown(used.reason)}'"
    elif isinstance(record, Scanned):
        extra = f"up to {record.commit[:12]}" if record.commit else ""
    elif isinstance(record, PolicyChange):
        extra = f"{record.status} {str(record.commit)[:12]}" + (
            f": {record.reason}" if record.reason else ""
        )
    else:
        extra = ""
    return " ".join(part for part in (who, extra) if part)
