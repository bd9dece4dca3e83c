"""Change windows: when a job may start (docs/policy.md, "Change windows").

Pure: handed the time as a value, never reading a clock. A window has a time zone, `open`
spans (the job may start only inside one of them) and `closed` spans (it may not start inside
any); a job starts only when every window that applies to it allows the time. Two kinds of span:

- weekly, in the window's zone: `Mon-Fri 09:00-17:00`, `Sat,Sun 00:00-24:00`, `12:00-13:00`
  (every day). Days are Mon..Sun, single or as ranges (`Fri-Mon` wraps); a span ends on the day
  it starts (24:00 is its end of day), so an inverted span is an error, not an overnight one;
- absolute: `2026-12-20T00:00:00Z/2027-01-04T00:00:00Z` (RFC 3339; a time without an offset
  is in the window's zone).

A span includes its start and excludes its end. Zones are IANA names read by zoneinfo, from
the `tzdata` package where the machine has no zone files, so every runner reads them alike.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

DAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_WEEKLY = re.compile(
    r"^(?:(?P<days>[A-Za-z,\- ]+?)\s+)?(?P<start>\d{1,2}:\d{2})-(?P<end>\d{1,2}:\d{2})$"
)
_DAY_SECONDS = 24 * 3600


class SpecError(ValueError):
    """A span or zone that cannot be read; the policy loader adds the file, line and field."""


@dataclass(frozen=True)
class Weekly:
    """A span repeated on some weekdays, in the window's zone: seconds since local midnight."""

    days: frozenset[int]  # 0 = Monday
    start: int
    end: int  # at most 24 h; greater than start

    def contains(self, local: datetime) -> bool:
        second = local.hour * 3600 + local.minute * 60 + local.second
        return local.weekday() in self.days and self.start <= second < self.end

    def occurrences(self, zone: ZoneInfo, since: datetime, until: datetime) -> Iterator[Span]:
        """Its spans (in UTC) on every local day from the day before `since` to `until`."""
        day = since.astimezone(zone).date() - timedelta(days=1)
        last = until.astimezone(zone).date() + timedelta(days=1)
        while day <= last:
            if day.weekday() in self.days:
                yield Span(_at(zone, day, self.start), _at(zone, day, self.end))
            day += timedelta(days=1)


@dataclass(frozen=True)
class Span:
    """An absolute span, in UTC: [start, end)."""

    start: datetime
    end: datetime

    def contains(self, when: datetime) -> bool:
        return self.start <= when < self.end


Spec = Weekly | Span


@dataclass(frozen=True)
class Window:
    name: str
    zone: str  # the IANA name as the policy writes it
    open: tuple[Spec, ...] = ()
    closed: tuple[Spec, ...] = ()

    @property
    def tz(self) -> ZoneInfo:
        return ZoneInfo(self.zone)

    def allows(self, when: datetime) -> bool:
        """Whether a job may start at `when` (an aware time) by this window."""
        if self.open and not any(_contains(s, self.tz, when) for s in self.open):
            return False
        return not any(_contains(s, self.tz, when) for s in self.closed)

    def openings(self, since: datetime, until: datetime) -> Iterator[datetime]:
        """Every time in (since, until] at which this window may turn from shut to open: an open
        span's start or a closed span's end."""
        for spec in self.open:
            for span in _spans(spec, self.tz, since, until):
                yield span.start
        for spec in self.closed:
            for span in _spans(spec, self.tz, since, until):
                yield span.end

    def horizon(self) -> datetime | None:
        """The latest end of its absolute spans (after it, only its weekly spans matter)."""
        ends = [s.end for s in (*self.open, *self.closed) if isinstance(s, Span)]
        return max(ends) if ends else None


def load_zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise SpecError(
            f"unknown time zone {name!r} (an IANA name, such as Europe/Berlin)"
        ) from None


def parse_spec(text: str, zone: ZoneInfo) -> Spec:
    """One span as the policy writes it: weekly (`Mon-Fri 09:00-17:00`) or absolute
    (`<start>/<end>`)."""
    text = text.strip()
    if "/" in text:
        return _absolute(text, zone)
    match = _WEEKLY.match(text)
    if match is None:
        raise SpecError(
            f"{text!r} is not a span: write 'Mon-Fri 09:00-17:00' (weekly) or "
            "'2026-12-20T00:00:00Z/2027-01-04T00:00:00Z' (absolute)"
        )
    days = _days(match["days"]) if match["days"] else frozenset(range(7))
    start, end = _clock(match["start"]), _clock(match["end"])
    if start >= end:
        raise SpecError(
            f"{text!r} is an inverted span: it ends ({match['end']}) before it starts "
            f"({match['start']}); split an overnight span in two ('Mon 22:00-24:00', "
            "'Tue 00:00-06:00')"
        )
    return Weekly(days, start, end)


