"""Change windows through the real CLI on real gates (issue 24, section 1).

The runner's clock is set with MERGEGATE_CLOCK (clock.py): a Sunday evening, then a Monday
morning in Berlin, without sleeping.
"""

from __future__ import annotations

import json
import time
from typing import Any

from mergegate.audit.log import record_hash
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml
from tests.runner.test_reliability import _start_runner, _until

SUNDAY = "2026-12-06T20:00:00+01:00"  # Europe/Berlin, 13 h before Monday 09:00
MONDAY = "2026-12-07T09:00:05+01:00"
FREEZE = "2026-12-21T12:00:00Z"  # inside year-end-freeze, a Monday at 13:00 in Berlin

WINDOWS = {
    "business-hours": {"timezone": "Europe/Berlin", "open": ["Mon-Fri 09:00-17:00"]},
    "year-end-freeze": {"closed": ["2026-12-20T00:00:00Z/2027-01-04T00:00:00Z"]},
}
PROD = {"jobs/prod/deploy.yaml": job_yaml("deploy", ["echo", "deployed"])}


def _gate(world: World, *, runners: bool = True, **extra: Any) -> str:
    more: dict[str, Any] = {
        "windows": WINDOWS,
        "run_windows": ["year-end-freeze"],
        "approval_rules": [
            {
                "name": "production",
                "paths": ["jobs/prod/*"],
                "approvals_required": 1,
                "windows": ["business-hours"],
            }
        ],
        **extra,
    }
    if runners:
        more["runners"] = world.signing_runner()
    return world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE], **more))


def _merge(world: World, branch: str, files: dict[str, str]) -> str:
    world.propose(branch, files, who=world.alice)
    return world.signed_merge(branch, world.bob)


def _at(when: str) -> dict[str, str]:
    return {"MERGEGATE_CLOCK": when}


def test_a_job_under_a_closed_window_waits_says_why_everywhere_and_runs_when_it_opens(
    world: World,
) -> None:
    _gate(world)
    _merge(world, "deploy", PROD)
    sunday = world.run_once(env=_at(SUNDAY))
    assert sunday.code == 0, sunday.err
    assert world.events("started") == [] and world.events("rejected") == []
    why = "waiting for window business-hours, opens Mon 09:00 Europe/Berlin (in 13 h)"
    status = world.mg("status", "--json", env=_at(SUNDAY))
    (job,) = [j for j in status.json()["jobs"] if j["path"] == "jobs/prod/deploy.yaml"]
    assert (job["state"], job["reason"]) == ("waiting", why)
    shown = world.mg("show", "deploy", "--json", env=_at(SUNDAY))
    assert shown.code == 0, shown.err
    assert shown.json()["state"] == "waiting" and why in shown.json()["next"]
    planned = world.mg("plan", env=_at(SUNDAY))
    assert why in planned.out, planned.out + planned.err
    # A proposal of another production job: check says it would wait once merged.
    world.propose("more", {"jobs/prod/more.yaml": job_yaml("more", ["echo", "x"])}, who=world.alice)
    checked = world.mg("check", "origin/more", "--json", env=_at(SUNDAY))
    assert checked.code == 0, checked.err
    (more,) = [f for f in checked.json()["files"] if f["path"] == "jobs/prod/more.yaml"]
    assert more["state"] == "allowed" and more["reason"].endswith(f"once merged it is {why}")
    # The scanned record keeps the commit open: on Monday morning it runs.
    monday = world.run_once(env=_at(MONDAY))
    assert monday.code == 0, monday.err
    (started,) = world.events("started")
    assert started["path"] == "jobs/prod/deploy.yaml"
    assert started["windows"] == ["year-end-freeze", "business-hours"]
    (finished,) = world.events("finished")
    assert finished["status"] == "succeeded"
    verified = world.mg("verify")
    assert verified.code == 0, verified.err


def test_a_job_outside_every_rule_starts_at_once_and_the_freeze_holds_every_job(
    world: World,
) -> None:
    _gate(world)
    _merge(world, "misc", {"jobs/misc.yaml": job_yaml("misc", ["echo", "misc"])})
    assert world.run_once(env=_at(SUNDAY)).code == 0
    (started,) = world.events("started")
    assert started["path"] == "jobs/misc.yaml" and started["windows"] == ["year-end-freeze"]
    _merge(world, "late", {"jobs/late.yaml": job_yaml("late", ["echo", "late"])})
    frozen = world.run_once(env=_at(FREEZE))
    assert frozen.code == 0, frozen.err
    assert len(world.events("started")) == 1
    status = world.mg("status", "--json", env=_at(FREEZE))
    (job,) = [j for j in status.json()["jobs"] if j["path"] == "jobs/late.yaml"]
    assert job["state"] == "waiting"
    assert job["reason"] == (
        "waiting for window year-end-freeze, opens Mon 2027-01-04 00:00 UTC (in 13 d)"
    )


