"""Records live on mergegate/audit: the runner never writes approved, and the audit branch only
grows."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable

import pytest

from mergegate.audit.log import record_hash
from tests.helpers.keys import make_ssh_key
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml

SH_RULE = {"program": "sh", "args_prefix": ["-c"]}


def _gate(world: World, **extra: object) -> str:
    return world.setup(
        policy_yaml(
            [world.bob.approver_entry(), world.carol.approver_entry()],
            [ECHO_RULE, SH_RULE],
            **extra,
        )
    )


def _run_job(world: World, name: str = "j", *args: str) -> str:
    world.propose(name, {f"jobs/{name}.yaml": job_yaml(name, ["echo", name])}, who=world.alice)
    merge = world.signed_merge(name)
    result = world.run_once(*args)
    assert result.code == 0, result.err
    assert [j["status"] for j in result.json()["jobs"]] == ["succeeded"]
    return merge


def _remote_ref(world: World, ref: str) -> str:
    return world.git("admin", "ls-remote", "origin", ref)


def _append_record(world: World, fields: dict[str, object], *, where: str = "mallory") -> str:
    """A well-chained record appended to the audit branch, as anyone who can push to it could."""
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
    log = world.checkout_audit(where) / "audit/log-000001.jsonl"
    log.write_text(
        log.read_text() + json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
    )
    return world.commit_audit(where, "append")


# -- people's clones stay simple ---------------------------------------------------


def test_git_pull_after_a_pass_is_a_fast_forward_and_the_next_job_runs(world: World) -> None:
    """The sequence that broke 0.1: merge, run, a second merge on the local approved, git pull,
    push, run."""
    _gate(world)
    bob = world.clone("bob")
    for key, value in (
        ("user.name", "bob"),
        ("user.email", "bob@example.com"),
        ("gpg.format", "ssh"),
        ("user.signingkey", str(world.bob.key.private)),
        ("pull.rebase", "false"),
    ):
        world.git(bob, "config", key, value)
    world.propose("one", {"jobs/one.yaml": job_yaml("one", ["echo", "1"])}, who=world.alice)
    world.git(bob, "fetch", "-q", "origin")
    world.git(bob, "checkout", "-q", "-b", "approved", "origin/approved")
    world.git(bob, "merge", "-q", "-S", "--no-ff", "-m", "merge one", "origin/one", who=world.bob)
    world.git(bob, "push", "-q", "origin", "approved")
    assert world.run_once().code == 0
    # bob goes on from his local approved, fetching only the next proposal.
    world.propose("two", {"jobs/two.yaml": job_yaml("two", ["echo", "2"])}, who=world.alice)
    world.git(bob, "fetch", "-q", "origin", "two")
    world.git(bob, "merge", "-q", "-S", "--no-ff", "-m", "merge two", "origin/two", who=world.bob)
    merged = world.git(bob, "rev-parse", "HEAD")
    pulled = world.git(bob, "pull", "origin", "approved", who=world.bob)
    assert world.git(bob, "rev-parse", "HEAD") == merged, (
        pulled
    )  # nothing to merge: the runner never wrote approved
    assert (
        world.git(bob, "rev-list", "--merges", "--count", "origin/approved..HEAD") == "1"
    )  # only bob's own merge
    world.git(bob, "push", "-q", "origin", "approved")
    second = world.run_once()
    assert second.code == 0, second.err
    assert [(j["job"], j["status"]) for j in second.json()["jobs"]] == [("two", "succeeded")]
    verified = world.mg("verify", where="auditor")
    assert verified.code == 0, verified.err
    assert verified.out.splitlines()[-1].startswith("ok:")


def test_the_runner_never_moves_approved_and_needs_no_write_access_to_it(world: World) -> None:
    _gate(world)
    world.propose(
        "p",
        {"jobs/a.yaml": job_yaml("a", ["echo", "a"]), "jobs/b.yaml": job_yaml("b", ["echo", "b"])},
        who=world.alice,
    )
    world.signed_merge("p")
    world.propose(
        "q", {"jobs/c.yaml": job_yaml("c", ["rm", "x"])}, who=world.alice
    )  # denied: a rejected record
    world.signed_merge("q")
    # The remote refuses every update of approved from now on: a runner that needed it would fail.
    hook = world.remote / "hooks" / "pre-receive"
    hook.write_text(
        '#!/bin/sh\nwhile read old new ref; do [ "$ref" = refs/heads/approved ] && '
        "{ echo 'approved is protected' >&2; exit 1; }; done; exit 0\n"
    )
    hook.chmod(0o755)
    before = _remote_ref(world, "refs/heads/approved")
    result = world.run_once()
    assert result.code == 1, result.err
    assert {j["job"]: j["status"] for j in result.json()["jobs"]} == {
        "a": "succeeded",
        "b": "succeeded",
        "c": "rejected",
    }
    assert _remote_ref(world, "refs/heads/approved") == before
    assert _remote_ref(world, "refs/heads/mergegate/audit")
    assert [r["event"] for r in world.records()].count("started") == 2
    world.fetch("admin")
    assert world.git("admin", "ls-tree", "-r", "--name-only", "origin/approved", "audit/") == ""


def test_two_runners_creating_the_audit_branch_at_once_make_one_chain(world: World) -> None:
    _gate(world)
    world.propose("p", {"jobs/j.yaml": job_yaml("j", ["echo", "x"])}, who=world.alice)
    world.signed_merge("p")
    # Both runners' first pushes (creations of mergegate/audit) wait here together.
    hook = world.remote / "hooks" / "pre-receive"
    hook.write_text(
        '#!/bin/sh\nwhile read old new ref; do case "$old $ref" in '
        "0000000000000000000000000000000000000000\\ refs/heads/mergegate/audit) sleep 2;; esac; "
        "done; exit 0\n"
    )
    hook.chmod(0o755)
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "mergegate", "run", "--once", "--json", "--runner-name", name],
            cwd=world.clone(name),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for name in ("r1", "r2")
    ]
    results = [p.communicate(timeout=120) for p in procs]
    outcomes = sorted(
        j["status"] + ":" + str(j["reason"]) for out, _ in results for j in json.loads(out)["jobs"]
    )
    assert outcomes in (
        ["claimed:claimed by r1", "succeeded:None"],
        ["claimed:claimed by r2", "succeeded:None"],
    ), results
    assert sorted(p.returncode for p in procs) == [
        0,
        0,
    ]  # losing a race is not a failure (issue 9, defect 8)
    tip = world.audit_tip()
    assert len(world.git("admin", "rev-list", "--max-parents=0", tip).splitlines()) == 1
    assert world.git("admin", "rev-list", "--merges", "--count", tip) == "0"
    assert [r["event"] for r in world.records()].count("started") == 1
    assert world.mg("audit", "verify", where="r1").code == 0
    assert world.mg("audit", "verify", where="r2").code == 0


def test_a_runner_rebases_onto_records_another_runner_pushed_meanwhile(world: World) -> None:
    """While runner a's job runs, runner b pushes records: a's push is refused, a fetches, checks
    b's commit, rebases."""
    _gate(world)
    other = world.clone("runner-b")
    nested = f"{sys.executable} -m mergegate run --once --runner-name b --repo {other}"
    world.propose("p", {"jobs/a1.yaml": job_yaml("a1", ["sh", "-c", nested])}, who=world.alice)
    world.signed_merge("p")
    result = world.run_once("--runner-name", "a")
    assert result.code == 0, result.err
    records = world.records()
    assert [(r["event"], r["runner"]) for r in records] == [
        ("started", "a"),
        ("scanned", "b"),
        ("finished", "a"),
        ("scanned", "a"),
    ]
    tip = world.audit_tip()
    assert world.git("admin", "rev-list", "--merges", "--count", tip) == "0"
    assert world.mg("audit", "verify").code == 0
    assert world.mg("verify", where="auditor").code == 0


