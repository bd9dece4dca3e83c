"""Stopping a runner on SIGINT/SIGTERM without losing a record or leaving a job behind.

The first signal stops claiming; the job in flight gets `grace` seconds to end on its own, then its
whole process tree is terminated (SIGTERM, SIGKILL one second later) and it is recorded
`interrupted`; records are pushed and the runner exits. A second signal skips what is left of the
grace.

GitHub Actions cancels a step with SIGINT, then SIGTERM about 7.5 s later, then SIGKILL about 2.5 s
after that: the default grace (5 s) plus the kill (1 s) plus a push fits before the SIGTERM.
"""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import Iterator
from types import FrameType

DEFAULT_GRACE = 5.0
KILL_AFTER = 1.0  # between the SIGTERM at the end of the grace and the SIGKILL


class Shutdown:
    """Set from a signal handler, read by the pass (stop claiming) and the executor (grace)."""

    def __init__(self, grace: float = DEFAULT_GRACE) -> None:
        self.grace = grace
        self.requested = threading.Event()
        self.urgent = threading.Event()
        self.signal_name: str | None = None
        self.at: float | None = None  # time.monotonic() of the first request

    def request(self, signum: int | None = None) -> None:
        if self.requested.is_set():
            self.urgent.set()
            return
        self.signal_name = signal.Signals(signum).name if signum is not None else None
        self.at = time.monotonic()
        self.requested.set()

    def is_set(self) -> bool:
        return self.requested.is_set()

    def wait(self, timeout: float) -> bool:
        return self.requested.wait(timeout)

    def kill_due(self, now: float) -> bool:
        """Whether the job in flight has had its grace."""
        if not self.requested.is_set() or self.at is None:
            return False
        return self.urgent.is_set() or now >= self.at + self.grace

    def describe(self) -> str:
        what = self.signal_name or "a stop request"
        return (
            f"the runner was stopped ({what}); the job had --shutdown-grace={self.grace:g}s to "
            "finish, then its process tree was killed"
        )

    @contextlib.contextmanager
    def handling(self) -> Iterator[Shutdown]:
        """Route SIGINT and SIGTERM here for the duration (main thread only; elsewhere a no-op)."""
        if threading.current_thread() is not threading.main_thread():
            yield self
            return

        def handler(signum: int, _frame: FrameType | None) -> None:
            self.request(signum)

        previous = {sig: signal.signal(sig, handler) for sig in (signal.SIGINT, signal.SIGTERM)}
        try:
            yield self
        finally:
            for sig, old in previous.items():
                signal.signal(sig, old)
