"""Leases: every `started` record says who holds the claim and until when.

`lease: {"holder": <runner>, "until": <UTC time>}`, until = start + the job's
timeout + its kill grace + the runner's shutdown grace + a few seconds to push
the result. A run with no `finished` record after its lease ran out is closed
as `lost` by any runner (never run again: at most once), whatever its name.

Open runs are found with one `git grep` of the records for the `event` and
`run_id` fields (in C, a few bytes per record), then the open ones are read.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime

from mergegate import audit
from mergegate.git import Repo

_PAIR = re.compile(rb'"event":"(started|finished)"|"run_id":"([0-9a-f]{1,64})"')


def open_runs(repo: Repo, records: str | None) -> list[audit.Record]:
    """`started` records at `records` with no `finished` for their run id."""
    if records is None:
        return []
    proc = repo.run("grep", "-a", "-h", "-o", "-E", "-e", '"event":"(started|finished)"|"run_id":"[0-9a-f]+"',
                    records, "--", audit.AUDIT_DIR, check=False)
    started: set[str] = set()
    finished: set[str] = set()
    event: str | None = None
    # Keys are sorted, so in each record "event" comes before "run_id"; JSON strings
    # cannot hold an unescaped quote, so neither pattern matches inside a value.
    for line in proc.stdout.splitlines():
        match = _PAIR.fullmatch(line.strip())
        if match is None:
            continue
        if match[1] is not None:
            event = match[1].decode()
        elif event is not None:
            (started if event == "started" else finished).add(match[2].decode())
            event = None
    found = []
    for run_id in sorted(started - finished):
        found += [r for r in audit.grep(repo, records, run_id) if r.event == "started" and r.get("run_id") == run_id]
    return found


def until(record: audit.Record) -> datetime | None:
    lease = record.get("lease")
    if not isinstance(lease, dict):
        return None
    return audit.parse_time(lease.get("until"))


def expired(repo: Repo, records: str | None, now: datetime) -> list[audit.Record]:
    """Open runs whose lease ran out before `now` (records without a lease never expire)."""
    return ended(open_runs(repo, records), now)


def ended(runs: list[audit.Record], now: datetime) -> list[audit.Record]:
    """Those of open `runs` whose lease ran out before `now`."""
    return [record for record in runs if (end := until(record)) is not None and end.astimezone(UTC) < now]
