"""What a pass records: the drafts of its records, and the evidence files they name.

A draft is a record before the publisher seals it (seq, time, hash) on the audit branch's tip.
Every record that decides (`started`, `rejected`, `vetoed`, `policy`, `scanned`) says when the
pass judged (`judged`), so that verify judges key lifetimes at that time, and names the GitHub
evidence it was decided on; the evidence files wait in `Drafts.files` for the next push.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, TypedDict

from mergegate.audit import log as audit
from mergegate.audit.records import (
    EmergencyUse,
    Finished,
    Lease,
    OpenCommit,
    PolicyChange,
    Record,
    Rejected,
    Scanned,
    Started,
    Vetoed,
    draft,
)
from mergegate.execution import executor
from mergegate.rules.eligibility import Expiry
from mergegate.rules.model import Decision, describe_votes
from mergegate.rules.renewal import Freshest
from mergegate.runner.results import Outcome

if TYPE_CHECKING:
    from mergegate.github.gather import ReviewSource
    from mergegate.runner.plan import Plan

ORPHANED = (
    "the runner stopped while this job ran; it is not run again (at most once) unless the "
    "job says idempotent: true and has retries left"
)


class Drafts:
    """The drafts of one pass (or dry run), judged at `judged`, on the evidence of `reviews`."""

    def __init__(self, runner_name: str, *, judged: str, reviews: ReviewSource) -> None:
        self.runner_name = runner_name
        self.judged = judged  # the clock the pass judges at (audit.stamp)
        self.reviews = reviews
        self.files: dict[str, bytes] = {}  # evidence files the drafts name, not pushed yet

    def take_files(self) -> dict[str, bytes]:
        """The evidence files drafted since the last call, for the next push."""
        files, self.files = self.files, {}
        return files

    def claim(
        self,
        decision: Decision,
        *,
        run_id: str | None = None,
        command: tuple[str, ...],
        attempt: int,
        cwd: str | None = None,
        sandbox: str | None = None,
        policy_commit: str | None = None,
        limits: Mapping[str, int | float] | None = None,
        resolved_program: str | None = None,
        lease: Lease | None = None,
        runs_on: tuple[str, ...] = (),
        windows: tuple[str, ...] = (),
        clone: str | None = None,
        renewal: Freshest | None = None,
    ) -> Started:
        """The `started` draft of `decision` (a dry run's leaves out what only a claim says: its
        run, its limits, its lease)."""
        claimed = run_id is not None
        return draft(
            Started(
                **self._ids(decision),
                judged=self.judged,
                evidence=self.evidence(decision.commit),
                run_id=run_id,
                command=command,
                cwd=cwd,
                sandbox=sandbox,
                rule=(decision.rule.describe() if decision.rule else None) if claimed else None,
                policy_commit=policy_commit,
                self_approved=decision.self_approved if claimed else None,
                limits=limits,
                resolved_program=resolved_program,
                lease=lease,
                attempt=attempt,
                runs_on=runs_on or None,
                windows=windows or None,
                clone=clone,
                counted=counted_votes(decision) if claimed else None,
                emergency=EmergencyUse(decision.emergency.by, decision.emergency.reason)
                if decision.emergency is not None
                else None,
                **_votes(decision),
                **_renewal(renewal),
            ),
            null=("rule", "requirement", "approval") if claimed else ("requirement", "approval"),
        )

    def refusal(
        self, event: str, decision: Decision, reason: str, *, expiry: Expiry | None = None
    ) -> Rejected | Vetoed:
        """The `rejected` or `vetoed` draft of `decision` (`expiry`: its approval expired)."""
        if event == "vetoed":
            return draft(
                Vetoed(
                    **self._ids(decision),
                    judged=self.judged,
                    evidence=self.evidence(decision.commit),
                    reason=reason,
                    **_votes(decision),
                ),
                null=("requirement", "approval"),
            )
        expired = None
        if expiry is not None:
            expired = {"limit": expiry.limit}
            if expiry.age is not None:
                expired["age"] = expiry.age
        return draft(
            Rejected(
                **self._ids(decision),
                judged=self.judged,
                evidence=self.evidence(decision.commit),
                reason=reason,
                expired=expired,
                **_votes(decision),
                **_renewal(expiry.approval if expiry is not None else None),
            ),
            null=("requirement", "approval"),
        )

    def closed(self, decision: Decision, *, run_id: str, status: str, reason: str) -> Finished:
        """A `finished` draft of a run that has no process result: it never started, was denied
        before it could, or is the spool's "runner stopped" one until the real one."""
        return draft(
            Finished(
                **self._ids(decision), run_id=run_id, status=status, exit_code=None, reason=reason
            ),
            null=("exit_code",),
        )

    def result(self, decision: Decision, run_id: str, result: executor.ExecResult) -> Finished:
        """The `finished` draft of a run that ended: what the process did, as it was kept."""
        out, err = result.stdout, result.stderr
        return draft(
            Finished(
                **self._ids(decision),
                run_id=run_id,
                status=result.status,
                exit_code=result.exit_code,
                signal=result.signal,
                duration_ms=result.duration_ms,
                reason=result.reason,
                resolved_program=result.resolved_program,
                sandbox=result.sandbox,
                limits_applied=dict(result.limits_applied),
                stdout_tail=out.tail,
                stdout_bytes=out.bytes,
                stdout_sha256=out.sha256,
                stdout_file=out.file,
                stdout_file_sha256=out.file_sha256,
                stderr_tail=err.tail,
                stderr_bytes=err.bytes,
                stderr_sha256=err.sha256,
                stderr_file=err.file,
                stderr_file_sha256=err.file_sha256,
            ),
            null=(
                "exit_code",
                "signal",
                "reason",
                *(
                    f"{name}_file_sha256"
                    for name, kept in (("stdout", out), ("stderr", err))
                    if kept.file
                ),
            ),
        )

    def would_finish(self, decision: Decision) -> Finished:
        """A dry run's `finished` draft: what a run would say is not known yet."""
        return draft(Finished(**self._ids(decision)))

    def scanned(
        self,
        work: Plan,
        *,
        still: list[OpenCommit] | None = None,
        pending: Sequence[Record] = (),
    ) -> Scanned:
        """The pass's `scanned` draft: how far it walked, the unapproved map there (by reference)
        and the commits left `still` open; a dry run's (`still` None) says only how far."""
        if still is None:
            return draft(
                Scanned(
                    runner=self.runner_name,
                    time=audit.now(),
                    commit=work.tip,
                    start=work.start,
                    policy_commit=work.policy.commit,
                    commits=len(work.assessments),
                )
            )
        # The unapproved map can hold thousands of paths: it goes into an evidence file (written
        # once per distinct map), the record names it.
        count, digest, held = audit.unapproved_ref(work.unapproved)
        if held is not None:
            self.files[held.path] = held.data
        return draft(
            Scanned(
                runner=self.runner_name,
                time=audit.now(),
                commit=work.tip,
                start=work.start,
                judged=self.judged,
                policy_commit=work.policy.commit,
                commits=len(work.assessments),
                open=tuple(still),
                unapproved_count=count,
                unapproved_file=digest,
                reviewed=self.walked_evidence(work, pending),
                later_reviews=self.later_evidence(work),
            ),
            null=("unapproved_file",),
        )

    def evidence(self, commit: str) -> tuple[str, ...] | None:
        """`evidence: [<sha256>]` for a decision made on GitHub's answers (None: none); the file
        goes with the records."""
        evidence = self.reviews.evidence_for(commit)
        if evidence is None:
            return None
        self.files[evidence.path] = evidence.to_bytes()  # (preview's go nowhere)
        return (evidence.sha256,)

    def walked_evidence(self, work: Plan, pending: Sequence[Record]) -> dict[str, str] | None:
        """`reviewed: {commit: <sha256>}` for walked commits judged on GitHub's answers that no
        other record names (a reviewed merge of other files only): verify re-judges them offline
        too. None: there are none."""
        named = {str(d.commit) for d in pending if _names_evidence(d)}
        reviewed = {}
        for assessment in work.assessments:
            evidence = self.reviews.gathered.get(assessment.commit)
            if (
                evidence is not None
                and assessment.commit not in named
                and assessment.commit not in self.reviews.stored
            ):
                self.files[evidence.path] = evidence.to_bytes()
                reviewed[assessment.commit] = evidence.sha256
        return reviewed or None

    def later_evidence(self, work: Plan) -> dict[str, str] | None:
        """`later_reviews: {commit: <sha256>}`: GitHub's answers asked again after a merge that
        hold new approving reviews (github/later.py); the files go with the records."""
        later = {}
        for commit, evidence in work.later.items():
            self.files[evidence.path] = evidence.to_bytes()
            later[commit] = evidence.sha256
        return later or None

    def bookkeeping(self, work: Plan, outcomes: list[Outcome]) -> list[Record]:
        """Runs to close as `lost` (this runner's orphans, any runner's expired leases) and the
        policy changes the walk judged that no record names yet."""
        pending: list[Record] = []
        for record in work.orphans:
            self._lost(record, ORPHANED, pending, outcomes)
        for record in work.expired:
            lease = record.lease
            reason = (
                f"the lease of {lease.holder if lease else None} expired at "
                f"{lease.until if lease else None} with no result; "
                "the job is not run again (at most once) unless it says idempotent: true and has "
                "retries left"
            )
            self._lost(record, reason, pending, outcomes)
        recorded = {r.commit for r in work.handled_policy}
        for assessment in work.assessments:
            if assessment.policy_changed and assessment.commit not in recorded:
                status = "adopted" if assessment.policy_adopted else "rejected"
                pending.append(
                    draft(
                        PolicyChange(
                            runner=self.runner_name,
                            time=audit.now(),
                            commit=assessment.commit,
                            status=status,
                            reason=assessment.summary,
                            judged=self.judged,
                            policy_commit=assessment.policy.commit,
                            evidence=self.evidence(assessment.commit),
                        )
                    )
                )
        return pending

    def _lost(
        self, record: Started, reason: str, pending: list[Record], outcomes: list[Outcome]
    ) -> None:
        # The run's ids as its `started` record wrote them (any runner's: a value no runner writes
        # is copied as it is).
        copied = {
            k: record.extra[k] for k in ("job", "path", "blob", "commit") if k in record.extra
        }
        pending.append(
            draft(
                Finished(
                    runner=self.runner_name,
                    time=audit.now(),
                    job=record.job,
                    path=record.path,
                    blob=record.blob,
                    commit=record.commit,
                    run_id=record.run_id,
                    status="lost",
                    exit_code=None,
                    reason=reason,
                    extra={**copied, **_run_id_as_written(record)},
                ),
                null=("exit_code", "run_id"),
            )
        )
        outcomes.append(
            Outcome(record.job, str(record.path), str(record.commit), "lost", reason, record.run_id)
        )

    def _ids(self, decision: Decision) -> _Ids:
        return {
            "runner": self.runner_name,
            "time": audit.now(),
            "job": job_id(decision),
            "path": decision.path,
            "blob": decision.blob,
            "commit": decision.commit,
        }


