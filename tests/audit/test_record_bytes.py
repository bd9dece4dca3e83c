"""Typed audit records write back the bytes they were read from (issue 21, step 3).

Records are parsed into one dataclass per event where the log is read and written from it where
the log is written: the bytes on `mergegate/audit` must stay exactly what they were, so the chain
of every gate, old or new, keeps verifying. Each line of real gates' logs is read and written back;
drafts made from them are sealed again to the same hashes; old and odd lines (no `judged`, no
`attempt`, members of another type, unknown members and events) come back unchanged too.
"""

from __future__ import annotations

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest

from mergegate.audit import log as audit
from mergegate.audit import records
from mergegate.audit.records import (
    GENESIS,
    EmergencyUse,
    Finished,
    Lease,
    Other,
    Scanned,
    Started,
)
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml


def _log_files(world: World) -> dict[str, bytes]:
    """The log files of the remote's audit branch, as git holds their bytes."""
    remote = str(world.remote)
    names = subprocess.run(
        ["git", "-C", remote, "ls-tree", "--name-only", "mergegate/audit", "audit/"],
        capture_output=True,
        check=True,
        text=True,
    ).stdout.split()
    return {
        name: subprocess.run(
            ["git", "-C", remote, "cat-file", "blob", f"mergegate/audit:{name}"],
            capture_output=True,
            check=True,
        ).stdout
        for name in sorted(n for n in names if n.endswith(".jsonl"))
    }


def _assert_round_trip(files: dict[str, bytes]) -> list[records.Record]:
    """Each file read, checked and written back byte for byte; every line's hash its own; the
    records, as drafts, sealed again to the same lines and hashes."""
    read: list[records.Record] = []
    prev_seq, prev_hash = 0, GENESIS
    for path, data in files.items():
        found = audit.parse_file(data, path)
        audit.check_links(
            found,
            prev_seq=prev_seq,
            prev_hash=prev_hash,
            where={i: (path, i + 1) for i in range(len(found))},
        )
        assert b"".join(r.line() for r in found) == data, path
        for record, line in zip(found, data.splitlines(keepends=True), strict=True):
            assert records.parse_line(line).line() == line
            body = json.loads(line)
            digest = hashlib.sha256(
                records.canonical({k: v for k, v in body.items() if k != "hash"})
            ).hexdigest()
            assert record.hash == digest == body["hash"] == audit.record_hash(record.as_json())
        read += found
        prev_seq, prev_hash = found[-1].seq, found[-1].hash
    drafts = [
        {k: v for k, v in r.as_json().items() if k not in ("seq", "prev", "hash")} for r in read
    ]
    again = audit.seal(drafts, after_seq=0, after_hash=GENESIS)
    assert [r.line() for r in again] == [r.line() for r in read]
    typed = audit.seal(
        [records.parse(d) for d in drafts], after_seq=0, after_hash=GENESIS
    )  # (a typed draft: the writer's own edge)
    assert [r.hash for r in typed] == [r.hash for r in read]
    return read


def _gate(world: World) -> str:
    approvers = [world.bob.approver_entry(), world.carol.approver_entry()]
    return world.setup(
        policy_yaml(
            approvers,
            [ECHO_RULE, {"program": "sh", "args_prefix": ["-c"]}],
            keep_output=True,
            max_retries=1,
            retry_backoff_seconds=0,
            runners=world.signing_runner(),
        )
    )


