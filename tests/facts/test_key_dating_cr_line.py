"""review redteam7b G3: one audit line holding two records joined by a bare CR blinds
dating.Appenders.

`parse_file` (the chain check) splits a log file with bytes.splitlines(), which also splits at a
lone b"\\r"; `Appenders._last_seq` splits at b"\\n" only, and json.loads of `{...}\\r{...}` fails
("Extra data"), so every binary search that probes such a commit answers None. Anyone can push such
a commit while the policy lists no runners (audit commits are not authenticated then); verify and
`audit verify` accept it. Secure outcome: the chain check and Appenders read the same lines (the CR
line is refused, or Appenders reads it), so Appenders still finds the commit that appended a record
after it.
"""

from __future__ import annotations

import json

from mergegate.audit import dating
from mergegate.audit import log as audit
from mergegate.git.repo import Repo
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml


def test_a_cr_joined_line_is_refused_or_read_alike(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    world.propose("a", {"jobs/a.yaml": job_yaml("a", ["echo", "a"])}, who=world.alice)
    world.signed_merge("a", world.bob)
    assert world.run_once().code == 0
    records = world.records()
    lines, prev = [], records[-1]["hash"]
    for seq in (len(records) + 1, len(records) + 2):
        record = {
            "event": "policy",
            "job": None,
            "path": None,
            "blob": None,
            "commit": None,
            "runner": "x",
            "status": "rejected",
            "reason": "note",
            "time": records[-1]["time"],
            "seq": seq,
            "prev": prev,
        }
        record["hash"] = prev = audit.record_hash(record)
        lines.append(json.dumps(record, sort_keys=True, separators=(",", ":")))
    log = world.checkout_audit("mallory") / "audit/log-000001.jsonl"
    log.write_bytes(log.read_bytes() + lines[0].encode() + b"\r" + lines[1].encode() + b"\n")
    poisoned = world.commit_audit("mallory", "audit")
    checks = world.mg("audit", "verify", where="auditor")
    if checks.code != 0:
        return  # refused: the chain check and Appenders agree (the secure outcome)
    # Accepted: a later honest pass appends a record; Appenders must still find its commit.
    world.propose("b", {"jobs/b.yaml": job_yaml("b", ["echo", "b"])}, who=world.alice)
    world.signed_merge("b", world.bob)
    assert world.run_once().code == 0
    world.fetch("runner")
    repo = Repo(world.clone("runner"))
    tip = world.audit_tip()
    last = [r for r in audit.grep(repo, tip, '"event":"scanned"') if r.seq == len(world.records())]
    assert last, "the last scanned record is not the last record"
    line = repo.out("rev-list", "--first-parent", "--reverse", tip).split()
    assert poisoned in line
    finder = dating.Appenders(repo, tip)
    # Probe the poisoned commit, as a binary search over a longer line would.
    assert finder._last_seq(poisoned) is not None, (
        "Appenders cannot read the newest log file at the CR commit"
    )
    assert finder.of(last[0]) == tip
