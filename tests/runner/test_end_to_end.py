"""End to end on real git: propose, signed merge, run, records pushed, chain verified."""

from __future__ import annotations

import json

from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml


def _gate(world: World, **extra: object) -> str:
    approvers = [world.bob.approver_entry(), world.carol.approver_entry()]
    return world.setup(
        policy_yaml(
            approvers,
            [ECHO_RULE, {"program": "sh", "args_prefix": ["-c"]}, {"program": "sleep"}],
            **extra,
        )
    )


def test_happy_path_runs_once_pushes_records_and_verifies(world: World) -> None:
    _gate(world)
    world.propose("hello", {"jobs/hello.yaml": job_yaml("hello", ["echo", "hello world"])})
    merge = world.signed_merge("hello")

    first = world.run_once()
    assert first.code == 0, first.err
    jobs = first.json()["jobs"]
    assert [(j["job"], j["status"], j["commit"]) for j in jobs] == [("hello", "succeeded", merge)]

    started, finished = world.events("started"), world.events("finished")
    assert len(started) == 1 and len(finished) == 1
    assert finished[0]["stdout_tail"] == "hello world\n"
    assert finished[0]["exit_code"] == 0
    assert started[0]["approvers"] == ["bob"]
    assert [r["seq"] for r in world.records()] == list(range(1, len(world.records()) + 1))

    again = world.run_once()
    assert again.code == 0 and again.json()["jobs"] == []
    assert len(world.events("started")) == 1

    verified = world.mg("audit", "verify")
    assert verified.code == 0, verified.err
    assert "records" in verified.out
    assert world.mg("verify").code == 0


def test_unsigned_merge_is_rejected_and_never_runs(world: World) -> None:
    _gate(world)
    world.propose(
        "touch", {"jobs/touch.yaml": job_yaml("touch", ["sh", "-c", "echo ran > /tmp/never"])}
    )
    world.merge("touch", who=world.bob, sign=None)
    result = world.run_once()
    assert result.code == 1
    (job,) = result.json()["jobs"]
    assert job["status"] == "rejected"
    assert "unsigned" in job["reason"]
    assert world.events("started") == []
    (rejected,) = world.events("rejected")
    assert (rejected["job"], rejected["path"]) == ("touch", "jobs/touch.yaml")
    assert "is not a valid approval: unsigned" in rejected["reason"]


def test_merge_signed_by_unknown_key_is_rejected(world: World) -> None:
    _gate(world)
    world.propose("j", {"jobs/j.yaml": job_yaml("j", ["echo", "x"])})
    world.merge("j", who=world.mallory, sign=world.mallory.key)
    result = world.run_once()
    assert result.code == 1
    (job,) = result.json()["jobs"]
    assert job["status"] == "rejected"
    assert "is not a key in the policy" in job["reason"]
    assert world.events("started") == []


def test_approver_who_authored_the_job_does_not_count(world: World) -> None:
    _gate(world)
    world.propose("j", {"jobs/j.yaml": job_yaml("j", ["echo", "x"])}, who=world.bob)
    world.signed_merge("j", world.bob)
    (job,) = world.run_once().json()["jobs"]
    assert job["status"] == "rejected"
    assert "bob (merge signature of" in job["reason"] and "author of" in job["reason"]
    assert world.events("started") == []


def test_self_approval_allowed_by_policy_is_recorded(world: World) -> None:
    _gate(world, allow_self_approval=True)
    world.propose("j", {"jobs/j.yaml": job_yaml("j", ["echo", "x"])}, who=world.bob)
    world.signed_merge("j", world.bob)
    (job,) = world.run_once().json()["jobs"]
    assert job["status"] == "succeeded"
    (started,) = world.events("started")
    assert started["self_approved"] is True


def test_job_denied_by_policy_is_rejected_naming_why(world: World) -> None:
    _gate(world)
    world.propose("j", {"jobs/j.yaml": job_yaml("j", ["rm", "-rf", "/tmp/x"])})
    world.signed_merge("j")
    result = world.run_once()
    assert result.code == 1
    (job,) = result.json()["jobs"]
    assert job["status"] == "rejected"
    assert "denied by policy" in job["reason"] and "'rm'" in job["reason"]
    assert world.events("started") == []


