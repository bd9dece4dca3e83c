"""Orchestration: discover -> decide -> claim -> execute -> record -> push.

One pass reads `approved`, walks the first-parent commits that are new since
the last `scanned` record, judges each with the policy in force before it,
and for every runnable job pushes a `started` record *before* the process
starts (at most once), runs it, and pushes its `finished` record. Records are
committed with plumbing on top of the branch tip and pushed without force; a
rejected push is rebased onto the new tip and retried.
"""

from __future__ import annotations

import contextlib
import os
import pwd
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mergegate import audit, executor
from mergegate.approvals import VETO_TRAILER, Assessor, Decision, Veto, describe_votes
from mergegate.backoff import Backoff
from mergegate.branch import Branch, open_branch, trust_root
from mergegate.errors import (
    Denied,
    GitError,
    IntegrityError,
    MergegateError,
    StateError,
    UsageError,
)
from mergegate.git import Repo, Signing
from mergegate.job import is_job_path
from mergegate.lock import DEFAULT_WAIT, pass_lock
from mergegate.planning import Plan, plan
from mergegate.policy import Policy
from mergegate.processes import ProcessId
from mergegate.shutdown import DEFAULT_GRACE, Shutdown
from mergegate.signatures import PublicKey
from mergegate.spool import Entry, Spool

MAX_PUSH_ATTEMPTS = 10
ORPHANED = "the runner stopped while this job ran; it is not run again (at most once)"


def _not_exported(path: str) -> bool:
    # The audit and the other jobs' definitions are not a job's business (its own file is written after).
    return path.startswith(audit.AUDIT_DIR) or is_job_path(path)


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


@dataclass(frozen=True)
class Outcome:
    job: str | None
    path: str
    commit: str
    status: str  # succeeded, failed, timed_out, interrupted, rejected, vetoed
    reason: str | None
    run_id: str | None = None

    def as_json(self) -> dict[str, Any]:
        return {"job": self.job, "path": self.path, "commit": self.commit, "status": self.status, "reason": self.reason, "run_id": self.run_id}


@dataclass(frozen=True)
class PassResult:
    tip: str
    outcomes: tuple[Outcome, ...]
    warnings: tuple[str, ...] = ()
    policy_changes: tuple[tuple[str, str, str], ...] = ()  # (commit, adopted|rejected, why)
    stopped_by: str | None = None  # the signal that stopped the pass, if one did

    @property
    def exit_code(self) -> int:
        return 0 if all(o.status == "succeeded" for o in self.outcomes) else 1


