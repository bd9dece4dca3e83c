"""Retries, labels and reopened commits against hostile or awkward histories (red-team review of
issue 9's job half).

Each test is a finding of that review, reproduced with real git, real signed merges and real runner
passes; each failed before its fix.
"""

from __future__ import annotations

import json
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import yaml

from mergegate.audit import log as audit
from mergegate.github import workflows
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml
from tests.runner.test_retries_labels import RULES, _append, _gate, _merge


def _merge_removal(world: World, branch: str, paths: list[str]) -> str:
    """A proposal that deletes `paths`, merged with bob's signature."""
    world.fetch("proposer")
    world.git("proposer", "checkout", "-q", "-B", branch, "origin/approved")
    world.git("proposer", "rm", "-q", *paths)
    world.git("proposer", "commit", "-q", "-m", f"remove {' '.join(paths)}", who=world.alice)
    world.git("proposer", "push", "-q", "-f", "origin", branch)
    return world.signed_merge(branch, world.bob)


def _starts(world: World, path: str) -> list[dict[str, Any]]:
    return [r for r in world.events("started") if r["path"] == path]


def _verify(world: World) -> dict[str, Any]:
    result = world.mg("verify", "--json", where="verifier")
    return result.json()  # type: ignore[no-any-return]


# -- a deleted or replaced revision is not started late --------------------------------------------


def test_deleting_a_failing_job_stops_its_retries(world: World) -> None:
    _gate(world, max_retries=2, retry_backoff_seconds=0)
    _merge(
        world, "f", {"jobs/f.yaml": job_yaml("f", ["sh", "-c", "echo attempt; exit 1"], retries=2)}
    )
    (failed,) = world.run_once().json()["jobs"]
    # The run says that this failure is retried, and when.
    assert (failed["status"], failed["attempt"]) == ("failed", 1) and failed["retry_at"] is not None
    assert failed["reason"].endswith(f"attempt 1 of 3: attempt 2 is due at {failed['retry_at']}")
    removed = _merge_removal(world, "rm-f", ["jobs/f.yaml"])
    (job,) = world.run_once().json()["jobs"]
    assert (
        job["status"] == "rejected"
        and f"jobs/f.yaml was removed on approved (at {removed[:7]})" in job["reason"]
    )
    assert (
        world.run_once().json()["jobs"] == []
    )  # final: recorded, and the commit is no longer open
    assert [s["attempt"] for s in _starts(world, "jobs/f.yaml")] == [1]
    assert world.events("scanned")[-1]["open"] == []
    assert _verify(world)["ok"] is True


def test_a_replaced_revision_is_not_retried_after_its_replacement(
    world: World, tmp_path: Path
) -> None:
    """deploy v1 fails, v2 is approved: v1's retry must never run (it would roll production
    back)."""
    _gate(world, max_retries=1, retry_backoff_seconds=0)
    log = tmp_path / "deployed"
    _merge(
        world,
        "v1",
        {
            "jobs/deploy.yaml": job_yaml(
                "deploy", ["sh", "-c", f"echo v1 >> {log}; exit 1"], retries=1
            )
        },
    )
    assert [j["status"] for j in world.run_once().json()["jobs"]] == ["failed"]
    _merge(
        world,
        "v2",
        {"jobs/deploy.yaml": job_yaml("deploy", ["sh", "-c", f"echo v2 >> {log}"], retries=1)},
    )
    ran = world.run_once().json()["jobs"]
    assert sorted(j["status"] for j in ran) == ["rejected", "succeeded"]
    world.run_once()
    assert log.read_text().split() == ["v1", "v2"]


def test_verify_flags_a_retry_started_after_its_file_changed(world: World) -> None:
    """A runner that retried an older revision anyway (records written through the runner's own code
    path)."""
    _gate(world, max_retries=1, retry_backoff_seconds=0)
    _merge(world, "v1", {"jobs/deploy.yaml": job_yaml("deploy", ["sh", "-c", "exit 1"], retries=1)})
    world.run_once()
    v2 = _merge(world, "v2", {"jobs/deploy.yaml": job_yaml("deploy", ["echo", "v2"], retries=1)})
    world.run_once()
    (first,) = [
        s for s in _starts(world, "jobs/deploy.yaml") if s["attempt"] == 1 and s["commit"] != v2
    ]
    from tests.runner.test_retries_labels import _append, _retry_of

    _append(world, _retry_of(first, 2, "succeeded"))
    found = _verify(world)
    assert found["ok"] is False
    assert any(
        "jobs/deploy.yaml was changed" in v and "attempt 2" in v for v in found["violations"]
    ), found["violations"]


