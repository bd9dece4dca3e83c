"""The spool: what a runner must not forget between claiming a job and pushing its result.

One JSON line per run in `.git/mergegate/spool/<runner>.jsonl`:

    {"record": <the finished record to push>, "job": <process id or null>,
     "runner": <process id of the runner that wrote it>, "folders": [[<path>, <inode>], ...]}

(`folders`: the job's workspace and the runner's export folder, until the job has ended.)

Before the claim is pushed, the entry holds a provisional result ("the runner stopped while this job
ran"); once the job's process exists it also names that process; when the job ends the real result
replaces it; once the result is pushed the entry is dropped. A later pass pushes what is left, but
only once the job's process is known to be gone (`SpoolEntry.gone`).

The file is a journal: a change appends a line (the entry's new state, or `{"dropped": [run ids]}`
once results are pushed), and reading keeps the last state of each run. Appending one line and
syncing it costs one fsync; rewriting the whole spool for every change (a temporary file, two
fsyncs, a rename) took several milliseconds a job under a lock every job in parallel waits for, and
bounded `--parallel` well below what the push allows (issue 12). The file is created, and compacted
once it holds more than twice the live entries (plus `COMPACT_SLACK` lines), by an atomic rewrite (a
temporary file, fsync, rename, fsync of the directory); it is removed once nothing is left in it, so
an existing file means something is spooled.

What is synced before it counts: a claim's provisional result (before the claim is pushed) and its
real result. The job's process, once it exists, is appended without a sync: a line written is in the
kernel's page cache and survives the death of any process (the runner's included); only a crash of
the machine loses it, and that ends the job's process too (the next pass sees a runner and a job of
another boot: nothing of the run is left, and it is closed as lost, as it would be with the line). A
`dropped` line is not synced either: lost in a crash, the next pass finds the result on the audit
branch (or no claim there) and drops the entry anyway. A crash leaves each run's entry as of its
last complete line. A line that cannot be read (a write torn by a crash, a disk error, an edit) is
moved to `<runner>.jsonl.corrupt` and named in a warning; it
never stops a pass. A write that fails stops the pass (StateError naming the file):
the runner claims nothing it could not account for.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from mergegate import clock
from mergegate.audit import log as audit
from mergegate.audit.records import Finished, Started, parse
from mergegate.errors import StateError, cannot_write, is_full
from mergegate.execution.processes import ProcessId
from mergegate.execution.workspaces import remove_stale
from mergegate.git.repo import Repo

COMPACT_SLACK = 64  # lines a journal may hold beyond twice its live entries before it is rewritten


@dataclass(frozen=True)
class SpoolEntry:
    """One job's line in the spool: its `finished` draft and the processes and folders it holds."""

    record: Finished  # a `finished` draft
    job: ProcessId | None = None
    runner: ProcessId | None = None
    done: bool = False  # the record is the job's real result, not the provisional one
    # What the run holds in TMPDIR, (path, inode): if its runner dies (and its watchdog with it),
    # the pass that finds the run gone removes them (workspaces.remove_stale).
    folders: tuple[tuple[str, int], ...] = ()

    @property
    def run_id(self) -> str | None:
        return self.record.run_id

    def gone(self) -> bool:
        """Whether nothing of this run can still be running: neither its runner nor its job."""
        if self.done:
            return True
        if (
            self.runner is not None
            and self.runner.alive()
            and self.runner != ProcessId.of(os.getpid())
        ):
            return False
        return self.job is None or not (self.job.alive() or self.job.group_alive())

    def as_json(self) -> dict[str, object]:
        return {
            "record": self.record.as_json(),
            "job": self.job and self.job.as_json(),
            "runner": self.runner and self.runner.as_json(),
            "done": self.done,
            **({"folders": [list(f) for f in self.folders]} if self.folders else {}),
        }


