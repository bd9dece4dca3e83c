"""Audit records: build, hash, append, read back and verify.

Records live on the branch `mergegate/audit`, never on `approved`. The log is JSON Lines under
audit/, split into files of at most RECORDS_PER_FILE records (or MAX_FILE_BYTES) so no file grows
without bound; the hash chain runs across files in name order. Next to the log,
audit/evidence/<sha256>.json holds add-only, content-addressed files that records refer to by hash
(state too big for a record, such as the map of unapproved files). See docs/audit-format.md.

Every reader takes the audit branch's tip, or None before the branch exists.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

# a declared dependency; without it (an environment not reinstalled yet) the json reading, as exact
# and slower
try:
    import orjson
except ImportError:  # pragma: no cover
    orjson = None  # type: ignore[assignment]

from mergegate import clock
from mergegate.audit.fast_read import REQUIRED, checked_fast
from mergegate.audit.records import (
    EVENTS,
    GENESIS,
    OpenCommit,
    Record,
    Scanned,
    Started,
    body_hash,
    canonical,
    parse,
    seq_of,
)
from mergegate.errors import IntegrityError
from mergegate.git.repo import Repo

AUDIT_DIR = "audit/"
EVIDENCE_DIR = "audit/evidence/"
ATTESTATIONS_DIR = "audit/attestations/"  # runs' attestations (audit/attestation.py)
RECORDS_PER_FILE = 1000
MAX_FILE_BYTES = 4 * 1024 * 1024
_FILE = re.compile(r"^audit/log-(\d{6})\.jsonl$")
_EVIDENCE = re.compile(r"^audit/evidence/([0-9a-f]{64})\.json$")


def now() -> str:
    return stamp(clock.now())


def stamp(when: datetime) -> str:
    """A UTC time as records carry it (`time`, `judged`)."""
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def record_hash(record: Mapping[str, object]) -> str:
    return body_hash(record)


def draft(
    event: str,
    *,
    runner: str,
    job: str | None = None,
    path: str | None = None,
    blob: str | None = None,
    commit: str | None = None,
    **extra: object,
) -> dict[str, object]:
    """A record before it has a place in the chain, as its JSON object: for records made from
    their members (tests, benchmarks, forged records; `seal` reads it as a runner's). The runner
    drafts typed records (records.draft)."""
    assert event in EVENTS
    return {
        "event": event,
        "job": job,
        "path": path,
        "blob": blob,
        "commit": commit,
        "runner": runner,
        "time": now(),
        **extra,
    }


def seal(
    drafts: Iterable[Mapping[str, object] | Record], *, after_seq: int, after_hash: str
) -> list[Record]:
    """Number and chain drafts after the record (after_seq, after_hash): the edge where records
    are written. A draft given as a JSON object is read as its line will be read back (through
    its canonical JSON), so the sealed record's typed members are what any reader sees."""
    sealed, seq, prev = [], after_seq, after_hash
    for item in drafts:
        seq += 1
        typed = item if isinstance(item, Record) else parse(json.loads(canonical(item)))
        record = typed.sealed(seq=seq, prev=prev)
        prev = record.hash
        sealed.append(record)
    return sealed


@dataclass(frozen=True)
class Tail:
    """The end of the log as of one commit: what a runner pass needs, read cheaply."""

    last_seq: int
    last_hash: str
    last_file: str | None
    last_file_records: int
    last_file_bytes: int
    scanned: Scanned | None  # the last `scanned` record: where the previous pass stopped
    since_scanned: tuple[Record, ...]  # records after it (a pass that stopped midway)
    scanned_file: str | None = None  # the log file that holds it,
    scanned_end: int = 0  # and the byte offset where its line ends


def log_files(repo: Repo, commit: str | None) -> list[tuple[str, str]]:
    """(path, blob) of the log files at `commit`, in chain order; IntegrityError on strays.

    The audit branch's tree holds audit/ and nothing else; audit/ holds the log files and
    audit/evidence/. Anything else is tampering.
    """
    if commit is None:
        return []
    for mode, _, path in repo.ls_tree_flat(commit):
        if path != "audit" or mode != "040000":
            raise IntegrityError(
                f"unexpected file {path} on the audit branch at {commit[:12]}: its tree holds only "
                "audit/",
                file=path,
            )
    entries = []
    for mode, blob, name in repo.ls_tree_flat(commit, AUDIT_DIR):
        path = AUDIT_DIR + name
        if path in (EVIDENCE_DIR.rstrip("/"), ATTESTATIONS_DIR.rstrip("/")) and mode == "040000":
            continue
        if not _FILE.match(path) or mode != "100644":
            raise IntegrityError(
                f"unexpected audit file {path} at {commit[:12]}: log files are named "
                "audit/log-NNNNNN.jsonl",
                file=path,
            )
        entries.append((path, blob))
    entries.sort()
    for index, (path, _) in enumerate(entries, start=1):
        if int(_FILE.match(path).group(1)) != index:  # type: ignore[union-attr]
            raise IntegrityError(
                f"audit log files are not numbered 1..{len(entries)}: {path} is out of place",
                file=path,
            )
    return entries


def parse_file(data: bytes, path: str) -> list[Record]:
    """The records of one log file (the edge where the log is read), each line checked to be a
    JSON object with every member records have; IntegrityError naming the line if not."""
    found: list[Record] = []
    if data and not data.endswith(b"\n"):
        raise IntegrityError(
            "the last record is not a complete line", file=path, line=data.count(b"\n") + 1
        )
    for number, line in enumerate(data.splitlines(), start=1):
        try:
            value = json.loads(line)
        except json.JSONDecodeError as exc:
            raise IntegrityError(
                f"record is not valid JSON ({exc.msg})", file=path, line=number
            ) from None
        except UnicodeDecodeError:  # bytes no JSON text has: tampering, not a crash
            raise IntegrityError(
                "record is not valid JSON (not UTF-8)", file=path, line=number
            ) from None
        if not isinstance(value, dict) or not all(k in value for k in REQUIRED):
            raise IntegrityError(
                "record lacks one of seq, prev, hash, time, event, job, path, blob, commit, runner",
                file=path,
                line=number,
            )
        found.append(parse(value))
    return found


def check_links(
    records: Sequence[Record],
    *,
    prev_seq: int | None,
    prev_hash: str | None,
    where: Mapping[int, tuple[str, int]],
) -> None:
    """Raise IntegrityError at the first record whose seq, prev or hash is wrong."""
    for index, record in enumerate(records):
        file, line = where.get(index, (None, None))
        try:
            seq = seq_of(record)
        except (TypeError, ValueError):
            raise IntegrityError(
                f"seq {record.extra.get('seq')!r} is not a number", file=file, line=line
            ) from None
        expected_seq = (prev_seq + 1) if prev_seq is not None else seq
        if seq != expected_seq:
            raise IntegrityError(
                f"seq {seq}: expected seq {expected_seq} (gap or reordering)",
                file=file,
                line=line,
            )
        body = record.as_json()
        if prev_hash is not None and body["prev"] != prev_hash:
            raise IntegrityError(
                f"seq {seq}: prev does not match the hash of seq {seq - 1}",
                file=file,
                line=line,
            )
        if record_hash(body) != body["hash"]:
            raise IntegrityError(
                f"seq {seq}: hash does not match the record's content (edited record)",
                file=file,
                line=line,
            )
        if record.event not in EVENTS:
            raise IntegrityError(f"seq {seq}: unknown event {record.event!r}", file=file, line=line)
        prev_seq, prev_hash = seq, record.hash


def read_tail(repo: Repo, commit: str | None) -> Tail:
    """Read log files from the newest back to the last `scanned` record, checking links."""
    files = log_files(repo, commit)
    if not files:
        return Tail(0, GENESIS, None, 0, 0, None, ())
    chunks: list[tuple[str, list[Record]]] = []
    last_bytes = 0
    scanned_at: tuple[str, int] | None = None
    for path, blob in reversed(files):
        data = repo.blob(blob)
        if not chunks:
            last_bytes = len(data)
        records = parse_file(data, path)
        chunks.insert(0, (path, records))
        numbers = [n for n, r in enumerate(records, start=1) if r.event == "scanned"]
        if numbers:
            lines = data.split(b"\n")
            scanned_at = (path, sum(len(line) + 1 for line in lines[: numbers[-1]]))
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
    scanned_index = max((i for i, r in enumerate(flat) if isinstance(r, Scanned)), default=None)
    scanned = flat[scanned_index] if scanned_index is not None else None
    assert scanned is None or isinstance(scanned, Scanned)
    last = flat[-1] if flat else None
    return Tail(
        last_seq=last.seq if last else 0,
        last_hash=last.hash if last else GENESIS,
        last_file=files[-1][0],
        last_file_records=len(chunks[-1][1]),
        last_file_bytes=last_bytes,
        scanned=scanned,
        since_scanned=tuple(flat[scanned_index + 1 :] if scanned_index is not None else flat),
        scanned_file=scanned_at[0] if scanned_at else None,
        scanned_end=scanned_at[1] if scanned_at else 0,
    )


def read_all(repo: Repo, commit: str | None) -> list[Record]:
    """Every record at `commit`, with the whole chain verified from seq 1."""
    return list(iter_all(repo, commit))


def iter_all(repo: Repo, commit: str | None) -> Iterator[Record]:
    """Every record at `commit` from seq 1, the chain checked as it goes.

    One log file (at most RECORDS_PER_FILE records) is in memory at a time, so `audit verify` of
    100,000 records needs no more than of 1,000. The first broken link, in chain order, raises
    IntegrityError naming its file and line.
    """
    for log in iter_files(repo, commit):
        yield from log.records


@dataclass(frozen=True)
class LogFile:
    """One log file as read and chain-checked: its place, its bytes and its records."""

    path: str
    blob: str
    data: bytes
    records: list[Record]


def iter_files(repo: Repo, commit: str | None) -> Iterator[LogFile]:
    """The log files at `commit` in chain order, each checked (and linked to the one before) as
    iter_all checks them; one file in memory at a time."""
    yield from checked_files(repo, log_files(repo, commit))


def checked_files(repo: Repo, files: Sequence[tuple[str, str]]) -> Iterator[LogFile]:
    """iter_files of the (path, blob) `files` that log_files listed."""
    prev_seq, prev_hash = 0, GENESIS
    with closing(
        repo.blobs([blob for _, blob in files])
    ) as contents:  # git reads ahead while we check
        for (path, blob), data in zip(files, contents, strict=True):
            records = checked_fast(data, prev_seq=prev_seq, prev_hash=prev_hash)
            if (
                records is None
            ):  # not as mergegate writes files: the full reading, which says what is wrong
                records = parse_file(data, path)
                where = {index: (path, index + 1) for index in range(len(records))}
                check_links(records, prev_seq=prev_seq, prev_hash=prev_hash, where=where)
            yield LogFile(path, blob, data, records)
            if records:
                prev_seq, prev_hash = records[-1].seq, records[-1].hash


def grep(repo: Repo, commit: str | None, needle: str) -> list[Record]:
    """Records at `commit` whose line contains `needle` (git grep: fast, but not chain-checked).

    Used where a forged record can only make the runner more careful (a `started`
    that stops a rerun), or where what it finds is confirmed (`first_vouched`).
    """
    return grep_any(repo, commit, [needle])


def grep_any(repo: Repo, commit: str | None, needles: Iterable[str]) -> list[Record]:
    """Records at `commit` whose line contains any of `needles`: one git grep for all (as
    `grep`)."""
    patterns = sorted(set(needles))
    if commit is None or not patterns:
        return []
    # Patterns on stdin: thousands of blob ids would not fit an argument list.
    proc = repo.run(
        "grep",
        "-a",
        "-h",
        "-F",
        "--no-color",
        "-f",
        "-",
        commit,
        "--",
        f"{AUDIT_DIR}log-*.jsonl",
        input="".join(f"{needle}\n" for needle in patterns).encode(),
        check=False,
    )
    return records_of(proc.stdout.splitlines())


def records_of(lines: Iterable[bytes]) -> list[Record]:
    """The records among grepped log lines (a line that is no record object is skipped: grep is not
    the chain check)."""
    found: list[Record] = []
    for line in lines:
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict) and isinstance(value.get("seq"), int):
            found.append(parse(value))
    return found


