"""The jobs' last line of defence: when the runner dies, everything it started dies too.

`main` is started once per runner process (`python -S -c`, processes.py), in a session of its own
and deaf to the signals a terminal or a CI system sends, with a pipe from the runner as its stdin.
The runner tells it, line by line, what belongs
to each job:

    + <run> p <pid> <start time>     a process (start time from /proc/<pid>/stat)
    + <run> g <pgid>                 a process group
    + <run> c <cgroup directory>     a cgroup
    - <run>                          the job is over: forget it
    + d <folder>                     a job's workspace, the runner's export indexes
    - d <folder>                     the runner removed it: forget it

The pipe closes when the runner exits, however it exits (SIGKILL included: the kernel closes its
descriptors). Then the watchdog stops (SIGSTOP) every process it was told about, every member of
those groups and cgroups and all their descendants, until no new one appears (a stopped process
cannot fork), kills them all with SIGKILL, waits until they are gone, removes every folder it was
told about and not told to forget (a dead runner's workspaces hold an export of the approving commit
and whatever the job wrote), and exits. A job's main process also has a parent-death signal
(spawner.py); this catches what it left behind.
"""

from __future__ import annotations

# Built-in and small standard modules only (no pathlib, no contextlib, no typing): it starts once
# per runner process that runs a job, without site and without runpy (processes.py), and every
# module it imports is CPU that runners started at once share.
import os
import signal
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:  # (as in spawner.py: nothing imported for annotations at run time)
    from types import TracebackType


class _suppress:
    """contextlib.suppress, without importing contextlib (its import alone costs more than this
    process's work)."""

    def __init__(self, *kinds: type[BaseException]) -> None:
        self.kinds = kinds

    def __enter__(self) -> None:
        return None

    def __exit__(
        self,
        kind: type[BaseException] | None,
        value: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        return kind is not None and issubclass(kind, self.kinds)


def _table() -> dict[int, tuple[int, int, bytes, int]]:
    """pid -> (ppid, pgrp, state, start time)."""
    table = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with _suppress(OSError, IndexError, ValueError), open(f"/proc/{entry}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
            table[int(entry)] = (int(fields[1]), int(fields[2]), fields[0], int(fields[19]))
    return table


class Jobs:
    def __init__(self) -> None:
        self.pids: dict[str, dict[int, int]] = {}
        self.groups: dict[str, set[int]] = {}
        self.cgroups: dict[str, set[str]] = {}
        self.folders: set[str] = set()

    def apply(self, line: str) -> None:
        if line[:4] in (
            "+ d ",
            "- d ",
        ):  # (a folder's name may hold spaces: the rest of the line is it)
            folder = line[4:].removesuffix("\n")
            if line[0] == "+":
                self.folders.add(folder)
            else:
                self.folders.discard(folder)
            return
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "-":
            for held in (self.pids, self.groups, self.cgroups):
                held.pop(parts[1], None)
        elif len(parts) >= 4 and parts[0] == "+":
            run, kind = parts[1], parts[2]
            with _suppress(ValueError):
                if kind == "p" and len(parts) == 5:
                    self.pids.setdefault(run, {})[int(parts[3])] = int(parts[4])
                elif kind == "g":
                    self.groups.setdefault(run, set()).add(int(parts[3]))
                elif kind == "c":
                    self.cgroups.setdefault(run, set()).add(" ".join(parts[3:]))

    def victims(self, table: dict[int, tuple[int, int, bytes, int]]) -> set[int]:
        found = {
            pid
            for held in self.pids.values()
            for pid, start in held.items()
            if table.get(pid, (0, 0, b"", -1))[3] == start
        }
        groups = {g for held in self.groups.values() for g in held}
        found |= {pid for pid, (_, pgrp, _, _) in table.items() if pgrp in groups}
        for held in self.cgroups.values():
            for group in held:
                with (
                    _suppress(OSError, ValueError),
                    open(os.path.join(group, "cgroup.procs"), "rb") as f,
                ):
                    found |= {int(p) for p in f.read().split()}
        children: dict[int, list[int]] = {}
        for pid, (ppid, _, _, _) in table.items():
            children.setdefault(ppid, []).append(pid)
        stack = list(found)
        while stack:
            for child in children.get(stack.pop(), ()):
                if child not in found:
                    found.add(child)
                    stack.append(child)
        found.discard(os.getpid())
        return {pid for pid in found if pid in table and table[pid][2] not in (b"Z", b"X")}

    def kill_all(self) -> set[int]:
        """Stop, then kill, every process of the jobs; the ones killed."""
        stopped: set[int] = set()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            fresh = self.victims(_table()) - stopped
            if not fresh:
                break
            for pid in fresh:
                with _suppress(OSError):
                    os.kill(pid, signal.SIGSTOP)
            stopped |= fresh
        for pid in stopped:
            with _suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for held in self.groups.values():
            for group in held:
                with _suppress(OSError):
                    os.killpg(group, signal.SIGKILL)
        return stopped

    def remove_folders(self, killed: set[int]) -> None:
        """Once the killed processes are gone (none writes into a folder any more), remove the
        folders, never following a symlink a job planted in them (workspaces.remove_tree)."""
        deadline = time.monotonic() + 5
        while killed and time.monotonic() < deadline:
            table = _table()
            killed = {pid for pid in killed if pid in table and table[pid][2] not in (b"Z", b"X")}
            if killed:
                time.sleep(0.01)
        # Imported only now (pathlib, subprocess...): a watchdog with nothing to remove never needs
        # them.
        from pathlib import Path

        from mergegate.execution.workspaces import remove_tree

        for folder in sorted(self.folders):
            try:
                remove_tree(Path(folder))
            except (OSError, ValueError):
                continue


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    jobs = Jobs()
    stdin = sys.stdin.buffer
    while line := stdin.readline():
        jobs.apply(line.decode("utf-8", "replace"))
    killed: set[int] = set()
    if any(jobs.pids.values()) or any(jobs.groups.values()) or any(jobs.cgroups.values()):
        killed = jobs.kill_all()
    if jobs.folders:
        jobs.remove_folders(killed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
