"""Claiming and running: batches of claims, up to --parallel jobs at once (claims.py's protocol).

Each push carries the claims of the jobs about to start (more, ahead of a free slot, while jobs
are short: claims.BatchSize) and the results of those that ended. A job claimed ahead of a free
slot waits for one; a shutdown meanwhile closes it `interrupted`, a veto merged meanwhile (or while
the claim was pushed) `vetoed`: never started.
Each job runs on one of `parallel` threads (launch.Slots), which live until the loop ends.
"""

from __future__ import annotations

import contextlib
import os
import queue
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import timedelta

from mergegate import clock
from mergegate.audit.records import Lease, Record, Refusal, Started
from mergegate.errors import GitError, MergegateError, StateError
from mergegate.execution import executor
from mergegate.execution.processes import ProcessId
from mergegate.execution.shutdown import Shutdown
from mergegate.rules.eligibility import Runnable
from mergegate.rules.model import Decision
from mergegate.runner.claims import BatchSize, Book, holder, jump
from mergegate.runner.drafting import Drafts, job_id
from mergegate.runner.launch import (
    Flight,
    Landed,
    Launcher,
    Slots,
    discard,
    flight_key,
    limit_fields,
)
from mergegate.runner.plan import Plan
from mergegate.runner.publisher import Key, Publisher
from mergegate.runner.results import Outcome
from mergegate.runner.spool import Spool, SpoolEntry

# A lease covers the job's timeout, its kill grace and the runner's shutdown grace,
# plus this much for pushing the result.
LEASE_SLACK_SECONDS = 5.0