@dataclass
class Spool:
    path: Path
    warnings: list[str] = field(default_factory=list)
    # Jobs in parallel report from their own threads: one read-modify-write at a time.
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)
    # The live entries as this object last read or wrote them (one pass at a time per clone: the
    # run lock), and how many lines the file holds: a change appends without reading the file again.
    _live: dict[str | None, SpoolEntry] | None = field(default=None, repr=False, compare=False)
    _lines: int = field(default=0, repr=False, compare=False)

    @classmethod
    def for_runner(cls, git_dir: Path, runner_name: str) -> Spool:
        name = re.sub(r"[^A-Za-z0-9._-]", "_", runner_name)
        return cls(git_dir / "mergegate" / "spool" / f"{name}.jsonl")

    @property
    def corrupt_path(self) -> Path:
        return self.path.with_name(self.path.name + ".corrupt")

    def read(self) -> list[SpoolEntry]:
        """The live entries on disk (the last state of each run not dropped since)."""
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            self._live, self._lines = {}, 0
            return []
        except OSError as exc:
            raise StateError(
                f"cannot read the spool: {exc.strerror or exc}",
                file=str(self.path),
                hint="the runner keeps results it has not pushed there; check its permissions",
            ) from None
        live: dict[str | None, SpoolEntry] = {}
        bad: list[tuple[int, bytes]] = []
        lines = 0
        for number, line in enumerate(data.splitlines(), start=1):
            if not line.strip():
                continue
            lines += 1
            dropped = _dropped(line)
            if dropped is not None:
                for run_id in dropped:
                    live.pop(run_id, None)
                continue
            entry = _parse(line)
            if entry is None:
                bad.append((number, line))
            else:
                live.pop(
                    entry.run_id, None
                )  # its latest state goes last, as a rewrite would put it
                live[entry.run_id] = entry
        self._live, self._lines = live, lines
        if bad:
            self._set_aside(bad, list(live.values()))
        return list(live.values())

    def recover(
        self, repo: Repo, tip: str | None, me: ProcessId | None
    ) -> tuple[list[Finished], list[SpoolEntry]]:
        """Finished records a previous pass could not push, and runs that may still be running.

        Entries that landed after all (on the audit branch at `tip`), and provisional ones whose
        claim never landed (the runner stopped before or while pushing it), are dropped. A dead
        runner's folders are removed (`me`: this runner, whose watchdog still removes its own).
        """
        waiting: list[SpoolEntry] = []
        running: list[SpoolEntry] = []
        for entry in self.read():
            gone = entry.gone()
            if gone and entry.folders and entry.runner is not None and entry.runner != me:
                remove_stale(
                    entry.folders
                )  # its runner died, and its watchdog with it (else it removed them)
                entry = replace(entry, folders=())
            said = audit.grep(repo, tip, str(entry.run_id))
            if any(isinstance(r, Finished) and r.run_id == entry.run_id for r in said):
                continue
            if (
                not any(isinstance(r, Started) and r.run_id == entry.run_id for r in said)
                and not entry.done
            ):
                continue  # never claimed: nothing to close
            (waiting if gone else running).append(entry)
        self.write([*waiting, *running])
        return [e.record for e in waiting], running

    def _set_aside(self, bad: list[tuple[int, bytes]], entries: list[SpoolEntry]) -> None:
        when = clock.now().isoformat(timespec="seconds")
        try:
            with open(self.corrupt_path, "ab") as f:
                for number, line in bad:
                    f.write(f"# {when} line {number} of {self.path.name}\n".encode() + line + b"\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise StateError(
                f"cannot set aside unreadable spool lines: {exc.strerror or exc}",
                file=str(self.corrupt_path),
            ) from None
        self.write(entries)
        lines = ", ".join(str(n) for n, _ in bad)
        self.warnings.append(
            f"spool {self.path}: line(s) {lines} could not be read (a torn write?); moved to "
            f"{self.corrupt_path}. "
            "A run they belonged to is closed like any orphan."
        )

    def write(self, entries: list[SpoolEntry]) -> None:
        """Replace the whole spool with `entries` (atomic: the old spool or the new one survives a
        crash)."""
        try:
            if not entries:
                self.path.unlink(missing_ok=True)
                self._live, self._lines = {}, 0
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_name(self.path.name + ".tmp")
            with open(temporary, "wb") as f:
                f.write(b"".join(_line(e) for e in entries))
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, self.path)
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as exc:
            raise self._unwritable(exc) from None
        self._live = {e.run_id: e for e in entries}
        self._lines = len(entries)

    def _unwritable(self, exc: OSError) -> StateError:
        if is_full(exc):  # what filled up, and how to make room (issue 22, item 9)
            return cannot_write("the spool", self.path, exc)
        return StateError(
            f"cannot write the spool: {exc.strerror or exc}",
            file=str(self.path),
            hint="free disk space or fix the permissions; the runner claims nothing it cannot "
            "record here",
        )

    def put(self, entry: SpoolEntry, *, sync: bool = True) -> None:
        """Keep `entry`, replacing an earlier one of the same run (`sync`: see above for what needs
        it)."""
        self.put_many([entry], sync=sync)

    def put_many(self, entries: list[SpoolEntry], *, sync: bool = True) -> None:
        """Keep `entries` (one append, synced unless told), replacing earlier ones of the same
        runs."""

        def apply(live: dict[str | None, SpoolEntry]) -> None:
            for entry in entries:
                live.pop(entry.run_id, None)  # its latest state goes last
                live[entry.run_id] = entry

        if entries:
            self._change(apply, b"".join(_line(e) for e in entries), sync=sync)

    def drop(self, run_ids: set[Any]) -> None:
        """Forget these runs (their results are pushed, or their claims never were); not synced (see
        above)."""

        def apply(live: dict[str | None, SpoolEntry]) -> None:
            for run_id in run_ids:
                live.pop(run_id, None)

        if run_ids:
            self._change(
                apply,
                json.dumps({"dropped": sorted(map(str, run_ids))}).encode() + b"\n",
                sync=False,
            )

    def _change(
        self, apply: Callable[[dict[str | None, SpoolEntry]], None], line: bytes, *, sync: bool
    ) -> None:
        with self._lock:
            if self._live is None:
                self.read()
            live = self._live
            assert live is not None
            had = bool(live)
            apply(live)
            if not live:
                self.write([])
                return
            if not had or self._lines + 1 > 2 * len(live) + COMPACT_SLACK:
                self.write(list(live.values()))  # created, or compacted: atomic
                return
            try:
                fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
            except OSError as exc:
                raise self._unwritable(exc) from None
            self._lines += line.count(b"\n")
            try:
                view = memoryview(line)
                while (
                    view
                ):  # a full disk or a file size limit writes part of it: the rest, or an error
                    written = os.write(fd, view)
                    if written <= 0:
                        raise OSError(28, "no space left on device")
                    view = view[written:]
            except OSError as exc:
                os.close(fd)
                self._live = (
                    None  # read again next time: a torn line is set aside and the rest rewritten
                )
                raise self._unwritable(exc) from None
        try:  # outside the lock: jobs in parallel sync their own lines at once
            if sync:
                os.fsync(fd)
        except OSError as exc:
            raise self._unwritable(exc) from None
        finally:
            os.close(fd)


