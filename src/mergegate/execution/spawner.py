"""Start jobs from a small process, not by forking the runner.

Forking the runner for each job (to set its limits and parent-death signal between fork and exec)
copied the whole runner, page tables and all, under its one lock: with `--parallel 8` that was the
largest part of the runner's own work per job. The spawner is a fresh `python -m
mergegate.execution.spawner`, started once per runner process (the runner starts it with vfork, as
it starts git): it receives each job over a UNIX socket (argv, cwd, environment, limits, cgroup; its
pipes as descriptors) and forks the job from its own small image.

What the job's main process gets is what it got before: its own session and process group, the
runner's limits (never above the runner's hard ones), its cgroup joined before exec, a parent-death
signal (SIGKILL when the spawner dies, and the spawner dies with the runner), the child-subreaper
flag, every signal at its default (none ignored, none caught) and none blocked, and stdin from
/dev/null. The spawner tells the runner's watchdog of the job's process group **before** the job may
exec, so a runner killed at any moment after the fork leaves nothing of the job running (the
runner's own Tracker tells it later of every process it sees).

The spawner is a child subreaper: orphans of a job's processes come back to it (not to init) and
stay findable by the runner's Tracker (processes.py), and it reaps them. It reports each job's exit
status and CPU time on a pipe of that job's own, which is also how the runner learns the job ended.
It makes itself non-dumpable and holds a minimal environment, so a job (whose parent it is) cannot
read anything of the runner from `/proc/<its parent>/environ`.

Protocol, runner to spawner (one stream socket): a 4-byte big-endian length, then that many bytes of
JSON `{"argv", "cwd", "env", "rlimits", "cgroup", "run"}`; the first 4 bytes carry four descriptors
(SCM_RIGHTS): the job's stdout and stderr write ends, the job's status pipe and the watchdog's
stdin. Spawner to runner, on the job's status pipe: 16 bytes `P<pid>` once the job has exec'd (or
`E<errno>` then the error text, then EOF), later `X<wait status> <cpu microseconds>` and EOF. When
the socket reaches EOF (the runner died) the spawner kills every job's process group and exits.
"""

from __future__ import annotations

# Only what the spawner process itself needs, and nothing heavier: every job is a fork of
# this process, and a fork costs in proportion to the memory the parent has written (its
# page tables are copied; each page either side writes afterwards is copied too; the exec
# unmaps it all). The runner's side of the protocol is children.py.
import contextlib
import ctypes
import json
import os
import resource
import select
import signal
import socket
import struct
import sys

TYPE_CHECKING = False
if (
    TYPE_CHECKING
):  # (typing is not imported at run time: it alone is a fifth of this process's memory)
    from typing import Any

PR_SET_PDEATHSIG = 1
PR_SET_DUMPABLE = 4
PR_SET_CHILD_SUBREAPER = 36
HEAD = 16  # bytes of the first word on a job's status pipe: `P<pid>` or `E<errno>`, padded
# The terminal's and CI's signals are for the runner: the spawner catches them with a handler that
# does nothing (caught, not ignored: execve sets a caught signal back to its default, as it does
# SIGCHLD's handler, so the job needs no call for them). Python ignores SIGPIPE and SIGXFSZ, and an
# ignored signal stays ignored across execve: the job's process sets those two back itself. Each
# call between fork and exec costs the job's start a copy of the memory it touches (issue 12).
_DEAF = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)
_PYTHON_IGNORES = (signal.SIGPIPE, signal.SIGXFSZ)


# -- the spawner process -----------------------------------------------------------------------


class Request:
    """One job to start, as the runner sends it (children.Spawner.start): JSON over the socket.
    (A plain class: this process imports neither typing nor dataclasses.)"""

    __slots__ = ("argv", "cgroup", "cwd", "env", "rlimits", "run")

    def __init__(self, data: bytes) -> None:
        value = json.loads(data)
        self.argv: list[str] = value["argv"]
        self.cwd: str = value["cwd"]
        self.env: dict[str, str] = value["env"]
        self.rlimits: list[list[int]] = value["rlimits"]  # [resource, soft, hard]
        self.cgroup: str | None = value["cgroup"]
        self.run: str = value["run"]


def _receive(sock: socket.socket) -> tuple[Request, list[int]] | None:
    head, fds, _, _ = socket.recv_fds(sock, 4, 4)
    for fd in fds:
        os.set_inheritable(fd, False)
    if len(head) < 4:
        for fd in fds:
            os.close(fd)
        return None
    size = struct.unpack(
        ">I", head if len(head) == 4 else head + _recv_exactly(sock, 4 - len(head))
    )[0]
    return Request(_recv_exactly(sock, size)), fds


def _recv_exactly(sock: socket.socket, n: int) -> bytes:
    data = b""
    while len(data) < n:
        chunk = sock.recv(n - len(data))
        if not chunk:
            raise EOFError
        data += chunk
    return data


