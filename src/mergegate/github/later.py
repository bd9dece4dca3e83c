"""Reviews given after the merge: GitHub asked again about a merged pull request, and kept.

A revision approved through a pull request can need approvals after its merge: a fresh one when
its approval expired (`max_approval_age`, rules/renewal.py), or other people's when it ran as an
emergency and owes a review (rules/break_glass.py). On GitHub those are new approving reviews on
the pull request's merged head. For such a revision only, the runner asks GitHub again about the
merge (`gather`, the very questions it asked at the merge, bounded the same way) and judges the
answer by the very rules that judged the merge (`reviews.judge`): an approving review counts only
if it is by a policy approver, on exactly the merged head, not dismissed, by nobody the merge
excludes (the pull request's author, its commits' authors and committers). A review the merge's
own evidence already held is no later vote: it was the original approval.

An answer holding a new counted review is stored as evidence (`audit/evidence/<sha256>.json`) and
named by the pass's `scanned` record (`later_reviews: {commit: <sha256>}`), so `verify` judges it
again offline. Each review is dated by the `judged` time of the first runner-signed record naming
an answer in which it counts (this pass's clock, when this pass is the first), never by GitHub's
`submitted_at`: the pull request's author or a reviewer cannot choose a runner's clock, but a
review's `submitted_at` is only as true as an answer nobody signed, and a date a runner vouched for
is what every other time that decides anything is (approval ages, key lifetimes, deadlines).
Missing or failed answers are "not yet": nothing waits on them, nothing is frozen.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime

from mergegate.audit import dating
from mergegate.audit import log as audit
from mergegate.audit.records import Record, Scanned
from mergegate.errors import GitError, IntegrityError, NotYet
from mergegate.git.repo import Repo
from mergegate.github.evidence import EVIDENCE_DIR, Evidence
from mergegate.github.gather import ReviewSource, _head, gather, merge_facts
from mergegate.github.http import Malformed
from mergegate.rules.model import Decision
from mergegate.rules.policy import Policy

FIELD = "later_reviews"
# (the decision, the policy that judged it, whether GitHub may be asked) -> who approved it since
Reviewers = Callable[[Decision, Policy, bool], list[str]]


@dataclass(frozen=True)
class LaterVote:
    """One approving review given after the merge, and when a runner first stored it."""

    person: str
    review: str  # GitHub's review id
    pull: int
    commit: str  # the merge commit on approved
    when: datetime

    @property
    def key(self) -> str:
        """What a record names as the renewal this vote completes (no commit: a review)."""
        return f"review {self.review} on PR #{self.pull}"


def _review_ids(evidence: Evidence | None) -> set[str]:
    if evidence is None or evidence.pull is None:
        return set()
    try:
        items = evidence.pages(f"/pulls/{evidence.pull}/reviews")
    except (Malformed, ValueError):
        return set()
    return {str(r.get("id")) for r in items if isinstance(r, dict)}


def votes_in(
    repo: Repo, evidence: Evidence, merged: Evidence | None, policy: Policy, *, at: datetime
) -> list[tuple[str, str]]:
    """(person, review id) of each approving review `evidence` counts for its merge by `policy`
    (the one that judged the merge) that the merge's own evidence `merged` did not hold."""
    if evidence.pull is None or merged is None or merged.pull != evidence.pull:
        return []
    head = _head(evidence)
    if head is None or head != _head(merged):
        return []
    from mergegate.github import reviews

    try:
        facts = merge_facts(repo, evidence.commit, policy, head=head, at=at)
    except GitError:
        return []
    verdict = reviews.judge(evidence, facts, policy, now=at)
    if verdict.refused or verdict.waiting:
        return []
    before = _review_ids(merged)
    found = []
    for vote in verdict.votes:
        review = dict(vote.source).get("review", "")
        if vote.counted and review and review not in before:
            found.append((vote.person, review))
    return found


