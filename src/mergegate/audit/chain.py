"""The whole hash chain of the audit log, checked on every core (`audit verify`, issue 12).

Log files depend on each other through one link only: the first record of a file follows the last
record of the file before (its seq plus one, its prev that record's hash). So the checks of each
file alone (`fast_read._proven`: canonical lines, every hash, the seqs and prevs inside the file)
run in forked worker processes, which read the files from one shared `git cat-file --batch` in chain
order, each taking the next file when it is free, while this process checks the links between files
in chain order. What a worker cannot prove (a file not as mergegate writes it) or a link that fails
is read here the reference way (`parse_file` + `check_links`, with the real previous record), so
every error names the file and line `audit.iter_files`
names. A worker that dies, stops answering sensibly or fails fails the check:
nothing it did not prove counts as proven.
"""

from __future__ import annotations

import gc
import os
import pickle
import select
import signal
import struct
import sys
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import suppress
from dataclasses import dataclass
from typing import IO, Any, Generic, TypeVar

from mergegate import errors
from mergegate.audit import fast_read
from mergegate.audit import log as audit
from mergegate.audit.records import GENESIS, Record
from mergegate.errors import IntegrityError, MergegateError
from mergegate.git.objects import BlobFeed
from mergegate.git.repo import Repo

T = TypeVar("T")
# What the caller makes of one checked file, from its bytes and its records' fields (as parsed, in
# order).
Summarise = Callable[[bytes, Sequence[Mapping[str, Any]]], T]

# Fewer files than this are checked here: two forks and two git processes cost more than they save.
PARALLEL_FROM_FILES = 8
_FRAME = struct.Struct("<Q")
# One read of answers: an answer is a few dozen KiB; a 1 MiB read would allocate (and fault in) 1
# MiB each time.
_READ = 1 << 16


@dataclass(frozen=True)
class Checked(Generic[T]):
    """One log file, checked and linked to the one before: its place, its count and what `summarise`
    made of it."""

    path: str
    blob: str
    records: int
    first_seq: (
        int | None
    )  # the seq of its first record, None for an empty file (or a seq that is no int)
    summary: T