def test_a_real_gates_log_is_written_back_byte_for_byte(world: World, tmp_path: Path) -> None:
    _gate(world)
    marker = tmp_path / "ran-once"
    flaky = f"test -e {marker} && echo second || {{ touch {marker}; echo oops >&2; exit 3; }}"
    world.propose(
        "jobs",
        {
            "jobs/hello.yaml": job_yaml("hello", ["echo", "héllo \u001b wörld"]),
            "jobs/flaky.yaml": job_yaml("flaky", ["sh", "-c", flaky], retries=1),
            "jobs/gpu.yaml": job_yaml("gpu", ["echo", "t"], runs_on=["gpu"]),
            "jobs/denied.yaml": job_yaml("denied", ["rm", "-rf", "/tmp/x"]),
        },
    )
    world.signed_merge("jobs")
    world.propose("unsigned", {"jobs/unsigned.yaml": job_yaml("unsigned", ["echo", "u"])})
    world.merge("unsigned", who=world.bob, sign=None)
    assert world.run_once().code == 1
    world.propose("vetoed", {"jobs/v.yaml": job_yaml("v", ["echo", "v"])}, who=world.alice)
    world.signed_merge("vetoed", world.bob)
    world.signing_clone("carol-clone", world.carol)
    assert world.mg("veto", "jobs/v.yaml", where="carol-clone").code == 0
    widened = policy_yaml(
        [world.bob.approver_entry(), world.carol.approver_entry()],
        [ECHO_RULE, {"program": "sh", "args_prefix": ["-c"]}, {"program": "true"}],
        keep_output=True,
        max_retries=1,
        retry_backoff_seconds=0,
        runners=world.signing_runner(),
    )
    world.propose("policy", {"policy/policy.yaml": widened})
    world.signed_merge("policy")
    world.run_once()
    world.run_once()  # the retry of flaky

    read = _assert_round_trip(_log_files(world))
    kinds = {r.event for r in read}
    assert kinds == {"started", "finished", "rejected", "vetoed", "policy", "scanned"}, kinds
    assert not any(isinstance(r, Other) for r in read)
    assert all(not r.extra for r in read), [r.extra for r in read if r.extra]
    started = [r for r in read if isinstance(r, Started)]
    assert {r.attempt_number for r in started if r.job == "flaky"} == {1, 2}
    finished = [r for r in read if isinstance(r, Finished)]
    assert any(r.stdout_file for r in finished) and any(r.status == "failed" for r in finished)
    assert any(r.open_commits for r in read if isinstance(r, Scanned))
    assert world.mg("audit", "verify").code == 0
    assert world.mg("verify").code == 0
    forms = {(r.event, frozenset(r.as_json())) for r in read}
    assert {
        (event, members)
        for event, members in forms
        if not (event == "started" and "runs_on" in members)
    } == _FORMS, sorted((e, sorted(m - _CHAIN)) for e, m in forms)


# Every form of record a runner writes, as docs/audit-format.md lists their members (a gate that
# keeps output, whose jobs are approved by signed merges).
_CHAIN = frozenset({"seq", "prev", "hash", "time", "event", "runner", "job", "path", "blob"})
_VOTES = frozenset({"approvers", "votes", "requirement", "approval"})
_FORMS = {
    (event, _CHAIN | {"commit"} | members)
    for event, members in (
        (
            "started",
            _VOTES
            | {
                "judged", "run_id", "command", "cwd", "sandbox", "rule", "policy_commit",
                "resolved_program", "self_approved", "limits", "lease", "attempt",
                "clone",  # (issue 23, item 11: the clone that claimed it; new records only)
                "counted",  # (issue 25: the counted votes as data, for the run's attestation)
            },
        ),
        (
            "finished",
            {
                "run_id", "status", "exit_code", "signal", "duration_ms", "reason",
                "resolved_program", "sandbox", "limits_applied",
                "vetoes_checked",  # (issue 23, item 8: how far it looked for vetoes; new records)
                *(f"{s}_{m}" for s in ("stdout", "stderr")
                  for m in ("tail", "bytes", "sha256", "file", "file_sha256")),
            },
        ),
        ("rejected", _VOTES | {"judged", "reason"}),
        ("vetoed", _VOTES | {"judged", "reason"}),
        ("policy", {"judged", "status", "reason", "policy_commit"}),
        (
            "scanned",
            {
                "judged", "start", "policy_commit", "commits", "unapproved_count",
                "unapproved_file", "open",
            },
        ),
    )
}  # fmt: skip


