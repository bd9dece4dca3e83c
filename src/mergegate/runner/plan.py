"""Planning a pass: judge every first-parent commit since the last one processed.

Read-only: `run`, `status` and `check` all start here, and only the runner acts on the result.
Commits come from `approved`; what the previous passes did (and where they stopped) comes from the
records on the audit branch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING

from mergegate.audit import log as audit
from mergegate.audit.records import (
    Finished,
    OpenCommit,
    PolicyChange,
    Record,
    Refusal,
    Started,
)
from mergegate.errors import IntegrityError, NotYet
from mergegate.facts.approval_dates import ApprovalDates
from mergegate.facts.assessor import Assessor
from mergegate.facts.owed_reviews import gate_owed
from mergegate.facts.policy_log import policy_in_force, policy_lookup, remember_judged
from mergegate.git.repo import Repo
from mergegate.rules.break_glass import Owed, overdue_by
from mergegate.rules.eligibility import (
    AttemptHistory,
    Queued,
    Refused,
    Runnable,
    Standing,
    for_runner,
    histories,
    judge_attempts,
    still_open,
    waiting_reason,
)
from mergegate.rules.job import is_job_path
from mergegate.rules.model import Assessment, Decision, Veto
from mergegate.rules.policy import Policy
from mergegate.rules.renewal import RenewalVote
from mergegate.runner.leases import mine

if TYPE_CHECKING:
    from mergegate.github.evidence import Evidence
    from mergegate.github.gather import ReviewSource
    from mergegate.github.later import LaterReviews


class Walk:
    """Judges first-parent commits in order, carrying what a walk must remember.

    The policy in force changes only through an adopted policy change; other files changed without
    their quorum (by an unsigned push, or a merge whose approvers wrote them) stay "unapproved"
    until a merge with that quorum changes them again, and no job runs in a tree that holds such a
    file.
    """

    def __init__(
        self,
        assessor: Assessor,
        policy: Policy,
        unapproved: dict[str, str] | None = None,
        *,
        at: datetime,
        records: str | None,
        mentioned: Callable[[str, str], bool] | None = None,
    ) -> None:
        self.assessor = assessor
        self.at = at  # the clock signatures are judged at, unless a step says otherwise
        self.policy = policy
        self.unapproved = dict(unapproved or {})
        self.seen: set[tuple[str, str]] = set()
        # Bytes merged back after an earlier life on approved (a job revision this walk or the audit
        # has seen, a file an unapproved commit changed) get their full authorship checked;
        # searching all history for every file would cost seconds. (The audit names job revisions
        # only: asking it about other files is a wasted git grep each.) `mentioned` answers
        # audit.mentions from records already read (verify has them all).
        self.mentions = mentioned or (
            lambda path, blob: audit.mentions(assessor.repo, records, path, blob)
        )

    def known(self, path: str, blob: str) -> bool:
        """Whether these bytes may have had an earlier life (`assessor.Known`)."""
        return (
            path in self.unapproved
            or (path, blob) in self.seen
            or (is_job_path(path) and self.mentions(path, blob))
        )

    def step(self, sha: str, *, at: datetime | None = None) -> Assessment:
        """Judge the next commit, its signatures at `at` (by default the walk's clock)."""
        # The judge decides what stays unapproved and what it taints; the walk carries it.
        assessment = self.assessor.assess(
            sha, self.policy, self.unapproved, at=at or self.at, known=self.known
        )
        self.unapproved = dict(assessment.unapproved)
        self.policy = assessment.policy
        self.seen.update((d.path, d.blob) for d in assessment.decisions)
        return assessment


@dataclass
class Plan:
    """What one pass found: decisions to record or run, and where the walk ended."""

    tip: str
    start: str
    policy: Policy  # in force at tip
    start_policy: Policy  # in force at start
    items: list[tuple[Decision, Policy]] = field(default_factory=list)
    assessments: list[Assessment] = field(default_factory=list)
    vetoes: list[Veto] = field(default_factory=list)
    handled: dict[tuple[str | None, str | None, str | None], str] = field(default_factory=dict)
    orphans: list[Started] = field(default_factory=list)
    expired: list[Started] = field(default_factory=list)  # any runner's claims whose lease ran out
    handled_policy: list[PolicyChange] = field(default_factory=list)
    unapproved: dict[str, str] = field(default_factory=dict)
    all_vetoes: dict[tuple[str, str], Veto] | None = None
    new_commits: int = 0
    waiting: tuple[str, str] | None = (
        None  # (commit, why) when the walk stopped for missing evidence
    )
    # What to do with each job revision (eligibility.py), in history order:
    runnable: list[Runnable] = field(default_factory=list)  # claim these (for this runner's labels)
    queued: list[Queued] = field(
        default_factory=list
    )  # approved, but not now: labels, backoff, running
    refused: list[Refused] = field(
        default_factory=list
    )  # record `rejected` for these, never run them
    reopened: list[str] = field(
        default_factory=list
    )  # earlier commits judged again: they still had open jobs
    open_before: tuple[OpenCommit, ...] = ()  # the last scanned record's `open` list
    carried: list[OpenCommit] = field(
        default_factory=list
    )  # open entries not judged this pass (evidence not there)
    before: dict[str, dict[str, str]] = field(
        default_factory=dict
    )  # commit -> the unapproved map before it
    revisions: list[Record] = field(
        default_factory=list
    )  # every record naming a decided blob (one grep; the claim book's start)
    # GitHub's answers asked again after a merge, holding new approving reviews (github/later.py):
    # the `scanned` record names them. `asking`: some revision waits for such reviews.
    later: dict[str, Evidence] = field(default_factory=dict)
    asking: bool = False


def plan(
    repo: Repo,
    tip: str,
    root: str,
    tail: audit.Tail,
    *,
    records: str | None,
    at: datetime,
    runner_name: str,
    clone: str | None = None,
    remember: bool = True,
    reviews: ReviewSource | None = None,
    labels: frozenset[str] | None = None,
    before_walk: Callable[[Policy], None] | None = None,
) -> Plan:
    """Walk from where the last pass stopped to tip and judge every commit on the way.

    `records` is the audit branch's tip (None before the first pass), `tail` its end.
    A commit whose evidence is not there yet (NotYet: GitHub's API down, say) ends the
    walk before it: the plan's tip is the last commit judged, so the next pass judges
    that commit again, and nothing after it is decided out of order.

    Commits the last `scanned` record lists as `open` (a job waiting for a runner
    with its labels, for its retry, or running with retries left) are judged again
    first. `labels` are the runner's (None: any runner, for status, check and plan).
    """
    # 1. Resume after the last scanned commit, which must still be in the history.
    start, unapproved = root, {}
    if tail.scanned is not None:
        scanned = str(tail.scanned.commit)
        if repo.rev(scanned) is None or not repo.is_ancestor(scanned, tip):
            raise IntegrityError(
                f"the audit says commit {scanned[:12]} was processed, but it is not an ancestor of "
                f"approved at {tip[:12]}: history was rewritten (force-push?)"
            )
        if repo.is_ancestor(root, scanned, remember=remember):
            start, unapproved = scanned, audit.read_unapproved(repo, records, tail.scanned)
        elif not repo.is_ancestor(scanned, root):
            raise IntegrityError(
                f"trust root {root[:12]} and the last processed commit {scanned[:12]} are on "
                "different histories"
            )
    # 2. The policy in force at the start comes from the history itself (the
    #    trust root and every policy change adopted since), never from a claim
    #    in the audit, which anyone who can push might append to.
    assessor = Assessor(repo, reviews=reviews)
    walk = Walk(
        assessor,
        policy_in_force(
            repo, assessor, at=at, root=root, upto=start, records=records, remember=remember
        ),
        unapproved,
        at=at,
        records=records,
    )
    if before_walk is not None:
        before_walk(
            walk.policy
        )  # e.g. the runner refuses here, before asking GitHub anything, when it cannot sign
    result = Plan(tip=tip, start=start, policy=walk.policy, start_policy=walk.policy)
    # 3. Judge each first-parent commit by the policy in force before it.
    chain = repo.first_parent_chain(start, tip)
    if chain and repo.commit(chain[0]).parents[:1] != (start,):
        raise IntegrityError(
            f"the first-parent history of approved at {tip[:12]} no longer passes through "
            f"{start[:12]}, where the last pass stopped",
            hint="approved was fast-forwarded to a branch that merged approved into itself; "
            "approvals are merges into approved (git merge --no-ff)",
        )
    result.tip = start
    if len(chain) > 1:
        # What the walk asks of each commit (its diff, its parents as git reads them), in two git
        # processes for the chain instead of two per commit, as verify reads it (a pass after
        # downtime).
        repo.prefetch(chain)
    for sha in chain:
        judged_by = walk.policy
        # The map before each commit: a job of it that stays open is judged again from it.
        result.before[sha] = walk.unapproved
        try:
            assessment = walk.step(sha)
        except NotYet as exc:
            result.waiting = (sha, exc.message)
            break
        result.assessments.append(assessment)
        result.items.extend((d, judged_by) for d in assessment.decisions)
        result.vetoes.extend(assessment.vetoes)
        result.tip = sha
    result.new_commits = len(result.assessments)
    result.policy = walk.policy
    result.unapproved = walk.unapproved
    if remember:  # `run --dry-run` writes nothing, not even this clone's memory of judging times
        remember_judged(repo, [a.commit for a in result.assessments if a.policy_changed], at)
    # 4. What a previous pass that stopped midway already recorded is not done again.
    finished = {r.run_id for r in tail.since_scanned if isinstance(r, Finished)}
    for record in tail.since_scanned:
        if isinstance(record, Started | Refusal):
            result.handled[(record.path, record.blob, record.commit)] = record.event
        if isinstance(record, PolicyChange):
            result.handled_policy.append(record)
        if (
            isinstance(record, Started)
            and record.run_id not in finished
            and mine(record, runner_name, clone)
        ):
            result.orphans.append(record)
    # 5. Commits with jobs still open, judged again, then what every revision may do now.
    reopened = _reopen(repo, result, tail, root=root, records=records, at=at, reviews=reviews)
    new = [(d, p, result.before.get(d.commit)) for d, p in result.items]
    later = _later(repo, records, reviews, at=at)
    _sort(
        repo,
        result,
        [*reopened, *new],
        records=records,
        at=at,
        labels=labels,
        root=root,
        later=later,
    )
    _after_merges(repo, result, later, root=root, records=records, at=at)
    return result


def _later(
    repo: Repo, records: str | None, reviews: ReviewSource | None, *, at: datetime
) -> LaterReviews | None:
    """Reviews given after a merge, for revisions that need them (none without review evidence)."""
    if reviews is None or not reviews.stored:
        return None
    from mergegate.github.later import LaterReviews

    return LaterReviews(repo, records, reviews, now=at)


def _reopen(
    repo: Repo,
    result: Plan,
    tail: audit.Tail,
    *,
    root: str,
    records: str | None,
    at: datetime,
    reviews: ReviewSource | None,
) -> list[tuple[Decision, Policy, dict[str, str] | None]]:
    """Judge again the commits the last `scanned` record lists as open, each by the policy in force
    before it.

    Trust stays with the history: the record only says which commits to look at again, and each must
    be on approved's first-parent line after the trust root.
    """
    scanned = tail.scanned
    if scanned is None:
        return []
    if "open" in scanned.extra:
        # (a runner writes each entry as {commit, unapproved_count, unapproved_file}, nothing else)
        raise IntegrityError(
            f"seq {scanned.seq}: the scanned record's open list is not a list of open commits"
        )
    if not scanned.open_commits:
        return []
    result.open_before = scanned.open_commits
    line = set(repo.first_parent_chain(root, result.start))
    assessor = Assessor(repo, reviews=reviews)
    judge = Assessor(repo)
    policy_at = policy_lookup(repo, lambda: judge, at=at, root=root, records=records)
    found: list[tuple[Decision, Policy, dict[str, str] | None]] = []
    for entry in result.open_before:
        sha = entry.commit
        if sha not in line and repo.rev(sha) is not None and repo.is_ancestor(sha, root):
            # On approved before a trust root pinned since: that root is where judging starts now.
            repo.warnings.append(
                f"{sha[:12]} is before the trust root {root[:12]}: the jobs of it that were still "
                "open "
                "(waiting for a runner, or for a retry) are not judged again"
            )
            continue
        if sha not in line:
            raise IntegrityError(
                f"seq {scanned.seq}: the scanned record lists {sha[:12]} as open, but it "
                "is not "
                f"on the first-parent history of approved after the trust root {root[:12]}"
            )
        unapproved = audit.read_unapproved(repo, records, scanned, entry)
        parent = repo.commit(sha).parents[0]
        policy = policy_at(parent)
        try:
            assessment = Walk(assessor, policy, unapproved, at=at, records=records).step(sha)
        except NotYet:
            result.carried.append(
                entry
            )  # its evidence is not there now: kept open, judged again next pass
            continue
        result.reopened.append(sha)
        result.before[sha] = unapproved
        found.extend((d, policy, unapproved) for d in assessment.decisions)
    return found


def _sort(
    repo: Repo,
    result: Plan,
    decisions: list[tuple[Decision, Policy, dict[str, str] | None]],
    *,
    records: str | None,
    at: datetime,
    labels: frozenset[str] | None,
    root: str,
    later: LaterReviews | None = None,
) -> None:
    """Each decision to runnable, queued or refused (or nothing: done), by its recorded attempts.

    An expired revision approved through a pull request is judged again with the approving
    reviews given on it since the merge (`later`: GitHub asked again, for it only)."""
    if not decisions:
        return
    result.revisions = audit.grep_any(repo, records, {d.blob for d, _, _ in decisions})
    known = histories(result.revisions)
    late = set(result.reopened)
    at_tip: dict[str, str | None] = {}

    def standing(path: str) -> Standing:
        if path not in at_tip:
            at_tip[path] = repo.file_blob(result.tip, path)
        return Standing(result.tip, at_tip[path], result.policy)

    walked = frozenset(a.commit for a in result.assessments)
    dates = ApprovalDates(repo, records, result.tip, root=root, now=at, walked=walked)
    overdue = _Overdue(repo, result, root, records=records, at=at)
    seen: set[tuple[str, str, str]] = set()
    first: dict[
        tuple[str, str], str
    ] = {}  # (path, blob) -> the commit whose approval of it this pass runs
    for decision, policy, _ in decisions:
        key = (decision.path, decision.blob, decision.commit)
        if key in seen:
            continue
        seen.add(key)
        history = known.get((decision.path, decision.blob)) or AttemptHistory()
        if not decision.runnable:
            # A revision that already ran at this commit (a reopened commit judged again later,
            # say after a key expired) keeps its records: nothing new is said about it.
            if (
                key not in result.handled
                and history.closed_at(decision.commit) is None
                and not history.at(decision.commit)
            ):
                result.refused.append(Refused(decision, policy, decision.reason))
            continue
        attempts = partial(
            judge_attempts,
            decision,
            policy,
            history,
            now=at,
            late=decision.commit in late,
            standing=standing(decision.path),
            approved=dates.approved(decision, policy, result.policy),
            overdue=overdue(decision),
        )
        renewals = dates.renewals(decision, result.policy)
        verdict = attempts(renewals=renewals)
        if later is not None and _expired(verdict):
            result.asking = True
            reviewed = later.votes(decision.commit, policy, ask=True, now=result.policy)
            if reviewed:
                # Approving reviews given after the merge renew it as renewal commits do.
                later_votes = [RenewalVote(v.person, v.key, v.when) for v in reviewed]
                verdict = attempts(renewals=[*renewals, *later_votes])
        if isinstance(verdict, Runnable | Queued) and verdict.decision.commit != first.setdefault(
            (decision.path, decision.blob), decision.commit
        ):
            # The same bytes approved at two commits of this pass (added, removed, added again):
            # a revision runs at most once, from the first.
            earlier = first[(decision.path, decision.blob)]
            verdict = Refused(
                decision,
                policy,
                f"this exact revision of {decision.path} is also approved at {earlier[:7]}, "
                f"and runs from there; a job revision runs at most once",
            )
        if isinstance(verdict, Runnable):
            verdict = for_runner(verdict, labels)
        if isinstance(verdict, Runnable):
            result.runnable.append(verdict)
        elif isinstance(verdict, Queued):
            result.queued.append(verdict)
        elif isinstance(verdict, Refused) and (
            verdict.expiry is not None or result.handled.get(key) not in ("rejected", "vetoed")
        ):
            # (A `started` since the last scanned record, say by `run --job`, which writes none,
            # does not make a refusal of the next attempt already recorded. An expiry is one the
            # records do not hold yet: eligibility looked.)
            result.refused.append(verdict)


def _expired(verdict: Runnable | Queued | Refused | None) -> bool:
    """Whether a verdict is an expiry (first recorded now, or recorded and waiting)."""
    if isinstance(verdict, Refused):
        return verdict.expiry is not None
    return isinstance(verdict, Queued) and verdict.state == "expired"


def _after_merges(
    repo: Repo,
    result: Plan,
    later: LaterReviews | None,
    *,
    root: str,
    records: str | None,
    at: datetime,
) -> None:
    """GitHub asked again about the merges of emergency runs whose review is still owed (only
    those), and every answer with new approving reviews kept for the `scanned` record."""
    if later is None:
        return
    from mergegate.github.later import reviewers

    uses = audit.grep(repo, records, '"emergency":{')
    if uses:
        owed = gate_owed(
            repo,
            result.tip,
            root,
            uses,
            records,
            result.policy,
            at=at,
            reviewed=reviewers(later),
            reviews=later.source,
        )
        result.asking = result.asking or any(not o.given for o in owed)
    result.later = dict(later.gathered)


class _Overdue:
    """Who owes an overdue review now, asked only for an emergency: a grep of the records and a
    judgement of each earlier emergency's commit, once a pass."""

    def __init__(self, repo: Repo, result: Plan, root: str, *, records: str | None, at: datetime):
        self.repo, self.result, self.root, self.records, self.at = repo, result, root, records, at
        self.found: dict[str, Owed] | None = None

    def __call__(self, decision: Decision) -> dict[str, Owed] | None:
        if decision.emergency is None:
            return None
        if self.found is None:
            uses = audit.grep(self.repo, self.records, '"emergency":{')
            work = self.result
            owed = gate_owed(
                self.repo, work.tip, self.root, uses, self.records, work.policy, at=self.at
            )
            self.found = overdue_by(owed, self.at)
        return self.found


def open_after(
    work: Plan, outcomes: dict[tuple[str, str, str], str]
) -> tuple[list[OpenCommit], dict[str, bytes]]:
    """The `open` list of this pass's `scanned` record, and the evidence files it names.

    `outcomes` maps (path, blob, commit) to what this pass did with a runnable item (its status, or
    `claimed`); an item it did not take stays open.
    """
    commits: list[str] = []
    items: list[Runnable | Queued] = [*work.runnable, *work.queued]
    for item in items:
        key = (item.decision.path, item.decision.blob, item.decision.commit)
        if item.decision.commit not in commits and still_open(item, outcomes.get(key)):
            commits.append(item.decision.commit)
    for refused in work.refused:
        # An expired approval stays open: a renewal lets it run (rules/renewal.py).
        if refused.expiry is not None and refused.decision.commit not in commits:
            commits.append(refused.decision.commit)
    entries: list[OpenCommit] = list(work.carried)
    files: dict[str, bytes] = {}
    for sha in commits:
        count, digest, held = audit.unapproved_ref(work.before.get(sha, {}))
        if held is not None:
            files[held.path] = held.data
        entries.append(OpenCommit(sha, count, digest))
    return entries, files


def why_not(
    work: Plan | None, repo: Repo, tip: str, path: str, *, labels: tuple[str, ...]
) -> tuple[int, str, str]:
    """(exit code, state, reason) for a job path a `--job` pass did not run."""
    if work is not None:
        for queued in work.queued:
            if queued.decision.path != path:
                continue
            if queued.state == "queued":  # its labels: this runner lacks some
                return 2, "queued", f"{queued.reason}; pass them with --label"
            return 0, queued.state, queued.reason
        for refused in work.refused:
            if refused.decision.path == path:
                return 1, "rejected", refused.reason
        for item in work.runnable:
            if item.path == path:
                return (
                    0,
                    "queued",
                    f"{waiting_reason(item.runs_on, frozenset(labels))}; not claimed in this pass",
                )
        if work.waiting is not None:
            return (
                1,
                "waiting",
                f"the walk waits for evidence at {work.waiting[0][:7]}: {work.waiting[1]}",
            )
    if repo.read_file(tip, path) is None:
        return 2, "unknown", f"no file {path} on approved at {tip[:7]}"
    return (
        0,
        "done",
        "nothing to run: this revision already ran, is running, or was recorded (see mergegate "
        "status)",
    )