def _line(entry: SpoolEntry) -> bytes:
    return json.dumps(entry.as_json(), sort_keys=True).encode() + b"\n"


def _dropped(line: bytes) -> list[str] | None:
    """The run ids of a `dropped` line; None if the line is something else."""
    if not line.startswith(b'{"dropped"'):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    ids = value.get("dropped") if isinstance(value, dict) and len(value) == 1 else None
    return ids if isinstance(ids, list) and all(isinstance(i, str) for i in ids) else None


def _parse(line: bytes) -> SpoolEntry | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    if "record" not in value and value.get("event") == "finished":
        value = {"record": value}  # written by 0.1, before entries named processes
    fields = value.get("record")
    record = parse(fields) if isinstance(fields, dict) else None
    if not isinstance(record, Finished) or record.run_id is None:
        return None
    done = (
        value.get("done") is True or "runner" not in value
    )  # 0.1 entries carry no process to wait for
    folders = value.get("folders")
    held = tuple((f[0], f[1]) for f in folders if _folder(f)) if isinstance(folders, list) else ()
    return SpoolEntry(
        record,
        ProcessId.from_json(value.get("job")),
        ProcessId.from_json(value.get("runner")),
        done,
        held,
    )


def _folder(value: object) -> bool:
    return (
        isinstance(value, list)
        and len(value) == 2
        and isinstance(value[0], str)
        and isinstance(value[1], int)
        and not isinstance(value[1], bool)
    )
