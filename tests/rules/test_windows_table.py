"""Change windows as values (rules/windows.py): spans, zones, openings, and the eligibility rule
that makes a job wait. No git, no clock: every time is handed in."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from mergegate.rules.windows import (
    SpecError,
    Weekly,
    Window,
    blocking,
    describe_span,
    load_zone,
    next_open,
    parse_spec,
    waiting_reason,
)

BERLIN = load_zone("Europe/Berlin")


def _window(
    name: str, zone: str = "UTC", *, open_: tuple[str, ...] = (), closed: tuple[str, ...] = ()
) -> Window:
    tz = load_zone(zone)
    return Window(
        name,
        zone,
        tuple(parse_spec(s, tz) for s in open_),
        tuple(parse_spec(s, tz) for s in closed),
    )


def _t(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


BUSINESS = _window("business-hours", "Europe/Berlin", open_=("Mon-Fri 09:00-17:00",))
FREEZE = _window("freeze", closed=("2026-12-20T00:00:00Z/2027-01-04T00:00:00Z",))
WEEKEND = _window("weekend", "Europe/Berlin", closed=("Sat,Sun 00:00-24:00",))


@pytest.mark.parametrize(
    ("window", "when", "allows"),
    [
        (BUSINESS, "2026-12-07T09:00:00+01:00", True),  # its start is inside
        (BUSINESS, "2026-12-07T08:59:59+01:00", False),
        (BUSINESS, "2026-12-07T16:59:59+01:00", True),
        (BUSINESS, "2026-12-07T17:00:00+01:00", False),  # its end is outside
        (BUSINESS, "2026-12-05T10:00:00+01:00", False),  # Saturday
        (BUSINESS, "2026-12-07T08:30:00Z", True),  # 09:30 in Berlin: zones are the window's
        (BUSINESS, "2026-07-06T07:30:00Z", True),  # summer: 09:30 CEST
        (BUSINESS, "2026-07-06T15:30:00Z", False),  # 17:30 CEST
        (FREEZE, "2026-12-19T23:59:59Z", True),
        (FREEZE, "2026-12-20T00:00:00Z", False),
        (FREEZE, "2027-01-04T00:00:00Z", True),
        (WEEKEND, "2026-12-06T23:59:59+01:00", False),  # Sunday, to 24:00
        (WEEKEND, "2026-12-07T00:00:00+01:00", True),
    ],
)
def test_a_window_allows_a_start_inside_its_open_spans_and_outside_its_closed_ones(
    window: Window, when: str, allows: bool
) -> None:
    assert window.allows(_t(when)) is allows


@pytest.mark.parametrize(
    ("windows", "when", "opens"),
    [
        ((BUSINESS,), "2026-12-06T20:00:00+01:00", "2026-12-07T09:00:00+01:00"),
        ((BUSINESS,), "2026-12-04T17:00:00+01:00", "2026-12-07T09:00:00+01:00"),  # Fri evening
        ((BUSINESS,), "2026-12-07T10:00:00+01:00", "2026-12-07T10:00:00+01:00"),  # open now
        ((FREEZE,), "2026-12-24T12:00:00Z", "2027-01-04T00:00:00Z"),
        # Both: the freeze ends on a Monday at 01:00 in Berlin, business hours open at 09:00.
        ((BUSINESS, FREEZE), "2026-12-24T12:00:00Z", "2027-01-04T09:00:00+01:00"),
        ((BUSINESS, WEEKEND), "2026-12-05T12:00:00+01:00", "2026-12-07T09:00:00+01:00"),
        # Spring forward: 09:00 CEST on the Monday after the change.
        ((BUSINESS,), "2026-03-28T12:00:00+01:00", "2026-03-30T09:00:00+02:00"),
    ],
)
def test_the_next_opening_is_the_first_time_every_window_allows(
    windows: tuple[Window, ...], when: str, opens: str
) -> None:
    assert next_open(windows, _t(when)) == _t(opens)


def test_a_window_that_never_opens_again_says_so() -> None:
    past = _window("once", open_=("2020-01-01T00:00:00Z/2020-01-02T00:00:00Z",))
    when = _t("2026-12-06T12:00:00Z")
    assert next_open((past,), when) is None
    assert waiting_reason((past,), when) == "waiting for window once, which never opens again"


def test_the_waiting_reason_names_the_shut_windows_and_when_they_open() -> None:
    when = _t("2026-12-06T20:00:00+01:00")
    assert waiting_reason((BUSINESS, FREEZE), when) == (
        "waiting for window business-hours, opens Mon 09:00 Europe/Berlin (in 13 h)"
    )
    assert waiting_reason((BUSINESS,), _t("2026-12-07T10:00:00+01:00")) is None
    frozen = _t("2026-12-21T12:00:00Z")
    assert [w.name for w in blocking((BUSINESS, FREEZE), frozen)] == ["freeze"]
    assert waiting_reason((FREEZE, WEEKEND), _t("2026-12-26T12:00:00Z")) == (
        "waiting for windows freeze, weekend, opens Mon 2027-01-04 00:00 UTC (in 9 d)"
    )


@pytest.mark.parametrize(
    ("seconds", "words"),
    [
        (0.2, "1 s"),
        (59, "59 s"),
        (61, "2 min"),
        (3600, "1 h"),
        (13 * 3600, "13 h"),
        (3 * 86400, "3 d"),
    ],
)
def test_spans_of_time_read_as_people_say_them(seconds: float, words: str) -> None:
    assert describe_span(timedelta(seconds=seconds)) == words


@pytest.mark.parametrize(
    ("spec", "words"),
    [
        ("Mon-Fri 17:00-09:00", "inverted span"),
        ("09:00-09:00", "inverted span"),
        ("Mon-Fri 09:00-25:00", "not a time of day"),
        ("Mon-Fri 09:60-10:00", "not a time of day"),
        ("Mo-Fr 09:00-17:00", "'Mo' is not a day"),
        ("whenever", "is not a span"),
        ("2027-01-04T00:00:00Z/2026-12-20T00:00:00Z", "inverted span"),
        ("2026-12-20/soon", "'soon' is not an RFC 3339 time"),
    ],
)
def test_a_span_that_cannot_be_read_says_why(spec: str, words: str) -> None:
    with pytest.raises(SpecError, match=words):
        parse_spec(spec, BERLIN)


def test_days_may_wrap_the_week_and_a_time_without_offset_is_in_the_windows_zone() -> None:
    weekend = parse_spec("Fri-Mon 00:00-24:00", BERLIN)
    assert isinstance(weekend, Weekly) and weekend.days == frozenset({4, 5, 6, 0})
    local = _window("x", "Europe/Berlin", closed=("2026-12-20T00:00:00/2026-12-21T00:00:00",))
    assert not local.allows(_t("2026-12-19T23:30:00Z"))  # 00:30 in Berlin
    with pytest.raises(SpecError, match="unknown time zone"):
        load_zone("Mars/Olympus")
