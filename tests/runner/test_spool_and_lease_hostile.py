"""Red team, session 8 (redteam8a): a dead runner's spool entry cannot stop every pass nor make
one remove a folder the runner never made, and a claim or result that lost push races (the
publisher's backoff) stays within its run's lease. Real git, real runners, real processes. (The
workspace removal's half is tests/execution/test_workspace_removal_hostile.py.)"""

from __future__ import annotations

import json
import os
from datetime import datetime
from pathlib import Path

from tests.helpers.repos import World, job_yaml
from tests.runner.test_reliability import _gate, _merge_jobs


def _spool(world: World, name: str = "ci") -> Path:
    folder = world.clone("runner") / ".git" / "mergegate" / "spool"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{name}.jsonl"


def test_a_spool_entry_naming_a_folder_with_a_nul_byte_does_not_stop_every_pass(
    world: World,
) -> None:
    """A spool line that parses (a dead runner's run, `folders` a path holding U+0000) must not fail
    every later pass: os.lstat raises ValueError there, not OSError, and `Spool.recover` runs first
    thing in each pass. The spool sets unreadable lines aside; a readable one must not be a standing
    stop."""
    _gate(world)
    _merge_jobs(world, "p", {"hi": ["echo", "hi"]})
    first = world.run_once("--runner-name", "ci")
    assert first.code == 0, first.err
    spool = _spool(world)
    dead = {"pid": 1, "start": 1, "boot": "not-this-boot"}  # never alive: another boot
    entry = {
        "record": {"event": "finished", "run_id": "rt8a-run", "status": "lost"},
        "job": None,
        "runner": dead,
        "done": False,
        "folders": [["/tmp/rt8a\u0000x", 12345]],
    }
    spool.write_text(json.dumps(entry) + "\n")
    later = world.run_once("--runner-name", "ci")
    assert later.code == 0, later.err
    again = world.run_once("--runner-name", "ci")
    assert again.code == 0, again.err


def test_a_crafted_spool_entry_cannot_make_a_pass_remove_a_folder_the_runner_never_made(
    world: World,
) -> None:
    """Whoever can write the spool (the runner's user, a job without a sandbox) names any folder of
    the runner's user with its inode (`stat` gives it): the next pass removed it, whatever it was.
    The runner only ever names its own `mergegate-job-*` and `mergegate-index-*` folders: nothing
    else is removed."""
    _gate(world)
    _merge_jobs(world, "p", {"hi": ["echo", "hi"]})
    assert world.run_once("--runner-name", "ci").code == 0
    precious = world.tmp / "home-of-the-runner"
    (precious / ".ssh").mkdir(parents=True)
    (precious / ".ssh" / "id_ed25519").write_text("key")
    dead = {"pid": 1, "start": 1, "boot": "not-this-boot"}
    entry = {
        "record": {"event": "finished", "run_id": "rt8a-run", "status": "lost"},
        "job": None,
        "runner": dead,
        "done": False,
        "folders": [[str(precious), os.lstat(precious).st_ino]],
    }
    _spool(world).write_text(json.dumps(entry) + "\n")
    assert world.run_once("--runner-name", "ci").code == 0
    assert (precious / ".ssh" / "id_ed25519").read_text() == "key"


def _racing_remote(
    world: World, armed: Path, count: Path, losses: int, seconds: float, landed: Path | None = None
) -> None:
    """A remote whose audit pushes each take `seconds` and, once `armed` exists, lose the first
    `losses`
    races: receive-pack says what it says when another runner's push took the ref first. (`landed`:
    when the push after them was let through.)"""
    hook = world.remote / "hooks" / "pre-receive"
    hook.write_text(
        '#!/bin/sh\nwhile read old new ref; do\n  if [ "$ref" = refs/heads/mergegate/audit ] && [ '
        f"-e {armed} ]; then\n"
        f"    sleep {seconds}\n    n=$(cat {count} 2>/dev/null || echo 0)\n"
        f'    if [ "$n" -lt {losses} ]; then echo $((n+1)) > {count}; '
        f"echo 'error: failed to update ref refs/heads/mergegate/audit' >&2; exit 1; fi\n"
        + (f"    date +%s.%N > {landed}\n" if landed else "")
        + "  fi\ndone\n"
    )
    hook.chmod(0o755)


def test_a_claim_that_lost_races_still_has_a_lease_covering_its_job_from_its_start(
    world: World,
) -> None:
    """The `started` draft's lease is stamped once, before the first try (until = then + timeout +
    kill grace + shutdown grace + 5 s). Every lost race costs a try and, with the exponential
    backoff, a sleep of up to 16 times what a try took, so six lost races on a remote where a try
    takes half a second start the job well past the slack: its lease runs out while it may still
    legitimately run, any runner then closes it `lost` (an idempotent job is retried beside it; its
    own result is dropped)."""
    _gate(world)
    assert world.run_once("--runner-name", "ci").code == 0
    armed, count, stamp = world.tmp / "armed", world.tmp / "count", world.tmp / "started-at"
    _racing_remote(world, armed, count, losses=6, seconds=0.3)
    _merge_jobs(world, "p", {"stamp": ["sh", "-c", f"date +%s.%N > {stamp}"]})
    armed.touch()
    ran = world.run_once("--runner-name", "ci", "--shutdown-grace", "0", process=True)
    assert ran.code == 0, ran.err
    assert count.read_text().strip() == "6"
    (started,) = [r for r in world.records() if r["event"] == "started"]
    until = datetime.fromisoformat(started["lease"]["until"].replace("Z", "+00:00")).timestamp()
    limits = started["limits"]
    began = float(stamp.read_text())
    assert until >= began + limits["timeout_seconds"] + limits["kill_grace_seconds"], (
        until - began,
        limits,
    )


def test_a_result_that_lost_races_still_lands_within_its_runs_lease(world: World) -> None:
    """A job that uses all it may (its timeout, then its kill grace) leaves its result the lease's 5
    s of slack to land in. Five lost races, where a try takes half a second, take that and more with
    the exponential backoff (each wait up to 16 times a try), so the `finished` record lands after
    the
    lease:
    a pass of any other runner meanwhile closes the run `lost` and this result is dropped."""
    _gate(world, limits={"kill_grace_seconds": 1})
    assert world.run_once("--runner-name", "ci").code == 0
    armed, count, landed = world.tmp / "armed", world.tmp / "count", world.tmp / "landed"
    _racing_remote(world, armed, count, losses=5, seconds=0.3, landed=landed)
    world.propose(
        "p",
        {
            "jobs/long.yaml": job_yaml(
                "long", ["sh", "-c", f"trap '' TERM; touch {armed}; sleep 30"], timeout_seconds=1
            )
        },
        who=world.alice,
    )
    world.signed_merge("p", world.bob)
    ran = world.run_once("--runner-name", "ci", "--shutdown-grace", "0", process=True)
    assert ran.code == 1 and [j["status"] for j in ran.json()["jobs"]] == ["timed_out"], ran.out
    assert count.read_text().strip() == "5"
    (started,) = [r for r in world.records() if r["event"] == "started"]
    until = datetime.fromisoformat(started["lease"]["until"].replace("Z", "+00:00")).timestamp()
    assert float(landed.read_text()) <= until, float(landed.read_text()) - until
