"""Leases: every `started` record says who holds the claim and until when.

`lease: {"holder": <runner>, "until": <UTC time>}`, until = start + the job's timeout + its kill
grace + the runner's shutdown grace + a few seconds to push the result. A run with no `finished`
record after its lease ran out is closed as `lost` by any runner (never run again: at most once),
whatever its name.

Open runs are found with one `git grep` of the records for the `event` and `run_id` fields (in C, a
few bytes per record; the closed log files' part remembered by the clone, loggrep.py), then the open
ones are read.
"""

from __future__ import annotations

import os
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mergegate.audit import grep as loggrep
from mergegate.audit import log as audit
from mergegate.audit.records import Started, parse_time
from mergegate.errors import StateError
from mergegate.git.repo import Repo

CLONE_FILE = "clone-id"  # .git/mergegate/clone-id: this clone's random id, named in its claims

_PAIR = re.compile(rb'"event":"(started|finished)"|"run_id":"([0-9a-f]{1,64})"')


def open_runs(repo: Repo, records: str | None, *, remember: bool = True) -> list[Started]:
    """`started` records at `records` with no `finished` for their run id."""
    if records is None:
        return []
    # The log files only (evidence files are not records), the closed ones' part remembered
    # (loggrep.py).
    runs = loggrep.folded(
        repo,
        records,
        "runs",
        ["-a", "--no-color", "-o", "-E", "-e", '"event":"(started|finished)"|"run_id":"[0-9a-f]+"'],
        _pairs,
        _Runs(),
        dump=_Runs.dump,
        load=_Runs.load,
        remember=remember,
    )
    found: list[Started] = []
    for run_id in sorted(runs.started - runs.finished):
        found += [
            r
            for r in audit.grep(repo, records, run_id)
            if isinstance(r, Started) and r.run_id == run_id
        ]
    return found


@dataclass
class _Runs:
    """Run ids with a `started` and with a `finished` record so far, and an event not yet paired."""

    started: set[str] = field(default_factory=set)
    finished: set[str] = field(default_factory=set)
    event: str | None = None

    def dump(self) -> dict[str, object]:
        return {
            "started": sorted(self.started),
            "finished": sorted(self.finished),
            "event": self.event,
        }

    @classmethod
    def load(cls, value: Any) -> _Runs:
        event, started, finished = value["event"], value["started"], value["finished"]
        if (
            event not in (None, "started", "finished")
            or not isinstance(started, list)
            or not isinstance(finished, list)
        ):
            raise ValueError("not a memory of runs")
        return cls({str(v) for v in started}, {str(v) for v in finished}, event)


def _pairs(runs: _Runs, lines: list[bytes]) -> _Runs:
    # Keys are sorted, so in each record "event" comes before "run_id"; JSON strings
    # cannot hold an unescaped quote, so neither pattern matches inside a value.
    for line in lines:
        match = _PAIR.fullmatch(line.strip())
        if match is None:
            continue
        if match[1] is not None:
            runs.event = match[1].decode()
        elif runs.event is not None:
            (runs.started if runs.event == "started" else runs.finished).add(match[2].decode())
            runs.event = None
    return runs


def until(record: Started) -> datetime | None:
    """When a `started` record's lease ends (None: it has none, or no time)."""
    return parse_time(record.lease.until) if record.lease is not None else None


def expired(repo: Repo, records: str | None, now: datetime) -> list[Started]:
    """Open runs whose lease ran out before `now` (records without a lease never expire)."""
    return ended(open_runs(repo, records), now)


def ended(runs: Sequence[Started], now: datetime) -> list[Started]:
    """Those of open `runs` whose lease ran out before `now`."""
    return [
        record
        for record in runs
        if (end := until(record)) is not None and end.astimezone(UTC) < now
    ]


def clone_path(git_dir: Path) -> Path:
    return git_dir / "mergegate" / CLONE_FILE


def clone_id(git_dir: Path, *, create: bool = True) -> str | None:
    """This clone's id (made once, at random, kept in `.git/mergegate/clone-id`), which its claims
    carry (`started.clone`): two clones whose runners share a name (the default `runner`) tell
    their own orphans from each other's live runs. None when there is none yet and `create` is
    false (a dry run writes nothing)."""
    path = clone_path(git_dir)
    try:
        text = path.read_text("ascii").strip()
        if re.fullmatch(r"[0-9a-f]{16,64}", text):
            return text
    except FileNotFoundError:
        pass
    except (OSError, ValueError) as exc:
        raise StateError(f"cannot read this clone's id: {exc}", file=str(path)) from None
    if not create:
        return None
    made = secrets.token_hex(8)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        temporary.write_text(made + "\n", "ascii")
        os.replace(temporary, path)
    except OSError as exc:
        raise StateError(
            f"cannot write this clone's id: {exc.strerror or exc}",
            file=str(path),
            hint="the runner names its clone in its claims; fix the permissions or free space",
        ) from None
    return made


def mine(record: Started, runner_name: str, clone: str | None) -> bool:
    """Whether a `started` record is this runner's in this clone: its name, and its clone's id
    (a claim without one, made before clones had ids, is the name's, as it always was)."""
    return record.runner == runner_name and (record.clone is None or record.clone == clone)


def shared_name(
    runs: Sequence[Started], runner_name: str, clone: str | None, now: datetime
) -> list[str]:
    """A warning for each live run (its lease not ended) that another clone's runner holds under
    this runner's name: two live runners share one name."""
    return [
        f"another runner named {runner_name!r} (clone {str(r.clone)[:12]}) holds run "
        f"{r.run_id} of {r.path} until {r.lease.until}: two live runners share "
        "this name; give each clone a distinct --runner-name (its run is left to it)"
        for r in runs
        if r.lease is not None
        and r.runner == runner_name
        and r.clone not in (None, clone)
        and (end := until(r)) is not None
        and end.astimezone(UTC) >= now
    ]