def test_a_job_queued_for_labels_does_not_run_after_its_file_was_deleted(world: World) -> None:
    _gate(world)
    _merge(
        world, "gpu", {"jobs/train.yaml": job_yaml("train", ["echo", "trained"], runs_on=["gpu"])}
    )
    assert world.run_once().json()["jobs"] == []  # queued: no runner with gpu yet
    _merge_removal(world, "rm-train", ["jobs/train.yaml"])
    gpu = world.mg(
        "run", "--once", "--json", "--runner-name", "gpu-1", "--label", "gpu", where="gpu"
    )
    assert [j["status"] for j in gpu.json()["jobs"]] == ["rejected"], gpu.out
    assert "jobs/train.yaml was removed on approved" in gpu.json()["jobs"][0]["reason"]
    assert _starts(world, "jobs/train.yaml") == []


# -- at most once within one push ------------------------------------------------------------------


def test_the_same_revision_at_two_commits_in_one_pass_starts_once(world: World) -> None:
    """Add, remove, re-add the same bytes while no runner ran; --parallel 2 would claim both in one
    push."""
    _gate(world)
    text = job_yaml("x", ["echo", "x"])
    first = _merge(world, "add", {"jobs/x.yaml": text})
    _merge_removal(world, "rm", ["jobs/x.yaml"])
    _merge(world, "readd", {"jobs/x.yaml": text})
    ran = world.run_once("--parallel", "2").json()["jobs"]
    assert [s["commit"] for s in _starts(world, "jobs/x.yaml")] == [first]
    assert sorted(j["status"] for j in ran) == ["rejected", "succeeded"]
    assert any(f"also approved at {first[:7]}" in str(j["reason"]) for j in ran)
    assert _verify(world)["ok"] is True


# -- a tightened policy reaches pending retries
# -----------------------------------------------------


def test_lowering_max_retries_stops_a_pending_retry(world: World) -> None:
    runners = world.signing_runner()
    world.setup(
        policy_yaml(
            [world.bob.approver_entry()],
            RULES,
            max_retries=2,
            retry_backoff_seconds=0,
            runners=runners,
        )
    )
    _merge(world, "f", {"jobs/f.yaml": job_yaml("f", ["sh", "-c", "exit 1"], retries=2)})
    assert [j["status"] for j in world.run_once().json()["jobs"]] == ["failed"]
    _merge(
        world,
        "policy",
        {
            "policy/policy.yaml": policy_yaml(
                [world.bob.approver_entry()],
                RULES,
                max_retries=0,
                retry_backoff_seconds=0,
                runners=runners,
            )
        },
    )
    after = world.run_once().json()
    assert [c["status"] for c in after["policy_changes"]] == ["adopted"]
    (job,) = after["jobs"]
    assert (
        job["status"] == "rejected"
        and "the policy in force now denies it (retries 2 exceeds max_retries 0" in job["reason"]
    )
    world.run_once()
    assert [s["attempt"] for s in _starts(world, "jobs/f.yaml")] == [1]


# -- forged records cannot make a job run again
# ------------------------------------------------------


def test_retries_without_runners_are_a_configuration_error_naming_the_field(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], RULES))
    _merge(
        world,
        "p",
        {"policy/policy.yaml": policy_yaml([world.bob.approver_entry()], RULES, max_retries=1)},
    )
    checked = world.mg("lint", "policy/policy.yaml", where="proposer")
    assert checked.code == 2, checked.out + checked.err
    assert (
        "max_retries" in checked.err
        and "lists no runners" in checked.err
        and "policy/policy.yaml:" in checked.err
    )


def _forge(world: World, drafts: list[dict[str, Any]]) -> None:
    """Well-chained records appended by someone who can push mergegate/audit (a gate without
    runners)."""
    _append(world, drafts, where="mallory", sign=False)


