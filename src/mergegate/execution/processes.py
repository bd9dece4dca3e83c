"""The processes of one job: its pids cgroup, its limits in the child, and killing all of it.

A job may fork, daemonise or setsid() away from its process group; the Tracker follows its
descendants through /proc (and its cgroup, when there is one) so that a timeout or the end of the
job leaves nothing behind.

A job never outlives its runner: the spawner (spawner.py) that forks it tells the runner's watchdog
(watchdog.py) of its process group before it execs, its main process gets a parent-death signal
(SIGKILL when the spawner dies, which dies with the runner), and everything the Tracker sees is
reported to the watchdog, which kills it all when the runner dies, however it dies.

Without a cgroup (an unprivileged runner), a double fork plus setsid() would reparent a job's
process to init before any scan saw it. So the spawner and each job's main process are child
subreapers (PR_SET_CHILD_SUBREAPER): an orphan goes to the job's main process while it lives, else
to the spawner (which reaps it), and stays a descendant the Tracker finds and kills.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Protocol, TypeVar

_PR_SET_DUMPABLE = 4
_PR_SET_CHILD_SUBREAPER = 36


def make_cgroup(run_id: str, max_processes: int | None) -> Path | None:
    """A pids cgroup for the job, under the runner's own so its limits still apply.

    (Read again for every job: the runner's cgroup may be moved. Plain os calls: this runs
    once per job, and each call of a file object's machinery is several system calls.)"""
    bases = []
    with contextlib.suppress(OSError, ValueError):
        for line in _read("/proc/self/cgroup").decode().splitlines():
            _, controllers, path = line.split(":", 2)
            if "pids" in controllers.split(","):
                bases.append(Path("/sys/fs/cgroup/pids", path.lstrip("/")))
            elif (
                not controllers and path == "/"
            ):  # v2: below the root, processes and children don't mix
                bases.append(Path("/sys/fs/cgroup"))
    for base in bases:
        group = base / f"mergegate-{run_id}-{uuid.uuid4().hex[:8]}"
        with contextlib.suppress(OSError):
            group.mkdir()
            try:
                # Opened, never created: in a plain directory (no cgroup file system there) there is
                # none.
                fd = os.open(group / "pids.max", os.O_WRONLY)
                try:
                    os.write(fd, str(max_processes or "max").encode())
                finally:
                    os.close(fd)
                return group
            except OSError:
                group.rmdir()
    return None


def _read(path: str | Path) -> bytes:
    """A small file's bytes (one open, read and close: /proc and cgroup files)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        data = chunk = os.read(fd, 65536)
        while chunk:
            chunk = os.read(fd, 65536)
            data += chunk
        return data
    finally:
        os.close(fd)


# Enough for `python -m mergegate.<helper>` to find mergegate; nothing of the runner's secrets
# (a same-user job could read a helper's /proc/<pid>/environ).
_HELPER_ENV = (
    "PATH",
    "PYTHONPATH",
    "PYTHONHOME",
    "PYTHONDONTWRITEBYTECODE",
    "PYTHONPYCACHEPREFIX",
    "LANG",
    "LC_ALL",
    "VIRTUAL_ENV",
)


def helper_env() -> dict[str, str]:
    """The environment of the runner's helper processes (the watchdog, the spawner): they import
    mergegate from where this process did, however it found it (an install, PYTHONPATH,
    sys.path)."""
    env = {name: os.environ[name] for name in _HELPER_ENV if name in os.environ}
    here = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = os.pathsep.join(
        [here, *([env["PYTHONPATH"]] if env.get("PYTHONPATH") else [])]
    )
    return env


def _libc() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True)
    except OSError:
        return None


_LIBC = _libc()


def _proc_table() -> dict[int, tuple[int, int, bytes, int, int]]:
    """pid -> (ppid, pgrp, state, start time, session) for every process; {} without /proc."""
    table: dict[int, tuple[int, int, bytes, int, int]] = {}
    try:
        names = os.listdir("/proc")
    except OSError:
        return table
    # Plain os calls, not file objects: a job's end scans every process of the machine,
    # and the buffered-file machinery was half of that scan's cost.
    for entry in filter(str.isdigit, names):
        try:
            fd = os.open(f"/proc/{entry}/stat", os.O_RDONLY)
        except OSError:
            continue  # gone meanwhile
        try:
            data = os.read(fd, 4096)
        except OSError:
            continue
        finally:
            os.close(fd)
        with contextlib.suppress(IndexError, ValueError):
            fields = data.rpartition(b")")[2].split()
            table[int(entry)] = (
                int(fields[1]),
                int(fields[2]),
                fields[0],
                int(fields[19]),
                int(fields[3]),
            )
    return table


# Job main pid -> its Tracker, for telling whose an orphan the runner adopted is.
_LIVE: dict[int, Tracker] = {}
_LIVE_LOCK = threading.Lock()
# Held from before a job's main process is forked until its Tracker is registered: with jobs
# in parallel, another job's scan must never take a just-forked main (a child of the runner in
# a session of its own, not registered yet) for an adopted orphan, nor reap it.
SPAWNING = threading.Lock()


class MainProcess(Protocol):
    """A job's main process as the tracker needs it (children.Child is one).

    A protocol, not an import of children.py: children imports this module, and the wings
    allow no import circle, type-only ones included.
    """

    pid: int
    cpu: float

    def poll(self) -> int | None: ...


class Tracker:
    """Everything the job started: its process group, descendants seen in /proc, its cgroup.

    Descendants are collected while the job runs because an orphan that left the group with setsid()
    is reparented to init and no longer looks like ours.
    """

    def __init__(
        self,
        child: MainProcess,
        cgroup: Path | None,
        sandboxed: bool,
        *,
        run_id: str = "job",
        reaper: int | None = None,
    ) -> None:
        self.child, self.pid, self.cgroup, self.sandboxed = child, child.pid, cgroup, sandboxed
        self.reaper = reaper  # the spawner: the job's parent, to which its orphans go
        self.known: dict[int, int] = {}  # pid -> start time, so a reused pid is not ours
        self.main_running, self.cpu = True, 0.0
        self.gone = (
            False  # the last scan, after the main process ended, found nothing of the job alive
        )
        self.run_id = run_id
        self.started = start_time(self.pid) or 0
        # The watchdog already knows the job's cgroup (told before the fork) and its process group
        # (the spawner told it before the exec); it hears here of each other process a scan finds.
        self.watchdog = Watchdog.get()
        with _LIVE_LOCK:
            _LIVE[self.pid] = self

    def reap(self) -> int | None:
        """The main process's exit code once the spawner has reaped it, else None."""
        code = self.child.poll()
        if code is not None:
            self.main_running, self.cpu = False, self.child.cpu
        return code

    def scan(self) -> dict[int, tuple[int, int, bytes, int, int]]:
        table = _proc_table()
        self.known = {p: t for p, t in self.known.items() if p in table and table[p][3] == t}
        members: list[int] = []
        with contextlib.suppress(OSError, ValueError):
            members = (
                [int(p) for p in _read(self.cgroup / "cgroup.procs").split()] if self.cgroup else []
            )
        children: dict[int, list[int]] = {}
        for pid, (ppid, pgrp, _, _, _) in table.items():
            children.setdefault(ppid, []).append(pid)
            if pgrp == self.pid:
                members.append(pid)
        stack = [
            *self.known,
            *members,
            *self._adopted(table),
            *([self.pid] if self.main_running else []),
        ]
        while stack:
            pid = stack.pop()
            for child in [pid, *children.get(pid, ())]:
                if child in table and child not in self.known and child != os.getpid():
                    self.known[child] = table[child][3]
                    self.watchdog.tell(f"+ {self.run_id} p {child} {table[child][3]}")
                    stack.append(child)
        return table

    def _adopted(self, table: dict[int, tuple[int, int, bytes, int, int]]) -> list[int]:
        """Orphans of this job the spawner (a subreaper) adopted; it reaps them, not this.

        A child of the spawner that is not a job's main process was left behind by a job. It is this
        job's if it is in this job's session, or in a session of its own (it called setsid()) and
        younger than this job: with jobs in parallel it may be another's that escaped both its
        process group and its main process; it is killed all the same.
        """
        if self.reaper is None:
            return []
        with SPAWNING, _LIVE_LOCK:  # every main forked by now is registered
            mains = set(_LIVE)
        found = []
        for pid, (ppid, _, state, start, sid) in table.items():
            if ppid != self.reaper or pid in mains or state == b"Z":
                continue
            if sid != self.pid and (sid in mains or start < self.started):
                continue  # another job's, or older than this one
            found.append(pid)
        return found

    def alive(self) -> bool:
        if not self.main_running and self._cgroup_empty():
            # Everything the job started is in its cgroup (only root can move out of it) and in
            # none of its process group: nothing is left, and no scan of every process is needed.
            self.gone = True
            return False
        table = self.scan()
        if not table:  # no /proc (macOS): the process group is all that can be seen
            with contextlib.suppress(OSError):
                os.killpg(self.pid, 0)
                return True
        self.gone = not any(table[p][2] not in (b"Z", b"X") for p in self.known if p in table)
        return not self.gone

    def _cgroup_empty(self) -> bool:
        """The job's cgroup holds no live process (zombies are not listed) and its process group
        none at all; False without a cgroup or when either cannot be read."""
        if self.cgroup is None:
            return False
        try:
            if _read(self.cgroup / "cgroup.procs").strip():
                return False
            os.killpg(self.pid, 0)
        except ProcessLookupError:
            return True
        except OSError:
            return False
        return False

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
        try:
            for _ in range(50 if self.cgroup is not None else 0):
                with contextlib.suppress(OSError):
                    os.rmdir(
                        f"{self.cgroup}"
                    )  # only an empty cgroup goes: nothing of the job is left in it
                    break
                self.signal(signal.SIGKILL)
                time.sleep(0.02)
        finally:
            # After a scan that found nothing of the job alive and the removal of its (empty)
            # cgroup, no process of the job is left that could have made an orphan to reap.
            if not (self.gone and self.cgroup is not None and not self.cgroup.exists()):
                self.scan()  # the watchdog hears of what is left
            with _LIVE_LOCK:
                _LIVE.pop(self.pid, None)
            self.watchdog.tell(f"- {self.run_id}")


_One = TypeVar("_One", bound="OnePerProcess")


class OnePerProcess:
    """A helper process's handle, one per runner process: `get()` makes it on first use, and
    again in a forked child (the parent's pipes and process are not the child's to use)."""

    _instances: ClassVar[dict[type, OnePerProcess]] = {}
    _create: ClassVar[threading.Lock] = threading.Lock()

    def __init__(self) -> None:
        self._owner = os.getpid()

    @classmethod
    def get(cls: type[_One]) -> _One:
        with OnePerProcess._create:
            found = OnePerProcess._instances.get(cls)
            if not isinstance(found, cls) or found._owner != os.getpid():
                found = OnePerProcess._instances[cls] = cls()
            return found


WATCHDOG_MAIN = "import sys; from mergegate.execution.watchdog import main; sys.exit(main())"


class Watchdog(OnePerProcess):
    """The runner's side of watchdog.py: one per runner process, started at the first job."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._folders: set[str] = set()  # told with `keep`: told again to a watchdog started anew

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def fileno(self) -> int | None:
        """The write end of the watchdog's stdin (the spawner writes to it too), or None."""
        with self._lock:
            if self._proc is None or self._proc.stdin is None:
                return None
            return self._proc.stdin.fileno()

    def start(self) -> None:
        """Start the watchdog (idempotent); OSError when it cannot be started."""
        with self._lock:
            if self._proc is not None and self._proc.poll() is None:
                return
            # Its own session: Ctrl-C in a terminal or a CI cancel reaches the runner, not it.
            # Without site (-S, as the spawner: it imports standard modules only, and helper_env's
            # PYTHONPATH finds it) and without runpy (-c, not -m: runpy imports contextlib and
            # importlib.util), it costs little more than the interpreter's own start.
            self._proc = subprocess.Popen(
                [sys.executable, "-S", "-c", WATCHDOG_MAIN],
                stdin=subprocess.PIPE,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                close_fds=True,
                env=helper_env(),
                cwd="/",
            )
            for folder in self._folders:  # (a watchdog that died took them with it)
                self._write(f"+ d {folder}")

    def tell(self, line: str) -> None:
        with self._lock:
            self._write(line)

    def keep(self, folder: Path) -> None:
        """A folder of the runner's (a job's workspace, the export indexes): the watchdog removes it
        if the runner dies before `forget`. Starts the watchdog (OSError when it cannot be started).
        """
        name = str(folder)
        if (
            "\n" in name
        ):  # (one line per message: a TMPDIR with a line break is not told, and stays)
            return
        self.start()
        with self._lock:
            if name not in self._folders:
                self._folders.add(name)
                self._write(f"+ d {name}")

    def forget(self, folder: Path) -> None:
        """The runner removed `folder` itself."""
        name = str(folder)
        with self._lock:
            if name in self._folders:
                self._folders.discard(name)
                self._write(f"- d {name}")

    def _write(self, line: str) -> None:
        if self._proc is None or self._proc.stdin is None:
            return
        with contextlib.suppress(OSError, ValueError):
            self._proc.stdin.write(line.encode() + b"\n")
            self._proc.stdin.flush()


BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")
_BOOT_ID: str | None = None  # read once: it cannot change while this process lives


def boot_id() -> str:
    global _BOOT_ID
    if _BOOT_ID is None:
        try:
            _BOOT_ID = _read(BOOT_ID_FILE).decode().strip()
        except OSError:
            return ""
    return _BOOT_ID


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (with the pid, it names one process)."""
    try:
        return int(_read(f"/proc/{pid}/stat").rpartition(b")")[2].split()[19])
    except (OSError, IndexError, ValueError):
        return None


@dataclass(frozen=True)
class ProcessId:
    """One process, told apart from a later one that reuses its pid (or a pid after a reboot)."""

    pid: int
    start: int
    boot: str

    @classmethod
    def of(cls, pid: int) -> ProcessId | None:
        start = start_time(pid)
        return None if start is None else cls(pid, start, boot_id())

    def as_json(self) -> dict[str, object]:
        return {"pid": self.pid, "start": self.start, "boot": self.boot}

    @classmethod
    def from_json(cls, data: object) -> ProcessId | None:
        if not isinstance(data, dict):
            return None
        pid, start, boot = data.get("pid"), data.get("start"), data.get("boot")
        if isinstance(pid, int) and isinstance(start, int) and isinstance(boot, str):
            return cls(pid, start, boot)
        return None

    def alive(self) -> bool:
        """Whether this very process still runs (a zombie does not); False after a reboot."""
        if self.boot != boot_id():
            return False
        try:
            fields = _read(f"/proc/{self.pid}/stat").rpartition(b")")[2].split()
        except OSError:
            return False
        return int(fields[19]) == self.start and fields[0] not in (b"Z", b"X")

    def group_alive(self) -> bool:
        """Whether any process younger than this one is still in its process group (pgid = pid)."""
        if self.boot != boot_id():
            return False
        return any(
            pgrp == self.pid and start >= self.start and state not in (b"Z", b"X")
            for _, pgrp, state, start, _ in _proc_table().values()
        )


def become_subreaper() -> bool:
    """Adopt the orphans of this process's descendants (Linux >= 3.4), so that a job's
    process that double-forks and calls setsid() is reparented here, not to init, and
    stays findable, killable and reapable. False where the kernel does not offer it."""
    if _LIBC is None:
        return False
    return bool(_LIBC.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0)


def harden_runner() -> None:
    """Make this process non-dumpable, so a job running as the same (non-root) user
    cannot read the runner's environment, secrets included, from /proc/<pid>/environ.

    Linux only; elsewhere, and against a root job, the sandbox is the protection.
    """
    with contextlib.suppress(OSError, AttributeError):
        if _LIBC is not None:
            _LIBC.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
