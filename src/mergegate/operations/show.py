"""`mergegate show JOB`: one screen about one job.

Its file on approved, every revision approved brought with the judge's verdict (which votes counted,
and why the others did not), its records, and what happens next. Verdicts come from the same `Walk`
that `verify` and the runner use, from the trust root; records are read through audit.py with the
chain checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mergegate import clock
from mergegate.audit.records import Finished, Record, Refusal, Started
from mergegate.errors import NotYet, UsageError
from mergegate.facts.assessor import Assessor
from mergegate.facts.branches import trust_root
from mergegate.github import gather as github
from mergegate.operations.audit_log import open_view
from mergegate.operations.status import status
from mergegate.rules.job import is_job_path, job_stem
from mergegate.rules.model import Vote
from mergegate.rules.policy import load_policy
from mergegate.runner.plan import Walk

TAIL_LINES = 10


@dataclass(frozen=True)
class Revision:
    commit: str
    blob: str
    approved: bool
    reason: str
    votes: tuple[Vote, ...]

    def as_json(self) -> dict[str, object]:
        return {
            "commit": self.commit,
            "blob": self.blob,
            "approved": self.approved,
            "reason": self.reason,
            "votes": [
                {"person": v.person, "via": v.via, "counted": v.counted, "why": v.why}
                for v in self.votes
            ],
        }


@dataclass(frozen=True)
class AttemptSummary:
    """One attempt as `show` prints it: its records' status, duration and output tails."""

    run_id: str | None
    commit: str | None
    blob: str | None
    started: str | None
    status: str  # running, succeeded, failed, timed_out, rejected, vetoed
    duration_ms: int | None
    reason: str | None
    stdout_tail: str
    stderr_tail: str

    def as_json(self) -> dict[str, object]:
        return {
            "run_id": self.run_id,
            "commit": self.commit,
            "blob": self.blob,
            "started": self.started,
            "status": self.status,
            "duration_ms": self.duration_ms,
            "reason": self.reason,
            "stdout_tail": self.stdout_tail,
            "stderr_tail": self.stderr_tail,
        }


@dataclass(frozen=True)
class Dossier:
    job: str
    path: str | None
    text: str | None
    state: str
    reason: str | None
    revisions: tuple[Revision, ...]
    attempts: tuple[AttemptSummary, ...]
    next: str
    tip: str
    warnings: tuple[str, ...] = ()

    def as_json(self) -> dict[str, object]:
        return {
            "job": self.job,
            "path": self.path,
            "text": self.text,
            "state": self.state,
            "reason": self.reason,
            "revisions": [r.as_json() for r in self.revisions],
            "attempts": [a.as_json() for a in self.attempts],
            "next": self.next,
            "tip": self.tip,
        }


def show(
    *, repo_path: Path, job: str, remote: str, branch: str, fetch: bool, trust: str | None
) -> Dossier:
    view = open_view(repo_path=repo_path, remote=remote, branch=branch, fetch=fetch)
    repo, tip = view.repo, view.tip
    paths = [p for _, _, p in repo.ls_tree(tip, "jobs/") if is_job_path(p) and job_stem(p) == job]
    records = [r for r in view.records() if r.job == job or (paths and r.path in paths)]
    past = sorted({r.path for r in records if r.path})
    if not paths and not past:
        raise UsageError(
            f"no job {job} on {branch}", hint="mergegate status lists the jobs on approved"
        )
    path = paths[0] if paths else past[-1]
    blob = repo.file_blob(tip, path)
    text = repo.blob(blob).decode("utf-8", "replace") if blob else None
    report = status(repo_path=repo_path, remote=remote, branch=branch, fetch=False, trust=trust)
    current = next((j for j in report.jobs if j.path == path), None)
    state = current.state if current else "removed"
    reason = current.reason if current else f"{path} is no longer on {branch}"
    revisions = _revisions(view.repo, tip, view.records_at, path, trust)
    attempts = _attempts(records)
    return Dossier(
        job,
        path,
        text,
        state,
        reason,
        revisions,
        attempts,
        _next(state, reason, labelled=bool(current and current.runs_on)),
        tip,
        report.warnings,
    )


