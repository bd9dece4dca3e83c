"""The jobs' last line of defence: when the runner dies, everything it started dies too.

`python -m mergegate.watchdog` is started once per runner process, in a session
of its own and deaf to the signals a terminal or a CI system sends, with a pipe
from the runner as its stdin. The runner tells it, line by line, what belongs
to each job:

    + <run> p <pid> <start time>     a process (start time from /proc/<pid>/stat)
    + <run> g <pgid>                 a process group
    + <run> c <cgroup directory>     a cgroup
    - <run>                          the job is over: forget it

The pipe closes when the runner exits, however it exits (SIGKILL included: the
kernel closes its descriptors). Then the watchdog stops (SIGSTOP) every process
it was told about, every member of those groups and cgroups and all their
descendants, until no new one appears (a stopped process cannot fork), kills
them all with SIGKILL, and exits. A job's main process also has a parent-death
signal (spawner.py); this catches what it left behind.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from pathlib import Path


def _table() -> dict[int, tuple[int, int, bytes, int]]:
    """pid -> (ppid, pgrp, state, start time)."""
    table = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{entry}/stat", "rb") as f:
            fields = f.read().rpartition(b")")[2].split()
            table[int(entry)] = (int(fields[1]), int(fields[2]), fields[0], int(fields[19]))
    return table


class Jobs:
    def __init__(self) -> None:
        self.pids: dict[str, dict[int, int]] = {}
        self.groups: dict[str, set[int]] = {}
        self.cgroups: dict[str, set[str]] = {}

    def apply(self, line: str) -> None:
        parts = line.split()
        if len(parts) >= 2 and parts[0] == "-":
            for held in (self.pids, self.groups, self.cgroups):
                held.pop(parts[1], None)
        elif len(parts) >= 4 and parts[0] == "+":
            run, kind = parts[1], parts[2]
            with contextlib.suppress(ValueError):
                if kind == "p" and len(parts) == 5:
                    self.pids.setdefault(run, {})[int(parts[3])] = int(parts[4])
                elif kind == "g":
                    self.groups.setdefault(run, set()).add(int(parts[3]))
                elif kind == "c":
                    self.cgroups.setdefault(run, set()).add(" ".join(parts[3:]))

    def victims(self, table: dict[int, tuple[int, int, bytes, int]]) -> set[int]:
        found = {pid for held in self.pids.values() for pid, start in held.items() if table.get(pid, (0, 0, b"", -1))[3] == start}
        groups = {g for held in self.groups.values() for g in held}
        found |= {pid for pid, (_, pgrp, _, _) in table.items() if pgrp in groups}
        for held in self.cgroups.values():
            for group in held:
                with contextlib.suppress(OSError, ValueError):
                    found |= {int(p) for p in Path(group, "cgroup.procs").read_text().split()}
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

    def kill_all(self) -> None:
        stopped: set[int] = set()
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline:
            fresh = self.victims(_table()) - stopped
            if not fresh:
                break
            for pid in fresh:
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGSTOP)
            stopped |= fresh
        for pid in stopped:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        for held in self.groups.values():
            for group in held:
                with contextlib.suppress(OSError):
                    os.killpg(group, signal.SIGKILL)


def main() -> int:
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGPIPE):
        signal.signal(sig, signal.SIG_IGN)
    jobs = Jobs()
    stdin = sys.stdin.buffer
    while line := stdin.readline():
        jobs.apply(line.decode("utf-8", "replace"))
    if any(jobs.pids.values()) or any(jobs.groups.values()) or any(jobs.cgroups.values()):
        jobs.kill_all()
    return 0


if __name__ == "__main__":
    sys.exit(main())
