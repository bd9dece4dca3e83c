"""Audit records as typed values: one frozen dataclass per event (docs/audit-format.md).

Pure values: nothing here reads git, the clock or the network, so the rules may import it.
`parse` turns the JSON object of one log line into its record and `Record.as_json` turns a
record back into that object; `line` writes it as the log holds it. Reading then writing
gives back the same bytes, for any line: a member this module does not know, or one whose
value is not exactly of the type it expects (records are input; anyone who may push the audit
branch writes them), is kept verbatim in `extra` and written back from there, and a known member
a line lacks is named in `absent` and not written. Consumers read the typed attributes: a member
kept in `extra` reads as what can be read of it (a lease with other members still ends at its
`until`), else as missing (its default); `written` gives the value as the line holds it, for a
message or a check that must see it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, fields, replace
from datetime import datetime
from types import MappingProxyType
from typing import Any, ClassVar, TypeVar

EVENTS = ("started", "finished", "rejected", "vetoed", "scanned", "policy")
GENESIS = "0" * 64


def canonical(value: object) -> bytes:
    """The bytes of a JSON value as records are written and hashed: sorted keys, no whitespace,
    raw UTF-8 (docs/audit-format.md, "The chain")."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode(
        "utf-8"
    )


def body_hash(body: Mapping[str, object]) -> str:
    """A record's `hash`: the SHA-256 of its JSON object without `hash`."""
    return hashlib.sha256(canonical({k: v for k, v in body.items() if k != "hash"})).hexdigest()


# -- nested values -----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Lease:
    """A `started` record's claim: who holds it, and until when (UTC, as records write times)."""

    holder: str
    until: str

    def as_json(self) -> dict[str, object]:
        return {"holder": self.holder, "until": self.until}


@dataclass(frozen=True, slots=True)
class OpenCommit:
    """One entry of a `scanned` record's `open`: a commit whose approved jobs may still need a
    runner, and the unapproved map before it (by reference)."""

    commit: str
    unapproved_count: int
    unapproved_file: str | None

    def as_json(self) -> dict[str, object]:
        return {
            "commit": self.commit,
            "unapproved_count": self.unapproved_count,
            "unapproved_file": self.unapproved_file,
        }


@dataclass(frozen=True, slots=True)
class EmergencyUse:
    """A `started` record's `emergency`: who broke the glass, and why (docs/audit-format.md)."""

    by: tuple[str, ...]
    reason: str

    def as_json(self) -> dict[str, object]:
        return {"by": list(self.by), "reason": self.reason}


# -- reading one member: a check of its JSON value, and the typed value it gives ----------------
# A reader: (whether the value is exactly of the member's type, the typed value read from it or
# None). A value not exactly of its type is written back verbatim, from `extra`.
_Reader = Callable[[object], tuple[bool, object]]
_NO: tuple[bool, object] = (False, None)


def _is_int(value: object) -> bool:
    return type(value) is int  # (not bool: JSON's true is no count)


def _str(value: object) -> tuple[bool, object]:
    return (True, value) if type(value) is str else _NO


def _opt_str(value: object) -> tuple[bool, object]:
    return (True, value) if value is None or type(value) is str else _NO


def _int(value: object) -> tuple[bool, object]:
    return (True, value) if _is_int(value) else _NO


def _opt_int(value: object) -> tuple[bool, object]:
    return (True, value) if value is None or _is_int(value) else _NO


def _bool(value: object) -> tuple[bool, object]:
    return (True, value) if type(value) is bool else _NO


def _strs(value: object) -> tuple[bool, object]:
    if type(value) is list and all(type(item) is str for item in value):
        return True, tuple(value)
    return _NO


def _numbers(value: object) -> tuple[bool, object]:
    if type(value) is dict and all(
        type(v) is float or _is_int(v) for v in value.values()
    ):  # (JSON object keys are always strings)
        return True, dict(value)
    return _NO


def _texts(value: object) -> tuple[bool, object]:
    if type(value) is dict and all(type(v) is str for v in value.values()):
        return True, dict(value)
    return _NO


def _objects(value: object) -> tuple[bool, object]:
    """A list of objects of text members (a `started` record's `counted`)."""
    if type(value) is list and all(
        type(item) is dict and all(type(v) is str for v in item.values()) for item in value
    ):
        return True, tuple(dict(item) for item in value)
    return _NO


