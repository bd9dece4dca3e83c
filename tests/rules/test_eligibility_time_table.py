"""The eligibility rules about time (issue 24): change windows and approval expiry, decided by
`judge_attempts` on values, the time handed in. No git, no clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import yaml

from mergegate.errors import ConfigError
from mergegate.rules.eligibility import (
    AttemptHistory,
    Queued,
    Refused,
    Runnable,
    Standing,
    describe_duration,
    expired,
    judge_attempts,
)
from mergegate.rules.job import parse_job
from mergegate.rules.model import Decision
from mergegate.rules.policy import Policy, load_policy

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGhbdAHmoDKoi3Ncs5ULkaDkCpbvbPbxIUHxrYWnbuFh runner"
PROD, OTHER = "jobs/prod/deploy.yaml", "jobs/report.yaml"


def _policy(**extra: Any) -> Policy:
    data = {
        "version": 1,
        "approvers": [{"name": "bob", "key": KEY.replace("runner", "bob")}],
        "commands": [{"program": "echo"}],
        "runners": [{"name": "ci", "key": KEY}],
        "windows": {
            "business-hours": {"timezone": "Europe/Berlin", "open": ["Mon-Fri 09:00-17:00"]},
            "freeze": {"closed": ["2026-12-20T00:00:00Z/2027-01-04T00:00:00Z"]},
        },
        "run_windows": ["freeze"],
        "approval_rules": [
            {
                "name": "production",
                "paths": ["jobs/prod/*"],
                "approvals_required": 1,
                "windows": ["business-hours"],
                "max_approval_age": "48h",
            }
        ],
        **extra,
    }
    text = yaml.safe_dump(data).encode()
    return load_policy(lambda p: text if p == "policy/policy.yaml" else None, commit="c" * 40)


def _decision(path: str) -> Decision:
    stem = path.rsplit("/", 1)[1].removesuffix(".yaml")
    job = parse_job(f"id: {stem}\ncommand: [echo, hi]\n".encode(), path=path, blob="b" * 40)
    return Decision(path, "b" * 40, "c" * 40, job, True, "ok")


def _t(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


MONDAY_10 = "2026-12-07T10:00:00+01:00"


@pytest.mark.parametrize(
    ("path", "now", "approved", "late", "expect", "words"),
    [
        (PROD, MONDAY_10, None, False, Runnable, ""),
        (PROD, "2026-12-06T20:00:00+01:00", None, False, Queued, "waiting for window business"),
        (OTHER, "2026-12-06T20:00:00+01:00", None, False, Runnable, ""),
        (OTHER, "2026-12-21T12:00:00Z", None, False, Queued, "waiting for window freeze"),
        # 48 h exactly is still in time; a second more is not.
        (PROD, MONDAY_10, "2026-12-05T10:00:00+01:00", True, Runnable, ""),
        (PROD, MONDAY_10, "2026-12-05T09:59:59+01:00", True, Refused, "approval expired"),
        # Expiry comes first: a job that would also wait for its window is refused.
        (PROD, "2026-12-07T08:00:00+01:00", "2026-12-04T18:00:00+01:00", True, Refused, "62h"),
        # A late start with no runner-signed date fails closed; a first pass is judged now.
        (PROD, MONDAY_10, None, True, Refused, "no runner-signed record"),
        (OTHER, MONDAY_10, "2020-01-01T00:00:00Z", True, Runnable, ""),  # no limit applies
    ],
)
def test_windows_and_expiry_decide_whether_a_start_happens_now(
    path: str, now: str, approved: str | None, late: bool, expect: type, words: str
) -> None:
    policy = _policy()
    decision = _decision(path)
    verdict = judge_attempts(
        decision,
        policy,
        AttemptHistory(),
        now=_t(now),
        late=late,
        standing=Standing("t" * 40, decision.blob, policy),
        approved=_t(approved) if approved else None,
    )
    assert type(verdict) is expect, verdict
    if isinstance(verdict, Queued | Refused):
        assert words in verdict.reason
    if isinstance(verdict, Queued):
        assert verdict.state == "window" and verdict.due is not None and verdict.due > _t(now)
    if isinstance(verdict, Runnable):
        assert verdict.windows == (("freeze", "business-hours") if path == PROD else ("freeze",))


def test_the_windows_and_the_limit_are_those_of_the_policy_in_force_now() -> None:
    before, now = _policy(), _policy(run_windows=[], approval_rules=[])
    decision = _decision(PROD)
    frozen = _t("2026-12-21T12:00:00Z")
    verdict = judge_attempts(
        decision,
        before,
        AttemptHistory(),
        now=frozen,
        late=True,
        standing=Standing("t" * 40, decision.blob, now),
        approved=frozen - timedelta(days=30),
    )
    assert isinstance(verdict, Runnable) and verdict.windows == ()


def test_expiry_words_and_durations() -> None:
    policy = _policy(max_approval_age="14d", approval_rules=[])
    job = _decision(OTHER).job
    assert job is not None
    now = _t("2026-12-21T12:00:00Z")
    assert expired(policy, job, approved=now - timedelta(days=14), now=now) is None
    why = expired(policy, job, approved=now - timedelta(days=15), now=now)
    assert why is not None and why.startswith("approval expired: approved 15d ago")
    assert "max_approval_age is 14d" in why
    assert [describe_duration(s) for s in (30, 90, 3600, 5400, 259200, 1209600)] == [
        "30s",
        "90s",
        "1h",
        "90m",
        "72h",
        "14d",
    ]


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        ({"max_approval_age": "72h", "runners": []}, "field 'max_approval_age': approval expiry"),
        (
            {"runners": [], "approval_rules": [{"paths": ["x"], "max_approval_age": "1d"}]},
            "field 'approval_rules.0.max_approval_age'",
        ),
        ({"approval_rules": [{"paths": ["x"], "windows": ["lunch"]}]}, "unknown window 'lunch'"),
        ({"windows": {"w": {"timezone": "Berlin", "open": ["09:00-10:00"]}}}, "unknown time zone"),
    ],
)
def test_time_keys_that_cannot_hold_are_configuration_errors(
    extra: dict[str, Any], words: str
) -> None:
    with pytest.raises(ConfigError, match=words) as caught:
        _policy(**extra)
    assert caught.value.file == "policy/policy.yaml" and caught.value.line
