"""Orchestration: discover -> decide -> claim -> execute -> record -> push.

One pass reads `approved` and the audit branch `mergegate/audit` (one fetch),
walks the first-parent commits of approved that are new since the last
`scanned` record, judges each with the policy in force before it, and for
every runnable job pushes a `started` record to the audit branch *before* the
process starts (at most once), runs it, and pushes its `finished` record. The
runner never writes to approved. Records are committed with plumbing on top of
the audit branch's tip and pushed without force; a rejected push fetches both
branches, re-checks the claim (records and vetoes), rebases and retries.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import queue
import re
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mergegate.audit import log as audit
from mergegate.audit.tail import LogEnd
from mergegate.crypto.signatures import (
    split_signed_commit,
    ssh_blob,
    ssh_fingerprint,
    ssh_key_file_blob,
)
from mergegate.errors import (
    Denied,
    GitError,
    MergegateError,
    StateError,
    UsageError,
)
from mergegate.execution import executor
from mergegate.execution.processes import ProcessId, Watchdog
from mergegate.execution.shutdown import DEFAULT_GRACE, Shutdown
from mergegate.execution.workspaces import identity, remove_stale, remove_tree
from mergegate.facts import audit_commits as audit_branch
from mergegate.facts.assessor import VETO_TRAILER, Assessor
from mergegate.facts.branches import AUDIT_BRANCH
from mergegate.facts.policy_log import policy_lookup
from mergegate.git.repo import Commit, Repo, Signing
from mergegate.github import gather as github
from mergegate.rules.eligibility import RETRIED, Runnable, iso_up, retriable
from mergegate.rules.job import is_job_path
from mergegate.rules.model import Decision, Veto, describe_votes
from mergegate.rules.policy import Policy
from mergegate.runner import idle, leases
from mergegate.runner.claims import BatchSize, Book, holder, jump, spread
from mergegate.runner.lock import DEFAULT_WAIT, pass_lock
from mergegate.runner.pending import Pending
from mergegate.runner.plan import (
    Gate,
    Plan,
    check_new_records,
    open_after,
    plan,
    read_gate,
)
from mergegate.runner.publisher import Publisher
from mergegate.runner.spool import Entry, Spool
from mergegate.text import path_display

if TYPE_CHECKING:
    from mergegate.runner.backoff import Backoff

ORPHANED = (
    "the runner stopped while this job ran; it is not run again (at most once) unless the "
    "job says idempotent: true and has retries left"
)
# A lease covers the job's timeout, its kill grace and the runner's shutdown grace,
# plus this much for pushing the result.
LEASE_SLACK_SECONDS = 5.0


def _not_exported(path: str) -> bool:
    # The other jobs' definitions are not a job's business (its own file is written after).
    return is_job_path(path)


@dataclass
class _Flight:
    """A job this pass prepared (exported, checked), claims, and runs."""

    decision: Decision
    policy: Policy
    run_id: str
    limits: executor.Limits
    request: executor.ExecRequest
    tmp: Path
    program: str
    provisional: dict[str, Any]  # the spool's "runner stopped" result until the real one
    attempt: int = 1  # which attempt of the revision this run is (retries)
    folders: tuple[
        tuple[str, int], ...
    ] = ()  # its workspace and the export folder (spool.Entry.folders)


class _Slots:
    """Up to `size` threads that each run claimed jobs one after another (`run`), for one claim
    loop.

    A thread per job cost its start (the caller waits until the new thread runs) and its end on
    every job, under the one lock all of them share (issue 12's `--parallel 8`). A job's process
    does not depend on the thread that asked for it: the spawner forks it, and its parent-death
    signal is the spawner's."""

    def __init__(self, size: int) -> None:
        self.size = size
        self._inbox: queue.SimpleQueue[Callable[[], None] | None] = queue.SimpleQueue()
        self._threads: list[threading.Thread] = []

    def run(self, work: Callable[[], None]) -> None:
        """Run `work` on a free thread (at most `size` run at once: the caller keeps that count)."""
        if len(self._threads) < self.size:
            thread = threading.Thread(
                target=self._serve, name=f"mergegate job slot {len(self._threads) + 1}", daemon=True
            )
            self._threads.append(thread)
            thread.start()
        self._inbox.put(work)

    def _serve(self) -> None:
        while (work := self._inbox.get()) is not None:
            work()

    def close(self) -> None:
        """Let the threads end once the work given to them is done."""
        for _ in self._threads:
            self._inbox.put(None)
        self._threads = []


def _due(work: Plan, runs: list[audit.Record]) -> datetime | None:
    """When time-based work falls due: a retry's backoff ending, another runner's lease running out
    (its job is then closed as lost), whichever is first."""
    dues = [q.due for q in work.queued if q.due is not None] + [
        end for r in runs if (end := leases.until(r)) is not None
    ]
    return min(d.astimezone(UTC) for d in dues) if dues else None


class _WalkedView:
    """A veto commit as the pass that walked it judged it (and verify does): by the policy in force
    before
    it, at the time the first record covering it says (one a runner of that policy vouched for). A
    veto
    valid then stays a veto: judged only at the clock now and by the tip's policy, it lapsed for the
    runner once its signer's key ran out, never for verify (review redteam7a, F3)."""

    def __init__(self, repo: Repo, root: str, records: str | None, tip: str, now: datetime) -> None:
        self.repo, self.root, self.records, self.tip, self.now = repo, root, records, tip, now
        self._policy_at: Callable[[str], Policy] | None = None
        self._line: dict[str, int] = {}
        self._scanned: list[audit.Record] = []
        self._appenders: audit.Appenders | None = None
        self._signer = Assessor(repo)
        self._found: dict[
            str, list[Veto]
        ] = {}  # (read once a pass: a veto commit costs nothing the second time)

    def vetoes(self, commit: Commit) -> list[Veto]:
        if self.records is None or not commit.parents or split_signed_commit(commit.raw) is None:
            return []  # (an unsigned commit is no veto at any time: nothing to look up)
        if commit.sha in self._found:
            return self._found[commit.sha]
        if self._policy_at is None:
            # Once a pass: the line, every `scanned` record (one git grep), one binary search's
            # memory.
            judge = Assessor(self.repo)
            self._policy_at = policy_lookup(
                self.repo, lambda: judge, at=self.now, root=self.root, records=self.records
            )
            self._line = {
                sha: place
                for place, sha in enumerate(
                    self.repo.out("rev-list", "--first-parent", self.tip).split()
                )
            }
            self._scanned = sorted(
                (
                    r
                    for r in audit.grep(self.repo, self.records, '"event":"scanned"')
                    if r.event == "scanned"
                ),
                key=lambda r: r.seq,
            )
            self._appenders = audit.Appenders(self.repo, self.records)
        assert self._appenders is not None
        before = self._policy_at(commit.parents[0])
        found: list[Veto] = []
        if (
            before.runners
        ):  # (without runners record times say nothing: judged at the clock, as the caller did)
            keys = before.runner_keys()

            def vouched(audit_commit: str, when: datetime) -> bool:
                return self._signer.signature(self.repo.commit(audit_commit), keys, at=when).ok

            when = audit.first_covering(
                self._scanned, commit.sha, self._line, self._appenders, vouched
            )
            if when is not None:
                found = list(Assessor(self.repo).veto(commit, before, at=when).vetoes)
        self._found[commit.sha] = found
        return found


def _sleep(interval: float, wake: datetime | None) -> float:
    """Until the next poll: `interval`, or less when a retry falls due sooner."""
    if wake is None:
        return interval
    return max(0.05, min(interval, (wake - datetime.now(UTC)).total_seconds()))


def _flight_key(flight: _Flight) -> tuple[str, str, str]:
    return (flight.decision.path, flight.decision.blob, flight.decision.commit)


@dataclass(frozen=True)
class Options:
    repo: Path
    remote: str = "origin"
    branch: str = "approved"
    fetch: bool = True
    runner_name: str = "runner"
    trust_root: str | None = None
    signing_key: str | None = None
    output_dir: Path | None = None
    shutdown_grace: float = DEFAULT_GRACE
    lock_wait: float = DEFAULT_WAIT
    parallel: int = 1  # jobs at once (each from its own thread)
    labels: (
        tuple[str, ...] | None
    ) = ()  # claim only jobs whose runs_on are all among these (None: any job, for `plan`)
    job: str | None = (
        # `run --job PATH`: claim and run only this job's runnable revision, record nothing else
        None
    )


@dataclass(frozen=True)
class Outcome:
    job: str | None
    path: str
    commit: str
    # succeeded, failed, timed_out, interrupted, lost, rejected, vetoed, claimed (by another runner)
    status: str
    reason: str | None
    run_id: str | None = None
    attempt: int | None = None  # of a run this pass started
    retry_at: str | None = (
        None  # when the next attempt is due, if this one ended retriable with retries left
    )

    def as_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "path": self.path,
            "commit": self.commit,
            "status": self.status,
            "reason": self.reason,
            "run_id": self.run_id,
            "attempt": self.attempt,
            "retry_at": self.retry_at,
        }