def attempt_of(record: Record) -> int:
    """A `started` record's attempt (1-based); records from before retries existed are attempt 1."""
    return record.attempt_number if isinstance(record, Started) else 1


def started_before(
    repo: Repo, commit: str | None, path: str, blob: str, *, attempt: int = 1
) -> Record | None:
    """The first `started` record for this job revision (of `attempt` or a later one), if there is
    one."""
    for record in grep(repo, commit, blob):
        if (
            isinstance(record, Started)
            and record.revision == (path, blob)
            and record.attempt_number >= attempt
        ):
            return record
    return None


def mentions(repo: Repo, commit: str | None, path: str, blob: str) -> bool:
    """Whether any record names this exact job revision.

    One `git grep -o` of every blob id the records name, per audit tip, then a lookup
    (a merge of a thousand new jobs asks a thousand times); a blob found is confirmed
    with its path by a grep for it.
    """
    if blob == "0" * 40 or commit is None:
        return False
    if blob not in _named_blobs(repo, commit):
        return False
    return any(r.revision == (path, blob) for r in grep(repo, commit, blob))


_NAMED: dict[tuple[int, str], frozenset[str]] = {}


def _named_blobs(repo: Repo, commit: str) -> frozenset[str]:
    key = (id(repo), commit)
    if key not in _NAMED:
        proc = repo.run(
            "grep",
            "-a",
            "-h",
            "-o",
            "-E",
            '"blob":"[0-9a-f]{40}"',
            commit,
            "--",
            f"{AUDIT_DIR}log-*.jsonl",
            check=False,
        )
        if len(_NAMED) > 64:
            _NAMED.clear()
        _NAMED[key] = frozenset(
            line[8:48].decode() for line in proc.stdout.splitlines() if len(line) >= 49
        )
    return _NAMED[key]