def check_chain(
    repo: Repo, commit: str | None, summarise: Summarise[T], *, workers: int | None = None
) -> Iterator[Checked[T]]:
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
    or while other threads run). They share one `git cat-file --batch` (`Repo.blob_feed`) and
    take the files in chain order, each the next one when it is free (a token passed between
    them says whose turn it is to read, and which file is next), so git inflates each file once
    and neither worker waits while the other has work left. Nothing is raised before the
    iteration: an audit tree with strays is reported by it, in the caller's order of checks.
    """

    def __init__(
        self, repo: Repo, commit: str | None, summarise: Summarise[T], *, workers: int | None = None
    ) -> None:
        self.repo, self.commit, self.summarise = repo, commit, summarise
        self.pool: list[_Worker] = []
        self.feed: BlobFeed | None = None
        self.answers: _Answers | None = None
        self.error: IntegrityError | None = None
        try:
            self.files = audit.log_files(repo, commit)
        except IntegrityError as exc:
            self.files, self.error = [], exc
            return
        count = _workers(len(self.files)) if workers is None else workers
        # Forking while other threads run could leave a worker waiting on a lock one of them held:
        # then the files are checked here, unless the caller asked for workers (tests, whose runner
        # may keep a thread).
        if (
            count < 2
            or not self.files
            or not hasattr(os, "fork")
            or (workers is None and threading.active_count() > 1)
        ):
            return
        try:
            self.feed = repo.blob_feed()
            for _, blob in self.files[
                :_AHEAD
            ]:  # the rest are asked for by the worker whose turn it is
                self.feed.request(blob)
            turn = os.pipe()
            try:
                for _ in range(count):
                    self.pool.append(
                        _Worker.start(
                            self.feed,
                            self.files,
                            summarise,
                            turn=turn,
                            others=[w.answers for w in self.pool],
                        )
                    )
                os.write(turn[1], _TURN.pack(0))  # file 0 is next
            finally:
                os.close(turn[0])
                os.close(turn[1])
            self.feed.close_ends()  # git ends when the last worker closes its ends
            self.answers = _Answers(self.pool, [path for path, _ in self.files])
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
        if self.feed is not None:
            self.feed.end()

    def __iter__(self) -> Iterator[Checked[T]]:
        if self.error is not None:
            raise self.error
        summarise = self.summarise
        if not self.pool:
            for log in audit.checked_files(self.repo, self.files):
                yield Checked(
                    log.path,
                    log.blob,
                    len(log.records),
                    _first_seq(log.records),
                    summarise(log.data, [r.as_json() for r in log.records]),
                )
            return
        answers = self.answers
        assert answers is not None
        try:
            prev_seq, prev_hash = 0, GENESIS
            for index, (path, blob) in enumerate(self.files):
                proof = answers.proof(index)
                if proof is not None and fast_read.linked(
                    proof.first_seq, proof.first_prev, prev_seq=prev_seq, prev_hash=prev_hash
                ):
                    yield Checked(path, blob, proof.records, proof.first_seq, proof.summary)
                    prev_seq, prev_hash = proof.last_seq, proof.last_hash
                    continue
                # Not proven, or not linked: the reference reading, here, which says what is wrong
                # (or that nothing is).
                data = self.repo.blob(blob)
                records = audit.parse_file(data, path)
                audit.check_links(
                    records,
                    prev_seq=prev_seq,
                    prev_hash=prev_hash,
                    where={i: (path, i + 1) for i in range(len(records))},
                )
                yield Checked(
                    path,
                    blob,
                    len(records),
                    _first_seq(records),
                    summarise(data, [r.as_json() for r in records]),
                )
                if records:
                    prev_seq, prev_hash = records[-1].seq, records[-1].hash
            answers.finish()
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


def _first_seq(records: Sequence[Record]) -> int | None:
    """The seq of a file's first record, None if it has none (or one that is no int)."""
    return records[0].seq if records and "seq" not in records[0].extra else None


@dataclass(frozen=True)
class _Proof(Generic[T]):
    """What a worker proved of one file alone (`fast_read._proven`): all but the link to the file
    before."""

    records: int
    # the seq and prev of its first record (the link this process checks)
    first_seq: int
    first_prev: object
    last_seq: int
    last_hash: str
    summary: T


def _prove(data: bytes, summarise: Summarise[T]) -> _Proof[T] | None:
    values = fast_read._proven(data)
    if values is None:
        return None
    first_seq, first_prev = values[0]["seq"], values[0]["prev"]
    last_seq, last_hash = values[-1]["seq"], values[-1]["hash"]
    # (what `_proven` proved: every seq an int, every hash a hash; the first prev is what
    # `linked` checks)
    assert isinstance(first_seq, int) and isinstance(last_seq, int) and isinstance(last_hash, str)
    return _Proof(len(values), first_seq, first_prev, last_seq, last_hash, summarise(data, values))


# How many blobs git is asked for ahead of the one being read: it inflates the next while this one
# is read.
_AHEAD = 2
_TURN = struct.Struct("<Q")  # the token: the index of the next file to read