def test_a_veto_merged_while_an_earlier_job_runs_stops_the_next_claim(world: World) -> None:
    """Before each claim the runner looks at both branches again: a veto already on approved
    wins."""
    _gate(world)
    a2 = job_yaml("a2", ["echo", "two"])
    blob = subprocess.run(
        ["git", "hash-object", "--stdin"], input=a2, capture_output=True, text=True, check=True
    ).stdout.strip()
    vetoer = world.clone("carol")
    git = (
        f"git -C {vetoer} -c user.name=carol -c user.email=carol@example.com -c gpg.format=ssh "
        f"-c user.signingkey={world.carol.key.private}"
    )
    # Job a1 (it runs first, in path order) has carol veto a2 on approved while it runs.
    script = (
        f"{git} fetch -q origin && {git} checkout -q -B approved origin/approved && "
        f"{git} commit -q --allow-empty -S -m veto -m 'Mergegate-Veto: jobs/a2.yaml {blob}' && "
        f"{git} push -q origin approved && sleep 1.5"
    )
    world.propose(
        "p",
        {"jobs/a1.yaml": job_yaml("a1", ["sh", "-c", script]), "jobs/a2.yaml": a2},
        who=world.alice,
    )
    world.signed_merge("p")
    result = world.run_once()
    jobs = {j["job"]: j for j in result.json()["jobs"]}
    assert jobs["a1"]["status"] == "succeeded", (jobs, result.err)
    assert jobs["a2"]["status"] == "vetoed" and jobs["a2"]["reason"].startswith(
        "vetoed by carol in commit "
    ), jobs
    assert [r["path"] for r in world.events("vetoed")] == ["jobs/a2.yaml"]
    assert [r["path"] for r in world.events("started")] == ["jobs/a1.yaml"]
    assert world.mg("verify", where="auditor").code == 0


