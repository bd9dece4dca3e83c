"""Approving reviews given on GitHub after the merge, through the real runner and verify (issue 24):
a new approving review on the merged head renews an expired approval, and meets an emergency
run's owed review; the review is dated by when a runner first stored it, and verify re-judges it
offline from the stored answer. The runner's clock is set with MERGEGATE_CLOCK.
"""

from __future__ import annotations

import json
from typing import Any

from tests.helpers.github_world import ALICE, BOB, CAROL, GithubGate
from tests.helpers.repos import job_yaml
from tests.runner.test_windows import MONDAY, WINDOWS

FRIDAY = "2026-12-04T18:00:00+01:00"  # after hours: the job waits, and expires by MONDAY
MONDAY_NOON = "2026-12-07T12:00:00+01:00"


def _at(when: str) -> dict[str, str]:
    return {"MERGEGATE_CLOCK": when}


def _run(gate: GithubGate, when: str) -> dict[str, Any]:
    result = gate.run_once(env=_at(when))
    assert result.code in (0, 1), result.err
    return result.json()  # type: ignore[no-any-return]


def test_an_expired_review_approval_is_renewed_by_a_new_review_on_the_merged_head(
    gate: GithubGate,
) -> None:
    gate.setup(windows=WINDOWS, run_windows=["business-hours"], max_approval_age="48h")
    # carol opened the pull request (and wrote its commit): her own review never counts.
    pr = gate.open_pr("backup", author=CAROL)
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    gate.merge(pr)
    assert _run(gate, FRIDAY)["jobs"] == []  # judged on Friday evening, waits for Monday
    # Not expired yet: GitHub is asked about the merge once, and not again after it.
    assert _run(gate, FRIDAY)["jobs"] == []
    assert len([p for p in gate.fake.paths() if p.endswith("/reviews?per_page=100")]) == 1
    out = _run(gate, MONDAY)
    [job] = out["jobs"]
    assert job["status"] == "rejected" and "expired" in job["reason"]
    # Nothing new on GitHub: asked again, nothing stored, nothing runs.
    asked = len([p for p in gate.fake.paths() if p.endswith("/reviews?per_page=100")])
    assert _run(gate, MONDAY)["jobs"] == [] and gate.world.events("started") == []
    assert len([p for p in gate.fake.paths() if p.endswith("/reviews?per_page=100")]) > asked
    # The author's approval, and one on another head, renew nothing.
    gate.fake.review(pr.number, CAROL, "APPROVED", pr.head_sha)
    gate.fake.review(pr.number, BOB, "APPROVED", "0" * 40)
    assert _run(gate, MONDAY)["jobs"] == [] and gate.world.events("started") == []
    assert not [r for r in gate.world.events("scanned") if r.get("later_reviews")]
    # bob approves the merged head again: the same bytes run, on his review.
    review = gate.fake.review(pr.number, BOB, "APPROVED", pr.head_sha)
    # GitHub fails: not yet (still expired, nothing stored), and the next pass asks again.
    gate.fake.fail("/reviews", "status", status=500, times=1)
    assert _run(gate, MONDAY_NOON)["jobs"] == [] and gate.world.events("started") == []
    out = _run(gate, MONDAY_NOON)
    assert [(j["job"], j["status"]) for j in out["jobs"]] == [("backup", "succeeded")]
    [started] = gate.world.events("started")
    assert started["renewal"] == f"review {review.id} on PR #{pr.number}"
    assert started["renewed_by"] == ["bob"]
    [scanned] = [r for r in gate.world.events("scanned") if r.get("later_reviews")]
    [digest] = scanned["later_reviews"].values()
    text = gate.world.git("admin", "show", f"origin/mergegate/audit:audit/evidence/{digest}.json")
    assert json.loads(text)["pull"] == pr.number and "ghs_test_token" not in text
    verify = gate.world.mg("verify", "--json", env=_at(MONDAY_NOON))
    assert verify.code == 0, verify.out + verify.err


REASON = "database is full, pager INC-4711"
FIX = "jobs/fix.yaml"
FREEZE = "2026-12-21T12:00:00Z"  # inside year-end-freeze
SOONER = "2026-12-22T12:00:00Z"
LATER = "2026-12-24T13:00:00Z"  # past review_within