class _Worker:
    """A forked process checking files of the log, one answer frame per message on a pipe: "took"
    when it takes a file (its turn to read it), then "file" with the proof or "error" with what it
    met; "done" at the end."""

    def __init__(self, pid: int, answers: int) -> None:
        self.pid = pid
        self.answers = answers  # the read end of its answer pipe (a file descriptor)
        self.buffer = b""
        self.taken: set[int] = set()  # files it took and has not answered for
        self.done = False
        self.status: int | None = None
        self.closed = False

    @classmethod
    def start(
        cls,
        feed: BlobFeed,
        files: list[tuple[str, str]],
        summarise: Summarise[T],
        *,
        turn: tuple[int, int],
        others: Sequence[int],
    ) -> _Worker:
        read_end, write_end = os.pipe()
        with suppress(
            OSError, AttributeError
        ):  # room for answers while this process is busy elsewhere (Linux)
            import fcntl

            fcntl.fcntl(write_end, fcntl.F_SETPIPE_SZ, 1 << 20)
        for stream in (sys.stdout, sys.stderr):  # nothing buffered here is written twice
            with suppress(Exception):
                stream.flush()
        pid = os.fork()
        if pid == 0:  # the worker: never returns
            code = 1
            try:
                os.close(read_end)
                for other in others:  # the other workers' answers are not this one's to hold open
                    os.close(other)
                _run(feed, files, summarise, turn, os.fdopen(write_end, "wb"))
                code = 0
            finally:
                os._exit(code)
        os.close(write_end)
        return cls(pid, read_end)

    def frames(self) -> list[tuple[Any, ...]] | None:
        """The whole frames that have arrived (one read), or None at the end of its answers (it
        exited or died)."""
        chunk = os.read(self.answers, _READ)
        if not chunk:
            return None
        self.buffer += chunk
        frames, at = [], 0
        while len(self.buffer) - at >= _FRAME.size:
            size = _FRAME.unpack_from(self.buffer, at)[0]
            if len(self.buffer) - at - _FRAME.size < size:
                break
            body = self.buffer[at + _FRAME.size : at + _FRAME.size + size]
            at += _FRAME.size + size
            try:
                value = pickle.loads(body)
            except Exception:
                value = None
            frames.append(value if isinstance(value, tuple) and value else ("garbled",))
        self.buffer = self.buffer[at:]
        return frames

    def reap(self) -> None:
        """After the end of its answers: how it ended."""
        self.close_answers()
        if self.status is None:
            _, self.status = os.waitpid(self.pid, 0)

    def close_answers(self) -> None:
        if not self.closed:
            self.closed = True
            with suppress(OSError):
                os.close(self.answers)

    def stop(self) -> None:
        self.close_answers()
        if self.status is None:
            with suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
            with suppress(OSError):
                self.status = os.waitpid(self.pid, 0)[1]

    def how(self) -> str:
        return _how(self.status) if self.status else "stopped answering"


class _Answers:
    """The workers' answers, gathered as they come (from whichever worker has one) and handed out in
    chain order."""

    def __init__(self, pool: list[_Worker], paths: list[str]) -> None:
        self.pool, self.paths = pool, paths
        self.proofs: dict[int, _Proof[Any] | None] = {}
        self.failures: dict[
            int, MergegateError
        ] = {}  # the first file a worker could not check, and why
        self.owner: dict[int, _Worker] = {}  # who took each file not answered yet
        self.taken: set[int] = set()  # every file taken (each is taken once)

    def proof(self, index: int) -> _Proof[Any] | None:
        """The proof of file `index` (None: not proven there), once it has come; the error of the
        first file not verified if its worker failed or died, or if every worker that could still
        read it is gone."""
        while index not in self.proofs:
            if index in self.failures:
                raise self.failures[index]
            live = [w for w in self.pool if not w.closed]
            owner = self.owner.get(index)
            if owner is None and (
                len(live) < len(self.pool) or not live
            ):  # not taken, and a worker is gone
                gone = next((w for w in self.pool if w.closed and not w.done), None)
                if gone is not None or not live:
                    raise self._failed(
                        index, gone.how() if gone is not None else "stopped answering"
                    )
            if owner is not None and owner.closed:  # it died with the file
                raise self._failed(index, owner.how())
            self._gather(live)
        return self.proofs.pop(index)

    def finish(self) -> None:
        """The end: every worker says it is done and exits 0, or the check fails (naming the last
        file)."""
        while live := [w for w in self.pool if not w.closed]:
            self._gather(live)
        for worker in self.pool:
            if not worker.done or worker.status != 0:
                raise self._failed(len(self.paths) - 1, worker.how())

    def _gather(self, live: list[_Worker]) -> None:
        ready, _, _ = select.select([w.answers for w in live], [], [])
        for worker in live:
            if worker.answers not in ready:
                continue
            frames = worker.frames()
            if (
                frames is None
            ):  # it exited or died: what it took and did not answer for is not verified
                worker.reap()
                continue
            for frame in frames:
                self._take(worker, frame)

    def _take(self, worker: _Worker, frame: tuple[Any, ...]) -> None:
        kind, *rest = frame
        index = (
            rest[0] if rest and type(rest[0]) is int and 0 <= rest[0] < len(self.paths) else None
        )
        if kind == "took" and index is not None and index not in self.taken and not worker.taken:
            self.owner[index] = worker
            self.taken.add(index)
            worker.taken.add(index)
        elif (
            kind == "file"
            and index is not None
            and self.owner.get(index) is worker
            and len(rest) == 3
            and rest[1] == self.paths[index]
            and (rest[2] is None or isinstance(rest[2], _Proof))
        ):
            del self.owner[index]
            worker.taken.discard(index)
            self.proofs[index] = rest[2]
        elif (
            kind == "error"
            and index is not None
            and self.owner.get(index) is worker
            and len(rest) == 6
        ):
            self.failures.setdefault(index, _forwarded(self.paths[index], *rest[1:]))
            worker.stop()
        elif kind == "done" and not worker.taken:
            worker.done = True
        else:  # an answer out of turn, or that does not read back: nothing from it counts
            first = min(worker.taken, default=None)
            at = first if first is not None else (index if index is not None else 0)
            self.failures.setdefault(at, self._failed(at, f"answered {kind!r} out of turn"))
            worker.stop()

    def _failed(self, index: int, how: str) -> IntegrityError:
        path = self.paths[index]
        return IntegrityError(
            f"{path} and the files after it were not verified: the process checking them {how}",
            file=path,
            hint="nothing unverified is reported as verified; run `mergegate audit verify` again",
        )


