"""Break-glass (issue 24, section 3) in the fast tier: the policy's `emergency` key, the judge's
step 9 on hand-built facts, the review an emergency owes, and the eligibility rules it changes
(windows) and adds (a second emergency while one is overdue). No git, no clock."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta

import pytest

from mergegate.errors import ConfigError
from mergegate.rules.break_glass import overdue_by, review_state, second_refusal
from mergegate.rules.eligibility import (
    AttemptHistory,
    Queued,
    Refused,
    Runnable,
    judge_attempts,
)
from mergegate.rules.emergency import kept_reason, reason_problem
from mergegate.rules.judge import judge_commit
from mergegate.rules.model import Assessment, CommitFacts, Decision
from mergegate.rules.policy import Policy
from tests.rules.test_judge_table import (
    _key,
    _load,
    _policy_yaml,
    approval,
    bad,
    job,
    job_text,
    merge,
    other_file,
    writer,
)

RUNNERS = f"runners:\n  - name: ci\n    key: {_key('ci')!r}\n"
EMERGENCY = "emergency:\n  approvers: [alice, security]\n  review_within: 72h\n"
# Two approvals for every job: one signed merge never meets it, so an emergency must.
POLICY = _load(_policy_yaml(RUNNERS + EMERGENCY, approvals=2))
PAIR = _load(
    _policy_yaml(RUNNERS + EMERGENCY.replace("  review", "  count: 2\n  review"), approvals=2)
)
NONE = _load(_policy_yaml(RUNNERS, approvals=2))
REASON = "database is full, pager INC-4711"
HELLO = job("jobs/hello.yaml")


def _one(result: Assessment) -> Decision:
    (decision,) = result.decisions
    return decision


def _judge(facts: CommitFacts, policy: Policy = POLICY) -> Decision:
    return _one(judge_commit(facts, policy, {}))


def test_a_merge_signed_by_an_emergency_approver_with_a_reason_runs_without_its_quorum() -> None:
    d = _judge(merge(HELLO, signer="alice", emergency_trailers=(REASON,)))
    assert (d.runnable, d.refusal, d.approved) == (True, "", False)
    assert d.emergency is not None and d.emergency.by == ("alice",)
    assert d.emergency.reason == REASON and not d.emergency.reviewed
    assert d.reason.startswith(f"emergency by alice: '{REASON}'; review owed: 2 approvals")
    assert "within 72h" in d.reason and "allowed by commands[0] (echo)" in d.reason
    assert d.rule is not None and d.rule.program == "echo"
    # Without the trailer the same merge is one approval of two.
    plain = _judge(merge(HELLO, signer="alice"))
    assert (plain.runnable, plain.refusal, plain.emergency) == (False, "unapproved", None)


def test_an_approval_commit_carrying_the_trailer_is_an_emergency_of_its_signer() -> None:
    signed = replace(approval("carol", (HELLO,)), emergency=(REASON,))
    d = _judge(merge(HELLO, signer="bob", approvals=(signed,)))
    # carol is in the group `security`: her approval is the emergency, bob's merge a vote.
    assert d.runnable and d.emergency is not None and d.emergency.by == ("carol",)
    assert d.emergency.reviewed is False  # bob alone is not the quorum of 2
    stale = replace(signed, named={HELLO.path: "0" * 40})
    assert _judge(merge(HELLO, signer="bob", approvals=(stale,))).emergency is None
    forged = replace(signed, signature=bad())
    assert _judge(merge(HELLO, signer="bob", approvals=(forged,))).runnable is False


@pytest.mark.parametrize(
    ("facts", "policy", "words"),
    [
        (merge(HELLO, signer="alice", emergency_trailers=("fix",)), POLICY, "shorter than 10"),
        (merge(HELLO, signer="alice", emergency_trailers=("  short   ",)), POLICY, "shorter than"),
        (
            merge(HELLO, signer="alice", emergency_trailers=(REASON, REASON)),
            POLICY,
            "carries 2 Mergegate-Emergency trailers: give one reason",
        ),
        (
            merge(HELLO, signer="dave", emergency_trailers=(REASON,)),
            POLICY,
            "dave (merge aaaaaaa) is not in emergency.approvers",
        ),
        (
            merge(HELLO, signer="alice", emergency_trailers=(REASON,)),
            NONE,
            "defines no emergency, so Mergegate-Emergency counts for nothing",
        ),
        (
            merge(HELLO, signer="alice", emergency_trailers=(REASON,)),
            PAIR,
            "needs 2 emergency approvers of policy/policy.yaml at c0c0c0c, has 1 (alice)",
        ),
    ],
)
def test_an_emergency_that_does_not_hold_is_refused_with_why(
    facts: CommitFacts, policy: Policy, words: str
) -> None:
    d = _judge(facts, policy)
    assert (d.runnable, d.refusal, d.emergency) == (False, "unapproved", None)
    assert d.reason.startswith("not approved: ") and "; emergency refused: " in d.reason
    assert words in d.reason, d.reason


def test_count_two_needs_two_distinct_emergency_approvers() -> None:
    second = replace(approval("carol", (HELLO,)), emergency=(REASON,))
    d = _judge(
        merge(HELLO, signer="alice", emergency_trailers=(REASON,), approvals=(second,)), PAIR
    )
    assert d.runnable and d.emergency is not None and d.emergency.by == ("alice", "carol")
    again = replace(approval("alice", (HELLO,)), emergency=(REASON,))
    one = _judge(
        merge(HELLO, signer="alice", emergency_trailers=(REASON,), approvals=(again,)), PAIR
    )
    assert not one.runnable and "has 1 (alice)" in one.reason


@pytest.mark.parametrize(
    ("facts", "refusal", "words"),
    [
        # `commands` and limits are never bypassed.
        (
            merge(
                job("jobs/rm.yaml", job_text("rm", "[rm, -rf, /]")),
                signer="alice",
                emergency_trailers=(REASON,),
            ),
            "denied",
            "denied by policy: no rule",
        ),
        (
            merge(
                job("jobs/slow.yaml", b"id: slow\ncommand: [echo]\ntimeout_seconds: 9999\n"),
                signer="alice",
                emergency_trailers=(REASON,),
            ),
            "denied",
            "exceeds limits.max_timeout_seconds",
        ),
        (
            merge(job("jobs/bad.yaml", b"id: bad\n"), signer="alice", emergency_trailers=(REASON,)),
            "invalid",
            "invalid job file",
        ),
        # Other files the merge brings need their quorum: an emergency covers the job file only.
        (
            merge(
                HELLO, other_file("scripts/fix.sh"), signer="alice", emergency_trailers=(REASON,)
            ),
            "denied",
            "holds changes that no signed approval covers: scripts/fix.sh",
        ),
    ],
)
def test_an_emergency_never_bypasses_commands_limits_validity_or_taint(
    facts: CommitFacts, refusal: str, words: str
) -> None:
    result = judge_commit(facts, POLICY, {})
    d = next(d for d in result.decisions if d.path.startswith("jobs/"))
    assert (d.runnable, d.refusal) == (False, refusal), d.reason
    assert words in d.reason, d.reason


def test_a_policy_change_cannot_use_an_emergency() -> None:
    text = _policy_yaml(RUNNERS + EMERGENCY, approvals=1)
    policy_file = replace(other_file("policy/policy.yaml", text.decode()), text=text)
    facts = merge(
        HELLO,
        policy_file,
        signer="alice",
        emergency_trailers=(REASON,),
        policy_tree={"policy/policy.yaml": ("100644", text)},
    )
    result = judge_commit(facts, POLICY, {})
    assert result.kind == "unapproved" and not result.policy_adopted
    assert all(not d.runnable and d.emergency is None for d in result.decisions)


def test_a_policy_change_merged_with_its_quorum_still_refuses_the_emergency_of_its_job() -> None:
    text = _policy_yaml(RUNNERS + EMERGENCY, approvals=2)
    policy_file = replace(other_file("policy/policy.yaml", text.decode()), text=text)
    facts = merge(
        HELLO,
        policy_file,
        signer="alice",
        approvers=("bob",),
        emergency_trailers=(REASON,),
        policy_tree={"policy/policy.yaml": ("100644", text)},
    )
    result = judge_commit(facts, POLICY, {})
    assert result.policy_adopted
    d = next(d for d in result.decisions if d.path == HELLO.path)
    # Its quorum is met (alice and bob): it runs, as an approval, and the emergency is not used.
    assert d.runnable and d.emergency is None
    assert "emergency not used: a merge that changes policy/ cannot use an emergency" in d.reason


def test_with_its_quorum_met_an_emergency_is_recorded_and_its_review_given() -> None:
    d = _judge(merge(HELLO, signer="alice", approvers=("bob",), emergency_trailers=(REASON,)))
    assert d.runnable and d.approved and d.emergency is not None
    assert d.emergency.reviewed is False  # alice is the emergency: only bob reviewed
    three = _judge(
        merge(HELLO, signer="alice", approvers=("bob", "dave"), emergency_trailers=(REASON,))
    )
    assert three.emergency is not None and three.emergency.reviewed
    assert three.emergency.reviewers == ("bob", "dave")


def test_the_writer_may_break_the_glass_but_never_reviews_it() -> None:
    mine = job("jobs/mine.yaml", writers=(writer("e1" * 20, author="alice"),))
    d = _judge(merge(mine, signer="alice", emergency_trailers=(REASON,)))
    assert d.runnable and d.emergency is not None
    theirs = job("jobs/theirs.yaml", writers=(writer("e1" * 20, author="bob"),))
    e = _judge(merge(theirs, signer="alice", emergency_trailers=(REASON,))).emergency
    assert e is not None and {"alice", "bob"} <= set(e.excluded)


def test_the_reason_is_redacted_bounded_and_escaped_for_readers() -> None:
    token = "ghp_" + "a1B2c3D4e5" * 4
    secret = _judge(merge(HELLO, signer="alice", emergency_trailers=(f"leaked {token} rotate",)))
    assert secret.emergency is not None and token not in secret.emergency.reason
    assert token not in secret.reason
    long = _judge(merge(HELLO, signer="alice", emergency_trailers=("x" * 5000,)))
    assert long.emergency is not None and len(long.emergency.reason) == 200
    bidi = _judge(merge(HELLO, signer="alice", emergency_trailers=("disk \u202efull now ok",)))
    assert bidi.emergency is not None and "\u202e" not in bidi.reason
    assert "\\u202e" in bidi.reason
    assert reason_problem(()) != "" and reason_problem(("0123456789",)) == ""
    assert kept_reason("  a \t b  ") == "a b"


# -- the review it owes ------------------------------------------------------------------------

USED = datetime(2026, 12, 7, 10, 0, tzinfo=UTC)


def _emergency_decision() -> Decision:
    d = _judge(merge(HELLO, signer="alice", emergency_trailers=(REASON,)))
    assert d.emergency is not None
    return d


def test_the_review_is_owed_until_others_meet_the_quorum_and_overdue_after_review_within() -> None:
    d = _emergency_decision()
    owed = review_state(d, POLICY, [], used=USED)
    assert owed.due == USED + timedelta(hours=72) and not owed.given
    assert not owed.overdue(USED + timedelta(hours=72))
    assert owed.overdue(USED + timedelta(hours=72, seconds=1))
    assert (
        owed.describe() == f"jobs/hello.yaml, used by alice on 2026-12-07T10:00:00Z for '{REASON}'"
    )
    # The emergency's signer and the file's writer (erin) never count; two others do.
    assert not review_state(d, POLICY, ["alice", "erin", "bob"], used=USED).given
    given = review_state(d, POLICY, ["alice", "bob", "carol"], used=USED)
    assert given.given and given.reviewers == ("bob", "carol")
    assert not given.overdue(USED + timedelta(days=30))


def test_a_second_emergency_by_someone_whose_review_is_overdue_is_refused() -> None:
    d = _emergency_decision()
    late = USED + timedelta(hours=73)
    overdue = overdue_by([review_state(d, POLICY, [], used=USED)], late)
    assert set(overdue) == {"alice"}
    other = _judge(merge(job("jobs/next.yaml"), signer="alice", emergency_trailers=(REASON,)))
    why = second_refusal(other, overdue)
    assert why is not None and why.startswith("emergency refused: alice owes an overdue review")
    assert "jobs/hello.yaml, used by alice on 2026-12-07T10:00:00Z" in why
    carols = _judge(
        merge(
            job("jobs/next.yaml"),
            signer="bob",
            approvals=(replace(approval("carol", (job("jobs/next.yaml"),)), emergency=(REASON,)),),
        )
    )
    assert second_refusal(carols, overdue) is None
    assert overdue_by([review_state(d, POLICY, ["bob", "carol"], used=USED)], late) == {}


# -- eligibility: windows, and the refusal --------------------------------------------------

WINDOWED = _load(
    _policy_yaml(
        RUNNERS
        + EMERGENCY
        + "windows:\n  freeze:\n    closed: ['2026-12-20T00:00:00Z/2027-01-04T00:00:00Z']\n"
        + "run_windows: [freeze]\n",
        approvals=2,
    )
)


def test_an_emergency_starts_in_a_closed_window_and_a_normal_approval_waits() -> None:
    frozen = datetime(2026, 12, 24, 12, 0, tzinfo=UTC)
    d = _judge(merge(HELLO, signer="alice", emergency_trailers=(REASON,)), WINDOWED)
    verdict = judge_attempts(d, WINDOWED, AttemptHistory(), now=frozen)
    assert isinstance(verdict, Runnable) and verdict.windows == ()
    normal = _judge(merge(HELLO, signer="alice", approvers=("bob",)), WINDOWED)
    assert isinstance(judge_attempts(normal, WINDOWED, AttemptHistory(), now=frozen), Queued)
    overdue = overdue_by([review_state(_emergency_decision(), POLICY, [], used=USED)], frozen)
    refused = judge_attempts(
        replace(d, path="jobs/other.yaml"), WINDOWED, AttemptHistory(), now=frozen, overdue=overdue
    )
    assert isinstance(refused, Refused) and "owes an overdue review" in refused.reason


# -- the policy key --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (
            "emergency:\n  approvers: [zed]\n  review_within: 72h\n",
            "field 'emergency.approvers': 'zed' is neither an approver nor a group",
        ),
        (
            "emergency:\n  approvers: [alice]\n  count: 2\n  review_within: 72h\n",
            "field 'emergency.count': 2 emergency approvers can never be met",
        ),
        ("emergency:\n  approvers: [alice]\n", "field 'emergency': 'review_within' is required"),
        (
            "emergency:\n  approvers: [alice]\n  review_within: 3 days\n",
            "field 'emergency.review_within'",
        ),
        (
            "emergency:\n  approvers: [alice]\n  review_within: 72h\n  reviewers: [bob]\n",
            "unknown key 'reviewers'",
        ),
    ],
)
def test_a_bad_emergency_key_names_file_line_and_field(extra: str, words: str) -> None:
    text = _policy_yaml(RUNNERS + extra)
    with pytest.raises(ConfigError) as raised:
        _load(text)
    assert words in str(raised.value), str(raised.value)
    assert raised.value.file == "policy/policy.yaml"
    line = text.decode().splitlines().index("emergency:") + 1
    assert raised.value.line is not None and raised.value.line >= line


def test_an_emergency_without_runners_is_refused_as_expiry_is() -> None:
    with pytest.raises(ConfigError) as raised:
        _load(_policy_yaml(EMERGENCY))
    assert "field 'emergency'" in str(raised.value) and "lists no" in str(raised.value)
    assert POLICY.emergency is not None and POLICY.emergency.approvers == ("alice", "carol")