class Runner:
    def __init__(self, options: Options, *, shutdown: Shutdown | None = None) -> None:
        self.options = options
        self.repo = Repo(options.repo)
        self.shutdown = shutdown or Shutdown(options.shutdown_grace)
        self.signing = Signing(options.signing_key) if options.signing_key else None
        self._runner_keys: tuple[PublicKey, ...] = ()
        self.spool = Spool.for_runner(self.repo.git_dir, options.runner_name)

    def run_once(self) -> PassResult:
        """One pass, holding the clone's pass lock, with SIGINT/SIGTERM stopping it gracefully."""
        with self.shutdown.handling(), pass_lock(self.repo.common_dir, runner_name=self.options.runner_name,
                                                 wait=self.options.lock_wait):
            return self._pass()

    def _pass(self) -> PassResult:
        self.spool.warnings.clear()
        branch = open_branch(self.repo, remote=self.options.remote, branch=self.options.branch, fetch=self.options.fetch)
        tip = branch.tip()
        seen = branch.check_not_rewritten(tip)
        # Before anything runs: a rewrite later must be seen against this tip, so a
        # seen ref that cannot be written stops the pass here (StateError, naming it).
        branch.remember(tip, seen)
        seen = tip
        root, warnings = trust_root(self.repo, tip, self.options.trust_root)
        tail = _read_tail(self.repo, tip)
        work = plan(self.repo, tip, root, tail, at=datetime.now(UTC), runner_name=self.options.runner_name)
        self._runner_keys = work.policy.runner_keys()
        if work.policy.runners and self.signing is None:
            raise UsageError(
                f"{work.policy.where} lists runners, so audit commits must be signed",
                hint="pass --signing-key with the runner's ssh key path or OpenPGP key id",
            )
        outcomes: list[Outcome] = []
        # Results a previous pass could not push come first; their jobs are not orphans,
        # and a job whose process may still run is not closed yet.
        spooled, running = self._spool_load(tip)
        recovered = {d.get("run_id") for d in spooled} | {e.run_id for e in running}
        work.orphans = [o for o in work.orphans if o.get("run_id") not in recovered]
        for entry in running:
            where = f" as pid {entry.job.pid}" if entry.job else ""
            warnings.append(f"{entry.record.get('path')} (run {entry.run_id}) may still be running{where}, from a runner "
                            f"that stopped; it is closed once its process is gone ({self.spool.path})")
        outcomes += [Outcome(d.get("job"), str(d.get("path")), str(d.get("commit")), str(d.get("status")), d.get("reason"), d.get("run_id")) for d in spooled]
        pending = [*spooled, *self._bookkeeping(work, outcomes)]
        runnable = []
        for decision, policy in work.items:
            key = (decision.path, decision.blob, decision.commit)
            if key in work.handled:
                continue
            refusal = self._refusal(decision, work)
            if refusal is not None:
                event, reason = refusal
                pending.append(self._draft(event, decision, reason=reason, **_votes(decision)))
                outcomes.append(Outcome(_job_id(decision), decision.path, decision.commit, event, reason))
            else:
                runnable.append((decision, policy))
        for decision, policy in runnable:
            if self.shutdown.is_set():
                break  # the next pass starts from the last scanned commit and finds these again
            outcome, pending = self._run_job(branch, decision, policy, pending)
            outcomes.append(outcome)
        else:
            if work.new_commits:
                pending.append(audit.draft("scanned", runner=self.options.runner_name, commit=work.tip, start=work.start,
                                           policy_commit=work.policy.commit, commits=len(work.assessments), unapproved=work.unapproved))
        if pending:
            self._publish(branch, pending)
        # Remember what was seen, so that a later rewrite of it (which may also
        # erase the audit that would have told) stops this runner.
        branch.remember(branch.tip(), seen)
        changes = tuple((a.commit, "adopted" if a.policy_adopted else "rejected", a.summary) for a in work.assessments if a.policy_changed)
        stopped = (self.shutdown.signal_name or "a stop request") if self.shutdown.is_set() else None
        return PassResult(tip, tuple(outcomes), tuple([*warnings, *self.spool.warnings]), changes, stopped)

    def _bookkeeping(self, work: Plan, outcomes: list[Outcome]) -> list[dict[str, Any]]:
        pending = []
        for record in work.orphans:
            reason = ORPHANED
            pending.append({**audit.draft("finished", runner=self.options.runner_name, status="failed", exit_code=None, reason=reason, run_id=record.get("run_id")), **_copy_ids(record)})
            outcomes.append(Outcome(record.get("job"), str(record.get("path")), str(record.get("commit")), "failed", reason, record.get("run_id")))
        recorded = {r.get("commit") for r in work.handled_policy}
        for assessment in work.assessments:
            if assessment.policy_changed and assessment.commit not in recorded:
                status = "adopted" if assessment.policy_adopted else "rejected"
                pending.append(audit.draft("policy", runner=self.options.runner_name, commit=assessment.commit, status=status, reason=assessment.summary, policy_commit=assessment.policy.commit))
        return pending

    def _refusal(self, decision: Decision, work: Plan) -> tuple[str, str] | None:
        if not decision.runnable:
            return "rejected", decision.reason
        veto = self._vetoes(work).get((decision.path, decision.blob))
        if veto is not None:
            return "vetoed", f"vetoed by {veto.person} in commit {veto.commit[:7]}"
        ran = audit.started_before(self.repo, work.tip, decision.path, decision.blob)
        if ran is not None:
            return "rejected", (f"this exact revision of {decision.path} already started (seq {ran.get('seq')}, approved at "
                                f"{str(ran.get('commit'))[:7]}); a job revision runs at most once: change the file to run it again")
        return None

    def _vetoes(self, work: Plan) -> dict[tuple[str, str], Veto]:
        """Every valid veto on approved, also those a previous pass walked past."""
        if work.all_vetoes is None:
            found = {(v.path, v.blob): v for v in work.vetoes}
            assessor = Assessor(self.repo, at=datetime.now(UTC))
            # As loose as the trailer parser (any case, any spacing), so that no veto
            # the walk would honour is missed here; the parser then decides.
            grep = f"--grep=^{VETO_TRAILER}:"
            for sha in self.repo.out("log", "--first-parent", "--regexp-ignore-case", grep, "--format=%H", work.tip).split():
                commit = self.repo.commit(sha)
                if commit.is_merge or self.repo.diff(commit.parents[0] if commit.parents else None, sha):
                    continue  # a veto is an empty, signed commit, as the walk judges it
                for veto in assessor.veto(commit, work.policy).vetoes:
                    found.setdefault((veto.path, veto.blob), veto)
            work.all_vetoes = found
        return work.all_vetoes

    def _draft(self, event: str, decision: Decision, **extra: Any) -> dict[str, Any]:
        return audit.draft(event, runner=self.options.runner_name, job=_job_id(decision), path=decision.path, blob=decision.blob, commit=decision.commit, **extra)

    def _run_job(self, branch: Branch, decision: Decision, policy: Policy, pending: list[dict[str, Any]]) -> tuple[Outcome, list[dict[str, Any]]]:
        job = decision.job
        assert job is not None
        run_id = uuid.uuid4().hex
        limits = _limits(policy, job.timeout_seconds)
        tmp = tempfile.mkdtemp(prefix="mergegate-job-")
        try:
            # 1. Everything that can refuse the job is checked before it is claimed.
            try:
                request = self._request(decision, policy, limits, run_id, Path(tmp))
                program = executor.preflight(request)
            except Denied as exc:
                reason = f"denied before start: {exc.message}"
                return Outcome(job.id, job.path, decision.commit, "rejected", reason), [*pending, self._draft("rejected", decision, reason=reason, **_votes(decision))]
            started = self._draft(
                "started", decision, run_id=run_id, command=list(job.command), cwd=job.cwd, sandbox=policy.sandbox,
                rule=decision.rule.describe() if decision.rule else None, policy_commit=policy.commit,
                self_approved=decision.self_approved, limits=_limit_fields(limits), resolved_program=program,
                **_votes(decision),
            )
            # 2. At most once: the claim is pushed before the process exists. Until the
            #    real result replaces it, the spool holds a "runner stopped" result, so
            #    a runner that dies mid-job closes it on its next pass, whoever ran since.
            #    It is written before the claim: a claim it could not account for is never made.
            provisional = self._draft("finished", decision, run_id=run_id, status="failed", exit_code=None, reason=ORPHANED)
            me = ProcessId.of(os.getpid())
            self.spool.put(Entry(provisional, None, me))
            if not self._publish(branch, [*pending, started], claim=(decision.path, decision.blob, decision.commit)):
                self.spool.drop({run_id})
                return Outcome(job.id, job.path, decision.commit, "rejected", "another runner claimed this job first", run_id), []
            if self.shutdown.is_set():  # stopped while claiming: the job is not started now, nor ever
                reason = f"{self.shutdown.describe().split(';')[0]} before the job started; it was not started"
                finished = self._draft("finished", decision, run_id=run_id, status="interrupted", exit_code=None, reason=reason)
                self.spool.put(Entry(finished, None, me, done=True))
                return Outcome(job.id, job.path, decision.commit, "interrupted", reason, run_id), [finished]

            def on_start(pid: int) -> None:
                self.spool.put(Entry(provisional, ProcessId.of(pid), me))

            request = replace(request, shutdown=self.shutdown, on_start=on_start)
            # 3. Run, and keep what it said (bounded and redacted) for the finished record.
            try:
                result = executor.run(request)
            except Denied as exc:
                reason = f"denied before start: {exc.message}"
                finished = self._draft("finished", decision, run_id=run_id, status="failed", exit_code=None, reason=reason)
                self.spool.put(Entry(finished, None, me, done=True))
                return Outcome(job.id, job.path, decision.commit, "failed", reason, run_id), [finished]
        finally:
            _remove_tree(Path(tmp))
        fields: dict[str, Any] = {
            "run_id": run_id, "status": result.status, "exit_code": result.exit_code, "signal": result.signal,
            "duration_ms": result.duration_ms, "reason": result.reason, "resolved_program": result.resolved_program,
            "sandbox": result.sandbox, "limits_applied": dict(result.limits_applied),
        }
        for name, stream in (("stdout", result.stdout), ("stderr", result.stderr)):
            fields.update({f"{name}_tail": stream.tail, f"{name}_bytes": stream.bytes, f"{name}_sha256": stream.sha256})
            if stream.file is not None:
                fields.update({f"{name}_file": stream.file, f"{name}_file_sha256": stream.file_sha256})
        finished = self._draft("finished", decision, **fields)
        self.spool.put(Entry(finished, None, ProcessId.of(os.getpid()), done=True))
        return Outcome(job.id, job.path, decision.commit, result.status, result.reason, run_id), [finished]

    def _request(self, decision: Decision, policy: Policy, limits: executor.Limits, run_id: str, tmp: Path) -> executor.ExecRequest:
        """A clean export of the approving commit and the job's environment, ready to run."""
        job = decision.job
        assert job is not None
        workspace = tmp / "workspace"
        workspace.mkdir()
        # The audit and the other jobs' definitions are not the job's business, and
        # leaving them out keeps the export proportional to the code, not to history.
        self.repo.export(decision.commit, workspace, skip=_not_exported)
        (workspace / job.path).parent.mkdir(parents=True, exist_ok=True)
        (workspace / job.path).write_bytes(self.repo.blob(job.blob))
        env = executor.build_environment(
            runner_env=os.environ, allowlist=policy.env_allowlist, job_env=job.env_map,
            extra={"MERGEGATE_JOB_ID": job.id, "MERGEGATE_COMMIT": decision.commit, "MERGEGATE_RUN_ID": run_id},
        )
        output_dir = self.options.output_dir
        if output_dir is None and policy.keep_output:
            output_dir = self.repo.git_dir / "mergegate" / "output"
        return executor.ExecRequest(
            argv=job.command, workspace=workspace, cwd=job.cwd, env=env, secrets=self.secrets(policy), limits=limits,
            search_path=policy.path or os.environ.get("PATH", os.defpath), run_id=run_id,
            sandbox="bwrap" if policy.sandbox == "bwrap" else "none",
            network=bool(decision.rule and decision.rule.network), output_dir=output_dir,
            hide_paths=self._private_paths(output_dir),
        )

    def _private_paths(self, output_dir: Path | None) -> tuple[Path, ...]:
        """What a sandboxed job must not see: the runner's repository, home, keys and other jobs' logs."""
        paths = [self.repo.path, self.repo.git_dir, self.repo.common_dir, Path(pwd.getpwuid(os.geteuid()).pw_dir), Path.home()]
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
        lines = [line.strip() for value in values if "\n" in value for line in value.splitlines() if len(line.strip()) >= 4]
        joined = [" ".join(value.split()) for value in values if "\n" in value]
        return tuple(dict.fromkeys([*values, *lines, *joined]))

    def _publish(self, branch: Branch, drafts: list[dict[str, Any]], *, claim: tuple[str, str, str] | None = None) -> bool:
        """Commit drafts on the branch tip and push; rebase and retry when the tip moved."""
        for _ in range(MAX_PUSH_ATTEMPTS):
            tip = branch.tip()
            tail = audit.read_tail(self.repo, tip)
            if claim is not None and (
                any((r.get("path"), r.get("blob"), r.get("commit")) == claim and r.event in ("started", "rejected", "vetoed") for r in tail.since_scanned)
                or audit.started_before(self.repo, tip, claim[0], claim[1]) is not None
            ):
                drafts = [d for d in drafts if d["event"] != "started"]
                if drafts:
                    self._publish(branch, drafts)
                return False
            records = audit.seal(drafts, after_seq=tail.last_seq, after_hash=tail.last_hash)
            files = audit.append(self.repo, tip, tail, records)
            message = _message(records)
            sha = self.repo.write_commit(parent=tip, files=files, message=message, author=(self.options.runner_name, "runner@mergegate.invalid"), signing=self.signing)
            self._check_own_signature(sha)
            try:
                published = branch.publish(sha, tip)
            except GitError as exc:
                if any(d["event"] == "finished" for d in drafts):
                    exc.hint = f"the job's result is kept in {self.spool.path} and pushed by the next run"
                raise
            if published:
                self.spool.drop({d.get("run_id") for d in drafts if d["event"] == "finished"})
                return True
            branch.refresh()
        raise GitError(f"could not push audit records to {branch.ref} after {MAX_PUSH_ATTEMPTS} attempts", hint="another process keeps moving the branch; run again")

    def _check_own_signature(self, sha: str) -> None:
        """A commit the next pass would call tampering is never pushed: it would stop the gate for good."""
        if not self._runner_keys:
            return
        check = Assessor(self.repo, at=datetime.now(UTC)).signature(self.repo.commit(sha), self._runner_keys)
        if not check.ok:
            raise UsageError(f"--signing-key does not make a signature the policy accepts from a runner: {check.reason}",
                             hint="use the private key (or OpenPGP key id) of a key listed under runners in the policy")

    # -- the spool: a job's result is kept on disk until it is pushed --------------
    def _spool_load(self, tip: str) -> tuple[list[dict[str, Any]], list[Entry]]:
        """Finished records a previous pass could not push, and runs that may still be running.

        Entries that landed after all, and provisional ones whose claim never
        landed (the runner stopped before or while pushing it), are dropped.
        """
        waiting: list[Entry] = []
        running: list[Entry] = []
        for entry in self.spool.read():
            said = audit.grep(self.repo, tip, str(entry.run_id))
            if any(r.event == "finished" and r.get("run_id") == entry.run_id for r in said):
                continue
            if not any(r.event == "started" and r.get("run_id") == entry.run_id for r in said) and not entry.done:
                continue  # never claimed: nothing to close
            (waiting if entry.gone() else running).append(entry)
        self.spool.write([*waiting, *running])
        return [e.record for e in waiting], running

    def run_forever(self, *, interval: float, on_pass: Callable[[PassResult], None],
                    on_error: Callable[[MergegateError, float, int], None],
                    on_recover: Callable[[int, float], None] | None = None, max_backoff: float = 300.0) -> None:
        """Poll until SIGINT/SIGTERM; the job in flight gets its grace and is recorded first.

        A git failure (the remote unreachable, a push refused) or a local one (a
        lock held) is retried with exponential backoff and jitter, capped at
        `max_backoff` and reset by a pass that succeeds; `on_error(exc, delay,
        failures)` and `on_recover(failures, seconds)` let the caller say so once
        per change, not once per poll. Integrity and configuration errors stop the loop.
        """
        backoff = Backoff(base=interval, cap=max(interval, max_backoff))
        with self.shutdown.handling():
            while not self.shutdown.is_set():
                try:
                    result = self.run_once()
                except (GitError, StateError) as exc:
                    on_error(exc, backoff.failed(), backoff.failures)
                    self.shutdown.wait(backoff.delay)
                    continue
                if backoff.failures and on_recover is not None:
                    on_recover(backoff.failures, backoff.outage_seconds())
                backoff.reset()
                on_pass(result)
                if result.stopped_by:
                    return
                self.shutdown.wait(interval)


