"""`audit export`: the records for other tools, never one `audit verify` would reject, and a
cursor that resumes a stream with no gap (issue 25)."""

from __future__ import annotations

import base64
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.signer import SSlibKey

from mergegate.audit.records import body_hash, canonical, parse
from mergegate.crypto import dsse
from mergegate.git.repo import Repo
from mergegate.operations.audit_export import At, record_line
from tests.helpers.keys import shared_ssh_key
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml
from tests.operations.test_reading_records import gate_with_history


def _lines(text: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in text.splitlines()]


def test_jsonl_is_the_log_as_it_is_and_ecs_maps_each_record(world: World) -> None:
    gate_with_history(world)
    records = world.records()
    jsonl = world.mg("audit", "export", where="auditor")
    assert jsonl.code == 0, jsonl.err
    # The records as they are: the log's own bytes, line for line.
    assert jsonl.out.splitlines() == [canonical(r).decode() for r in records]
    ecs = world.mg("audit", "export", "--format", "ecs", where="auditor")
    assert ecs.code == 0, ecs.err
    docs = _lines(ecs.out)
    assert [d["event"]["sequence"] for d in docs] == [r["seq"] for r in records]
    assert [d["event"]["id"] for d in docs] == [r["hash"] for r in records]
    started = next(
        d for d in docs if d["event"]["action"] == "started" and d["labels"]["job"] == "ok"
    )
    assert started["process"]["args"] == ["echo", "hello"]
    assert started["user"]["name"] == ["bob"] and started["related"]["user"] == ["bob"]
    assert started["event"]["outcome"] == "unknown"
    assert started["labels"]["job"] == "ok" and started["labels"]["path"] == "jobs/ok.yaml"
    assert started["@timestamp"] == records[started["event"]["sequence"] - 1]["time"]
    finished = {d["labels"]["job"]: d for d in docs if d["event"]["action"] == "finished"}
    assert finished["ok"]["event"]["outcome"] == "success"
    assert finished["ok"]["process"]["exit_code"] == 0
    assert finished["bad"]["event"]["outcome"] == "failure"
    assert finished["bad"]["process"]["exit_code"] == 1
    rejected = next(d for d in docs if d["event"]["action"] == "rejected")
    assert (
        rejected["event"]["outcome"] == "failure"
        and "deny by default" in rejected["event"]["reason"]
    )
    # Every document links to the one before, as the chain does.
    assert all(d["mergegate"]["prev"] == p["event"]["id"] for p, d in itertools.pairwise(docs))


def test_since_job_and_event_select_records(world: World) -> None:
    gate_with_history(world)
    records = world.records()
    after = _lines(world.mg("audit", "export", "--since", "2", where="auditor").out)
    assert [r["seq"] for r in after] == [r["seq"] for r in records[2:]]
    ok = _lines(world.mg("audit", "export", "--job", "ok", where="auditor").out)
    assert [r["event"] for r in ok] == ["started", "finished"]
    finished = world.mg("audit", "export", "--event", "finished", "--event", "rejected")
    assert {r["event"] for r in _lines(finished.out)} == {"finished", "rejected"}
    late = world.mg("audit", "export", "--since", str(len(records)), where="auditor")
    assert late.code == 0 and late.out == ""


def test_an_export_never_prints_what_audit_verify_rejects(world: World) -> None:
    """A well-chained record appended in an audit commit no runner signed: `audit log` (a chain
    check) would show it; `audit verify` rejects the commit, and so does the export: nothing
    printed, exit 3."""
    runners = world.signing_runner()
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE], runners=runners))
    world.propose("a", {"jobs/a.yaml": job_yaml("a", ["echo", "a"])}, who=world.alice)
    world.signed_merge("a")
    assert world.run_once().code == 0
    assert world.mg("audit", "export", where="auditor").code == 0
    last = world.records()[-1]
    forged = {**last, "seq": last["seq"] + 1, "prev": last["hash"], "time": last["time"]}
    forged["hash"] = body_hash(forged)
    log = world.checkout_audit() / "audit/log-000001.jsonl"
    log.write_bytes(log.read_bytes() + canonical(forged) + b"\n")
    world.commit_audit()
    assert world.mg("audit", "verify", where="auditor").code == 3
    for fmt in ("jsonl", "ecs"):
        result = world.mg("audit", "export", "--format", fmt, where="auditor")
        assert result.code == 3 and result.out == "", result
        assert "error:" in result.err