# -- tampering with the audit branch ------------------------------------------------


def _edit_log(change: Callable[[list[str]], list[str]]) -> Callable[[World], str]:
    def tamper(world: World) -> str:
        log = world.checkout_audit() / "audit/log-000001.jsonl"
        log.write_text("".join(change(log.read_text().splitlines(keepends=True))))
        return world.commit_audit(message="fix records")

    return tamper


def _delete_file(world: World) -> str:
    world.checkout_audit()
    world.git("mallory", "rm", "-q", "audit/log-000001.jsonl")
    return world.commit_audit(message="drop the log")


def _merge_commit(world: World) -> str:
    clone = world.checkout_audit()
    tip = world.git(clone, "rev-parse", "HEAD")
    approved = world.git(
        clone, "log", "-1", "--format=%(trailers:key=Mergegate-Approved,valueonly)"
    ).strip()
    side = world.git(
        clone,
        "commit-tree",
        f"{tip}^{{tree}}",
        "-p",
        f"{tip}~1",
        "-m",
        f"side\n\nMergegate-Approved: {approved}",
    )
    merge = world.git(
        clone,
        "commit-tree",
        f"{tip}^{{tree}}",
        "-p",
        tip,
        "-p",
        side,
        "-m",
        f"merge\n\nMergegate-Approved: {approved}",
    )
    world.git(clone, "push", "-q", "origin", f"{merge}:refs/heads/mergegate/audit")
    return merge


def _other_file(world: World) -> str:
    (world.checkout_audit() / "README.md").write_text("hello\n")
    return world.commit_audit(message="add a readme")


def _evidence_misnamed(world: World) -> str:
    target = world.checkout_audit() / "audit/evidence" / ("0" * 64 + ".json")
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("{}\n")
    # Appending a copy of a record line keeps the log an append (the shape rule), so the evidence
    # rule decides.
    log = world.clone("mallory") / "audit/log-000001.jsonl"
    log.write_text(log.read_text() + log.read_text().splitlines(keepends=True)[-1])
    return world.commit_audit(message="evidence")


TAMPERING = {
    "edit": (
        _edit_log(lambda lines: [line.replace('"exit_code":0', '"exit_code":1') for line in lines]),
        "rewrites existing audit records in audit/log-000001.jsonl",
    ),
    "truncate": (
        _edit_log(lambda lines: lines[:1]),
        "rewrites existing audit records in audit/log-000001.jsonl",
    ),
    "reorder": (
        _edit_log(lambda lines: [lines[1], lines[0], *lines[2:]]),
        "rewrites existing audit records in audit/log-000001.jsonl",
    ),
    "delete": (_delete_file, "deletes audit file audit/log-000001.jsonl"),
    "merge": (_merge_commit, "is a merge (the audit branch is linear)"),
    "other file": (_other_file, "touches README.md: audit commits may only append"),
    "misnamed evidence": (
        _evidence_misnamed,
        f"adds evidence file audit/evidence/{'0' * 64}.json, whose bytes do not hash to its name",
    ),
}


@pytest.mark.parametrize("case", sorted(TAMPERING))
def test_tampering_with_the_audit_branch_stops_every_command(world: World, case: str) -> None:
    tamper, reason = TAMPERING[case]
    _gate(world)
    _run_job(world)
    assert world.mg("verify", where="auditor").code == 0
    bad = tamper(world)
    world.propose("k", {"jobs/k.yaml": job_yaml("k", ["echo", "k"])}, who=world.alice)
    world.signed_merge("k")
    expected = f"audit commit {bad[:12]} on mergegate/audit {reason}"
    for args, where in (
        (["run", "--once"], "runner"),
        (["status"], "runner"),
        (["audit", "verify"], "runner"),
        (["verify"], "auditor"),
        (["verify"], "fresh"),
    ):
        result = world.mg(*args, where=where)
        assert result.code == 3, (args, where, result.out, result.err)
        assert expected in result.err, (args, where, result.err)
    assert "jobs/k.yaml" not in [r["path"] for r in world.events("started")]


