"""Who may say when a commit was judged (key lifetimes are judged at that time): only a record
appended by an audit commit that a runner of the policy in force *before* that commit signed (review
redteam7a, F1, F2).

A policy change's own runner keys never date it: else someone who can push both branches, holding an
approver key whose life has ended (or not begun), merges a change signed with it that lists a runner
key of theirs, and dates it inside the key's life in an audit commit signed with that key. And the
runner and verify take the same record: the first in chain order, not the earliest time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import pytest

from mergegate.audit.log import record_hash
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml

UNVOUCHED = (
    "which no runner of the policy in force before it signed: that record cannot say when "
    "the commit was judged"
)


def _stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@pytest.mark.parametrize(
    ("bound", "days", "forged_days"),
    [("valid_before", -1, -2), ("valid_after", 1, 2)],
    ids=["expired", "not-yet-valid"],
)
def test_a_forged_first_record_does_not_adopt_an_expired_policy_change(
    world: World, bound: str, days: int, forged_days: int
) -> None:
    runners = world.signing_runner()
    edge = datetime.now(UTC) + timedelta(days=days)
    carol = {
        "name": "carol",
        "email": world.carol.email,
        "keys": [{"key": world.carol.key.public_line, bound: _stamp(edge)}],
    }
    world.setup(
        policy_yaml(
            [world.bob.approver_entry(), carol],
            [ECHO_RULE],
            runners=runners,
            policy_approvals_required=1,
        )
    )
    world.propose("j", {"jobs/j.yaml": job_yaml("j", ["echo", "j"])}, who=world.alice)
    world.signed_merge("j", world.bob)
    assert world.run_once().code == 0
    honest = world.events("scanned")[-1]
    # carol, whose key ran out yesterday, merges a policy change signed with it (trusting her key
    # for good, allowing sh, listing one more runner key: mallory's, which carol holds) ...
    evil = policy_yaml(
        [world.bob.approver_entry(), world.carol.approver_entry()],
        [ECHO_RULE, {"program": "sh", "args_prefix": []}],
        runners=[*runners, {"name": "evil", "key": world.mallory.key.public_line}],
    )
    world.propose("evil", {"policy/policy.yaml": evil}, who=world.alice)
    change = world.signed_merge("evil", world.carol)
    # ... and before any runner's pass, appends two records dated before her key ran out, in an
    # audit commit that says it judged approved at the change and is signed with mallory's key (a
    # runner in the change).
    early = _stamp(datetime.now(UTC) + timedelta(days=forged_days))  # inside carol's lifetime
    records = world.records()
    forged = [
        {
            "event": "policy",
            "job": None,
            "path": None,
            "blob": None,
            "commit": change,
            "runner": "ci",
            "status": "adopted",
            "reason": "forged",
            "policy_commit": change,
            "time": early,
            "judged": early,
        },
        {
            **{k: v for k, v in honest.items() if k not in ("seq", "prev", "hash")},
            "commit": change,
            "start": honest["commit"],
            "policy_commit": change,
            "commits": 1,
            "open": [],
            "time": early,
            "judged": early,
        },
    ]
    lines, prev = [], records[-1]["hash"]
    for seq, record in enumerate(forged, start=len(records) + 1):
        record = {**record, "seq": seq, "prev": prev}
        record["hash"] = prev = record_hash(record)
        lines.append(json.dumps(record, sort_keys=True, separators=(",", ":")))
    log = world.checkout_audit("mallory") / "audit/log-000001.jsonl"
    log.write_text(log.read_text() + "".join(line + "\n" for line in lines))
    world.git("mallory", "add", "-A")
    world.git(
        "mallory",
        "commit",
        "-q",
        "-S",
        "-m",
        "audit",
        "-m",
        f"Mergegate-Approved: {change}",
        sign=world.mallory.key,
    )
    world.git("mallory", "push", "-q", "origin", "HEAD:refs/heads/mergegate/audit")
    # carol approves her own sh job.
    world.propose(
        "pwn", {"jobs/pwn.yaml": job_yaml("pwn", ["sh", "-c", "echo pwned"])}, who=world.alice
    )
    world.signed_merge("pwn", world.carol)
    outcomes = {}
    for name in ("runner", "fresh"):  # the runner that made every honest pass, and a fresh clone
        result = world.mg(
            "run", "--once", "--json", *world.runner_args, "--runner-name", name, where=name
        )
        outcomes[name] = (result.code, result.out[-400:])
    verify = world.mg("verify", where="auditor")
    ran = [
        (r["runner"], r["seq"])
        for r in world.records()
        if r["event"] == "started" and r.get("path") == "jobs/pwn.yaml"
    ]
    assert ran == [], f"pwn ran: {ran} {outcomes}"
    assert [code for code, _ in outcomes.values()] == [3, 3], (
        outcomes
    )  # the forged audit commit: no runner of the policy signed it
    assert verify.code == 3, verify.out[-1500:]
    assert (
        f"commit {change[:12]} is dated by seq {len(records) + 1}, appended by audit commit"
        in verify.out + verify.err
    )
    assert UNVOUCHED in verify.out + verify.err


def _forge(world: World, fields: dict[str, object], *, sign: object) -> str:
    """Append one well-chained record as someone who can push mergegate/audit, signed with
    `sign`."""
    records = world.records()
    record = {
        "job": None,
        "path": None,
        "blob": None,
        "commit": None,
        "runner": "ci",
        **fields,
        "seq": len(records) + 1,
        "prev": records[-1]["hash"],
    }
    record["hash"] = record_hash(record)
    log = world.checkout_audit("mallory") / "audit/log-000001.jsonl"
    log.write_text(
        log.read_text() + json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
    )
    return world.commit_audit("mallory", "audit", sign=sign)  # type: ignore[arg-type]


def _expired_carol_gate(world: World) -> tuple[str, list[dict[str, str]]]:
    runners = world.signing_runner()
    ended = datetime.now(UTC) - timedelta(days=1)
    carol = {
        "name": "carol",
        "email": world.carol.email,
        "keys": [{"key": world.carol.key.public_line, "valid_before": _stamp(ended)}],
    }
    world.setup(
        policy_yaml(
            [world.bob.approver_entry(), carol],
            [ECHO_RULE],
            runners=runners,
            policy_approvals_required=1,
        )
    )
    # carol (whose key ran out yesterday) merges a policy change she signs with it: it trusts her
    # key for good, allows sh, and lists one more runner key (mallory's, which carol holds).
    evil = policy_yaml(
        [world.bob.approver_entry(), world.carol.approver_entry()],
        [ECHO_RULE, {"program": "sh", "args_prefix": []}],
        runners=[*runners, {"name": "evil", "key": world.mallory.key.public_line}],
    )
    world.propose("evil", {"policy/policy.yaml": evil}, who=world.alice)
    change = world.signed_merge("evil", world.carol)
    assert world.run_once().code == 1  # (a rejected policy change: exit 1)
    (policy,) = world.events("policy")
    assert policy["status"] == "rejected" and "valid" in policy["reason"], (
        policy
    )  # the honest runner said no
    return change, runners


def _forge_adoption_and_pwn(world: World, change: str, times: dict[str, str]) -> None:
    """One forged `policy` record saying the change was adopted (with `times`), in an audit commit
    signed by the runner key the *change itself* lists; then carol's sh job, which only the change
    would allow."""
    _forge(
        world,
        {
            "event": "policy",
            "commit": change,
            "status": "adopted",
            "reason": "forged",
            "policy_commit": change,
            **times,
        },
        sign=world.mallory.key,
    )
    world.propose(
        "pwn", {"jobs/pwn.yaml": job_yaml("pwn", ["sh", "-c", "echo pwned"])}, who=world.alice
    )
    world.signed_merge("pwn", world.carol)


def _fresh_runner_refuses(world: World) -> None:
    """A runner that did not walk the change itself (a fresh clone, as every GitHub Actions run
    is)."""
    fresh = world.mg(
        "run", "--once", "--json", *world.runner_args, "--runner-name", "fresh", where="fresh"
    )
    ran = [
        r for r in world.records() if r["event"] == "started" and r.get("path") == "jobs/pwn.yaml"
    ]
    assert ran == [], (
        "the forged record revived carol's expired policy change: pwn "
        f"ran\n{fresh.out}\n{fresh.err}"
    )
    assert fresh.code == 3, fresh.out + fresh.err


def test_a_forged_early_judged_does_not_revive_an_expired_policy_change_on_a_fresh_runner(
    world: World,
) -> None:
    change, _ = _expired_carol_gate(world)
    early = datetime.now(UTC) - timedelta(days=2)  # before carol's key ran out
    # An early `judged` (its own `time` may be anything later).
    _forge_adoption_and_pwn(
        world, change, {"time": _stamp(datetime.now(UTC)), "judged": _stamp(early)}
    )
    _fresh_runner_refuses(world)


def test_control_the_honest_runner_and_verify_refuse_the_forgery(world: World) -> None:
    """The same forgery against the runner that walked the change (its judged.json wins) and
    verify."""
    change, _ = _expired_carol_gate(world)
    early = datetime.now(UTC) - timedelta(days=2)
    _forge_adoption_and_pwn(
        world, change, {"time": _stamp(datetime.now(UTC)), "judged": _stamp(early)}
    )
    assert world.run_once().code == 3
    assert world.mg("verify", where="auditor").code == 3


def test_the_same_forgery_with_an_early_time_and_no_judged(world: World) -> None:
    """`time` alone (records written before `judged`) is held to the same rule."""
    change, _ = _expired_carol_gate(world)
    _forge_adoption_and_pwn(world, change, {"time": _stamp(datetime.now(UTC) - timedelta(days=2))})
    _fresh_runner_refuses(world)


HOOK = """#!/bin/sh
# Hold the pushes of the runner named "slow" to the audit branch while {hold} exists.
while read old new ref; do
  if [ "$ref" = refs/heads/mergegate/audit ] && [ "$(git log -1 --format=%an "$new")" = slow ]; then
    touch {waiting}
    while [ -e {hold} ]; do sleep 0.05; done
  fi