def _child(
    request: Request, out: int, err: int, go: int, report: int, libc: Any, spawner: int
) -> None:
    """Between fork and exec: plain os calls only; any failure goes to `report` and exits 127."""
    try:
        os.setsid()
        if libc is not None:
            libc.prctl(
                PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0
            )  # the spawner's death kills the job
            if os.getppid() != spawner:  # it died before prctl took effect
                os._exit(127)
            # Orphans of the job's processes stay under its main process while it lives.
            libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
        for sig in _PYTHON_IGNORES:  # (the signal mask is empty: the spawner emptied its own)
            signal.signal(sig, signal.SIG_DFL)
        if request.cgroup is not None:
            fd = os.open(os.path.join(request.cgroup, "cgroup.procs"), os.O_WRONLY)
            os.write(fd, b"0")
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        os.dup2(out, 1)
        os.dup2(err, 2)
        os.chdir(request.cwd)
        os.read(go, 1)  # the watchdog knows of this process group now
        for res, soft, hard in request.rlimits:
            resource.setrlimit(res, (soft, hard))
        os.closerange(3, report)
        os.closerange(report + 1, 1 << 30)
        argv = request.argv
        os.execve(argv[0], argv, request.env)
    except BaseException as exc:  # nothing may escape into the spawner's loop
        with contextlib.suppress(BaseException):
            program = request.argv[0]
            text = (
                f"{exc.strerror}: {program!r}"
                if isinstance(exc, OSError) and exc.strerror
                else str(exc)
            )
            os.write(
                report,
                b"E" + str(getattr(exc, "errno", 0) or 0).encode().ljust(HEAD - 1) + text.encode(),
            )
    finally:
        os._exit(127)


def _start_job(request: Request, fds: list[int], jobs: dict[int, int], libc: Any) -> None:
    out, err, status, *watchdog = fds
    go_r, go_w = os.pipe()
    report_r, report_w = os.pipe()  # close-on-exec: EOF means the job exec'd
    me = os.getpid()
    try:
        pid = os.fork()
    except OSError:
        for fd in (go_r, go_w, report_r, report_w):
            os.close(fd)
        raise
    if pid == 0:
        _child(request, out, err, go_r, report_w, libc, me)
    for fd in (go_r, report_w, out, err):
        os.close(fd)
    for fd in watchdog:  # told before the job may exec (it waits for `go`)
        with contextlib.suppress(OSError):
            os.write(fd, f"+ {request.run} g {pid}\n".encode())
        os.close(fd)
    with contextlib.suppress(OSError):
        os.write(go_w, b"g")
    os.close(go_w)
    failed = b""
    while chunk := os.read(report_r, 4096):
        failed += chunk
    os.close(report_r)
    if failed:
        os.waitpid(pid, 0)
        with contextlib.suppress(OSError):
            os.write(status, failed)
        os.close(status)
        return
    jobs[pid] = status
    with contextlib.suppress(OSError):
        os.write(status, b"P" + str(pid).encode().ljust(HEAD - 1))


def _reap(jobs: dict[int, int]) -> None:
    while True:
        try:
            pid, status, usage = os.wait4(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if not pid:
            return
        fd = jobs.pop(pid, None)  # else an orphan of a job, adopted here: reaping it is all
        if fd is not None:
            cpu = round((usage.ru_utime + usage.ru_stime) * 1e6)
            with contextlib.suppress(OSError):
                os.write(fd, f"X{status} {cpu}".encode())
            os.close(fd)


def _deaf(*_: object) -> None:
    """The runner's signals, caught and dropped (see _DEAF)."""


def main() -> int:
    for sig in _DEAF:
        signal.signal(sig, _deaf)
    # Whatever the runner's thread blocked, the jobs (forked from this thread) start with nothing
    # blocked.
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    try:
        libc: Any = ctypes.CDLL(None, use_errno=True)
    except OSError:
        libc = None
    if libc is not None:
        libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)  # a job may not read this process's memory
        libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    sock = socket.socket(fileno=int(sys.argv[1]))
    sock.sendall(b"R")
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    jobs: dict[int, int] = {}
    try:
        while True:
            ready = select.select([sock.fileno(), wake_r], [], [])[0]
            if wake_r in ready:
                os.read(wake_r, 4096)
            _reap(jobs)
            if sock.fileno() in ready:
                try:
                    got = _receive(sock)
                except (EOFError, OSError, ValueError):
                    got = None
                if got is None:
                    break  # the runner is gone
                request, fds = got
                try:
                    _start_job(request, fds, jobs, libc)
                except OSError as exc:  # fork failed (no memory, no pids): the runner is told
                    with contextlib.suppress(OSError):
                        os.write(
                            fds[2],
                            b"E" + str(exc.errno or 0).encode().ljust(HEAD - 1) + str(exc).encode(),
                        )
                    for fd in fds:
                        with contextlib.suppress(OSError):
                            os.close(fd)
    finally:
        for pid in jobs:  # the runner died: nothing it started may outlive it
            with contextlib.suppress(OSError):
                os.killpg(pid, signal.SIGKILL)
    return 0


if __name__ == "__main__":
    sys.exit(main())
