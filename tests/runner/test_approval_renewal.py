"""Renewing an expired approval through the real CLI on real gates (issue 24, section 2).

A job approved on Friday evening waits for Monday's business hours and expires over the
weekend (tests/runner/test_approval_expiry.py); `mergegate approve --renew` signs an empty
`Mergegate-Renew` commit on approved, and once renewals by the revision's quorum, dated by when
a runner first judged them, are in, the very same bytes run. The runner's clock is set with
MERGEGATE_CLOCK.
"""

from __future__ import annotations

from typing import Any

from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml
from tests.runner.test_windows import MONDAY, WINDOWS

FRIDAY = "2026-12-04T18:00:00+01:00"  # 63 h before MONDAY
MONDAY_NOON = "2026-12-07T12:00:00+01:00"
TUESDAY = "2026-12-08T10:00:00+01:00"
PROD = "jobs/prod/deploy.yaml"


def _gate(world: World, *, required: int) -> None:
    production: dict[str, Any] = {
        "name": "production",
        "paths": ["jobs/prod/*"],
        "approvals_required": required,
        "windows": ["business-hours"],
        "max_approval_age": "48h",
    }
    people = [world.alice, world.bob, world.carol]
    world.setup(
        policy_yaml(
            [p.approver_entry() for p in people],
            [ECHO_RULE],
            runners=world.signing_runner(),
            windows=WINDOWS,
            approval_rules=[production],
        )
    )


def _at(when: str) -> dict[str, str]:
    return {"MERGEGATE_CLOCK": when}


def _job(world: World, when: str) -> dict[str, Any]:
    status = world.mg("status", "--json", env=_at(when))
    assert status.code == 0, status.err
    (job,) = [j for j in status.json()["jobs"] if j["path"] == PROD]
    return dict(job)


def _expire(world: World) -> None:
    """Judged Friday evening, it waits for Monday, when its approval is 63 h old."""
    assert world.run_once(env=_at(FRIDAY)).code == 0
    assert world.run_once(env=_at(MONDAY)).code == 1
    (rejected,) = world.events("rejected")
    assert "expired" in rejected and world.events("started") == []


def _renew(world: World, who: str, when: str, *extra: str) -> Any:
    return world.mg("approve", "--renew", PROD, *extra, where=f"{who}-clone", env=_at(when))


def test_an_expired_approval_renewed_by_an_approver_runs_the_same_bytes(world: World) -> None:
    _gate(world, required=1)
    world.propose("deploy", {PROD: job_yaml("deploy", ["echo", "v1"])}, who=world.alice)
    world.signed_merge("deploy", world.bob)
    _expire(world)
    job = _job(world, MONDAY)
    assert job["state"] == "expired"
    assert f"renew it: mergegate approve --renew {PROD}" in job["reason"]
    # bob signed the merge, he wrote none of it: his renewal counts.
    world.signing_clone("bob-clone", world.bob)
    renewed = _renew(world, "bob", MONDAY_NOON, "--json")
    assert renewed.code == 0, renewed.err
    said = renewed.json()
    assert said["kind"] == "renewal" and said["state"] == "expired"
    assert said["renewed_by"] == ["bob"] and said["pushed_to"] == "origin/approved"
    blob = world.blob("approved", PROD)
    message = world.git("admin", "log", "-1", "--format=%B", "origin/approved")
    assert f"Mergegate-Renew: {PROD} {blob}" in message
    ran = world.run_once(env=_at(MONDAY_NOON))
    assert ran.code == 0, ran.err
    (started,) = world.events("started")
    assert started["blob"] == blob and started["command"] == ["echo", "v1"]
    assert started["renewal"] == said["commit"] and started["renewed_by"] == ["bob"]
    assert len(world.events("rejected")) == 1  # the expiry, recorded once
    assert world.mg("verify", env=_at(MONDAY_NOON)).code == 0
    # It ran: a revision runs at most once, so there is nothing left to renew.
    again = _renew(world, "bob", MONDAY_NOON)
    assert again.code == 1 and "nothing to renew" in again.err


def test_a_renewal_needs_the_quorum_by_people_who_did_not_write_the_job(world: World) -> None:
    _gate(world, required=2)
    world.propose("deploy", {PROD: job_yaml("deploy", ["echo", "v1"])}, who=world.alice)
    world.approval_commit(
        "deploy",
        [(PROD, world.blob("deploy", PROD))],
        who=world.carol,
        sign=world.carol.key,
    )
    world.signed_merge("deploy", world.bob)
    _expire(world)
    # alice wrote it: her renewal would not count, and approve says so before signing anything.
    world.signing_clone("alice-clone", world.alice)
    refused = _renew(world, "alice", MONDAY)
    assert refused.code == 1 and "would not count: you (alice) are the author of" in refused.err
    # One of two: not renewed yet; the runner records nothing more (its expiry is recorded once).
    world.signing_clone("carol-clone", world.carol)
    first = _renew(world, "carol", MONDAY)
    assert first.code == 0, first.err
    assert "not renewed yet" in first.out
    assert world.run_once(env=_at(MONDAY)).code == 0
    assert world.events("started") == [] and len(world.events("rejected")) == 1
    assert _job(world, MONDAY)["state"] == "expired"
    # The second renewal meets the quorum: the job runs.
    world.signing_clone("bob-clone", world.bob)
    second = _renew(world, "bob", MONDAY_NOON)
    assert second.code == 0, second.err
    assert "renewed: quorum met" in second.out
    assert world.run_once(env=_at(MONDAY_NOON)).code == 0
    (started,) = world.events("started")
    assert started["renewed_by"] == ["bob", "carol"]
    assert world.mg("verify", env=_at(MONDAY_NOON)).code == 0


def test_a_renewal_that_waits_too_long_expires_too_and_is_recorded_once_more(
    world: World,
) -> None:
    _gate(world, required=1)
    world.propose("deploy", {PROD: job_yaml("deploy", ["echo", "v1"])}, who=world.alice)
    world.signed_merge("deploy", world.bob)
    _expire(world)
    world.signing_clone("bob-clone", world.bob)
    # Renewed on Friday night (a runner judges the renewal then): it waits for Monday again.
    assert _renew(world, "bob", "2026-12-11T20:00:00+01:00").code == 0
    assert world.run_once(env=_at("2026-12-11T20:00:00+01:00")).code == 0
    assert _job(world, "2026-12-11T20:00:00+01:00")["state"] == "waiting"
    assert world.run_once(env=_at("2026-12-14T09:30:00+01:00")).code == 1
    first, second = world.events("rejected")
    assert "renewal" not in first and second["renewal"] == world.git(
        "admin", "rev-parse", "origin/approved"
    )
    assert second["reason"].startswith("approval expired: renewed (commit ")
    assert world.events("started") == []
    assert world.run_once(env=_at("2026-12-14T09:30:00+01:00")).code == 0
    assert len(world.events("rejected")) == 2
