"""Exponential backoff with jitter for the poll loop during an outage.

The n-th failure in a row waits base * 2**(n-1), capped, times a random factor in [0.5, 1] ("equal
jitter": runners that lost the same remote at the same moment do not come back in lockstep, and no
wait is shorter than half its step). A pass that succeeds resets it.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass, field


@dataclass
class Backoff:
    base: float
    cap: float
    failures: int = 0
    delay: float = 0.0
    since: float | None = None  # time.monotonic() of the first failure in a row
    rng: random.Random = field(default_factory=random.Random)

    def step(self, failures: int) -> float:
        """The longest wait after `failures` failures in a row (before jitter)."""
        return float(min(self.cap, self.base * 2 ** min(failures - 1, 62)))

    def failed(self) -> float:
        """Count a failure; the seconds to wait before the next attempt."""
        if self.failures == 0:
            self.since = time.monotonic()
        self.failures += 1
        step = self.step(self.failures)
        self.delay = step * (0.5 + self.rng.random() / 2)
        return self.delay

    def outage_seconds(self) -> float:
        return 0.0 if self.since is None else time.monotonic() - self.since

    def reset(self) -> None:
        self.failures, self.delay, self.since = 0, 0.0, None
