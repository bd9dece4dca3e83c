"""Issue 8: every way a job ran without the approvals its policy demands, closed one by one.

Each test builds the attack with real git, real keys and real signed merges, asserts the job did not
run and that the reason names the rule, and fails on the code before the fix.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from tests.helpers.keys import SshKey
from tests.helpers.repos import ECHO_RULE, Person, World, job_yaml, policy_yaml

JOB = {"jobs/j.yaml": job_yaml("j", ["echo", "ran"])}


def _ident(person: Person) -> str:
    return f"{person.name} <{person.email}> 1700000000 +0000"


def raw_commit(
    world: World, where: str, headers: list[str], message: str, *, sign: SshKey | None
) -> str:
    """Write a commit object byte for byte (headers as given), signed over git's payload."""
    cwd = world.clone(where)
    payload = ("\n".join(headers) + "\n\n" + message).encode()
    lines = list(headers)
    if sign is not None:
        signature = subprocess.run(
            ["ssh-keygen", "-Y", "sign", "-q", "-f", str(sign.private), "-n", "git"],
            input=payload,
            capture_output=True,
            check=True,
        ).stdout.decode()
        lines.append("gpgsig " + "\n ".join(signature.strip().splitlines()))
    data = ("\n".join(lines) + "\n\n" + message).encode()
    proc = subprocess.run(
        ["git", "hash-object", "-t", "commit", "-w", "--literally", "--stdin"],
        cwd=cwd,
        input=data,
        capture_output=True,
        check=True,
    )
    return proc.stdout.decode().strip()


def _jobs(world: World, *args: str, where: str = "runner") -> dict[str, dict[str, object]]:
    result = world.mg("run", "--once", "--json", *args, where=where)
    assert result.code in (0, 1), result.err
    return {str(j["path"]): j for j in result.json()["jobs"]}


# -- bypass 4: the commit parser agrees with git -----------------------------------


def test_parent_header_after_committer_makes_the_commit_malformed(world: World) -> None:
    """git reads parents only right after `tree`; a later `parent` line must not make a merge."""
    approvers = [world.bob.approver_entry(), world.carol.approver_entry()]
    world.setup(
        policy_yaml(
            approvers,
            [ECHO_RULE],
            require_signed_proposals=True,
            proposers=[world.alice.approver_entry()],
        )
    )
    # An unsigned proposal (its author could be anyone): require_signed_proposals must refuse it.
    proposal = world.propose("p", JOB, who=world.alice)
    world.fetch("approver")
    tip = world.git("approver", "rev-parse", "origin/approved")
    tree = world.git("approver", "merge-tree", "--write-tree", tip, proposal).split()[0]
    # bob commits the job himself on approved, and names the proposal as a parent git never reads.
    headers = [
        f"tree {tree}",
        f"parent {tip}",
        f"author {_ident(world.bob)}",
        f"committer {_ident(world.bob)}",
        f"parent {proposal}",
    ]
    sha = raw_commit(world, "approver", headers, "merge p\n", sign=world.bob.key)
    assert world.git("approver", "rev-list", "--parents", "-n", "1", sha).split() == [sha, tip]
    world.git("approver", "push", "-q", "origin", f"{sha}:refs/heads/approved")
    job = _jobs(world)["jobs/j.yaml"]
    assert job["status"] == "rejected"
    assert f"commit {sha[:7]} is malformed" in str(job["reason"]) and "parent" in str(job["reason"])
    assert world.events("started") == []


