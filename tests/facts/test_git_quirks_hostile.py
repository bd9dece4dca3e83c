"""redteam8b: an attacker's read of session 8's newest changes (43e7494..main).

No finding made a test fail on main; what is here holds the properties the attacks aimed at,
so that a later shortcut cannot lose them (notes/redteam8b.md says what was tried).
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

from mergegate.audit.log import record_hash
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml


def _forge(world: World) -> str:
    """A well-chained, unsigned record on the audit branch, pushed as anyone who can push there
    could."""
    records = world.records()
    record = {
        "job": None,
        "path": "jobs/x.yaml",
        "blob": None,
        "commit": None,
        "runner": "forger",
        "event": "rejected",
        "reason": "forged",
        "time": "2026-01-01T00:00:00.000000Z",
        "seq": len(records) + 1,
        "prev": records[-1]["hash"],
    }
    record["hash"] = record_hash(record)
    log = world.checkout_audit("mallory") / "audit/log-000001.jsonl"
    log.write_text(
        log.read_text() + json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
    )
    return world.commit_audit("mallory", "append")


def test_audit_verify_sees_runners_a_merged_policy_change_added_though_the_merge_equals_its_side(
    world: World,
) -> None:
    """av8's shortcut (policy_log.policy_lookup) takes the trust root's policy when `git log
    --first-parent
    root..sha -- policy/` lists nothing. A policy change that arrives as a merge is TREESAME to its
    second parent (the side that wrote it): without --first-parent, git's history simplification
    would drop the merge and the shortcut would keep the root's policy, which lists no runners, and
    accept an unsigned audit commit. Here a merged change adds a runner; audit verify (no walk, no
    memory: a fresh clone) and a fresh runner must both refuse an unsigned record appended after it.
    """
    runners = world.signing_runner()
    approvers = [world.bob.approver_entry(), world.carol.approver_entry()]
    world.setup(policy_yaml(approvers, [ECHO_RULE], policy_approvals_required=1))
    world.propose(
        "add-runner",
        {
            "policy/policy.yaml": policy_yaml(
                approvers, [ECHO_RULE], runners=runners, policy_approvals_required=1
            )
        },
        who=world.alice,
    )
    merge = world.signed_merge("add-runner", world.bob)
    world.fetch("admin")
    parents = world.git("admin", "log", "-1", "--format=%P", merge).split()
    assert (
        len(parents) == 2
        and world.git("admin", "diff", "--quiet", parents[1], merge, "--", "policy/") == ""
    )
    assert world.run_once().code == 0
    (policy,) = world.events("policy")
    assert policy["status"] == "adopted", policy
    world.propose("j", {"jobs/j.yaml": job_yaml("j", ["echo", "j"])}, who=world.alice)
    world.signed_merge("j", world.carol)
    assert world.run_once().code == 0
    assert world.mg("audit", "verify", where="auditor", process=True).code == 0
    bad = _forge(world)
    refused = world.mg("audit", "verify", where="auditor2", process=True)
    assert (
        refused.code == 3
        and f"audit commit {bad[:12]} on mergegate/audit is not signed by a runner" in refused.err
    ), refused.err
    fresh = world.run_once(where="fresh")
    assert fresh.code != 0 and f"audit commit {bad[:12]}" in fresh.err, (
        fresh.out[-600:] + fresh.err[-600:]
    )


def _git(path: Path, *args: str, when: int | None = None) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@example.com",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@example.com",
    }
    if when is not None:
        env["GIT_AUTHOR_DATE"] = env["GIT_COMMITTER_DATE"] = f"@{when} +0000"
    return subprocess.run(
        ["git", *args], cwd=path, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def test_a_merges_side_commits_are_rev_lists_under_octopus_criss_cross_and_clock_skew(
    tmp_path: Path,
) -> None:
    """startup8's 4d3f52a takes a merge's side commits (whose approvals and authors are judged) from
    the `rev-list --parents` its touched paths read, reversed, instead of `rev-list --reverse`. A
    crafted side that
    could make the two differ would hide a commit from the self-approval and signed-writer rules:
    octopus merges on the side, a side commit that is also merged into the first parent
    (criss-cross), and commit dates that run backwards and far into the future (rev-list's order is
    by date). Both must list the same commits in the same order."""

    from mergegate.facts.assessor import Assessor
    from mergegate.facts.git_side import GitSide
    from mergegate.git.repo import Repo

    path = tmp_path / "r"
    path.mkdir()
    _git(path, "init", "-q", "-b", "main")
    clock = iter(
        [
            2_000_000_000,
            100,
            4_000_000_000,
            50,
            3_000_000_000,
            10,
            1_000,
            5,
            2_500_000_000,
            7,
            9,
            11,
            13,
            15,
        ]
    )

    def commit(message: str) -> str:
        (path / f"{message}.txt").write_text(message)
        _git(path, "add", "-A")
        _git(path, "commit", "-q", "-m", message, when=next(clock))
        return _git(path, "rev-parse", "HEAD")

    base = commit("base")
    _git(path, "checkout", "-q", "-b", "a")
    commit("a1")
    shared = commit("a2")  # merged into main too: reachable from the first parent
    _git(path, "checkout", "-q", "-b", "b", base)
    commit("b1")
    _git(path, "checkout", "-q", "-b", "c", base)
    commit("c1")
    _git(path, "checkout", "-q", "a")
    _git(path, "merge", "-q", "--no-ff", "-m", "octopus", "b", "c", when=next(clock))
    commit("a3")
    _git(path, "checkout", "-q", "main")
    commit("m1")
    _git(path, "merge", "-q", "--no-ff", "-m", "criss", shared, when=next(clock))
    first = _git(path, "rev-parse", "HEAD")
    _git(path, "checkout", "-q", "a")
    _git(path, "merge", "-q", "--no-ff", "-m", "cross", first, when=next(clock))
    second = commit("a4")
    repo = Repo(path)
    side = GitSide(Assessor(repo), first, second)
    expected = _git(path, "rev-list", "--reverse", f"{first}..{second}").split()
    assert len(expected) >= 6 and shared not in expected
    assert side.side_commits() == expected
    # (`touching` is not git's answer here: git also lists `cross`, which differs on b1.txt only
    # from `first`, a bottom commit git counts as a relevant parent; it is TREESAME to its side
    # parent, so it wrote nothing there. The writers that matter, `b1` and the octopus, are in both:
    # notes/redteam8b.md.)
    assert {"b1", "octopus"} <= {
        _git(path, "log", "-1", "--format=%s", sha) for sha in side.touching("b1.txt")
    }
    assert side.side_commits() == expected  # after the touched paths read the listing too


def test_a_signing_key_path_starting_with_ssh_dash_signs_with_that_file(world: World) -> None:
    """The lead's `_can_sign` reads `--signing-key` as a file (ssh_key_file_blob) when it is one,
    and Signing gives git that path as user.signingkey. git reads a user.signingkey that starts with
    `ssh-` (or `key::`) as a literal public key, not a path: a key file named `ssh-runner`
    (relative, as an operator types it) passes the runner's check against the policy, and then git
    cannot sign with it."""
    runners = world.signing_runner()
    approvers = [world.bob.approver_entry(), world.carol.approver_entry()]
    world.setup(policy_yaml(approvers, [ECHO_RULE], runners=runners))
    key = Path(world.runner_args[1])
    clone = world.clone("runner")
    (clone / "ssh-runner").write_bytes(key.read_bytes())
    (clone / "ssh-runner").chmod(0o600)
    world.propose("j", {"jobs/j.yaml": job_yaml("j", ["echo", "j"])}, who=world.alice)
    world.signed_merge("j", world.bob)
    result = world.mg("run", "--once", "--json", "--signing-key", "ssh-runner", process=True)
    assert result.code == 0, result.out[-600:] + result.err[-600:]
    assert [j["status"] for j in result.json()["jobs"]] == ["succeeded"]
    assert world.mg("audit", "verify", where="auditor", process=True).code == 0


def test_a_runner_or_auditor_whose_git_shows_signatures_in_logs_reads_the_policy_changes(
    world: World,
) -> None:
    """policy_changes (av8 moved it into branch.py; audit verify's shortcut and every pass read it)
    lists the policy changes with `git log --format=%H`. With `log.showSignature=true` in the user's
    git config (a common setting) git prints `No signature` (or `Good "git" signature for ...`) on
    stdout before each signed commit it lists, and a policy change is a signed merge: the words were
    read as commit ids, and a fresh runner's pass and audit verify stopped on `object No not found`.
    (Fails closed; but every runner or auditor with that setting could neither run nor verify a gate
    once its policy changed.)"""
    show = {
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "log.showSignature",
        "GIT_CONFIG_VALUE_0": "true",
    }
    runners = world.signing_runner()
    approvers = [world.bob.approver_entry(), world.carol.approver_entry()]
    world.setup(policy_yaml(approvers, [ECHO_RULE], policy_approvals_required=1))
    world.propose(
        "add-runner",
        {
            "policy/policy.yaml": policy_yaml(
                approvers, [ECHO_RULE], runners=runners, policy_approvals_required=1
            )
        },
        who=world.alice,
    )
    world.signed_merge("add-runner", world.bob)
    assert world.run_once().code == 0
    world.propose("j", {"jobs/j.yaml": job_yaml("j", ["echo", "j"])}, who=world.alice)
    world.signed_merge("j", world.carol)
    fresh = world.run_once(where="fresh", env=show, process=True)
    assert fresh.code == 0, fresh.out[-600:] + fresh.err[-600:]
    assert [j["status"] for j in fresh.json()["jobs"]] == ["succeeded"]
    verified = world.mg("audit", "verify", where="auditor", env=show, process=True)
    assert verified.code == 0 and verified.out.startswith("ok:"), (
        verified.out[-600:] + verified.err[-600:]
    )
