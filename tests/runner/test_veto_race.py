"""A veto racing the start (issue 23, item 8): the claim goes to the audit branch, so a veto that
lands on approved meanwhile does not make its push fail. The runner looks again once the claim
has landed, before the process starts, and records `vetoed`; each run's `finished` says how far
its runner had looked for vetoes, and verify holds it to that. Real remote, a hook that lands the
veto at that moment."""

from __future__ import annotations

import json

from mergegate.audit.log import record_hash
from tests.facts.test_bypasses import _forge_started, _veto_after_merge
from tests.helpers.repos import World
from tests.runner.test_reliability import _gate, _merge_jobs

HOOK = """#!/bin/sh
# When the runner's claim lands on the audit branch, land the staged veto on approved (once).
while read old new ref; do
  if [ "$ref" = refs/heads/mergegate/audit ] && [ -e {armed} ]; then
    rm -f {armed}
    git update-ref refs/heads/approved "$(git rev-parse refs/heads/veto-staging)"
  fi
done
exit 0
"""


def test_a_veto_landing_while_the_claim_is_pushed_stops_the_start(world: World) -> None:
    _gate(world)
    marker = world.tmp / "ran"
    _merge_jobs(world, "p", {"j": ["sh", "-c", f"touch {marker}"]})
    blob = world.blob("approved", "jobs/j.yaml")
    # bob's signed veto of the job, on top of approved, staged on another branch of the remote.
    veto = world.veto_commit("jobs/j.yaml", blob, world.bob)
    world.git("approver", "push", "-q", "origin", "HEAD:refs/heads/veto-staging")
    armed = world.tmp / "armed"
    armed.touch()
    hook = world.remote / "hooks" / "post-receive"
    hook.write_text(HOOK.format(armed=armed))
    hook.chmod(0o755)
    result = world.run_once()
    assert not armed.exists(), "the hook did not fire: no claim was pushed"
    assert not marker.exists(), "the job started although a veto landed before its start"
    [job] = result.json()["jobs"]
    assert job["status"] == "vetoed" and f"commit {veto[:7]}" in job["reason"], job
    assert result.code == 1
    [finished] = world.events("finished")
    assert finished["status"] == "vetoed" and finished["exit_code"] is None
    assert "vetoes_checked" not in finished  # (it never started)
    [shown] = world.mg("status", "--json").json()["jobs"]
    assert shown["state"] == "vetoed", shown
    assert world.mg("verify").code == 0


def test_a_run_says_how_far_its_runner_looked_for_vetoes_before_it_started(world: World) -> None:
    _gate(world)
    merge = _merge_jobs(world, "p", {"j": ["echo", "j"]})
    assert world.run_once().code == 0
    [finished] = world.events("finished")
    assert finished["status"] == "succeeded" and finished["vetoes_checked"] == merge
    assert world.mg("verify").code == 0


def _forge_finished(world: World, *, blob: str, commit: str, looked: str) -> None:
    """A well-chained `finished` record of the forged run r1 (succeeded), saying its runner had
    looked for vetoes up to `looked` before the process started."""
    records = world.records()
    fake = {
        "event": "finished",
        "job": "j",
        "path": "jobs/j.yaml",
        "blob": blob,
        "commit": commit,
        "runner": "rogue",
        "time": "2026-01-01T00:00:01Z",
        "run_id": "r1",
        "status": "succeeded",
        "exit_code": 0,
        "vetoes_checked": looked,
        "seq": len(records) + 1,
        "prev": records[-1]["hash"],
    }
    fake["hash"] = record_hash(fake)
    log = world.checkout_audit("mallory") / "audit/log-000001.jsonl"
    log.write_text(log.read_text() + json.dumps(fake, sort_keys=True, separators=(",", ":")) + "\n")
    world.git("mallory", "commit", "-q", "-am", "finished", "-m", f"Mergegate-Approved: {looked}")
    world.git("mallory", "push", "-q", "origin", "HEAD:refs/heads/mergegate/audit")


def test_verify_reports_a_run_started_after_its_runner_saw_a_veto(world: World) -> None:
    """The claim raced the veto (judged before it: fine), but the runner's look after the claim
    reached the veto, and it started the process all the same."""
    blob, merge, veto = _veto_after_merge(world)
    _forge_started(world, path="jobs/j.yaml", blob=blob, commit=merge, judged=merge)
    _forge_finished(world, blob=blob, commit=merge, looked=veto)
    result = world.mg("verify")
    assert result.code == 3, result.err
    assert (
        f"vetoed it before its process started (its runner had looked at approved up to "
        f"{veto[:12]})" in result.err
    )


def test_verify_accepts_a_run_whose_runner_looked_before_the_veto(world: World) -> None:
    blob, merge, _ = _veto_after_merge(world)
    _forge_started(world, path="jobs/j.yaml", blob=blob, commit=merge, judged=merge)
    _forge_finished(world, blob=blob, commit=merge, looked=merge)
    result = world.mg("verify")
    assert result.code == 0, result.err
