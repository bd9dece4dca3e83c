"""Found by a red-team read: refs and trailers that name a commit other than the one meant.

- A `Mergegate-Approved` trailer naming a side commit (on approved only through a second
  parent) used to pick an older policy without `runners`, switching the signature rule off.
- A tag named `refs/heads/<branch>` or like a seen ref used to shadow the real ref, because
  `git rev-parse refs/heads/x` falls back to `refs/tags/refs/heads/x` when x is absent.
"""

from __future__ import annotations

import json

from mergegate.audit.log import record_hash
from tests.facts.test_bypasses import JOB, _signing_clone
from tests.helpers.keys import make_ssh_key
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml


def _forge(world: World, fields: dict[str, object], trailer: str) -> str:
    records = world.records()
    record = {
        "job": None,
        "path": None,
        "blob": None,
        "commit": None,
        "runner": "forger",
        "time": "2026-01-01T00:00:00.000000Z",
        **fields,
        "seq": len(records) + 1,
        "prev": records[-1]["hash"],
    }
    record["hash"] = record_hash(record)
    clone = world.checkout_audit("mallory")
    log = clone / "audit/log-000001.jsonl"
    log.write_text(
        log.read_text() + json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
    )
    world.git(clone, "add", "-A")
    world.git(
        clone,
        "commit",
        "-q",
        "-m",
        "forged",
        "-m",
        f"Mergegate-Approved: {trailer}",
        who=world.mallory,
    )
    world.git(clone, "push", "-q", "origin", "HEAD:refs/heads/mergegate/audit")
    return world.git(clone, "rev-parse", "HEAD")


def test_a_trailer_naming_a_merged_side_commit_is_tampering(world: World) -> None:
    key = make_ssh_key(world.tmp / "keys", "runner")
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE], policy_approvals_required=1))
    # 1. The documented migration: the gate runs unsigned first, then the policy lists runners.
    world.propose("j", {"jobs/j.yaml": job_yaml("j", ["echo", "j"])}, who=world.alice)
    world.signed_merge("j")
    assert world.run_once().code == 0
    world.propose(
        "pol",
        {
            "policy/policy.yaml": policy_yaml(
                [world.bob.approver_entry()],
                [ECHO_RULE],
                policy_approvals_required=1,
                runners=[{"name": "ci", "key": key.public_line}],
            )
        },
        who=world.alice,
    )
    world.signed_merge("pol")
    signing = ("--signing-key", str(key.private), "--runner-name", "ci")
    assert world.run_once(*signing).code == 0
    # 2. An ordinary proposal branch, started BEFORE the runners change and later brought up to date
    #    with `git merge origin/approved` (what GitHub's "Update branch" button does).
    p = world.clone("proposer")
    world.git(p, "fetch", "-q", "origin")
    world.git(
        p, "checkout", "-q", "-B", "k", "origin/approved~1"
    )  # the base before the runners change
    world.write("proposer", {"jobs/k.yaml": job_yaml("k", ["echo", "k"])})
    world.git(p, "add", "-A")
    world.git(p, "commit", "-q", "-m", "add k", who=world.alice)
    world.git(p, "merge", "-q", "--no-edit", "origin/approved", who=world.alice)
    side = world.git(p, "rev-parse", "HEAD")
    world.git(p, "push", "-q", "-f", "origin", "k")
    world.signed_merge("k")  # bob reviews and approves job k: the diff is one job file
    # 3. Mallory pushes an UNSIGNED audit commit naming her side commit as the approved tip judged.
    k_blob = world.blob("approved", "jobs/k.yaml")
    approved_tip = world.git("admin", "rev-parse", "origin/approved")
    _forge(
        world,
        {
            "event": "started",
            "job": "k",
            "path": "jobs/k.yaml",
            "blob": k_blob,
            "commit": approved_tip,
            "run_id": "f" * 32,
            "runner": "ci",
        },
        trailer=side,
    )
    results = {}
    for args, where in (
        (["run", "--once", "--json", *signing], "runner"),
        (["status"], "runner"),
        (["audit", "verify"], "runner"),
        (["verify"], "auditor"),
    ):
        r = world.mg(*args, where=where)
        results[args[0]] = (r.code, r.out[-1500:], r.err[-600:])
    assert all(code == 3 for code, _, _ in results.values()), results
    assert all(
        "first-parent line" in err or "first-parent line" in out for _, out, err in results.values()
    ), results