def _revisions(
    repo: Any, tip: str, records: str | None, path: str, trust: str | None
) -> tuple[Revision, ...]:
    """The judge's verdict on every revision of `path` that a first-parent commit brought."""
    touching = set(repo.out("rev-list", "--first-parent", tip, "--", path).split())
    if not touching:
        return ()
    root, _ = trust_root(repo, tip, trust)
    now = clock.now()
    # With the review evidence the records hold, as status and check walk: a reviewed merge is
    # judged as the runner did.
    walk = Walk(
        Assessor(repo, reviews=github.recorded(repo, records, now=now)),
        load_policy(lambda p: repo.read_file(root, p), commit=root),
        at=now,
        records=records,
    )
    found = []
    for sha in repo.first_parent_chain(root, tip):
        try:
            assessment = walk.step(sha)
        except NotYet:
            break  # not judged yet (the runner waits for its evidence): status says so
        if sha not in touching:
            continue
        for d in assessment.decisions:
            if d.path == path:
                found.append(Revision(sha, d.blob, d.runnable, d.reason, tuple(d.votes)))
    return tuple(found)


def _attempts(records: list[Record]) -> tuple[AttemptSummary, ...]:
    attempts: dict[str, AttemptSummary] = {}
    order: list[str] = []
    for r in records:
        if isinstance(r, Started):
            key = r.run_id or f"seq{r.seq}"
            attempts[key] = AttemptSummary(
                r.run_id, r.commit, r.blob, r.time, "running", None, None, "", ""
            )
            order.append(key)
        elif isinstance(r, Finished):
            key = r.run_id or f"seq{r.seq}"
            began = attempts.get(key)
            attempts[key] = AttemptSummary(
                r.run_id,
                r.commit,
                r.blob,
                began.started if began else None,
                str(r.status),
                r.duration_ms,
                r.reason,
                _tail(r.stdout_tail),
                _tail(r.stderr_tail),
            )
            if key not in order:
                order.append(key)
        elif isinstance(r, Refusal):
            key = f"seq{r.seq}"  # (a refusal has no run)
            attempts[key] = AttemptSummary(
                None, r.commit, r.blob, r.time, r.event, None, r.reason, "", ""
            )
            order.append(key)
    return tuple(attempts[k] for k in order)


def _tail(text: str | None) -> str:
    lines = str(text or "").splitlines()
    return "\n".join(lines[-TAIL_LINES:])


def _next(state: str, reason: str | None, *, labelled: bool) -> str:
    """What happens next; a queued job that needs runner labels says which (its reason)."""
    return {
        "queued": "the next runner pass runs it (mergegate run --once, or the next push on "
        f"GitHub); {reason}"
        if labelled
        else "the next runner pass runs it (mergegate run --once, or the next push on GitHub)",
        "retrying": f"the next pass after the backoff runs it again: {reason}",
        "running": "a runner is running it; its finished record follows",
        "succeeded": "nothing: it ran; an approved change to its file (a signed merge or a "
        "reviewed pull request) runs again",
        "waiting": f"the first runner pass once the window opens runs it: {reason}"
        if reason and reason.startswith("waiting for window")
        else "the runner judges it once GitHub's review evidence is in (the next pass asks again)",
        "failed": "nothing (no retries left): fix it and propose a change to run again",
        "timed_out": "nothing (no retries left): raise timeout_seconds in a change to run again",
        "vetoed": "nothing: it was vetoed; propose a change to run it",
        "expired": "a renewal runs it: approvers run mergegate approve --renew PATH (its quorum "
        "of fresh approvals), or propose a change to it",
        "not run": "nothing: it was on approved before the runner's first pass; propose a change "
        "to run it",
        "removed": "nothing: the file was removed from approved",
    }.get(state, f"nothing until it is fixed: {reason}" if reason else "nothing")
