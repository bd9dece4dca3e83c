"""The launch of one job: its export, its spool entry, its process, its watchdog.

Before the claim (`Launcher.prepare`): a private folder exported from the approving commit (the
other jobs' definitions left out), the job's environment and limits, and everything that can
refuse the job (the program found, the sandbox there), so that a refusal is final and nothing
claimed fails to start for a reason known before. After the claim (`Launcher.start`), on a free
slot's thread (`Slots`): the process runs (execution/executor.py); the spool holds a "runner
stopped" result for it from its start until the real one is pushed, and the watchdog removes its
folders if this runner dies first. Its result (bounded and redacted output) becomes the
`finished` draft, with when the next attempt is due if it ended retriable with retries left.
"""

from __future__ import annotations

import contextlib
import os
import queue
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import timedelta
from pathlib import Path
from typing import Protocol

from mergegate import clock
from mergegate.audit.records import Finished, Rejected, Vetoed
from mergegate.errors import Denied, MergegateError, StateError
from mergegate.execution import executor
from mergegate.execution.processes import ProcessId, Watchdog
from mergegate.execution.shutdown import Shutdown
from mergegate.execution.workspaces import identity, remove_tree
from mergegate.git.repo import Repo
from mergegate.rules.eligibility import iso_up, retriable
from mergegate.rules.job import is_job_path
from mergegate.rules.model import Decision
from mergegate.rules.policy import Policy
from mergegate.rules.renewal import Freshest
from mergegate.runner.drafting import ORPHANED, Drafts
from mergegate.runner.results import Outcome
from mergegate.runner.spool import Spool, SpoolEntry

# What a job's thread hands back: the flight, its `finished` draft, its outcome, its seconds, and
# the error that keeps the pass from going on (its result could not be spooled: a full disk).
Landed = tuple["Flight", Finished, Outcome, float, "MergegateError | None"]


class JobWatch(Protocol):
    """Who is told, as it happens, that a job's process started and that it ended (`run` prints
    it). Called from the job's thread; what it raises is ignored (a closed terminal must not make
    a job that ran `lost`)."""

    def started(self, *, job: str, path: str, commit: str, run_id: str, attempt: int) -> None: ...

    def ended(self, outcome: Outcome, finished: Finished, seconds: float) -> None: ...


class _Unwatched:
    def started(self, *, job: str, path: str, commit: str, run_id: str, attempt: int) -> None:
        return None

    def ended(self, outcome: Outcome, finished: Finished, seconds: float) -> None:
        return None


UNWATCHED: JobWatch = _Unwatched()


def _not_exported(path: str) -> bool:
    # The other jobs' definitions are not a job's business (its own file is written after).
    return is_job_path(path)


@dataclass
class Flight:
    """A job this pass prepared (exported, checked), claims, and runs."""

    decision: Decision
    policy: Policy
    run_id: str
    limits: executor.ProcessLimits
    request: executor.ExecRequest
    tmp: Path
    program: str
    provisional: Finished  # the spool's "runner stopped" result until the real one
    attempt: int = 1  # which attempt of the revision this run is (retries)
    folders: tuple[
        tuple[str, int], ...
    ] = ()  # its workspace and the export folder (spool.SpoolEntry.folders)
    windows: tuple[str, ...] = ()  # the change windows that allowed its start
    looked: str = ""  # the tip of approved up to which vetoes were looked for before its start
    renewal: Freshest | None = None  # the renewal of its approval it starts on (rules/renewal.py)


def flight_key(flight: Flight) -> tuple[str, str, str]:
    return (flight.decision.path, flight.decision.blob, flight.decision.commit)


class Slots:
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