class ClaimLoop:
    """Claims and runs one pass's runnable jobs, in this runner's order (claims.spread).

    Returns (`run`) the outcomes and the drafts still to push.
    """

    def __init__(
        self,
        *,
        runner_name: str,
        clone: str | None = None,
        parallel: int,
        shutdown: Shutdown,
        spool: Spool,
        publisher: Publisher,
        drafts: Drafts,
        launcher: Launcher,
        # Push drafts (with the evidence files they name); with claims, what was dropped and why.
        publish: Callable[
            [list[Record], Mapping[Key, tuple[Decision, int]] | None],
            dict[Key, tuple[str, str]],
        ],
    ) -> None:
        self.runner_name = runner_name
        self.clone = clone
        self.parallel = max(1, parallel)
        self.shutdown = shutdown
        self.spool = spool
        self.pub = publisher
        self.drafts = drafts
        self.launcher = launcher
        self.publish = publish
        self.outcomes: list[Outcome] = []
        self.pending: list[Record] = []
        self.queue: list[Runnable] = []
        self.keys: set[tuple[str, str]] = set()  # (path, blob) of the jobs the pass claims
        self.batch: list[Flight] = []  # prepared (exported), not claimed yet
        self.waiting: list[Flight] = []  # claimed, not started yet
        self.flying: dict[str, Flight] = {}
        self.done: queue.Queue[Landed] = queue.Queue()
        self.size = BatchSize(self.parallel)
        self.failure: MergegateError | None = None
        self.look_after_claim = False  # a claim landed since the last look at approved
        self.me = ProcessId.of(os.getpid())
        self.slots = Slots(self.parallel)

    def run(
        self, runnable: list[Runnable], pending: list[Record]
    ) -> tuple[list[Outcome], list[Record]]:
        """Claim and run `runnable` (in this runner's order, claims.spread), up to `parallel` at a
        time, pushing `pending` with the first claims."""
        self.queue = list(runnable)
        self.pending = pending
        self.keys = {(item.decision.path, item.decision.blob) for item in runnable}
        try:
            while True:
                while not self.done.empty():
                    self._land(self.done.get_nowait())
                stopping = self.shutdown.is_set() or self.failure is not None
                if self.shutdown.is_set() and self.waiting:
                    self._interrupt_waiting()
                self._start_waiting()
                if self._claim_more(stopping=stopping):
                    continue
                if not self.flying and not self.waiting:
                    break
                if self.flying:
                    with contextlib.suppress(queue.Empty):
                        self._land(self.done.get(timeout=0.1))
        except (
            BaseException
        ):  # (not a git failure, caught above): nothing will use what is not running yet
            for flight in [*self.batch, *self.waiting]:
                discard(flight.tmp)
            raise
        self.slots.close()  # (nothing runs now)
        if self.failure is not None:
            if self.pending:
                with contextlib.suppress(MergegateError):
                    self.publish(self.pending, None)  # best effort: the spool keeps them otherwise
            raise self.failure
        return self.outcomes, self.pending

    def _land(self, item: Landed) -> None:
        flight, finished, outcome, seconds, failure = item
        if failure is not None and self.failure is None:
            # Its result is pushed with the others (below, `run`), then the pass stops loudly.
            self.failure = failure
        self.flying.pop(flight.run_id, None)
        self.pending.append(finished)
        self.outcomes.append(outcome)
        self.size.ended(seconds, self.pub.push_seconds)

    def _interrupt_waiting(self) -> None:
        """Claimed but not started: never started now, nor ever."""
        reason = (
            f"{self.shutdown.describe().split(';')[0]} before the job started; it was not started"
        )
        for flight in self.waiting:
            self._never_started(flight, reason)
        self.waiting = []

    def _start_waiting(self) -> None:
        while self.waiting and len(self.flying) < self.parallel and not self.shutdown.is_set():
            flight = self.waiting.pop(0)
            why = self._vetoed_since_claimed(flight)
            if why is not None:
                # A veto landed after the claim (while it was pushed, or while it waited for a
                # slot): recorded `vetoed`, never started (issue 23, item 8).
                self._never_started(flight, why, status="vetoed")
                continue
            # The finished record says how far it had looked for vetoes: verify holds it to that.
            flight.looked = self.pub.veto_tip or self.pub.judged
            self.flying[flight.run_id] = flight
            self.launcher.start(flight, self.done, self.me, self.slots)

    def _never_started(self, flight: Flight, reason: str, *, status: str = "interrupted") -> None:
        finished = self.drafts.closed(
            flight.decision, run_id=flight.run_id, status=status, reason=reason
        )
        self.spool.put(SpoolEntry(finished, None, self.me, done=True))
        self.pending.append(finished)
        self.outcomes.append(
            Outcome(
                job_id(flight.decision),
                flight.decision.path,
                flight.decision.commit,
                status,
                reason,
                flight.run_id,
            )
        )
        discard(flight.tmp)

    def _claim_more(self, *, stopping: bool) -> bool:
        """Prepare and claim the next batch, if there is room; whether the loop goes round now."""
        claiming = not stopping and bool(self.queue) and len(self.waiting) < self.parallel
        # The fair share only when about to claim: counting it every turn of this loop (each
        # job's end) cost more as the book grew, and job #1,000 more than job #1.
        room = (
            (self.size.target(*self._share()) if self.size.short and claiming else self.size.size)
            - len(self.flying)
            - len(self.waiting)
        )
        if not (claiming and room > 0):
            return False
        try:
            self.pub.fresh()  # choose among jobs nobody claimed meanwhile
        except (GitError, StateError) as exc:
            self.failure = exc
            return True
        self.batch = []
        self._prepare(room)
        if self.batch:
            try:
                self.waiting += self._claim(self.batch, [*self.flying.values(), *self.waiting])
                # The claim went to the audit branch, so a veto landing on approved meanwhile did
                # not make its push fail: look again before any of these starts (issue 23, item 8).
                self.look_after_claim = True
            except (GitError, StateError) as exc:
                # Nothing of this batch was claimed; what runs already finishes and is kept.
                self.failure = exc
                for flight in self.batch:
                    discard(flight.tmp)
            self.batch = []
            self.pending = []
        return True

    def _prepare(self, room: int) -> None:
        """Fill the batch with up to `room` prepared jobs nobody else claimed."""
        while self.queue and len(self.batch) < room:
            if self._taken(self.queue[0]) is not None:
                # Another runner's part of the list: go where nobody is (claims.jump).
                taken = [self._taken(item) for item in self.queue]
                for item, earlier in zip(self.queue, taken, strict=True):
                    if earlier is not None:
                        decision = item.decision
                        self.outcomes.append(
                            Outcome(
                                job_id(decision),
                                decision.path,
                                decision.commit,
                                "claimed",
                                f"claimed by {holder(earlier)}",
                            )
                        )
                self.queue = jump(self.queue, [earlier is not None for earlier in taken])
                continue
            item = self.queue.pop(0)
            prepared = self.launcher.prepare(item.decision, item.policy, item.attempt)
            if isinstance(prepared, Flight):
                self.batch.append(replace(prepared, windows=item.windows, renewal=item.renewal))
            else:
                self.outcomes.append(prepared[0])
                self.pending.append(prepared[1])

    def _claim(self, batch: list[Flight], ahead: list[Flight]) -> list[Flight]:
        """Push the claims of `batch` (with the pending drafts) in one push; the flights claimed,
        in order.

        At most once: the claim is pushed before the process exists. Until the real
        result replaces it, the spool holds a "runner stopped" result for each, written
        before the claim: a claim it could not account for is never made. A claim that
        waits for a slot has a lease covering the jobs ahead of it.
        """
        me = ProcessId.of(os.getpid())
        free = max(0, self.parallel - len(ahead))

        def span(flights: list[Flight]) -> float:
            return sum(f.limits.timeout_seconds + f.limits.kill_grace_seconds for f in flights)

        drafts = []
        for index, flight in enumerate(batch):
            # A claim beyond the free slots may wait for every job ahead of it (as if one at a time:
            # an upper bound).
            wait = 0.0 if index < free else span(ahead) + span(batch[:index])
            drafts.append(self._started(flight, wait))
        self.spool.put_many([SpoolEntry(f.provisional, None, me, folders=f.folders) for f in batch])
        dropped = self.publish(
            [*self.pending, *drafts], {flight_key(f): (f.decision, f.attempt) for f in batch}
        )
        claimed = []
        for flight in batch:
            why = dropped.get(flight_key(flight))
            if why is None:
                claimed.append(flight)
                continue
            self.spool.drop({flight.run_id})
            discard(flight.tmp)
            event, reason = why
            self.outcomes.append(
                Outcome(
                    job_id(flight.decision),
                    flight.decision.path,
                    flight.decision.commit,
                    event if event in ("vetoed", "rejected") else "claimed",
                    reason,
                    flight.run_id,
                )
            )
        return claimed

    def _started(self, flight: Flight, wait: float) -> Started:
        """The claim: the `started` draft of a prepared job."""
        decision, policy, job = flight.decision, flight.policy, flight.decision.job
        assert job is not None
        return self.drafts.claim(
            decision,
            run_id=flight.run_id,
            command=tuple(job.command),
            cwd=job.cwd,
            sandbox=policy.sandbox,
            policy_commit=policy.commit,
            limits=limit_fields(flight.limits),
            resolved_program=flight.program,
            lease=self._lease(flight.limits, wait),
            attempt=flight.attempt,
            runs_on=tuple(job.runs_on),
            windows=tuple(flight.windows),
            clone=self.clone,
            renewal=flight.renewal,
        )

    def _lease(self, limits: executor.ProcessLimits, wait: float = 0.0) -> Lease:
        """Who holds the claim and until when: past `until` with no result, any runner closes it as
        `lost`. (`wait`: the longest the job may wait for a slot, behind the jobs ahead of it.)"""
        seconds = (
            wait
            + limits.timeout_seconds
            + limits.kill_grace_seconds
            + self.shutdown.grace
            + LEASE_SLACK_SECONDS
        )
        until = clock.now() + timedelta(seconds=seconds)
        return Lease(self.runner_name, until.isoformat().replace("+00:00", "Z"))

    def _vetoed_since_claimed(self, flight: Flight) -> str | None:
        """Why a job claimed ahead of a free slot must not start now: a veto merged while it waited.
        (The claim's push looked for vetoes; a look that fails now leaves it at that one.)"""
        try:
            if self.look_after_claim:
                self.look_after_claim = False
                self.pub.refresh(fetch=self.pub.fetch)
            else:
                self.pub.fresh()
        except (GitError, StateError):
            return None
        veto = self.pub.vetoes().get((flight.decision.path, flight.decision.blob))
        if veto is None:
            return None
        return (
            f"vetoed by {veto.person} in commit {veto.commit[:7]} after it was claimed; it was "
            "not started"
        )

    def _share(self) -> tuple[int, int]:
        """How many of the queue nobody has claimed, and how many runners (this one too) claimed
        any of this pass's jobs."""
        untaken = sum(1 for item in self.queue if self._taken(item) is None)
        return untaken, len(self.pub.book.runners(self.keys) | {self.runner_name})

    def _taken(self, item: Runnable) -> Started | Refusal | None:
        """Another runner's claim (or refusal) of this item, as of the last look at the audit
        branch."""
        decision = item.decision
        return self.pub.book.taken(decision.path, decision.blob, decision.commit, item.attempt)


