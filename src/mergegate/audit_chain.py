"""The whole hash chain of the audit log, checked on every core (`audit verify`, issue 12).

Log files depend on each other through one link only: the first record of a file
follows the last record of the file before (its seq plus one, its prev that
record's hash). So the checks of each file alone (`audit._proven`: canonical
lines, every hash, the seqs and prevs inside the file) run in forked worker
processes, each reading its share of the files (every Nth) with a `git cat-file
--batch` of its own, while this process checks the links between files in chain
order. What a worker cannot prove (a file not as mergegate writes it) or a link
that fails is read here the reference way (`parse_file` + `check_links`, with the
real previous record), so every error names the file and line `audit.iter_files`
names. A worker that dies, stops answering sensibly or fails fails the check:
nothing it did not prove counts as proven.
"""

from __future__ import annotations

import gc
import os
import pickle
import signal
import struct
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import closing, suppress
from dataclasses import dataclass
from typing import IO, Any, Generic, TypeVar

from mergegate import audit, errors
from mergegate.errors import IntegrityError, MergegateError
from mergegate.git import Repo

T = TypeVar("T")
# What the caller makes of one checked file, from its bytes and its records' fields (as parsed, in order).
Summarise = Callable[[bytes, Sequence[Mapping[str, Any]]], T]

# Fewer files than this are checked here: two forks and two git processes cost more than they save.
PARALLEL_FROM_FILES = 8
_FRAME = struct.Struct("<Q")


@dataclass(frozen=True)
class Checked(Generic[T]):
    """One log file, checked and linked to the one before: its place, its count and what `summarise` made of it."""

    path: str
    blob: str
    records: int
    first_seq: int | None  # the seq of its first record, None for an empty file (or a seq that is no int)
    summary: T


def check_chain(repo: Repo, commit: str | None, summarise: Summarise[T], *,
                workers: int | None = None) -> Iterator[Checked[T]]:
    """Each log file at `commit` in chain order, checked exactly as `audit.iter_files` checks it, as
    `summarise(data, fields)` (run where the file was read: its result must pickle) and its place:
    a ChainCheck, started when first asked."""
    with ChainCheck(repo, commit, summarise, workers=workers) as reading:
        yield from reading


class ChainCheck(Generic[T]):
    """The check of every log file at `commit`, its workers started at once (so that the caller
    can do other work meanwhile), its files yielded by iterating it once; `close` (or the end of
    a `with`) stops the workers.

    The first broken link in chain order raises IntegrityError naming its file and line; a file
    is yielded only once it and every file before it are proven. `workers` forked processes
    check the files (default: one per CPU this process may use, up to 4; none for a short log,
    or while other threads run). Nothing is raised before the iteration: an audit tree with
    strays is reported by it, in the caller's order of checks.
    """

    def __init__(self, repo: Repo, commit: str | None, summarise: Summarise[T], *, workers: int | None = None) -> None:
        self.repo, self.commit, self.summarise = repo, commit, summarise
        self.pool: list[_Worker] = []
        self.error: IntegrityError | None = None
        try:
            self.files = audit.log_files(repo, commit)
        except IntegrityError as exc:
            self.files, self.error = [], exc
            return
        count = _workers(len(self.files)) if workers is None else workers
        # Forking while other threads run could leave a worker waiting on a lock one of them held: then
        # the files are checked here, unless the caller asked for workers (tests, whose runner may keep a thread).
        if count < 2 or not hasattr(os, "fork") or (workers is None and threading.active_count() > 1):
            return
        try:
            for k in range(count):
                self.pool.append(_Worker.start(repo, self.files[k::count], summarise, others=[w.answers for w in self.pool]))
        except BaseException:
            self.close()
            raise

    def __enter__(self) -> ChainCheck[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        for worker in self.pool:
            worker.stop()

    def __iter__(self) -> Iterator[Checked[T]]:
        if self.error is not None:
            raise self.error
        summarise = self.summarise
        if not self.pool:
            for log in audit.checked_files(self.repo, self.files):
                yield Checked(log.path, log.blob, len(log.records), _first_seq(log.records),
                              summarise(log.data, [r.fields for r in log.records]))
            return
        try:
            prev_seq, prev_hash = 0, audit.GENESIS
            for index, (path, blob) in enumerate(self.files):
                proof = self.pool[index % len(self.pool)].next(path)
                if proof is not None and audit.linked(proof.first, prev_seq=prev_seq, prev_hash=prev_hash):
                    yield Checked(path, blob, proof.records, proof.first["seq"], proof.summary)
                    prev_seq, prev_hash = proof.last_seq, proof.last_hash
                    continue
                # Not proven, or not linked: the reference reading, here, which says what is wrong (or that nothing is).
                data = self.repo.blob(blob)
                records = audit.parse_file(data, path)
                audit.check_links(records, prev_seq=prev_seq, prev_hash=prev_hash,
                                  where={i: (path, i + 1) for i in range(len(records))})
                yield Checked(path, blob, len(records), _first_seq(records), summarise(data, [r.fields for r in records]))
                if records:
                    prev_seq, prev_hash = records[-1].seq, records[-1]["hash"]
            for worker in self.pool:
                worker.finish()
        finally:
            self.close()


def _workers(files: int) -> int:
    if files < PARALLEL_FROM_FILES:
        return 1
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):  # pragma: no cover (not Linux)
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 4))


def _first_seq(records: Sequence[audit.Record]) -> int | None:
    seq = records[0].fields["seq"] if records else None
    return seq if type(seq) is int else None


