"""Renewing an expired approval: which approval of a job revision a start relies on, and when.

An approval's time is when a runner first judged the approving commit (facts/approval_dates.py),
and `max_approval_age` bounds how old it may be when the job starts (eligibility.expired). A fresh
approval of the very same revision renews it: signed, empty commits on approved naming its path
and blob (`Mergegate-Renew`, judge step 2), each dated by when a runner first judged it. They
renew it when their signers, counted as the original approval is counted, meet the revision's
quorum:
- only approvers' valid signatures are votes (the judge), one per person, their latest;
- the revision's writers and signers never count (the original decision's `excluded`), unless
  the policy allows self-approval;
- the quorum is that of the policy in force when the job would start (a tightened requirement
  reaches renewals too);
- the renewal's time is the oldest vote of the freshest quorum: every vote it rests on is
  younger than that, so two stale votes and one fresh one do not make a fresh approval.

Pure, as the judge is: handed the votes and their times, never git or the clock.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime

from mergegate.rules.model import Decision
from mergegate.rules.policy import Policy


@dataclass(frozen=True)
class RenewalVote:
    """One person's renewal of one revision: the commit, and when a runner first judged it."""

    person: str
    commit: str
    when: datetime


@dataclass(frozen=True)
class Freshest:
    """The approval a start relies on: the approving commit's, or a renewal's.

    `at`: when a runner first judged it (None: no runner-signed record dates it). `renewal`:
    the renewal commit that completed the freshest quorum (None: the original approval), with
    the people of that quorum in `by`.
    """

    at: datetime | None
    renewal: str | None = None
    by: tuple[str, ...] = ()

    @property
    def key(self) -> str:
        """What an expiry record names: the renewal commit, or "" for the original approval."""
        return self.renewal or ""


def approval(
    decision: Decision,
    policy: Policy,
    *,
    approved: datetime | None,
    votes: Iterable[RenewalVote] = (),
) -> Freshest:
    """The freshest approval of `decision` by `policy` (in force when it would start): the
    original one, first judged at `approved`, or a renewal that meets the quorum, if younger."""
    original = Freshest(approved)
    renewed = renewal(decision, policy, votes)
    if renewed is None:
        return original
    if approved is not None and renewed.at is not None and renewed.at <= approved:
        return original
    return renewed


def renewal(decision: Decision, policy: Policy, votes: Iterable[RenewalVote]) -> Freshest | None:
    """The freshest quorum of renewal votes for `decision`, or None when the votes do not meet
    the revision's quorum (see the module for who counts)."""
    job = decision.job
    if job is None:
        return None
    excluded = set() if policy.allow_self_approval else {p for p, _ in decision.excluded}
    latest: dict[str, RenewalVote] = {}
    for vote in votes:
        if vote.person in excluded:
            continue
        held = latest.get(vote.person)
        if held is None or (vote.when, vote.commit) > (held.when, held.commit):
            latest[vote.person] = vote
    requirement = policy.requirement_for(job)
    people: list[str] = []
    newest: RenewalVote | None = None
    # Youngest first: the first prefix that meets the quorum is the freshest quorum there is.
    for vote in sorted(latest.values(), key=lambda v: (v.when, v.commit), reverse=True):
        newest = newest or vote
        people.append(vote.person)
        if policy.quorum(requirement, people).met:
            return Freshest(vote.when, newest.commit, tuple(sorted(people)))
    return None
