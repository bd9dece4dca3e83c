"""The poll loop of `mergegate run` (without --once): a pass whenever there is something to do.

Each poll asks the remote first (`ls-remote`: no local write); a pass, and its fetch, runs only
when a ref the runner reads moved, the spool holds results to push, or time-based work fell due
(a retry's backoff, another runner's lease). A git failure (the remote unreachable, a push
refused) or a local one (a lock held) is an outage: retried with exponential backoff and jitter
(backoff.py), told once when it starts or its cause changes and once when it ends (a cause that
differs only in the commit ids it names, such as a refused push of a new attempt's commit, is the
same cause). Integrity and configuration errors stop the loop. SIGINT/SIGTERM stop it after the
job in flight got its grace and its record was pushed. When the loop goes idle (after a pass, or
an outage's end) it says once what it waits for and when it looks next.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from datetime import datetime

from mergegate import clock
from mergegate.errors import GitError, MergegateError, StateError
from mergegate.rules.eligibility import RETRIED
from mergegate.runner.backoff import Backoff
from mergegate.runner.one_pass import Runner, watched
from mergegate.runner.results import PassResult

# A commit or object id in an error: each attempt of a refused push names its own commit.
_IDS = re.compile(r"\b[0-9a-f]{7,64}\b")


def cause(exc: MergegateError) -> str:
    """What makes two failures the same outage: the error, its commit ids left out."""
    return _IDS.sub("<id>", str(exc))


class PollLoop:
    """Passes of `runner`, `interval` seconds apart at most, until a stop signal."""

    def __init__(self, runner: Runner, *, interval: float, max_backoff: float = 300.0) -> None:
        self.runner = runner
        self.interval = interval
        self.backoff = Backoff(base=interval, cap=max(interval, max_backoff))
        self.outage: str | None = None  # the cause of the outage in progress, if any

    def run(
        self,
        *,
        on_pass: Callable[[PassResult], None],
        on_error: Callable[[MergegateError, float, int], None],
        on_recover: Callable[[int, float], None] | None = None,
        on_wait: Callable[[float, datetime | None], None] | None = None,
    ) -> None:
        """Poll until SIGINT/SIGTERM; the job in flight gets its grace and is recorded first.

        `on_error(exc, delay, failures)` when an outage starts or its cause changes (not once per
        poll), `on_recover(failures, seconds)` when a pass succeeds after one, `on_wait(seconds,
        wake)` when the loop starts waiting (once per idle stretch, not once per poll): the next
        look in `seconds`, and time-based work due at `wake`, if any.
        """
        runner, shutdown = self.runner, self.runner.shutdown
        quiet: dict[str, str] | None = (
            None  # the remote's refs before the last pass that left nothing to do
        )
        wake: datetime | None = (
            None  # when a retry's backoff ends: a pass is due then, though no ref moved
        )
        told = False  # whether this idle stretch was said (on_wait)

        def idle(seconds: float) -> None:
            nonlocal told
            if not told and on_wait is not None:
                on_wait(seconds, wake)
            told = True
            shutdown.wait(seconds)

        with shutdown.handling():
            while not shutdown.is_set():
                try:
                    # Ask the remote first (ls-remote: no local write); a pass, and its
                    # fetch, only when a ref it reads moved or something is waiting.
                    refs = self._remote_refs()
                    if refs is not None and refs == quiet and not self._due(wake):
                        self._recovered(on_recover)
                        idle(self._sleep(wake))
                        continue
                    result = runner.run_once()
                except (GitError, StateError) as exc:
                    told = False  # (the next idle stretch is said again)
                    self._failed(exc, on_error)
                    shutdown.wait(self.backoff.delay)
                    continue
                self._recovered(on_recover)
                on_pass(result)
                if result.outcomes or result.policy_changes:
                    told = False  # it did something: the wait after it is a new idle stretch
                if result.stopped_by:
                    return
                quiet = refs if self._settled(refs) else None
                wake = runner.wake  # a retry falling due, another runner's lease running out
                if any(o.status in RETRIED for o in result.outcomes):
                    # This pass's plan predates that result: the next one says when its retry is
                    # due.
                    wake = clock.now()
                idle(self._sleep(wake))

    def _due(self, wake: datetime | None) -> bool:
        """Whether a pass is due though no ref moved: results in the spool, or work fell due."""
        return self.runner.spool.path.exists() or (wake is not None and clock.now() >= wake)

    def _failed(
        self, exc: MergegateError, on_error: Callable[[MergegateError, float, int], None]
    ) -> None:
        delay = self.backoff.failed()
        # Told when the state changes (first failure, or a different cause), not once per poll.
        if cause(exc) != self.outage:
            self.outage = cause(exc)
            on_error(exc, delay, self.backoff.failures)

    def _recovered(self, on_recover: Callable[[int, float], None] | None) -> None:
        if self.backoff.failures:
            self.outage = None
            if on_recover is not None:
                on_recover(self.backoff.failures, self.backoff.outage_seconds())
        self.backoff.reset()

    def _sleep(self, wake: datetime | None) -> float:
        """Until the next poll: `interval`, or less when a retry falls due sooner."""
        if wake is None:
            return self.interval
        return max(0.05, min(self.interval, (wake - clock.now()).total_seconds()))

    def _remote_refs(self) -> dict[str, str] | None:
        """What the remote's refs the runner reads point at; None without a remote (or fetching)."""
        options, repo = self.runner.options, self.runner.repo
        if not options.fetch or not repo.has_remote(options.remote):
            return None
        return repo.ls_remote(options.remote, watched(options))

    def _settled(self, before: dict[str, str] | None) -> bool:
        """Whether the pass left nothing to do: the remote still where it was and the spool empty.

        (Its own pushes move the remote, so the pass after one that wrote records runs too, finds
        nothing and settles.)
        """
        if before is None or self.runner.spool.path.exists():
            return False
        prefix = f"refs/remotes/{self.runner.options.remote}/"
        return all(
            self.runner.repo.rev(prefix + ref.removeprefix("refs/heads/")) == sha
            for ref, sha in before.items()
        )
