"""Watching one running job: its output pipes, its deadline, and the phases that end it.

run -> term (SIGTERM, then the kill grace) -> kill (SIGKILL) -> drain (what the pipes still
hold, bounded). A job is over when it and everything it left behind are gone, not at EOF.
"""

from __future__ import annotations

import os
import selectors
import signal
import time
from typing import Protocol

from mergegate.execution.children import Child
from mergegate.execution.processes import Tracker
from mergegate.execution.shutdown import KILL_AFTER, Shutdown
from mergegate.redaction import RedactedStream

_CHUNK = 256 * 1024
_SCAN_INTERVAL = 0.1


class Deadlines(Protocol):
    """What the pump needs of a job's limits (executor.ProcessLimits is one)."""

    @property
    def timeout_seconds(self) -> float: ...

    @property
    def kill_grace_seconds(self) -> float: ...


def pump(
    child: Child,
    sinks: dict[int, RedactedStream],
    limits: Deadlines,
    tracker: Tracker,
    shutdown: Shutdown | None = None,
) -> str | None:
    """Read both pipes until the job and everything it left behind are gone.

    Returns "timed_out", "interrupted" (the runner was stopped and the grace ran out) or None. EOF
    is not the end: a job may close its output and go on. Leftovers of a job that exited get the
    same TERM, grace, KILL as a job that timed out.
    """
    sel = selectors.DefaultSelector()
    for fd in sinks:
        sel.register(fd, selectors.EVENT_READ)
    pipes = set(sinks)  # still open
    # The main process's exit wakes the loop at once (the spawner writes its status to this
    # job's status pipe), instead of at the next poll: a short job costs what it takes.
    status = child.status
    sel.register(status, selectors.EVENT_READ)
    try:
        return _pump_loop(sinks, limits, tracker, shutdown, sel, pipes, status)
    finally:
        sel.close()


def _pump_loop(
    sinks: dict[int, RedactedStream],
    limits: Deadlines,
    tracker: Tracker,
    shutdown: Shutdown | None,
    sel: selectors.BaseSelector,
    pipes: set[int],
    pidfd: int | None,
) -> str | None:
    now = time.monotonic()
    # With a cgroup, a scan the instant the job starts finds nothing the cgroup and the
    # subreapers would not keep: the first one is due after one interval, like every later one.
    first_scan = now + (_SCAN_INTERVAL if tracker.cgroup is not None else 0.0)
    deadline, phase, phase_end, next_scan, ended = (
        now + limits.timeout_seconds,
        "run",
        0.0,
        first_scan,
        None,
    )
    drain = max(1.0, limits.kill_grace_seconds)  # bounds waiting on a pipe held by an escapee
    said = (
        pidfd is None
    )  # the status pipe became readable: the main process exited (or the spawner died)
    while True:
        now = time.monotonic()
        if tracker.main_running and said:
            tracker.reap()
        if pidfd is not None and not tracker.main_running and pidfd in sel.get_map():
            sel.unregister(pidfd)  # readable for ever from now on
        if now >= next_scan:
            tracker.scan()
            next_scan = now + _SCAN_INTERVAL
        phase, phase_end, ended = _advance(
            phase,
            phase_end,
            ended,
            now=now,
            deadline=deadline,
            drain=drain,
            tracker=tracker,
            shutdown=shutdown,
            limits=limits,
        )
        if phase == "drain" and (not pipes or now >= phase_end):
            return ended
        if not sel.get_map():
            time.sleep(0.02)
        said = _read_ready(sel, pipes, sinks) or said


def _advance(
    phase: str,
    phase_end: float,
    ended: str | None,
    *,
    now: float,
    deadline: float,
    drain: float,
    tracker: Tracker,
    shutdown: Shutdown | None,
    limits: Deadlines,
) -> tuple[str, float, str | None]:
    """The job's next phase (run -> term -> kill -> drain), its end time, and how it ended."""
    stopping = shutdown is not None and shutdown.kill_due(now)
    if phase == "run" and (not tracker.main_running or now >= deadline or stopping):
        if tracker.main_running:
            ended = "interrupted" if stopping and now < deadline else "timed_out"
        if tracker.main_running or tracker.alive():
            tracker.signal(signal.SIGTERM)
            grace = KILL_AFTER if ended == "interrupted" else limits.kill_grace_seconds
            return "term", now + grace, ended
        return "drain", now + drain, ended
    if phase == "term" and stopping and shutdown is not None and shutdown.urgent.is_set():
        tracker.signal(signal.SIGKILL)  # a second signal: no more waiting
        return "kill", phase_end, ended
    if phase == "term" and (now >= phase_end or not (tracker.main_running or tracker.alive())):
        tracker.signal(signal.SIGKILL)
        return "kill", phase_end, ended
    if phase == "kill" and not tracker.main_running:
        tracker.signal(signal.SIGKILL)
        return "drain", now + drain, ended
    return phase, phase_end, ended


def _read_ready(
    sel: selectors.BaseSelector, pipes: set[int], sinks: dict[int, RedactedStream]
) -> bool:
    """Read what the job's pipes hold now; whether the status pipe said the main process ended."""
    said = False
    for key, _ in sel.select(0.02) if sel.get_map() else ():
        if key.fd not in pipes:
            # the status pipe: the main process exited; it is read at the top of the loop
            said = True
            continue
        data = os.read(key.fd, _CHUNK)
        if data:
            sinks[key.fd].write(data)
        else:
            sel.unregister(key.fd)
            pipes.discard(key.fd)
    return said