def test_args_prefix_must_match(world: World) -> None:
    approvers = [world.bob.approver_entry()]
    world.setup(policy_yaml(approvers, [{"program": "echo", "args_prefix": ["safe"]}]))
    world.propose(
        "j",
        {
            "jobs/ok.yaml": job_yaml("ok", ["echo", "safe", "x"]),
            "jobs/no.yaml": job_yaml("no", ["echo", "unsafe"]),
        },
    )
    world.signed_merge("j")
    jobs = {j["job"]: j for j in world.run_once().json()["jobs"]}
    assert jobs["ok"]["status"] == "succeeded"
    assert jobs["no"]["status"] == "rejected"


def test_failing_command(world: World) -> None:
    _gate(world)
    world.propose("j", {"jobs/fail.yaml": job_yaml("fail", ["sh", "-c", "echo oops >&2; exit 3"])})
    world.signed_merge("j")
    result = world.run_once()
    assert result.code == 1
    (job,) = result.json()["jobs"]
    assert job["status"] == "failed"
    (finished,) = world.events("finished")
    assert finished["exit_code"] == 3
    assert finished["stderr_tail"] == "oops\n"


def test_timeout(world: World) -> None:
    _gate(world, limits={"max_timeout_seconds": 5, "kill_grace_seconds": 0.5})
    world.propose("j", {"jobs/slow.yaml": job_yaml("slow", ["sleep", "30"], timeout_seconds=1)})
    world.signed_merge("j")
    result = world.run_once()
    assert result.code == 1
    (job,) = result.json()["jobs"]
    assert job["status"] == "timed_out"
    (finished,) = world.events("finished")
    assert finished["status"] == "timed_out"
    assert finished["duration_ms"] < 10_000


def test_timeout_above_policy_max_is_rejected(world: World) -> None:
    _gate(world, limits={"max_timeout_seconds": 5})
    world.propose("j", {"jobs/slow.yaml": job_yaml("slow", ["sleep", "1"], timeout_seconds=60)})
    world.signed_merge("j")
    (job,) = world.run_once().json()["jobs"]
    assert job["status"] == "rejected"
    assert "max_timeout_seconds" in job["reason"]


def test_policy_change_is_judged_by_the_old_policy(world: World) -> None:
    """One merge widens the policy and adds a job only the new policy allows: it must not run."""
    _gate(world, policy_approvals_required=1)
    new_policy = policy_yaml(
        [world.bob.approver_entry(), world.carol.approver_entry()],
        [ECHO_RULE, {"program": "touch"}],
        policy_approvals_required=1,
    )
    world.propose(
        "widen",
        {"policy/policy.yaml": new_policy, "jobs/t.yaml": job_yaml("t", ["touch", "marker"])},
    )
    world.signed_merge("widen")
    result = world.run_once()
    (job,) = result.json()["jobs"]
    assert job["status"] == "rejected"
    assert "'touch'" in job["reason"]
    assert [c["status"] for c in result.json()["policy_changes"]] == ["adopted"]
    assert world.events("started") == []
    (policy_record,) = world.events("policy")
    assert policy_record["status"] == "adopted"
    # The next approval is judged by the policy adopted above.
    world.propose("again", {"jobs/t2.yaml": job_yaml("t2", ["touch", "marker"])})
    world.signed_merge("again")
    (job,) = world.run_once().json()["jobs"]
    assert job["status"] == "succeeded"


def test_direct_commit_to_approved_approves_nothing(world: World) -> None:
    _gate(world)
    world.write("approver", {})
    world.checkout_approved("approver")
    world.write("approver", {"jobs/d.yaml": job_yaml("d", ["echo", "x"])})
    world.git("approver", "add", "-A")
    world.git("approver", "commit", "-q", "-S", "-m", "direct", who=world.bob, sign=world.bob.key)
    world.git("approver", "push", "-q", "origin", "approved")
    (job,) = world.run_once().json()["jobs"]
    assert job["status"] == "rejected"
    assert "is not a merge" in job["reason"]


