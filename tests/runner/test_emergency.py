"""Break-glass through the real CLI on real gates (issue 24, section 3).

A signed merge carrying `Mergegate-Emergency: <reason>` runs a job at once, in a year-end
freeze, without its quorum; the run owes a review that `status`, `inbox` and `verify` show; past
`review_within` verify fails and a second emergency by the same person is refused until the
review lands. The runner's clock (and verify's) is set with MERGEGATE_CLOCK: no sleeping.
"""

from __future__ import annotations

from typing import Any

from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml
from tests.runner.test_windows import FREEZE, WINDOWS

REASON = "database is full, pager INC-4711"
FIX = "jobs/fix.yaml"
LATER = "2026-12-24T13:00:00Z"  # 73 h after FREEZE: past review_within
SOONER = "2026-12-22T12:00:00Z"  # 24 h after


def _gate(world: World) -> str:
    approvers = [p.approver_entry() for p in (world.alice, world.bob, world.carol)]
    return world.setup(
        policy_yaml(
            approvers,
            [ECHO_RULE],
            runners=world.signing_runner(),
            approvals_required=2,
            windows=WINDOWS,
            run_windows=["year-end-freeze"],
            emergency={"approvers": ["bob"], "review_within": "72h"},
        )
    )


def _at(when: str) -> dict[str, str]:
    return {"MERGEGATE_CLOCK": when}


def _emergency_merge(world: World, branch: str, files: dict[str, str], reason: str) -> str:
    """mallory (no approver) proposes; bob merges with a signed merge carrying the trailer."""
    world.propose(branch, files, who=world.mallory)
    where = "approver"
    world.fetch(where)
    world.git(where, "checkout", "-q", "-B", "approved", "origin/approved")
    world.git(
        where,
        "merge",
        "-q",
        "-S",
        "--no-ff",
        "-m",
        f"Emergency: {branch}",
        "-m",
        f"Mergegate-Emergency: {reason}",
        f"origin/{branch}",
        who=world.bob,
        sign=world.bob.key,
    )
    world.git(where, "push", "-q", "origin", "approved")
    return world.head(where)


def _review(world: World, who: Any, path: str, blob: str) -> None:
    """An empty signed approval commit naming the revision, pushed to approved."""
    clone = world.checkout_approved("reviewer")
    world.git(
        clone,
        "commit",
        "-q",
        "-S",
        "--allow-empty",
        "-m",
        f"Review {path}",
        "-m",
        f"Mergegate-Approve: {path} {blob}",
        who=who,
        sign=who.key,
    )
    world.git(clone, "push", "-q", "origin", "approved")


def test_an_emergency_runs_at_once_owes_a_review_and_verify_fails_past_its_deadline(
    world: World,
) -> None:
    _gate(world)
    _emergency_merge(world, "fix", {FIX: job_yaml("fix", ["echo", "fixed"])}, REASON)
    # A normal approval of another job, merged at the same time, waits for the freeze to end.
    world.propose("plain", {"jobs/plain.yaml": job_yaml("plain", ["echo", "p"])}, who=world.alice)
    world.approval_commit("plain", [("jobs/plain.yaml", world.blob("plain", "jobs/plain.yaml"))],
                          who=world.carol, sign=world.carol.key)  # fmt: skip
    world.signed_merge("plain", world.bob)
    ran = world.run_once(env=_at(FREEZE))
    assert ran.code == 0, ran.err
    (started,) = world.events("started")
    assert started["path"] == FIX and started["emergency"] == {"by": ["bob"], "reason": REASON}
    assert "windows" not in started
    blob = started["blob"]
    # Owed: status, inbox and verify say so, with the deadline.
    status = world.mg("status", "--json", env=_at(SOONER))
    (owed,) = status.json()["owed_reviews"]
    assert (owed["path"], owed["by"], owed["due"]) == (FIX, ["bob"], "2026-12-24T12:00:00Z")
    assert owed["overdue"] is False and owed["given"] is False
    shown = world.mg("status", env=_at(LATER))
    assert f"overdue    review of {FIX}, used by bob on 2026-12-21T12:00:00Z" in shown.out
    inbox = world.mg("inbox", "--json", env=_at(SOONER))
    assert inbox.code == 0, inbox.err
    assert [o["path"] for o in inbox.json()["owed_reviews"]] == [FIX]
    early = world.mg("verify", env=_at(SOONER))
    assert early.code == 0, early.err
    assert f"owed review: {FIX}, used by bob on 2026-12-21T12:00:00Z for '{REASON}'" in early.out
    late = world.mg("verify", env=_at(LATER))
    assert late.code == 1, late.out + late.err
    assert (
        f"owed review overdue: {FIX}, used by bob on 2026-12-21T12:00:00Z for '{REASON}'"
        in late.err
    )
    # A second emergency by bob while his review is overdue is refused.
    _emergency_merge(world, "again", {"jobs/again.yaml": job_yaml("again", ["echo", "a"])}, REASON)
    refused = world.run_once(env=_at(LATER))
    assert refused.code == 1, refused.err
    (rejected,) = world.events("rejected")
    assert rejected["path"] == "jobs/again.yaml"
    assert rejected["reason"].startswith("emergency refused: bob owes an overdue review")
    # The review: two approvers who are neither bob nor a writer (mallory wrote it).
    _review(world, world.alice, FIX, blob)
    assert world.mg("verify", env=_at(LATER)).code == 1  # one of two: still owed
    _review(world, world.carol, FIX, blob)
    verified = world.mg("verify", "--json", env=_at(LATER))
    assert verified.code == 0, verified.out + verified.err
    (given,) = verified.json()["owed_reviews"]
    assert given["given"] and given["reviewers"] == ["alice", "carol"]
    assert world.mg("status", "--json", env=_at(LATER)).json()["owed_reviews"] == []
    log = world.mg("audit", "log", "--event", "emergency")
    assert log.code == 0, log.err
    assert f"emergency by bob: '{REASON}'" in log.out and len(log.out.splitlines()) == 1