done
exit 0
"""


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_runner_and_verify_date_a_policy_change_judged_by_two_runners_alike(world: World) -> None:
    runners = world.signing_runner()
    ends = datetime.now(UTC) + timedelta(seconds=10)
    carol = {
        "name": "carol",
        "email": world.carol.email,
        "keys": [
            {
                "key": world.carol.key.public_line,
                "valid_before": ends.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            }
        ],
    }
    world.setup(
        policy_yaml(
            [world.bob.approver_entry(), carol],
            [ECHO_RULE],
            runners=runners,
            policy_approvals_required=1,
        )
    )
    hold, waiting = world.tmp / "hold", world.tmp / "waiting"
    hook = world.remote / "hooks" / "pre-receive"
    hook.write_text(HOOK.format(hold=hold, waiting=waiting))
    hook.chmod(0o755)
    hold.touch()
    # carol, while her key is valid, approves a policy change that allows sh.
    wider = policy_yaml(
        [world.bob.approver_entry(), carol],
        [ECHO_RULE, {"program": "sh", "args_prefix": []}],
        runners=runners,
        policy_approvals_required=1,
    )
    world.propose("wider", {"policy/policy.yaml": wider}, who=world.alice)
    world.signed_merge("wider", world.carol)
    # Runner "slow" judges it now (carol's key valid: adopted); its push waits.
    slow = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mergegate",
            "run",
            "--once",
            "--json",
            "--runner-name",
            "slow",
            *world.runner_args,
        ],
        cwd=world.clone("slow"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=dict(os.environ),
    )
    deadline = time.monotonic() + 60
    while not waiting.exists():
        assert slow.poll() is None and time.monotonic() < deadline, slow.communicate()
        time.sleep(0.05)
    # Runner "runner" judges it after carol's key ran out (rejected) and pushes first.
    time.sleep(max(0.0, (ends - datetime.now(UTC)).total_seconds()) + 0.5)
    assert world.run_once().code == 1  # (it rejects the policy change: exit 1)
    hold.unlink()
    out, err = slow.communicate(timeout=120)
    assert slow.returncode == 0, out + err
    policies = [(r["runner"], r["status"], r.get("judged")) for r in world.events("policy")]
    assert [p[:2] for p in policies] == [("runner", "rejected"), ("slow", "adopted")], policies
    assert _when(policies[1][2]) < ends < _when(policies[0][2]), policies  # the rule is reached
    # A job only the change allows, approved by bob (no lifetime), run by a fresh runner.
    world.propose("s", {"jobs/s.yaml": job_yaml("s", ["sh", "-c", "echo s"])}, who=world.alice)
    world.signed_merge("s", world.bob)
    fresh = world.mg(
        "run", "--once", "--json", *world.runner_args, "--runner-name", "fresh", where="fresh"
    )
    ran = [r for r in world.records() if r["event"] == "started" and r["path"] == "jobs/s.yaml"]
    verify = world.mg("verify", where="auditor")
    # Both take the first record of the change in the chain (rejected, judged after the key ran
    # out), not the earliest time: the fresh runner refuses s, and verify agrees with everything
    # every runner did.
    assert ran == [], (
        f"fresh ran s ({fresh.code}); verify says:\n{verify.out[-1200:]}{verify.err[-600:]}"
    )
    assert fresh.code == 1 and "denied" in fresh.out, fresh.out + fresh.err
    assert verify.code == 0, verify.out[-1200:] + verify.err[-600:]
    # And "slow", which judged the change adopted first (its own memory says so) but recorded it
    # second, now judges as the chain says too: another job only the change allows is refused there
    # as well.
    hook.unlink()
    world.propose("s2", {"jobs/s2.yaml": job_yaml("s2", ["sh", "-c", "echo s2"])}, who=world.alice)
    world.signed_merge("s2", world.bob)
    again = world.mg(
        "run", "--once", "--json", *world.runner_args, "--runner-name", "slow", where="slow"
    )
    assert [(j["path"], j["status"]) for j in again.json()["jobs"]] == [
        ("jobs/s2.yaml", "rejected")
    ], again.out + again.err
    assert "denied" in again.out
    assert [
        r
        for r in world.records()
        if r["event"] == "started" and r["path"] in ("jobs/s.yaml", "jobs/s2.yaml")
    ] == []
    assert world.mg("verify", where="auditor").code == 0


def test_a_veto_judged_valid_stays_a_veto_after_its_signers_key_runs_out(world: World) -> None:
    """A veto a pass walked while its signer's key was valid is judged as that pass judged it (the
    policy before it, at the time its first record says), as verify judges it: it does not lapse
    with the key (review redteam7a, F3: the runner judged every veto again at the clock now and ran
    the job)."""
    runners = world.signing_runner()
    until = (datetime.now(UTC) + timedelta(seconds=5)).replace(microsecond=0)
    carol = {
        "name": "carol",
        "email": world.carol.email,
        "keys": [
            {
                "key": world.carol.key.public_line,
                "valid_before": until.strftime("%Y-%m-%dT%H:%M:%SZ"),
            }
        ],
    }
    world.setup(policy_yaml([world.bob.approver_entry(), carol], [ECHO_RULE], runners=runners))
    world.propose("p", {"jobs/j.yaml": job_yaml("j", ["echo", "ran"])}, who=world.alice)
    blob = world.blob("p", "jobs/j.yaml")
    # carol vetoes the proposal before it is merged, while her key is valid; a pass judges the veto.
    veto = world.veto_commit("jobs/j.yaml", blob, world.carol)
    world.git("approver", "push", "-q", "origin", "approved")
    assert world.run_once().code == 0
    (scanned,) = world.events("scanned")
    if datetime.fromisoformat(scanned["judged"].replace("Z", "+00:00")) >= until:
        pytest.skip(
            "the pass judged the veto only after carol's key ran out (a machine this loaded cannot "
            "reach the rule)"
        )
    time.sleep(
        max(0.0, (until - datetime.now(UTC)).total_seconds()) + 1
    )  # carol's key has run out now
    world.signed_merge("p", world.bob)
    (job,) = world.run_once().json()["jobs"]
    assert (job["status"], job["reason"]) == ("vetoed", f"vetoed by carol in commit {veto[:7]}"), (
        job
    )
    assert [r["path"] for r in world.events("started")] == []
    verify = world.mg("verify", where="auditor")
    assert verify.code == 0, verify.out[-900:] + verify.err[-600:]
