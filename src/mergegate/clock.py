"""The clock every decision about time reads: record times, leases, backoff, change windows.

A root module (like errors.py and text.py): every wing may use it, and it imports nothing of
mergegate. The pure rules never read it; they are handed its time as a value.

`MERGEGATE_CLOCK` (an RFC 3339 time) sets where this process's clock starts; from there it
advances with the real one. Tests use it to put a runner on a Monday morning or past an
approval's lifetime without sleeping for hours. It moves nothing a runner's operator could not
move already by setting the machine's clock: records stay as trustworthy as the runner that signs
them (docs/threat-model.md, "Change windows").
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime, timedelta

ENV = "MERGEGATE_CLOCK"


_set: tuple[str, datetime, float] | None = None  # (the value, where it starts, monotonic then)


def now() -> datetime:
    """The time now, in UTC (from `MERGEGATE_CLOCK` on, when it is set)."""
    global _set
    value = os.environ.get(ENV, "").strip()
    if not value:
        return datetime.now(UTC)
    if _set is None or _set[0] != value:
        # Read where it is read first (a process reads it once; a test that runs the CLI in
        # its own process sets a new value per call, and each starts where it says).
        try:
            when = datetime.fromisoformat(value)
        except ValueError:
            raise ValueError(f"{ENV}={value!r} is not an RFC 3339 time") from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        _set = (value, when.astimezone(UTC), time.monotonic())
    _, start, mono = _set
    return start + timedelta(seconds=time.monotonic() - mono)