def _lease(value: object) -> tuple[bool, object]:
    """A lease; one with other members, or a holder that is no text, still ends at its `until`
    (read as it always was: a run whose lease ran out is closed as lost)."""
    if type(value) is not dict or type(value.get("until")) is not str:
        return _NO
    holder = value.get("holder")
    exact = value.keys() == {"holder", "until"} and type(holder) is str
    return exact, Lease(holder if type(holder) is str else "", value["until"])


def _open(value: object) -> tuple[bool, object]:
    if type(value) is not list:
        return _NO
    entries = []
    for item in value:
        if not (
            type(item) is dict
            and item.keys() == {"commit", "unapproved_count", "unapproved_file"}
            and type(item["commit"]) is str
            and _is_int(item["unapproved_count"])
            and (item["unapproved_file"] is None or type(item["unapproved_file"]) is str)
        ):
            return _NO
        entries.append(
            OpenCommit(item["commit"], item["unapproved_count"], item["unapproved_file"])
        )
    return True, tuple(entries)


def _emergency(value: object) -> tuple[bool, object]:
    if not (type(value) is dict and value.keys() == {"by", "reason"}):
        return _NO
    by, reason = value["by"], value["reason"]
    if type(by) is not list or not all(type(p) is str for p in by) or type(reason) is not str:
        return _NO
    return True, EmergencyUse(tuple(by), reason)


def _read(reader: _Reader) -> dict[str, _Reader]:
    """The metadata of a dataclass field that is a JSON member of its name, read with `reader`
    (its default None: a member the line lacks, or holds another type of, reads as None)."""
    return {"read": reader}


def _as_json(value: object) -> object:
    if isinstance(value, Lease | OpenCommit | EmergencyUse):
        return value.as_json()
    if isinstance(value, tuple):
        return [_as_json(item) for item in value]
    if isinstance(value, dict):
        return dict(value)
    if isinstance(value, Mapping):
        return dict(value)
    return value


# -- the records -------------------------------------------------------------------------------
R = TypeVar("R", bound="Record")


@dataclass(frozen=True, slots=True, kw_only=True)
class Record:
    """The members every record has (docs/audit-format.md, "Common fields").

    A record before it has a place in the chain (a draft) has seq 0 and empty prev and hash;
    `sealed` gives it its place.
    """

    EVENT: ClassVar[str] = ""
    _READERS: ClassVar[tuple[tuple[str, _Reader], ...]] = ()

    seq: int = 0
    prev: str = ""
    hash: str = ""
    time: str = ""
    job: str | None = field(default=None, metadata=_read(_opt_str))
    path: str | None = field(default=None, metadata=_read(_opt_str))
    blob: str | None = field(default=None, metadata=_read(_opt_str))
    commit: str | None = field(default=None, metadata=_read(_opt_str))
    runner: str = ""
    # Members kept verbatim: unknown to this type, or not of the type it expects. (A record's
    # mappings are plain dicts, read-only by type, so that records pickle: `audit verify`'s
    # workers send them.)
    extra: Mapping[str, object] = field(default_factory=dict, repr=False)
    # Members of this type the line lacks (not written back; a draft names those it leaves out).
    absent: frozenset[str] = field(default=frozenset(), repr=False)

    @property
    def event(self) -> str:
        return self.EVENT

    @property
    def revision(self) -> tuple[str | None, str | None]:
        """(path, blob): the job revision the record is about."""
        return self.path, self.blob

    def as_json(self) -> dict[str, object]:
        """The JSON object of the record, exactly as its line holds it."""
        body: dict[str, object] = {}
        skip = self.absent
        if "event" not in skip:
            body["event"] = self.event
        for name, _, _ in _specs(type(self)):
            if name not in skip:
                body[name] = _as_json(getattr(self, name))
        body.update(self.extra)
        return body

    def line(self) -> bytes:
        """The record as one line of a log file."""
        return canonical(self.as_json()) + b"\n"

    def sealed(self: R, *, seq: int, prev: str) -> R:
        """The record at `seq` after the record whose hash is `prev`, hashed."""
        placed = replace(
            self,
            seq=seq,
            prev=prev,
            hash="",
            absent=self.absent - {"seq", "prev", "hash"},
            extra={k: v for k, v in self.extra.items() if k not in ("seq", "prev", "hash")},
        )
        return replace(placed, hash=body_hash(placed.as_json()))

    def has(self, name: str) -> bool:
        """Whether the line has member `name` (of any type, null too)."""
        return name in self.extra or (
            name not in self.absent and (name == "event" or name in _names(type(self)))
        )

    def written(self, name: str) -> object:
        """Member `name` as the line holds it (None if it lacks it): for what a reader says of a
        value that is not of its type, and for the checks that must see one."""
        if name in self.extra:
            return self.extra[name]
        if name in self.absent or (name not in _names(type(self)) and name != "event"):
            return None
        return self.event if name == "event" else _as_json(getattr(self, name))


