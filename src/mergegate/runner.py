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
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mergegate import audit, audit_branch, executor, github, leases
from mergegate.approvals import VETO_TRAILER, Assessor, Decision, Veto, describe_votes
from mergegate.backoff import Backoff
from mergegate.branch import AUDIT_BRANCH, Branch
from mergegate.eligibility import Runnable
from mergegate.errors import (
    Denied,
    GitError,
    IntegrityError,
    MergegateError,
    StateError,
    UsageError,
)
from mergegate.git import Repo, Signing, path_display
from mergegate.job import is_job_path
from mergegate.lock import DEFAULT_WAIT, pass_lock
from mergegate.planning import (
    Gate,
    Plan,
    check_new_records,
    open_after,
    plan,
    policy_lookup,
    read_gate,
    read_tail,
)
from mergegate.policy import Policy
from mergegate.processes import ProcessId
from mergegate.shutdown import DEFAULT_GRACE, Shutdown
from mergegate.spool import Entry, Spool

MAX_PUSH_ATTEMPTS = 10
ORPHANED = "the runner stopped while this job ran; it is not run again (at most once)"
# A lease covers the job's timeout, its kill grace and the runner's shutdown grace,
# plus this much for pushing the result.
LEASE_SLACK_SECONDS = 5.0
# A claim is pushed only after a look at both branches at most this old: a veto
# merged while earlier jobs of the pass ran must still stop the next one.
FRESH_SECONDS = 1.0


def _not_exported(path: str) -> bool:
    # The other jobs' definitions are not a job's business (its own file is written after).
    return is_job_path(path)


@dataclass
class _State:
    """What one pass knows while it publishes: the approved tip it judged and what it checked."""

    work: Plan
    judged: str  # the tip of approved the pass judged (each audit commit's Mergegate-Approved)
    checked: str | None  # the audit branch tip up to which every commit was checked
    checker: audit_branch.Checker
    veto_tip: str  # vetoes on approved were searched up to here
    fetched: float  # time.monotonic() of the last look at both branches
    files: dict[str, bytes]  # evidence files the next audit commit adds


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
    labels: tuple[str, ...] | None = ()  # claim only jobs whose runs_on are all among these (None: any job, for `plan`)
    job: str | None = None  # `run --job PATH`: claim and run only this job's runnable revision, record nothing else


@dataclass(frozen=True)
class Outcome:
    job: str | None
    path: str
    commit: str
    status: str  # succeeded, failed, timed_out, interrupted, lost, rejected, vetoed, claimed (by another runner)
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
    waiting: tuple[str, str] | None = None  # (commit, why): the walk stopped there for missing evidence

    @property
    def exit_code(self) -> int:
        # A job another runner claimed first is that runner's outcome, not this one's.
        # Waiting for evidence is "not yet": never the exit code of a pass that ran everything.
        return 0 if all(o.status in ("succeeded", "claimed") for o in self.outcomes) and self.waiting is None else 1


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
        return {"job": self.job, "path": self.path, "commit": self.commit, "status": self.status, "reason": self.reason,
                "command": list(self.command), "blob": self.blob, "attempt": self.attempt, "runs_on": list(self.runs_on)}


@dataclass(frozen=True)
class Preview:
    tip: str
    jobs: tuple[Planned, ...]
    records: tuple[dict[str, Any], ...]  # drafts, as the pass would record them (the results are unknown yet)
    warnings: tuple[str, ...]
    policy_changes: tuple[tuple[str, str, str], ...]


