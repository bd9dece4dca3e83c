"""GitHub's merge key is judged at the time a runner first judged the merge, as approver keys are
(issue 23, item 6): an adopted policy change is never undone because GitHub's web-flow key
expired since.

Real OpenPGP key with its own expiry (GitHub's web-flow key is one, and it has expired before),
real runner passes, real `verify`.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from tests.helpers.github_world import ALICE, BOB, GithubGate
from tests.helpers.keys import git_signing_config_gpg, make_gpg_key, stop_gpg_agent
from tests.helpers.repos import ECHO_RULE, job_yaml, policy_yaml

LIFE = 25  # seconds GitHub's key lives: long enough for a pass to judge the change inside it


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def test_a_policy_change_adopted_through_a_merge_key_stays_adopted_after_the_key_expires(
    gate: GithubGate,
) -> None:
    w = gate.world
    home = w.tmp / "web-flow"
    key = make_gpg_key(home, "GitHub", "noreply@github.com", expire=f"seconds={LIFE}")
    try:
        ends = datetime.now(UTC).timestamp() + LIFE - 1  # (gpg counts from the key's creation)
        github = {"merge_keys": [key.public_armored]}
        gate.setup(github=github, policy_approvals_required=1)
        # A policy change that removes carol, reviewed by alice, merged with GitHub's button and
        # signed by GitHub's key while it is valid.
        narrower = policy_yaml(
            [w.alice.approver_entry(github=ALICE), w.bob.approver_entry(github=BOB)],
            [ECHO_RULE],
            approvals_required=1,
            policy_approvals_required=1,
            runners=gate.runners,
            github=github,
        )
        pr = gate.open_pr("narrow", {"policy/policy.yaml": narrower})
        gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
        gate.merge(pr, gpg=git_signing_config_gpg(home, key))
        first = gate.run_once()
        assert first.code == 0, first.out + first.err
        [policy] = w.events("policy")
        assert policy["status"] == "adopted", (policy["reason"], first.out)
        if _when(policy["judged"]).timestamp() >= ends:
            pytest.skip("the pass judged the change only after GitHub's key expired (loaded host)")
    finally:
        stop_gpg_agent(home)
    time.sleep(max(0.0, ends - datetime.now(UTC).timestamp()) + 2)
    # GitHub's key has expired. carol, whom the change removed, approves a job with a signed merge.
    w.propose("late", {"jobs/late.yaml": job_yaml("late", ["echo", "late"])}, who=w.alice)
    w.signed_merge("late", w.carol)
    after = gate.run_once()
    ran = [r for r in w.events("started") if r["path"] == "jobs/late.yaml"]
    assert ran == [], "the adopted change was undone when GitHub's key expired: carol's job ran"
    # carol's key counts for nothing now: her merge is one GitHub would vouch for (it waits).
    assert after.code == 1 and after.json()["waiting"] is not None, after.out + after.err
    verify = w.mg("verify", where="auditor", env=gate.fake.env())
    # verify agrees: the change adopted, nothing ran that should not (carol's merge still waits).
    assert verify.code == 1 and "1 policy change" in verify.out, verify.out + verify.err
    assert "violation" not in verify.err and "incomplete: stopped at" in verify.err
