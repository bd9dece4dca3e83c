"""Which approved job revisions may run now: attempts, retries, backoff and runner labels.

Pure: handed the judge's decisions, what the audit records say about them and the time, never git.
Planning (`planning.plan`) calls it for every decision a pass considers; the runner claims what it
returns as runnable, `status` shows why the rest waits, and `verify` checks recorded attempts by the
same rules.

The rules (docs/execution.md, "Retries and labels"):
- each attempt is its own run: a `started` record (with `attempt`, 1-based) and a `finished` one;
- a revision is runnable again only when its latest attempt finished `failed` or `timed_out`
  (or `lost`, if the job says `idempotent: true`), it has had fewer than 1 + `retries` attempts,
  and the backoff since that attempt finished has passed (`Retries.delay`);
- a runner with labels L claims a job only if its `runs_on` are all in L; a job without
  `runs_on` is claimable by any runner.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta

from mergegate.audit.records import Finished, Record, Refusal, Rejected, Started, parse_time
from mergegate.rules import break_glass
from mergegate.rules import renewal as renewals_of
from mergegate.rules import windows as change_windows
from mergegate.rules.job import Job
from mergegate.rules.model import Decision
from mergegate.rules.policy import Policy

RETRIED = frozenset({"failed", "timed_out"})
Key = tuple[str, str]  # (path, blob): one job revision


@dataclass(frozen=True)
class Attempt:
    """One run of a job revision, as its `started` and `finished` records say."""

    number: int
    run_id: str | None
    commit: str | None
    runner: str | None
    seq: int
    status: str | None = None  # of its `finished` record; None while it runs
    finished: datetime | None = None
    finished_seq: int | None = None


@dataclass(frozen=True)
class AttemptHistory:
    """What the audit says about one job revision: its attempts and the commits it was refused
    at."""

    attempts: tuple[Attempt, ...] = ()
    closed: tuple[
        tuple[str, str, str], ...
    ] = ()  # (commit, event, reason) of `rejected` / `vetoed` records
    # (commit, approval) of `rejected` records that say an approval expired (`expired`): not
    # final, a renewal lets the revision run. The approval: its renewal commit, "" the original.
    expiries: tuple[tuple[str, str], ...] = ()

    def at(self, commit: str) -> tuple[Attempt, ...]:
        return tuple(a for a in self.attempts if a.commit == commit)

    def closed_at(self, commit: str) -> tuple[str, str] | None:
        for where, event, reason in self.closed:
            if where == commit:
                return event, reason
        return None

    def expired_at(self, commit: str, approval: str) -> bool:
        """Whether the expiry of this approval of the revision at `commit` is recorded."""
        return (commit, approval) in self.expiries


@dataclass(frozen=True)
class Runnable:
    """A revision a runner may claim now, and which attempt that claim is."""

    decision: Decision
    policy: Policy  # the policy that judged it (in force before its commit)
    attempt: int  # 1-based
    windows: tuple[str, ...] = ()  # the change windows that allow it to start now
    renewal: renewals_of.Freshest | None = None  # the renewal it starts on (None: the original)

    @property
    def path(self) -> str:
        return self.decision.path

    @property
    def blob(self) -> str:
        return self.decision.blob

    @property
    def commit(self) -> str:
        return self.decision.commit

    @property
    def runs_on(self) -> tuple[str, ...]:
        return self.decision.job.runs_on if self.decision.job is not None else ()

    @property
    def retries(self) -> int:
        return self.decision.job.retries if self.decision.job is not None else 0


@dataclass(frozen=True)
class Queued:
    """An approved revision that does not run now, and why (for `status`).

    state: `queued` (runnable, but waiting for a runner: with its labels, or any),
    `retrying` (waiting for its backoff until `due`), `window` (waiting for a change
    window to open at `due`; None: it never opens again), `expired` (its approval is too
    old and its expiry recorded: it waits for a renewal) or `running` (an attempt runs, and
    a later one may follow).
    """

    decision: Decision
    policy: Policy
    state: str
    reason: str
    attempt: int  # the attempt that runs or waits
    due: datetime | None = None
    runner: str | None = None


@dataclass(frozen=True)
class Expiry:
    """An approval too old to start on: its age and the limit (seconds), and which approval."""

    age: int | None  # None: no runner-signed record dates it
    limit: int
    approval: renewals_of.Freshest


@dataclass(frozen=True)
class Refused:
    """An approved revision the runner records as `rejected` without running it.

    With `expiry`, the record says the approval expired: not final, the revision stays open
    (state `expired`) and a renewal lets it run."""

    decision: Decision
    policy: Policy
    reason: str
    expiry: Expiry | None = None


Verdict = (
    Runnable | Queued | Refused | None
)  # None: nothing more to do (done, or the records say why)


@dataclass(frozen=True)
class Standing:
    """What approved says now about a revision that would start late: a retry, or a run that waited.

    A late start needs the revision to be still what approved holds at `path`, and the
    policy in force now to allow it too (a tightened policy reaches retries and queued runs).
    """

    tip: str  # the last commit of approved judged
    blob: str | None  # the revision's path at tip (None: removed)
    policy: Policy  # in force at tip


def histories(records: Iterable[Record]) -> dict[Key, AttemptHistory]:
    """Attempts and refusals per job revision, from any records (in chain order or not)."""
    started: dict[Key, list[Started]] = {}
    finished: dict[str, Finished] = {}
    closed: dict[Key, list[tuple[str, str, str]]] = {}
    expiries: dict[Key, list[tuple[str, str]]] = {}
    for record in records:
        path, blob = record.revision
        if path is None or blob is None:
            continue
        if isinstance(record, Started):
            started.setdefault((path, blob), []).append(record)
        elif isinstance(record, Finished) and record.run_id is not None:
            run_id = record.run_id
            if run_id not in finished or record.seq < finished[run_id].seq:
                finished[run_id] = (
                    record  # one result per run: the first counts (verify flags a second)
                )
        elif isinstance(record, Rejected) and record.expired is not None:
            expiries.setdefault((path, blob), []).append((str(record.commit), record.renewal or ""))
        elif isinstance(record, Refusal):
            closed.setdefault((path, blob), []).append(
                (str(record.commit), record.event, record.reason or "")
            )
    result: dict[Key, AttemptHistory] = {}
    for key in {*started, *closed, *expiries}:
        attempts = []
        for record in sorted(started.get(key, ()), key=lambda r: r.seq):
            claim = record.run_id
            end = finished.get(claim) if claim is not None else None
            attempts.append(
                Attempt(
                    number=record.attempt_number,
                    run_id=claim,
                    commit=record.commit,
                    runner=record.runner,
                    seq=record.seq,
                    status=str(end.status) if end is not None else None,
                    finished=parse_time(end.time) if end is not None else None,
                    finished_seq=end.seq if end is not None else None,
                )
            )
        result[key] = AttemptHistory(
            tuple(attempts), tuple(closed.get(key, ())), tuple(expiries.get(key, ()))
        )
    return result


def retriable(status: str | None, *, idempotent: bool) -> bool:
    """Whether an attempt that ended with `status` may be followed by another."""
    return status in RETRIED or (status == "lost" and idempotent)


def judge_attempts(
    decision: Decision,
    policy: Policy,
    history: AttemptHistory | None,
    *,
    now: datetime,
    late: bool = False,
    standing: Standing | None = None,
    approved: datetime | None = None,
    overdue: Mapping[str, break_glass.Owed] | None = None,
    renewals: Sequence[renewals_of.RenewalVote] = (),
) -> Verdict:
    """What to do with one revision the judge allowed: run it (which attempt), wait, refuse, or
    nothing.

    `late`: its commit was judged by an earlier pass (it waited for a runner, or for a retry).
    A start that is late, or a retry, is checked against `standing` (`late_refusal`).
    `approved`: when a runner first judged its approving commit (None: this pass, unless it is
    late), for `max_approval_age` (`expired`); `renewals`: the dated votes of renewal commits
    naming the revision after it (rules/renewal.py), the freshest approval counts. A start then
    needs every change window of the policy in force (`in_window`), unless a signed emergency
    runs it; an emergency is refused while one of its signers owes an overdue review
    (`overdue`: break_glass.overdue_by).
    """
    history = history or AttemptHistory()
    verdict = _attempts(decision, policy, history, now=now)
    start = (
        verdict.attempt
        if isinstance(verdict, Runnable)
        or (isinstance(verdict, Queued) and verdict.state != "running")
        else None
    )
    if start is not None and (late or start > 1) and standing is not None:
        assert isinstance(verdict, Runnable | Queued)
        why = late_refusal(decision, standing, start)
        if why is not None:
            return Refused(decision, policy, why)
        if standing.policy.commit != policy.commit:
            # It starts now, so it runs as the policy in force now says (limits, sandbox, secrets,
            # env), by the rule that policy allows it with.
            rule = (
                standing.policy.decide_command(decision.job).rule
                if decision.job is not None
                else None
            )
            moved = replace(decision, rule=rule)
            verdict = replace(verdict, decision=moved, policy=standing.policy)
    if isinstance(verdict, Runnable):
        return _fresh(
            verdict,
            Refused(decision, policy, ""),
            history,
            standing,
            now=now,
            late=late,
            approved=approved,
            renewals=renewals,
            overdue=overdue or {},
        )
    return verdict


def _fresh(
    item: Runnable,
    judged: Refused,
    history: AttemptHistory,
    standing: Standing | None,
    *,
    now: datetime,
    late: bool,
    approved: datetime | None,
    renewals: Sequence[renewals_of.RenewalVote],
    overdue: Mapping[str, break_glass.Owed],
) -> Verdict:
    """The item if its freshest approval is young enough (and its windows allow it now), else
    its expiry: recorded once per approval, then it waits (state `expired`) for a renewal.
    `judged`: the revision and the policy that judged it, as a refusal names them."""
    decision = judged.decision
    now_in_force = standing.policy if standing is not None else judged.policy
    job = decision.job
    assert job is not None
    fresh = renewals_of.approval(
        decision, now_in_force, approved=approved or (None if late else now), votes=renewals
    )
    why = expired(now_in_force, job, approved=fresh.at, now=now, renewal=fresh.renewal)
    if why is not None:
        if history.expired_at(decision.commit, fresh.key):
            return Queued(decision, judged.policy, "expired", why, item.attempt)
        limit = now_in_force.approval_age_for(job)
        assert limit is not None
        age = int((now - fresh.at).total_seconds()) if fresh.at is not None else None
        return replace(judged, reason=why, expiry=Expiry(age, limit, fresh))
    why = break_glass.second_refusal(decision, overdue)
    if why is not None:
        return replace(judged, reason=why)
    if fresh.renewal is not None:
        item = replace(item, renewal=fresh)
    return in_window(item, now_in_force, now=now)


def expired(
    policy: Policy,
    job: Job,
    *,
    approved: datetime | None,
    now: datetime,
    renewal: str | None = None,
) -> str | None:
    """Why an approval a runner first judged at `approved` is too old for a start at `now` by
    `policy`'s max_approval_age (None: not dated by any runner-signed record), or None.
    `renewal`: the renewal commit it rests on, if it is a renewal."""
    limit = policy.approval_age_for(job)
    if limit is None:
        return None
    shown = describe_duration(limit)
    renew = (
        f"renew it: mergegate approve --renew {job.path} (a fresh approval with its quorum), "
        "or change the job and approve it again"
    )
    if approved is None:
        return (
            f"approval expired: no runner-signed record says when a runner first judged it, "
            f"and max_approval_age is {shown} ({policy.where}); {renew}"
        )
    age = now - approved
    if age.total_seconds() <= limit:
        return None
    what = (
        f"renewed ({renewal})"  # a review on GitHub after the merge (github/later.py)
        if renewal and renewal.startswith("review ")
        else f"renewed (commit {renewal[:7]})"
        if renewal
        else "approved"
    )
    return (
        f"approval expired: {what} {describe_duration(int(age.total_seconds()))} ago (first "
        f"judged at {approved.strftime('%Y-%m-%dT%H:%M:%SZ')}), max_approval_age is {shown} "
        f"({policy.where}); {renew}"
    )


def describe_duration(seconds: int) -> str:
    """Seconds as a policy writes a duration: hours up to a week (72h), days from one (14d)."""
    if seconds >= 7 * 86400 and seconds % 86400 == 0:
        return f"{seconds // 86400}d"
    for unit, size in (("h", 3600), ("m", 60)):
        if seconds >= size and seconds % size == 0:
            return f"{seconds // size}{unit}"
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    return f"{seconds}s"


def in_window(item: Runnable, policy: Policy, *, now: datetime) -> Runnable | Queued:
    """The item, naming the windows that allow its start at `now`, or why it waits for one.

    The windows are those of `policy`, the policy in force at the tip the runner judged (a
    job waits, it is not refused: a closed window opens again).
    """
    job = item.decision.job
    assert job is not None
    if item.decision.emergency is not None:
        return item  # a signed emergency runs at once: no window allowed it, none holds it
    wait = window_wait(policy, job, now=now)
    if wait is None:
        return replace(item, windows=change_windows.names(policy.windows_for(job)))
    why, due = wait
    return Queued(item.decision, item.policy, "window", why, item.attempt, due)


def window_wait(policy: Policy, job: Job, *, now: datetime) -> tuple[str, datetime | None] | None:
    """(why, when it may start; None: never) for a job that the windows of `policy` keep from
    starting at `now`; None when they allow it. `check` says this of a proposal's job too."""
    found = policy.windows_for(job)
    why = change_windows.waiting_reason(found, now)
    if why is None:
        return None
    return why, change_windows.next_open(found, now)


