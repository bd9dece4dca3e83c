"""The audit log as files: rotation, reading the tail back, the chain across files."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from mergegate import audit
from mergegate.errors import IntegrityError
from mergegate.git import Repo


def _repo(tmp_path: Path) -> Repo:
    path = tmp_path / "gate"
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    # As the audit branch: its tree holds audit/ and nothing else (here, at first, nothing at all).
    subprocess.run(["git", "-C", str(path), "-c", "user.name=t", "-c", "user.email=t@x", "commit", "-q", "--allow-empty", "-m", "root"], check=True)
    return Repo(path)


def _append(repo: Repo, tip: str, drafts: list[dict[str, object]]) -> str:
    tail = audit.read_tail(repo, tip)
    records = audit.seal(drafts, after_seq=tail.last_seq, after_hash=tail.last_hash)
    files = audit.append(repo, tip, tail, records)
    return repo.write_commit(parent=tip, files=files, message="audit\n", author=("t", "t@x"), signing=None)


def test_rotation_keeps_one_chain_across_files(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit, "RECORDS_PER_FILE", 3)
    repo = _repo(tmp_path)
    tip = repo.rev("HEAD")
    assert tip is not None
    for batch in range(4):
        drafts = [audit.draft("rejected", runner="r", path=f"jobs/{batch}-{i}.yaml", reason="x") for i in range(2)]
        tip = _append(repo, tip, drafts)
    tip = _append(repo, tip, [audit.draft("scanned", runner="r", commit=tip)])
    names = [p for p, _ in audit.log_files(repo, tip)]
    assert names == [f"audit/log-{n:06d}.jsonl" for n in range(1, 4)]
    records = audit.read_all(repo, tip)
    assert [r.seq for r in records] == list(range(1, 10))
    tail = audit.read_tail(repo, tip)
    assert tail.last_seq == 9 and tail.scanned is not None and tail.scanned.seq == 9
    assert tail.since_scanned == ()


def test_tail_reads_back_past_a_fresh_file_to_the_last_scanned(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audit, "RECORDS_PER_FILE", 2)
    repo = _repo(tmp_path)
    tip = repo.rev("HEAD")
    assert tip is not None
    tip = _append(repo, tip, [audit.draft("scanned", runner="r", commit=tip)])
    tip = _append(repo, tip, [audit.draft("rejected", runner="r", path=f"jobs/{i}.yaml") for i in range(3)])
    tail = audit.read_tail(repo, tip)
    assert tail.scanned is not None and tail.scanned.seq == 1
    assert [r.seq for r in tail.since_scanned] == [2, 3, 4]


def test_hash_is_the_documented_one(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    tip = repo.rev("HEAD")
    assert tip is not None
    tip = _append(repo, tip, [audit.draft("scanned", runner="r", commit=tip)])
    line = (repo.read_file(tip, "audit/log-000001.jsonl") or b"").decode()
    record = json.loads(line)
    body = {k: v for k, v in record.items() if k != "hash"}
    import hashlib

    expected = hashlib.sha256(json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")).hexdigest()
    assert record["hash"] == expected
    assert record["prev"] == "0" * 64 and record["seq"] == 1


def test_a_gap_in_file_numbers_is_tampering(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    tip = repo.rev("HEAD")
    assert tip is not None
    tip = repo.write_commit(parent=tip, files={"audit/log-000002.jsonl": b"{}\n"}, message="x\n", author=("t", "t@x"), signing=None)
    with pytest.raises(IntegrityError, match="not numbered"):
        audit.log_files(repo, tip)


def test_a_file_beside_audit_is_tampering(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    tip = _append(repo, repo.rev("HEAD"), [audit.draft("scanned", runner="r")])
    tip = repo.write_commit(parent=tip, files={"README": b"x\n"}, message="x\n", author=("t", "t@x"), signing=None)
    with pytest.raises(IntegrityError, match="unexpected file README on the audit branch"):
        audit.read_tail(repo, tip)


def test_the_unapproved_map_is_kept_by_reference_and_checked_on_reading(tmp_path: Path) -> None:
    repo = _repo(tmp_path)
    files = {f"vendor/{i}.txt": "c" * 40 for i in range(2000)}
    fields, held = audit.unapproved_fields(files)
    assert held is not None and fields == {"unapproved_count": 2000, "unapproved_file": held.sha256}
    assert audit.unapproved_fields(dict(reversed(files.items())))[1] == held  # canonical: one map, one file
    tip = _append(repo, repo.rev("HEAD"), [audit.draft("scanned", runner="r", **fields)])
    tip = repo.write_commit(parent=tip, files={held.path: held.data}, message="x\n", author=("t", "t@x"), signing=None)
    tail = audit.read_tail(repo, tip)
    assert tail.scanned is not None and len(tail.scanned.line()) < 4096
    assert audit.read_unapproved(repo, tip, tail.scanned) == files
    edited = repo.write_commit(parent=tip, files={held.path: held.data.replace(b"vendor/1.txt", b"vendor/X.txt")}, message="x\n",
                               author=("t", "t@x"), signing=None)
    with pytest.raises(IntegrityError, match="does not hash to its name"):
        audit.read_unapproved(repo, edited, tail.scanned)
    with pytest.raises(IntegrityError, match="which is not on the audit branch"):
        audit.read_unapproved(repo, repo.rev("HEAD"), tail.scanned)


def test_the_whole_log_is_streamed_one_file_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """audit verify never holds the whole log: records come file by file, each file's links checked first."""
    monkeypatch.setattr(audit, "RECORDS_PER_FILE", 2)
    repo = _repo(tmp_path)
    tip = repo.rev("HEAD")
    assert tip is not None
    tip = _append(repo, tip, [audit.draft("rejected", runner="r", path=f"jobs/{i}.yaml") for i in range(5)])
    # Edit the record in the last file (seq 5): its hash no longer matches.
    path, blob = audit.log_files(repo, tip)[-1]
    edited = repo.blob(blob).replace(b'"jobs/4.yaml"', b'"jobs/9.yaml"')
    tip = repo.write_commit(parent=tip, files={path: edited}, message="edit\n", author=("t", "t@x"), signing=None)
    blobs_read: list[str] = []
    reads = repo.blob
    monkeypatch.setattr(repo, "blob", lambda sha: blobs_read.append(sha) or reads(sha))

    stream = audit.iter_all(repo, tip)
    first = [next(stream), next(stream)]

    assert [r.seq for r in first] == [1, 2] and len(blobs_read) == 1  # only log-000001 read so far
    assert [r.seq for r in (next(stream), next(stream))] == [3, 4]
    with pytest.raises(IntegrityError, match="seq 5: hash does not match") as caught:
        next(stream)
    assert caught.value.file == "audit/log-000003.jsonl" and caught.value.line == 1
    with pytest.raises(IntegrityError, match="seq 5: hash does not match"):
        audit.read_all(repo, tip)


