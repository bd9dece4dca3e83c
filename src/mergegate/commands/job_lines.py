"""What `mergegate run` says while it works: a line as each job starts and ends, a line when the
poll loop starts waiting, and on a terminal a live line of what runs and for how long.

The lines go to stderr, as they happen (from the jobs' threads: one lock orders them), so stdout
keeps what it always held: the pass's summary, or its `--json`. The live line (`running
jobs/x.yaml 12s`, rewritten in place every second) is drawn only when stderr is a terminal and
`--json` is off; anywhere else nothing but whole lines is written, with no control codes.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

import click

from mergegate import clock
from mergegate.text import for_reader

if TYPE_CHECKING:
    from mergegate.audit.records import Finished
    from mergegate.runner.results import Outcome

_CLEAR = "\r\x1b[K"  # back to the start of the line, and erase it


def _seconds(seconds: float) -> str:
    """12.3s, 4m05s, 2h03m: short, and exact enough for a person watching."""
    if seconds < 60:
        return f"{seconds:.1f}s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{secs:02d}s"
    return f"{minutes // 60}h{minutes % 60:02d}m"


def _at(when: datetime) -> str:
    return when.strftime("%H:%M:%SZ")


class JobLines:
    """The progress of `run` on stderr (runner/launch.JobWatch, and the poll loop's `on_wait`)."""

    def __init__(self, *, live: bool) -> None:
        # A live line only on a terminal: never in a pipe, a file or a CI log.
        self.live = live and sys.stderr.isatty()
        self._lock = threading.Lock()
        self._running: dict[str, tuple[str, float]] = {}  # run id -> (job path, began)
        self._drawn = False
        self._ticker: threading.Thread | None = None

    # -- runner/launch.JobWatch --------------------------------------------------------------
    def started(self, *, job: str, path: str, commit: str, run_id: str, attempt: int) -> None:
        again = f", attempt {attempt}" if attempt > 1 else ""
        with self._lock:
            self._running[run_id] = (path, time.monotonic())
            self._say(f"started  {path} (job {job}, commit {commit[:7]}{again}, run {run_id[:8]})")
            if self.live and (self._ticker is None or not self._ticker.is_alive()):
                self._ticker = threading.Thread(
                    target=self._tick, name="mergegate live line", daemon=True
                )
                self._ticker.start()

    def ended(self, outcome: Outcome, finished: Finished, seconds: float) -> None:
        if finished.signal is not None:
            how = f"killed by signal {finished.signal}"
        elif finished.exit_code is not None:
            how = f"exit {finished.exit_code}"
        else:
            how = "no exit code"
        where = f"mergegate show {outcome.job}" if outcome.job else "mergegate status"
        with self._lock:
            self._running.pop(outcome.run_id or "", None)
            self._say(
                f"finished {outcome.path} (job {outcome.job}): {outcome.status}, {how}, "
                f"{_seconds(seconds)}; output: {where}"
            )

    # -- the poll loop ------------------------------------------------------------------------
    def waiting(self, seconds: float, wake: datetime | None, *, what: str) -> None:
        """The poll loop starts waiting: for what, and when it looks next."""
        now = clock.now()
        due = f"; work falls due at {_at(wake)}" if wake is not None and wake > now else ""
        with self._lock:
            self._say(
                f"waiting  for {what}{due}; next look in {_seconds(seconds)} "
                f"(at {_at(now + timedelta(seconds=seconds))})"
            )

    def close(self) -> None:
        """The pass is over: no live line is left on the screen."""
        with self._lock:
            self._running.clear()
            self._erase()

    # -- drawing ----------------------------------------------------------------------------------
    def _say(self, text: str) -> None:
        """A whole line (the live line erased first and drawn again after it). Lock held."""
        self._erase()
        click.echo(for_reader(text), err=True)
        self._draw()

    def _erase(self) -> None:
        if self._drawn:
            sys.stderr.write(_CLEAR)
            sys.stderr.flush()
            self._drawn = False

    def _draw(self) -> None:
        if not self.live or not self._running:
            return
        now = time.monotonic()
        jobs = [f"{path} {_seconds(now - began)}" for path, began in self._running.values()]
        text = for_reader(
            f"running {jobs[0]}" if len(jobs) == 1 else f"running {len(jobs)}: " + ", ".join(jobs)
        )
        width = max(20, shutil.get_terminal_size().columns - 1)
        if len(text) > width:
            text = text[: width - 1] + "…"
        sys.stderr.write(_CLEAR + text)
        sys.stderr.flush()
        self._drawn = True

    def _tick(self) -> None:
        """Redraw the live line every second while a job runs."""
        while True:
            time.sleep(1.0)
            with self._lock:
                if not self._running:
                    self._erase()
                    return
                self._draw()
