"""`audit export`: the records for tools other than mergegate, one JSON object a line.

Every batch starts with `audit verify`'s own check of the audit branch (`verify_audit`: the
chain from seq 1 and every commit of the branch), and the records are then read at exactly the
commit it verified: an export never prints a record that `audit verify` would reject. With
`--follow` it polls as the runner's poll loop does, asking the remote first (`ls-remote`, no
local write) and fetching, verifying and reading only when the audit branch moved.

A cursor file keeps the `seq` and `hash` of the last record whose line was printed, written
atomically after that line was flushed: a restart resumes right after it. A kill between the
flush and the cursor's write prints that one line again (at least once); no line is ever
skipped. A cursor whose record is no longer in the chain (another gate, or a rewritten branch)
is an integrity error: the export does not guess where to go on.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mergegate.audit import attestation
from mergegate.audit import log as audit
from mergegate.audit.records import Finished, Record, canonical
from mergegate.errors import GitError, IntegrityError, UsageError
from mergegate.execution.shutdown import Shutdown
from mergegate.facts.branches import AUDIT_BRANCH, open_branch
from mergegate.git.repo import Repo
from mergegate.operations import ecs
from mergegate.operations.audit_verify import verify_audit
from mergegate.runner.backoff import Backoff

RECORD_FORMATS = ("jsonl", "ecs", "intoto")
_HINT = "investigate before trusting the branch; a cursor from another gate: remove it"
# (record, where the batch reads: the clone and the audit tip it verified) -> the record's line,
# or None when it has none in this format
Line = Callable[[Record, "At"], bytes | None]


@dataclass(frozen=True)
class At:
    repo: Repo
    tip: str  # the audit branch's tip a batch verified ("" before there is one)


@dataclass(frozen=True)
class Cursor:
    """The last record a line was printed for: its place in the chain, and its hash."""

    seq: int
    hash: str

    @classmethod
    def read(cls, path: Path) -> Cursor | None:
        """The cursor in `path`; None when there is no such file (a first run)."""
        try:
            text = path.read_text("utf-8")
        except FileNotFoundError:
            return None
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"cannot read the cursor: {exc}", file=str(path)) from None
        try:
            value = json.loads(text)
            seq, digest = value["seq"], value["hash"]
        except (ValueError, TypeError, KeyError):
            value, seq, digest = None, None, None
        if type(seq) is not int or seq < 1 or not isinstance(digest, str) or len(digest) != 64:
            raise UsageError(
                'the cursor is not {"seq": N, "hash": "<64 hex>"}',
                file=str(path),
                hint="a cursor is written by `audit export --cursor`; remove it to start again "
                "(with --since SEQ to say where)",
            )
        return cls(seq, digest)

    def write(self, path: Path) -> None:
        """Replace the cursor atomically: a reader, or a restart, sees the old one or this one."""
        scratch = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        try:
            scratch.write_text(json.dumps({"hash": self.hash, "seq": self.seq}) + "\n", "utf-8")
            os.replace(scratch, path)
        except OSError as exc:
            scratch.unlink(missing_ok=True)
            raise UsageError(f"cannot write the cursor: {exc}", file=str(path)) from None


@dataclass(frozen=True, kw_only=True)
class Selection:
    """Which records are exported: after seq `since`, of one job, of some events."""

    since: int = 0
    job: str | None = None
    events: tuple[str, ...] = ()

    def wants(self, record: Record) -> bool:
        return (self.job is None or record.job == self.job) and (
            not self.events or record.event in self.events
        )


def record_line(name: str) -> Line:
    """The line of a record in format `name` (jsonl: the log's own bytes; ecs: its document;
    intoto: the attestation of the run a `finished` record ends)."""
    if name == "jsonl":
        return lambda record, _at: record.line()
    if name == "ecs":
        return lambda record, _at: ecs_line(record)
    if name == "intoto":
        return intoto_line
    raise UsageError(f"no record format {name!r}", hint=f"one of {', '.join(RECORD_FORMATS)}")


def ecs_line(record: Record) -> bytes:
    """A record's ECS document as one line of ASCII: every other character escaped (\\u202e),
    so a path or reason a proposer chose cannot turn a SIEM's or a terminal's view of it with a
    bidi or C1 control. (jsonl keeps the log's own bytes, which a JSON reader decodes alike.)"""
    return json.dumps(ecs.document(record), sort_keys=True, separators=(",", ":")).encode() + b"\n"


def intoto_line(record: Record, at: At) -> bytes | None:
    """The DSSE envelope of the run `record` ends, as one line (slsa-verifier's `.intoto.jsonl`);
    None for another record, or a run with no attestation (its runner signed none: a policy
    without `runners`, or a runner from before attestations). `audit verify`, which the batch
    ran first, checked every attestation at this tip against the records it names."""
    if not isinstance(record, Finished) or record.run_id is None or not at.tip:
        return None
    data = at.repo.read_file(at.tip, attestation.path_of(record.run_id))
    if data is None:
        return None
    try:
        envelope = json.loads(data)
    except ValueError:  # (audit verify refuses it first; never printed half-read)
        raise IntegrityError(
            f"the attestation of run {record.run_id} is not JSON",
            file=attestation.path_of(record.run_id),
        ) from None
    # As the file holds it, on one line whatever its spacing (the runner writes it compact).
    return canonical(envelope) + b"\n"


class Export:
    """An export of one gate's records: one verified batch at a time, each line handed to `emit`
    (which must have flushed it when it returns) and then remembered in the cursor file."""

    def __init__(
        self,
        *,
        repo_path: Path,
        remote: str,
        branch: str,
        fetch: bool,
        trust: str | None,
        selection: Selection,
        line: Line,
        emit: Callable[[bytes], None],
        cursor: Path | None = None,
    ) -> None:
        self.repo_path, self.remote, self.branch = repo_path, remote, branch
        self.fetch, self.trust = fetch, trust
        self.selection, self.line, self.emit, self.cursor = selection, line, emit, cursor
        if cursor is not None and not cursor.parent.is_dir():
            # Said now, not after the first line was printed without a cursor to resume from.
            raise UsageError(
                f"the cursor's folder {cursor.parent} does not exist", file=str(cursor)
            )
        self.repo = Repo(repo_path)
        # Where the chain must still be as it was: the cursor's record at first, then the last
        # record read (a branch replaced by another valid chain is noticed, not exported from).
        self.position = Cursor.read(cursor) if cursor is not None else None
        self.after = self.position.seq if self.position is not None else selection.since
        self.tip: str | None = None  # the audit branch's tip the last batch verified
        self.lines = 0

    def batch(self, *, fetch: bool) -> int:
        """Verify the audit branch as `audit verify` does, then emit each selected record after
        the last one exported; the number of lines emitted."""
        report = verify_audit(
            repo_path=self.repo_path,
            remote=self.remote,
            branch=self.branch,
            fetch=fetch,
            trust=self.trust,
        )
        tip = report.tip or None
        at = At(self.repo, tip or "")
        emitted, last = 0, 0
        for record in audit.iter_all(self.repo, tip):
            last = record.seq
            self._still_there(record)
            if record.seq <= self.after:
                continue
            text = self.line(record, at) if self.selection.wants(record) else None
            if text is not None:
                self.emit(text)
                if self.cursor is not None:
                    Cursor(record.seq, record.hash).write(self.cursor)
                emitted += 1
            self.after = record.seq
            self.position = Cursor(record.seq, record.hash)
        if self.position is not None and last < self.position.seq:
            raise IntegrityError(
                f"the audit chain ends at seq {last}, before seq {self.position.seq} that this "
                "export already read: records were removed from the end, or this is another gate",
                file=str(self.cursor) if self.cursor is not None else None,
                hint=_HINT,
            )
        self.tip = tip
        self.lines += emitted
        return emitted

    def _still_there(self, record: Record) -> None:
        known = self.position
        if known is not None and record.seq == known.seq and record.hash != known.hash:
            raise IntegrityError(
                f"seq {known.seq} of the audit chain is not the record this export read (hash "
                f"{record.hash[:12]}, it read {known.hash[:12]}): the branch was rewritten, or "
                "this is another gate",
                file=str(self.cursor) if self.cursor is not None else None,
                hint=_HINT,
            )

    def follow(
        self,
        stop: Shutdown,
        *,
        interval: float,
        on_error: Callable[[GitError, float], None],
        max_backoff: float = 300.0,
    ) -> None:
        """Batches until `stop`: one now, then one each time the audit branch moves. A poll asks
        the remote first (`ls-remote`) and fetches only when the branch moved there; an
        unreachable remote is retried with backoff (`on_error` once per cause)."""
        backoff = Backoff(base=interval, cap=max(interval, max_backoff))
        told: str | None = None
        first = True
        while not stop.is_set():
            try:
                if first:
                    self.batch(fetch=self.fetch)
                    first = False
                elif self._moved():
                    self.batch(fetch=self.fetch)
            except GitError as exc:
                delay = backoff.failed()
                if str(exc) != told:
                    told = str(exc)
                    on_error(exc, delay)
                stop.wait(delay)
                continue
            backoff.reset()
            told = None
            stop.wait(interval)

    def _moved(self) -> bool:
        """Whether the audit branch is no longer at the tip the last batch verified: the remote's
        (one ls-remote, nothing written) or, without fetching, this clone's."""
        if self.fetch and self.repo.has_remote(self.remote):
            ref = f"refs/heads/{AUDIT_BRANCH}"
            now = self.repo.ls_remote(self.remote, [ref]).get(ref)
        else:
            source = open_branch(self.repo, remote=self.remote, branch=self.branch, fetch=False)
            now = source.audit_tip()
        return now != self.tip