def test_a_rewrite_a_later_commit_undoes_is_named_though_the_tip_reads_clean(world: World) -> None:
    """audit verify proves most versions of a log file by hashing prefixes of the last one
    (audit_branch.Tips):
    a version that edited records, or cut them and a later commit put them back, is no prefix, or is
    shorter than the version before it, and is read and named as before."""
    _gate(world)
    _run_job(world)
    _run_job(world, "j2")
    log = world.checkout_audit() / "audit/log-000001.jsonl"
    original = log.read_text()
    log.write_text(original.replace('"exit_code":0', '"exit_code":1', 1))
    edited = world.commit_audit(message="edit")
    log.write_text(original)
    world.commit_audit(message="restore")
    result = world.mg("audit", "verify")
    assert (
        result.code == 3
        and f"audit commit {edited[:12]} on mergegate/audit rewrites existing audit records"
        in result.err
    ), result.err
    # A cut that the next commit restores: both versions are prefixes of the tip's file, the cut one
    # shorter.
    world.git("mallory", "push", "-q", "-f", "origin", f"{edited}~1:refs/heads/mergegate/audit")
    log = world.checkout_audit() / "audit/log-000001.jsonl"
    log.write_text("".join(original.splitlines(keepends=True)[:2]))
    cut = world.commit_audit(message="cut")
    log.write_text(original)
    world.commit_audit(message="restore")
    result = world.mg("audit", "verify", where="fresh")
    assert (
        result.code == 3
        and f"audit commit {cut[:12]} on mergegate/audit rewrites existing audit records"
        in result.err
    ), result.err


def test_a_file_number_skipped_and_filled_in_later_is_named(world: World) -> None:
    """audit verify follows the file numbers commit by commit from the root (no tree listing per
    commit):
    a commit adding log-000003.jsonl before log-000002.jsonl exists is named, though the tip is
    numbered 1..3."""
    _gate(world)
    _run_job(world)
    clone = world.checkout_audit()
    line = (clone / "audit/log-000001.jsonl").read_text().splitlines(keepends=True)[-1]
    (clone / "audit/log-000003.jsonl").write_text(line)
    skipped = world.commit_audit(message="skip a number")
    (clone / "audit/log-000002.jsonl").write_text(line)
    world.commit_audit(message="fill it in")
    result = world.mg("audit", "verify")
    assert result.code == 3, result.out + result.err
    assert (
        f"audit commit {skipped[:12]} on mergegate/audit audit log files are not numbered 1..2: "
        "audit/log-000003.jsonl" in result.err
    ), result.err


def test_an_unsigned_audit_commit_is_tampering_when_runners_are_listed(world: World) -> None:
    key = make_ssh_key(world.tmp / "keys", "runner")
    _gate(world, runners=[{"name": "ci", "key": key.public_line}])
    signing = ("--signing-key", str(key.private), "--runner-name", "ci")
    _run_job(world, "j", *signing)
    # A record well chained, with a valid trailer: only the signature is missing.
    bad = _append_record(world, {"event": "rejected", "path": "jobs/x.yaml", "reason": "forged"})
    expected = (
        f"audit commit {bad[:12]} on mergegate/audit is not signed by a runner in "
        "policy/policy.yaml"
    )
    world.propose("k", {"jobs/k.yaml": job_yaml("k", ["echo", "k"])}, who=world.alice)
    world.signed_merge("k")
    for args, where in (
        (["run", "--once", *signing], "runner"),
        (["status"], "runner"),
        (["audit", "verify"], "runner"),
        (["verify"], "auditor"),
    ):
        result = world.mg(*args, where=where)
        assert result.code == 3, (args, result.err)
        assert expected in result.err and "(unsigned)" in result.err, (args, result.err)
    assert [r["path"] for r in world.events("started")] == ["jobs/j.yaml"]


def test_a_force_push_of_the_audit_branch_is_seen_by_a_clone_that_saw_the_old_tip(
    world: World,
) -> None:
    _gate(world)
    _run_job(world, "j")
    _run_job(world, "k")
    assert world.mg("verify", where="auditor").code == 0
    # Rewind the audit branch by one pass: k's records are gone, and so would be the reason not to
    # run it again.
    tip = world.audit_tip()
    older = world.git("admin", "rev-parse", f"{tip}~2")
    world.git("admin", "push", "-q", "-f", "origin", f"{older}:refs/heads/mergegate/audit")
    for args, where in (
        (["run", "--once"], "runner"),
        (["status"], "runner"),
        (["audit", "verify"], "runner"),
        (["verify"], "auditor"),
    ):
        result = world.mg(*args, where=where)
        assert result.code == 3, (args, where, result.err)
        assert (
            f"the audit branch mergegate/audit was rewritten: this clone last saw {tip[:12]}"
            in result.err
        ), (args, where, result.err)
    assert [r["path"] for r in world.events("started")] == ["jobs/j.yaml"]
    # Deleting the branch is a rewrite too.
    world.git("admin", "push", "-q", "origin", ":refs/heads/mergegate/audit")
    result = world.mg("run", "--once")
    assert result.code == 3 and "was deleted" in result.err


def test_changing_an_evidence_file_is_tampering(world: World) -> None:
    _gate(world)
    _unsigned_push(world, 3)
    assert world.run_once().code == 0
    clone = world.checkout_audit()
    (evidence,) = (clone / "audit/evidence").iterdir()
    evidence.write_text(evidence.read_text().replace("file-0", "file-9"))
    bad = world.commit_audit(message="evidence")
    result = world.run_once()
    assert result.code == 3
    assert (
        f"audit commit {bad[:12]} on mergegate/audit changes evidence file "
        f"audit/evidence/{evidence.name}" in result.err
    )