def recorded(
    repo: Repo, records_tip: str | None, records: Iterable[Record] | None = None
) -> list[tuple[datetime, Evidence]]:
    """Every later answer the records name, with the `judged` time of the record naming it, in
    the records' order. A named file that is missing, not its hash or about another commit is
    tampering."""
    if records_tip is None:
        return []
    found: list[tuple[datetime, Evidence]] = []
    named = (
        audit.grep(repo, records_tip, f'"{FIELD}"')
        if records is None
        else [r for r in records if r.written(FIELD) is not None]
    )
    for record in sorted(named, key=lambda r: r.seq):
        later, when = record.written(FIELD), dating.judged_time(record)
        if not isinstance(record, Scanned) or not isinstance(later, Mapping) or when is None:
            continue
        for commit, digest in later.items():
            evidence = Evidence.from_bytes(
                audit.read_evidence(repo, records_tip, str(digest)), name=str(digest)
            )
            if evidence.commit != commit:
                raise IntegrityError(
                    f"seq {record.seq} names later evidence {str(digest)[:12]}, which is about "
                    f"{evidence.commit[:12]}, not {str(commit)[:12]}: tampering",
                    file=f"{EVIDENCE_DIR}{digest}.json",
                )
            found.append((when, evidence))
    return found


class LaterReviews:
    """Later review votes for one pass (or one `verify`): the recorded ones, and, when `ask`ed
    for a revision that needs them, GitHub's answer now (kept in `gathered` for the pass's
    `scanned` record)."""

    def __init__(
        self,
        repo: Repo,
        records_tip: str | None,
        source: ReviewSource | None,
        *,
        now: datetime,
        records: Iterable[Record] | None = None,
    ) -> None:
        self.repo, self.records_tip, self.source, self.now = repo, records_tip, source, now
        self._records = records
        self._recorded: list[tuple[datetime, Evidence]] | None = None
        self.gathered: dict[str, Evidence] = {}
        self._asked: set[str] = set()
        self._votes: dict[tuple[str, str], list[LaterVote]] = {}

    def votes(
        self, commit: str, policy: Policy, *, ask: bool = False, now: Policy | None = None
    ) -> list[LaterVote]:
        """The later votes for the merge `commit`, judged by `policy` (the one that judged the
        merge), each dated when a runner first stored an answer it counts in; with `ask`, GitHub
        is asked again (once a pass) and a new vote is dated now. `now`: the policy in force,
        whose approvers the reviewers must still be (an approver removed since renews nothing)."""
        found = self._votes_by(commit, policy, ask=ask)
        if now is None:
            return found
        approvers = {person.name for person in now.approvers}
        return [v for v in found if v.person in approvers]

    def _votes_by(self, commit: str, policy: Policy, *, ask: bool) -> list[LaterVote]:
        source = self.source
        merged = source.stored.get(commit) if source is not None else None
        if merged is None or merged.pull is None:
            return []  # not approved through a pull request (or not on recorded evidence)
        key = (commit, policy.commit)
        if key not in self._votes:
            if self._recorded is None:
                self._recorded = recorded(self.repo, self.records_tip, self._records)
            first: dict[str, LaterVote] = {}
            for when, evidence in self._recorded:
                if evidence.commit != commit:
                    continue
                for person, review in votes_in(self.repo, evidence, merged, policy, at=when):
                    first.setdefault(review, LaterVote(person, review, merged.pull, commit, when))
            self._votes[key] = list(first.values())
        found = self._votes[key]
        if ask and commit not in self._asked and source is not None and not source.offline:
            self._asked.add(commit)
            fresh = self._ask(commit, merged)
            if fresh is not None:
                known = {v.review for v in found}
                new = [
                    LaterVote(person, review, merged.pull, commit, self.now)
                    for person, review in votes_in(self.repo, fresh, merged, policy, at=self.now)
                    if review not in known
                ]
                if new:
                    self.gathered[commit] = fresh
                    found = self._votes[key] = [*found, *new]
        return found

    def _ask(self, commit: str, merged: Evidence) -> Evidence | None:
        """GitHub's answer about `commit` now, or None (not yet: the next pass asks again)."""
        source = self.source
        if source is None or source.settings is None:
            return None
        try:
            if source.client is None:
                source.client = source.settings.client()
            evidence = gather(
                source.settings,
                source.client,
                commit,
                now=self.now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                message=self.repo.commit(commit).message,
            )
        except (NotYet, GitError):
            return None
        if evidence.truncated or evidence.pull != merged.pull:
            return None
        return evidence


def reviewers(later: LaterReviews) -> Reviewers:
    """Who approved a revision by a review on GitHub after its merge (for owed reviews)."""

    def people(decision: Decision, policy: Policy, ask: bool) -> list[str]:
        return [v.person for v in later.votes(decision.commit, policy, ask=ask)]

    return people
