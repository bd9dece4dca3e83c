"""Every commit a record names is tied to its audit commit's `Mergegate-Approved` trailer: nothing
past it (issue 23, item 9). Right after a policy change adds `runners`, an unsigned audit commit
that repeats the older trailer (whose policy lists no runners, so no signature is asked) must not
carry a `scanned` record that walks past the change."""

from __future__ import annotations

import pytest

from mergegate.facts.audit_commits import ASK_ALONE, NameSink, _appended
from mergegate.git.repo import Repo
from tests.facts.test_key_dating import _forge
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml


def test_an_unsigned_audit_commit_with_a_stale_trailer_cannot_name_commits_past_it(
    world: World,
) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE], policy_approvals_required=1))
    world.propose("j", {"jobs/j.yaml": job_yaml("j", ["echo", "j"])}, who=world.alice)
    world.signed_merge("j", world.bob)
    assert world.run_once().code == 0
    honest = world.events("scanned")[-1]
    # A policy change that adds runners, merged; no runner has judged it yet.
    runners = world.signing_runner()
    stricter = policy_yaml(
        [world.bob.approver_entry()], [ECHO_RULE], runners=runners, policy_approvals_required=1
    )
    world.propose("runners", {"policy/policy.yaml": stricter}, who=world.alice)
    change = world.signed_merge("runners", world.bob)
    # mallory appends, unsigned and repeating the older trailer, a scan past the change.
    scan = {k: v for k, v in honest.items() if k not in ("seq", "prev", "hash")}
    forged = _forge(world, {**scan, "commit": change, "start": honest["commit"]}, sign=None)
    result = world.run_once()
    assert result.code == 3, result.out + result.err
    assert forged[:12] in result.err and change[:12] in result.err, result.err
    audit_verify = world.mg("audit", "verify", where="auditor")
    assert audit_verify.code == 3 and forged[:12] in audit_verify.out + audit_verify.err
    verify = world.mg("verify", where="auditor")
    assert verify.code == 3, verify.out[-900:] + verify.err[-600:]


def test_tying_the_approvals_records_name_asks_git_once_not_once_per_approval(world: World) -> None:
    """The tie above is checked for every commit a record names, approval commits off approved's
    first-parent line included: past the first few, answered from one `rev-list --parents` of
    approved, not one `merge-base --is-ancestor` per approval (which made `verify` of 5,000
    approvals take a minute, and `audit verify` of a long log more than ten)."""
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    for n in range(2 * ASK_ALONE):
        path = f"jobs/j{n}.yaml"
        world.propose(f"j{n}", {path: job_yaml(f"j{n}", ["echo", str(n)])}, who=world.alice)
        world.approval_commit(f"j{n}", [(path, world.blob(f"j{n}", path))], who=world.bob,
                              sign=world.bob.key)  # fmt: skip
        world.signed_merge(f"j{n}", world.bob)
    assert world.run_once().code == 0
    trace = world.tmp / "trace"
    for command in (("verify",), ("audit", "verify")):
        trace.unlink(missing_ok=True)
        result = world.mg(*command, where="auditor", env={"GIT_TRACE": str(trace)}, process=True)
        assert result.code == 0, result.out + result.err
        asked = trace.read_text().count("merge-base --is-ancestor")
        assert asked <= ASK_ALONE + 1, (command, asked)  # (+1: the seen tip, once)


def test_a_log_file_the_chain_check_read_whole_is_not_read_again_for_its_names(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tie needs the commits the appended records name; for a log file the chain check
    (forked workers) read whole, they come from that check (`NameSink.known`), not from reading
    the file once more in the main process and keeping it until the commit is checked (a 78 MiB
    log file added in one commit held 120 MiB of RSS where 60 MiB is the goal)."""
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    world.propose("j", {"jobs/j.yaml": job_yaml("j", ["echo", "j"])}, who=world.alice)
    world.signed_merge("j", world.bob)
    assert world.run_once().code == 0
    world.fetch("auditor")
    repo = Repo(world.clone("auditor"))
    first = repo.out("rev-list", "--max-parents=0", "origin/mergegate/audit").split()[0]
    (change,) = [c for c in repo.diff(None, first) if c.path.endswith(".jsonl")]
    assert change.status == "A"
    names = frozenset({"1" * 40})
    read: list[str] = []
    blob = Repo.blob

    def spying(self: Repo, sha: str) -> bytes:
        read.append(sha)
        return blob(self, sha)

    monkeypatch.setattr(Repo, "blob", spying)
    sink = NameSink({change.new_blob: names})
    assert _appended(repo, first, change, {change.new_blob: 1}, None, None, sink) == 1
    assert sink.found == names and change.new_blob not in read
    # Without what the chain check found, the names are read from the appended bytes.
    fresh = NameSink()
    _appended(repo, first, change, {change.new_blob: 1}, None, None, fresh)
    assert fresh.found and change.new_blob in read
