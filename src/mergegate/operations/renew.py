"""`approve --renew`: a signed, empty commit on approved that renews an expired approval.

A job revision whose approval is older than `max_approval_age` does not start (it is recorded
expired); a fresh approval of the very same bytes renews it (rules/renewal.py). This signs one
person's part of it: an empty commit on approved with `Mergegate-Renew: <path> <blob>`, pushed
as a veto is. It refuses a renewal the runner would not count: a revision that is not approved
and waiting (already run, rejected, vetoed), one no age limit applies to, a signer who is not an
approver of the policy in force or who wrote the revision.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mergegate import clock
from mergegate.errors import GitError, JobFailed, UsageError
from mergegate.facts.approval_dates import ApprovalDates
from mergegate.facts.assessor import RENEW_TRAILER
from mergegate.git.repo import Repo
from mergegate.github import gather as github
from mergegate.operations.approve import can_sign, signing_person
from mergegate.rules import renewal as renewals_of
from mergegate.rules.eligibility import Queued, Refused, Runnable, describe_duration
from mergegate.rules.job import is_job_path, job_stem
from mergegate.rules.model import Decision
from mergegate.runner.gate import read_gate
from mergegate.runner.plan import Plan, plan

# What the plan may say of a revision a renewal can still help: it waits, or its approval expired.
_RENEWABLE = ("expired", "window", "queued", "retrying")


@dataclass(frozen=True)
class Renewed:
    commit: str
    path: str
    blob: str
    pushed_to: str
    person: str | None  # the signer, when this clone can tell
    state: str  # what the revision was: expired, or waiting (window, queued, retrying)
    # With this signature: the renewal's people, when they meet the quorum (else empty), and the
    # quorum's words.
    renewed_by: tuple[str, ...]
    quorum: str


def renew(
    *, repo_path: Path, job: str, remote: str, branch: str, fetch: bool, trust: str | None
) -> Renewed:
    """Sign and push a renewal of the revision of `job` (a path or a job id) on approved."""
    repo = Repo(repo_path)
    can_sign(repo, "renewals")
    gate = read_gate(repo, remote=remote, branch=branch, fetch=fetch, trust=trust)
    source, tip, now = gate.branch, gate.tip, clock.now()
    if source.remote is None and repo.current_branch() == branch:
        raise GitError(
            f"{branch} is checked out here; the renewal would move it under your working tree",
            hint="git switch to another branch first",
        )
    path = _path(repo, tip, job, branch)
    blob = repo.file_blob(tip, path)
    assert blob is not None
    work = plan(
        repo,
        tip,
        gate.root,
        gate.tail,
        records=gate.records,
        at=now,
        runner_name="renew",
        remember=False,
        reviews=github.recorded(repo, gate.records, now=now),
    )
    decision, state = _waiting(work, path, blob)
    assert decision.job is not None
    policy = work.policy
    limit = policy.approval_age_for(decision.job)
    if limit is None:
        raise UsageError(
            f"no max_approval_age applies to {path} ({policy.where}): its approval does not expire",
            hint=f"mergegate status shows why it waits ({state})",
        )
    person = signing_person(repo, policy)
    if person is not None and person not in {p.name for p in policy.approvers}:
        raise JobFailed(
            f"your signing key belongs to {person}, who is not an approver in {policy.where}"
        )
    if person is not None:
        _would_count(decision, person, policy.allow_self_approval, path)
    dates = ApprovalDates(repo, gate.records, tip, root=gate.root, now=now)
    votes = dates.renewals(decision, policy)
    if person is not None:
        votes.append(renewals_of.RenewalVote(person, "0" * 40, now))
    renewed = renewals_of.renewal(decision, policy, votes)
    requirement = policy.requirement_for(decision.job)
    quorum = (
        f"quorum met: {requirement.describe()} by {', '.join(renewed.by)}"
        if renewed is not None
        else f"needs {requirement.describe()} from people who did not write it, each within "
        f"{describe_duration(limit)}"
    )
    message = f"mergegate: renew {path}\n\n{RENEW_TRAILER}: {path} {blob}\n"
    sha = repo.commit_tree(
        tree=repo.commit(tip).tree, parents=(tip,), message=message, author=None, sign=True
    )
    if not source.publish(sha, tip):
        raise GitError(f"{branch} moved while renewing", hint="run the command again")
    pushed = f"{remote}/{branch}" if source.remote is not None else branch
    by = renewed.by if renewed is not None else ()
    return Renewed(sha, path, blob, pushed, person, state, by, quorum)


def _path(repo: Repo, tip: str, job: str, branch: str) -> str:
    """The job file on approved that `job` names (its path, or its id)."""
    if repo.file_blob(tip, job) is not None and is_job_path(job):
        return job
    found = [p for _, _, p in repo.ls_tree(tip, "jobs/") if is_job_path(p) and job_stem(p) == job]
    if len(found) != 1:
        raise UsageError(
            f"no job {job} on {branch}" if not found else f"{job} names {', '.join(found)}",
            hint="name the job file as it is on approved (mergegate status lists them)",
        )
    return found[0]


def _waiting(work: Plan, path: str, blob: str) -> tuple[Decision, str]:
    """The approved revision at `path` that has not started, and its state, or why there is none
    to renew."""
    items: list[Runnable | Queued | Refused] = [*work.runnable, *work.queued, *work.refused]
    for item in items:
        decision = item.decision
        if (decision.path, decision.blob) != (path, blob):
            continue
        if isinstance(item, Runnable):
            return decision, "queued"
        if isinstance(item, Refused):
            if item.expiry is not None:
                return decision, "expired"
            raise JobFailed(f"nothing to renew: {path} is refused: {item.reason}")
        if item.state in _RENEWABLE:
            return decision, item.state
    raise JobFailed(
        f"nothing to renew: the revision of {path} at {blob[:7]} is not an approved job waiting "
        "to start (it ran, runs, or was refused: mergegate show says which)",
        hint="a job revision runs at most once: change the file and approve it again to run it",
    )


def _would_count(decision: Decision, person: str, self_approval: bool, path: str) -> None:
    """Refuse a renewal by someone the runner would not count for this revision."""
    why = dict(decision.excluded).get(person)
    if why is not None and not self_approval:
        raise JobFailed(
            f"your renewal of {path} would not count: you ({person}) are the {why}",
            hint="ask another approver; an author or signer of a change never counts for it",
        )