def _owed(gate: GithubGate, when: str) -> dict[str, Any]:
    status = gate.world.mg("status", "--json", env=_at(when))
    assert status.code == 0, status.err
    [owed] = status.json()["owed_reviews"]
    return dict(owed)


def test_an_emergency_run_through_a_pull_request_is_reviewed_by_reviews_on_github(
    gate: GithubGate,
) -> None:
    w = gate.world
    gate.setup(
        required=2,
        windows=WINDOWS,
        run_windows=["year-end-freeze"],
        emergency={"approvers": ["bob"], "review_within": "72h"},
    )
    pr = gate.open_pr("fix", {FIX: job_yaml("fix", ["echo", "fixed"])})
    # bob breaks the glass with a signed approval commit on the pull request's branch.
    blob = w.blob("fix", FIX)
    w.clone("breaker")
    w.fetch("breaker")
    w.git("breaker", "checkout", "-q", "-B", "fix", "origin/fix")
    w.git(
        "breaker", "commit", "-q", "-S", "--allow-empty", "-m", "break glass",
        "-m", f"Mergegate-Approve: {FIX} {blob}\nMergegate-Emergency: {REASON}",
        who=w.bob, sign=w.bob.key,
    )  # fmt: skip
    head = w.git("breaker", "rev-parse", "HEAD")
    w.git("breaker", "push", "-q", "origin", "fix", f"{head}:refs/pull/{pr.number}/head")
    pr.commits.append(gate._commit(head, BOB))
    pr.head_sha = head
    gate.merge(pr)
    assert [j["status"] for j in _run(gate, FREEZE)["jobs"]] == ["succeeded"]
    [started] = w.events("started")
    assert started["emergency"] == {"by": ["bob"], "reason": REASON}
    assert _owed(gate, SOONER)["given"] is False
    # bob's own review (the emergency's signer) never counts; alice's does, one of two.
    gate.fake.review(pr.number, BOB, "APPROVED", head)
    gate.fake.review(pr.number, ALICE, "APPROVED", head)
    assert _run(gate, SOONER)["jobs"] == []
    owed = _owed(gate, SOONER)
    assert owed["given"] is False and owed["reviewers"] == ["alice"], owed
    late = w.mg("verify", env=_at(LATER))
    assert late.code == 1 and "owed review overdue: jobs/fix.yaml" in late.err, late.out
    # carol's review completes it: stored by the runner, re-judged offline by verify.
    gate.fake.review(pr.number, CAROL, "APPROVED", head)
    _run(gate, LATER)
    status = w.mg("status", "--json", env=_at(LATER))
    assert status.json()["owed_reviews"] == []  # (status lists the reviews still owed)
    stored = [r for r in w.events("scanned") if r.get("later_reviews")]
    assert len(stored) == 2
    verified = w.mg("verify", env=_at(LATER))
    assert verified.code == 0, verified.out + verified.err


def test_a_later_reviewer_no_longer_an_approver_in_force_counts_for_nothing() -> None:
    """The review was judged by the policy of the merge; the start's policy removed alice."""
    from types import SimpleNamespace
    from typing import cast

    from mergegate.github.evidence import Evidence
    from mergegate.github.later import LaterReviews, LaterVote
    from tests.rules.test_eligibility_time_table import _policy as only_bob
    from tests.rules.test_renewal_table import NOW
    from tests.rules.test_renewal_table import _policy as four_approvers

    merge = "m" * 40
    then, now = four_approvers(), only_bob()
    stored = {merge: Evidence(merge, "acme/gate", "https://api", 7, (), "")}
    later = LaterReviews(
        cast(Any, None), None, cast(Any, SimpleNamespace(stored=stored, offline=True)), now=NOW
    )
    later._votes[(merge, then.commit)] = [
        LaterVote(person, review, 7, merge, NOW)
        for person, review in (("alice", "1"), ("bob", "2"))
    ]
    assert [v.person for v in later.votes(merge, then)] == ["alice", "bob"]
    assert [v.person for v in later.votes(merge, then, now=now)] == ["bob"]