def append(
    repo: Repo, commit: str | None, tail: Tail, records: Sequence[Record]
) -> dict[str, bytes]:
    """New contents of the log files that `records` extend, rotating full files."""
    files: dict[str, bytes] = {}
    path = tail.last_file
    count, size = tail.last_file_records, tail.last_file_bytes
    current = b""
    if path is not None and commit is not None:
        current = repo.read_file(commit, path) or b""
    for record in records:
        line = record.line()
        if (
            path is None
            or count >= RECORDS_PER_FILE
            or (count > 0 and size + len(line) > MAX_FILE_BYTES)
        ):
            number = 1 if path is None else int(_FILE.match(path).group(1)) + 1  # type: ignore[union-attr]
            path, count, size, current = f"{AUDIT_DIR}log-{number:06d}.jsonl", 0, 0, b""
        current += line
        count += 1
        size += len(line)
        files[path] = current
    return files


# -- evidence: add-only files named by the SHA-256 of their bytes -----------------
@dataclass(frozen=True)
class EvidenceFile:
    """One evidence file: its bytes and their SHA-256, which names it."""

    sha256: str
    data: bytes

    @property
    def path(self) -> str:
        return f"{EVIDENCE_DIR}{self.sha256}.json"


def evidence(value: Any) -> EvidenceFile:
    """A JSON value as an evidence file (canonical bytes, so equal values share one file)."""
    data = (
        json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        + b"\n"
    )
    return EvidenceFile(hashlib.sha256(data).hexdigest(), data)