def _remove_tree(path: Path) -> None:
    """Remove a job's workspace, however deep it made it (shutil.rmtree recurses and
    raises RecursionError on a few thousand levels, which would lose the job's result)."""
    try:
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=False, capture_output=True)
    except OSError:  # no rm on PATH
        with contextlib.suppress(RecursionError):
            shutil.rmtree(path, ignore_errors=True)


def _read_tail(repo: Repo, tip: str) -> audit.Tail:
    try:
        return audit.read_tail(repo, tip)
    except IntegrityError as exc:
        last = repo.out("log", "-1", "--first-parent", "--format=%h %an: %s", tip, "--", audit.AUDIT_DIR)
        raise IntegrityError(f"{exc.message}; tampering? audit/ was last changed by {last}", file=exc.file, line=exc.line) from None


def _limits(policy: Policy, timeout: int | None) -> executor.Limits:
    lim = policy.limits
    return executor.Limits(
        timeout_seconds=min(timeout or lim.max_timeout_seconds, lim.max_timeout_seconds), max_output_bytes=lim.max_output_bytes,
        max_memory_mb=lim.max_memory_mb, max_cpu_seconds=lim.max_cpu_seconds, max_file_size_mb=lim.max_file_size_mb,
        max_processes=lim.max_processes, max_open_files=lim.max_open_files, kill_grace_seconds=lim.kill_grace_seconds,
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


def _message(records: list[audit.Record]) -> str:
    summary: dict[str, int] = {}
    for record in records:
        summary[record.event] = summary.get(record.event, 0) + 1
    parts = ", ".join(f"{n} {event}" for event, n in summary.items())
    return f"mergegate: audit seq {records[0].seq}-{records[-1].seq} ({parts})\n"
