"""The spool: what a runner must not forget between claiming a job and pushing its result.

One JSON line per run in `.git/mergegate/spool/<runner>.jsonl`:

    {"record": <the finished record to push>, "job": <process id or null>,
     "runner": <process id of the runner that wrote it>}

Before the claim is pushed, the entry holds a provisional result ("the runner
stopped while this job ran"); once the job's process exists it also names that
process; when the job ends the real result replaces it; once the result is
pushed the entry is dropped. A later pass pushes what is left, but only once the
job's process is known to be gone (`Entry.gone`).

Writes are atomic (a temporary file, fsync, rename, fsync of the directory), so a
crash leaves the old spool or the new one. A line that cannot be read anyway (a
torn write by an older version, a disk error, an edit) is moved to
`<runner>.jsonl.corrupt` and named in a warning; it never stops a pass. A write
that fails stops the pass (StateError naming the file): the runner claims nothing
it could not account for.
"""

from __future__ import annotations

import json
import os
import re
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mergegate.errors import StateError
from mergegate.processes import ProcessId


@dataclass(frozen=True)
class Entry:
    record: dict[str, Any]  # a `finished` draft
    job: ProcessId | None = None
    runner: ProcessId | None = None
    done: bool = False  # the record is the job's real result, not the provisional one

    @property
    def run_id(self) -> str | None:
        value = self.record.get("run_id")
        return value if isinstance(value, str) else None

    def gone(self) -> bool:
        """Whether nothing of this run can still be running: neither its runner nor its job."""
        if self.done:
            return True
        if self.runner is not None and self.runner.alive() and self.runner != ProcessId.of(os.getpid()):
            return False
        return self.job is None or not (self.job.alive() or self.job.group_alive())

    def as_json(self) -> dict[str, Any]:
        return {"record": self.record, "job": self.job and self.job.as_json(),
                "runner": self.runner and self.runner.as_json(), "done": self.done}


@dataclass
class Spool:
    path: Path
    warnings: list[str] = field(default_factory=list)
    # Jobs in parallel report from their own threads: one read-modify-write at a time.
    _lock: threading.RLock = field(default_factory=threading.RLock, repr=False, compare=False)

    @classmethod
    def for_runner(cls, git_dir: Path, runner_name: str) -> Spool:
        name = re.sub(r"[^A-Za-z0-9._-]", "_", runner_name)
        return cls(git_dir / "mergegate" / "spool" / f"{name}.jsonl")

    @property
    def corrupt_path(self) -> Path:
        return self.path.with_name(self.path.name + ".corrupt")

    def read(self) -> list[Entry]:
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            raise StateError(f"cannot read the spool: {exc.strerror or exc}", file=str(self.path),
                             hint="the runner keeps results it has not pushed there; check its permissions") from None
        entries: list[Entry] = []
        bad: list[tuple[int, bytes]] = []
        for number, line in enumerate(data.splitlines(), start=1):
            if not line.strip():
                continue
            entry = _parse(line)
            if entry is None:
                bad.append((number, line))
            else:
                entries.append(entry)
        if bad:
            self._set_aside(bad, entries)
        return entries

    def _set_aside(self, bad: list[tuple[int, bytes]], entries: list[Entry]) -> None:
        when = datetime.now(UTC).isoformat(timespec="seconds")
        try:
            with open(self.corrupt_path, "ab") as f:
                for number, line in bad:
                    f.write(f"# {when} line {number} of {self.path.name}\n".encode() + line + b"\n")
                f.flush()
                os.fsync(f.fileno())
        except OSError as exc:
            raise StateError(f"cannot set aside unreadable spool lines: {exc.strerror or exc}", file=str(self.corrupt_path)) from None
        self.write(entries)
        lines = ", ".join(str(n) for n, _ in bad)
        self.warnings.append(
            f"spool {self.path}: line(s) {lines} could not be read (a torn write?); moved to {self.corrupt_path}. "
            "A run they belonged to is closed like any orphan."
        )

    def write(self, entries: list[Entry]) -> None:
        try:
            if not entries:
                self.path.unlink(missing_ok=True)
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            temporary = self.path.with_name(self.path.name + ".tmp")
            with open(temporary, "wb") as f:
                f.write(b"".join(json.dumps(e.as_json(), sort_keys=True).encode() + b"\n" for e in entries))
                f.flush()
                os.fsync(f.fileno())
            os.replace(temporary, self.path)
            directory = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(directory)
            finally:
                os.close(directory)
        except OSError as exc:
            raise StateError(f"cannot write the spool: {exc.strerror or exc}", file=str(self.path),
                             hint="free disk space or fix the permissions; the runner claims nothing it cannot record here") from None

    def put(self, entry: Entry) -> None:
        """Keep `entry`, replacing an earlier one of the same run."""
        self.put_many([entry])

    def put_many(self, entries: list[Entry]) -> None:
        """Keep `entries` (one write), replacing earlier ones of the same runs."""
        with self._lock:
            runs = {e.run_id for e in entries}
            self.write([*(e for e in self.read() if e.run_id not in runs), *entries])

    def drop(self, run_ids: set[Any]) -> None:
        with self._lock:
            if run_ids and self.path.exists():
                self.write([e for e in self.read() if e.run_id not in run_ids])


def _parse(line: bytes) -> Entry | None:
    try:
        value = json.loads(line)
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    if "record" not in value and value.get("event") == "finished":
        value = {"record": value}  # written by 0.1, before entries named processes
    record = value.get("record")
    if not isinstance(record, dict) or record.get("event") != "finished" or not isinstance(record.get("run_id"), str):
        return None
    done = value.get("done") is True or "runner" not in value  # 0.1 entries carry no process to wait for
    return Entry(record, ProcessId.from_json(value.get("job")), ProcessId.from_json(value.get("runner")), done)