def test_a_pass_checks_the_audit_commits_since_the_one_that_added_the_last_scanned(tmp_path: Path) -> None:
    """In a fresh clone: few commits, whatever the history's length (audit verify checks them all)."""
    from mergegate.audit_branch import unchecked

    repo = _repo(tmp_path)
    tip = repo.rev("HEAD")
    old = []
    for n in range(5):  # five complete passes: a claim, then its result and `scanned`
        tip = _append(repo, tip, [audit.draft("started", runner="r", path=f"jobs/{n}.yaml")])
        tip = _append(repo, tip, [audit.draft("finished", runner="r", path=f"jobs/{n}.yaml"), audit.draft("scanned", runner="r")])
        old.append(tip)
    claim = _append(repo, tip, [audit.draft("started", runner="r", path="jobs/x.yaml")])  # a pass that stopped midway
    assert unchecked(repo, claim, seen=None, tail=audit.read_tail(repo, claim)) == [old[-1], claim]
    assert unchecked(repo, old[-1], seen=None, tail=audit.read_tail(repo, old[-1])) == [old[-1]]
    assert unchecked(repo, claim, seen=old[-2], tail=audit.read_tail(repo, claim)) == [repo.commit(old[-1]).parents[0], old[-1], claim]
    assert unchecked(repo, claim, seen=claim, tail=audit.read_tail(repo, claim)) == []