def test_an_emergency_without_a_reason_is_refused_and_says_why(world: World) -> None:
    _gate(world)
    _emergency_merge(world, "fix", {FIX: job_yaml("fix", ["echo", "fixed"])}, "fix")
    ran = world.run_once(env=_at(FREEZE))
    assert ran.code == 1, ran.err
    assert world.events("started") == []
    (rejected,) = world.events("rejected")
    assert "emergency refused: merge" in rejected["reason"]
    assert "shorter than 10 characters" in rejected["reason"]
    assert world.mg("verify", env=_at(FREEZE)).code == 0


def test_approve_emergency_signs_the_break_glass_merge_and_refuses_what_the_judge_would(
    world: World,
) -> None:
    """`approve --merge --emergency REASON`: bob (an emergency approver) merges mallory's fix
    without its quorum, in the freeze, and it runs at once owing its review; a short reason, no
    --merge, or carol (no emergency approver) are refused before anything is signed or pushed."""
    _gate(world)
    world.propose("fix", {FIX: job_yaml("fix", ["echo", "fixed"])}, who=world.mallory)
    for who in (world.bob, world.carol):
        world.signing_clone(f"{who.name}-clone", who)
        world.fetch(f"{who.name}-clone")
    approved = world.git("admin", "ls-remote", "origin", "refs/heads/approved")
    short = world.mg("approve", "origin/fix", "--merge", "--emergency", "fix", where="bob-clone")
    assert short.code == 2 and "shorter than 10 characters" in short.err, short.err
    bare = world.mg("approve", "origin/fix", "--emergency", REASON, where="bob-clone")
    assert bare.code == 2 and "add --merge" in bare.err, bare.err
    carol = world.mg("approve", "origin/fix", "--merge", "--emergency", REASON, where="carol-clone")
    assert carol.code == 1 and "not in emergency.approvers" in carol.err, carol.err
    assert world.git("admin", "ls-remote", "origin", "refs/heads/approved") == approved
    merged = world.mg(
        "approve",
        "origin/fix",
        "--merge",
        "--emergency",
        REASON,
        where="bob-clone",
        env=_at(FREEZE),
    )
    assert merged.code == 0, merged.err
    # It says what the runner will do: run at once, in the shut window, on bob's emergency.
    assert "waiting for window" not in merged.out and "emergency" in merged.out, merged.out
    ran = world.run_once(env=_at(FREEZE))
    assert ran.code == 0, ran.err
    (started,) = world.events("started")
    assert started["path"] == FIX and started["emergency"] == {"by": ["bob"], "reason": REASON}
    status = world.mg("status", "--json", env=_at(SOONER))
    assert [o["path"] for o in status.json()["owed_reviews"]] == [FIX]
    # Past its deadline bob's next emergency would be rejected for good: approve refuses to sign.
    world.propose("again", {"jobs/again.yaml": job_yaml("again", ["echo", "a"])}, who=world.mallory)
    world.fetch("bob-clone")
    tip = world.git("admin", "ls-remote", "origin", "refs/heads/approved")
    again = world.mg(
        "approve",
        "origin/again",
        "--merge",
        "--emergency",
        REASON,
        where="bob-clone",
        env=_at(LATER),
    )
    assert again.code == 1 and "bob owes an overdue review" in again.err, again.out + again.err
    assert world.git("admin", "ls-remote", "origin", "refs/heads/approved") == tip
