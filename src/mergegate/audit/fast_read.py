"""The fast, exact reading of canonical log files: one scan per file instead of json.loads per
line, with orjson where it reads the same values, each file held to the reference reading.

`audit verify` reads 100,000 records in well under a second through here (docs/performance.md);
anything this reading cannot prove is read the reference way by log.py.
"""

from __future__ import annotations

import hashlib
import json
import operator
from json.scanner import make_scanner
from typing import Any

# a declared dependency; without it (an environment not reinstalled yet) the json reading, as exact
# and slower
try:
    import orjson
except ImportError:  # pragma: no cover
    orjson = None  # type: ignore[assignment]

from mergegate.audit.records import (
    EVENTS,
    Record,
    parse,
)

_EVENT_SET = frozenset(EVENTS)
_HASH_MEMBER = len('"hash":"",') + 64
_COMMON = ("event", "job", "path", "blob", "commit", "runner")
REQUIRED = ("seq", "prev", "hash", "time", *_COMMON)  # the members every record has

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


def checked_fast(data: bytes, *, prev_seq: int, prev_hash: str) -> list[Record] | None:
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
    *(k for k in REQUIRED if k not in ("seq", "prev", "hash", "event")),
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