def test_a_dry_run_shows_the_drafts_a_pass_would_write(world: World) -> None:
    """`run --dry-run --json` lists the drafts as the pass would record them, less what only a run
    says: each with exactly the members it had before records were typed."""
    _gate(world)
    world.propose(
        "jobs",
        {
            "jobs/ok.yaml": job_yaml("ok", ["echo", "x"]),
            "jobs/no.yaml": job_yaml("no", ["rm", "x"]),
        },
    )
    world.signed_merge("jobs")
    data = world.mg("run", "--dry-run", "--json").json()
    ids = {"event", "runner", "time", "job", "path", "blob", "commit"}
    assert [(r["event"], set(r)) for r in data["records"]] == [
        ("rejected", ids | _VOTES | {"judged", "reason"}),
        ("started", ids | _VOTES | {"judged", "command", "attempt"}),
        ("finished", ids),
        ("scanned", ids | {"start", "policy_commit", "commits"}),
    ]


# The example of docs/audit-format.md: records as a runner wrote them (one pass of `demo`).
_DOC = Path(__file__).resolve().parents[2] / "docs" / "audit-format.md"


def test_the_documented_example_reads_and_writes_back() -> None:
    text = _DOC.read_text("utf-8")
    lines = re.findall(r'^(\{"approval".*|\{"blob".*)$', text, flags=re.MULTILINE)
    assert len(lines) == 3
    data = "".join(f"{line}\n" for line in lines).encode()
    read = _assert_round_trip({"audit/log-000001.jsonl": data})
    started, finished, scanned = read
    assert isinstance(started, Started) and started.lease is not None
    assert started.lease.holder == "runner" and started.limits == {
        "kill_grace_seconds": 5.0,
        "max_output_bytes": 65536,
        "timeout_seconds": 60,
    }
    assert isinstance(finished, Finished) and finished.stdout_tail == "hello from mergegate\n"
    assert isinstance(scanned, Scanned) and scanned.open == () and scanned.commits == 1


