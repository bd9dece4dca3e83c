"""The runner's side of the spawner (spawner.py): hand it a job, follow the job's main process.

`Spawner` starts one `python -S -m mergegate.execution.spawner` per runner process, with its first
job, and sends each job over their socket; `Child` is a job's main process as the
runner sees it: its pid, its output pipes and its status pipe, on which the spawner
says how it ended (the protocol is in spawner.py's docstring).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass

from mergegate.execution.processes import OnePerProcess, helper_env
from mergegate.execution.spawner import HEAD


class SpawnerLost(RuntimeError):
    """The spawner died while it started a job: whether the job began is not known."""


@dataclass
class Child:
    """A job's main process as the runner sees it: its pid, its output pipes and its status pipe."""

    pid: int
    stdout: int
    stderr: int
    status: int  # readable once the job exited (or the spawner died)
    returncode: int | None = None
    cpu: float = 0.0  # user + system seconds of the main process, once it exited
    lost: bool = False  # the spawner died before it could say how the job ended

    def poll(self) -> int | None:
        """The exit code (negative: killed by that signal) once the main process is gone, else
        None."""
        if self.returncode is None and select.select([self.status], [], [], 0)[0]:
            self._read()
        return self.returncode

    def wait(self) -> int:
        if self.returncode is None:
            self._read()
        assert self.returncode is not None
        return self.returncode

    def _read(self) -> None:
        data = b""
        while chunk := os.read(self.status, 64):
            data += chunk
        if data[:1] == b"X":
            status, cpu = data[1:].split()
            self.returncode, self.cpu = os.waitstatus_to_exitcode(int(status)), int(cpu) / 1e6
        else:  # no word from the spawner: it died, and the job with it (its parent-death signal)
            self.returncode, self.lost = -signal.SIGKILL, True

    def close(self) -> None:
        for fd in (self.stdout, self.stderr, self.status):
            with contextlib.suppress(OSError):
                os.close(fd)


class Spawner(OnePerProcess):
    """The runner's side: one spawner per runner process, started with its first job."""

    def __init__(self) -> None:
        super().__init__()
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def _start(self) -> socket.socket:
        if self._proc is not None and self._sock is not None and self._proc.poll() is None:
            return self._sock
        if self._sock is not None:
            self._sock.close()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)  # both close-on-exec
        try:
            # Its own session: Ctrl-C and a CI's signals reach the runner, which decides about its
            # jobs.
            self._proc = subprocess.Popen(
                [sys.executable, "-S", "-m", "mergegate.execution.spawner", str(theirs.fileno())],
                pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
                env=helper_env(),
                cwd="/",
            )
        finally:
            theirs.close()
        self._sock = ours
        atexit.register(self._stop)
        ours.settimeout(60)
        # it says it is ready: one that cannot start (no mergegate to import) is an error now, not a
        # lost job
        try:
            ready = ours.recv(1)
        except OSError:
            ready = b""
        if ready != b"R":
            raise OSError(
                f"the job spawner ({sys.executable} -S -m mergegate.execution.spawner) did not "
                "start"
            )
        ours.settimeout(None)
        return ours

    def _stop(self) -> None:
        """At the runner's exit: close the socket and reap the spawner (its CPU counts as the
        runner's)."""
        with self._lock:
            if self._sock is not None:
                self._sock.close()
            if self._proc is not None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    self._proc.wait(timeout=2)

    def spawn(
        self,
        argv: list[str],
        *,
        cwd: str,
        env: dict[str, str],
        rlimits: list[tuple[int, int, int]],
        cgroup: str | None,
        run_id: str,
        watchdog: int | None,
    ) -> Child:
        """Start the job; OSError when it could not be started (nothing ran), SpawnerLost when
        the spawner died meanwhile (the job may have started and been killed with it)."""
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        status_r, status_w = os.pipe()
        try:
            body = json.dumps(
                {
                    "argv": argv,
                    "cwd": cwd,
                    "env": env,
                    "rlimits": rlimits,
                    "cgroup": cgroup,
                    "run": run_id,
                }
            ).encode()
            message = struct.pack(">I", len(body)) + body
            fds = [out_w, err_w, status_w, *([] if watchdog is None else [watchdog])]
            with self._lock:
                try:
                    socket.send_fds(self._start(), [message[:4]], fds)
                except (
                    OSError
                ):  # it died since it was last asked: a new one, once (nothing was sent)
                    self._proc = None
                    socket.send_fds(self._start(), [message[:4]], fds)
                assert self._sock is not None
                self._sock.sendall(message[4:])
        except BaseException:
            for fd in (out_r, err_r, status_r):
                os.close(fd)
            raise
        finally:
            for fd in (out_w, err_w, status_w):
                os.close(fd)
        try:
            head = _read_exactly(status_r, HEAD)
            if not head:
                raise SpawnerLost("the job's spawner stopped while starting it")
            if head[:1] != b"P":
                rest = b""
                while chunk := os.read(status_r, 4096):
                    rest += chunk
                code = int(head[1:]) if head[:1] == b"E" else 0
                raise OSError(
                    code, (rest.decode("utf-8", "replace") or "the spawner stopped")
                ) from None
        except BaseException:
            for fd in (out_r, err_r, status_r):
                os.close(fd)
            raise
        return Child(int(head[1:]), out_r, err_r, status_r)


def _read_exactly(fd: int, n: int) -> bytes:
    data = b""
    while len(data) < n and (chunk := os.read(fd, n - len(data))):
        data += chunk
    return data