_MISSING: Any = object()


@dataclass(frozen=True, slots=True, kw_only=True)
class Judged(Record):
    """A record of a pass's judgement: `judged` is when (absent from records before it
    existed)."""

    judged: str | None = field(default=None, metadata=_read(_opt_str))


@dataclass(frozen=True, slots=True, kw_only=True)
class Votes(Judged):
    """What the judge said of a job revision's approval (`started`, `rejected`, `vetoed`)."""

    approvers: tuple[str, ...] = field(default=(), metadata=_read(_strs))
    votes: tuple[str, ...] = field(default=(), metadata=_read(_strs))
    requirement: str | None = field(default=None, metadata=_read(_opt_str))
    approval: str | None = field(default=None, metadata=_read(_opt_str))
    evidence: tuple[str, ...] | None = field(
        default=None, metadata=_read(_strs)
    )  # GitHub evidence files, by SHA-256
    # The renewal commit the approval rests on (rules/renewal.py), and its people; absent for
    # the original approval (and before renewals existed).
    renewal: str | None = field(default=None, metadata=_read(_str))
    renewed_by: tuple[str, ...] | None = field(default=None, metadata=_read(_strs))


@dataclass(frozen=True, slots=True, kw_only=True)
class Started(Votes):
    """The runner's claim on a job revision, pushed before its process starts."""

    EVENT: ClassVar[str] = "started"

    run_id: str | None = field(default=None, metadata=_read(_str))
    command: tuple[str, ...] | None = field(default=None, metadata=_read(_strs))
    cwd: str | None = field(default=None, metadata=_read(_str))
    sandbox: str | None = field(default=None, metadata=_read(_str))
    rule: str | None = field(default=None, metadata=_read(_opt_str))
    policy_commit: str | None = field(default=None, metadata=_read(_str))
    resolved_program: str | None = field(default=None, metadata=_read(_str))
    self_approved: bool | None = field(default=None, metadata=_read(_bool))
    limits: Mapping[str, int | float] | None = field(default=None, metadata=_read(_numbers))
    lease: Lease | None = field(default=None, metadata=_read(_lease))
    attempt: int | None = field(
        default=None, metadata=_read(_int)
    )  # absent before retries existed: `attempt_number`
    runs_on: tuple[str, ...] | None = field(default=None, metadata=_read(_strs))
    # The change windows that allowed the start (absent before windows existed, or with none).
    windows: tuple[str, ...] | None = field(default=None, metadata=_read(_strs))
    # The claiming clone's random id (leases.clone_id); absent before clones had ids.
    clone: str | None = field(default=None, metadata=_read(_str))
    # Each counted vote as data ({"who", "how", "commit" | "review" and "pull"}): what the run's
    # attestation names (absent before attestations existed).
    counted: tuple[Mapping[str, str], ...] | None = field(default=None, metadata=_read(_objects))
    # A start on a signed emergency (break-glass): absent for every other start.
    emergency: EmergencyUse | None = field(default=None, metadata=_read(_emergency))

    @property
    def attempt_number(self) -> int:
        """The attempt (1-based); records from before retries existed are attempt 1."""
        return self.attempt if self.attempt is not None and self.attempt >= 1 else 1