def _chain(bodies: list[dict[str, object]]) -> bytes:
    """Lines as the format's reference writer makes them (docs/audit-format.md, "The chain")."""
    out, prev = b"", GENESIS
    for seq, body in enumerate(bodies, start=1):
        full = {**body, "seq": seq, "prev": prev}
        data = json.dumps(full, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        full["hash"] = prev = hashlib.sha256(data.encode()).hexdigest()
        out += json.dumps(full, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        out += b"\n"
    return out


_COMMON = {"job": "j", "path": "jobs/j.yaml", "blob": "b" * 40, "commit": "c" * 40, "runner": "r"}
_TIME = "2026-01-01T00:00:00.000000Z"


def test_old_and_odd_records_come_back_unchanged() -> None:
    """Records from before `judged`, `attempt` and `open`; members of another type than this
    version writes; members and events it does not know: all read, and written back as read."""
    bodies: list[dict[str, object]] = [
        # before `judged` and `attempt` existed; a float limit, a short `finished`
        {**_COMMON, "event": "started", "time": _TIME, "run_id": "a" * 32, "command": ["echo"],
         "limits": {"timeout_seconds": 60, "kill_grace_seconds": 5.0}, "approvers": ["bob"],
         "votes": [], "requirement": None, "approval": None, "self_approved": False},
        {**_COMMON, "event": "finished", "time": _TIME, "run_id": "a" * 32, "status": "lost",
         "exit_code": None, "reason": "the runner stopped"},
        # before `open`; a `reviewed` map
        {**_COMMON, "job": None, "path": None, "blob": None, "event": "scanned", "time": _TIME,
         "start": "d" * 40, "policy_commit": "e" * 40, "commits": 2, "unapproved_count": 0,
         "unapproved_file": None, "reviewed": {"f" * 40: "0" * 64}},
        # members of another type, unknown members, nested oddities
        {**_COMMON, "event": "started", "time": 5, "runner": ["x"], "attempt": "2",
         "lease": {"holder": "r", "until": _TIME, "why": 1}, "self_approved": "yes",
         "command": "echo", "limits": {"a": True}, "future": {"x": [1, 2.5, None]}},
        {**_COMMON, "event": "scanned", "time": _TIME, "open": [{"commit": "c" * 40}],
         "commits": 1.0, "unapproved_count": "0", "unapproved_file": 7},
        {**_COMMON, "event": "policy", "time": _TIME, "status": "adopted", "reason": "ok",
         "policy_commit": "c" * 40, "judged": _TIME, "evidence": ["1" * 64]},
    ]  # fmt: skip
    data = _chain(bodies)
    read = _assert_round_trip({"audit/log-000001.jsonl": data})
    old, short, scanned, odd, odd_scan, policy = read
    assert isinstance(old, Started) and old.judged is None and old.attempt_number == 1
    assert "judged" in old.absent and "attempt" in old.absent and not old.extra
    assert isinstance(short, Finished) and short.signal is None and "signal" in short.absent
    assert isinstance(scanned, Scanned) and scanned.open_commits == ()
    assert scanned.reviewed == {"f" * 40: "0" * 64}
    assert isinstance(odd, Started)
    assert (odd.runner, odd.attempt_number, odd.self_approved, odd.command) == ("", 1, None, None)
    assert odd.lease == Lease("r", _TIME)  # (still ends when it says)
    assert set(odd.extra) == {
        "time",
        "runner",
        "attempt",
        "lease",
        "self_approved",
        "command",
        "limits",
        "future",
    }
    assert isinstance(odd_scan, Scanned) and odd_scan.open is None and odd_scan.commits is None
    assert odd_scan.written("unapproved_file") == 7
    assert policy.event == "policy" and not policy.extra


@pytest.mark.parametrize(
    "line",
    [
        b'{"event":"audited","seq":1,"x":1}',
        b'{"event":7,"seq":1}',
        b'{"seq":1,"hash":null,"prev":[],"job":{"a":"b"}}',
        '{"event":"finished","seq":1,"stdout_tail":"\u2028\\u0000 é","exit_code":true}'.encode(),
        b'{"event":"started","seq":1,"open":[1],"approvers":["a",1],"votes":"v","evidence":[]}',
    ],
)
def test_lines_no_runner_writes_come_back_unchanged(line: bytes) -> None:
    """What `git grep` may meet (no chain check): an unknown event, no event, members of any
    type. Nothing is lost."""
    value = json.loads(line)
    record = records.parse(value)
    assert record.as_json() == value
    assert record.line() == records.canonical(value) + b"\n"
    assert audit.records_of([line])[0].line() == record.line()


def test_an_emergency_start_and_odd_emergency_members_come_back_unchanged() -> None:
    """`emergency` (break-glass) is optional: a start without one writes no such member, so the
    bytes of every older start stay theirs; one with other members is kept verbatim."""
    bodies: list[dict[str, object]] = [
        {**_COMMON, "event": "started", "time": _TIME, "run_id": "a" * 32, "command": ["echo"],
         "emergency": {"by": ["alice"], "reason": "disk full, INC-4711"}},
        {**_COMMON, "event": "started", "time": _TIME, "run_id": "b" * 32,
         "emergency": {"by": "alice", "reason": 1, "why": "x"}},
        {**_COMMON, "event": "started", "time": _TIME, "run_id": "c" * 32},
    ]  # fmt: skip
    used, odd, plain = _assert_round_trip({"audit/log-000001.jsonl": _chain(bodies)})
    assert isinstance(used, Started) and not used.extra
    assert used.emergency == EmergencyUse(("alice",), "disk full, INC-4711")
    assert isinstance(odd, Started) and odd.emergency is None and set(odd.extra) == {"emergency"}
    assert isinstance(plain, Started) and "emergency" in plain.absent
    drafted = records.draft(Started(**_COMMON, time=_TIME, run_id="d" * 32))
    assert b"emergency" not in drafted.line()