def test_an_idle_run_loop_wakes_when_the_window_opens(world: World) -> None:
    _gate(world)
    _merge(world, "deploy", PROD)
    runner = _start_runner(
        world,
        "--interval",
        "600",
        *world.runner_args,
        # 12 s before the window opens: the first pass (a fresh runner's, CI's first process)
        # must end before it, or the job runs at the first pass and nothing is shown to wake.
        env=_at("2026-12-07T08:59:48+01:00"),
    )
    try:
        began = time.monotonic()
        _until(lambda: len(world.events("started")) == 1, timeout=45.0, step=0.3)
        # It woke for the window, not after its 600 s interval.
        assert time.monotonic() - began < 45.0
    finally:
        runner.terminate()
        runner.wait(timeout=30)
    (started,) = world.events("started")
    assert started["windows"] == ["year-end-freeze", "business-hours"]
    # Not at its first pass (08:59:48 in Berlin): at the first after the window opened.
    assert started["judged"] >= "2026-12-07T08:00:00"
    assert len(world.events("scanned")) >= 2


def test_verify_flags_a_start_judged_outside_the_windows(world: World) -> None:
    _gate(world, runners=False)
    _merge(world, "misc", {"jobs/misc.yaml": job_yaml("misc", ["echo", "misc"])})
    assert world.run_once(env=_at(SUNDAY)).code == 0  # audit branch and a scanned record
    merge = _merge(world, "deploy", PROD)
    assert world.run_once(env=_at(SUNDAY)).code == 0
    assert [r["path"] for r in world.events("started")] == ["jobs/misc.yaml"]
    blob = world.blob("deploy", "jobs/prod/deploy.yaml")
    records = world.records()
    fake: dict[str, Any] = {
        "event": "started",
        "job": "deploy",
        "path": "jobs/prod/deploy.yaml",
        "blob": blob,
        "commit": merge,
        "runner": "rogue",
        "time": "2026-12-06T19:00:01.000000Z",
        "judged": "2026-12-06T19:00:00.000000Z",
        "run_id": "r1",
        "seq": len(records) + 1,
        "prev": records[-1]["hash"],
    }
    fake["hash"] = record_hash(fake)
    log = world.checkout_audit("mallory") / "audit/log-000001.jsonl"
    log.write_text(log.read_text() + json.dumps(fake, sort_keys=True, separators=(",", ":")) + "\n")
    world.commit_audit("mallory", "started")
    result = world.mg("verify")
    assert result.code == 3, result.out + result.err
    assert "started jobs/prod/deploy.yaml at" in result.err
    assert "judged at 2026-12-06T19:00:00Z, outside window business-hours" in result.err


def test_bad_window_specs_are_configuration_errors_naming_file_line_and_field(
    world: World,
) -> None:
    cases = [
        (
            {"windows": {"w": {"timezone": "Mars/Olympus", "open": ["09:00-17:00"]}}},
            "field 'windows.w.timezone': unknown time zone 'Mars/Olympus'",
        ),
        (
            {"windows": {"w": {"open": ["Mon-Fri 17:00-09:00"]}}},
            "field 'windows.w.open': 'Mon-Fri 17:00-09:00' is an inverted span",
        ),
        (
            {"windows": {"w": {"closed": ["2027-01-04T00:00:00Z/2026-12-20T00:00:00Z"]}}},
            "field 'windows.w.closed': '2027-01-04T00:00:00Z/2026-12-20T00:00:00Z' is an inverted",
        ),
        (
            {"windows": {"w": {"open": ["Mon-Fri 09:00-17:00"]}}, "run_windows": ["nope"]},
            "field 'run_windows': unknown window 'nope' (the policy defines: w)",
        ),
    ]
    _gate(world)
    for index, (extra, words) in enumerate(cases):
        text = policy_yaml([world.bob.approver_entry()], [ECHO_RULE], **extra)
        world.write("proposer", {"policy/policy.yaml": text})
        result = world.mg("lint", "policy/policy.yaml", where="proposer")
        assert result.code != 0, (index, result.out)
        assert words in result.err, (index, result.err)
        assert "policy/policy.yaml:" in result.err, (index, result.err)
