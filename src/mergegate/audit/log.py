"""Audit records: build, hash, append, read back and verify.

Records live on the branch `mergegate/audit`, never on `approved`. The log is
JSON Lines under audit/, split into files of at most RECORDS_PER_FILE records
(or MAX_FILE_BYTES) so no file grows without bound; the hash chain runs across
files in name order. Next to the log, audit/evidence/<sha256>.json holds
add-only, content-addressed files that records refer to by hash (state too big
for a record, such as the map of unapproved files). See docs/audit-format.md.

Every reader takes the audit branch's tip, or None before the branch exists.
"""

from __future__ import annotations

import hashlib
import json
import operator
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import closing
from dataclasses import dataclass
from datetime import UTC, datetime
from json.scanner import make_scanner
from typing import Any

# a declared dependency; without it (an environment not reinstalled yet) the json reading, as exact
# and slower
try:
    import orjson
except ImportError:  # pragma: no cover
    orjson = None  # type: ignore[assignment]

from mergegate import clock
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
    parse_time,
    seq_of,
)
from mergegate.errors import IntegrityError
from mergegate.git.repo import Repo

AUDIT_DIR = "audit/"
EVIDENCE_DIR = "audit/evidence/"
RECORDS_PER_FILE = 1000
MAX_FILE_BYTES = 4 * 1024 * 1024
_EVENT_SET = frozenset(EVENTS)
_HASH_MEMBER = len('"hash":"",') + 64
_FILE = re.compile(r"^audit/log-(\d{6})\.jsonl$")
_EVIDENCE = re.compile(r"^audit/evidence/([0-9a-f]{64})\.json$")
_COMMON = ("event", "job", "path", "blob", "commit", "runner")
_REQUIRED = ("seq", "prev", "hash", "time", *_COMMON)


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

    The audit branch's tree holds audit/ and nothing else; audit/ holds the log
    files and audit/evidence/. Anything else is tampering.
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
        if path == EVIDENCE_DIR.rstrip("/") and mode == "040000":
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
        if not isinstance(value, dict) or not all(k in value for k in _REQUIRED):
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


_SCAN = make_scanner(json.JSONDecoder())  # type: ignore[arg-type]  # what json.loads runs, without its per-call wrapping
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False)
# orjson spells a float unlike repr() (so unlike json.dumps) only in exponent forms and below 1e-4
# (`1e-7` for 1e-07, `0.000015` for 1.5e-05); a file holding any of these forms is read the json
# way.
_ORJSON_FLOAT_FORMS = (b"e-", b"e+", b"0.0000")


def _holds_float_forms(data: bytes) -> bool:
    """Whether `data` may hold a float orjson spells in one of `_ORJSON_FLOAT_FORMS`: it holds
    `0.0000`, or `e-` or `e+` after a digit (an exponent starts so; text such as `one-time`
    does not send a file to the slower reading). Searched from the end (faster in CPython), and
    `e+` only where there is a `+` at all (one memchr)."""
    if data.rfind(b"0.0000") != -1:
        return True
    for form in (b"e-", b"e+") if b"+" in data else (b"e-",):
        end = len(data)
        while (at := data.rfind(form, 0, end)) > 0:
            if 0x30 <= data[at - 1] <= 0x39:
                return True
            end = at
    return False


def _checked_fast(data: bytes, *, prev_seq: int, prev_hash: str) -> list[Record] | None:
    """The records of one log file, checked as parse_file + check_links would, for files as
    mergegate writes them (every line the canonical JSON of its record); None for any other
    file, and for any file with a problem (the caller reads it the slow way, which names it).

    `_proven` checks the file alone; what is left is its link to the file before: the first
    record's seq and prev.
    """
    values = _proven(data)
    if values is None or not linked(
        values[0]["seq"], values[0]["prev"], prev_seq=prev_seq, prev_hash=prev_hash
    ):
        return None
    return list(map(parse, values))


def linked(seq: object, prev: object, *, prev_seq: int, prev_hash: str) -> bool:
    """Whether a proven file's first record (`_proven`: its seq an int), of `seq` and `prev`,
    follows (prev_seq, prev_hash)."""
    return bool(seq == prev_seq + 1 and prev == prev_hash)


# The members every record has, in one lookup per record; the first four are the chain's.
_MEMBERS = operator.itemgetter(
    "seq",
    "prev",
    "hash",
    "event",
    *(k for k in _REQUIRED if k not in ("seq", "prev", "hash", "event")),
)


