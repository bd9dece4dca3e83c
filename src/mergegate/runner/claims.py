"""The claim protocol: which runnable jobs this runner claims, when, and how many per push.

Every runner of a gate plans the same runnable list (planning.py) and claims by pushing `started`
records to `mergegate/audit`, a compare-and-swap on the branch tip
(a plain push, never forced). Many runners must help, not collide:

- **Spread.** Each runner walks the list from its own offset (the SHA-256 of its
  `--runner-name`, modulo the list's length) and wraps around, so four runners start
  on four different parts of the list instead of all racing for the first job. A
  runner whose next job was claimed by another has reached that runner's part: it
  jumps to the middle of the longest stretch nobody has claimed (`jump`) instead of
  following the other runner, losing each claim to it.
- **Fresh before choosing.** Before it picks the jobs of a claim, a runner whose last
  look at both branches is older than `publisher.FRESH_SECONDS` looks again (the look
  a claim needs anyway, for vetoes), so it picks among jobs nobody claimed meanwhile
  rather than pushing a claim certain to be dropped.
- **Batches.** One push carries the claims of every job started together (`--parallel
  N`: up to N) and the results of the jobs that ended since. While jobs are short
  (each ended within four times the time a push takes here, or `SHORT_SECONDS`), the batch
  doubles, and is at least a fair share of the jobs nobody has claimed (`BatchSize.target`:
  split between the runners seen claiming and one more), up to `MAX_BATCH` (or
  `SLOT_ROUNDS` times `--parallel`, if more), claiming
  jobs ahead of a free slot; a job that takes longer brings it back to N. So a merge of
  a thousand trivial jobs costs a few dozen pushes, while long jobs are claimed one
  slot at a time and spread evenly over the runners.
- **Exact view.** The `Book` knows every revision with a `started` record (and every
  closed run) as of the audit tip the next push is built on: one `git grep` for the
  runnable blobs at the start of the pass, then the records each new commit appends
  (ours, and those a rejected push fetched). A claim is pushed only for a revision
  the book does not hold; when the push is rejected because the tip moved, the runner
  fetches, checks the new commits, adds their records to the book, drops the claims
  another runner made first and pushes the rest. So at most once holds whatever the
  number of runners: two claims of one revision can never both land on one chain.

A claim made ahead of a free slot waits in this runner's queue; its lease covers the
jobs ahead of it (each one's timeout and kill grace), so no runner closes it as `lost`
while it waits. A runner that dies with claims queued leaves them to be closed as
`lost` (never run: at most once), like a job it was running.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from mergegate.audit.records import Finished, Record, Refusal, Rejected, Started

T = TypeVar("T")

MAX_BATCH = 64
# With --parallel N a runner may hold this many rounds of its N slots claimed (running or waiting),
# if more than MAX_BATCH: each push then carries about as many claims per slot as with fewer slots,
# and a merge of a thousand trivial jobs costs about ten pushes with --parallel 8, not twenty (issue
# 12).
SLOT_ROUNDS = 16
SHORT_SECONDS = (
    0.25  # a job this short (or shorter than four pushes) costs less than its push: claim ahead
)


_PLAIN_NAME = re.compile(r"[A-Za-z0-9._@:/+-]{1,128}")


def holder(record: Record) -> str:
    """The runner a record names, fit for a terminal: a name that is not plain (in a gate without
    `runners`, anyone who may push the audit branch writes it) is shown quoted and escaped."""
    name = record.runner
    return name if _PLAIN_NAME.fullmatch(name) else repr(name)


def offset(runner_name: str, n: int) -> int:
    return int(hashlib.sha256(runner_name.encode()).hexdigest(), 16) % n if n else 0


def spread(items: Sequence[T], runner_name: str) -> list[T]:
    """`items` from this runner's own offset on, wrapping around."""
    start = offset(runner_name, len(items))
    return [*items[start:], *items[:start]]