def window_violation(policy: Policy, decision: Decision, at: datetime) -> str | None:
    """Why a start judged at `at` broke the change windows of `policy` (for `verify`), or None."""
    if decision.job is None:
        return None
    shut = change_windows.blocking(policy.windows_for(decision.job), at)
    if not shut:
        return None
    plural = "s" if len(shut) > 1 else ""
    return (
        f"it was judged at {at.strftime('%Y-%m-%dT%H:%M:%SZ')}, outside window{plural} "
        f"{', '.join(change_windows.names(shut))} of {policy.where}"
    )


def late_refusal(decision: Decision, standing: Standing, attempt: int) -> str | None:
    """Why a late start (or retry) of this revision must not happen now, or None."""
    job = decision.job
    assert job is not None
    what = f"attempt {attempt}" if attempt > 1 else "this run, which waited,"
    if standing.blob != decision.blob:
        change = "removed" if standing.blob is None else f"changed (now {standing.blob[:7]})"
        return (
            f"{decision.path} was {change} on approved (at {standing.tip[:7]}) after "
            f"{decision.commit[:7]} approved it: "
            f"{what} of the older revision does not start"
        )
    now = standing.policy.decide_command(job)
    if not now.allowed:
        return f"the policy in force now denies it ({now.reason}): {what} does not start"
    return None