@dataclass(frozen=True, slots=True, kw_only=True)
class Finished(Record):
    """The result of a run (or the short form: a run that never started, or was lost)."""

    EVENT: ClassVar[str] = "finished"

    run_id: str | None = field(default=None, metadata=_read(_str))
    status: str | None = field(default=None, metadata=_read(_str))
    exit_code: int | None = field(default=None, metadata=_read(_opt_int))
    signal: int | None = field(default=None, metadata=_read(_opt_int))
    duration_ms: int | None = field(default=None, metadata=_read(_int))
    reason: str | None = field(default=None, metadata=_read(_opt_str))
    resolved_program: str | None = field(default=None, metadata=_read(_str))
    sandbox: str | None = field(default=None, metadata=_read(_str))
    limits_applied: Mapping[str, int | float] | None = field(default=None, metadata=_read(_numbers))
    stdout_tail: str | None = field(default=None, metadata=_read(_str))
    stderr_tail: str | None = field(default=None, metadata=_read(_str))
    stdout_bytes: int | None = field(default=None, metadata=_read(_int))
    stderr_bytes: int | None = field(default=None, metadata=_read(_int))
    stdout_sha256: str | None = field(default=None, metadata=_read(_str))
    stderr_sha256: str | None = field(default=None, metadata=_read(_str))
    stdout_file: str | None = field(default=None, metadata=_read(_str))
    stderr_file: str | None = field(default=None, metadata=_read(_str))
    stdout_file_sha256: str | None = field(default=None, metadata=_read(_str))
    stderr_file_sha256: str | None = field(default=None, metadata=_read(_str))
    # The tip of approved up to which the runner had looked for vetoes when the process started
    # (verify flags a run a veto up to it should have stopped); absent from older records.
    vetoes_checked: str | None = field(default=None, metadata=_read(_str))


@dataclass(frozen=True, slots=True, kw_only=True)
class Rejected(Votes):
    """A job revision refused for good: not approved, denied, or already started. Or, with
    `expired`, an approval too old to start on: not final, a renewal lets the revision run."""

    EVENT: ClassVar[str] = "rejected"

    reason: str | None = field(default=None, metadata=_read(_str))
    # {"age": seconds, "limit": seconds} (no age: no runner-signed record dates the approval).
    expired: Mapping[str, int | float] | None = field(default=None, metadata=_read(_numbers))


@dataclass(frozen=True, slots=True, kw_only=True)
class Vetoed(Votes):
    """A job revision vetoed before it started."""

    EVENT: ClassVar[str] = "vetoed"

    reason: str | None = field(default=None, metadata=_read(_str))


@dataclass(frozen=True, slots=True, kw_only=True)
class PolicyChange(Judged):
    """A merge that changed policy/: adopted or rejected."""

    EVENT: ClassVar[str] = "policy"

    status: str | None = field(default=None, metadata=_read(_str))
    reason: str | None = field(default=None, metadata=_read(_str))
    policy_commit: str | None = field(default=None, metadata=_read(_str))
    evidence: tuple[str, ...] | None = field(default=None, metadata=_read(_strs))


@dataclass(frozen=True, slots=True, kw_only=True)
class Scanned(Judged):
    """How far a pass walked approved, and what it left open."""

    EVENT: ClassVar[str] = "scanned"

    start: str | None = field(default=None, metadata=_read(_str))
    policy_commit: str | None = field(default=None, metadata=_read(_str))
    commits: int | None = field(default=None, metadata=_read(_int))
    unapproved_count: int | None = field(default=None, metadata=_read(_int))
    unapproved_file: str | None = field(default=None, metadata=_read(_opt_str))
    open: tuple[OpenCommit, ...] | None = field(
        default=None, metadata=_read(_open)
    )  # absent before retries: none open
    reviewed: Mapping[str, str] | None = field(
        default=None, metadata=_read(_texts)
    )  # commit -> evidence SHA-256
    # commit -> SHA-256 of GitHub's answer asked again after the merge, holding approving reviews
    # given since (github/later.py): renewals and owed reviews on GitHub
    later_reviews: Mapping[str, str] | None = field(default=None, metadata=_read(_texts))

    @property
    def open_commits(self) -> tuple[OpenCommit, ...]:
        return self.open or ()


@dataclass(frozen=True, slots=True, kw_only=True)
class Other(Record):
    """A record of no event this version knows (only ever read, never written: the chain check
    refuses it; `git grep` readings may meet one)."""

    name: str = ""  # its `event`, as text

    @property
    def event(self) -> str:
        return self.name


