"""What a pass records: the drafts of its records, and the evidence files they name.

A draft is a record before the publisher seals it (seq, time, hash) on the audit branch's tip.
Every record that decides (`started`, `rejected`, `vetoed`, `policy`, `scanned`) says when the
pass judged (`judged`), so that verify judges key lifetimes at that time, and names the GitHub
evidence it was decided on; the evidence files wait in `Drafts.files` for the next push.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from mergegate.audit import log as audit
from mergegate.rules.model import Decision, describe_votes
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

    def draft(self, event: str, decision: Decision, **extra: Any) -> dict[str, Any]:
        if event in ("started", "rejected", "vetoed"):
            extra.update(self.evidence(decision.commit), judged=self.judged)
        return audit.draft(
            event,
            runner=self.runner_name,
            job=job_id(decision),
            path=decision.path,
            blob=decision.blob,
            commit=decision.commit,
            **extra,
        )

    def evidence(self, commit: str) -> dict[str, Any]:
        """`evidence: [<sha256>]` for a decision made on GitHub's answers; the file goes with the
        records."""
        evidence = self.reviews.evidence_for(commit)
        if evidence is None:
            return {}
        self.files[evidence.path] = evidence.to_bytes()  # (preview's go nowhere)
        return {"evidence": [evidence.sha256]}

    def walked_evidence(self, work: Plan, pending: list[dict[str, Any]]) -> dict[str, Any]:
        """`reviewed: {commit: <sha256>}` for walked commits judged on GitHub's answers that no
        other
        record names (a reviewed merge of other files only): verify re-judges them offline too."""
        named = {str(d.get("commit")) for d in pending if d.get("evidence")}
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
        return {"reviewed": reviewed} if reviewed else {}

    def bookkeeping(self, work: Plan, outcomes: list[Outcome]) -> list[dict[str, Any]]:
        """Runs to close as `lost` (this runner's orphans, any runner's expired leases) and the
        policy changes the walk judged that no record names yet."""
        pending: list[dict[str, Any]] = []
        for record in work.orphans:
            self._lost(record, ORPHANED, pending, outcomes)
        for record in work.expired:
            lease = record.get("lease") or {}
            reason = (
                f"the lease of {lease.get('holder')} expired at {lease.get('until')} with no "
                "result; "
                "the job is not run again (at most once) unless it says idempotent: true and has "
                "retries left"
            )
            self._lost(record, reason, pending, outcomes)
        recorded = {r.get("commit") for r in work.handled_policy}
        for assessment in work.assessments:
            if assessment.policy_changed and assessment.commit not in recorded:
                status = "adopted" if assessment.policy_adopted else "rejected"
                pending.append(
                    audit.draft(
                        "policy",
                        runner=self.runner_name,
                        commit=assessment.commit,
                        status=status,
                        reason=assessment.summary,
                        judged=self.judged,
                        policy_commit=assessment.policy.commit,
                        **self.evidence(assessment.commit),
                    )
                )
        return pending

    def _lost(
        self,
        record: audit.Record,
        reason: str,
        pending: list[dict[str, Any]],
        outcomes: list[Outcome],
    ) -> None:
        pending.append(
            {
                **audit.draft(
                    "finished",
                    runner=self.runner_name,
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


def votes(decision: Decision) -> dict[str, Any]:
    return {
        "approvers": list(decision.approvers),
        "votes": [v.describe() for v in decision.votes],
        "requirement": decision.requirement.describe() if decision.requirement else None,
        "approval": describe_votes(decision.votes) if decision.votes else None,
    }


def job_id(decision: Decision) -> str | None:
    return decision.job.id if decision.job else None


def policy_changes(work: Plan) -> tuple[tuple[str, str, str], ...]:
    """(commit, adopted|rejected, why) for each policy change the walk judged."""
    return tuple(
        (a.commit, "adopted" if a.policy_adopted else "rejected", a.summary)
        for a in work.assessments
        if a.policy_changed
    )


def _copy_ids(record: audit.Record) -> dict[str, Any]:
    return {k: record.get(k) for k in ("job", "path", "blob", "commit")}