def jump(items: Sequence[T], taken: Sequence[bool]) -> list[T]:
    """The items not taken, from the middle of the longest stretch of them on, wrapping around.

    A runner whose next job another runner claimed first has run into that runner's
    part of the list: walking on, it would lose every later claim there too (each loss
    a push for nothing). It goes instead to where nobody is: the middle of the longest
    stretch no one has claimed, whose owner, working from the stretch's start, reaches
    the middle last (work splitting)."""
    best, best_length, start, length = 0, 0, 0, 0
    for index, claimed in enumerate(taken):
        if claimed:
            length = 0
            continue
        if length == 0:
            start = index
        length += 1
        if length > best_length:
            best, best_length = start, length
    middle = best + best_length // 2
    free = [k for k, claimed in enumerate(taken) if not claimed]
    at = next((n for n, k in enumerate(free) if k >= middle), 0)
    order = free[at:] + free[:at]
    return [items[k] for k in order]


@dataclass
class Book:
    """Revisions with a `started` record and runs with a `finished` one, as of one audit tip."""

    started: dict[tuple[str, str], Started] = field(default_factory=dict)  # the latest attempt's
    finished: set[str] = field(default_factory=set)
    # (path, blob, commit) another runner refused (`rejected`, `vetoed`): a refusal is final too.
    refused: dict[tuple[str, str, str], Refusal] = field(default_factory=dict)
    # Who holds a `started` record of each revision: runner name -> the revisions
    # (BatchSize.target's count).
    holders: dict[str, set[tuple[str, str]]] = field(default_factory=dict)

    @classmethod
    def of(cls, records: Iterable[Record]) -> Book:
        """The book of these records (planning's one `git grep` of the audit for the pass's
        revisions)."""
        book = cls()
        book.add(records)
        return book

    def add(self, records: Iterable[Record]) -> None:
        for record in records:
            path, blob = record.revision
            if isinstance(record, Started) and path is not None and blob is not None:
                known = self.started.get((path, blob))
                if known is None or record.attempt_number > known.attempt_number:
                    self.started[(path, blob)] = record
                self.holders.setdefault(record.runner, set()).add((path, blob))
            elif isinstance(record, Finished) and record.run_id is not None:
                self.finished.add(record.run_id)
            elif isinstance(record, Refusal) and path is not None and blob is not None:
                if isinstance(record, Rejected) and record.expired is not None:
                    # An expiry is not final: a claim on a renewal of the approval may follow it
                    # (and one on the approval it names, judged earlier, is the claimer's word).
                    continue
                self.refused.setdefault((path, blob, str(record.commit)), record)

    def runners(self, revisions: set[tuple[str, str]]) -> set[str]:
        """The runners with a `started` record of any of `revisions`."""
        return {name for name, held in self.holders.items() if not held.isdisjoint(revisions)}

    def claimed(self, path: str, blob: str, attempt: int = 1) -> Started | None:
        """A `started` record of this revision's attempt `attempt` or a later one, if there is
        one."""
        record = self.started.get((path, blob))
        return record if record is not None and record.attempt_number >= attempt else None

    def taken(
        self, path: str, blob: str, commit: str, attempt: int = 1
    ) -> Started | Refusal | None:
        """Why this runner must not claim the revision: a `started` record of this attempt (or a
        later one), or another runner's refusal of it at this commit (a refusal is final too)."""
        return self.claimed(path, blob, attempt) or self.refused.get((path, blob, commit))


@dataclass
class BatchSize:
    """How many jobs one push claims: `parallel`, doubling while jobs are short."""

    parallel: int
    size: int = 0
    short: bool = False  # the last job that ended was short

    def __post_init__(self) -> None:
        self.size = self.parallel

    @property
    def cap(self) -> int:
        """The most this runner holds claimed at once, however short its jobs."""
        return max(MAX_BATCH, SLOT_ROUNDS * self.parallel)

    def ended(self, seconds: float, push_seconds: float = 0.0) -> None:
        """A job ended after `seconds`; a push takes about `push_seconds` here."""
        self.short = seconds < max(SHORT_SECONDS, 4 * push_seconds)
        self.size = min(self.cap, self.size * 2) if self.short else self.parallel

    def target(self, untaken: int, runners: int) -> int:
        """How many jobs this runner may hold claimed (running or waiting) after the next push.

        While jobs are short, at least a fair share of what nobody has claimed yet: split
        between the runners seen claiming in this pass and one more that may come. Every
        push a runner saves is one that cannot collide with the others' pushes on the one
        tip (with four runners on trivial jobs, two of three pushes lost the race)."""
        if not self.short:
            return self.size
        share = -(-untaken // (runners + 1))
        return min(self.cap, max(self.size, share))