@dataclass(frozen=True)
class _Proof(Generic[T]):
    """What a worker proved of one file alone (`audit._proven`): all but the link to the file before."""

    records: int
    first: dict[str, Any]  # the seq and prev of its first record (the link this process checks)
    last_seq: int
    last_hash: str
    summary: T


def _prove(data: bytes, summarise: Summarise[T]) -> _Proof[T] | None:
    values = audit._proven(data)
    if values is None:
        return None
    return _Proof(len(values), {"seq": values[0]["seq"], "prev": values[0]["prev"]}, values[-1]["seq"], values[-1]["hash"],
                  summarise(data, values))


class _Worker:
    """A forked process checking every file of its share in order, one answer frame per file on a pipe."""

    def __init__(self, pid: int, answers: IO[bytes], paths: list[str]) -> None:
        self.pid = pid
        self.answers = answers
        self.paths = paths  # its files, in order (each answer is checked to be for the file asked)
        self.status: int | None = None

    @classmethod
    def start(cls, repo: Repo, files: list[tuple[str, str]], summarise: Summarise[T], *,
              others: Sequence[IO[bytes]]) -> _Worker:
        read_end, write_end = os.pipe()
        for stream in (sys.stdout, sys.stderr):  # nothing buffered here is written twice
            with suppress(Exception):
                stream.flush()
        pid = os.fork()
        if pid == 0:  # the worker: never returns
            code = 1
            try:
                os.close(read_end)
                for other in others:  # the other workers' answers are not this one's to hold open
                    other.close()
                _run(repo, files, summarise, os.fdopen(write_end, "wb"))
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        return cls(pid, os.fdopen(read_end, "rb"), [path for path, _ in files])

    def next(self, path: str) -> _Proof[Any] | None:
        """The proof of `path`, the next file of this worker's share; IntegrityError if the worker fails."""
        kind, *rest = self._read(path)
        if kind == "error":
            raise _forwarded(path, *rest)
        if kind != "file" or rest[0] != path or (rest[1] is not None and not isinstance(rest[1], _Proof)):
            raise self._failed(path, f"answered {kind!r} for {rest[0] if rest else '?'}")
        return rest[1]

    def finish(self) -> None:
        """The end of a worker that answered for all its files: it says so and exits 0, or the check fails."""
        kind, *rest = self._read(self.paths[-1])
        if kind == "error":
            raise _forwarded(self.paths[-1], *rest)
        if kind != "done":
            raise self._failed(self.paths[-1], f"answered {kind!r} after its last file")
        _, status = os.waitpid(self.pid, 0)
        self.status = status
        if status != 0:
            raise self._failed(self.paths[-1], _how(status))

    def stop(self) -> None:
        with suppress(OSError):
            self.answers.close()
        if self.status is None:
            with suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            with suppress(OSError):
                self.status = os.waitpid(self.pid, 0)[1]

    def _read(self, path: str) -> list[Any]:
        head = self.answers.read(_FRAME.size)
        if len(head) != _FRAME.size:  # it died: reap it to say how
            self.answers.close()
            _, self.status = os.waitpid(self.pid, 0)
            raise self._failed(path, _how(self.status) if self.status else "stopped answering")
        body = self.answers.read(_FRAME.unpack(head)[0])
        try:
            value = pickle.loads(body)
        except Exception:
            raise self._failed(path, "sent an answer that does not read back") from None
        if not isinstance(value, tuple) or not value:
            raise self._failed(path, "sent an answer that does not read back")
        return list(value)

    def _failed(self, path: str, how: str) -> IntegrityError:
        return IntegrityError(f"{path} and the files after it were not verified: the process checking them {how}", file=path,
                              hint="nothing unverified is reported as verified; run `mergegate audit verify` again")


def _run(repo: Repo, files: list[tuple[str, str]], summarise: Summarise[T], out: IO[bytes]) -> None:
    def send(*value: Any) -> None:
        body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(_FRAME.pack(len(body)) + body)

    # Its values are freed as each file is done (JSON holds no cycles): no collections walking the
    # parent's objects (which would also copy the pages they are on).
    gc.disable()
    try:
        with closing(repo.blobs([blob for _, blob in files])) as contents:  # git reads ahead while we check
            for (path, _), data in zip(files, contents, strict=True):
                send("file", path, _prove(data, summarise))
                out.flush()
    except MergegateError as exc:  # what iter_files would have raised here (a missing blob: GitError)
        send("error", type(exc).__name__, exc.message, exc.file, exc.line, exc.hint)
    except BaseException as exc:  # a bug or a signal: the parent fails the check, it never passes it
        send("error", "", f"{type(exc).__name__}: {exc}", None, None, None)
        out.flush()
        raise
    else:
        send("done")
    out.flush()


def _forwarded(path: str, kind: str, message: str, file: str | None, line: int | None, hint: str | None) -> MergegateError:
    """The error a worker met, as the serial reading would have raised it (same class and words)."""
    cls = getattr(errors, kind, None) if kind else None
    if isinstance(cls, type) and issubclass(cls, MergegateError) and cls.__init__ is MergegateError.__init__:
        return cls(message, file=file, line=line, hint=hint)
    return IntegrityError(f"{path} and the files after it were not verified: the process checking them failed ({message})",
                          file=path, hint="nothing unverified is reported as verified; run `mergegate audit verify` again")


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by signal {os.WTERMSIG(status)}"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"