def _attempts(
    decision: Decision, policy: Policy, history: AttemptHistory, *, now: datetime
) -> Verdict:
    job = decision.job
    assert job is not None and decision.runnable
    if history.closed_at(decision.commit) is not None:
        return None  # recorded as rejected or vetoed: final
    mine = history.at(decision.commit)
    if not mine:
        if history.attempts:
            first = history.attempts[0]
            return Refused(
                decision,
                policy,
                (
                    f"this exact revision of {decision.path} already started (seq {first.seq}, "
                    "approved at "
                    f"{str(first.commit)[:7]}); a job revision runs at most once: change the file "
                    "to run it again"
                ),
            )
        return Runnable(decision, policy, 1)
    latest = max(mine, key=lambda a: (a.number, a.seq))
    allowed = 1 + job.retries
    if latest.status is None:
        if latest.number < allowed:
            return Queued(
                decision,
                policy,
                "running",
                f"attempt {latest.number} of {allowed} is running on {latest.runner}",
                latest.number,
                runner=latest.runner,
            )
        return None
    if not retriable(latest.status, idempotent=job.idempotent) or latest.number >= allowed:
        return None
    due = (latest.finished or now) + timedelta(seconds=policy.retries.delay(latest.number))
    if now < due:
        return Queued(
            decision,
            policy,
            "retrying",
            f"attempt {latest.number} of {allowed} {latest.status}; attempt {latest.number + 1} is "
            f"due at {iso_up(due)}",
            latest.number + 1,
            due,
        )
    return Runnable(decision, policy, latest.number + 1)