class Runner:
    def __init__(self, options: Options, *, shutdown: Shutdown | None = None) -> None:
        self.options = options
        self.repo = Repo(options.repo)
        self.shutdown = shutdown or Shutdown(options.shutdown_grace)
        self.signing = Signing(options.signing_key) if options.signing_key else None
        self.spool = Spool.for_runner(self.repo.git_dir, options.runner_name)
        self.plan: Plan | None = None  # the last pass's plan (`run --job` says from it why a job did not run)

    def run_once(self) -> PassResult:
        """One pass, holding the clone's pass lock, with SIGINT/SIGTERM stopping it gracefully."""
        with self.shutdown.handling(), pass_lock(self.repo.common_dir, runner_name=self.options.runner_name,
                                                 wait=self.options.lock_wait):
            return self._pass()

    def _pass(self) -> PassResult:
        self.spool.warnings.clear()
        self.repo.warnings.clear()
        now = datetime.now(UTC)
        gate = read_gate(self.repo, remote=self.options.remote, branch=self.options.branch, fetch=self.options.fetch,
                         trust=self.options.trust_root)
        branch, tip, warnings = gate.branch, gate.tip, list(gate.warnings)
        self._reviews = self._review_source(gate, now)
        work = plan(self.repo, tip, gate.root, gate.tail, records=gate.records, at=now, runner_name=self.options.runner_name,
                    reviews=self._reviews, labels=self._labels())
        self.plan = work
        # Records other runners (or anyone who can push) appended since the last complete pass.
        check_new_records(self.repo, gate, work, at=now)
        # Before anything runs: a rewrite later must be seen against these tips, so a
        # seen ref that cannot be written stops the pass here (StateError, naming it).
        # (The audit tip only now: it is where the next pass starts checking.)
        seen = branch.remember(tip, gate.records, gate.seen)
        if work.policy.runners and self.signing is None:
            raise UsageError(
                f"{work.policy.where} lists runners, so audit commits must be signed",
                hint="pass --signing-key with the runner's ssh key path or OpenPGP key id",
            )
        assessor = Assessor(self.repo, at=now, reviews=self._reviews)
        known = {work.start: work.start_policy, **{a.commit: a.policy for a in work.assessments}}
        checker = audit_branch.Checker(self.repo, assessor, tip, policy_lookup(self.repo, assessor, root=gate.root, records=gate.records, known=known))
        self._state = _State(work, tip, gate.records, checker, tip, time.monotonic(), {})
        outcomes: list[Outcome] = []
        # Results a previous pass could not push come first; their jobs are not orphans,
        # and a job whose process may still run is not closed yet.
        spooled, running = self._spool_load(gate.records)
        recovered = {d.get("run_id") for d in spooled} | {e.run_id for e in running}
        work.orphans = [o for o in work.orphans if o.get("run_id") not in recovered]
        closing = recovered | {o.get("run_id") for o in work.orphans}
        work.expired = [r for r in leases.expired(self.repo, gate.records, now) if r.get("run_id") not in closing]
        for entry in running:
            where = f" as pid {entry.job.pid}" if entry.job else ""
            warnings.append(f"{entry.record.get('path')} (run {entry.run_id}) may still be running{where}, from a runner "
                            f"that stopped; it is closed once its process is gone ({self.spool.path})")
        outcomes += [Outcome(d.get("job"), str(d.get("path")), str(d.get("commit")), str(d.get("status")), d.get("reason"), d.get("run_id")) for d in spooled]
        warnings += _newly_unapproved(work)
        only = self.options.job
        # `run --job PATH` claims and runs that one revision and records nothing else (the sweep pass does).
        pending = [*spooled, *self._bookkeeping(work, outcomes)] if only is None else [*spooled]
        runnable: list[Runnable] = []
        done: dict[tuple[str, str, str], str] = {}  # what this pass did with each runnable item (for `open`)
        for refused in work.refused if only is None else ():
            decision = refused.decision
            pending.append(self._draft("rejected", decision, reason=refused.reason, **_votes(decision)))
            outcomes.append(Outcome(_job_id(decision), decision.path, decision.commit, "rejected", refused.reason))
        for item in work.runnable:
            decision = item.decision
            if only is not None and decision.path != only:
                continue
            refusal = self._refusal(decision, work, gate.records)
            if refusal is not None:
                event, reason = refusal
                pending.append(self._draft(event, decision, reason=reason, **_votes(decision)))
                outcomes.append(Outcome(_job_id(decision), decision.path, decision.commit, event, reason))
                done[(item.path, item.blob, item.commit)] = event
            else:
                runnable.append(item)
        for item in runnable:
            if self.shutdown.is_set():
                break  # the next pass starts from the last scanned commit and finds these again
            outcome, pending = self._run_job(branch, item.decision, item.policy, pending, attempt=item.attempt)
            outcomes.append(outcome)
            done[(item.path, item.blob, item.commit)] = outcome.status
        else:
            still, files = open_after(work, done)
            if only is None and (work.new_commits or still != list(work.open_before)):
                # The unapproved map can hold thousands of paths: it goes into an
                # evidence file (written once per distinct map), the record names it.
                # `open` lists commits whose jobs may still need a runner: the next pass judges them again.
                fields, held = audit.unapproved_fields(work.unapproved)
                if held is not None:
                    self._state.files[held.path] = held.data
                self._state.files.update(files)
                pending.append(audit.draft("scanned", runner=self.options.runner_name, commit=work.tip, start=work.start,
                                           policy_commit=work.policy.commit, commits=len(work.assessments), open=still, **fields,
                                           **self._walked_evidence(work, pending)))
        if pending:
            self._publish(branch, pending)
        # Remember what was seen (all of it checked), so that a later rewrite of
        # either branch (which may also erase the records that would have told) stops this runner.
        branch.remember(branch.tip(), self._state.checked, seen)
        changes = tuple((a.commit, "adopted" if a.policy_adopted else "rejected", a.summary) for a in work.assessments if a.policy_changed)
        stopped = (self.shutdown.signal_name or "a stop request") if self.shutdown.is_set() else None
        return PassResult(tip, tuple(outcomes), tuple([*warnings, *self.spool.warnings, *self.repo.warnings]), changes, stopped,
                          work.waiting)

    def _labels(self) -> frozenset[str] | None:
        return None if self.options.labels is None else frozenset(self.options.labels)

    def _review_source(self, gate: Gate, now: datetime) -> github.ReviewSource:
        """GitHub review evidence: what the records were decided on first, else asked of the API."""
        return github.ReviewSource(self.repo, now=now, settings=github.Settings.from_env(),
                                   stored=github.stored_evidence(self.repo, gate.records),
                                   remote=self.options.remote if gate.branch.remote is not None else None)

    def preview(self) -> Preview:
        """What a pass would claim, run and record (`run --dry-run`): nothing written, pushed or remembered.

        The same reading, planning, bookkeeping and refusals as `_pass`; it stops where
        `_pass` would start claiming. No lock, spool, seen ref or judged-times file is touched.
        """
        now = datetime.now(UTC)
        gate = read_gate(self.repo, remote=self.options.remote, branch=self.options.branch, fetch=self.options.fetch,
                         trust=self.options.trust_root)
        # The same evidence a pass would judge with (the refusals below read it too).
        self._reviews = self._review_source(gate, now)
        work = plan(self.repo, gate.tip, gate.root, gate.tail, records=gate.records, at=now,
                    runner_name=self.options.runner_name, remember=False, reviews=self._reviews,
                    labels=self._labels())
        check_new_records(self.repo, gate, work, at=now)
        warnings = list(gate.warnings)
        if work.policy.runners and self.signing is None:
            warnings.append(f"{work.policy.where} lists runners: a real pass needs --signing-key")
        outcomes: list[Outcome] = []
        pending = self._bookkeeping(work, outcomes)
        jobs = [Planned(o.job, o.path, o.commit, "would close", o.reason, ()) for o in outcomes]
        for refused in work.refused:
            decision = refused.decision
            command = decision.job.command if decision.job is not None else ()
            pending.append(self._draft("rejected", decision, reason=refused.reason, **_votes(decision)))
            jobs.append(Planned(_job_id(decision), decision.path, decision.commit, "would reject", refused.reason, command))
        for item in work.runnable:
            decision = item.decision
            refusal = self._refusal(decision, work, gate.records)
            command = decision.job.command if decision.job is not None else ()
            if refusal is not None:
                event, reason = refusal
                pending.append(self._draft(event, decision, reason=reason, **_votes(decision)))
                jobs.append(Planned(_job_id(decision), decision.path, decision.commit, {"rejected": "would reject", "vetoed": "would veto"}.get(event, f"would record {event}"), reason, command))
            else:
                pending.append(self._draft("started", decision, command=list(command), attempt=item.attempt, **_votes(decision)))
                pending.append(self._draft("finished", decision))
                jobs.append(Planned(_job_id(decision), decision.path, decision.commit, "would run", None, command,
                                    decision.blob, item.attempt, item.runs_on))
        if work.new_commits:
            pending.append(audit.draft("scanned", runner=self.options.runner_name, commit=work.tip, start=work.start,
                                       policy_commit=work.policy.commit, commits=len(work.assessments)))
        changes = tuple((a.commit, "adopted" if a.policy_adopted else "rejected", a.summary) for a in work.assessments if a.policy_changed)
        return Preview(gate.tip, tuple(jobs), tuple(pending), tuple(warnings), changes)

    def _bookkeeping(self, work: Plan, outcomes: list[Outcome]) -> list[dict[str, Any]]:
        pending = []
        for record in work.orphans:
            reason = ORPHANED
            pending.append({**audit.draft("finished", runner=self.options.runner_name, status="lost", exit_code=None, reason=reason, run_id=record.get("run_id")), **_copy_ids(record)})
            outcomes.append(Outcome(record.get("job"), str(record.get("path")), str(record.get("commit")), "lost", reason, record.get("run_id")))
        for record in work.expired:
            lease = record.get("lease") or {}
            reason = (f"the lease of {lease.get('holder')} expired at {lease.get('until')} with no result; "
                      "the job is not run again (at most once)")
            pending.append({**audit.draft("finished", runner=self.options.runner_name, status="lost", exit_code=None, reason=reason, run_id=record.get("run_id")), **_copy_ids(record)})
            outcomes.append(Outcome(record.get("job"), str(record.get("path")), str(record.get("commit")), "lost", reason, record.get("run_id")))
        recorded = {r.get("commit") for r in work.handled_policy}
        for assessment in work.assessments:
            if assessment.policy_changed and assessment.commit not in recorded:
                status = "adopted" if assessment.policy_adopted else "rejected"
                pending.append(audit.draft("policy", runner=self.options.runner_name, commit=assessment.commit, status=status, reason=assessment.summary,
                                           policy_commit=assessment.policy.commit, **self._evidence(assessment.commit)))
        return pending

    def _refusal(self, decision: Decision, work: Plan, records: str | None) -> tuple[str, str] | None:
        # (A revision that already started elsewhere is refused by planning: eligibility.judge_attempts.)
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

    def _search_vetoes(self, spec: str, policy: Policy) -> list[Veto]:
        """Vetoes in the first-parent commits `spec` (a tip, or old..new)."""
        assessor = Assessor(self.repo, at=datetime.now(UTC))
        # As loose as the trailer parser (any case, any spacing), so that no veto
        # the walk would honour is missed here; the parser then decides.
        grep = f"--grep=^{VETO_TRAILER}:"
        found: list[Veto] = []
        for sha in self.repo.out("log", "--first-parent", "--regexp-ignore-case", grep, "--format=%H", spec).split():
            commit = self.repo.commit(sha)
            if self.repo.diff(commit.parents[0] if commit.parents else None, sha):
                continue  # a veto is an empty, signed commit (a merge too), as the walk judges it
            found += assessor.veto(commit, policy).vetoes
        return found

    def _lease(self, limits: executor.Limits) -> dict[str, str]:
        """Who holds the claim and until when: past `until` with no result, any runner closes it as `lost`."""
        seconds = limits.timeout_seconds + limits.kill_grace_seconds + self.shutdown.grace + LEASE_SLACK_SECONDS
        until = datetime.now(UTC) + timedelta(seconds=seconds)
        return {"holder": self.options.runner_name, "until": until.isoformat().replace("+00:00", "Z")}

    def _draft(self, event: str, decision: Decision, **extra: Any) -> dict[str, Any]:
        if event in ("started", "rejected", "vetoed"):
            extra.update(self._evidence(decision.commit))
        return audit.draft(event, runner=self.options.runner_name, job=_job_id(decision), path=decision.path, blob=decision.blob, commit=decision.commit, **extra)

    def _walked_evidence(self, work: Plan, pending: list[dict[str, Any]]) -> dict[str, Any]:
        """`reviewed: {commit: <sha256>}` for walked commits judged on GitHub's answers that no other
        record names (a reviewed merge of other files only): verify re-judges them offline too."""
        named = {str(d.get("commit")) for d in pending if d.get("evidence")}
        reviewed = {}
        for assessment in work.assessments:
            evidence = self._reviews.gathered.get(assessment.commit)
            if evidence is not None and assessment.commit not in named and assessment.commit not in self._reviews.stored:
                self._state.files[evidence.path] = evidence.to_bytes()
                reviewed[assessment.commit] = evidence.sha256
        return {"reviewed": reviewed} if reviewed else {}

    def _evidence(self, commit: str) -> dict[str, Any]:
        """`evidence: [<sha256>]` for a decision made on GitHub's answers; the file goes with the records."""
        evidence = self._reviews.evidence_for(commit)
        if evidence is None:
            return {}
        self._state.files[evidence.path] = evidence.to_bytes()
        return {"evidence": [evidence.sha256]}

    def _run_job(self, branch: Branch, decision: Decision, policy: Policy, pending: list[dict[str, Any]], *,
                 attempt: int = 1) -> tuple[Outcome, list[dict[str, Any]]]:
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
                lease=self._lease(limits), attempt=attempt, **({"runs_on": list(job.runs_on)} if job.runs_on else {}),
                **_votes(decision),
            )
            # 2. At most once: the claim is pushed before the process exists. Until the
            #    real result replaces it, the spool holds a "runner stopped" result, so
            #    a runner that dies mid-job closes it on its next pass, whoever ran since.
            #    It is written before the claim: a claim it could not account for is never made.
            provisional = self._draft("finished", decision, run_id=run_id, status="lost", exit_code=None, reason=ORPHANED)
            me = ProcessId.of(os.getpid())
            self.spool.put(Entry(provisional, None, me))
            dropped = self._publish(branch, [*pending, started], claim=decision, claim_attempt=attempt)
            if dropped is not None:
                self.spool.drop({run_id})
                event, reason = dropped
                return Outcome(job.id, job.path, decision.commit, "vetoed" if event == "vetoed" else "claimed", reason, run_id), []
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
        # The other jobs' definitions are not the job's business (the records are on
        # another branch); leaving them out keeps the export proportional to the code.
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

    def _publish(self, branch: Branch, drafts: list[dict[str, Any]], *, claim: Decision | None = None,
                 claim_attempt: int = 1) -> tuple[str, str] | None:
        """Commit drafts on the audit branch's tip and push; when the push is refused, fetch both
        branches, re-check, rebase and retry. The runner never writes to approved.

        With `claim`, the drafts hold its `started` record: None means it was pushed;
        ("claimed" or "vetoed", reason) means the claim was dropped (the other drafts,
        and a `vetoed` record, are pushed without it).
        """
        state = self._state
        if claim is not None and time.monotonic() - state.fetched > FRESH_SECONDS:
            self._refresh(branch, fetch=self.options.fetch)  # a veto merged while earlier jobs ran
        for attempt in range(MAX_PUSH_ATTEMPTS):
            parent = state.checked
            tail = read_tail(self.repo, parent)
            if attempt:
                drafts = self._not_closed_yet(drafts, parent)
                if not drafts:
                    return None
            if claim is not None:
                dropped = self._claim_dropped(claim, tail, parent, attempt=claim_attempt)
                if dropped is not None:
                    rest = [d for d in drafts if d["event"] != "started"]
                    if dropped[0] == "vetoed":
                        rest.append(self._draft("vetoed", claim, reason=dropped[1], **_votes(claim)))
                    if rest:
                        self._publish(branch, rest)
                    return dropped
            records = audit.seal(drafts, after_seq=tail.last_seq, after_hash=tail.last_hash)
            files = {**audit.append(self.repo, parent, tail, records), **self._new_evidence(parent)}
            judged = self._trailer(parent)
            sha = self.repo.write_commit(parent=parent, files=files, message=audit_branch.message(_summary(records), judged),
                                         author=(self.options.runner_name, "runner@mergegate.invalid"), signing=self.signing)
            self._check_own_commit(sha, judged)
            try:
                published = branch.publish_records(sha, parent)
            except GitError as exc:
                if any(d["event"] == "finished" for d in drafts):
                    exc.hint = f"the job's result is kept in {self.spool.path} and pushed by the next run"
                raise
            if published:
                state.checked = sha
                state.files = {}
                self.spool.drop({d.get("run_id") for d in drafts if d["event"] == "finished"})
                return None
            self._refresh(branch, fetch=True)
        raise GitError(f"could not push audit records to {AUDIT_BRANCH} after {MAX_PUSH_ATTEMPTS} attempts", hint="another process keeps moving the branch; run again")

    def _refresh(self, branch: Branch, *, fetch: bool) -> None:
        """One fetch of both branches; check what other runners appended; look for new vetoes."""
        state = self._state
        if fetch:
            branch.refresh()
        tip = branch.tip()
        if not self.repo.is_ancestor(state.judged, tip):
            raise IntegrityError(f"approved was rewritten during this pass: {state.judged[:12]} is not an ancestor of the new tip {tip[:12]} (force-push?)")
        records = branch.audit_tip()
        if records != state.checked:
            if records is None or (state.checked is not None and not self.repo.is_ancestor(state.checked, records)):
                raise IntegrityError(f"the audit branch {AUDIT_BRANCH} was rewritten during this pass: it no longer descends from "
                                     f"{(state.checked or '')[:12]} (force-push?)")
            spec = records if state.checked is None else f"{state.checked}..{records}"
            replace(state.checker, approved_tip=tip).check(self.repo.out("rev-list", "--reverse", "--topo-order", spec).split())
            state.checked = records
        if tip != state.veto_tip:
            found = self._vetoes(state.work)
            for veto in self._search_vetoes(f"{state.veto_tip}..{tip}", state.work.policy):
                found.setdefault((veto.path, veto.blob), veto)
            state.veto_tip = tip
        state.fetched = time.monotonic()

    def _not_closed_yet(self, drafts: list[dict[str, Any]], records: str | None) -> list[dict[str, Any]]:
        """Drafts less `finished` ones whose run another runner closed meanwhile (its lease ran out): one result per run."""
        keep = []
        for d in drafts:
            run_id = d.get("run_id")
            if d["event"] == "finished" and isinstance(run_id, str) and any(
                    r.event == "finished" and r.get("run_id") == run_id for r in audit.grep(self.repo, records, run_id)):
                self.repo.warnings.append(f"run {run_id} of {d.get('path')} was closed by another runner first (lease expired); "
                                          f"its result here ({d.get('status')}) is not recorded")
                self.spool.drop({run_id})
                continue
            keep.append(d)
        return keep

    def _claim_dropped(self, claim: Decision, tail: audit.Tail, records: str | None, *, attempt: int = 1) -> tuple[str, str] | None:
        """Why the claim must not be pushed now: another runner's claim (of this attempt), or a veto on approved."""
        key = (claim.path, claim.blob, claim.commit)
        mine = [r for r in tail.since_scanned if (r.get("path"), r.get("blob"), r.get("commit")) == key
                and (r.event in ("rejected", "vetoed") or (r.event == "started" and audit.attempt_of(r) >= attempt))]
        earlier = mine[0] if mine else audit.started_before(self.repo, records, claim.path, claim.blob, attempt=attempt)
        if earlier is not None:
            # Losing a race is not an outcome of this runner: it is reported as `claimed`.
            return "claimed", f"claimed by {earlier.get('runner')}"
        veto = self._vetoes(self._state.work).get((claim.path, claim.blob))
        if veto is not None:
            return "vetoed", _vetoed(veto)
        return None

    def _trailer(self, parent: str | None) -> str:
        """The approved tip this commit says it judged: the pass's, or a newer one another runner already named."""
        judged = self._state.judged
        before = audit_branch.approved_of(self.repo.commit(parent)) if parent is not None else None
        if before is not None and before != judged and self.repo.is_ancestor(judged, before):
            return before
        return judged

    def _new_evidence(self, parent: str | None) -> dict[str, bytes]:
        """Evidence files to add: those not on the branch yet (a file is its hash, so one that is there is this one)."""
        return {path: data for path, data in self._state.files.items() if parent is None or self.repo.file_blob(parent, path) is None}

    def _check_own_commit(self, sha: str, judged: str) -> None:
        """A commit the next pass would call tampering is never pushed: it would stop the gate for good."""
        policy = self._state.checker.policy_at(judged)
        if policy.runners:
            check = self._state.checker.assessor.signature(self.repo.commit(sha), policy.runner_keys())
            if not check.ok:
                raise UsageError(f"--signing-key does not make a signature the policy accepts from a runner: {check.reason}",
                                 hint="use the private key (or OpenPGP key id) of a key listed under runners in the policy")
        self._state.checker.check_commit(sha)

    # -- the spool: a job's result is kept on disk until it is pushed --------------
    def _spool_load(self, tip: str | None) -> tuple[list[dict[str, Any]], list[Entry]]:
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
        quiet: dict[str, str] | None = None  # the remote's refs before the last pass that left nothing to do
        wake: datetime | None = None  # when a retry's backoff ends: a pass is due then, though no ref moved
        with self.shutdown.handling():
            while not self.shutdown.is_set():
                try:
                    # Ask the remote first (ls-remote: no local write); a pass, and its
                    # fetch, only when a ref it reads moved or something is waiting.
                    refs = self._remote_refs()
                    if (refs is not None and refs == quiet and not self.spool.path.exists()
                            and (wake is None or datetime.now(UTC) < wake)):
                        self._recovered(backoff, on_recover)
                        self.shutdown.wait(interval)
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
                wake = min((q.due for q in self.plan.queued if q.due is not None), default=None) if self.plan else None
                self.shutdown.wait(interval)

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
        return all(self.repo.rev(prefix + ref.removeprefix("refs/heads/")) == sha for ref, sha in before.items())