def test_invalid_job_file_is_rejected_with_file_and_line(world: World) -> None:
    _gate(world)
    world.propose("j", {"jobs/bad.yaml": "id: bad\ncommand: [echo, a]\ncommand: [echo, b]\n"})
    world.signed_merge("j")
    (job,) = world.run_once().json()["jobs"]
    assert job["status"] == "rejected"
    assert "duplicate key 'command'" in job["reason"] and "jobs/bad.yaml:3" in job["reason"]
    assert world.events("started") == []


def test_missing_policy_is_bad_configuration(world: World) -> None:
    world.write("admin", {"README.md": "x\n"})
    world.git("admin", "add", "-A")
    world.git("admin", "commit", "-qm", "init")
    world.git("admin", "push", "-q", "origin", "main:approved")
    result = world.mg("run", "--once")
    assert result.code == 2
    assert result.err.startswith("error: no policy/policy.yaml")
    assert "hint:" in result.err


def test_no_approved_branch_is_a_usage_error(world: World) -> None:
    world.write("admin", {"README.md": "x\n"})
    world.git("admin", "add", "-A")
    world.git("admin", "commit", "-qm", "init")
    world.git("admin", "push", "-q", "origin", "main")
    result = world.mg("run", "--once")
    assert result.code == 2
    assert "branch approved does not exist on origin" in result.err
    assert "Traceback" not in result.err


def test_fast_forward_to_a_foxtrot_merge_stops_the_runner(world: World) -> None:
    """approved fast-forwarded to a branch that merged approved into itself: first parents
    change."""
    _gate(world)
    world.propose("j", {"jobs/j.yaml": job_yaml("j", ["echo", "x"])})
    world.signed_merge("j")
    assert world.run_once().code == 0
    world.fetch("proposer")
    world.git("proposer", "checkout", "-q", "-B", "fox", "origin/main")
    world.write("proposer", {"jobs/k.yaml": job_yaml("k", ["echo", "k"])})
    world.git("proposer", "add", "-A")
    world.git("proposer", "commit", "-qm", "k")
    world.git(
        "proposer", "merge", "-q", "--no-ff", "-m", "merge approved into fox", "origin/approved"
    )
    world.git("proposer", "push", "-q", "origin", "fox:approved")
    result = world.run_once()
    assert result.code == 3
    assert "no longer passes through" in result.err
    assert len(world.events("started")) == 1


def test_result_that_could_not_be_pushed_is_kept_and_pushed_next_time(world: World) -> None:
    """No record is lost: the remote refuses the push after the job ran; the next pass delivers
    it."""
    world.setup(policy_yaml([world.bob.approver_entry()], [{"program": "touch"}]))
    block = world.tmp / "block"
    hook = world.remote / "hooks" / "pre-receive"
    hook.write_text(
        f"#!/bin/sh\nif [ -e {block} ]; then echo 'remote is read-only' >&2; exit 1; fi\n"
    )
    hook.chmod(0o755)
    # The job itself closes the remote, between its `started` push and its `finished` push.
    world.propose("p", {"jobs/t.yaml": job_yaml("t", ["touch", str(block)])})
    world.signed_merge("p")
    failed = world.run_once()
    assert failed.code == 2
    assert "pre-receive hook declined" in failed.err or "read-only" in failed.err
    assert [r["event"] for r in world.records()] == ["started"]
    block.unlink()
    result = world.run_once()
    assert result.code == 0, result.err
    (job,) = result.json()["jobs"]
    assert job["status"] == "succeeded"
    finished = world.events("finished")
    assert len(finished) == 1 and finished[0]["exit_code"] == 0
    assert "stopped while this job ran" not in json.dumps(world.records())
    assert world.mg("audit", "verify").code == 0
