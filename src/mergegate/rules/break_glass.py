"""Break-glass: which job revisions a signed emergency runs (judge, step 9), and the review it owes.

A merge signed by an emergency approver whose message carries `Mergegate-Emergency: <reason>`, or
an approval commit on the merged side signed by one, naming the job file's blob, and carrying the
trailer, is that person's emergency. `emergency.count` distinct emergency approvers let a job
revision run at once although its quorum is not met (and, in eligibility, although a change window
is shut). An emergency only stands in for the quorum: a job that is invalid, not unique, denied by
`commands` or its limits, unsigned where proposals must be signed, or in a tainted tree stays
refused, a veto still stops it, and a merge that changes policy/ cannot use one (a policy change
needs its own quorum, always).

The revision then owes a review: approvals by people other than the emergency's signers and the
file's writers that meet its normal quorum, at the merge or after it (`review_state`). Pure, as
the judge is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from mergegate.rules.emergency import TRAILER, kept_reason, reason_problem
from mergegate.rules.model import CommitFacts, Decision, Emergency, FileFacts
from mergegate.rules.policy import Policy, Requirement
from mergegate.rules.votes import approval_votes, excluded_people, merge_writer
from mergegate.text import shown


@dataclass(frozen=True)
class _Claim:
    person: str
    reasons: tuple[str, ...]
    via: str


def apply(
    facts: CommitFacts,
    policy: Policy,
    f: FileFacts,
    decision: Decision,
    *,
    signer: str | None,
    policy_change: bool,
) -> Decision:
    """`decision` as a signed emergency leaves it: run on it, refused with why, or unchanged."""
    claims = _claims(facts, policy, f, signer)
    if not claims or decision.job is None or decision.refusal in ("invalid", "denied"):
        return decision  # nothing claimed, or refused for what no emergency overrides
    why, by = _problem(policy, claims, policy_change=policy_change)
    if why:
        if decision.runnable:
            return replace(decision, reason=f"{decision.reason}; emergency not used: {why}")
        return replace(decision, reason=f"{decision.reason}; emergency refused: {why}")
    assert policy.emergency is not None
    first = next(c for c in claims if c.person == by[0])
    reason = kept_reason(first.reasons[0])
    requirement = decision.requirement or policy.requirement_for(decision.job)
    excluded = set(by)
    if not policy.allow_self_approval:
        writers = [*f.writers]
        if f.merge_wrote or len(facts.parents) < 2:
            writers.append(merge_writer(facts))
        excluded |= set(excluded_people(policy, writers))
        excluded |= {person for person, _ in (facts.review.excluded if facts.review else ())}
    reviewers = tuple(p for p in decision.approvers if p not in excluded)
    reviewed = policy.quorum(requirement, reviewers).met
    emergency = Emergency(by, reason, reviewers, tuple(sorted(excluded)), reviewed)
    said = f"emergency by {', '.join(by)}: '{shown(reason)}'"
    if decision.runnable:
        return replace(decision, reason=f"{decision.reason}; {said}", emergency=emergency)
    command = policy.decide_command(decision.job)
    owed = (
        "its review is given"
        if reviewed
        else f"review owed: {requirement.describe()} from others within "
        f"{policy.emergency.within_text}"
    )
    return replace(
        decision,
        runnable=True,
        refusal="",
        reason=f"{said}; {owed}; {command.reason}",
        rule=command.rule,
        emergency=emergency,
    )


def _claims(facts: CommitFacts, policy: Policy, f: FileFacts, signer: str | None) -> list[_Claim]:
    """Every signed Mergegate-Emergency that covers this file: the merge's, by its signer, and
    each approval commit's whose vote covers the file's merged blob."""
    claims = []
    if signer is not None and facts.emergency_trailers:
        claims.append(_Claim(signer, facts.emergency_trailers, f"merge {facts.short}"))
    for approval in facts.approvals:
        check = approval.signature
        if not approval.emergency or not check.ok or check.key is None:
            continue
        if any(v.counted for v in approval_votes(policy, approval, f)):
            claims.append(
                _Claim(
                    check.key.owner, approval.emergency, f"approval commit {approval.commit[:7]}"
                )
            )
    return claims


def _problem(
    policy: Policy, claims: Sequence[_Claim], *, policy_change: bool
) -> tuple[str, tuple[str, ...]]:
    """(why the claims make no emergency, "" when they do; the emergency approvers who made it)."""
    emergency = policy.emergency
    if emergency is None:
        return f"{policy.where} defines no emergency, so {TRAILER} counts for nothing", ()
    if policy_change:
        return (
            "a merge that changes policy/ cannot use an emergency: a policy change always needs "
            "policy_approvals_required",
            (),
        )
    by: list[str] = []
    problems = []
    for claim in claims:
        if not emergency.allows(claim.person):
            problems.append(f"{claim.person} ({claim.via}) is not in emergency.approvers")
            continue
        bad = reason_problem(claim.reasons)
        if bad:
            problems.append(f"{claim.via} by {claim.person}: {bad}")
        elif claim.person not in by:
            by.append(claim.person)
    if len(by) >= emergency.count:
        return "", tuple(by)
    plural = "s" if emergency.count > 1 else ""
    needs = f"needs {emergency.count} emergency approver{plural} of {policy.where}, has {len(by)}"
    needs += f" ({', '.join(by)})" if by else ""
    if problems and emergency.count == 1:
        return "; ".join(problems), ()
    return "; ".join([*problems, needs]), ()


@dataclass(frozen=True)
class Owed:
    """One emergency use and the review it owes (or owed): for status, inbox and verify."""

    path: str
    blob: str
    commit: str
    by: tuple[str, ...]
    reason: str
    used: datetime | None  # when its runner judged the start (runner-signed), None: unknown
    due: datetime | None
    reviewers: tuple[str, ...]  # whose approvals count toward it so far
    given: bool
    requirement: str  # what the review needs, in words
    seq: int = 0  # of its `started` record

    def overdue(self, now: datetime) -> bool:
        return not self.given and self.due is not None and now > self.due

    def describe(self) -> str:
        """`jobs/x.yaml, used by alice on 2026-12-07T10:00Z for '...'` (the reason escaped)."""
        when = self.used.strftime("%Y-%m-%dT%H:%M:%SZ") if self.used else "an unknown time"
        return f"{self.path}, used by {', '.join(self.by)} on {when} for '{shown(self.reason)}'"

    def as_json(self, now: datetime) -> dict[str, object]:
        return {
            "path": self.path,
            "blob": self.blob,
            "commit": self.commit,
            "by": list(self.by),
            "reason": self.reason,
            "used": self.used.strftime("%Y-%m-%dT%H:%M:%SZ") if self.used else None,
            "due": self.due.strftime("%Y-%m-%dT%H:%M:%SZ") if self.due else None,
            "reviewers": list(self.reviewers),
            "given": self.given,
            "overdue": self.overdue(now),
            "requirement": self.requirement,
            "seq": self.seq,
        }


def review_state(
    decision: Decision,
    policy: Policy,
    later: Iterable[str],
    *,
    used: datetime | None,
    seq: int = 0,
) -> Owed:
    """The review an emergency run of `decision` (judged by `policy`) owes, given the people whose
    approvals of its path and blob came after the merge (`later`: any one may be excluded)."""
    emergency = decision.emergency
    assert emergency is not None and decision.job is not None
    requirement: Requirement = decision.requirement or policy.requirement_for(decision.job)
    reviewers = tuple(
        sorted({*emergency.reviewers, *(p for p in later if p not in emergency.excluded)})
    )
    within = policy.emergency.review_within if policy.emergency is not None else None
    due = used + timedelta(seconds=within) if used is not None and within is not None else None
    return Owed(
        decision.path,
        decision.blob,
        decision.commit,
        emergency.by,
        emergency.reason,
        used,
        due,
        reviewers,
        emergency.reviewed or policy.quorum(requirement, reviewers).met,
        requirement.describe(),
        seq,
    )


def overdue_by(owed: Iterable[Owed], now: datetime) -> dict[str, Owed]:
    """Each emergency approver with an overdue review, and the first such use of theirs."""
    found: dict[str, Owed] = {}
    for item in owed:
        if item.overdue(now):
            for person in item.by:
                found.setdefault(person, item)
    return found


def second_refusal(decision: Decision, overdue: Mapping[str, Owed]) -> str | None:
    """Why an emergency run must not start while one of its signers owes an overdue review."""
    if decision.emergency is None:
        return None
    for person in decision.emergency.by:
        item = overdue.get(person)
        if item is not None and (item.path, item.blob) != (decision.path, decision.blob):
            due = item.due.strftime("%Y-%m-%dT%H:%M:%SZ") if item.due else "?"
            return (
                f"emergency refused: {person} owes an overdue review (due {due}) of "
                f"{item.describe()}; have it reviewed first, or approve this change with its quorum"
            )
    return None