# -- everything reads both ------------------------------------------------------------


def test_verify_from_a_fresh_clone_rejudges_with_records_from_the_audit_branch(
    world: World,
) -> None:
    _gate(world)
    world.propose("p", {"jobs/ok.yaml": job_yaml("ok", ["echo", "ok"])}, who=world.alice)
    world.signed_merge("p")
    world.propose("q", {"jobs/no.yaml": job_yaml("no", ["echo", "no"])}, who=world.alice)
    unsigned = world.merge("q", who=world.bob, sign=None)
    assert world.run_once().code == 1
    report = world.mg("verify", "--json", where="auditor")
    assert report.code == 0, report.out
    data = report.json()
    assert data["ok"] is True and data["records"] == len(world.records())
    assert {j["path"]: j["approved"] for c in data["commits"] for j in c["jobs"]} == {
        "jobs/ok.yaml": True,
        "jobs/no.yaml": False,
    }
    # A forged, well-chained `started` for the rejected job, on the audit branch.
    _append_record(
        world,
        {
            "event": "started",
            "job": "no",
            "path": "jobs/no.yaml",
            "blob": world.blob("approved", "jobs/no.yaml"),
            "commit": unsigned,
            "run_id": "f" * 32,
        },
    )
    assert world.mg("audit", "verify", where="fresh").code == 0  # its shape is fine
    result = world.mg("verify", where="fresh")
    assert result.code == 3
    assert "started jobs/no.yaml" in result.err and "without a valid approval" in result.err


def test_no_fetch_and_a_repository_without_remote_keep_working(world: World) -> None:
    _gate(world)
    _run_job(world, "j")
    # --no-fetch reads the remote-tracking refs as the last fetch left them.
    world.propose("k", {"jobs/k.yaml": job_yaml("k", ["echo", "k"])}, who=world.alice)
    world.signed_merge("k")
    stale = world.run_once("--no-fetch")
    assert stale.code == 0 and stale.json()["jobs"] == []
    assert world.mg("status", "--no-fetch").code == 0
    # A bare copy without any remote: both branches are local, the runner appends to
    # mergegate/audit.
    local = world.tmp / "local.git"
    subprocess.run(["git", "clone", "-q", "--mirror", str(world.remote), str(local)], check=True)
    subprocess.run(["git", "-C", str(local), "remote", "remove", "origin"], check=True)
    before = subprocess.run(
        ["git", "-C", str(local), "rev-parse", "approved"], capture_output=True, text=True
    ).stdout
    proc = subprocess.run(
        [sys.executable, "-m", "mergegate", "run", "--once", "--json", "--repo", str(local)],
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert [(j["job"], j["status"]) for j in json.loads(proc.stdout)["jobs"]] == [
        ("k", "succeeded")
    ]
    assert (
        subprocess.run(
            ["git", "-C", str(local), "rev-parse", "approved"], capture_output=True, text=True
        ).stdout
        == before
    )
    for args in (["status"], ["verify"], ["audit", "verify"]):
        done = subprocess.run(
            [sys.executable, "-m", "mergegate", *args, "--repo", str(local)],
            capture_output=True,
            text=True,
        )
        assert done.returncode == 0, (args, done.stderr)


def test_init_writes_no_records_on_approved(world: World) -> None:
    gate = world.clone("admin")
    world.git(gate, "config", "user.name", "bob")
    world.git(gate, "config", "user.email", "bob@example.com")
    result = world.mg("init", "--key", world.bob.key.public_line, where="admin")
    assert result.code == 0, result.err
    assert world.git(gate, "ls-tree", "-r", "--name-only", "approved").splitlines() == [
        "jobs/README.md",
        "policy/policy.yaml",
    ]
    assert world.git(gate, "branch", "--list", "mergegate/audit") == ""


# -- 0.1 gates and ordinary audit/ files ------------------------------------------------


def test_a_gate_with_records_on_approved_gets_a_one_line_error(world: World) -> None:
    old = {
        "event": "scanned",
        "job": None,
        "path": None,
        "blob": None,
        "commit": "0" * 40,
        "runner": "r",
        "time": "2026-01-01T00:00:00.000000Z",
        "seq": 1,
        "prev": "0" * 64,
    }
    old["hash"] = record_hash(old)
    _gate_files = {"audit/log-000001.jsonl": json.dumps(old) + "\n"}
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]), files=_gate_files)
    for args in (["run", "--once"], ["status"], ["verify"], ["audit", "verify"]):
        result = world.mg(*args)
        assert result.code == 2, (args, result.err)
        assert result.err.splitlines()[0] == (
            "error: approved holds audit records: records now live on "
            "the branch mergegate/audit, not on approved (audit/log-000001.jsonl)"
        )
    assert world.records() == []