def test_a_record_time_without_a_zone_does_not_stop_every_later_pass(world: World) -> None:
    _gate(world)
    _merge(world, "a", {"jobs/a.yaml": job_yaml("a", ["echo", "a"])})
    assert world.run_once().code == 0
    _merge(world, "b", {"jobs/b.yaml": job_yaml("b", ["echo", "b"])})
    ids = {
        "job": "b",
        "path": "jobs/b.yaml",
        "blob": world.blob("approved", "jobs/b.yaml"),
        "commit": world.git("admin", "rev-parse", "origin/approved"),
    }
    naive = {
        **audit.draft(
            "started",
            runner="a",
            run_id="e" * 32,
            attempt=1,
            command=["echo", "b"],
            lease={"holder": "a", "until": "2026-01-01T00:00:00"},
            **ids,
        ),
        "time": "2026-01-01T00:00:00",
    }
    _forge(world, [naive])
    first = world.run_once()
    status = world.mg("status", "--json")
    assert "unexpected" not in first.out + first.err + status.err, (
        first.out + first.err + status.err
    )
    assert first.code == 0 and status.code == 0
    assert {j["path"]: j["state"] for j in status.json()["jobs"]}["jobs/b.yaml"] == "running"


# -- awkward histories never stop the gate -------------------------------------------------------


def test_a_new_trust_root_past_an_open_commit_does_not_stop_every_pass(world: World) -> None:
    _gate(world)
    _merge(
        world, "gpu", {"jobs/train.yaml": job_yaml("train", ["echo", "trained"], runs_on=["gpu"])}
    )
    assert world.run_once().code == 0  # train waits for a gpu runner: its commit is `open`
    later = _merge(world, "b", {"jobs/b.yaml": job_yaml("b", ["echo", "b"])})
    assert world.run_once().code == 0
    first = world.run_once("--trust-root", later)
    second = world.run_once("--trust-root", later)
    assert (first.code, second.code) == (0, 0), first.out + first.err
    assert "is before the trust root" in first.err


def test_every_fan_out_matrix_entry_is_one_its_leg_can_run(world: World, tmp_path: Path) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    _merge(
        world,
        "m",
        {
            "jobs/a.yaml": job_yaml("a", ["echo", "a"]),
            "jobs/gpu.yaml": job_yaml("gpu", ["echo", "g"], runs_on=["gpu"]),
        },
    )
    flow = yaml.safe_load(
        workflows.files(action="o/mergegate@" + "0" * 40, fan_out=True)[workflows.FAN_OUT_PATH]
    )
    plan_with, leg_with = (
        flow["jobs"]["plan"]["steps"][1]["with"],
        flow["jobs"]["run"]["steps"][1]["with"],
    )
    labels = lambda w: [a for label in str(w.get("labels", "")).split() for a in ("--label", label)]  # noqa: E731
    outputs = tmp_path / "out"
    world.mg("plan", "--github", *labels(plan_with), env={"GITHUB_OUTPUT": str(outputs)})
    matrix = json.loads(
        dict(line.split("=", 1) for line in outputs.read_text().splitlines())["matrix"]
    )
    assert [e["path"] for e in matrix["include"]] == ["jobs/a.yaml"]
    for index, entry in enumerate(matrix["include"]):
        leg = world.mg(
            "run",
            "--once",
            "--runner-name",
            f"gha-1-{index}",
            *labels(leg_with),
            "--job",
            entry["path"],
            where=f"leg{index}",
        )
        assert leg.code == 0, leg.out + leg.err
    assert "jobs/gpu.yaml" in world.mg("plan", "--json").out  # any runner (no --github): listed


def test_reopening_a_commit_never_records_rejected_for_a_job_that_already_succeeded(
    world: World,
) -> None:
    runners = world.signing_runner()
    # The merge must be judged while bob's key is valid; the test then waits for it to expire. At
    # load 5 the gate, the merge and the pass took 1.4 s of the key's 4 to 5 s (a whole second: the
    # policy's time has no fraction, and a truncated one would take up to a second off it).
    until = (datetime.now(UTC) + timedelta(seconds=5)).replace(microsecond=0)
    bob = {
        "name": "bob",
        "email": world.bob.email,
        "keys": [
            {"key": world.bob.key.public_line, "valid_before": until.strftime("%Y-%m-%dT%H:%M:%SZ")}
        ],
    }
    world.setup(policy_yaml([bob], [ECHO_RULE], runners=runners))
    _merge(
        world,
        "m",
        {
            "jobs/a.yaml": job_yaml("a", ["echo", "a"]),
            "jobs/gpu.yaml": job_yaml("gpu", ["echo", "g"], runs_on=["gpu"]),
        },
    )
    first = world.run_once()
    assert [(j["job"], j["status"]) for j in first.json()["jobs"]] == [("a", "succeeded")], (
        first.out + first.err
    )
    time.sleep(
        max(0.0, (until - datetime.now(UTC)).total_seconds()) + 1
    )  # bob's key is past valid_before now
    world.run_once()  # reopens the merge (gpu is still open) and judges all of it again, now
    assert [r["event"] for r in world.records() if r.get("path") == "jobs/a.yaml"] == [
        "started",
        "finished",
    ]


