"""Approval expiry (`max_approval_age`) through the real CLI on real gates (issue 24, section 2).

The approval's time is when a runner first judged the approving merge (a runner-signed
`scanned` record); the runner's clock is set with MERGEGATE_CLOCK. A job waits over a weekend
for its change window, so that its approval ages without anyone sleeping.
"""

from __future__ import annotations

from typing import Any

from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml
from tests.runner.test_windows import MONDAY, WINDOWS

FRIDAY = "2026-12-04T18:00:00+01:00"  # 63 h before MONDAY
PROD = "jobs/prod/deploy.yaml"


def _gate(world: World, *, top: str | None = None, rule: str | None = None) -> str:
    production: dict[str, Any] = {
        "name": "production",
        "paths": ["jobs/prod/*"],
        "approvals_required": 1,
        "windows": ["business-hours"],
    }
    if rule is not None:
        production["max_approval_age"] = rule
    extra: dict[str, Any] = {"max_approval_age": top} if top is not None else {}
    return world.setup(
        policy_yaml(
            [world.bob.approver_entry()],
            [ECHO_RULE],
            runners=world.signing_runner(),
            windows=WINDOWS,
            approval_rules=[production],
            **extra,
        )
    )


def _merge(world: World, branch: str, text: str) -> str:
    world.propose(branch, {PROD: text}, who=world.alice)
    return world.signed_merge(branch, world.bob)


def _at(when: str) -> dict[str, str]:
    return {"MERGEGATE_CLOCK": when}


def _job(world: World, when: str) -> dict[str, Any]:
    status = world.mg("status", "--json", env=_at(when))
    assert status.code == 0, status.err
    (job,) = [j for j in status.json()["jobs"] if j["path"] == PROD]
    return dict(job)


def test_an_approval_older_than_the_limit_does_not_start_is_recorded_once_and_a_new_one_runs(
    world: World,
) -> None:
    _gate(world, top="7d", rule="48h")  # the rule's limit is the job's
    _merge(world, "deploy", job_yaml("deploy", ["echo", "v1"]))
    assert world.run_once(env=_at(FRIDAY)).code == 0  # judged Friday evening: waits for Monday
    assert _job(world, FRIDAY)["state"] == "waiting"
    # Before a runner records it, status already says what the next pass will do.
    early = _job(world, MONDAY)
    assert early["state"] == "expired" and "approval expired: approved 63h" in early["reason"]
    assert early["reason"].startswith("(not yet recorded) ")
    monday = world.run_once(env=_at(MONDAY))
    assert monday.code == 1, monday.err  # as for every rejection a pass records
    assert [j["status"] for j in monday.json()["jobs"]] == ["rejected"]
    assert world.events("started") == []
    (rejected,) = world.events("rejected")
    assert rejected["path"] == PROD
    assert rejected["reason"].startswith("approval expired: approved 63h")
    assert "(first judged at 2026-12-04T17:00:" in rejected["reason"]
    assert "max_approval_age is 48h" in rejected["reason"]
    assert f"renew it: mergegate approve --renew {PROD}" in rejected["reason"]
    # An expiry is a `rejected` record that says so: not final, a renewal lets it run.
    assert rejected["expired"] == {"age": 63 * 3600 + 5, "limit": 48 * 3600}
    assert "renewal" not in rejected
    # Recorded once: the next pass says nothing more about it.
    assert world.run_once(env=_at(MONDAY)).code == 0
    assert len(world.events("rejected")) == 1
    job = _job(world, MONDAY)
    assert job["state"] == "expired" and job["reason"] == rejected["reason"]
    shown = world.mg("show", "deploy", "--json", env=_at(MONDAY))
    assert shown.json()["state"] == "expired" and "approval expired" in shown.json()["reason"]
    assert "mergegate approve --renew" in shown.json()["next"]
    # A fresh approval (of a changed file: a new revision) runs.
    _merge(world, "again", job_yaml("deploy", ["echo", "v2"]))
    assert world.run_once(env=_at(MONDAY)).code == 0
    (started,) = world.events("started")
    assert started["path"] == PROD and started["command"] == ["echo", "v2"]
    verified = world.mg("verify")
    assert verified.code == 0, verified.err


def test_an_approval_within_the_limit_starts_and_check_names_the_limit(world: World) -> None:
    _gate(world, top="72h")
    world.propose("deploy", {PROD: job_yaml("deploy", ["echo", "v1"])}, who=world.alice)
    checked = world.mg("check", "origin/deploy", "--json", env=_at(FRIDAY))
    (file,) = [f for f in checked.json()["files"] if f["path"] == PROD]
    assert "once merged it must start within 72h" in file["reason"]
    world.signed_merge("deploy", world.bob)
    assert world.run_once(env=_at(FRIDAY)).code == 0
    assert world.run_once(env=_at(MONDAY)).code == 0
    (started,) = world.events("started")
    assert started["path"] == PROD
    assert world.mg("verify").code == 0


def test_max_approval_age_without_runners_is_a_configuration_error_that_says_why(
    world: World,
) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    text = policy_yaml([world.bob.approver_entry()], [ECHO_RULE], max_approval_age="72h")
    world.write("proposer", {"policy/policy.yaml": text})
    result = world.mg("lint", "policy/policy.yaml", where="proposer")
    assert result.code != 0
    assert "field 'max_approval_age': approval expiry needs runner-signed audit records" in (
        result.err
    )
    assert "lists no runners" in result.err and "policy/policy.yaml:" in result.err
    bad = policy_yaml([world.bob.approver_entry()], [ECHO_RULE], max_approval_age="72 hours")
    world.write("proposer", {"policy/policy.yaml": bad})
    assert world.mg("lint", "policy/policy.yaml", where="proposer").code != 0
