"""End to end on real git: propose, signed merge, run, records pushed, chain verified."""

from __future__ import annotations

from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml


def _gate(world: World, **extra: object) -> str:
    approvers = [world.bob.approver_entry(), world.carol.approver_entry()]
    return world.setup(policy_yaml(approvers, [ECHO_RULE, {"program": "sh", "args_prefix": ["-c"]}, {"program": "sleep"}], **extra))


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
    world.propose("touch", {"jobs/touch.yaml": job_yaml("touch", ["sh", "-c", "echo ran > /tmp/never"])})
    world.merge("touch", who=world.bob, sign=None)
    result = world.run_once()
    assert result.code == 1
    (job,) = result.json()["jobs"]
    assert job["status"] == "rejected"
    assert "unsigned" in job["reason"]
    assert world.events("started") == []
    (rejected,) = world.events("rejected")
    assert rejected["job"] is None or rejected["path"] == "jobs/touch.yaml"
