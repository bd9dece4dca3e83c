"""Audit records: build, hash, append, read back and verify.

The log is JSON Lines under audit/, split into files of at most
RECORDS_PER_FILE records (or MAX_FILE_BYTES) so no file grows without bound;
the hash chain runs across files in name order. See docs/audit-format.md.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Any

from mergegate.errors import IntegrityError
from mergegate.git import Change, Repo

AUDIT_DIR = "audit/"
GENESIS = "0" * 64
RECORDS_PER_FILE = 1000
MAX_FILE_BYTES = 4 * 1024 * 1024
EVENTS = ("started", "finished", "rejected", "vetoed", "scanned", "policy")
_FILE = re.compile(r"^audit/log-(\d{6})\.jsonl$")
_COMMON = ("event", "job", "path", "blob", "commit", "runner")


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record_hash(record: Mapping[str, Any]) -> str:
    body = {k: v for k, v in record.items() if k != "hash"}
    data = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class Record:
    fields: Mapping[str, Any]

    def __getitem__(self, key: str) -> Any:
        return self.fields[key]

    def get(self, key: str, default: Any = None) -> Any:
        return self.fields.get(key, default)

    @property
    def seq(self) -> int:
        return int(self.fields["seq"])

    @property
    def event(self) -> str:
        return str(self.fields["event"])

    @property
    def revision(self) -> tuple[str | None, str | None]:
        return self.fields.get("path"), self.fields.get("blob")

    def line(self) -> bytes:
        return json.dumps(dict(self.fields), sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8") + b"\n"


def draft(event: str, *, runner: str, job: str | None = None, path: str | None = None, blob: str | None = None,
          commit: str | None = None, **extra: Any) -> dict[str, Any]:
    """A record before it has a place in the chain (no seq, prev or hash yet)."""
    assert event in EVENTS
    return {"event": event, "job": job, "path": path, "blob": blob, "commit": commit, "runner": runner,
            "time": now(), **extra}


def seal(drafts: Iterable[Mapping[str, Any]], *, after_seq: int, after_hash: str) -> list[Record]:
    """Number and chain drafts after the record (after_seq, after_hash)."""
    sealed, seq, prev = [], after_seq, after_hash
    for item in drafts:
        seq += 1
        body = {**item, "seq": seq, "prev": prev}
        body.pop("hash", None)
        body["hash"] = record_hash(body)
        prev = body["hash"]
        sealed.append(Record(MappingProxyType(body)))
    return sealed


@dataclass(frozen=True)
class Tail:
    """The end of the log as of one commit: what a runner pass needs, read cheaply."""

    last_seq: int
    last_hash: str
    last_file: str | None
    last_file_records: int
    last_file_bytes: int
    scanned: Record | None  # the last `scanned` record: where the previous pass stopped
    since_scanned: tuple[Record, ...]  # records after it (a pass that stopped midway)


def log_files(repo: Repo, commit: str) -> list[tuple[str, str]]:
    """(path, blob) of the log files at `commit`, in chain order; IntegrityError on strays."""
    entries = []
    for _, blob, path in repo.ls_tree(commit, AUDIT_DIR):
        if path.endswith(".jsonl"):
            if not _FILE.match(path):
                raise IntegrityError(f"unexpected audit file {path}: log files are named audit/log-NNNNNN.jsonl", file=path)
            entries.append((path, blob))
    entries.sort()
    for index, (path, _) in enumerate(entries, start=1):
        if int(_FILE.match(path).group(1)) != index:  # type: ignore[union-attr]
            raise IntegrityError(f"audit log files are not numbered 1..{len(entries)}: {path} is out of place", file=path)
    return entries


def parse_file(data: bytes, path: str) -> list[Record]:
    records = []
    if data and not data.endswith(b"\n"):
        raise IntegrityError("the last record is not a complete line", file=path, line=data.count(b"\n") + 1)
    for number, line in enumerate(data.splitlines(), start=1):
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise IntegrityError(f"record is not valid JSON ({exc.msg})", file=path, line=number) from None
        if not isinstance(value, dict) or not all(k in value for k in ("seq", "prev", "hash", "time", *_COMMON)):
            raise IntegrityError("record lacks one of seq, prev, hash, time, event, job, path, blob, commit, runner", file=path, line=number)
        records.append(Record(MappingProxyType(value)))
    return records


def check_links(records: Sequence[Record], *, prev_seq: int | None, prev_hash: str | None, where: Mapping[int, tuple[str, int]]) -> None:
    """Raise IntegrityError at the first record whose seq, prev or hash is wrong."""
    for index, record in enumerate(records):
        file, line = where.get(index, (None, None))
        expected_seq = (prev_seq + 1) if prev_seq is not None else record.seq
        if record.seq != expected_seq:
            raise IntegrityError(f"seq {record.seq}: expected seq {expected_seq} (gap or reordering)", file=file, line=line)
        if prev_hash is not None and record["prev"] != prev_hash:
            raise IntegrityError(f"seq {record.seq}: prev does not match the hash of seq {record.seq - 1}", file=file, line=line)
        if record_hash(record.fields) != record["hash"]:
            raise IntegrityError(f"seq {record.seq}: hash does not match the record's content (edited record)", file=file, line=line)
        if record.event not in EVENTS:
            raise IntegrityError(f"seq {record.seq}: unknown event {record.event!r}", file=file, line=line)
        prev_seq, prev_hash = record.seq, record["hash"]


def read_tail(repo: Repo, commit: str) -> Tail:
    """Read log files from the newest back to the last `scanned` record, checking links."""
    files = log_files(repo, commit)
    if not files:
        return Tail(0, GENESIS, None, 0, 0, None, ())
    chunks: list[tuple[str, list[Record]]] = []
    last_bytes = 0
    for path, blob in reversed(files):
        data = repo.blob(blob)
        if not chunks:
            last_bytes = len(data)
        records = parse_file(data, path)
        chunks.insert(0, (path, records))
        if any(r.event == "scanned" for r in records):
            break
    flat: list[Record] = []
    where: dict[int, tuple[str, int]] = {}
    for path, records in chunks:
        for number, record in enumerate(records, start=1):
            where[len(flat)] = (path, number)
            flat.append(record)
    first_seq_ok = None if chunks[0][0] != files[0][0] else 0
    genesis = GENESIS if first_seq_ok == 0 else None
    check_links(flat, prev_seq=first_seq_ok, prev_hash=genesis, where=where)
    scanned_index = max((i for i, r in enumerate(flat) if r.event == "scanned"), default=None)
    last = flat[-1] if flat else None
    return Tail(
        last_seq=last.seq if last else 0,
        last_hash=last["hash"] if last else GENESIS,
        last_file=files[-1][0],
        last_file_records=len(chunks[-1][1]),
        last_file_bytes=last_bytes,
        scanned=flat[scanned_index] if scanned_index is not None else None,
        since_scanned=tuple(flat[scanned_index + 1:] if scanned_index is not None else flat),
    )


def read_all(repo: Repo, commit: str) -> list[Record]:
    """Every record at `commit`, with the whole chain verified from seq 1."""
    flat: list[Record] = []
    where: dict[int, tuple[str, int]] = {}
    for path, blob in log_files(repo, commit):
        for number, record in enumerate(parse_file(repo.blob(blob), path), start=1):
            where[len(flat)] = (path, number)
            flat.append(record)
    check_links(flat, prev_seq=0, prev_hash=GENESIS, where=where)
    return flat


def grep(repo: Repo, commit: str, needle: str) -> list[Record]:
    """Records at `commit` whose line contains `needle` (git grep: fast, but not chain-checked).

    Used where a forged record can only make the runner more careful: a
    `started` that stops a rerun, or the time a commit was first recorded.
    """
    # -a: a match is a match, whatever attributes say about the file being binary.
    proc = repo.run("grep", "-a", "-h", "-F", "--no-color", "-e", needle, commit, "--", AUDIT_DIR, check=False)
    records = []
    for line in proc.stdout.splitlines():
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            records.append(Record(MappingProxyType(value)))
    return records


def started_before(repo: Repo, commit: str, path: str, blob: str) -> Record | None:
    """The first `started` record for this job revision, if it ever started."""
    for record in grep(repo, commit, blob):
        if record.get("event") == "started" and record.revision == (path, blob):
            return record
    return None


def mentions(repo: Repo, commit: str, path: str, blob: str) -> bool:
    """Whether any record names this exact job revision."""
    return blob != "0" * 40 and any(r.revision == (path, blob) for r in grep(repo, commit, blob))


def first_recorded(repo: Repo, commit: str, sha: str) -> datetime | None:
    times = []
    for record in grep(repo, commit, sha):
        if record.get("commit") == sha:
            try:
                times.append(datetime.fromisoformat(str(record.get("time"))))
            except ValueError:
                continue  # a record with a bad time tells nothing about when
    return min(times) if times else None


def append(repo: Repo, commit: str, tail: Tail, records: Sequence[Record]) -> dict[str, bytes]:
    """New contents of the log files that `records` extend, rotating full files."""
    files: dict[str, bytes] = {}
    path = tail.last_file
    count, size = tail.last_file_records, tail.last_file_bytes
    current = b""
    if path is not None:
        current = repo.read_file(commit, path) or b""
    for record in records:
        line = record.line()
        if path is None or count >= RECORDS_PER_FILE or (count > 0 and size + len(line) > MAX_FILE_BYTES):
            number = 1 if path is None else int(_FILE.match(path).group(1)) + 1  # type: ignore[union-attr]
            path, count, size, current = f"{AUDIT_DIR}log-{number:06d}.jsonl", 0, 0, b""
        current += line
        count += 1
        size += len(line)
        files[path] = current
    return files


def check_append_only(repo: Repo, commit: str, changes: Sequence[Change], *, logs_only: bool = False) -> None:
    """An audit commit may only add lines at the end of log files; anything else is tampering.

    With `logs_only`, changes to other files under audit/ (its README) are
    not judged: that is how a whole history, including `init`, is checked.
    """
    for change in changes:
        short = commit[:7]
        if logs_only and not change.path.endswith(".jsonl"):
            continue
        if not _FILE.match(change.path):
            raise IntegrityError(f"commit {short} touches {change.path}: audit commits may only append to audit/log-NNNNNN.jsonl", file=change.path)
        if change.status == "D":
            raise IntegrityError(f"commit {short} deletes audit file {change.path}", file=change.path)
        if change.status == "A":
            continue
        old, new = repo.blob(change.old_blob), repo.blob(change.new_blob)
        if not new.startswith(old):
            line = _first_difference(old, new)
            raise IntegrityError(f"commit {short} rewrites existing audit records in {change.path}", file=change.path, line=line)


def _first_difference(old: bytes, new: bytes) -> int:
    for number, (a, b) in enumerate(zip(old.splitlines(), new.splitlines(), strict=False), start=1):
        if a != b:
            return number
    return min(old.count(b"\n"), new.count(b"\n")) + 1