def test_a_tag_named_like_the_seen_audit_ref_is_not_read_as_it(world: World) -> None:
    key = make_ssh_key(world.tmp / "keys", "runner")
    world.setup(
        policy_yaml(
            [world.bob.approver_entry()],
            [ECHO_RULE],
            runners=[{"name": "ci", "key": key.public_line}],
        )
    )
    signing = ("--signing-key", str(key.private), "--runner-name", "ci")
    world.propose("j", {"jobs/j.yaml": job_yaml("j", ["echo", "j"])}, who=world.alice)
    world.signed_merge("j")
    assert world.run_once(*signing).code == 0
    # An approved job k waits for the next pass.
    world.propose("k", {"jobs/k.yaml": job_yaml("k", ["echo", "k"])}, who=world.alice)
    world.signed_merge("k")
    k_blob = world.blob("approved", "jobs/k.yaml")
    tip = world.git("admin", "rev-parse", "origin/approved")
    # mallory: an UNSIGNED, well-chained `started` for k (hides it), with a valid trailer...
    records = world.records()
    record = {
        "job": "k",
        "path": "jobs/k.yaml",
        "blob": k_blob,
        "commit": tip,
        "runner": "ci",
        "time": "2026-01-01T00:00:00.000000Z",
        "event": "started",
        "run_id": "f" * 32,
        "seq": len(records) + 1,
        "prev": records[-1]["hash"],
    }
    record["hash"] = record_hash(record)
    clone = world.checkout_audit("mallory")
    log = clone / "audit/log-000001.jsonl"
    log.write_text(
        log.read_text() + json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
    )
    world.git(clone, "add", "-A")
    world.git(
        clone, "commit", "-q", "-m", "forged", "-m", f"Mergegate-Approved: {tip}", who=world.mallory
    )
    world.git(clone, "push", "-q", "origin", "HEAD:refs/heads/mergegate/audit")
    forged = world.git(clone, "rev-parse", "HEAD")
    # ...and a tag whose name is the seen ref a fresh clone does not have yet.
    world.git(clone, "tag", "refs/mergegate/seen/origin/mergegate/audit", forged)
    world.git(clone, "push", "-q", "origin", "refs/tags/refs/mergegate/seen/origin/mergegate/audit")
    # Control: the long-lived runner clone (which has the real seen ref) stops.
    control = world.mg("run", "--once", *signing, where="runner")
    # A fresh clone, as GitHub Actions makes one per push (git clone brings tags).
    fresh = world.mg("run", "--once", "--json", *signing, where="fresh")
    assert control.code == 3
    assert fresh.code == 3, "a fresh clone accepted an unsigned audit commit"
    assert "is not signed by a runner" in fresh.err
    for args, where in (
        (["status"], "fresh2"),
        (["audit", "verify"], "fresh3"),
        (["verify"], "fresh4"),
    ):
        r = world.mg(*args, where=where)
        assert r.code == 3, (args, r.out, r.err)


def test_a_tag_named_refs_heads_feature_does_not_shadow_the_reviewed_branch(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    reviewed = world.propose("feature", JOB, who=world.alice)
    evil = world.propose(
        "other", {"jobs/j.yaml": job_yaml("j", ["echo", "EVIL"])}, who=world.mallory
    )
    # mallory pushes a TAG whose name is `refs/heads/feature` (stored as
    # refs/tags/refs/heads/feature).
    world.git("proposer", "tag", "refs/heads/feature", evil)
    world.git("proposer", "push", "-q", "origin", "refs/tags/refs/heads/feature")
    clone = _signing_clone(world, "bob-clone", world.bob)
    world.git(clone, "fetch", "-q", "--tags", "origin")
    assert world.git(clone, "rev-parse", "origin/feature") == reviewed  # what bob reviewed
    checked = world.mg("check", "feature", where="bob-clone")
    assert checked.code == 0, checked.err
    assert "EVIL" not in checked.out
    result = world.mg("approve", "feature", "--merge", where="bob-clone")
    assert result.code == 0, result.err
    assert reviewed in result.out
    world.fetch("admin")
    merged = world.git("admin", "rev-parse", "origin/approved^2")
    assert merged == reviewed, "approve signed mallory's commit, not the branch bob reviewed"