def _proven(data: bytes) -> list[dict[str, object]] | None:
    """The values of a log file's lines when the file alone passes every check parse_file +
    check_links make (complete lines, each the canonical JSON of a record with every required
    member, seqs counting up by one, each prev the hash before it, each hash right, known
    events), for files as mergegate writes them; else None. Not checked: the first record's
    link to the file before (`linked`), the one thing a file cannot prove alone.

    It never accepts what the slow way refuses: `_canonical_values` shows that each line is
    exactly one JSON value and is the canonical JSON of that value, so the canonical body that
    `record_hash` hashes is the line less its `"hash":"<hash>"` member. (Removing any other
    such member leaves the hash inside what is hashed, which no SHA-256 equals.)
    """
    if not data or not data.endswith(b"\n") or b"\r" in data:
        return None
    lines = data.split(b"\n")
    lines.pop()  # after the last newline
    values = _canonical_values(data, lines)
    if values is None:
        return None
    # Each check below runs over the whole file at C speed (map, tuple and set comparisons), not
    # one Python statement per record: at 1,000 records per file that is most of the cost.
    try:
        # KeyError: a member missing; TypeError: a line that is not an object.
        seqs, prevs, hashes, events = list(zip(*map(_MEMBERS, values), strict=False))[
            :4
        ]  # (all of 10)
        if set(map(type, seqs)) != {int} or seqs != tuple(range(seqs[0], seqs[0] + len(seqs))):
            return None
        if prevs[1:] != hashes[:-1] or not set(events) <= _EVENT_SET:
            return None
    except (KeyError, TypeError):  # (TypeError too for an unhashable event)
        return None
    # The body record_hash hashes: the line less `"hash":"<64 hex>",`. In canonical JSON the
    # record's own `hash` member is followed by a comma (job, path, prev ... sort after it). If
    # the first `"hash":"` of a line is another one (a nested key), or the hash is not 64
    # characters, the cut is elsewhere and what is hashed still holds the hash, which no
    # SHA-256 equals: refused.
    if _digests(lines) != list(hashes):
        return None
    return values


_SHA256 = hashlib.sha256()  # copied per line: cheaper than a new hash object (no digest lookup)


def _digests(lines: list[bytes]) -> list[str] | None:
    """The SHA-256 of each line less its first `"hash":"<64 characters>",` (None if a line has no
    `"hash":"`)."""
    digests = []
    for line in lines:
        cut = line.find(b'"hash":"')
        if cut == -1:
            return None
        digest = _SHA256.copy()
        digest.update(line[:cut])
        digest.update(line[cut + _HASH_MEMBER :])
        digests.append(digest.hexdigest())
    return digests


def _canonical_values(data: bytes, lines: list[bytes]) -> list[Any] | None:
    """The JSON value of each line, when every line is exactly one JSON value written canonically
    (as `Record.line` writes it, less the newline), and as json.loads reads it; else None."""
    values = _canonical_values_orjson(data, lines)
    return values if values is not None else _canonical_values_json(data, lines)


def _canonical_values_orjson(data: bytes, lines: list[bytes]) -> list[Any] | None:
    """orjson's reading, about 3 times faster than json's (issue 12), exact for what it accepts.

    Each line is read alone (orjson refuses trailing data), and orjson's sorted encoding of all
    of them is compared with the lines joined. Where orjson writes what json.dumps writes, that
    equality is the canonical test itself: strings are escaped alike for every code point,
    integers alike, keys sorted alike (code point order), and floats alike outside the forms
    `_ORJSON_FLOAT_FORMS` screens out (tests/audit/test_log.py holds orjson to all of that). What
    orjson reads differently from json.loads never gets this far: it either refuses it (NaN,
    lone surrogates, invalid UTF-8) or writes it back differently (big integers become floats,
    duplicate keys collapse), and the equality fails.
    """
    if orjson is None or _holds_float_forms(data):
        return None
    loads = orjson.loads
    try:
        values = [loads(line) for line in lines]
        written, joined = orjson.dumps(values, option=orjson.OPT_SORT_KEYS), b",".join(lines)
        # written == b"[" + joined + b"]", without two more copies of the file (orjson writes a list
        # in brackets)
        if (
            len(written) != len(joined) + 2
            or not written.startswith(joined, 1)
            or written[-1] != 0x5D
        ):
            return None
    except (orjson.JSONDecodeError, orjson.JSONEncodeError):
        return None
    return values


def _canonical_values_json(data: bytes, lines: list[bytes]) -> list[Any] | None:
    """json's own reading: json.loads' scanner per line (from `{` to the newline) and one canonical
    encoding of the whole file, which equals the lines joined exactly when every line is
    canonical."""
    try:
        text = data.decode(
            "utf-8"
        )  # strict: json.loads' own decoding of each line is then the same
    except UnicodeDecodeError:
        return None
    texts = text.split("\n")
    texts.pop()
    if len(texts) != len(lines):
        return None
    values = []
    try:
        for line in texts:
            if line[:1] != "{":
                return None
            value, end = _SCAN(line, 0)
            if end != len(line):
                return None
            values.append(value)
    except (StopIteration, ValueError, RecursionError):
        return None
    try:
        if _CANONICAL.encode(values) != "[" + ",".join(texts) + "]":
            return None
    except (TypeError, ValueError, RecursionError):
        return None
    return values


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

    One log file (at most RECORDS_PER_FILE records) is in memory at a time, so
    `audit verify` of 100,000 records needs no more than of 1,000. The first
    broken link, in chain order, raises IntegrityError naming its file and line.
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
            records = _checked_fast(data, prev_seq=prev_seq, prev_hash=prev_hash)
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


