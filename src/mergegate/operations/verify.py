"""Re-check, from a bare clone and no runner state, everything the runner decided.

`audit verify` (audit_check.py) checks the hash chain on the audit branch and every commit of that
branch (linear, only appends, signed by a runner when the policy says so). `verify` also walks the
whole first-parent history of approved from the trust root, judges every commit again, and
cross-checks the records against it.
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from mergegate import clock
from mergegate.audit import dating
from mergegate.audit import log as audit
from mergegate.audit.records import Finished, Record, Scanned, Started, parse_time
from mergegate.errors import IntegrityError, MergegateError, NotYet
from mergegate.facts.assessor import Assessor
from mergegate.facts.audit_commits import Checker, every_commit
from mergegate.facts.branches import open_branch, refuse_old_layout, trust_root
from mergegate.facts.history import History
from mergegate.facts.policy_log import policy_lookup
from mergegate.git.repo import Repo
from mergegate.git.values import ZERO
from mergegate.github import gather as github
from mergegate.github.later import LaterReviews
from mergegate.github.later import reviewers as later_reviewers
from mergegate.operations.approval_ages import ApprovalAges
from mergegate.operations.audit_verify import FinishedTwice, Unapproved, bad_attestations
from mergegate.operations.emergencies import Tally
from mergegate.rules import eligibility
from mergegate.rules.break_glass import Owed
from mergegate.rules.job import Job
from mergegate.rules.model import Assessment, Decision
from mergegate.rules.policy import Policy, load_policy
from mergegate.runner.plan import Walk


def _finished_twice(records: list[Record]) -> list[str]:
    tally = FinishedTwice()
    return [problem for record in records if (problem := tally.add(record))]


def _references(repo: Repo, records_tip: str | None, records: list[Record]) -> None:
    unapproved = Unapproved()
    for record in records:
        unapproved.add(record)
    unapproved.check(repo, records_tip)


@dataclass(frozen=True)
class JobLine:
    """One job revision a commit introduces, as verify judged it again."""

    path: str
    blob: str
    approved: bool
    approvers: tuple[str, ...]
    reason: str

    def as_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "blob": self.blob,
            "approved": self.approved,
            "approvers": list(self.approvers),
            "reason": self.reason,
        }


@dataclass(frozen=True)
class CommitLine:
    commit: str
    kind: str
    summary: str
    jobs: tuple[JobLine, ...] = ()
    # For a judged commit: the commit of the policy that judged it, and the fewest people other
    # than their writers the judge counted for any change it brings (Assessment.reviewed_by).
    policy: str = ""
    reviewed_by: int = 0

    def as_json(self) -> dict[str, object]:
        return {
            "commit": self.commit,
            "kind": self.kind,
            "summary": self.summary,
            "jobs": [j.as_json() for j in self.jobs],
        }


@dataclass(frozen=True)
class VerifyReport:
    trust_root: str
    tip: str
    records: int
    commits: tuple[CommitLine, ...]
    violations: tuple[str, ...]
    warnings: tuple[str, ...] = field(default=())
    # (the commit the walk stopped at, why, how many first-parent commits were left unjudged):
    # evidence the runner is still waiting for. Not a violation, but never "ok" either.
    incomplete: tuple[str, str, int] | None = None
    policy: Policy | None = None  # in force after the last commit the walk judged
    owed: tuple[Owed, ...] = ()  # every break-glass run's review: one overdue fails verify (1)
    now: datetime | None = None

    @property
    def overdue(self) -> tuple[Owed, ...]:
        return tuple(o for o in self.owed if self.now is not None and o.overdue(self.now))

    @property
    def exit_code(self) -> int:
        if self.violations:
            return IntegrityError.exit_code
        return NotYet.exit_code if self.incomplete or self.overdue else 0


def verify_history(
    *,
    repo_path: Path,
    remote: str,
    branch: str,
    fetch: bool,
    trust: str | None,
    progress: Callable[[int, int], None] | None = None,
) -> VerifyReport:
    """`progress(done, total)` is called once per first-parent commit judged (the CLI shows it on a
    terminal)."""
    repo = Repo(repo_path)
    source = open_branch(repo, remote=remote, branch=branch, fetch=fetch)
    tip = source.tip()
    records_tip = source.audit_tip()
    refuse_old_layout(repo, tip, records_tip)
    root, warnings = trust_root(repo, tip, trust)
    violations: list[str] = []
    try:
        last_seen = source.check_not_rewritten(tip, records_tip)
    except IntegrityError as exc:
        violations.append(str(exc))
        last_seen = None
    records: list[Record] = []
    mentioned: Callable[[str, str], bool] | None = (
        None  # None: ask the audit with git grep, as a pass does
    )
    chain = repo.first_parent_chain(root, tip)
    with ThreadPoolExecutor(max_workers=1) as pool:
        # The merged sides, their authors and trees from one read of the whole history, not a few
        # git processes (and a listing of the whole tree) per merge; it also reads ahead each
        # commit's diff and parents. Where it cannot answer as git would, git is asked, as a pass
        # does. Mostly git's work, so it is read while this thread reads the records.
        reading = pool.submit(History.read, repo, root, chain)
        try:
            records = audit.read_all(repo, records_tip)
            # Every record is in memory: which job revisions they name is a set, not a git grep per
            # file.
            revisions = {r.revision for r in records}
            mentioned = lambda path, blob: blob != ZERO and (path, blob) in revisions  # noqa: E731
            _references(repo, records_tip, records)
        except IntegrityError as exc:
            violations.append(f"audit: {exc}")
        history = reading.result()
    if history is None:
        # What the walk asks of each commit of the chain (diff, parents), read in two processes, not
        # two per commit.
        repo.prefetch(chain)
    seen = _first_seen(repo, records, chain, root)
    policy = load_policy(lambda p: repo.read_file(root, p), commit=root)
    now = clock.now()
    # Review-based decisions are re-derived from the evidence the records name, offline.
    try:
        stored = github.stored_evidence(repo, records_tip, records)
    except IntegrityError as exc:
        violations.append(f"evidence: {exc}")
        stored = {}
    # Never asks GitHub; with a fetch it does fetch a squash's PR head from the remote, as the
    # runner does.
    reviews = github.ReviewSource(
        repo,
        now=now,
        settings=None,
        stored=stored,
        offline=True,
        remote=source.remote if fetch else None,
    )
    walk = Walk(
        Assessor(repo, reviews=reviews, history=history),
        policy,
        at=now,
        records=records_tip,
        mentioned=mentioned,
    )
    lines: list[CommitLine] = [
        CommitLine(root, "trust root", f"policy trusted as it is ({policy.where})")
    ]
    valid: dict[tuple[str, str, str], str] = {}
    retries: dict[
        tuple[str, str, str], tuple[int, bool]
    ] = {}  # (retries, idempotent) of each valid revision
    jobs_of: dict[
        tuple[str, str], Job
    ] = {}  # the job of each valid revision (retries are judged again by later policies)
    rejected: dict[tuple[str, str, str], str] = {}
    vetoed: dict[
        tuple[str, str], tuple[int, str]
    ] = {}  # (path, blob) -> (chain index, veto commit)
    policies: dict[str, Policy] = {root: policy}
    # every decision, every renewal (commits, later reviews): for the approvals' ages at start
    later = LaterReviews(repo, records_tip, reviews, now=now, records=records)
    ages = ApprovalAges(later)
    incomplete: tuple[str, str, int] | None = None
    unreached: set[str] = set()
    emergencies = Tally()  # every revision the judge runs on a signed emergency
    for done, sha in enumerate(chain, start=1):
        if progress is not None:
            progress(done, len(chain))
        # Record times are trustworthy only when runners sign the audit commits.
        at = seen[sha][0] if walk.policy.runners and sha in seen else now
        judged_by = walk.policy.commit
        judging = walk.policy
        try:
            assessment = walk.step(sha, at=at)
        except NotYet as exc:
            # Without the evidence (none recorded: the runner is still waiting for it) this commit,
            # and what follows it, cannot be re-derived; a record about any of them is flagged
            # below.
            lines.append(CommitLine(sha, "waiting", exc.message))
            incomplete = (sha, exc.message, len(chain) - done + 1)
            if isinstance(exc, github.HeadMissing):
                # The records named evidence for it; only this clone lacks an object to check it
                # against. What the walk did not reach is unverified here, not a violation.
                unreached.update(chain[done - 1 :])
            break
        except MergegateError as exc:
            violations.append(f"commit {sha[:12]}: {exc}")
            lines.append(CommitLine(sha, "tampering", str(exc)))
            break
        policies[sha] = assessment.policy
        for veto in assessment.vetoes:
            vetoed.setdefault((veto.path, veto.blob), (len(lines), veto.commit))
        ages.note(assessment, seen.get(sha), len(lines), judging)
        lines.append(
            replace(
                _tally(sha, assessment, valid, rejected, retries, jobs_of),
                policy=judged_by,
                reviewed_by=assessment.reviewed_by,
            )
        )
        emergencies.add(assessment, judging)
    # Every commit of the audit branch, each signed (with runners) by the policy the walk found in
    # force.
    assessor = Assessor(repo, reviews=reviews)
    checker = Checker(
        repo,
        assessor.signer(at=now),
        tip,
        policy_lookup(
            repo, lambda: assessor, at=now, root=root, records=records_tip, known=policies
        ),
    )
    try:
        checker.check(every_commit(repo, records_tip))
        violations += [f"audit: {p}" for p in bad_attestations(repo, records_tip, records, checker)]
    except IntegrityError as exc:
        violations.append(f"audit: {exc}")
    except NotYet as exc:
        # An audit commit names a tip past where the walk stopped: its policy is not derivable yet
        # either.
        if incomplete is None:
            incomplete = (tip, f"audit commits: {exc.message}", 0)
    reached = [r for r in records if r.commit not in unreached]
    violations.extend(_cross_check(reached, valid, rejected, set(chain), retries))
    position = {sha: index for index, sha in enumerate(chain, start=1)}
    violations.extend(_started_after_veto(records, vetoed, position, checker.judged))
    violations.extend(_ran_after_veto(records, vetoed, position))
    violations.extend(_late_retries(repo, records, jobs_of, policies, checker.judged))
    violations.extend(
        _outside_windows(emergencies.ordinary(records), jobs_of, policies, checker.judged)
    )
    violations.extend(ages.expired_starts(records, policies, (checker.judged, seen), position))
    violations.extend(_judged_later(records))
    violations.extend(
        _unvouched_dates(repo, seen, [root, *chain], policies, checker.appended, Assessor(repo))
    )
    owed, problems = emergencies.check(
        repo, tip, reached, walk.policy, at=now, reviewed=later_reviewers(later)
    )
    violations.extend(problems)
    if not violations and last_seen is not None:
        source.remember(tip, records_tip, last_seen)
    return VerifyReport(
        root,
        tip,
        len(records),
        tuple(lines),
        tuple(violations),
        tuple(warnings),
        incomplete,
        walk.policy,
        tuple(owed),
        now,
    )


def _tally(
    sha: str,
    assessment: Assessment,
    valid: dict[tuple[str, str, str], str],
    rejected: dict[tuple[str, str, str], str],
    retries: dict[tuple[str, str, str], tuple[int, bool]],
    jobs_of: dict[tuple[str, str], Job],
) -> CommitLine:
    """One judged commit's line, its revisions entered as valid or rejected (with what a later
    retry is judged by)."""
    jobs = []
    for d in assessment.decisions:
        (valid if d.runnable else rejected)[(d.path, d.blob, d.commit)] = d.reason
        if d.runnable and d.job is not None:
            retries[(d.path, d.blob, d.commit)] = (d.job.retries, d.job.idempotent)
            jobs_of.setdefault((d.path, d.blob), d.job)
        jobs.append(JobLine(d.path, d.blob, d.runnable, tuple(d.approvers), d.reason))
    kind = (
        "policy change"
        if assessment.policy_changed and assessment.kind == "approval"
        else assessment.kind
    )
    return CommitLine(sha, kind, assessment.summary, tuple(jobs))


def _started_after_veto(
    records: list[Record],
    vetoed: dict[tuple[str, str], tuple[int, str]],
    position: dict[str, int],
    judged: list[tuple[int, str]],
) -> list[str]:
    """A revision that started although a signed veto of it was on approved before its approving
    merge, or before the tip of approved its runner had judged when it pushed the `started` record.

    `judged` pairs the seq of the first record each audit commit appended with that commit's
    Mergegate-Approved trailer: a runner re-checks vetoes up to that tip before every claim.
    """
    firsts = [seq for seq, _ in judged]
    problems = []
    for record in records:
        if not isinstance(record, Started):
            continue
        veto = vetoed.get((str(record.path), str(record.blob)))
        if veto is None:
            continue
        merged = position.get(str(record.commit))
        if merged is not None and veto[0] < merged:
            problems.append(
                f"seq {record.seq}: started {record.path} at {str(record.blob)[:7]} "
                "although "
                f"commit {veto[1][:12]} vetoed it before its approval"
            )
            continue
        at = bisect.bisect_right(firsts, record.seq) - 1
        tip = position.get(judged[at][1]) if at >= 0 else None
        if tip is not None and veto[0] <= tip:
            problems.append(
                f"seq {record.seq}: started {record.path} at {str(record.blob)[:7]} "
                "although "
                f"commit {veto[1][:12]} vetoed it before the claim (its runner had judged approved "
                f"at {judged[at][1][:12]})"
            )
    return problems


def _ran_after_veto(
    records: list[Record],
    vetoed: dict[tuple[str, str], tuple[int, str]],
    position: dict[str, int],
) -> list[str]:
    """A run whose process started although a signed veto of its revision was on approved up to
    the tip its runner says it had looked at for vetoes when it started it (`vetoes_checked`: after
    the claim landed, issue 23, item 8). Such a run must have been closed `vetoed`, never started.
    """
    problems = []
    for record in records:
        if not isinstance(record, Finished) or not record.vetoes_checked:
            continue
        veto = vetoed.get((str(record.path), str(record.blob)))
        looked = position.get(record.vetoes_checked)
        if veto is not None and looked is not None and veto[0] <= looked:
            problems.append(
                f"seq {record.seq}: {record.path} at {str(record.blob)[:7]} ran (run "
                f"{record.run_id}, {record.status}) although commit {veto[1][:12]} vetoed it "
                f"before its process started (its runner had looked at approved up to "
                f"{record.vetoes_checked[:12]})"
            )
    return problems


def _late_retries(
    repo: Repo,
    records: list[Record],
    jobs: dict[tuple[str, str], Job],
    policies: dict[str, Policy],
    judged: list[tuple[int, str]],
) -> list[str]:
    """A retry that started although, at the tip of approved its runner had judged, the job's file
    held another revision (or none), or the policy in force there denied the job
    (eligibility.late_refusal)."""
    firsts = [seq for seq, _ in judged]
    problems = []
    for record in records:
        if not isinstance(record, Started) or record.attempt_number < 2:
            continue
        path, blob = str(record.path), str(record.blob)
        at = bisect.bisect_right(firsts, record.seq) - 1
        tip = judged[at][1] if at >= 0 else None
        job = jobs.get((path, blob))
        if tip is None or job is None or tip not in policies:
            continue
        decision = Decision(path, blob, str(record.commit), job, True, "")
        why = eligibility.late_refusal(
            decision,
            eligibility.Standing(tip, repo.file_blob(tip, path), policies[tip]),
            record.attempt_number,
        )
        if why is not None:
            problems.append(f"seq {record.seq}: started {path} at {blob[:7]} although {why}")
    return problems


def _outside_windows(
    records: list[Record],
    jobs: dict[tuple[str, str], Job],
    policies: dict[str, Policy],
    judged: list[tuple[int, str]],
) -> list[str]:
    """A start judged outside the change windows of the policy in force at the tip of approved its
    runner had judged (eligibility.in_window), by the time the runner signed (`judged`)."""
    firsts = [seq for seq, _ in judged]
    problems = []
    for record in records:
        if not isinstance(record, Started):
            continue
        path, blob = str(record.path), str(record.blob)
        at = bisect.bisect_right(firsts, record.seq) - 1
        tip = judged[at][1] if at >= 0 else None
        job, when = jobs.get((path, blob)), dating.judged_time(record)
        if tip is None or job is None or when is None or tip not in policies:
            continue
        decision = Decision(path, blob, str(record.commit), job, True, "")
        why = eligibility.window_violation(policies[tip], decision, when)
        if why is not None:
            problems.append(f"seq {record.seq}: started {path} at {blob[:7]} although {why}")
    return problems


def _judged_later(records: list[Record]) -> list[str]:
    """A `judged` time no runner writes: unreadable, or after the record's own time (a pass judges
    at its start and writes its records after)."""
    problems = []
    for record in records:
        if not record.has("judged"):
            continue
        said = record.written("judged")
        judged, when = parse_time(said), parse_time(record.time)
        if judged is None or (when is not None and judged > when):
            problems.append(
                f"seq {record.seq}: {record.event} record says it was judged at "
                f"{str(said)[:40]!r}, "
                f"which is {'not a time' if judged is None else 'after its own time'}"
            )
    return problems


def _unvouched_dates(
    repo: Repo,
    seen: dict[str, tuple[datetime, int]],
    walked: list[str],
    policies: dict[str, Policy],
    appended: list[tuple[int, str]],
    assessor: Assessor,
) -> list[str]:
    """A commit dated by a record (key lifetimes judged at its time) whose audit commit no runner of
    the policy in force before that commit signed: only such a runner vouches for when a commit was
    judged. (A change's own runner keys would vouch for the change: a policy change signed by an
    expired key, dated inside the key's life in an audit commit signed by a runner key the change
    adds, is adopted.)"""
    firsts = [first for first, _ in appended]
    problems = []
    for before, sha in itertools.pairwise(walked):
        policy = policies.get(before)
        if sha not in seen or policy is None or not policy.runners:
            continue  # (not walked; or record times were not trusted for it: judged at the clock)
        seq = seen[sha][1]
        at = bisect.bisect_right(firsts, seq) - 1
        commit = appended[at][1] if at >= 0 else None
        # (the runner key judged at the record's time, as approver keys are)
        when = seen[sha][0]
        if (
            commit is None
            or not assessor.signature(repo.commit(commit), policy.runner_keys(), at=when).ok
        ):
            problems.append(
                f"commit {sha[:12]} is dated by seq {seq}, appended by audit commit "
                f"{(commit or '?')[:12]}, which no "
                "runner of the policy in force before it signed: that record cannot say when the "
                "commit was judged"
            )
    return problems


def _first_seen(
    repo: Repo, records: list[Record], chain: list[str], root: str
) -> dict[str, tuple[datetime, int]]:
    """When the runner judged each commit of `chain` (the commits after `root`), as the first record
    naming it says (`judged`, else its time), and that record's seq: the time key lifetimes are
    judged at."""
    seen: dict[str, tuple[datetime, int]] = {}
    walked = [root, *chain]
    index = {sha: i for i, sha in enumerate(walked)}
    for record in records:
        when = dating.judged_time(record)
        if when is None:
            # says nothing about when (an unauthenticated record; a runner always writes a zone)
            continue
        commits: list[str | None] = [record.commit]
        if isinstance(record, Scanned) and record.start:
            start, end = index.get(record.start), index.get(str(record.commit))
            if start is not None and end is not None:
                # start..commit along the chain: what `rev-list --first-parent start..commit` lists.
                commits = list(walked[start + 1 : end + 1])
            else:
                commits = list(repo.first_parent_chain(record.start, str(record.commit)))
        for sha in commits:
            if isinstance(sha, str) and sha in index and sha != root and sha not in seen:
                seen[sha] = (when, record.seq)
    return seen


def _cross_check(
    records: list[Record],
    valid: dict[tuple[str, str, str], str],
    rejected: dict[tuple[str, str, str], str],
    chain: set[str],
    retries: dict[tuple[str, str, str], tuple[int, bool]] | None = None,
) -> list[str]:
    problems: list[str] = []
    started: dict[tuple[str, str], list[Started]] = {}
    finished: dict[str, Finished] = {}
    for record in records:
        if isinstance(record, Finished) and record.run_id is not None:
            finished.setdefault(record.run_id, record)
        if not isinstance(record, Started):
            continue
        key = (str(record.path), str(record.blob), str(record.commit))
        if key[2] not in chain:
            problems.append(
                f"seq {record.seq}: started {key[0]} from commit {key[2][:12]}, which is not on "
                "approved after the trust root"
            )
        elif key not in valid:
            why = rejected.get(key, "the commit introduces no such job revision")
            problems.append(
                f"seq {record.seq}: started {key[0]} at {key[1][:7]} without a valid approval: "
                f"{why}"
            )
        started.setdefault(key[:2], []).append(record)
    # Several `started` records of one revision are legitimate only as retries the job and the
    # policy allow.
    for attempts in started.values():
        if len(attempts) < 2:
            continue
        first = attempts[0]
        allowed, idempotent = (retries or {}).get(
            (str(first.path), str(first.blob), str(first.commit)), (0, False)
        )
        problems.extend(
            eligibility.check_attempts(attempts, finished, retries=allowed, idempotent=idempotent)
        )
    return [*problems, *_finished_twice(records)]
