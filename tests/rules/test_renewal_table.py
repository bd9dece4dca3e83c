"""Renewing an expired approval (issue 24, section 2), decided on values: which approval of a
revision a start rests on (rules/renewal.py) and what eligibility does with it. No git, no clock.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from mergegate.audit.records import Rejected, Started
from mergegate.rules.eligibility import (
    AttemptHistory,
    Queued,
    Refused,
    Runnable,
    Standing,
    histories,
    judge_attempts,
)
from mergegate.rules.model import Decision
from mergegate.rules.policy import Policy
from mergegate.rules.renewal import Freshest, RenewalVote, approval, renewal
from tests.rules.test_eligibility_time_table import MONDAY_10, PROD, _decision, _t
from tests.rules.test_eligibility_time_table import _policy as _time_policy

KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGhbdAHmoDKoi3Ncs5ULkaDkCpbvbPbxIUHxrYWnbuFh {}"
NOW = _t(MONDAY_10)
ORIGINAL = NOW - timedelta(hours=63)  # judged Friday evening: expired by the rule's 48h


def _policy(required: int = 1, **extra: Any) -> Policy:
    people = [{"name": p, "key": KEY.format(p)} for p in ("alice", "bob", "carol", "dave")]
    rule = {
        "name": "production",
        "paths": ["jobs/prod/*"],
        "approvals_required": required,
        "windows": ["business-hours"],
        "max_approval_age": "48h",
    }
    return _time_policy(**{"approvers": people, "approval_rules": [rule], **extra})


def _written_by_alice() -> Decision:
    """The production job, written by alice (she may not count for it), approved on Friday."""
    return replace(_decision(PROD), excluded=(("alice", "author of e1e1e1e"),))


def _vote(person: str, hours_ago: float, commit: str | None = None) -> RenewalVote:
    return RenewalVote(person, commit or person[0] * 40, NOW - timedelta(hours=hours_ago))


@pytest.mark.parametrize(
    ("required", "votes", "by", "hours_ago"),
    [
        (1, [], None, None),
        (1, [("bob", 1)], ("bob",), 1),
        # A writer of the revision never counts for it, renewing or not.
        (1, [("alice", 1)], None, None),
        # Two of two: the renewal is as old as its older vote.
        (2, [("bob", 1), ("carol", 30)], ("bob", "carol"), 30),
        (2, [("bob", 1)], None, None),
        (2, [("bob", 1), ("alice", 2)], None, None),
        # The freshest quorum: of three votes, the two youngest.
        (2, [("bob", 1), ("carol", 30), ("dave", 5)], ("bob", "dave"), 5),
        # A person's latest renewal is theirs.
        (2, [("bob", 40), ("carol", 2), ("bob", 3)], ("bob", "carol"), 3),
    ],
)
def test_renewals_count_as_the_original_approval_counts(
    required: int,
    votes: list[tuple[str, float]],
    by: tuple[str, ...] | None,
    hours_ago: float | None,
) -> None:
    found = renewal(
        _written_by_alice(),
        _policy(required),
        [_vote(p, h, f"{i:02d}" * 20) for i, (p, h) in enumerate(votes)],
    )
    if by is None:
        assert found is None
        return
    assert found is not None and found.by == by
    assert found.at == NOW - timedelta(hours=hours_ago or 0)
    # It names the youngest renewal commit of the quorum: what completed it.
    youngest = min((h, i) for i, (p, h) in enumerate(votes) if p in by)[1]
    assert found.renewal == f"{youngest:02d}" * 20


def test_self_approval_lets_a_writer_renew_and_groups_are_filled_as_for_the_original() -> None:
    decision = _written_by_alice()
    assert renewal(decision, _policy(allow_self_approval=True), [_vote("alice", 1)]) is not None
    rule = {
        "name": "production",
        "paths": ["jobs/prod/*"],
        "require": [{"group": "sre", "count": 1}, {"group": "security", "count": 1}],
        "max_approval_age": "48h",
    }
    groups = _policy(groups={"sre": ["bob", "carol"], "security": ["dave"]}, approval_rules=[rule])
    assert renewal(decision, groups, [_vote("bob", 1), _vote("carol", 1)]) is None
    assert renewal(decision, groups, [_vote("bob", 1), _vote("dave", 1)]) is not None


def test_the_freshest_approval_wins_and_an_older_renewal_changes_nothing() -> None:
    decision, policy = _written_by_alice(), _policy()
    assert approval(decision, policy, approved=ORIGINAL) == Freshest(ORIGINAL)
    fresh = approval(decision, policy, approved=ORIGINAL, votes=[_vote("bob", 1)])
    assert fresh.renewal == "b" * 40 and fresh.by == ("bob",) and fresh.key == "b" * 40
    old = approval(decision, policy, approved=ORIGINAL, votes=[_vote("bob", 70)])
    assert old == Freshest(ORIGINAL) and old.key == ""
    # Undated (no runner-signed record): a renewal is the only time there is.
    assert approval(decision, policy, approved=None, votes=[_vote("bob", 1)]).renewal is not None


def _judge(
    decision: Decision, history: AttemptHistory, votes: list[RenewalVote], policy: Policy
) -> object:
    return judge_attempts(
        decision,
        policy,
        history,
        now=NOW,
        late=True,
        standing=Standing("t" * 40, decision.blob, policy),
        approved=ORIGINAL,
        renewals=votes,
    )


def test_an_expiry_is_recorded_once_per_approval_and_a_renewal_lets_the_revision_run() -> None:
    decision, policy = _written_by_alice(), _policy()
    expired = _judge(decision, AttemptHistory(), [], policy)
    assert isinstance(expired, Refused) and expired.expiry is not None
    assert (expired.expiry.age, expired.expiry.limit) == (63 * 3600, 48 * 3600)
    assert expired.expiry.approval == Freshest(ORIGINAL)
    assert "renew it: mergegate approve --renew jobs/prod/deploy.yaml" in expired.reason
    # Recorded: it waits for a renewal, and is not recorded again.
    recorded = AttemptHistory(expiries=((decision.commit, ""),))
    waiting = _judge(decision, recorded, [], policy)
    assert isinstance(waiting, Queued) and waiting.state == "expired"
    # A writer's renewal does not count; an approver's does.
    assert isinstance(_judge(decision, recorded, [_vote("alice", 1)], policy), Queued)
    renewed = _judge(decision, recorded, [_vote("bob", 1)], policy)
    assert isinstance(renewed, Runnable) and renewed.renewal is not None
    assert renewed.renewal.by == ("bob",) and renewed.windows == ("freeze", "business-hours")
    # A renewal that aged past the limit too is an expiry of its own, recorded once more.
    stale = _judge(decision, recorded, [_vote("bob", 49)], policy)
    assert isinstance(stale, Refused) and stale.expiry is not None
    assert stale.expiry.approval.renewal == "b" * 40
    assert stale.reason.startswith("approval expired: renewed (commit bbbbbbb) 49h ago")
    again = AttemptHistory(expiries=((decision.commit, ""), (decision.commit, "b" * 40)))
    assert isinstance(_judge(decision, again, [_vote("bob", 49)], policy), Queued)


def test_an_expiry_record_is_not_final_and_other_refusals_are() -> None:
    base: dict[str, Any] = {"path": PROD, "blob": "b" * 40, "commit": "c" * 40}
    expiry = Rejected(**base, seq=3, reason="approval expired", expired={"age": 9, "limit": 5})
    renewed = Rejected(**base, seq=5, reason="approval expired", expired={"limit": 5}, renewal="r")
    history = histories([expiry, renewed])[(PROD, "b" * 40)]
    assert history.closed_at("c" * 40) is None
    assert history.expired_at("c" * 40, "") and history.expired_at("c" * 40, "r")
    final = histories([expiry, Rejected(**base, seq=4, reason="denied")])[(PROD, "b" * 40)]
    assert final.closed_at("c" * 40) == ("rejected", "denied")
    # And a start is a start: a renewed revision runs at most once as every revision does.
    started = Started(**base, seq=6, run_id="r1", attempt=1)
    decision, policy = _written_by_alice(), _policy()
    ran = histories([expiry, started])[(PROD, "b" * 40)]
    assert _judge(decision, ran, [_vote("bob", 1)], policy) is None


def test_a_renewal_before_the_approval_expired_keeps_it_fresh() -> None:
    decision, policy = _written_by_alice(), _policy()
    now = datetime(2026, 12, 7, 9, 0, 5, tzinfo=UTC)
    verdict = judge_attempts(
        decision,
        policy,
        AttemptHistory(),
        now=now,
        late=True,
        standing=Standing("t" * 40, decision.blob, policy),
        approved=now - timedelta(hours=63),
        renewals=[RenewalVote("bob", "b" * 40, now - timedelta(hours=20))],
    )
    assert isinstance(verdict, Runnable) and verdict.renewal is not None