class Launcher:
    """Prepares and starts the jobs of one pass, one at a time each."""

    def __init__(
        self,
        *,
        repo: Repo,
        spool: Spool,
        shutdown: Shutdown,
        drafts: Drafts,
        output_dir: Path | None,
        signing_key: str | None,
        me: ProcessId | None,
        home: Path,
        watch: JobWatch = UNWATCHED,
    ) -> None:
        self.repo = repo
        self.watch = watch  # told of each start and end as it happens
        self.spool = spool
        self.shutdown = shutdown
        self.drafts = drafts
        self.output_dir = output_dir  # --output-dir
        self.signing_key = signing_key  # --signing-key (a sandboxed job must not see it)
        self.me = me  # this runner process, as the spool names it
        self.home = home  # (the passwd entry's: read once, not for every job)

    def prepare(
        self, decision: Decision, policy: Policy, attempt: int
    ) -> Flight | tuple[Outcome, Rejected | Vetoed]:
        """Everything that can refuse the job, checked before it is claimed (a refusal is final)."""
        job = decision.job
        assert job is not None
        run_id = uuid.uuid4().hex
        limits = job_limits(policy, job.timeout_seconds)
        tmp = Path(tempfile.mkdtemp(prefix="mergegate-job-"))
        provisional = self.drafts.closed(decision, run_id=run_id, status="lost", reason=ORPHANED)
        me = self.me
        held: list[tuple[str, int]] = []

        def on_start(pid: int) -> None:
            # Not synced (spool.py): a line written survives the runner's death, and a crash of the
            # machine ends the job too.
            self.spool.put(
                SpoolEntry(provisional, ProcessId.of(pid), me, folders=tuple(held)), sync=False
            )
            with contextlib.suppress(Exception):
                self.watch.started(
                    job=job.id,
                    path=job.path,
                    commit=decision.commit,
                    run_id=run_id,
                    attempt=attempt,
                )

        try:
            # A runner that dies from here on leaves its watchdog to remove them, else the pass that
            # closes the run.
            keep(tmp)
            held.append(identity(tmp))
            request = self._request(decision, policy, limits, run_id, tmp, on_start)
            if (
                exports := self.repo.export_dir
            ) is not None:  # (its watchdog knows it: Repo.on_export_dir)
                held.append(identity(exports))
            program = executor.preflight(request)
        except Denied as exc:
            discard(tmp)
            reason = f"denied before start: {exc.message}"
            return (
                Outcome(job.id, job.path, decision.commit, "rejected", reason),
                self.drafts.refusal("rejected", decision, reason),
            )
        except BaseException:  # the export failed (a full TMPDIR), a signal: nothing will use it
            discard(tmp)
            raise
        return Flight(
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

    def start(
        self,
        flight: Flight,
        done: queue.Queue[Landed],
        me: ProcessId | None,
        slots: Slots,
    ) -> None:
        """Run the claimed job on a free slot's thread; its result goes to `done`."""
        decision, job = flight.decision, flight.decision.job
        assert job is not None
        request = flight.request

        def body() -> None:
            began = time.monotonic()
            try:
                finished, outcome = self._execute(
                    decision, flight.run_id, request, looked=flight.looked
                )
            except (
                Exception
            ) as exc:  # the job's result is unknown: it is closed as lost, never run again
                reason = (
                    f"the runner failed while running the job ({type(exc).__name__}: {exc}); "
                    "it is not run again"
                )
                finished = self.drafts.closed(
                    decision, run_id=flight.run_id, status="lost", reason=reason
                )
                outcome = Outcome(job.id, job.path, decision.commit, "lost", reason, flight.run_id)
            finally:
                discard(flight.tmp)
            outcome = replace(outcome, attempt=flight.attempt)
            allowed = 1 + job.retries
            if retriable(outcome.status, idempotent=job.idempotent) and flight.attempt < allowed:
                due = clock.now() + timedelta(seconds=flight.policy.retries.delay(flight.attempt))
                outcome = replace(
                    outcome,
                    retry_at=iso_up(due),
                    reason=f"{outcome.reason}; attempt {flight.attempt} of {allowed}: attempt "
                    f"{flight.attempt + 1} is due at {iso_up(due)}",
                )
            seconds = time.monotonic() - began
            with contextlib.suppress(Exception):
                self.watch.ended(outcome, finished, seconds)
            failure: MergegateError | None = None
            try:
                self.spool.put(SpoolEntry(finished, None, me, done=True))
            except MergegateError as exc:
                # A full disk: the result is still handed back, so the loop pushes it and ends
                # the pass with this error (a thread that died here left the loop waiting
                # forever, and the next pass closed a run that succeeded as lost).
                failure = exc
            done.put((flight, finished, outcome, seconds, failure))

        def guarded() -> None:
            try:
                body()
            except BaseException as exc:  # never leave the claim loop waiting for this job
                reason = f"the runner failed after the job ({type(exc).__name__}: {exc})"
                error = exc if isinstance(exc, MergegateError) else StateError(reason)
                lost = self.drafts.closed(
                    decision,
                    run_id=flight.run_id,
                    status="lost",
                    reason=f"{reason}; it is not run again",
                )
                outcome = Outcome(job.id, job.path, decision.commit, "lost", reason, flight.run_id)
                done.put((flight, lost, outcome, 0.0, error))

        slots.run(guarded)

    def _execute(
        self, decision: Decision, run_id: str, request: executor.ExecRequest, *, looked: str = ""
    ) -> tuple[Finished, Outcome]:
        """Run, and keep what it said (bounded and redacted) for the finished record, with how far
        the runner had looked for vetoes before the start (`looked`: verify holds it to that)."""
        job = decision.job
        assert job is not None
        try:
            result = executor.run(request)
        except Denied as exc:
            reason = f"denied before start: {exc.message}"
            finished = self.drafts.closed(decision, run_id=run_id, status="failed", reason=reason)
            return finished, Outcome(job.id, job.path, decision.commit, "failed", reason, run_id)
        finished = self.drafts.result(decision, run_id, result)
        if looked:
            finished = replace(
                finished, vetoes_checked=looked, absent=finished.absent - {"vetoes_checked"}
            )
        return finished, Outcome(
            job.id, job.path, decision.commit, result.status, result.reason, run_id
        )

    def _request(
        self,
        decision: Decision,
        policy: Policy,
        limits: executor.ProcessLimits,
        run_id: str,
        tmp: Path,
        on_start: Callable[[int], None] | None = None,
    ) -> executor.ExecRequest:
        """A clean export of the approving commit and the job's environment, ready to run."""
        job = decision.job
        assert job is not None
        # The private folder mkdtemp made is the workspace itself: on a file system where each new
        # inode costs a search past the recently freed ones (ext4 without a journal, as on the
        # machine of issue 12), a folder less per job is a sixth of what making a trivial job's
        # workspace costs.
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
        output_dir = self.output_dir
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
        paths = [self.repo.path, self.repo.git_dir, self.repo.common_dir, self.home, Path.home()]
        if self.signing_key and os.path.exists(self.signing_key):
            paths.append(Path(self.signing_key))
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


def keep(folder: Path) -> None:
    """Tell the watchdog of a folder it must remove if this runner dies (kill -9, the OOM killer)
    before `discard`. (A watchdog that cannot start fails the job's start later, in the
    executor.)"""
    with contextlib.suppress(OSError):
        Watchdog.get().keep(folder)


def discard(folder: Path) -> None:
    """Remove a job's workspace (never through a symlink it planted), and tell the watchdog it is
    gone."""
    remove_tree(folder)
    Watchdog.get().forget(folder)


def job_limits(policy: Policy, timeout: int | None) -> executor.ProcessLimits:
    lim = policy.limits
    return executor.ProcessLimits(
        timeout_seconds=min(timeout or lim.max_timeout_seconds, lim.max_timeout_seconds),
        max_output_bytes=lim.max_output_bytes,
        max_memory_mb=lim.max_memory_mb,
        max_cpu_seconds=lim.max_cpu_seconds,
        max_file_size_mb=lim.max_file_size_mb,
        max_processes=lim.max_processes,
        max_open_files=lim.max_open_files,
        kill_grace_seconds=lim.kill_grace_seconds,
    )


def limit_fields(limits: executor.ProcessLimits) -> dict[str, int | float]:
    return {k: v for k, v in vars(limits).items() if v is not None}