def test_a_cursor_resumes_after_the_last_line_and_refuses_another_chain(world: World) -> None:
    gate_with_history(world)
    cursor = world.tmp / "export.cursor"
    first = world.mg("audit", "export", "--cursor", str(cursor), where="auditor")
    assert first.code == 0
    total = len(world.records())
    assert json.loads(cursor.read_text()) == {"seq": total, "hash": world.records()[-1]["hash"]}
    again = world.mg("audit", "export", "--cursor", str(cursor), "--since", "0", where="auditor")
    assert again.code == 0 and again.out == ""  # the cursor, not --since, says where
    assert world.run_once().code == 0  # the job "later"
    more = _lines(world.mg("audit", "export", "--cursor", str(cursor), where="auditor").out)
    assert [r["seq"] for r in more] == list(range(total + 1, len(world.records()) + 1))
    # A cursor whose record is not in this chain: an integrity error, nothing printed.
    cursor.write_text(json.dumps({"seq": 2, "hash": "ab" * 32}))
    other = world.mg("audit", "export", "--cursor", str(cursor), where="auditor")
    assert other.code == 3 and other.out == "" and "rewritten, or this is another gate" in other.err
    cursor.write_text(json.dumps({"seq": 10_000, "hash": "ab" * 32}))
    ahead = world.mg("audit", "export", "--cursor", str(cursor), where="auditor")
    assert ahead.code == 3 and "ends at seq" in ahead.err
    nowhere = world.mg("audit", "export", "--cursor", str(cursor.parent / "no" / "c"))
    assert nowhere.code == 2 and nowhere.out == "" and "does not exist" in nowhere.err
    cursor.write_text("seq=3")
    garbled = world.mg("audit", "export", "--cursor", str(cursor), where="auditor")
    assert garbled.code == 2 and "the cursor is not" in garbled.err


def _follow(
    world: World, cursor: Path, out: Path, trace: Path | None = None
) -> subprocess.Popen[bytes]:
    env = {**os.environ, **({"GIT_TRACE": str(trace)} if trace is not None else {})}
    with out.open("ab") as sink:
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "mergegate", "audit", "export", "--format", "ecs"),
                *("--follow", "--cursor", str(cursor), "--interval", "0.1"),
            ],
            cwd=world.clone("auditor"),
            stdout=sink,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            env=env,
        )


def _until_lines(out: Path, count: int, proc: subprocess.Popen[bytes]) -> list[dict[str, Any]]:
    deadline = time.monotonic() + 60
    while True:
        docs = _lines(out.read_text())
        if len(docs) >= count:
            return docs
        if proc.poll() is not None:
            raise AssertionError(f"export exited {proc.returncode}: {proc.stderr.read()!r}")
        if time.monotonic() > deadline:
            raise AssertionError(f"{len(docs)} lines, waited for {count}")
        time.sleep(0.05)


def _idle_polls_without_a_fetch(trace: Path, proc: subprocess.Popen[bytes]) -> None:
    """Wait for three polls after the last fetch: an idle poll is one `ls-remote`, never a fetch
    (a follower that fetched on every poll would never get there)."""
    deadline = time.monotonic() + 60
    while True:
        calls = [
            line.split("built-in: git ", 1)[1].split(" ", 1)[0]
            for line in trace.read_text(errors="replace").splitlines()
            if "built-in: git " in line
        ]
        after = calls[len(calls) - calls[::-1].index("fetch") :] if "fetch" in calls else calls
        if after.count("ls-remote") >= 3:
            return
        if proc.poll() is not None or time.monotonic() > deadline:
            raise AssertionError(f"no three quiet polls: {calls[-20:]}")
        time.sleep(0.05)


def test_follow_streams_runs_as_they_land_and_resumes_after_a_kill(world: World) -> None:
    """Done when (issue 25): `audit export --format ecs --follow --cursor F` streams two new runs
    as a real runner records them, is killed, restarted, and resumes with no gap and no
    repeat."""
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    cursor, out = world.tmp / "ecs.cursor", world.tmp / "ecs.jsonl"
    proc = _follow(world, cursor, out)
    try:
        for n, name in enumerate(("one", "two")):
            world.propose(
                name, {f"jobs/{name}.yaml": job_yaml(name, ["echo", name])}, who=world.alice
            )
            world.signed_merge(name)
            assert world.run_once().code == 0
            docs = _until_lines(out, len(world.records()), proc)
            ran = [d for d in docs if d["event"]["action"] == "finished"]
            assert [d["labels"]["job"] for d in ran] == ["one", "two"][: n + 1]
        proc.kill()
        proc.wait()
        # While it is down a third run lands; the restart prints it and nothing it printed before.
        world.propose(
            "three", {"jobs/three.yaml": job_yaml("three", ["echo", "3"])}, who=world.alice
        )
        world.signed_merge("three")
        assert world.run_once().code == 0
        trace = world.tmp / "git.trace"
        proc = _follow(world, cursor, out, trace)
        docs = _until_lines(out, len(world.records()), proc)
        _idle_polls_without_a_fetch(trace, proc)
    finally:
        proc.terminate()
        proc.wait()
    assert proc.returncode == 0  # SIGTERM ends a follow cleanly
    records = world.records()
    assert [d["event"]["sequence"] for d in docs] == [r["seq"] for r in records]
    assert [d["event"]["id"] for d in docs] == [r["hash"] for r in records]
    assert json.loads(cursor.read_text()) == {
        "seq": records[-1]["seq"],
        "hash": records[-1]["hash"],
    }