def is_evidence_path(path: str) -> str | None:
    """The SHA-256 an evidence file's name claims, or None if it is not named like one."""
    match = _EVIDENCE.match(path)
    return match.group(1) if match else None


def read_evidence(repo: Repo, commit: str | None, sha256: str) -> bytes:
    """The bytes of evidence file `sha256` at `commit`; IntegrityError if missing or not what its
    name says."""
    path = f"{EVIDENCE_DIR}{sha256}.json"
    data = (
        repo.read_file(commit, path)
        if commit is not None and re.fullmatch(r"[0-9a-f]{64}", sha256)
        else None
    )
    if data is None:
        raise IntegrityError(
            f"a record refers to evidence {sha256[:12]}, which is not on the audit branch",
            file=path,
        )
    if hashlib.sha256(data).hexdigest() != sha256:
        raise IntegrityError(f"evidence file {path} does not hash to its name (edited)", file=path)
    return data


# -- the unapproved map, recorded once by reference -------------------------------
def unapproved_ref(files: Mapping[str, str]) -> tuple[int, str | None, EvidenceFile | None]:
    """A `scanned` record's reference to the unapproved map (its `unapproved_count` and
    `unapproved_file`), and the evidence file holding it.

    The map can hold every file of an unsigned push (thousands), so a record carries only its count
    and hash; the same map is the same file, written once.
    """
    if not files:
        return 0, None, None
    held = evidence({"kind": "unapproved", "files": dict(sorted(files.items()))})
    return len(files), held.sha256, held


def read_unapproved(
    repo: Repo, commit: str | None, record: Scanned, entry: OpenCommit | None = None
) -> dict[str, str]:
    """The unapproved map a `scanned` record refers to, or the one an entry of its `open` list
    does (an `unapproved_file` that is no hash is read as written, and refused)."""
    digest: object
    count: object
    if entry is not None:
        digest, count = entry.unapproved_file, entry.unapproved_count
    else:
        digest, count = record.written("unapproved_file"), record.written("unapproved_count")
    if not digest:
        return {}
    try:
        value = json.loads(read_evidence(repo, commit, str(digest)))
        files = value["files"]
        if value.get("kind") != "unapproved" or not isinstance(files, dict) or len(files) != count:
            raise ValueError(digest)
    except (ValueError, KeyError, TypeError):
        raise IntegrityError(
            f"seq {record.seq}: its unapproved_file {str(digest)[:12]} is not an unapproved map "
            f"of {count} paths",
            file=f"{EVIDENCE_DIR}{digest}.json",
        ) from None
    return {str(k): str(v) for k, v in files.items()}