def test_audit_files_on_approved_are_ordinary_content_once_the_audit_branch_exists(
    world: World,
) -> None:
    """No push to approved can stop the runner: a file named like a log is just a file (unapproved
    until merged)."""
    _gate(world)
    _run_job(world, "j")
    approver = world.checkout_approved("approver")
    (approver / "audit").mkdir()
    (approver / "audit/log-000001.jsonl").write_text("{}\n")
    world.git(approver, "add", "-A")
    world.git(approver, "commit", "-qm", "stray", who=world.mallory)
    world.git(approver, "push", "-q", "origin", "approved")
    world.propose(
        "k",
        {"jobs/k.yaml": job_yaml("k", ["sh", "-c", "cat audit/log-000001.jsonl"])},
        who=world.alice,
    )
    world.signed_merge("k")
    (job,) = world.run_once().json()["jobs"]
    assert job["status"] == "rejected" and "audit/log-000001.jsonl (changed by" in job["reason"]
    # It is content like any other: a signed merge back to its last approved version (no such
    # file) clears it. (Building on the stray bytes would not: issue 8, bypass 6.)
    world.fetch("proposer")
    world.git("proposer", "checkout", "-q", "-B", "m", "origin/approved")
    world.git("proposer", "rm", "-q", "audit/log-000001.jsonl")
    world.write(
        "proposer", {"jobs/m.yaml": job_yaml("m", ["sh", "-c", "ls audit 2>/dev/null; echo clean"])}
    )
    world.git("proposer", "add", "-A")
    world.git("proposer", "commit", "-qm", "m", who=world.alice)
    world.git("proposer", "push", "-q", "-f", "origin", "m")
    world.signed_merge("m")
    (job,) = world.run_once().json()["jobs"]
    assert job["status"] == "succeeded", job
    assert world.events("finished")[-1]["stdout_tail"] == "clean\n"


# -- bounded records ------------------------------------------------------------------


def _unsigned_push(world: World, count: int) -> str:
    """An unsigned commit on approved adding `count` files, built with fast-import (no working-tree
    files)."""
    clone = world.checkout_approved("pusher")
    tip = world.git(clone, "rev-parse", "HEAD")
    stream = [
        "commit refs/heads/approved\ncommitter mallory <mallory@example.com> 1700000000 "
        f"+0000\ndata 4\nbulk\nfrom {tip}\n"
    ]
    stream += [
        f"M 100644 inline vendor/file-{i}.txt\ndata {len(str(i)) + 1}\n{i}\n" for i in range(count)
    ]
    subprocess.run(
        ["git", "-C", str(clone), "fast-import", "--quiet", "--force"],
        input="".join(stream).encode(),
        check=True,
    )
    world.git(clone, "push", "-q", "origin", "approved")
    return world.git(clone, "rev-parse", "refs/heads/approved")


def test_a_pass_after_an_unsigned_5000_file_push_writes_a_small_scanned_record(
    world: World,
) -> None:
    _gate(world)
    _run_job(world, "j")
    push = _unsigned_push(world, 5000)
    first = world.run_once()
    assert first.code == 0, first.err

    def last_scanned_line() -> str:
        world.fetch("admin")
        log = world.git("admin", "show", "origin/mergegate/audit:audit/log-000001.jsonl")
        return [line for line in log.splitlines() if '"event":"scanned"' in line][-1]

    line = last_scanned_line()
    assert len(line.encode()) < 4096
    scanned = json.loads(line)
    assert scanned["unapproved_count"] == 5000 and scanned["commit"] == push
    evidence = world.git(
        "admin", "ls-tree", "--name-only", "origin/mergegate/audit", "audit/evidence/"
    ).splitlines()
    assert evidence == [f"audit/evidence/{scanned['unapproved_file']}.json"]
    # The next pass resumes from the map by reference: the new job is still blocked by the 5,000
    # files.
    world.propose(
        "k", {"jobs/k.yaml": job_yaml("k", ["echo", "k"])}, who=world.alice, base="origin/approved"
    )
    world.signed_merge("k")
    (job,) = world.run_once().json()["jobs"]
    assert job["status"] == "rejected" and "vendor/file-0.txt (changed by" in job["reason"]
    again = json.loads(last_scanned_line())
    assert len(last_scanned_line().encode()) < 4096
    assert (
        again["unapproved_file"] == scanned["unapproved_file"]
    )  # the same map: the same file, not a new copy
    assert (
        world.git(
            "admin", "ls-tree", "--name-only", "origin/mergegate/audit", "audit/evidence/"
        ).splitlines()
        == evidence
    )
    assert world.mg("audit", "verify").code == 0
    assert world.mg("verify", where="auditor").code == 0