def judged_time(record: Record) -> datetime | None:
    """The time the runner judged the commit a record names at: its `judged` (the clock at the start
    of
    the pass that wrote it), else its `time` (records from before runners wrote `judged`).

    A pass judges every commit at its start and writes the records later: judging a key's lifetime
    at the record's own time would differ from the runner whenever a lifetime ended in between.
    A `judged` after the record's own time, or unreadable, is no runner's (verify reports it): then
    its time.
    """
    when = parse_time(record.time)
    judged = parse_time(record.written("judged"))
    if judged is None or when is None:
        return when
    return min(judged, when)


class Appenders:
    """Which audit commit appended a record: a binary search over the audit branch's line by the
    last seq
    of each commit's newest log file, confirmed by the record's own hash (in the commit, not in its
    parent).

    Anything unexpected (an unreadable log file, a record not where the search leads) answers None:
    a
    record whose audit commit is not known vouches for nothing."""

    def __init__(self, repo: Repo, tip: str) -> None:
        self.repo, self.tip = repo, tip
        self._line: list[str] | None = None
        self._last: dict[str, int | None] = {}
        self._of: dict[tuple[int, str], str | None] = {}

    def of(self, record: Record) -> str | None:
        key = (record.seq, record.hash)
        if key not in self._of:
            self._of[key] = self._search(record)
        return self._of[key]

    def _search(self, record: Record) -> str | None:
        if self._line is None:
            self._line = self.repo.out("rev-list", "--first-parent", "--reverse", self.tip).split()
        line, seq, lo, hi = self._line, record.seq, 0, len(self._line)
        while lo < hi:
            mid = (lo + hi) // 2
            last = self._last_seq(line[mid])
            if last is None:
                return None
            lo, hi = (lo, mid) if last >= seq else (mid + 1, hi)
        if lo == len(line):
            return None
        found, digest = line[lo], record.hash
        before = line[lo - 1] if lo else None
        here = any(r.hash == digest for r in grep(self.repo, found, digest))
        earlier = before is not None and any(
            r.hash == digest for r in grep(self.repo, before, digest)
        )
        return found if here and not earlier else None

    def _last_seq(self, commit: str) -> int | None:
        if commit not in self._last:
            self._last[commit] = None
            names = sorted(
                (path, blob)
                for mode, blob, path in self.repo.ls_tree_flat(commit, AUDIT_DIR)
                if _FILE.match(AUDIT_DIR + path) and mode == "100644"
            )
            if not names:
                self._last[commit] = 0
            else:
                lines = self.repo.blob(
                    names[-1][1]
                ).splitlines()  # (split as parse_file splits: a bare CR too)
                try:
                    value = json.loads(lines[-1]) if lines else None
                except ValueError:
                    return None
                if isinstance(value, dict) and isinstance(value.get("seq"), int):
                    self._last[commit] = value["seq"]
        return self._last[commit]


def first_covering(
    scanned: Sequence[Record],
    sha: str,
    line: Mapping[str, int],
    appenders: Appenders,
    vouched: Callable[[str, datetime], bool],
) -> datetime | None:
    """When a runner judged `sha`, an empty commit on approved's first-parent line `line` (commit ->
    place,
    0 for the tip; a veto: no record but `scanned` ones names such a commit), as verify dates it:
    the first
    of the `scanned` records (in chain order) whose range holds it, counting only one an audit
    commit
    `vouched` accepts appended (judging the signer's key at the record's time). None: no such
    record."""
    place = line.get(sha)
    if place is None:
        return None
    for record in scanned:
        if not isinstance(record, Scanned):
            continue
        end, start = line.get(str(record.commit)), line.get(str(record.start))
        if end is None or start is None or not end <= place < start:
            continue
        when = judged_time(record)
        if when is None:
            continue
        found = appenders.of(record)
        if found is not None and vouched(found, when):
            return when
    return None


def first_vouched(
    repo: Repo, commit: str | None, sha: str, vouched: Callable[[str, datetime], bool]
) -> datetime | None:
    """When the runner judged `sha`, as the first record naming it (in chain order) says, counting
    only
    records appended by an audit commit that `vouched` accepts: one signed by a runner of the policy
    in
    force before `sha`, its key judged at the record's time, as approver keys are (a runner key that
    ended
    since still vouched then). A record in a commit only `sha`'s own policy would trust cannot date
    `sha`
    (it would vouch for itself: an expired approver's policy change, dated inside the key's life by
    a runner
    key the change itself adds). None: no such record."""
    if commit is None:
        return None
    appenders = Appenders(repo, commit)
    for record in sorted(
        (r for r in grep(repo, commit, sha) if r.commit == sha), key=lambda r: r.seq
    ):
        when = judged_time(record)
        if when is None:
            continue  # (a record with a bad time tells nothing about when)
        found = appenders.of(record)
        if found is not None and vouched(found, when):
            return when
    return None


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

    The map can hold every file of an unsigned push (thousands), so a record
    carries only its count and hash; the same map is the same file, written once.
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