def test_the_ecs_example_in_docs_siem_is_what_export_prints_for_the_audit_format_example() -> None:
    root = Path(__file__).resolve().parents[2]
    example = next(
        line
        for line in (root / "docs/audit-format.md").read_text().splitlines()
        if line.startswith("{") and '"event":"finished"' in line
    )
    shown = next(
        line
        for line in (root / "docs/siem.md").read_text().splitlines()
        if line.startswith('{"@timestamp"')
    )
    line = record_line("ecs")(parse(json.loads(example)), At(Repo(root), ""))
    assert line == shown.encode() + b"\n"


def test_intoto_prints_each_run_s_attestation_as_the_audit_branch_holds_it(world: World) -> None:
    runners = world.signing_runner()
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE], runners=runners))
    for name in ("one", "two"):
        world.propose(name, {f"jobs/{name}.yaml": job_yaml(name, ["echo", name])}, who=world.alice)
        world.signed_merge(name)
        assert world.run_once().code == 0
    result = world.mg("audit", "export", "--format", "intoto", where="auditor")
    assert result.code == 0, result.err
    runs = [r["run_id"] for r in world.events("finished")]
    for line, run in zip(result.out.splitlines(), runs, strict=True):
        held = world.git(
            "admin", "show", f"origin/mergegate/audit:audit/attestations/{run}.intoto.json"
        )
        assert line == held.strip()  # the runner writes it compact: the same bytes, one a line
        key = shared_ssh_key(world.tmp / "keys", "runner")
        envelope = SslibEnvelope.from_dict(json.loads(line))
        public = serialization.load_ssh_public_key(key.public_line.encode())
        envelope.verify([SSlibKey.from_crypto(public, keyid=dsse.fingerprint(key.public_line))], 1)
    two = world.mg("audit", "export", "--format", "intoto", "--job", "two", where="auditor")
    (only,) = two.out.splitlines()
    statement = json.loads(base64.b64decode(json.loads(only)["payload"]))
    assert statement["subject"][0]["name"] == "jobs/two.yaml"
    # An attestation that is not what its records say: audit verify refuses it, and the export.
    run = runs[0]
    path = world.checkout_audit() / f"audit/attestations/{run}.intoto.json"
    envelope = json.loads(path.read_text())
    envelope["signatures"][0]["sig"] = base64.b64encode(b"\0" * 64).decode()
    path.write_text(json.dumps(envelope))
    world.commit_audit()
    assert world.mg("audit", "verify", where="auditor").code == 3
    tampered = world.mg("audit", "export", "--format", "intoto", where="auditor")
    assert tampered.code == 3 and tampered.out == ""


def test_intoto_of_a_gate_without_runners_prints_nothing(world: World) -> None:
    gate_with_history(world)
    result = world.mg("audit", "export", "--format", "intoto", where="auditor")
    assert result.code == 0 and result.out == ""


def test_ecs_escapes_bidi_and_c1_controls_a_proposer_put_in_a_path() -> None:
    """A job path with U+202E (right-to-left override) and U+009B (a terminal's CSI) reaches the
    ECS line escaped, never raw: a SIEM console or a terminal tailing the stream shows it as
    written."""
    root = Path(__file__).resolve().parents[2]
    example = json.loads(
        next(
            line
            for line in (root / "docs/audit-format.md").read_text().splitlines()
            if line.startswith("{") and '"event":"finished"' in line
        )
    )
    example["path"] = "jobs/\u202eevil\u009b.yaml"
    line = record_line("ecs")(parse(example), At(Repo(root), ""))
    assert line.isascii() and b"\\u202e" in line and b"\\u009b" in line
    assert json.loads(line)["labels"]["path"] == "jobs/\u202eevil\u009b.yaml"