def claimed_before(
    work: Plan, outcomes: list[Outcome], book: Book, runner_name: str
) -> list[Outcome]:
    """`claimed by <runner>` for each job of a commit this pass walked that another runner
    started before this pass planned (planning leaves a job another runner holds or finished out
    of what to run): every runner of a fleet accounts for every job of the merge it walked, not
    only those it met while claiming (its run may have ended since; `status` says how). A job
    planning left waiting (a retry that is due later, labels, a run with retries left) is not
    claimed by anyone: `status` says why. (`run --job PATH` says its one job's state instead:
    `why_not`.)"""
    told = {(o.path, o.commit) for o in outcomes} | {
        (q.decision.path, q.decision.commit) for q in work.queued
    }
    found: list[Outcome] = []
    for decision, _policy in work.items:
        if not decision.runnable or (decision.path, decision.commit) in told:
            continue
        record = book.claimed(decision.path, decision.blob)
        if record is None or record.commit != decision.commit or record.runner == runner_name:
            continue
        told.add((decision.path, decision.commit))
        # The reason is the one a lost race gives, exactly (`claimed by <runner>`): one status,
        # one wording.
        found.append(
            Outcome(
                job_id(decision),
                decision.path,
                decision.commit,
                "claimed",
                f"claimed by {holder(record)}",
            )
        )
    return found