@dataclass(frozen=True)
class PassResult:
    tip: str
    outcomes: tuple[Outcome, ...]
    warnings: tuple[str, ...] = ()
    policy_changes: tuple[tuple[str, str, str], ...] = ()  # (commit, adopted|rejected, why)
    stopped_by: str | None = None  # the signal that stopped the pass, if one did
    waiting: tuple[str, str] | None = (
        None  # (commit, why): the walk stopped there for missing evidence
    )

    @property
    def exit_code(self) -> int:
        # A job another runner claimed first is that runner's outcome, not this one's.
        # Waiting for evidence is "not yet": never the exit code of a pass that ran everything.
        return (
            0
            if all(o.status in ("succeeded", "claimed") for o in self.outcomes)
            and self.waiting is None
            else 1
        )


@dataclass(frozen=True)
class Planned:
    """One job in a dry run: what the pass would do with it."""

    job: str | None
    path: str
    commit: str
    status: str  # would run, would reject, would veto, would close
    reason: str | None
    command: tuple[str, ...]
    blob: str | None = None
    attempt: int | None = None  # would run: which attempt
    runs_on: tuple[str, ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {
            "job": self.job,
            "path": self.path,
            "commit": self.commit,
            "status": self.status,
            "reason": self.reason,
            "command": list(self.command),
            "blob": self.blob,
            "attempt": self.attempt,
            "runs_on": list(self.runs_on),
        }


@dataclass(frozen=True)
class Preview:
    tip: str
    jobs: tuple[Planned, ...]
    records: tuple[
        dict[str, Any], ...
    ]  # drafts, as the pass would record them (the results are unknown yet)
    warnings: tuple[str, ...]
    policy_changes: tuple[tuple[str, str, str], ...]
    waiting: tuple[str, str] | None = (
        None  # (commit, why) when the walk stopped for missing evidence
    )


class Runner:
    def __init__(
        self, options: Options, *, shutdown: Shutdown | None = None, repo: Repo | None = None
    ) -> None:
        self.options = options
        self.repo = (
            repo if repo is not None else Repo(options.repo)
        )  # `repo`: options.repo, already opened
        self.repo.on_export_dir = (
            _keep  # the watchdog removes the export folder if this runner dies
        )
        self.shutdown = shutdown or Shutdown(options.shutdown_grace)
        self.signing = Signing(options.signing_key) if options.signing_key else None
        self.spool = Spool.for_runner(self.repo.git_dir, options.runner_name)
        self.pending = Pending(self.repo, options.runner_name)
        self._judged = audit.now()  # the clock the current pass judges at (each pass sets it)
        self._walked_view: _WalkedView | None = (
            None  # how earlier passes judged old vetoes (each pass sets it)
        )
        self.plan: Plan | None = (
            None  # the last pass's plan (`run --job` says from it why a job did not run)
        )
        self.wake: datetime | None = (
            None  # when the last pass's time-based work falls due (a retry, a lease's end)
        )
        self._pass_keys: set[tuple[str, str]] = (
            set()
        )  # (path, blob) of the jobs the pass claims (claims.BatchSize.target)
        self._me = ProcessId.of(os.getpid())  # this runner process, as the spool names it
        self._home = Path(
            pwd.getpwuid(os.geteuid()).pw_dir
        )  # (the passwd entry: read once, not for every job)

    def run_once(self) -> PassResult:
        """One pass, holding the clone's pass lock, with SIGINT/SIGTERM stopping it gracefully."""
        with (
            self.shutdown.handling(),
            pass_lock(
                self.repo.common_dir,
                runner_name=self.options.runner_name,
                wait=self.options.lock_wait,
            ),
        ):
            try:
                return self._pass()
            finally:
                exports = self.repo.export_dir
                self.repo.drop_exports()  # every job of the pass has its own copy by now
                if exports is not None:
                    Watchdog.get().forget(exports)

    def _pass(self) -> PassResult:
        self.spool.warnings.clear()
        self.repo.warnings.clear()
        # Whatever this pass does, the last quiet pass no longer stands for the next one (idle.py).
        idle.forget(self.repo.git_dir, self.options.runner_name)
        self.pending.forget()
        now = datetime.now(UTC)
        # Every commit this pass judges, it judges at `now`; its records say so (`judged`), so that
        # verify
        # judges key lifetimes at the same time, not at the records' own (later) times.
        self._judged = audit.stamp(now)
        gate = read_gate(
            self.repo,
            remote=self.options.remote,
            branch=self.options.branch,
            fetch=self.options.fetch,
            trust=self.options.trust_root,
            remember=True,
        )
        branch, tip, warnings = gate.branch, gate.tip, list(gate.warnings)
        self._reviews = self._review_source(gate, now)
        self._walked_view = _WalkedView(self.repo, gate.root, gate.records, tip, now)
        work = plan(
            self.repo,
            tip,
            gate.root,
            gate.tail,
            records=gate.records,
            at=now,
            runner_name=self.options.runner_name,
            reviews=self._reviews,
            labels=self._labels(),
            before_walk=self._can_sign,
        )
        self.plan = work
        # Records other runners (or anyone who can push) appended since the last complete pass.
        check_new_records(self.repo, gate, work, at=now, reviews=self._reviews)
        # Before anything runs: a rewrite later must be seen against these tips, so a
        # seen ref that cannot be written stops the pass here (StateError, naming it).
        # (The audit tip only now: it is where the next pass starts checking.)
        seen = branch.remember(tip, gate.records, gate.seen)
        self._can_sign(
            work.policy, key=work.waiting is None
        )  # (again: a policy change the walk adopted may list runners)
        assessor = Assessor(self.repo, reviews=self._reviews)
        known = {work.start: work.start_policy, **{a.commit: a.policy for a in work.assessments}}
        checker = audit_branch.Checker(
            self.repo,
            assessor.signer(at=now),
            tip,
            policy_lookup(
                self.repo,
                lambda: assessor,
                at=now,
                root=gate.root,
                records=gate.records,
                known=known,
            ),
        )
        self._files: dict[str, bytes] = {}
        outcomes: list[Outcome] = []
        # Results a previous pass could not push come first; their jobs are not orphans,
        # and a job whose process may still run is not closed yet.
        spooled, running = self._spool_load(gate.records)
        recovered = {d.get("run_id") for d in spooled} | {e.run_id for e in running}
        work.orphans = [o for o in work.orphans if o.get("run_id") not in recovered]
        closing = recovered | {o.get("run_id") for o in work.orphans}
        runs = leases.open_runs(self.repo, gate.records)
        work.expired = [r for r in leases.ended(runs, now) if r.get("run_id") not in closing]
        for entry in running:
            where = f" as pid {entry.job.pid}" if entry.job else ""
            warnings.append(
                f"{entry.record.get('path')} (run {entry.run_id}) may still be running{where}, "
                "from a runner "
                f"that stopped; it is closed once its process is gone ({self.spool.path})"
            )
        outcomes += [
            Outcome(
                d.get("job"),
                str(d.get("path")),
                str(d.get("commit")),
                str(d.get("status")),
                d.get("reason"),
                d.get("run_id"),
            )
            for d in spooled
        ]
        warnings += _newly_unapproved(work)
        only = self.options.job
        # `run --job PATH` claims and runs that one revision and records nothing else (the sweep
        # pass does).
        pending = [*spooled, *self._bookkeeping(work, outcomes)] if only is None else [*spooled]
        # Every revision with a `started` record, for all the pass's candidates: planning's one
        # grep.
        book = Book.of(work.revisions)
        self._pub = Publisher(
            self.repo,
            branch,
            self.options.runner_name,
            self.options.fetch,
            self.signing,
            self.spool,
            self.pending,
            work.tip,
            LogEnd.read(self.repo, gate.records, gate.tail),
            checker,
            book,
            vetoes=lambda: self._vetoes(work),
            more_vetoes=lambda spec: self._more_vetoes(work, spec),
            vetoed_draft=lambda event, d, why: self._draft(event, d, reason=why, **_votes(d)),
        )
        runnable: list[Runnable] = []
        done: dict[
            tuple[str, str, str], str
        ] = {}  # what this pass did with each runnable item (for `open`)
        for refused in work.refused if only is None else ():
            decision = refused.decision
            pending.append(
                self._draft("rejected", decision, reason=refused.reason, **_votes(decision))
            )
            outcomes.append(
                Outcome(
                    _job_id(decision), decision.path, decision.commit, "rejected", refused.reason
                )
            )
        for item in work.runnable:
            decision = item.decision
            if only is not None and decision.path != only:
                continue
            refusal = self._refusal(decision, work)
            if refusal is not None:
                event, reason = refusal
                pending.append(self._draft(event, decision, reason=reason, **_votes(decision)))
                outcomes.append(
                    Outcome(_job_id(decision), decision.path, decision.commit, event, reason)
                )
                done[(item.path, item.blob, item.commit)] = event
            else:
                runnable.append(item)
        ran, pending = self._claim_and_run(spread(runnable, self.options.runner_name), pending)
        outcomes += ran
        outcomes += self._claimed_before(work, outcomes)
        took = {(o.path, o.commit): o.status for o in ran}  # (a commit has one blob per path)
        done.update(
            {
                (i.path, i.blob, i.commit): took[(i.path, i.commit)]
                for i in runnable
                if (i.path, i.commit) in took
            }
        )
        if not self.shutdown.is_set():
            still, files = open_after(work, done)
            if only is None and (work.new_commits or still != list(work.open_before)):
                # The unapproved map can hold thousands of paths: it goes into an
                # evidence file (written once per distinct map), the record names it.
                # `open` lists commits whose jobs may still need a runner: the next pass judges them
                # again.
                fields, held = audit.unapproved_fields(work.unapproved)
                if held is not None:
                    self._files[held.path] = held.data
                self._files.update(files)
                pending.append(
                    audit.draft(
                        "scanned",
                        runner=self.options.runner_name,
                        commit=work.tip,
                        start=work.start,
                        judged=self._judged,
                        policy_commit=work.policy.commit,
                        commits=len(work.assessments),
                        open=still,
                        **fields,
                        **self._walked_evidence(work, pending),
                    )
                )
        if pending:
            self._publish(pending)
        # Remember what was seen (all of it checked), so that a later rewrite of
        # either branch (which may also erase the records that would have told) stops this runner.
        branch.remember(branch.tip(), self._pub.checked, seen)
        changes = tuple(
            (a.commit, "adopted" if a.policy_adopted else "rejected", a.summary)
            for a in work.assessments
            if a.policy_changed
        )
        stopped = (
            (self.shutdown.signal_name or "a stop request") if self.shutdown.is_set() else None
        )
        self.wake = _due(work, runs)
        if not (spooled or running or warnings or self.spool.warnings or self.repo.warnings):
            self._remember_quiet(gate, work, runs, outcomes)
        return PassResult(
            tip,
            tuple(outcomes),
            tuple([*warnings, *self.spool.warnings, *self.repo.warnings]),
            changes,
            stopped,
            work.waiting,
        )

    def quiet_key(self) -> str:
        """What the pass decides by besides the two refs and the time (idle.py): the same key,
        computed by `run --once` from its command line, finds this pass's memory."""
        return idle.key(
            remote=self.options.remote,
            branch=self.options.branch,
            trust_root=self.options.trust_root,
            runner_name=self.options.runner_name,
            labels=self.options.labels,
            signing_key=self.options.signing_key,
        )

    def _remember_quiet(
        self, gate: Gate, work: Plan, runs: list[audit.Record], outcomes: list[Outcome]
    ) -> None:
        """A pass that ended settled leaves its memory, so that the next `run --once` with nothing
        new costs one `ls-remote` (idle.py), also right after a pass that ran jobs.

        Settled: the next pass, from the refs this one fetched and pushed, would find nothing to
        do before the memory's wake time. So: every record pushed (nothing spooled or pending);
        the remote's refs are the tip of approved it judged and its own last audit commit (no
        other runner's records came in meanwhile: their claims and leases are not in this
        plan); nothing waiting for evidence or carried over for it; no job of this pass with a
        retry to come (its due time is the next plan's to say) and no lost job closed (it may
        be retried); the trust root pinned by commit id; fetched from a remote. (The caller
        also wants no warnings and no results recovered from an earlier pass.)
        """
        pinned = self.options.trust_root or os.environ.get("MERGEGATE_TRUST_ROOT") or ""
        if (
            self.options.job is not None
            or not self.options.fetch
            or gate.branch.remote is None
            or work.waiting is not None
            or work.carried
            or work.orphans
            or work.expired
            or self.shutdown.is_set()
            or not _FULL_ID.fullmatch(pinned)
            or any(o.retry_at is not None for o in outcomes)
            or self._pub.others
            or self.spool.path.exists()
            or self.pending.get() is not None
        ):
            return
        prefix = f"refs/remotes/{self.options.remote}/"
        read = self.repo.revs([prefix + ref.removeprefix("refs/heads/") for ref in self._watched()])
        refs = {
            ref: read[prefix + ref.removeprefix("refs/heads/")] or "" for ref in self._watched()
        }
        if list(refs.values()) != [gate.tip, self._pub.checked or ""]:
            # approved moved while the pass ran, or the audit branch is not where its last push left
            # it
            return
        # A commit still open (a job queued for a runner with its labels, or for its retry) is
        # judged again
        # by the next pass at its time: a key of its policy starting or ending its lifetime then
        # changes
        # the verdict, so the memory wakes then too (an OpenPGP key's own expiry is gpg's: no
        # memory).
        keys = [
            key
            for q in work.queued
            for person in (*q.policy.approvers, *q.policy.proposers)
            for key in person.keys
        ]
        if any(key.expires for key in keys):
            return
        now = datetime.now(UTC)
        times = [
            t if t.tzinfo is not None else t.replace(tzinfo=UTC)
            for key in keys
            for t in (key.valid_after, key.valid_before)
            if t
        ]
        bounds = [
            t for t in times if t > now
        ]  # (a time without a zone is UTC, as signatures reads it)
        due = min([*bounds, *([self.wake] if self.wake is not None else [])], default=None)
        wake = due.isoformat() if due is not None else None
        idle.remember(
            self.repo.git_dir,
            self.options.runner_name,
            idle.Quiet(self.quiet_key(), refs, gate.tip, wake),
        )

    def _can_sign(self, policy: Policy, *, key: bool = False) -> None:
        """A policy that lists runners needs signed audit commits: without a key, refuse before any
        work.

        With `key` (`policy` is the one in force at the tip: the walk got there), an ssh key the
        policy does not
        list is refused too, also by a pass with nothing to run: a runner set up with the wrong key
        must not
        idle green until its first job. (Not before the walk: a policy change it adopts may list the
        key.) An
        OpenPGP key, or an ssh key file that does not show its public half, is judged by the
        signature of the
        pass's first audit commit (publisher.py)."""
        if policy.runners and self.signing is None:
            raise UsageError(
                f"{policy.where} lists runners, so audit commits must be signed",
                hint="pass --signing-key with the runner's ssh key path or OpenPGP key id",
            )
        if not key or not policy.runners or self.signing is None:
            return
        blob = ssh_key_file_blob(self.signing.key) if os.path.isfile(self.signing.key) else None
        if blob is not None and all(ssh_blob(listed) != blob for listed in policy.runner_keys()):
            raise UsageError(
                "--signing-key does not make a signature the policy accepts from a runner: "
                f"{self.signing.key} "
                f"is the key {ssh_fingerprint(blob)}, which {policy.where} does not list under "
                "runners",
                hint="use the private key of a key listed under runners in the policy (ssh-keygen "
                "-lf KEY shows its fingerprint)",
            )

    def _labels(self) -> frozenset[str] | None:
        return None if self.options.labels is None else frozenset(self.options.labels)

    def _review_source(
        self, gate: Gate, now: datetime, *, remember: bool = True
    ) -> github.ReviewSource:
        """GitHub review evidence: what the records were decided on first, else asked of the API."""
        return github.ReviewSource(
            self.repo,
            now=now,
            settings=github.Settings.from_env(),
            stored=github.stored_evidence(self.repo, gate.records, remember=remember),
            remote=self.options.remote if gate.branch.remote is not None else None,
        )

    def preview(self) -> Preview:
        """What a pass would claim, run and record (`run --dry-run`): nothing written, pushed or
        remembered.

        The same reading, planning, bookkeeping and refusals as `_pass`; it stops where
        `_pass` would start claiming. No lock, spool, seen ref or judged-times file is touched.
        """
        now = datetime.now(UTC)
        self._judged = audit.stamp(now)
        gate = read_gate(
            self.repo,
            remote=self.options.remote,
            branch=self.options.branch,
            fetch=self.options.fetch,
            trust=self.options.trust_root,
        )
        # The same evidence a pass would judge with (the refusals below read it too).
        self._reviews = self._review_source(gate, now, remember=False)
        self._walked_view = _WalkedView(self.repo, gate.root, gate.records, gate.tip, now)
        work = plan(
            self.repo,
            gate.tip,
            gate.root,
            gate.tail,
            records=gate.records,
            at=now,
            runner_name=self.options.runner_name,
            remember=False,
            reviews=self._reviews,
            labels=self._labels(),
        )
        self.plan = work
        check_new_records(self.repo, gate, work, at=now, reviews=self._reviews)
        warnings = list(gate.warnings)
        if work.policy.runners and self.signing is None:
            warnings.append(f"{work.policy.where} lists runners: a real pass needs --signing-key")
        outcomes: list[Outcome] = []
        self._files = {}
        pending = self._bookkeeping(work, outcomes)
        jobs = [Planned(o.job, o.path, o.commit, "would close", o.reason, ()) for o in outcomes]
        for refused in work.refused:
            decision = refused.decision
            command = decision.job.command if decision.job is not None else ()
            pending.append(
                self._draft("rejected", decision, reason=refused.reason, **_votes(decision))
            )
            jobs.append(
                Planned(
                    _job_id(decision),
                    decision.path,
                    decision.commit,
                    "would reject",
                    refused.reason,
                    command,
                )
            )
        for item in work.runnable:
            decision = item.decision
            refusal = self._refusal(decision, work)
            command = decision.job.command if decision.job is not None else ()
            if refusal is not None:
                event, reason = refusal
                pending.append(self._draft(event, decision, reason=reason, **_votes(decision)))
                jobs.append(
                    Planned(
                        _job_id(decision),
                        decision.path,
                        decision.commit,
                        {"rejected": "would reject", "vetoed": "would veto"}.get(
                            event, f"would record {event}"
                        ),
                        reason,
                        command,
                    )
                )
            else:
                pending.append(
                    self._draft(
                        "started",
                        decision,
                        command=list(command),
                        attempt=item.attempt,
                        **_votes(decision),
                    )
                )
                pending.append(self._draft("finished", decision))
                jobs.append(
                    Planned(
                        _job_id(decision),
                        decision.path,
                        decision.commit,
                        "would run",
                        None,
                        command,
                        decision.blob,
                        item.attempt,
                        item.runs_on,
                    )
                )
        if work.new_commits:
            pending.append(
                audit.draft(
                    "scanned",
                    runner=self.options.runner_name,
                    commit=work.tip,
                    start=work.start,
                    policy_commit=work.policy.commit,
                    commits=len(work.assessments),
                )
            )
        changes = tuple(
            (a.commit, "adopted" if a.policy_adopted else "rejected", a.summary)
            for a in work.assessments
            if a.policy_changed
        )
        return Preview(
            gate.tip, tuple(jobs), tuple(pending), tuple(warnings), changes, work.waiting
        )

    def _bookkeeping(self, work: Plan, outcomes: list[Outcome]) -> list[dict[str, Any]]:
        pending = []
        for record in work.orphans:
            reason = ORPHANED
            pending.append(
                {
                    **audit.draft(
                        "finished",
                        runner=self.options.runner_name,
                        status="lost",
                        exit_code=None,
                        reason=reason,
                        run_id=record.get("run_id"),
                    ),
                    **_copy_ids(record),
                }
            )
            outcomes.append(
                Outcome(
                    record.get("job"),
                    str(record.get("path")),
                    str(record.get("commit")),
                    "lost",
                    reason,
                    record.get("run_id"),
                )
            )
        for record in work.expired:
            lease = record.get("lease") or {}
            reason = (
                f"the lease of {lease.get('holder')} expired at {lease.get('until')} with no "
                "result; "
                "the job is not run again (at most once) unless it says idempotent: true and has "
                "retries left"
            )
            pending.append(
                {
                    **audit.draft(
                        "finished",
                        runner=self.options.runner_name,
                        status="lost",
                        exit_code=None,
                        reason=reason,
                        run_id=record.get("run_id"),
                    ),
                    **_copy_ids(record),
                }
            )
            outcomes.append(
                Outcome(
                    record.get("job"),
                    str(record.get("path")),
                    str(record.get("commit")),
                    "lost",
                    reason,
                    record.get("run_id"),
                )
            )
        recorded = {r.get("commit") for r in work.handled_policy}
        for assessment in work.assessments:
            if assessment.policy_changed and assessment.commit not in recorded:
                status = "adopted" if assessment.policy_adopted else "rejected"
                pending.append(
                    audit.draft(
                        "policy",
                        runner=self.options.runner_name,
                        commit=assessment.commit,
                        status=status,
                        reason=assessment.summary,
                        judged=self._judged,
                        policy_commit=assessment.policy.commit,
                        **self._evidence(assessment.commit),
                    )
                )
        return pending

    def _refusal(self, decision: Decision, work: Plan) -> tuple[str, str] | None:
        # (A revision that already started elsewhere is refused by planning:
        # eligibility.judge_attempts.)
        if not decision.runnable:
            return "rejected", decision.reason
        veto = self._vetoes(work).get((decision.path, decision.blob))
        if veto is not None:
            return "vetoed", _vetoed(veto)
        return None

    def _vetoes(self, work: Plan) -> dict[tuple[str, str], Veto]:
        """Every valid veto on approved, also those a previous pass walked past."""
        if work.all_vetoes is None:
            found = {(v.path, v.blob): v for v in work.vetoes}
            for veto in self._search_vetoes(work.tip, work.policy):
                found.setdefault((veto.path, veto.blob), veto)
            work.all_vetoes = found
        return work.all_vetoes

    def _more_vetoes(self, work: Plan, spec: str) -> None:
        found = self._vetoes(work)
        for veto in self._search_vetoes(spec, work.policy):
            found.setdefault((veto.path, veto.blob), veto)

    def _search_vetoes(self, spec: str, policy: Policy) -> list[Veto]:
        """Vetoes in the first-parent commits `spec` (a tip, or old..new)."""
        assessor, now = Assessor(self.repo), datetime.now(UTC)
        # As loose as the trailer parser (any case, any spacing), so that no veto
        # the walk would honour is missed here; the parser then decides.
        grep = f"--grep=^{VETO_TRAILER}:"
        found: list[Veto] = []
        for sha in self.repo.out(
            "log", "--first-parent", "--regexp-ignore-case", grep, "--format=%H", spec
        ).split():
            commit = self.repo.commit(sha)
            if self.repo.diff(commit.parents[0] if commit.parents else None, sha):
                continue  # a veto is an empty, signed commit (a merge too), as the walk judges it
            vetoes = list(assessor.veto(commit, policy, at=now).vetoes)
            if not vetoes and self._walked_view is not None:
                vetoes = self._walked_view.vetoes(commit)
            found += vetoes
        return found

    def _lease(self, limits: executor.Limits, wait: float = 0.0) -> dict[str, str]:
        """Who holds the claim and until when: past `until` with no result, any runner closes it as
        `lost`.
        (`wait`: the longest the job may wait for a slot, behind the jobs ahead of it.)"""
        seconds = (
            wait
            + limits.timeout_seconds
            + limits.kill_grace_seconds
            + self.shutdown.grace
            + LEASE_SLACK_SECONDS
        )
        until = datetime.now(UTC) + timedelta(seconds=seconds)
        return {
            "holder": self.options.runner_name,
            "until": until.isoformat().replace("+00:00", "Z"),
        }

    def _draft(self, event: str, decision: Decision, **extra: Any) -> dict[str, Any]:
        if event in ("started", "rejected", "vetoed"):
            extra.update(self._evidence(decision.commit), judged=self._judged)
        return audit.draft(
            event,
            runner=self.options.runner_name,
            job=_job_id(decision),
            path=decision.path,
            blob=decision.blob,
            commit=decision.commit,
            **extra,
        )

    def _walked_evidence(self, work: Plan, pending: list[dict[str, Any]]) -> dict[str, Any]:
        """`reviewed: {commit: <sha256>}` for walked commits judged on GitHub's answers that no
        other
        record names (a reviewed merge of other files only): verify re-judges them offline too."""
        named = {str(d.get("commit")) for d in pending if d.get("evidence")}
        reviewed = {}
        for assessment in work.assessments:
            evidence = self._reviews.gathered.get(assessment.commit)
            if (
                evidence is not None
                and assessment.commit not in named
                and assessment.commit not in self._reviews.stored
            ):
                self._files[evidence.path] = evidence.to_bytes()
                reviewed[assessment.commit] = evidence.sha256
        return {"reviewed": reviewed} if reviewed else {}

    def _evidence(self, commit: str) -> dict[str, Any]:
        """`evidence: [<sha256>]` for a decision made on GitHub's answers; the file goes with the
        records."""
        evidence = self._reviews.evidence_for(commit)
        if evidence is None:
            return {}
        self._files[evidence.path] = evidence.to_bytes()  # (preview's go nowhere)
        return {"evidence": [evidence.sha256]}

    # -- claiming and running: batches of claims, up to --parallel jobs at once ----------------
    def _claim_and_run(
        self, runnable: list[Runnable], pending: list[dict[str, Any]]
    ) -> tuple[list[Outcome], list[dict[str, Any]]]:
        """Claim and run `runnable` (in this runner's order, claims.spread), up to `parallel` at a
        time.

        Each push carries the claims of the jobs about to start (more, ahead of a free
        slot, while jobs are short: claims.BatchSize) and the results of those that
        ended. Each job runs on one of `parallel` threads (`_Slots`), which lives until the
        claim loop ends. Returns the outcomes and the drafts still to push.
        """
        parallel = max(1, self.options.parallel)
        outcomes: list[Outcome] = []
        queue_ = list(runnable)
        self._pass_keys = {(item.decision.path, item.decision.blob) for item in runnable}
        waiting: list[_Flight] = []  # claimed, not started yet
        flying: dict[str, _Flight] = {}
        done: queue.Queue[tuple[_Flight, dict[str, Any], Outcome, float]] = queue.Queue()
        size = BatchSize(parallel)
        failure: MergegateError | None = None
        me = ProcessId.of(os.getpid())
        slots = _Slots(parallel)

        def land(item: tuple[_Flight, dict[str, Any], Outcome, float]) -> None:
            flight, finished, outcome, seconds = item
            flying.pop(flight.run_id, None)
            pending.append(finished)
            outcomes.append(outcome)
            size.ended(seconds, self._pub.push_seconds)

        batch: list[_Flight] = []  # prepared (exported), not claimed yet
        try:
            while True:
                while not done.empty():
                    land(done.get_nowait())
                stopping = self.shutdown.is_set() or failure is not None
                if (
                    self.shutdown.is_set() and waiting
                ):  # claimed but not started: never started now, nor ever
                    reason = (
                        f"{self.shutdown.describe().split(';')[0]} before the job started; it "
                        "was not started"
                    )
                    for flight in waiting:
                        finished = self._draft(
                            "finished",
                            flight.decision,
                            run_id=flight.run_id,
                            status="interrupted",
                            exit_code=None,
                            reason=reason,
                        )
                        self.spool.put(Entry(finished, None, me, done=True))
                        pending.append(finished)
                        outcomes.append(
                            Outcome(
                                _job_id(flight.decision),
                                flight.decision.path,
                                flight.decision.commit,
                                "interrupted",
                                reason,
                                flight.run_id,
                            )
                        )
                        _discard(flight.tmp)
                    waiting = []
                while waiting and len(flying) < parallel and not self.shutdown.is_set():
                    flight = waiting.pop(0)
                    why = self._vetoed_since_claimed(flight)
                    if (
                        why is not None
                    ):  # claimed ahead of a free slot, vetoed before it got one: never started
                        finished = self._draft(
                            "finished",
                            flight.decision,
                            run_id=flight.run_id,
                            status="interrupted",
                            exit_code=None,
                            reason=why,
                        )
                        self.spool.put(Entry(finished, None, me, done=True))
                        pending.append(finished)
                        outcomes.append(
                            Outcome(
                                _job_id(flight.decision),
                                flight.decision.path,
                                flight.decision.commit,
                                "interrupted",
                                why,
                                flight.run_id,
                            )
                        )
                        _discard(flight.tmp)
                        continue
                    flying[flight.run_id] = flight
                    self._launch(flight, done, me, slots)
                claiming = not stopping and bool(queue_) and len(waiting) < parallel
                # The fair share only when about to claim: counting it every turn of this loop (each
                # job's end)
                # cost more as the book grew, and job #1,000 more than job #1.
                room = (
                    (size.target(*self._share(queue_)) if size.short and claiming else size.size)
                    - len(flying)
                    - len(waiting)
                )
                if claiming and room > 0:
                    try:
                        self._pub.fresh()  # choose among jobs nobody claimed meanwhile
                    except (GitError, StateError) as exc:
                        failure = exc
                        continue
                    batch = []
                    while queue_ and len(batch) < room:
                        if self._taken(queue_[0]) is not None:
                            # Another runner's part of the list: go where nobody is (claims.jump).
                            taken = [self._taken(item) for item in queue_]
                            for item, earlier in zip(queue_, taken, strict=True):
                                if earlier is not None:
                                    decision = item.decision
                                    outcomes.append(
                                        Outcome(
                                            _job_id(decision),
                                            decision.path,
                                            decision.commit,
                                            "claimed",
                                            f"claimed by {holder(earlier)}",
                                        )
                                    )
                            queue_ = jump(queue_, [earlier is not None for earlier in taken])
                            continue
                        item = queue_.pop(0)
                        decision = item.decision
                        prepared = self._prepare(decision, item.policy, item.attempt)
                        if isinstance(prepared, _Flight):
                            batch.append(prepared)
                        else:
                            outcomes.append(prepared[0])
                            pending.append(prepared[1])
                    if batch:
                        try:
                            waiting += self._claim(
                                batch, [*flying.values(), *waiting], parallel, pending, outcomes
                            )
                        except (GitError, StateError) as exc:
                            # Nothing of this batch was claimed; what runs already finishes and is
                            # kept.
                            failure = exc
                            for flight in batch:
                                _discard(flight.tmp)
                        batch = []
                        pending = []
                    continue
                if not flying and not waiting:
                    break
                if flying:
                    with contextlib.suppress(queue.Empty):
                        land(done.get(timeout=0.1))
        except (
            BaseException
        ):  # (not a git failure, caught above): nothing will use what is not running yet
            for flight in [*batch, *waiting]:
                _discard(flight.tmp)
            raise
        slots.close()  # (nothing runs now)
        if failure is not None:
            if pending:
                with contextlib.suppress(MergegateError):
                    self._publish(pending)  # best effort: the spool keeps them otherwise
            raise failure
        return outcomes, pending

    def _claimed_before(self, work: Plan, outcomes: list[Outcome]) -> list[Outcome]:
        """`claimed by <runner>` for each job of a commit this pass walked that another runner
        started
        before this pass planned (planning leaves a job another runner holds or finished out of what
        to run): every runner of a fleet accounts for every job of the merge it walked, not only
        those
        it met while claiming (its run may have ended since; `status` says how). A job planning left
        waiting (a retry that is due later, labels, a run with retries left) is not claimed by
        anyone:
        `status` says why.
        (`run --job PATH` says its one job's state instead: `why_not`.)"""
        if self.options.job is not None:
            return []
        told = {(o.path, o.commit) for o in outcomes} | {
            (q.decision.path, q.decision.commit) for q in work.queued
        }
        found: list[Outcome] = []
        for decision, _policy in work.items:
            if not decision.runnable or (decision.path, decision.commit) in told:
                continue
            record = self._pub.book.claimed(decision.path, decision.blob)
            if (
                record is None
                or record.get("commit") != decision.commit
                or record.get("runner") == self.options.runner_name
            ):
                continue
            told.add((decision.path, decision.commit))
            # The reason is the one a lost race gives, exactly (`claimed by <runner>`): one status,
            # one wording.
            found.append(
                Outcome(
                    _job_id(decision),
                    decision.path,
                    decision.commit,
                    "claimed",
                    f"claimed by {holder(record)}",
                )
            )
        return found

    def _vetoed_since_claimed(self, flight: _Flight) -> str | None:
        """Why a job claimed ahead of a free slot must not start now: a veto merged while it waited.
        (The claim's push looked for vetoes; a look that fails now leaves it at that one.)"""
        try:
            self._pub.fresh()
        except (GitError, StateError):
            return None
        veto = self._pub.vetoes().get((flight.decision.path, flight.decision.blob))
        if veto is None:
            return None
        return (
            f"vetoed by {veto.person} in commit {veto.commit[:7]} after it was claimed; it was "
            "not started"
        )

    def _share(self, queue_: list[Runnable]) -> tuple[int, int]:
        """How many of `queue_` nobody has claimed, and how many runners (this one too) claimed any
        of this pass's jobs."""
        untaken = sum(1 for item in queue_ if self._taken(item) is None)
        return untaken, len(self._pub.book.runners(self._pass_keys) | {self.options.runner_name})

    def _taken(self, item: Runnable) -> audit.Record | None:
        """Another runner's claim (or refusal) of this item, as of the last look at the audit
        branch."""
        decision = item.decision
        return self._pub.book.taken(decision.path, decision.blob, decision.commit, item.attempt)

    def _prepare(
        self, decision: Decision, policy: Policy, attempt: int
    ) -> _Flight | tuple[Outcome, dict[str, Any]]:
        """Everything that can refuse the job, checked before it is claimed (a refusal is final)."""
        job = decision.job
        assert job is not None
        run_id = uuid.uuid4().hex
        limits = _limits(policy, job.timeout_seconds)
        tmp = Path(tempfile.mkdtemp(prefix="mergegate-job-"))
        provisional = self._draft(
            "finished", decision, run_id=run_id, status="lost", exit_code=None, reason=ORPHANED
        )
        me = self._me
        held: list[tuple[str, int]] = []

        def on_start(pid: int) -> None:
            # Not synced (spool.py): a line written survives the runner's death, and a crash of the
            # machine ends the job too.
            self.spool.put(
                Entry(provisional, ProcessId.of(pid), me, folders=tuple(held)), sync=False
            )

        try:
            # A runner that dies from here on leaves its watchdog to remove them, else the pass that
            # closes the run.
            _keep(tmp)
            held.append(identity(tmp))
            request = self._request(decision, policy, limits, run_id, tmp, on_start)
            if (
                exports := self.repo.export_dir
            ) is not None:  # (its watchdog knows it: Repo.on_export_dir)
                held.append(identity(exports))
            program = executor.preflight(request)
        except Denied as exc:
            _discard(tmp)
            reason = f"denied before start: {exc.message}"
            return (
                Outcome(job.id, job.path, decision.commit, "rejected", reason),
                self._draft("rejected", decision, reason=reason, **_votes(decision)),
            )
        except BaseException:  # the export failed (a full TMPDIR), a signal: nothing will use it
            _discard(tmp)
            raise
        return _Flight(
            decision,
            policy,
            run_id,
            limits,
            request,
            tmp,
            program,
            provisional,
            attempt,
            tuple(held),
        )

    def _claim(
        self,
        batch: list[_Flight],
        ahead: list[_Flight],
        parallel: int,
        pending: list[dict[str, Any]],
        outcomes: list[Outcome],
    ) -> list[_Flight]:
        """Push the claims of `batch` (with `pending`) in one push; the flights claimed, in order.

        At most once: the claim is pushed before the process exists. Until the real
        result replaces it, the spool holds a "runner stopped" result for each, written
        before the claim: a claim it could not account for is never made. A claim that
        waits for a slot has a lease covering the jobs ahead of it.
        """
        me = ProcessId.of(os.getpid())
        free = max(0, parallel - len(ahead))

        def span(flights: list[_Flight]) -> float:
            return sum(f.limits.timeout_seconds + f.limits.kill_grace_seconds for f in flights)

        drafts = []
        for index, flight in enumerate(batch):
            # A claim beyond the free slots may wait for every job ahead of it (as if one at a time:
            # an upper bound).
            wait = 0.0 if index < free else span(ahead) + span(batch[:index])
            decision, policy, job = flight.decision, flight.policy, flight.decision.job
            assert job is not None
            drafts.append(
                self._draft(
                    "started",
                    decision,
                    run_id=flight.run_id,
                    command=list(job.command),
                    cwd=job.cwd,
                    sandbox=policy.sandbox,
                    rule=decision.rule.describe() if decision.rule else None,
                    policy_commit=policy.commit,
                    self_approved=decision.self_approved,
                    limits=_limit_fields(flight.limits),
                    resolved_program=flight.program,
                    lease=self._lease(flight.limits, wait),
                    attempt=flight.attempt,
                    **({"runs_on": list(job.runs_on)} if job.runs_on else {}),
                    **_votes(decision),
                )
            )
        self.spool.put_many([Entry(f.provisional, None, me, folders=f.folders) for f in batch])
        dropped = self._publish(
            [*pending, *drafts], claims={_flight_key(f): (f.decision, f.attempt) for f in batch}
        )
        claimed = []
        for flight in batch:
            why = dropped.get(_flight_key(flight))
            if why is None:
                claimed.append(flight)
                continue
            self.spool.drop({flight.run_id})
            _discard(flight.tmp)
            event, reason = why
            outcomes.append(
                Outcome(
                    _job_id(flight.decision),
                    flight.decision.path,
                    flight.decision.commit,
                    event if event in ("vetoed", "rejected") else "claimed",
                    reason,
                    flight.run_id,
                )
            )
        return claimed

    def _launch(
        self,
        flight: _Flight,
        done: queue.Queue[tuple[_Flight, dict[str, Any], Outcome, float]],
        me: ProcessId | None,
        slots: _Slots,
    ) -> None:
        """Run the claimed job on a free slot's thread; its result goes to `done`."""
        decision, job = flight.decision, flight.decision.job
        assert job is not None
        request = flight.request

        def body() -> None:
            began = time.monotonic()
            try:
                finished, outcome = self._execute(decision, flight.run_id, request)
            except (
                Exception
            ) as exc:  # the job's result is unknown: it is closed as lost, never run again
                reason = (
                    f"the runner failed while running the job ({type(exc).__name__}: {exc}); "
                    "it is not run again"
                )
                finished = self._draft(
                    "finished",
                    decision,
                    run_id=flight.run_id,
                    status="lost",
                    exit_code=None,
                    reason=reason,
                )
                outcome = Outcome(job.id, job.path, decision.commit, "lost", reason, flight.run_id)
            finally:
                _discard(flight.tmp)
            outcome = replace(outcome, attempt=flight.attempt)
            allowed = 1 + job.retries
            if retriable(outcome.status, idempotent=job.idempotent) and flight.attempt < allowed:
                due = datetime.now(UTC) + timedelta(
                    seconds=flight.policy.retries.delay(flight.attempt)
                )
                outcome = replace(
                    outcome,
                    retry_at=iso_up(due),
                    reason=f"{outcome.reason}; attempt {flight.attempt} of {allowed}: attempt "
                    f"{flight.attempt + 1} is due at {iso_up(due)}",
                )
            self.spool.put(Entry(finished, None, me, done=True))
            done.put((flight, finished, outcome, time.monotonic() - began))

        slots.run(body)

    def _execute(
        self, decision: Decision, run_id: str, request: executor.ExecRequest
    ) -> tuple[dict[str, Any], Outcome]:
        """Run, and keep what it said (bounded and redacted) for the finished record."""
        job = decision.job
        assert job is not None
        try:
            result = executor.run(request)
        except Denied as exc:
            reason = f"denied before start: {exc.message}"
            finished = self._draft(
                "finished", decision, run_id=run_id, status="failed", exit_code=None, reason=reason
            )
            return finished, Outcome(job.id, job.path, decision.commit, "failed", reason, run_id)
        fields: dict[str, Any] = {
            "run_id": run_id,
            "status": result.status,
            "exit_code": result.exit_code,
            "signal": result.signal,
            "duration_ms": result.duration_ms,
            "reason": result.reason,
            "resolved_program": result.resolved_program,
            "sandbox": result.sandbox,
            "limits_applied": dict(result.limits_applied),
        }
        for name, stream in (("stdout", result.stdout), ("stderr", result.stderr)):
            fields.update(
                {
                    f"{name}_tail": stream.tail,
                    f"{name}_bytes": stream.bytes,
                    f"{name}_sha256": stream.sha256,
                }
            )
            if stream.file is not None:
                fields.update(
                    {f"{name}_file": stream.file, f"{name}_file_sha256": stream.file_sha256}
                )
        return self._draft("finished", decision, **fields), Outcome(
            job.id, job.path, decision.commit, result.status, result.reason, run_id
        )

    def _request(
        self,
        decision: Decision,
        policy: Policy,
        limits: executor.Limits,
        run_id: str,
        tmp: Path,
        on_start: Callable[[int], None] | None = None,
    ) -> executor.ExecRequest:
        """A clean export of the approving commit and the job's environment, ready to run."""
        job = decision.job
        assert job is not None
        # The private folder mkdtemp made is the workspace itself: on a file system where each new
        # inode costs a search past the recently freed ones (ext4 without a journal, as on the
        # machine of
        # issue 12), a folder less per job is a sixth of what making a trivial job's workspace
        # costs.
        workspace = tmp
        # The other jobs' definitions are not the job's business (the records are on
        # another branch); leaving them out keeps the export proportional to the code.
        self.repo.export(decision.commit, workspace, skip=_not_exported)
        (workspace / job.path).parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(
            workspace / job.path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666
        )  # as write_bytes, in half the calls
        try:
            data = memoryview(self.repo.blob(job.blob))
            while data:
                data = data[os.write(fd, data) :]
        finally:
            os.close(fd)
        env = executor.build_environment(
            runner_env=os.environ,
            allowlist=policy.env_allowlist,
            job_env=job.env_map,
            extra={
                "MERGEGATE_JOB_ID": job.id,
                "MERGEGATE_COMMIT": decision.commit,
                "MERGEGATE_RUN_ID": run_id,
            },
        )
        output_dir = self.options.output_dir
        if output_dir is None and policy.keep_output:
            output_dir = self.repo.git_dir / "mergegate" / "output"
        return executor.ExecRequest(
            argv=job.command,
            workspace=workspace,
            cwd=job.cwd,
            env=env,
            secrets=self.secrets(policy),
            limits=limits,
            search_path=policy.path or os.environ.get("PATH", os.defpath),
            run_id=run_id,
            sandbox="bwrap" if policy.sandbox == "bwrap" else "none",
            network=bool(decision.rule and decision.rule.network),
            output_dir=output_dir,
            hide_paths=self._private_paths(output_dir),
            shutdown=self.shutdown,
            on_start=on_start,
        )

    def _private_paths(self, output_dir: Path | None) -> tuple[Path, ...]:
        """What a sandboxed job must not see: the runner's repository, home, keys and other jobs'
        logs."""
        paths = [self.repo.path, self.repo.git_dir, self.repo.common_dir, self._home, Path.home()]
        if self.options.signing_key and os.path.exists(self.options.signing_key):
            paths.append(Path(self.options.signing_key))
        if os.environ.get("GNUPGHOME"):
            paths.append(Path(os.environ["GNUPGHOME"]))
        if output_dir is not None:
            paths.append(output_dir)
        return tuple(paths)

    def secrets(self, policy: Policy) -> tuple[str, ...]:
        """Secret values, and each line of a multi-line one (a shell may print them apart)."""
        values = [os.environ[n] for n in policy.secret_env if os.environ.get(n)]
        lines = [
            line.strip()
            for value in values
            if "\n" in value
            for line in value.splitlines()
            if len(line.strip()) >= 4
        ]
        joined = [" ".join(value.split()) for value in values if "\n" in value]
        return tuple(dict.fromkeys([*values, *lines, *joined]))

    def _publish(
        self,
        drafts: list[dict[str, Any]],
        *,
        claims: dict[tuple[str, str, str], tuple[Decision, int]] | None = None,
    ) -> dict[tuple[str, str, str], tuple[str, str]]:
        """Push drafts (publisher.py), with the evidence files they name."""
        self._pub.files.update(self._files)
        self._files = {}
        return self._pub.publish(drafts, claims=claims)

    # -- the spool: a job's result is kept on disk until it is pushed --------------
    def _spool_load(self, tip: str | None) -> tuple[list[dict[str, Any]], list[Entry]]:
        """Finished records a previous pass could not push, and runs that may still be running.

        Entries that landed after all, and provisional ones whose claim never
        landed (the runner stopped before or while pushing it), are dropped.
        """
        waiting: list[Entry] = []
        running: list[Entry] = []
        for entry in self.spool.read():
            gone = entry.gone()
            if gone and entry.folders and entry.runner is not None and entry.runner != self._me:
                remove_stale(
                    entry.folders
                )  # its runner died, and its watchdog with it (else it removed them)
                entry = replace(entry, folders=())
            said = audit.grep(self.repo, tip, str(entry.run_id))
            if any(r.event == "finished" and r.get("run_id") == entry.run_id for r in said):
                continue
            if (
                not any(r.event == "started" and r.get("run_id") == entry.run_id for r in said)
                and not entry.done
            ):
                continue  # never claimed: nothing to close
            (waiting if gone else running).append(entry)
        self.spool.write([*waiting, *running])
        return [e.record for e in waiting], running

    def run_forever(
        self,
        *,
        interval: float,
        on_pass: Callable[[PassResult], None],
        on_error: Callable[[MergegateError, float, int], None],
        on_recover: Callable[[int, float], None] | None = None,
        max_backoff: float = 300.0,
    ) -> None:
        """Poll until SIGINT/SIGTERM; the job in flight gets its grace and is recorded first.

        A git failure (the remote unreachable, a push refused) or a local one (a
        lock held) is retried with exponential backoff and jitter, capped at
        `max_backoff` and reset by a pass that succeeds; `on_error(exc, delay,
        failures)` and `on_recover(failures, seconds)` let the caller say so once
        per change, not once per poll. Integrity and configuration errors stop the loop.
        """
        # Imported here: the loop's alone (`run --once` never waits between polls).
        from mergegate.runner.backoff import Backoff

        backoff = Backoff(base=interval, cap=max(interval, max_backoff))
        quiet: dict[str, str] | None = (
            None  # the remote's refs before the last pass that left nothing to do
        )
        wake: datetime | None = (
            None  # when a retry's backoff ends: a pass is due then, though no ref moved
        )
        with self.shutdown.handling():
            while not self.shutdown.is_set():
                try:
                    # Ask the remote first (ls-remote: no local write); a pass, and its
                    # fetch, only when a ref it reads moved or something is waiting.
                    refs = self._remote_refs()
                    if (
                        refs is not None
                        and refs == quiet
                        and not self.spool.path.exists()
                        and (wake is None or datetime.now(UTC) < wake)
                    ):
                        self._recovered(backoff, on_recover)
                        self.shutdown.wait(_sleep(interval, wake))
                        continue
                    result = self.run_once()
                except (GitError, StateError) as exc:
                    on_error(exc, backoff.failed(), backoff.failures)
                    self.shutdown.wait(backoff.delay)
                    continue
                self._recovered(backoff, on_recover)
                on_pass(result)
                if result.stopped_by:
                    return
                quiet = refs if self._settled(refs) else None
                wake = self.wake  # a retry falling due, another runner's lease running out
                if any(o.status in RETRIED for o in result.outcomes):
                    # This pass's plan predates that result: the next one says when its retry is
                    # due.
                    wake = datetime.now(UTC)
                self.shutdown.wait(_sleep(interval, wake))

    @staticmethod
    def _recovered(backoff: Backoff, on_recover: Callable[[int, float], None] | None) -> None:
        if backoff.failures and on_recover is not None:
            on_recover(backoff.failures, backoff.outage_seconds())
        backoff.reset()

    def _watched(self) -> list[str]:
        return [f"refs/heads/{self.options.branch}", f"refs/heads/{AUDIT_BRANCH}"]

    def _remote_refs(self) -> dict[str, str] | None:
        """What the remote's refs the runner reads point at; None without a remote (or fetching)."""
        if not self.options.fetch or not self.repo.has_remote(self.options.remote):
            return None
        return self.repo.ls_remote(self.options.remote, self._watched())

    def _settled(self, before: dict[str, str] | None) -> bool:
        """Whether the pass left nothing to do: the remote still where it was and the spool empty.

        (Its own pushes move the remote, so the pass after one that wrote records
        runs too, finds nothing and settles.)
        """
        if before is None or self.spool.path.exists():
            return False
        prefix = f"refs/remotes/{self.options.remote}/"
        return all(
            self.repo.rev(prefix + ref.removeprefix("refs/heads/")) == sha
            for ref, sha in before.items()
        )


_FULL_ID = re.compile(r"[0-9a-f]{40}")


def _keep(folder: Path) -> None:
    """Tell the watchdog of a folder it must remove if this runner dies (kill -9, the OOM killer)
    before `_discard`. (A watchdog that cannot start fails the job's start later, in the
    executor.)"""
    with contextlib.suppress(OSError):
        Watchdog.get().keep(folder)


def _discard(folder: Path) -> None:
    """Remove a job's workspace (never through a symlink it planted), and tell the watchdog it is
    gone."""
    remove_tree(folder)
    Watchdog.get().forget(folder)


def _newly_unapproved(work: Plan) -> list[str]:
    """Loud, once (the pass that walks it): a file no approval covers stops every later job."""
    walked = {a.commit for a in work.assessments}
    new = sorted(
        path
        for path, sha in work.unapproved.items()
        if sha in walked and not is_job_path(path) and not path.startswith("policy/")
    )
    if not new:
        return []
    shown = ", ".join(path_display(p) for p in new[:5]) + (
        f" and {len(new) - 5} more" if len(new) > 5 else ""
    )
    return [
        f"not approved: {shown} (changed by {work.unapproved[new[0]][:7]}); no job runs in a tree "
        "that holds them until they are "
        "put back to their last approved version or removed (mergegate check on a proposal shows "
        "the diff from it)"
    ]


def _vetoed(veto: Veto) -> str:
    return f"vetoed by {veto.person} in commit {veto.commit[:7]}"


def _limits(policy: Policy, timeout: int | None) -> executor.Limits:
    lim = policy.limits
    return executor.Limits(
        timeout_seconds=min(timeout or lim.max_timeout_seconds, lim.max_timeout_seconds),
        max_output_bytes=lim.max_output_bytes,
        max_memory_mb=lim.max_memory_mb,
        max_cpu_seconds=lim.max_cpu_seconds,
        max_file_size_mb=lim.max_file_size_mb,
        max_processes=lim.max_processes,
        max_open_files=lim.max_open_files,
        kill_grace_seconds=lim.kill_grace_seconds,
    )


def _limit_fields(limits: executor.Limits) -> dict[str, Any]:
    return {k: v for k, v in vars(limits).items() if v is not None}


def _votes(decision: Decision) -> dict[str, Any]:
    return {
        "approvers": list(decision.approvers),
        "votes": [v.describe() for v in decision.votes],
        "requirement": decision.requirement.describe() if decision.requirement else None,
        "approval": describe_votes(decision.votes) if decision.votes else None,
    }


def _job_id(decision: Decision) -> str | None:
    return decision.job.id if decision.job else None


def _copy_ids(record: audit.Record) -> dict[str, Any]:
    return {k: record.get(k) for k in ("job", "path", "blob", "commit")}
