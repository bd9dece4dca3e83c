"""review redteam7b G1: a runner key's lifetime must not undo an adopted policy change on fresh
runners.

`dating.first_vouched` (and verify's `_unvouched_dates`) check the audit commit that dates a policy
change
with an Assessor at the clock *now*. Runner keys may carry `valid_before` (docs/threat-model.md:
"Set valid_before on keys ahead of time"). Once the runner key that signed the pass judging a change
has run out, its records vouch for nothing: a fresh runner (every GitHub Actions run) judges the
change at the clock now. If the change's approver key has run out too, the change is rejected, and
the policy before it is back: the threat-model row "key lifetimes undoing an adopted policy",
reopened. Here the change took `sh` away; after both keys end, a fresh runner runs an `sh` job.
(Before 9a7e5e1 the change was dated by its first record whoever signed it, and the job was
rejected.) Secure outcome: the job is rejected, as by the runner that walked the change.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta

import pytest

from tests.helpers.keys import shared_ssh_key
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml

SH = {"program": "sh", "args_prefix": []}


def test_a_runner_keys_end_does_not_undo_a_policy_change_it_dated(world: World) -> None:
    world.signing_runner()
    ci = shared_ssh_key(world.tmp / "keys", "runner")
    ci2 = shared_ssh_key(world.tmp / "keys", "runner2")
    until = (datetime.now(UTC) + timedelta(seconds=12)).replace(microsecond=0)
    stamp = until.strftime("%Y-%m-%dT%H:%M:%SZ")
    bob = {
        "name": "bob",
        "email": world.bob.email,
        "keys": [{"key": world.bob.key.public_line, "valid_before": stamp}],
    }
    # Runner keys rotated ahead of time, as docs/policy.md says: ci (ending at `until`) and its
    # successor ci2.
    runners = [
        {"name": "ci", "keys": [{"key": ci.public_line, "valid_before": stamp}]},
        {"name": "ci2", "key": ci2.public_line},
    ]
    approvers = [bob, world.carol.approver_entry()]
    world.setup(
        policy_yaml(approvers, [ECHO_RULE, SH], runners=runners, policy_approvals_required=1)
    )
    assert world.run_once().code == 0  # signed with ci
    # bob (key valid until `until`) merges a change that takes sh away; a pass signed with ci adopts
    # it.
    world.propose(
        "tighten",
        {
            "policy/policy.yaml": policy_yaml(
                approvers, [ECHO_RULE], runners=runners, policy_approvals_required=1
            )
        },
        who=world.alice,
    )
    world.signed_merge("tighten", world.bob)
    assert world.run_once().code == 0
    (policy,) = world.events("policy")
    assert policy["status"] == "adopted", policy
    # The runners switch to ci2 before ci ends (a pass signed with ci2 is the last scanned one).
    world.propose("e", {"jobs/e.yaml": job_yaml("e", ["echo", "e"])}, who=world.alice)
    world.signed_merge("e", world.carol)
    assert world.mg("run", "--once", "--json", "--signing-key", str(ci2.private)).code == 0
    if (
        datetime.fromisoformat(policy["judged"].replace("Z", "+00:00")) >= until
        or datetime.now(UTC) >= until
    ):
        pytest.skip("the machine is too loaded to judge the change before the keys end")
    time.sleep(
        max(0.0, (until - datetime.now(UTC)).total_seconds()) + 1
    )  # bob's key and ci have ended
    world.propose("s", {"jobs/s.yaml": job_yaml("s", ["sh", "-c", "echo sh"])}, who=world.alice)
    world.signed_merge("s", world.carol)
    fresh = world.mg(
        "run",
        "--once",
        "--json",
        "--signing-key",
        str(ci2.private),
        "--runner-name",
        "fresh",
        where="fresh",
    )
    started = [
        r["runner"]
        for r in world.records()
        if r["event"] == "started" and r.get("path") == "jobs/s.yaml"
    ]
    assert started == [], f"the sh job ran on {started}: {fresh.out[-600:]} {fresh.err[-400:]}"
    assert fresh.code in (0, 1), fresh.out[-600:] + fresh.err[-400:]