def blocking(windows: Sequence[Window], when: datetime) -> tuple[Window, ...]:
    """The windows that do not allow a start at `when`."""
    return tuple(w for w in windows if not w.allows(when))


def next_open(windows: Sequence[Window], when: datetime) -> datetime | None:
    """The first time at or after `when` at which every window allows a start; None: never again."""
    if not blocking(windows, when):
        return when
    ends = [h for w in windows if (h := w.horizon()) is not None]
    # Past every absolute span only the weekly ones repeat: a week and a day more finds them.
    until = max([when, *ends]) + timedelta(days=8)
    candidates = sorted({t for w in windows for t in w.openings(when, until) if when < t <= until})
    for candidate in candidates:
        if not blocking(windows, candidate):
            return candidate
    return None


def waiting_reason(windows: Sequence[Window], when: datetime) -> str | None:
    """Why a job under `windows` does not start at `when` ("waiting for window ..."), or None."""
    shut = blocking(windows, when)
    if not shut:
        return None
    names = ", ".join(w.name for w in shut)
    what = f"waiting for window{'s' if len(shut) > 1 else ''} {names}"
    opens = next_open(windows, when)
    if opens is None:
        return f"{what}, which never opens again"
    return f"{what}, opens {describe_time(opens, shut[0].tz, shut[0].zone, when)}"


def describe_time(at: datetime, zone: ZoneInfo, zone_name: str, now: datetime) -> str:
    """`Mon 09:00 Europe/Berlin (in 14 h)`; a date is added beyond six days."""
    local = at.astimezone(zone)
    fmt = "%a %H:%M" if at - now < timedelta(days=6) else "%a %Y-%m-%d %H:%M"
    return f"{local.strftime(fmt)} {zone_name} (in {describe_span(at - now)})"


def describe_span(delta: timedelta) -> str:
    seconds = max(0.0, delta.total_seconds())
    if seconds < 60:
        return f"{math.ceil(seconds)} s"
    if seconds < 3600:
        return f"{math.ceil(seconds / 60)} min"
    if seconds < 48 * 3600:
        return f"{math.floor(seconds / 3600 + 0.5)} h"
    return f"{math.floor(seconds / 86400 + 0.5)} d"


def names(windows: Iterable[Window]) -> tuple[str, ...]:
    return tuple(w.name for w in windows)


def _contains(spec: Spec, zone: ZoneInfo, when: datetime) -> bool:
    if isinstance(spec, Span):
        return spec.contains(when)
    return spec.contains(when.astimezone(zone))


def _spans(spec: Spec, zone: ZoneInfo, since: datetime, until: datetime) -> Iterable[Span]:
    if isinstance(spec, Span):
        return (spec,)
    return spec.occurrences(zone, since, until)


def _at(zone: ZoneInfo, day: date, second: int) -> datetime:
    """Local `second` since midnight of `day` in `zone`, as a UTC time (24:00 is the next day)."""
    base = datetime.combine(day, time(0), tzinfo=zone) if second < _DAY_SECONDS else None
    if base is None:
        return datetime.combine(day + timedelta(days=1), time(0), tzinfo=zone).astimezone(UTC)
    local = base.replace(hour=second // 3600, minute=second % 3600 // 60)
    return local.astimezone(UTC)


def _clock(text: str) -> int:
    hours, minutes = (int(p) for p in text.split(":"))
    if minutes > 59 or hours > 24 or (hours == 24 and minutes):
        raise SpecError(f"{text!r} is not a time of day (00:00 to 24:00)")
    return hours * 3600 + minutes * 60


def _days(text: str) -> frozenset[int]:
    found: set[int] = set()
    for part in (p.strip() for p in text.split(",")):
        first, _, last = part.partition("-")
        a, b = _day(first.strip()), _day(last.strip() or first.strip())
        found.update((a + i) % 7 for i in range((b - a) % 7 + 1))
    return frozenset(found)


def _day(text: str) -> int:
    for index, day in enumerate(DAYS):
        if text.lower() == day.lower():
            return index
    raise SpecError(f"{text!r} is not a day: use {', '.join(DAYS)}")


def _absolute(text: str, zone: ZoneInfo) -> Span:
    first, _, second = text.partition("/")
    start, end = _instant(first.strip(), zone), _instant(second.strip(), zone)
    if start >= end:
        raise SpecError(f"{text!r} is an inverted span: it ends before it starts")
    return Span(start, end)


def _instant(text: str, zone: ZoneInfo) -> datetime:
    try:
        when = datetime.fromisoformat(text)
    except ValueError:
        raise SpecError(f"{text!r} is not an RFC 3339 time") from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=zone)
    return when.astimezone(UTC)