def _remove_tree(path: Path) -> None:
    """Remove a job's workspace, however deep it made it (shutil.rmtree recurses and
    raises RecursionError on a few thousand levels, which would lose the job's result)."""
    try:
        subprocess.run(["rm", "-rf", "--one-file-system", "--", str(path)], check=False, capture_output=True)
    except OSError:  # no rm on PATH
        with contextlib.suppress(RecursionError):
            shutil.rmtree(path, ignore_errors=True)


def _newly_unapproved(work: Plan) -> list[str]:
    """Loud, once (the pass that walks it): a file no approval covers stops every later job."""
    walked = {a.commit for a in work.assessments}
    new = sorted(path for path, sha in work.unapproved.items()
                 if sha in walked and not is_job_path(path) and not path.startswith("policy/"))
    if not new:
        return []
    shown = ", ".join(path_display(p) for p in new[:5]) + (f" and {len(new) - 5} more" if len(new) > 5 else "")
    return [f"not approved: {shown} (changed by {work.unapproved[new[0]][:7]}); no job runs in a tree that holds them until they are "
            "put back to their last approved version or removed (mergegate check on a proposal shows the diff from it)"]


def _vetoed(veto: Veto) -> str:
    return f"vetoed by {veto.person} in commit {veto.commit[:7]}"


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


def _summary(records: list[audit.Record]) -> str:
    summary: dict[str, int] = {}
    for record in records:
        summary[record.event] = summary.get(record.event, 0) + 1
    parts = ", ".join(f"{n} {event}" for event, n in summary.items())
    return f"mergegate: audit seq {records[0].seq}-{records[-1].seq} ({parts})"