def for_runner(item: Runnable, labels: frozenset[str] | None) -> Runnable | Queued:
    """The item itself if a runner with `labels` (None: any runner) may claim it, else why it
    waits."""
    if labels is None or set(item.runs_on) <= labels:
        return item
    return Queued(
        item.decision, item.policy, "queued", waiting_reason(item.runs_on, labels), item.attempt
    )


def waiting_reason(runs_on: Sequence[str], labels: frozenset[str] | None = None) -> str:
    if not runs_on:
        return "waiting for a runner"
    missing = (
        f" (this runner lacks {', '.join(sorted(set(runs_on) - labels))})"
        if labels is not None
        else ""
    )
    return f"waiting for a runner with labels {', '.join(sorted(runs_on))}{missing}"


def still_open(verdict: Runnable | Queued, outcome: str | None) -> bool:
    """Whether a revision may still need a runner after this pass (its commit is judged again next
    pass).

    `outcome` is what this pass did with a runnable item: its attempt's status, `claimed` (another
    runner has it), or None (not claimed in this pass).
    """
    if isinstance(verdict, Queued):
        return True
    if outcome is None:
        return True
    job = verdict.decision.job
    more = job is not None and verdict.attempt < 1 + job.retries
    if outcome in ("claimed", "running"):
        return more
    return more and retriable(outcome, idempotent=job is not None and job.idempotent)