def test_plain_git_reads_the_records(world: World) -> None:
    """As docs/audit-format.md shows: git show mergegate/audit:audit/log-000001.jsonl."""
    _gate(world)
    merge = _run_job(world, "j")
    clone = world.clone("reader")
    world.git(clone, "fetch", "-q", "origin", "mergegate/audit:mergegate/audit")
    text = world.git(clone, "show", "mergegate/audit:audit/log-000001.jsonl")
    events = [json.loads(line)["event"] for line in text.splitlines()]
    assert events == ["started", "finished", "scanned"]
    trailer = world.git(
        clone,
        "log",
        "-1",
        "--format=%(trailers:key=Mergegate-Approved,valueonly)",
        "mergegate/audit",
    ).strip()
    assert trailer == merge


# -- red team F6: a branch under the audit branch's name blocks its creation -------------


def test_a_branch_under_the_audit_name_is_named_in_the_error(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    world.git("admin", "push", "-q", "origin", "origin/approved:refs/heads/mergegate/audit/x")
    world.propose("p", {"jobs/j.yaml": job_yaml("j", ["echo", "ran"])}, who=world.alice)
    world.signed_merge("p", world.bob)
    result = world.run_once()
    assert result.code == 2
    assert "the branch mergegate/audit/x is in the way of mergegate/audit" in result.err
    assert "git push origin --delete mergegate/audit/x" in result.err
    assert world.events("started") == []  # no claim, so the job never started


def test_audit_verify_of_a_log_of_many_files_checks_them_in_workers_and_names_a_bad_link(
    world: World,
) -> None:
    """With enough log files `audit verify` checks them in forked workers (audit_chain): the output
    is the same, and a file right in itself but not linked to the one before (another worker's) is
    named as before."""
    from mergegate.audit import chain as audit_chain

    _gate(world)
    _run_job(world)
    records = world.records()
    clone = world.checkout_audit()
    seq, prev = len(records), records[-1]["hash"]
    count = audit_chain.PARALLEL_FROM_FILES + 2
    lines: list[str] = []
    for number in range(
        2, count + 1
    ):  # one record a file, as a runner writes them (canonical, chained)
        record = {
            "event": "rejected",
            "job": None,
            "path": f"jobs/x{number}.yaml",
            "blob": None,
            "commit": None,
            "runner": "forger",
            "time": "2026-01-01T00:00:00.000000Z",
            "reason": "one-time",
            "seq": seq + 1,
            "prev": prev,
        }
        record["hash"] = record_hash(record)
        seq, prev = seq + 1, record["hash"]
        lines.append(
            json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
        )
        (clone / f"audit/log-{number:06d}.jsonl").write_text(lines[-1])
    world.commit_audit(message="many files")
    result = world.mg("audit", "verify", "--json")
    assert result.code == 0, result.err
    assert (result.json()["records"], result.json()["files"]) == (len(records) + count - 1, count)
    # Instead (a fresh clone, as the log was never pushed otherwise), log-000007 sealed after a
    # record that is not log-000006's, and the files after it chained on: each file right in itself,
    # one broken link.
    many = world.git("mallory", "rev-parse", "HEAD")
    world.git("mallory", "reset", "-q", "--hard", "HEAD~1")
    for number in range(2, 7):
        (clone / f"audit/log-{number:06d}.jsonl").write_text(lines[number - 2])
    seq, prev = len(records) + 5, "f" * 64
    for number in range(7, count + 1):
        record = {**json.loads(lines[number - 2]), "seq": seq + 1, "prev": prev}
        record.pop("hash")
        record["hash"] = record_hash(record)
        seq, prev = seq + 1, record["hash"]
        (clone / f"audit/log-{number:06d}.jsonl").write_text(
            json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
        )
    relinked = world.commit_audit(message="many files, one bad link", push=False)
    world.git("mallory", "push", "-q", "-f", "origin", f"{relinked}:refs/heads/mergegate/audit")
    assert relinked != many
    result = world.mg("audit", "verify", "--json", where="fresh")
    assert result.code == 3, result.out + result.err
    error = json.loads(result.out)
    assert error["ok"] is False and (error["file"], error["line"]) == (
        "audit/log-000007.jsonl",
        1,
    ), error
    assert (
        error["error"]
        == f"seq {len(records) + 6}: prev does not match the hash of seq {len(records) + 5}"
    ), error


def test_audit_verify_checks_evidence_a_scanned_record_names_only_in_its_reviewed_map(
    world: World,
) -> None:
    """A `scanned` record's `reviewed` map names evidence files without the word "evidence" anywhere
    in its line:
    `audit verify` checks them too (as a pass's grep for '"evidence"' or '"reviewed"' finds them),
    so one that is not on the branch is an integrity error, not a pass."""
    _gate(world)
    _run_job(world)
    records = world.records()
    clone = world.checkout_audit()
    tip = world.git("alice", "rev-parse", "HEAD")
    digest = "ab" * 32
    record = {
        "event": "scanned",
        "job": None,
        "path": None,
        "blob": None,
        "commit": tip,
        "runner": "forger",
        "time": "2026-01-01T00:00:00.000000Z",
        "reviewed": {tip: digest},
        "seq": len(records) + 1,
        "prev": records[-1]["hash"],
    }
    record["hash"] = record_hash(record)
    line = json.dumps(record, sort_keys=True, separators=(",", ":"), ensure_ascii=False) + "\n"
    assert "evidence" not in line
    with (clone / "audit/log-000001.jsonl").open("a") as log:
        log.write(line)
    world.commit_audit(message="a reviewed map naming a missing file")
    result = world.mg("audit", "verify", "--json")
    assert result.code == 3, result.out + result.err
    error = json.loads(result.out)
    assert error["ok"] is False and error["file"] == f"audit/evidence/{digest}.json", error
    assert (
        error["error"]
        == f"a record refers to evidence {digest[:12]}, which is not on the audit branch"
    ), error


def test_audit_verify_of_a_missing_approved_branch_says_so_though_the_workers_had_started(
    world: World,
) -> None:
    """The workers start on the log before approved's tip is read: an approved branch that does not
    exist (read as it is, --no-fetch) is still the one-line error it always was, exit 2."""
    from mergegate.audit import chain as audit_chain

    _gate(world)
    _run_job(world)
    records = world.records()
    clone = world.checkout_audit()
    seq, prev = len(records), records[-1]["hash"]
    for number in range(2, audit_chain.PARALLEL_FROM_FILES + 3):  # enough files for the workers
        record = {
            "event": "rejected",
            "job": None,
            "path": f"jobs/x{number}.yaml",
            "blob": None,
            "commit": None,
            "runner": "forger",
            "time": "2026-01-01T00:00:00.000000Z",
            "reason": "x",
            "seq": seq + 1,
            "prev": prev,
        }
        record["hash"] = record_hash(record)
        seq, prev = seq + 1, record["hash"]
        (clone / f"audit/log-{number:06d}.jsonl").write_text(
            json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
        )
    world.commit_audit(message="many files")
    assert world.mg("audit", "verify", "--json").code == 0
    result = world.mg("audit", "verify", "--branch", "nope", "--no-fetch")
    assert result.code == 2, result.out + result.err
    assert result.err.splitlines()[0] == "error: branch refs/remotes/origin/nope does not exist", (
        result.err
    )


def _imported(result_err: str) -> set[str]:
    """The modules a process imported, from its PYTHONPROFILEIMPORTTIME lines on stderr."""
    return {
        line.rsplit("|", 1)[1].strip()
        for line in result_err.splitlines()
        if line.startswith("import time:")
    }


def test_audit_verify_imports_the_judge_only_for_a_commit_check_that_needs_it(world: World) -> None:
    """`audit verify` makes the commit checks' Assessor (and imports the judge, approvals, GitHub's
    evidence reading and planning) only when a check asks for it (issue 12: start-up counts). A gate
    whose policy lists no runners and names no evidence passes without them; one that lists runners
    imports them to check the signature, accepts the signed commits and still refuses an unsigned
    one."""
    judge = {
        "mergegate.rules.judge",
        "mergegate.facts.assessor",
        "mergegate.github.gather",
        "mergegate.runner.plan",
    }
    _gate(world)
    _run_job(world, "j")
    plain = world.mg("audit", "verify", process=True, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert plain.code == 0 and "ok: 3 records" in plain.out, plain.err[-2000:]
    assert "mergegate.facts.audit_commits" in _imported(plain.err) and not judge & _imported(
        plain.err
    )

    (world.tmp / "signed").mkdir()
    signed = World(world.tmp / "signed")
    key = make_ssh_key(signed.tmp / "keys", "runner")
    _gate(signed, runners=[{"name": "ci", "key": key.public_line}])
    signing = ("--signing-key", str(key.private), "--runner-name", "ci")
    _run_job(signed, "j", *signing)
    checked = signed.mg("audit", "verify", process=True, env={"PYTHONPROFILEIMPORTTIME": "1"})
    assert checked.code == 0 and "ok: 3 records" in checked.out, checked.err[-2000:]
    assert {"mergegate.rules.judge", "mergegate.facts.assessor"} <= _imported(checked.err)
    bad = _append_record(signed, {"event": "rejected", "path": "jobs/x.yaml", "reason": "forged"})
    refused = signed.mg("audit", "verify", process=True)
    assert (
        refused.code == 3
        and f"audit commit {bad[:12]} on mergegate/audit is not signed by a runner" in refused.err
    ), refused.err