def _run(
    feed: BlobFeed,
    files: list[tuple[str, str]],
    summarise: Summarise[T],
    turn: tuple[int, int],
    out: IO[bytes],
) -> None:
    def send(*value: Any) -> None:
        body = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(_FRAME.pack(len(body)) + body)
        out.flush()

    # Its values are freed as each file is done (JSON holds no cycles): no collections walking the
    # parent's objects (which would also copy the pages they are on).
    gc.disable()
    index = None
    try:
        while True:
            token = os.read(turn[0], _TURN.size)
            if len(token) != _TURN.size:  # every other worker is gone
                return
            index = _TURN.unpack(token)[0]
            if index >= len(files):  # no file left: pass it on, so that the others see it too
                os.write(turn[1], token)
                break
            send("took", index)
            path, blob = files[index]
            if index + _AHEAD < len(files):
                feed.request(files[index + _AHEAD][1])
            data = feed.read(blob)
            os.write(
                turn[1], _TURN.pack(index + 1)
            )  # the next reader may go on while this one checks
            send("file", index, path, _prove(data, summarise))
    except (
        MergegateError
    ) as exc:  # what iter_files would have raised here (a missing blob: GitError)
        send("error", index, type(exc).__name__, exc.message, exc.file, exc.line, exc.hint)
        return
    except (
        BaseException
    ) as exc:  # a bug or a signal: the parent fails the check, it never passes it
        with suppress(Exception):
            send("error", index, "", f"{type(exc).__name__}: {exc}", None, None, None)
        raise
    send("done")


def _forwarded(
    path: str, kind: str, message: str, file: str | None, line: int | None, hint: str | None
) -> MergegateError:
    """The error a worker met, as the serial reading would have raised it (same class and words)."""
    cls = getattr(errors, kind, None) if kind else None
    if (
        isinstance(cls, type)
        and issubclass(cls, MergegateError)
        and cls.__init__ is MergegateError.__init__
    ):
        return cls(message, file=file, line=line, hint=hint)
    return IntegrityError(
        f"{path} and the files after it were not verified: the process checking them failed "
        f"({message})",
        file=path,
        hint="nothing unverified is reported as verified; run `mergegate audit verify` again",
    )


def _how(status: int) -> str:
    if os.WIFSIGNALED(status):
        return f"was killed by signal {os.WTERMSIG(status)}"
    return f"exited with status {os.waitstatus_to_exitcode(status)}"