def check_attempts(
    started: Sequence[Started], finished: Mapping[str, Finished], *, retries: int, idempotent: bool
) -> list[str]:
    """What is wrong with the recorded attempts of one revision (for `verify`): numbering, count,
    and cause.

    `started` in chain order; `finished` by run id. Attempt n+1 must follow a retriable end of
    attempt n, recorded before it, and n+1 <= 1 + retries.
    """
    problems: list[str] = []
    allowed = 1 + retries
    for index, record in enumerate(started):
        number = record.attempt_number
        where = f"seq {record.seq}: {record.path} at {str(record.blob)[:7]}"
        if index == 0:
            if number != 1:
                problems.append(f"{where} starts at attempt {number}, not 1")
            continue
        previous = started[index - 1]
        if number != previous.attempt_number + 1:
            problems.append(
                f"{where} started twice (first at seq {started[0].seq}): attempt {number} after "
                "attempt "
                f"{previous.attempt_number}"
            )
            continue
        if number > allowed:
            problems.append(
                f"{where}: attempt {number} exceeds the {allowed} the job allows (retries: "
                f"{retries})"
            )
            continue
        if str(record.commit) != str(previous.commit):
            problems.append(
                f"{where}: attempt {number} is from commit {str(record.commit)[:12]}, "
                f"attempt {number - 1} from {str(previous.commit)[:12]}"
            )
            continue
        end = finished.get(str(previous.run_id))
        if end is None or end.seq > record.seq:
            problems.append(
                f"{where}: attempt {number} started before attempt {number - 1} (seq "
                f"{previous.seq}) finished"
            )
            continue
        status = str(end.status)
        if not retriable(status, idempotent=idempotent):
            why = (
                "a lost attempt is retried only when the job says idempotent: true"
                if status == "lost"
                else "only failed and timed_out attempts are retried"
            )
            problems.append(
                f"{where}: attempt {number} retried an attempt that ended {status} ({why})"
            )
    return problems


def iso_up(when: datetime) -> str:
    """`when` to the second, rounded up: at the time shown, it is due."""
    if when.microsecond:
        when = when.replace(microsecond=0) + timedelta(seconds=1)
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")