Refusal = Rejected | Vetoed
Event = Started | Finished | Rejected | Vetoed | PolicyChange | Scanned
KINDS: Mapping[str, type[Event]] = MappingProxyType(
    {kind.EVENT: kind for kind in (Started, Finished, Rejected, Vetoed, PolicyChange, Scanned)}
)
# Values a reader takes as they are (the common case, read without calling it).
_PLAIN: Mapping[_Reader, tuple[type, ...]] = MappingProxyType(
    {
        _str: (str,),
        _opt_str: (str, type(None)),
        _int: (int,),
        _opt_int: (int, type(None)),
        _bool: (bool,),
    }
)
_Spec = tuple[str, tuple[type, ...], _Reader]
_SPECS: dict[type[Record], tuple[_Spec, ...]] = {}
_NAMES: dict[type[Record], frozenset[str]] = {}


def _specs(kind: type[Record]) -> tuple[_Spec, ...]:
    """(member, the types taken as they are, reader) of every member `kind` types, the chain's
    first."""
    found = _SPECS.get(kind)
    if found is None:
        members: list[tuple[str, _Reader]] = [
            ("seq", _int),
            ("prev", _str),
            ("hash", _str),
            ("time", _str),
            ("runner", _str),
            *((f.name, f.metadata["read"]) for f in fields(kind) if "read" in f.metadata),
        ]
        found = _SPECS[kind] = tuple((n, _PLAIN.get(r, ()), r) for n, r in members)
        _NAMES[kind] = frozenset(name for name, _ in members) | {"event"}
    return found


def _names(kind: type[Record]) -> frozenset[str]:
    """The members `kind` types, and `event`."""
    _specs(kind)
    return _NAMES[kind]


# Members every draft writes, null or not: the revision it is about (and its runner and time,
# which are never None).
_ALWAYS = frozenset({"job", "path", "blob", "commit", "runner", "time"})


def draft(record: R, *, null: Iterable[str] = ()) -> R:
    """`record` as the runner writes it: no place in the chain yet (no seq, prev or hash: `sealed`
    gives it one), and without the members it leaves at None, but for those named in `null` and
    the revision's own, which are written as JSON null."""
    written_null = frozenset(null) | _ALWAYS
    left = [
        name
        for name, _, _ in _specs(type(record))
        if name not in written_null and getattr(record, name) is None
    ]
    return replace(record, absent=frozenset({"seq", "prev", "hash", *left}))


def parse(value: Mapping[str, object]) -> Record:
    """The record a log line's JSON object holds (see the module: nothing of it is lost)."""
    event = value.get("event", _MISSING)
    kind: type[Record] = KINDS.get(event, Other) if type(event) is str else Other
    typed: dict[str, object] = {}
    extra: dict[str, object] = {}
    absent: list[str] = []
    get = value.get
    for name, plain, reader in _specs(kind):
        raw = get(name, _MISSING)
        if type(raw) in plain:  # (as a runner writes it: most members of most records)
            typed[name] = raw
            continue
        if raw is _MISSING:
            absent.append(name)
            continue
        exact, read = reader(raw)
        if not exact:
            extra[name] = raw  # (written back from here; `read` is what can be read of it)
        if read is not None:
            typed[name] = read
    if kind is Other:
        if event is _MISSING:
            absent.append("event")
        else:
            typed["name"] = str(event)
            if type(event) is not str:
                extra["event"] = event
    unknown = value.keys() - _names(kind)
    if unknown:
        extra.update((name, value[name]) for name in sorted(unknown))
    if extra:
        typed["extra"] = extra
    if absent:
        typed["absent"] = frozenset(absent)
    return kind(**typed)  # type: ignore[arg-type]


def parse_line(line: bytes) -> Record:
    """The record of one log line (ValueError if it is no JSON object)."""
    value = json.loads(line)
    if not isinstance(value, dict):
        raise ValueError("a record is a JSON object")
    return parse(value)


def parse_time(value: object) -> datetime | None:
    """A record's time (ISO 8601 with a zone, as runners write it), or None for anything else.

    Records are input: a time without a zone (which cannot be compared with an aware
    one), or no time at all, must make its reader more careful, never crash a pass.
    """
    try:
        when = datetime.fromisoformat(str(value).replace("Z", "+00:00"))
    except ValueError:
        return None
    return when if when.tzinfo is not None else None


def seq_of(record: Record) -> int:
    """A record's seq as the chain check counts it: its `seq`, or the number a `seq` kept in
    `extra` spells (a float, a digit string: what int() reads); ValueError if none."""
    raw = record.extra.get("seq", _MISSING)
    if raw is _MISSING:
        return record.seq
    return int(raw)  # type: ignore[call-overload,no-any-return]