def test_repeated_author_header_makes_the_commit_malformed(world: World) -> None:
    world.setup(
        policy_yaml([world.bob.approver_entry(), world.carol.approver_entry()], [ECHO_RULE])
    )
    proposal = world.propose("p", JOB, who=world.bob)
    world.fetch("approver")
    tip = world.git("approver", "rev-parse", "origin/approved")
    tree = world.git("approver", "merge-tree", "--write-tree", tip, proposal).split()[0]
    # A second author line: a reader that takes the last one would see carol, git shows bob.
    headers = [
        f"tree {tree}",
        f"parent {tip}",
        f"parent {proposal}",
        f"author {_ident(world.carol)}",
        f"committer {_ident(world.carol)}",
        f"author {_ident(world.bob)}",
    ]
    sha = raw_commit(world, "approver", headers, "merge p\n", sign=world.carol.key)
    world.git("approver", "push", "-q", "origin", f"{sha}:refs/heads/approved")
    job = _jobs(world)["jobs/j.yaml"]
    assert job["status"] == "rejected"
    assert "malformed" in str(job["reason"]) and "author" in str(job["reason"])


# -- bypass 10: octopus merges ---------------------------------------------------------


def test_octopus_merge_approves_nothing(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    world.propose("p", {"jobs/a.yaml": job_yaml("a", ["echo", "a"])}, who=world.alice)
    world.propose("q", {"jobs/b.yaml": job_yaml("b", ["echo", "b"])}, who=world.alice)
    world.fetch("approver")
    world.git("approver", "checkout", "-q", "-B", "approved", "origin/approved")
    world.git(
        "approver",
        "merge",
        "-q",
        "-S",
        "--no-ff",
        "-m",
        "octopus",
        "origin/p",
        "origin/q",
        who=world.bob,
        sign=world.bob.key,
    )
    world.git("approver", "push", "-q", "origin", "approved")
    jobs = _jobs(world)
    assert set(jobs) == {"jobs/a.yaml", "jobs/b.yaml"}
    for job in jobs.values():
        assert job["status"] == "rejected"
        assert "octopus merges are not approvals" in str(job["reason"])
    assert world.events("started") == []


# -- bypass 7: no content can stop later passes -----------------------------------------


def test_deeply_nested_job_file_is_rejected_and_later_jobs_run(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    deep = "id: deep\ncommand: [echo]\ndescription: " + "[" * 5000 + "]" * 5000 + "\n"
    world.propose("deep", {"jobs/deep.yaml": deep}, who=world.alice)
    world.signed_merge("deep")
    job = _jobs(world)["jobs/deep.yaml"]
    assert job["status"] == "rejected"
    assert "nests deeper than 64 levels" in str(job["reason"])
    world.propose("p", JOB, who=world.alice)
    world.signed_merge("p")
    assert _jobs(world)["jobs/j.yaml"]["status"] == "succeeded"
    assert world.mg("verify").code == 0


def test_gitlink_at_a_job_path_is_rejected_and_later_jobs_run(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    world.fetch("proposer")
    world.git("proposer", "checkout", "-q", "-B", "sub", "origin/approved")
    root = world.git("proposer", "rev-parse", "HEAD")
    world.git("proposer", "update-index", "--add", "--cacheinfo", f"160000,{root},jobs/sub.yaml")
    world.git("proposer", "commit", "-qm", "a submodule where a job goes", who=world.alice)
    world.git("proposer", "push", "-q", "origin", "sub")
    world.signed_merge("sub")
    job = _jobs(world)["jobs/sub.yaml"]
    assert job["status"] == "rejected"
    assert "is a gitlink (submodule), not a regular file" in str(job["reason"])
    world.propose("p", JOB, who=world.alice)
    world.signed_merge("p")
    assert _jobs(world)["jobs/j.yaml"]["status"] == "succeeded"


# -- bypass 3: tags never shadow proposal branches ----------------------------------------


def _signing_clone(world: World, name: str, person: Person) -> Path:
    return world.signing_clone(name, person)


def test_tag_named_like_the_branch_is_not_what_approve_signs(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    reviewed = world.propose("feature", JOB, who=world.alice)
    # mallory tags another proposal `origin/feature`; an ordinary fetch brings tags along.
    evil = world.propose(
        "other", {"jobs/j.yaml": job_yaml("j", ["echo", "EVIL"])}, who=world.mallory
    )
    world.git("proposer", "tag", "origin/feature", evil)
    world.git("proposer", "push", "-q", "origin", "refs/tags/origin/feature")
    clone = _signing_clone(world, "bob-clone", world.bob)
    world.git(clone, "fetch", "-q", "--tags", "origin")
    assert (
        world.git(clone, "rev-parse", "origin/feature") == evil
    )  # what rev-parse order would sign
    result = world.mg("approve", "origin/feature", "--merge", where="bob-clone")
    assert result.code == 0, result.err
    world.fetch("admin")
    merged = world.git("admin", "rev-parse", "origin/approved^2")
    assert merged == reviewed
    signed = world.git("admin", "rev-parse", "origin/approved")
    assert f"signed merge {signed} of {reviewed}" in result.out


def test_ambiguous_proposal_name_is_refused_naming_both(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    reviewed = world.propose("feature", JOB, who=world.alice)
    clone = _signing_clone(world, "bob-clone", world.bob)
    world.git(clone, "fetch", "-q", "origin")
    other = world.git(clone, "rev-parse", "origin/approved")
    world.git(clone, "update-ref", "refs/heads/origin/feature", other)
    result = world.mg("check", "origin/feature", "--no-fetch", where="bob-clone")
    assert result.code == 2
    assert "origin/feature is ambiguous" in result.err
    assert f"refs/heads/origin/feature ({other[:12]})" in result.err
    assert f"refs/remotes/origin/feature ({reviewed[:12]})" in result.err


# -- a quorum nobody can meet is a configuration error -----------------------------------


def test_unmeetable_policy_quorum_is_a_configuration_error(world: World) -> None:
    approvers = [world.bob.approver_entry(), world.carol.approver_entry()]
    world.setup(policy_yaml(approvers, [ECHO_RULE], policy_approvals_required=3))
    result = world.run_once()
    assert result.code == 2
    assert (
        "'policy_approvals_required': 3 approvals can never be met: the policy lists 2 approvers"
        in result.err
    )
    assert "policy/policy.yaml:" in result.err


def test_unmeetable_rule_count_is_a_configuration_error(world: World) -> None:
    approvers = [world.bob.approver_entry(), world.carol.approver_entry()]
    rules = [{"name": "prod", "paths": ["jobs/prod/*"], "require": [{"group": "sre", "count": 2}]}]
    world.setup(policy_yaml(approvers, [ECHO_RULE], groups={"sre": ["bob"]}, approval_rules=rules))
    result = world.run_once()
    assert result.code == 2
    assert (
        "'approval_rules.0': 2 from group 'sre' can never be met: the group has 1 member(s)"
        in result.err
    )


def test_policy_change_to_an_unmeetable_quorum_is_rejected_with_the_reason(world: World) -> None:
    approvers = [world.bob.approver_entry(), world.carol.approver_entry()]
    world.setup(policy_yaml(approvers, [ECHO_RULE], policy_approvals_required=1))
    frozen = policy_yaml(approvers, [ECHO_RULE], policy_approvals_required=5)
    world.propose("pol", {"policy/policy.yaml": frozen}, who=world.alice)
    world.signed_merge("pol")
    result = world.run_once()
    (change,) = result.json()["policy_changes"]
    assert change["status"] == "rejected"
    assert "5 approvals can never be met" in change["reason"]


# -- bypass 1: a vote covers only what the proposal changed -------------------------------


def _script_gate(world: World) -> str:
    approvers = [
        world.bob.approver_entry(),
        world.carol.approver_entry(),
        world.alice.approver_entry(),
    ]
    return world.setup(
        policy_yaml(
            approvers,
            [{"program": "sh", "args_prefix": ["run.sh"]}],
            approvals_required=2,
            policy_approvals_required=2,
        ),
        files={"run.sh": "echo vulnerable\n"},
    )


def _tree_approve(world: World, where: str, branch: str, who: Person) -> None:
    tree = world.git(where, "rev-parse", "HEAD^{tree}")
    world.git(
        where,
        "commit",
        "-q",
        "--allow-empty",
        "-S",
        "-m",
        "approve",
        "-m",
        f"Mergegate-Approve-Tree: {tree}",
        who=who,
        sign=who.key,
    )
    world.git(where, "push", "-q", "origin", branch)


def test_merge_that_rolls_back_a_script_to_an_old_proposals_bytes_is_not_approved(
    world: World,
) -> None:
    root = _script_gate(world)
    # run.sh is fixed with a proper two-person approval.
    world.propose("fix", {"run.sh": "echo fixed\n"}, who=world.alice)
    world.approval_commit(
        "fix", [("run.sh", world.blob("fix", "run.sh"))], who=world.carol, sign=world.carol.key
    )
    world.signed_merge("fix", world.bob)
    assert world.run_once().code == 0
    # An old proposal, from before the fix, adds a job; carol approves its whole tree.
    world.propose(
        "old", {"jobs/s.yaml": job_yaml("s", ["sh", "run.sh"])}, who=world.alice, base=root
    )
    _tree_approve(world, "proposer", "old", world.carol)
    # bob merges it and "resolves" run.sh back to the proposal's (pre-fix) bytes.
    world.fetch("approver")
    world.git("approver", "checkout", "-q", "-B", "approved", "origin/approved")
    world.git("approver", "merge", "-q", "--no-ff", "--no-commit", "origin/old", who=world.bob)
    world.git("approver", "checkout", "origin/old", "--", "run.sh")
    world.git(
        "approver", "commit", "-q", "-S", "-m", "merge old", who=world.bob, sign=world.bob.key
    )
    world.git("approver", "push", "-q", "origin", "approved")
    job = _jobs(world)["jobs/s.yaml"]
    assert job["status"] == "rejected"
    assert "no signed approval covers: run.sh" in str(job["reason"])
    assert world.events("started") == []


def test_tree_approval_does_not_cover_a_policy_rollback(world: World) -> None:
    root = world.setup(
        policy_yaml(
            [
                world.bob.approver_entry(),
                world.carol.approver_entry(),
                world.mallory.approver_entry(),
            ],
            [ECHO_RULE],
            policy_approvals_required=2,
        )
    )
    # mallory is removed by a policy change bob and carol approved.
    smaller = policy_yaml(
        [world.bob.approver_entry(), world.carol.approver_entry()],
        [ECHO_RULE],
        policy_approvals_required=2,
    )
    world.propose("remove", {"policy/policy.yaml": smaller}, who=world.alice)
    world.approval_commit(
        "remove",
        [("policy/policy.yaml", world.blob("remove", "policy/policy.yaml"))],
        who=world.carol,
        sign=world.carol.key,
    )
    world.signed_merge("remove", world.bob)
    assert [c["status"] for c in world.run_once().json()["policy_changes"]] == ["adopted"]
    # An old proposal carol tree-approved; bob merges it and rolls policy/ back to its bytes.
    world.propose("old", JOB, who=world.alice, base=root)
    _tree_approve(world, "proposer", "old", world.carol)
    world.fetch("approver")
    world.git("approver", "checkout", "-q", "-B", "approved", "origin/approved")
    world.git("approver", "merge", "-q", "--no-ff", "--no-commit", "origin/old", who=world.bob)
    world.git("approver", "checkout", "origin/old", "--", "policy/policy.yaml")
    world.git(
        "approver", "commit", "-q", "-S", "-m", "merge old", who=world.bob, sign=world.bob.key
    )
    world.git("approver", "push", "-q", "origin", "approved")
    result = world.run_once()
    (change,) = result.json()["policy_changes"]
    assert change["status"] == "rejected"
    assert (
        "the proposal did not change this file" in change["reason"]
        and "bob (merge signature of" in change["reason"]
    )
    assert "author of" in change["reason"] or "signed" in change["reason"]


# -- bypass 6: unapproved edits are not laundered by the next merge -------------------------


def test_unapproved_edit_stays_unapproved_when_a_merge_builds_on_it(world: World) -> None:
    _script_gate(world)
    world.checkout_approved("approver")
    world.write("approver", {"run.sh": "echo vulnerable\necho MALLORY\n"})
    world.git("approver", "commit", "-qam", "tweak", who=world.mallory)
    world.git("approver", "push", "-q", "origin", "approved")
    # An honest proposal touches run.sh again; the reviewer's diff never shows mallory's line.
    world.fetch("proposer")
    world.propose("more", {"run.sh": "echo vulnerable\necho MALLORY\necho more\n"}, who=world.alice)
    report = world.mg("check", "origin/more", "--json", where="checker").json()
    (script,) = [f for f in report["files"] if f["path"] == "run.sh"]
    assert (
        "holds content no signed approval covers" in script["unapproved"]
        and "+echo MALLORY" in script["unapproved"]
    )
    world.approval_commit(
        "more", [("run.sh", world.blob("more", "run.sh"))], who=world.carol, sign=world.carol.key
    )
    world.signed_merge("more", world.bob)
    world.run_once()
    world.propose("p", {"jobs/s.yaml": job_yaml("s", ["sh", "run.sh"])}, who=world.alice)
    world.approval_commit(
        "p",
        [("jobs/s.yaml", world.blob("p", "jobs/s.yaml"))],
        who=world.carol,
        sign=world.carol.key,
    )
    world.signed_merge("p", world.bob)
    job = _jobs(world)["jobs/s.yaml"]
    assert job["status"] == "rejected"
    assert "no signed approval covers: run.sh" in str(job["reason"])
    assert world.events("started") == []


# -- bypass 8: denial of service by push ----------------------------------------------------


def test_stray_job_with_the_same_id_does_not_block_the_approved_one(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    clone = world.checkout_approved("approver")
    (clone / "jobs/x").mkdir(parents=True)
    (clone / "jobs/x/j.yaml").write_text(job_yaml("j", ["echo", "stray"]))
    world.git("approver", "add", "-A")
    world.git("approver", "commit", "-qm", "stray", who=world.mallory)
    world.git("approver", "push", "-q", "origin", "approved")
    assert _jobs(world)["jobs/x/j.yaml"]["status"] == "rejected"
    world.propose("p", JOB, who=world.alice)
    world.signed_merge("p")
    job = _jobs(world)["jobs/j.yaml"]
    assert job["status"] == "succeeded", job
    assert [r["path"] for r in world.events("started")] == ["jobs/j.yaml"]


def test_a_deleted_unapproved_file_taints_nothing(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    world.checkout_approved("approver")
    world.write("approver", {"tool.sh": "echo EVIL\n"})
    world.git("approver", "add", "-A")
    world.git("approver", "commit", "-qm", "tool", who=world.mallory)
    world.git("approver", "rm", "-q", "tool.sh")
    world.git("approver", "commit", "-qm", "gone", who=world.mallory)
    world.git("approver", "push", "-q", "origin", "approved")
    world.run_once()
    world.propose("p", JOB, who=world.alice)
    world.signed_merge("p")
    assert _jobs(world)["jobs/j.yaml"]["status"] == "succeeded"


# -- bypass 9: votes bind the mode; no symlink leads outside ----------------------------------


def test_making_a_voted_file_executable_voids_the_votes(world: World) -> None:
    approvers = [
        world.bob.approver_entry(),
        world.carol.approver_entry(),
        world.alice.approver_entry(),
    ]
    world.setup(policy_yaml(approvers, [ECHO_RULE], approvals_required=2))
    world.propose("p", {"run.sh": "echo hi\n", **JOB}, who=world.alice)
    _tree_approve(world, "proposer", "p", world.carol)
    # The same bytes, now executable: a different file for a job that runs ./run.sh.
    world.git("proposer", "update-index", "--chmod=+x", "run.sh")
    world.git("proposer", "commit", "-qm", "chmod", who=world.alice)
    world.git("proposer", "push", "-q", "origin", "p")
    world.signed_merge("p", world.bob)
    job = _jobs(world)["jobs/j.yaml"]
    assert job["status"] == "rejected"
    assert "no signed approval covers: run.sh" in str(job["reason"])


def test_symlink_out_of_the_workspace_refuses_the_job(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [{"program": "cat"}]))
    world.fetch("proposer")
    world.git("proposer", "checkout", "-q", "-B", "p", "origin/approved")
    (world.clone("proposer") / "data").symlink_to("/etc/hostname")
    world.write("proposer", {"jobs/c.yaml": job_yaml("c", ["cat", "data"])})
    world.git("proposer", "add", "-A")
    world.git("proposer", "commit", "-qm", "read data", who=world.alice)
    world.git("proposer", "push", "-q", "origin", "p")
    world.signed_merge("p")
    job = _jobs(world)["jobs/c.yaml"]
    assert job["status"] == "rejected"
    assert "holds a symlink data -> /etc/hostname, which points outside the workspace" in str(
        job["reason"]
    )
    assert world.events("started") == []


# -- one judge: check says what the runner will do -----------------------------------------


def test_check_denies_an_unsigned_proposal_under_require_signed_proposals(world: World) -> None:
    approvers = [world.bob.approver_entry(), world.carol.approver_entry()]
    world.setup(policy_yaml(approvers, [ECHO_RULE], require_signed_proposals=True))
    world.propose("p", JOB, who=world.alice)
    result = world.mg("check", "origin/p", "--json", where="checker")
    assert result.code == 1
    (f,) = result.json()["files"]
    assert (
        f["state"] == "denied"
        and "require_signed_proposals" in f["reason"]
        and "unsigned" in f["reason"]
    )


def test_check_exits_2_for_an_invalid_policy_change_and_run_says_why(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE], policy_approvals_required=1))
    world.propose(
        "bad", {"policy/policy.yaml": "version: 1\napprovers: []\ncomands: []\n"}, who=world.alice
    )
    result = world.mg("check", "origin/bad", where="checker")
    assert result.code == 2
    assert (
        "invalid   policy/policy.yaml: the new policy is invalid: field 'comands': unknown key"
        in result.out.replace("invalid  ", "invalid   ")
    )
    approve = world.mg("approve", "origin/bad", "--merge", where="checker")
    assert approve.code != 0
    world.signed_merge("bad")
    run = world.mg("run", "--once")
    assert (
        "policy    rejected (" in run.out
        and "the new policy is invalid: field 'comands'" in run.out
    )


def test_check_exits_2_for_a_deleted_policy(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE], policy_approvals_required=1))
    world.fetch("proposer")
    world.git("proposer", "checkout", "-q", "-B", "gone", "origin/approved")
    world.git("proposer", "rm", "-q", "policy/policy.yaml")
    world.git("proposer", "commit", "-qm", "no policy", who=world.alice)
    world.git("proposer", "push", "-q", "origin", "gone")
    result = world.mg("check", "origin/gone", "--json", where="checker")
    assert result.code == 2
    (f,) = result.json()["files"]
    assert f["state"] == "invalid" and "no policy/policy.yaml" in f["reason"]


# -- bypass 2: key lifetimes never undo an adopted policy --------------------------------------


def test_policy_change_that_adds_a_key_lifetime_without_runners_is_rejected(world: World) -> None:
    """Without runner-signed records, a fresh clone judges past changes at today's time: once the
    keys that adopted a change expired, the removed keys would come back. Lifetimes therefore need
    `runners`."""
    approvers = [world.bob.approver_entry(), world.carol.approver_entry()]
    world.setup(policy_yaml(approvers, [ECHO_RULE], policy_approvals_required=1))
    bob = world.bob.approver_entry()
    expiring = {
        "name": "bob",
        "email": bob["email"],
        "keys": [{"key": bob["key"], "valid_before": "2030-01-01T00:00:00Z"}],
    }
    world.propose(
        "pol",
        {
            "policy/policy.yaml": policy_yaml(
                [expiring, world.carol.approver_entry()], [ECHO_RULE], policy_approvals_required=1
            )
        },
        who=world.alice,
    )
    check = world.mg("check", "origin/pol", where="checker")
    assert check.code == 2
    assert "key of bob has a lifetime (valid_before) but the policy lists no runners" in check.out
    world.signed_merge("pol", world.carol)
    (change,) = world.run_once().json()["policy_changes"]
    assert change["status"] == "rejected"
    assert "has a lifetime (valid_before) but the policy lists no runners" in change["reason"]


def test_trust_root_with_an_openpgp_expiry_and_no_runners_is_a_configuration_error(
    world: World,
) -> None:
    import shutil
    import tempfile

    from tests.helpers.keys import make_gpg_key, stop_gpg_agent

    home = Path(tempfile.mkdtemp(prefix="mg-gpg-"))
    try:
        dave = make_gpg_key(home, "dave", "dave@example.com", expire="1y")
        dave_entry = {"name": "dave", "email": "dave@example.com", "key": dave.public_armored}
        world.setup(
            policy_yaml(
                [world.bob.approver_entry(), dave_entry], [ECHO_RULE], policy_approvals_required=1
            )
        )
        result = world.run_once()
        assert result.code == 2
        assert (
            "key of dave has a lifetime (an OpenPGP expiry) but the policy lists no runners"
            in result.err
        )
    finally:
        stop_gpg_agent(home)
        shutil.rmtree(home, ignore_errors=True)


# -- bypass 5: a veto on approved before the claim always wins ---------------------------------


def _veto_merge(world: World, path: str, blob: str, who: Person) -> str:
    """A veto made as a merge commit: empty relative to its first parent (merge -s ours), signed."""
    world.fetch("approver")
    world.git("approver", "checkout", "-q", "-B", "side", "origin/approved")
    world.git("approver", "commit", "-q", "--allow-empty", "-m", "side", who=who)
    world.git("approver", "checkout", "-q", "-B", "approved", "origin/approved")
    world.git(
        "approver",
        "merge",
        "-q",
        "-S",
        "--no-ff",
        "-s",
        "ours",
        "side",
        "-m",
        "veto",
        "-m",
        f"Mergegate-Veto: {path} {blob}",
        who=who,
        sign=who.key,
    )
    world.git("approver", "push", "-q", "origin", "approved")
    return world.git("approver", "rev-parse", "HEAD")


def test_veto_made_as_a_merge_is_honoured_by_later_passes(world: World) -> None:
    world.setup(
        policy_yaml([world.bob.approver_entry(), world.carol.approver_entry()], [ECHO_RULE])
    )
    world.propose("p", JOB, who=world.alice)
    _veto_merge(world, "jobs/j.yaml", world.blob("p", "jobs/j.yaml"), world.carol)
    assert world.run_once().code == 0  # this pass walks the veto
    world.signed_merge("p", world.bob)
    job = _jobs(world)["jobs/j.yaml"]  # a later pass must still honour it
    assert job["status"] == "vetoed"
    assert "vetoed by carol" in str(job["reason"])
    assert world.events("started") == []


def test_verify_reports_a_job_started_after_a_veto_of_it(world: World) -> None:
    import json

    from mergegate.audit.log import record_hash

    world.setup(
        policy_yaml([world.bob.approver_entry(), world.carol.approver_entry()], [ECHO_RULE])
    )
    world.propose("p", JOB, who=world.alice)
    blob = world.blob("p", "jobs/j.yaml")
    world.veto_commit("jobs/j.yaml", blob, world.carol)
    world.git("approver", "push", "-q", "origin", "approved")
    merge = world.signed_merge("p", world.bob)
    assert _jobs(world)["jobs/j.yaml"]["status"] == "vetoed"
    assert world.mg("verify").code == 0
    # A well-chained `started` record for the vetoed revision, as a runner that ignored the veto
    # would write.
    records = world.records()
    fake = {
        "event": "started",
        "job": "j",
        "path": "jobs/j.yaml",
        "blob": blob,
        "commit": merge,
        "runner": "rogue",
        "time": "2026-01-01T00:00:00Z",
        "run_id": "r1",
        "seq": len(records) + 1,
        "prev": records[-1]["hash"],
    }
    fake["hash"] = record_hash(fake)
    log = world.checkout_audit("mallory") / "audit/log-000001.jsonl"
    log.write_text(log.read_text() + json.dumps(fake, sort_keys=True, separators=(",", ":")) + "\n")
    world.commit_audit("mallory", "audit")
    result = world.mg("verify")
    assert result.code == 3
    assert "started jobs/j.yaml at" in result.err and "vetoed it before its approval" in result.err


def _forge_started(world: World, *, path: str, blob: str, commit: str, judged: str) -> None:
    """A well-chained `started` record in an audit commit saying its runner judged approved at
    `judged`."""
    import json

    from mergegate.audit.log import record_hash

    records = world.records()
    fake = {
        "event": "started",
        "job": "j",
        "path": path,
        "blob": blob,
        "commit": commit,
        "runner": "rogue",
        "time": "2026-01-01T00:00:00Z",
        "run_id": "r1",
        "seq": len(records) + 1,
        "prev": records[-1]["hash"],
    }
    fake["hash"] = record_hash(fake)
    log = world.checkout_audit("mallory") / "audit/log-000001.jsonl"
    log.write_text(log.read_text() + json.dumps(fake, sort_keys=True, separators=(",", ":")) + "\n")
    world.git("mallory", "commit", "-q", "-am", "started", "-m", f"Mergegate-Approved: {judged}")
    world.git("mallory", "push", "-q", "origin", "HEAD:refs/heads/mergegate/audit")


def _veto_after_merge(world: World) -> tuple[str, str, str]:
    """Job j approved by bob's merge, then vetoed by carol on approved, with no pass in between."""
    world.setup(
        policy_yaml([world.bob.approver_entry(), world.carol.approver_entry()], [ECHO_RULE])
    )
    world.propose(
        "first", {"jobs/first.yaml": job_yaml("first", ["echo", "first"])}, who=world.alice
    )
    world.signed_merge("first", world.bob)
    assert world.run_once().code == 0  # the audit branch holds first's records
    world.propose("p", JOB, who=world.alice)
    blob = world.blob("p", "jobs/j.yaml")
    merge = world.signed_merge("p", world.bob)
    veto = world.veto_commit("jobs/j.yaml", blob, world.carol)
    world.git("approver", "push", "-q", "origin", "approved")
    return blob, merge, veto


def test_verify_reports_a_job_started_after_a_veto_its_runner_had_seen(world: World) -> None:
    blob, merge, veto = _veto_after_merge(world)
    # The runner says it judged approved at the veto's commit, and still claimed the vetoed
    # revision.
    _forge_started(world, path="jobs/j.yaml", blob=blob, commit=merge, judged=veto)
    result = world.mg("verify")
    assert result.code == 3
    assert (
        f"vetoed it before the claim (its runner had judged approved at {veto[:12]})" in result.err
    )


def test_verify_accepts_a_start_that_raced_a_later_veto(world: World) -> None:
    blob, merge, _ = _veto_after_merge(world)
    # Judged at the merge, before the veto landed: a race the runner cannot lose more narrowly than
    # this.
    _forge_started(world, path="jobs/j.yaml", blob=blob, commit=merge, judged=merge)
    result = world.mg("verify")
    assert result.code == 0, result.err
