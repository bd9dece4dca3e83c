"""The reviews break-glass runs owe: every emergency start on the audit branch, and who has
approved its revision since (docs/policy.md, "Break-glass").

An emergency use is a `started` record with `emergency`, confirmed by the judge: the commit it
names, judged again by the policy in force before it, must run that revision on a signed
emergency (so a forged record owes nothing, and a record cannot choose who may review). Its time
is when its runner judged the start (`dating.judged_time`, runner-signed: an emergency needs
`runners`). The review is the approvals by others: those counted at the merge, and each signed
commit on approved after it whose `Mergegate-Approve` trailer names the path and blob (an empty
approval commit pushed to, or merged into, approved), signed by an approver key of the policy in
force at approved's tip; and on GitHub, each approving review on the merged pull request's head
given after the merge (github/later.py: asked again of GitHub by a runner while the review is
owed, and stored; status, inbox and verify read what is stored). Whether they meet the quorum,
and when it is due, is `rules.break_glass.review_state`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from datetime import datetime

from mergegate.audit.dating import judged_time
from mergegate.audit.records import Record, Started
from mergegate.facts.assessor import APPROVE_TRAILER, Assessor
from mergegate.facts.policy_log import policy_lookup
from mergegate.git.repo import Repo
from mergegate.github import later as later_reviews
from mergegate.github.gather import ReviewSource
from mergegate.github.gather import recorded as recorded_reviews
from mergegate.rules.break_glass import Owed, review_state
from mergegate.rules.model import Decision
from mergegate.rules.policy import Policy

# (path, blob, commit, when its runner judged it) -> the judge's decision on it, with the policy
# that judged it.
Judged = Callable[[str, str, str, datetime | None], tuple[Decision, Policy] | None]


def emergency_starts(records: Iterable[Record]) -> list[Started]:
    """The first `started` record of each revision run on an emergency, in chain order."""
    found: dict[tuple[str, str, str], Started] = {}
    for record in records:
        if isinstance(record, Started) and record.emergency is not None:
            key = (str(record.path), str(record.blob), str(record.commit))
            if key not in found or record.seq < found[key].seq:
                found[key] = record
    return sorted(found.values(), key=lambda r: r.seq)


def rejudged(
    repo: Repo,
    policy_at: Callable[[str], Policy],
    *,
    at: datetime,
    reviews: ReviewSource | None = None,
) -> Judged:
    """`Judged` by judging each commit again, by the policy in force before it, its signatures at
    the time its runner judged it (one judgement per emergency: they are rare). `reviews`: the
    GitHub evidence the records hold (a merge through a pull request is judged on it)."""
    assessor = Assessor(repo, reviews=reviews)

    def judged(
        path: str, blob: str, commit: str, when: datetime | None
    ) -> tuple[Decision, Policy] | None:
        if repo.rev(commit) is None:
            return None
        parents = repo.commit(commit).parents
        if not parents:
            return None
        policy = policy_at(parents[0])
        assessment = assessor.assess(commit, policy, {}, at=when or at)
        for decision in assessment.decisions:
            if (decision.path, decision.blob) == (path, blob):
                return decision, policy
        return None

    return judged


def owed_reviews(
    repo: Repo,
    tip: str,
    records: Iterable[Record],
    judged: Judged,
    policy: Policy,
    *,
    at: datetime,
    reviewed: later_reviews.Reviewers | None = None,
) -> list[Owed]:
    """The review each emergency start owes (or owed), oldest first; `policy` is in force at
    `tip`, whose approver keys sign the approvals given after the merge. `reviewed`: who approved
    by a review on GitHub since the merge (asked of GitHub only while the review is owed)."""
    owed = []
    assessor = Assessor(repo)
    for record in emergency_starts(records):
        path, blob, commit = str(record.path), str(record.blob), str(record.commit)
        used = judged_time(record)
        found = judged(path, blob, commit, used)
        if found is None or found[0].emergency is None or not repo.is_ancestor(commit, tip):
            continue  # (verify reports a start the judge does not run on an emergency)
        decision, before = found
        later = _approvers_since(repo, assessor, commit, tip, path, blob, policy, at=at)
        state = review_state(decision, before, later, used=used, seq=record.seq)
        if reviewed is not None:
            approvers = {person.name for person in policy.approvers}  # (in force at the tip)
            github = [p for p in reviewed(decision, before, not state.given) if p in approvers]
            if github:
                state = review_state(decision, before, [*later, *github], used=used, seq=record.seq)
        owed.append(state)
    return owed


def gate_owed(
    repo: Repo,
    tip: str,
    root: str,
    records: Sequence[Record],
    records_tip: str | None,
    policy: Policy,
    *,
    at: datetime,
    reviewed: later_reviews.Reviewers | None = None,
    reviews: ReviewSource | None = None,
) -> list[Owed]:
    """The reviews owed, each emergency's commit judged again (status, inbox, a runner's pass);
    `policy` is in force at `tip`; `reviews`: GitHub evidence (default: what the records hold);
    `reviewed` (default: as the records hold them) who approved by a review on GitHub since the
    merge."""
    if not any(isinstance(r, Started) and r.emergency is not None for r in records):
        return []
    if reviews is None:
        reviews = recorded_reviews(repo, records_tip, now=at)
    if reviewed is None:
        reviewed = later_reviews.reviewers(
            later_reviews.LaterReviews(repo, records_tip, reviews, now=at)
        )
    judge = Assessor(repo)
    policy_at = policy_lookup(repo, lambda: judge, at=at, root=root, records=records_tip)
    judged = rejudged(repo, policy_at, at=at, reviews=reviews)
    return owed_reviews(repo, tip, records, judged, policy, at=at, reviewed=reviewed)


def _approvers_since(
    repo: Repo,
    assessor: Assessor,
    commit: str,
    tip: str,
    path: str,
    blob: str,
    policy: Policy,
    *,
    at: datetime,
) -> list[str]:
    """Who signed an approval of `path` at `blob` on approved after `commit` (git's --grep finds
    the candidates; the trailer, read as the judge reads it, decides)."""
    listed = repo.out(
        "rev-list", f"--grep={APPROVE_TRAILER}:", "--regexp-ignore-case", f"{commit}..{tip}"
    )
    people = []
    for sha in listed.split():
        approval = repo.commit(sha)
        if not any(_names(value, path, blob) for value in approval.trailers(APPROVE_TRAILER)):
            continue
        check = assessor.signature(approval, policy.approver_keys(), at=at)
        if check.ok and check.key is not None:
            people.append(check.key.owner)
    return people


def _names(value: str, path: str, blob: str) -> bool:
    """Whether a `Mergegate-Approve: <path> [<mode>] <blob>` value names this path and blob."""
    rest, _, named = value.rpartition(" ")
    if named != blob:
        return False
    if rest == path:
        return True
    head, _, mode = rest.rpartition(" ")
    return head == path and mode in ("100644", "100755")