# -- found by a new user's walk-through (notes/newuser9.md)
# ------------------------------------------


def test_a_retry_after_a_job_leg_is_refused_with_a_record_when_its_file_is_removed(
    world: World,
) -> None:
    """`run --once --job` writes no scanned record: its `started` must not hide the next attempt's
    refusal."""
    _gate(world, max_retries=2, retry_backoff_seconds=0)
    _merge(world, "x", {"jobs/x.yaml": job_yaml("x", ["sh", "-c", "exit 1"], retries=2)})
    leg = world.run_once("--job", "jobs/x.yaml", "--runner-name", "leg-0")
    assert [j["status"] for j in leg.json()["jobs"]] == ["failed"]
    _merge_removal(world, "rm-x", ["jobs/x.yaml"])
    (job,) = world.run_once("--runner-name", "sweep").json()["jobs"]
    assert job["status"] == "rejected" and "jobs/x.yaml was removed on approved" in job["reason"]
    assert [r["event"] for r in world.records() if r.get("path") == "jobs/x.yaml"] == [
        "started",
        "finished",
        "rejected",
    ]


def test_the_poll_loop_runs_a_retry_when_its_backoff_ends_not_a_whole_interval_later(
    world: World, tmp_path: Path
) -> None:
    from tests.runner.test_reliability import _start_runner

    _gate(world, max_retries=1, retry_backoff_seconds=2)
    marker = tmp_path / "flaky.ran"
    flaky = ["sh", "-c", f"if [ -e {marker} ]; then echo second; else touch {marker}; exit 3; fi"]
    _merge(world, "r", {"jobs/flaky.yaml": job_yaml("flaky", flaky, retries=1)})
    loop = _start_runner(world, *world.runner_args, "--interval", "60", "--json")
    try:
        began = time.monotonic()
        world.until_records(lambda: len(world.events("finished")) >= 2, timeout=40)
        assert time.monotonic() - began < 30  # the 2 s backoff, not the 60 s interval
    finally:
        loop.terminate()
        loop.wait(timeout=30)
    assert [f["status"] for f in world.events("finished")] == ["failed", "succeeded"]


def test_removing_a_job_is_checked_approved_and_verified_as_its_removal(world: World) -> None:
    """The documented way to stop a job (remove its file) goes through check and approve --merge."""
    _gate(world, max_retries=2, retry_backoff_seconds=0)
    _merge(world, "f", {"jobs/f.yaml": job_yaml("f", ["sh", "-c", "exit 1"], retries=2)})
    assert [j["status"] for j in world.run_once().json()["jobs"]] == ["failed"]
    world.fetch("proposer")
    world.git("proposer", "checkout", "-q", "-B", "rm-f", "origin/approved")
    world.git("proposer", "rm", "-q", "jobs/f.yaml")
    world.git("proposer", "commit", "-q", "-m", "stop f", who=world.alice)
    world.git("proposer", "push", "-q", "-f", "origin", "rm-f")
    checked = world.mg("check", "origin/rm-f", "--json", where="proposer")
    assert checked.code == 0, checked.err
    assert [(f["path"], f["state"]) for f in checked.json()["files"]] == [
        ("jobs/f.yaml", "removed")
    ]
    world.signing_clone("bob-clone", world.bob)
    approved = world.mg("approve", "origin/rm-f", "--merge", where="bob-clone")
    assert approved.code == 0, approved.err
    (job,) = world.run_once().json()["jobs"]
    assert job["status"] == "rejected" and "jobs/f.yaml was removed on approved" in job["reason"]
    shown = world.mg("verify", "-v", where="verifier")
    assert shown.code == 0, shown.err
    assert "removes jobs/f.yaml; merge signed by bob" in shown.out
