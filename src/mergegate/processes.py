"""The processes of one job: its pids cgroup, its limits in the child, and killing all of it.

A job may fork, daemonise or setsid() away from its process group; the
Tracker follows its descendants through /proc (and its cgroup, when there is
one) so that a timeout or the end of the job leaves nothing behind.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import time
import uuid
from pathlib import Path


def make_cgroup(run_id: str, max_processes: int | None) -> Path | None:
    """A pids cgroup for the job, under the runner's own so its limits still apply."""
    bases = []
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, controllers, path = line.split(":", 2)
            if "pids" in controllers.split(","):
                bases.append(Path("/sys/fs/cgroup/pids", path.lstrip("/")))
            elif not controllers and path == "/":  # v2: below the root, processes and children don't mix
                bases.append(Path("/sys/fs/cgroup"))
    for base in bases:
        group = base / f"mergegate-{run_id}-{uuid.uuid4().hex[:8]}"
        with contextlib.suppress(OSError):
            group.mkdir()
            try:
                if not (group / "cgroup.procs").exists():
                    raise OSError("a plain directory, not a cgroup")
                (group / "pids.max").write_text(str(max_processes or "max"))
                return group
            except OSError:
                group.rmdir()
    return None


def child_setup(rlimits: list[tuple[str, int, int, int]], cgroup: Path | None) -> None:
    """Runs in the child between fork and exec, so it sticks to plain os calls."""
    if cgroup is not None:
        fd = os.open(cgroup / "cgroup.procs", os.O_WRONLY)
        os.write(fd, b"0")
        os.close(fd)
    for _, res, soft, hard in rlimits:
        resource.setrlimit(res, (soft, hard))


def _proc_table() -> dict[int, tuple[int, int, bytes, int]]:
    """pid -> (ppid, pgrp, state, start time) for every process; {} without /proc."""
    table = {}
    with contextlib.suppress(OSError):
        for entry in filter(str.isdigit, os.listdir("/proc")):
            with contextlib.suppress(OSError, IndexError, ValueError), open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rpartition(b")")[2].split()
                table[int(entry)] = (int(fields[1]), int(fields[2]), fields[0], int(fields[19]))
    return table


class Tracker:
    """Everything the job started: its process group, descendants seen in /proc, its cgroup.

    Descendants are collected while the job runs because an orphan that left the
    group with setsid() is reparented to init and no longer looks like ours.
    """

    def __init__(self, pid: int, cgroup: Path | None, sandboxed: bool) -> None:
        self.pid, self.cgroup, self.sandboxed = pid, cgroup, sandboxed
        self.known: dict[int, int] = {}  # pid -> start time, so a reused pid is not ours
        self.main_running, self.cpu = True, 0.0

    def reap(self) -> int | None:
        pid, status, usage = os.wait4(self.pid, os.WNOHANG)
        if not pid:
            return None
        self.main_running, self.cpu = False, usage.ru_utime + usage.ru_stime
        return os.waitstatus_to_exitcode(status)

    def scan(self) -> dict[int, tuple[int, int, bytes, int]]:
        table = _proc_table()
        self.known = {p: t for p, t in self.known.items() if p in table and table[p][3] == t}
        members: list[int] = []
        with contextlib.suppress(OSError, ValueError):
            members = [int(p) for p in (self.cgroup / "cgroup.procs").read_text().split()] if self.cgroup else []
        children: dict[int, list[int]] = {}
        for pid, (ppid, pgrp, _, _) in table.items():
            children.setdefault(ppid, []).append(pid)
            if pgrp == self.pid:
                members.append(pid)
        stack = [*self.known, *members, *([self.pid] if self.main_running else [])]
        while stack:
            pid = stack.pop()
            for child in [pid, *children.get(pid, ())]:
                if child in table and child not in self.known and child != os.getpid():
                    self.known[child] = table[child][3]
                    stack.append(child)
        return table

    def alive(self) -> bool:
        table = self.scan()
        if not table:  # no /proc (macOS): the process group is all that can be seen
            with contextlib.suppress(OSError):
                os.killpg(self.pid, 0)
                return True
        return any(table[p][2] not in (b"Z", b"X") for p in self.known if p in table)

    def signal(self, sig: int) -> None:
        self.scan()
        # bwrap dies on SIGTERM and takes the sandbox down at once; spare it so the
        # job inside gets its grace period (its init ignores SIGTERM from outside).
        gentle = self.sandboxed and sig != signal.SIGKILL
        for pid in [*([] if gentle else [-self.pid]), *self.known]:
            if not (gentle and pid == self.pid):
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)  # -pid: the whole process group

    def cleanup(self) -> None:
        for _ in range(50 if self.cgroup is not None else 0):
            self.signal(signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.rmdir(f"{self.cgroup}")
                return
            time.sleep(0.02)


def harden_runner() -> None:
    """Make this process non-dumpable, so a job running as the same (non-root) user
    cannot read the runner's environment, secrets included, from /proc/<pid>/environ.

    Linux only; elsewhere, and against a root job, the sandbox is the protection.
    """
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE, 0