class _Ids(TypedDict):
    """What every draft about a decision names: its runner, its time and the revision."""

    runner: str
    time: str
    job: str | None
    path: str
    blob: str
    commit: str


class _Votes(TypedDict):
    approvers: tuple[str, ...]
    votes: tuple[str, ...]
    requirement: str | None
    approval: str | None


def _votes(decision: Decision) -> _Votes:
    return {
        "approvers": tuple(decision.approvers),
        "votes": tuple(v.describe() for v in decision.votes),
        "requirement": decision.requirement.describe() if decision.requirement else None,
        "approval": describe_votes(decision.votes) if decision.votes else None,
    }


def counted_votes(decision: Decision) -> tuple[dict[str, str], ...]:
    """The counted votes as data: who, and how (docs/audit-format.md, `counted`)."""
    return tuple({"who": v.person, **dict(v.source)} for v in decision.votes if v.counted)


class _Renewal(TypedDict):
    renewal: str | None
    renewed_by: tuple[str, ...] | None


def _renewal(approval: Freshest | None) -> _Renewal:
    """The renewal an approval rests on, for its record (nothing for the original approval)."""
    if approval is None or approval.renewal is None:
        return {"renewal": None, "renewed_by": None}
    return {"renewal": approval.renewal, "renewed_by": approval.by}


def _names_evidence(record: Record) -> bool:
    return isinstance(record, Started | Rejected | Vetoed | PolicyChange) and bool(record.evidence)


def _run_id_as_written(record: Started) -> dict[str, object]:
    """A `run_id` its `started` record wrote as no runner does, to be copied as it is."""
    return {"run_id": record.extra["run_id"]} if "run_id" in record.extra else {}


def job_id(decision: Decision) -> str | None:
    return decision.job.id if decision.job else None


def policy_changes(work: Plan) -> tuple[tuple[str, str, str], ...]:
    """(commit, adopted|rejected, why) for each policy change the walk judged."""
    return tuple(
        (a.commit, "adopted" if a.policy_adopted else "rejected", a.summary)
        for a in work.assessments
        if a.policy_changed
    )
