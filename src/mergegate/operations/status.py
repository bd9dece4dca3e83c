"""What state every job on `approved` is in, read from the audit branch and the unprocessed
history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from mergegate import clock
from mergegate.audit import log as audit
from mergegate.audit.records import Finished, Refusal, Rejected, Started, parse_time
from mergegate.errors import NotYet
from mergegate.facts.owed_reviews import gate_owed
from mergegate.git.repo import Repo
from mergegate.github import gather as github
from mergegate.rules.break_glass import Owed
from mergegate.rules.eligibility import iso_up, waiting_reason
from mergegate.rules.job import is_job_path, job_stem
from mergegate.runner import leases
from mergegate.runner.gate import check_new_records, read_gate
from mergegate.runner.plan import plan


@dataclass(frozen=True)
class JobState:
    job: str
    path: str
    blob: str
    # queued, retrying, waiting, running, succeeded, failed, timed_out, interrupted, lost, rejected,
    # vetoed, not run
    state: str
    reason: str | None
    commit: str | None
    time: str | None
    runner: str | None = None  # for a running job: who holds the claim
    age_seconds: int | None = None  # since its `started` record
    lease_until: str | None = (
        None  # past it with no result, the next pass of any runner closes it as `lost`
    )
    attempt: int | None = None  # the attempt that runs, or runs next (queued, retrying)
    retry_at: str | None = None  # retrying: when the next attempt is due
    runs_on: tuple[str, ...] = ()  # the labels a runner needs to claim it

    def as_json(self) -> dict[str, object]:
        return {
            "job": self.job,
            "path": self.path,
            "blob": self.blob,
            "state": self.state,
            "reason": self.reason,
            "commit": self.commit,
            "time": self.time,
            "runner": self.runner,
            "age_seconds": self.age_seconds,
            "lease_until": self.lease_until,
            "attempt": self.attempt,
            "retry_at": self.retry_at,
            "runs_on": list(self.runs_on),
        }


@dataclass(frozen=True)
class StatusReport:
    tip: str
    records: int
    jobs: tuple[JobState, ...]
    warnings: tuple[str, ...]
    owed: tuple[Owed, ...] = ()  # reviews break-glass runs still owe (given ones left out)
    now: datetime | None = None


def status(
    *, repo_path: Path, remote: str, branch: str, fetch: bool, trust: str | None
) -> StatusReport:
    repo = Repo(repo_path)
    gate = read_gate(repo, remote=remote, branch=branch, fetch=fetch, trust=trust)
    tip, warnings, now = gate.tip, gate.warnings, clock.now()
    records = audit.read_all(repo, gate.records)
    latest: dict[tuple[str | None, str | None], Started | Finished | Refusal] = {}
    for record in records:
        if isinstance(record, Started | Finished | Refusal):
            latest[record.revision] = record
    reviews = github.recorded(repo, gate.records, now=now)
    pending = plan(
        repo,
        tip,
        gate.root,
        gate.tail,
        records=gate.records,
        at=now,
        runner_name="status",
        reviews=reviews,
    )
    try:
        check_new_records(repo, gate, pending, at=now, reviews=reviews)
    except NotYet as exc:  # the runner is still waiting for that evidence: status shows what it can
        warnings = (*warnings, exc.message)
    planned = {(d.path, d.blob): d for d, _ in pending.items}
    runnable = {(r.path, r.blob): r for r in pending.runnable}
    queued = {(q.decision.path, q.decision.blob): q for q in pending.queued}
    refused = {
        (r.decision.path, r.decision.blob): (r.decision.commit, r.reason, r.expiry is not None)
        for r in pending.refused
    }
    jobs = []
    for _, blob, path in repo.ls_tree(tip, "jobs/"):
        if not is_job_path(path):
            continue
        found = latest.get((path, blob))
        ready, waits = runnable.get((path, blob)), queued.get((path, blob))
        if ready is not None:
            # Approved and due, but no runner has claimed it yet: with labels, only a runner that
            # has them all will.
            retry = f"attempt {ready.attempt} of {1 + ready.retries}; " if ready.attempt > 1 else ""
            jobs.append(
                JobState(
                    job_stem(path),
                    path,
                    blob,
                    "queued",
                    retry + waiting_reason(ready.runs_on),
                    ready.commit,
                    None,
                    attempt=ready.attempt,
                    runs_on=ready.runs_on,
                )
            )
        elif waits is not None and waits.state == "retrying":
            due = iso_up(waits.due) if waits.due else None
            jobs.append(
                JobState(
                    job_stem(path),
                    path,
                    blob,
                    "retrying",
                    waits.reason,
                    waits.decision.commit,
                    found.time if found is not None else None,
                    attempt=waits.attempt,
                    retry_at=due,
                    runs_on=waits.decision.job.runs_on if waits.decision.job else (),
                )
            )
        elif waits is not None and waits.state in ("window", "expired"):
            # Approved and due, but a change window is shut: it waits, it is not refused. Or its
            # approval is too old, its expiry recorded: a renewal lets it run.
            jobs.append(
                JobState(
                    job_stem(path),
                    path,
                    blob,
                    "waiting" if waits.state == "window" else "expired",
                    waits.reason,
                    waits.decision.commit,
                    found.time if found is not None else None,
                    attempt=waits.attempt,
                    runs_on=waits.decision.job.runs_on if waits.decision.job else (),
                )
            )
        elif (path, blob) in refused and (found is None or refused[(path, blob)][2]):
            # An approved revision the next pass refuses (say its approval, or its renewal,
            # expired), or one the judge refused: rejected, as the runner will record it.
            commit, why, expired = refused[(path, blob)]
            jobs.append(
                JobState(
                    job_stem(path),
                    path,
                    blob,
                    "expired" if expired else "rejected",
                    f"(not yet recorded) {why}",
                    commit,
                    None,
                )
            )
        elif found is not None:
            jobs.append(_recorded(path, blob, found, now))
        elif (path, blob) in planned:
            d = planned[(path, blob)]
            jobs.append(
                JobState(
                    job_stem(path),
                    path,
                    blob,
                    "queued" if d.runnable else "rejected",
                    None if d.runnable else f"(not yet recorded) {d.reason}",
                    d.commit,
                    None,
                )
            )
        elif pending.waiting is not None and repo.file_blob(pending.tip, path) != blob:
            # Introduced past where the walk stopped for missing evidence: not judged yet, never
            # "not approved".
            commit, why = pending.waiting
            jobs.append(
                JobState(
                    job_stem(path),
                    path,
                    blob,
                    "waiting",
                    f"{why} (the walk waits at {commit[:7]})",
                    None,
                    None,
                )
            )
        else:
            jobs.append(
                JobState(
                    job_stem(path),
                    path,
                    blob,
                    "not run",
                    "present at the trust root or before the runner's first pass; never approved "
                    "as a change",
                    None,
                    None,
                )
            )
    owed = gate_owed(repo, pending.tip, gate.root, records, gate.records, pending.policy, at=now)
    return StatusReport(
        tip,
        len(records),
        tuple(jobs),
        tuple(warnings),
        tuple(o for o in owed if not o.given),
        now,
    )


def _recorded(path: str, blob: str, found: Started | Finished | Refusal, now: datetime) -> JobState:
    """A revision as its latest record says."""
    if isinstance(found, Started):
        return _running(job_stem(path), path, blob, found, now)
    state = str(found.status) if isinstance(found, Finished) else found.event
    if isinstance(found, Rejected) and found.expired is not None:
        state = "expired"  # (it waits for a renewal: the plan says so first, when it can)
    return JobState(job_stem(path), path, blob, state, found.reason, found.commit, found.time)


def _running(job: str, path: str, blob: str, record: Started, now: datetime) -> JobState:
    """A running job with its runner, age and lease (an expired lease is said in the reason)."""
    began = parse_time(record.time)
    age = int((now - began).total_seconds()) if began is not None else None
    end = leases.until(record)
    reason = None
    if end is not None and end < now:
        reason = (
            f"lease expired {int((now - end).total_seconds())}s ago: the next runner pass "
            "closes it as lost"
        )
    return JobState(
        job,
        path,
        blob,
        "running",
        reason,
        record.commit,
        record.time,
        record.runner,
        age,
        record.lease.until if record.lease is not None else None,
        attempt=record.attempt_number,
    )
