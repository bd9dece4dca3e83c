"""`check`: a proposal judged before it is merged, by the runner's own judge and walk of approved.

`approve` (operations/approve.py) signs only what this reports as allowed.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from mergegate import clock
from mergegate.audit import log as audit
from mergegate.errors import GitError, JobFailed, UsageError
from mergegate.facts.assessor import Assessor
from mergegate.facts.branches import open_branch, trust_root
from mergegate.git.repo import Repo
from mergegate.git.values import ZERO
from mergegate.github import gather as github
from mergegate.rules import eligibility
from mergegate.rules.job import is_job_path
from mergegate.rules.judge import judge_commit
from mergegate.rules.model import (
    ABSENT,
    Assessment,
    CommitFacts,
    Decision,
    Entry,
    Vote,
    describe_votes,
)
from mergegate.rules.policy import POLICY_DIR, Policy
from mergegate.runner.plan import Plan, plan
from mergegate.text import path_display


@dataclass(frozen=True)
class FileCheck:
    path: str
    blob: str
    job: str | None
    state: str  # "allowed", "denied", "invalid", "policy", "content", "removed"
    reason: str
    approvals: str  # quorum so far, in words
    approved: bool  # quorum already met by approval commits on the proposal
    votes: tuple[Vote, ...] = ()
    mode: str = "100644"
    unapproved: str = (
        ""  # unapproved content already on approved at this path: since when, and its diff
    )

    def as_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "blob": self.blob,
            "mode": self.mode,
            "job": self.job,
            "state": self.state,
            "reason": self.reason,
            "approvals": self.approvals,
            "approved": self.approved,
            "unapproved": self.unapproved,
            "votes": [
                {"person": v.person, "via": v.via, "counted": v.counted, "why": v.why}
                for v in self.votes
            ],
        }


@dataclass(frozen=True)
class CheckReport:
    ref: str
    head: str
    base: str
    policy: str
    files: tuple[FileCheck, ...]
    fork: str = ""
    policy_in_force: Policy | None = None
    resolved: str = ""  # the full ref name (or commit id) REF was resolved as
    assessment: Assessment | None = None  # the judge's verdict on the merge
    facts: CommitFacts | None = None  # what it judged

    @property
    def exit_code(self) -> int:
        if any(f.state == "invalid" for f in self.files):
            return UsageError.exit_code
        return JobFailed.exit_code if any(f.state == "denied" for f in self.files) else 0

    def decision(self, path: str) -> Decision | None:
        return (
            next((d for d in self.assessment.decisions if d.path == path), None)
            if self.assessment
            else None
        )


_STATES = {"": "allowed", "unapproved": "allowed", "denied": "denied", "invalid": "invalid"}


def check(
    *,
    repo_path: Path,
    ref: str,
    base: str,
    remote: str,
    fetch: bool,
    trust: str | None = None,
    merger: str | None = None,
    emergency: tuple[str, ...] = (),
) -> CheckReport:
    """Judge the merge of REF into the base with the runner's own judge, by the policy in force.

    The verdict is `judge.judge_commit` on the facts of the merge `approve --merge`
    would sign (with `merger`, the vote of that person's merge signature; without it,
    the quorum still waiting for one), after the walk of approved the runner makes:
    what is allowed, denied or invalid here is so for the runner too.
    """
    repo = Repo(repo_path)
    branch = open_branch(repo, remote=remote, branch=base, fetch=fetch)
    base_tip = branch.tip()
    if fetch and branch.remote is not None and ref.startswith(f"{remote}/"):
        repo.fetch(remote, ref[len(remote) + 1 :])  # the proposal as it is now, not as last fetched
    resolved, head = resolve_proposal(
        repo, ref, remote=remote if branch.remote is not None else None, fetch=fetch
    )
    ref = resolved.removeprefix("refs/heads/").removeprefix("refs/remotes/")
    records = branch.audit_tip()
    work = _base_state(repo, base_tip, records, trust)
    policy = work.policy
    fork = repo.merge_base(base_tip, head)
    if fork is None:
        start = f"{remote}/{base}" if branch.remote is not None else base
        raise UsageError(
            f"{ref} shares no history with {base}",
            hint=f"start proposals from {start}: git switch -c NAME {start}",
        )
    tree = repo.merge_tree(base_tip, head)
    unapproved = work.unapproved

    def known(path: str, blob: str) -> bool:
        return path in unapproved or (
            is_job_path(path) and audit.mentions(repo, records, path, blob)
        )

    facts = Assessor(repo).proposal_facts(
        base_tip=base_tip,
        head=head,
        tree=tree,
        policy=policy,
        unapproved=unapproved,
        merger=merger,
        at=clock.now(),
        known=known,
        emergency=emergency,
    )
    assessment = judge_commit(facts, policy, unapproved)
    results: list[FileCheck] = []
    files = {f.path: f for f in facts.files}
    for d in assessment.decisions:
        results.append(_job_check(policy, d, files[d.path].after.mode, merger))
    verdict = assessment.policy_verdict
    for f in facts.files:
        if f.path.startswith(POLICY_DIR):
            votes = verdict.votes.get(f.path, ()) if verdict else ()
            state = {"invalid": "invalid", "denied": "denied"}.get(
                verdict.refusal if verdict else "", "policy"
            )
            words = verdict.reason if verdict else ""
            if (
                verdict is not None
                and not verdict.adopted
                and verdict.refusal == "unapproved"
                and merger is None
            ):
                words += (
                    "; a signed merge, or a review on GitHub, by an approver who did not "
                    "write it counts as one more"
                )
            reason = (
                "policy change: needs the policy quorum of the policy in force"
                if state == "policy"
                else verdict.reason
                if verdict
                else ""
            )
            results.append(
                FileCheck(
                    f.path,
                    f.after.blob,
                    None,
                    state,
                    reason,
                    words,
                    bool(verdict and verdict.adopted),
                    votes,
                    f.after.mode,
                    _unapproved_here(repo, base_tip, f.path, f.last_approved, unapproved),
                )
            )
    needs = f"needs {policy.content_requirement().describe()}" + (
        "" if policy.allow_self_approval else ", from approvers who did not write it"
    )
    for f in facts.files:
        if not is_job_path(f.path) and not f.path.startswith(POLICY_DIR):
            what = "other file (a job may run or read it)"
            if (
                f.after.mode in ("100644", "100755")
                and f.path.endswith((".yaml", ".yml"))
                and _looks_like_job(repo.blob(f.after.blob))
            ):
                what += "; it looks like a job file, but jobs live under jobs/"
            results.append(
                FileCheck(
                    f.path,
                    f.after.blob,
                    None,
                    "content",
                    what,
                    needs,
                    assessment.content_approved,
                    (),
                    f.after.mode,
                    _unapproved_here(repo, base_tip, f.path, f.last_approved, unapproved),
                )
            )
        elif is_job_path(f.path) and f.after == ABSENT and f.path in unapproved:
            results.append(
                FileCheck(
                    f.path,
                    ZERO,
                    None,
                    "content",
                    "a job file the proposal deletes",
                    "",
                    True,
                    (),
                    f.after.mode,
                    _unapproved_here(repo, base_tip, f.path, f.last_approved, unapproved),
                )
            )
        elif is_job_path(f.path) and f.after == ABSENT:
            # Removing a job is how to stop it: once merged, no retry of it, and no run of it still
            # waiting for a runner, starts. Nothing is approved by it, so it needs no quorum.
            results.append(
                FileCheck(
                    f.path,
                    ZERO,
                    None,
                    "removed",
                    "the proposal removes this job: once merged, no retry of it "
                    "and no run of it still waiting for a runner starts",
                    "",
                    True,
                    (),
                    f.after.mode,
                )
            )
    return CheckReport(
        ref,
        head,
        base_tip,
        policy.commit,
        tuple(results),
        fork,
        policy,
        resolved,
        assessment,
        facts,
    )


def _job_check(policy: Policy, d: Decision, mode: str, merger: str | None) -> FileCheck:
    """The judge's decision in the words of a check: allowed (perhaps still waiting for its quorum),
    denied or invalid."""
    state = _STATES[d.refusal]
    if d.job is None or state != "allowed":
        reason = d.reason.removeprefix("denied by policy: ")  # the state already says denied
        return FileCheck(
            d.path,
            d.blob,
            d.job.id if d.job else None,
            state,
            reason,
            "",
            d.approved,
            d.votes,
            mode,
        )
    requirement = d.requirement or policy.requirement_for(d.job)
    votes = describe_votes(d.votes)
    if not d.votes:
        words = f"needs {requirement.describe()}; no approvals yet"
    elif d.emergency is not None and not d.approved:
        words = f"quorum not met: it runs on the emergency and owes its review; {votes}"
    elif d.runnable:
        words = f"quorum met; {votes}"
    else:
        # The judge's refusal ('not approved: 1 of 2 ...; counted: ...') already lists the votes:
        # said once, and without 'not approved' on a line that is about the approvals.
        words = d.reason.removeprefix("not approved: ")
        words = words if words.endswith(votes) else f"{words}; {votes}"
    if not d.approved and merger is None:
        # With allow_self_approval (init --solo) the author's own signed merge counts too.
        who = "an approver" if policy.allow_self_approval else "an approver who did not write it"
        words += f"; a signed merge, or a review on GitHub, by {who} counts as one more"
    reason = policy.decide_command(d.job).reason
    # The windows of the policy in force now, at the clock now, as a runner's claim would be; a
    # signed emergency starts in any (the judge's words say who broke the glass, and why).
    wait = eligibility.window_wait(policy, d.job, now=clock.now())
    if d.emergency is not None:
        reason, wait = d.reason, None
    if wait is not None:
        reason += f"; once merged it is {wait[0]}"
    limit = policy.approval_age_for(d.job)
    if limit is not None:
        reason += (
            f"; once merged it must start within {eligibility.describe_duration(limit)} of a "
            "runner first judging the merge (max_approval_age; once expired, it runs after "
            f"a renewal: mergegate approve --renew {d.path})"
        )
    return FileCheck(
        d.path,
        d.blob,
        d.job.id,
        state,
        reason,
        words,
        d.approved,
        d.votes,
        mode,
    )


def _unapproved_here(
    repo: Repo, tip: str, path: str, last: Entry | None, unapproved: Mapping[str, str]
) -> str:
    """Unapproved content already on approved at `path`: the reviewer's diff does not show it."""
    change = unapproved.get(path)
    if change is None:
        return ""
    since = (
        repo.commit(change).parents[0] if repo.rev(change) and repo.commit(change).parents else None
    )
    patch = repo.patch(since, tip, path) if since else ""
    shown = patch if len(patch) <= 4000 else patch[:4000] + "\n[... cut at 4000 characters]"
    return (
        f"{path_display(path)} holds content no signed approval covers, since {change[:12]}; "
        "merging this proposal "
        "does not approve it unless it starts from the last approved version "
        f"({last.describe() if last else 'unknown'}); "
        f"diff from that version to {tip[:12]}:\n{shown}"
    )


def resolve_proposal(repo: Repo, ref: str, *, remote: str | None, fetch: bool) -> tuple[str, str]:
    """(full ref name or commit id, commit) of a proposal named as a branch, a remote-tracking
    branch or a full commit id; never a tag.

    rev-parse would prefer a tag `feature` (fetched along with everything else) to
    the branch `feature` the approver reviewed, and sign that instead.
    """
    if ref == "HEAD":
        current = repo.current_branch()
        if current is None:
            head = repo.rev("HEAD")
            if head is None:
                raise GitError("HEAD names no commit here", hint="name the proposal branch")
            return head, head
        ref = current
    if re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", ref):
        head = repo.rev(ref)
        if head is None:
            raise GitError(
                f"commit {ref} is not in this repository", hint="fetch the proposal first"
            )
        return ref, head
    names = (
        [ref]
        if ref.startswith(("refs/heads/", "refs/remotes/"))
        else [f"refs/heads/{ref}", f"refs/remotes/{ref}"]
    )
    found = {name: sha for name in names if (sha := repo.rev(name)) is not None}
    if not found and remote is not None and not ref.startswith("refs/"):
        name = f"refs/remotes/{remote}/{ref}"  # only on the remote: check what was pushed
        if fetch and repo.rev(name) is not None:
            repo.fetch(remote, ref)
        sha = repo.rev(name)
        found = {name: sha} if sha is not None else {}
    if len(set(found.values())) > 1:
        both = " and ".join(f"{name} ({sha[:12]})" for name, sha in found.items())
        raise UsageError(
            f"{ref} is ambiguous: {both}",
            hint="name the one you reviewed in full, e.g. refs/heads/NAME",
        )
    if not found:
        raise GitError(
            f"{ref} is not a branch or commit here",
            hint=f"fetch the proposal first (git fetch {remote or 'origin'}), or name it as "
            f"{remote or 'origin'}/BRANCH; "
            "a proposal is a branch, a remote-tracking branch or a full commit id, never a tag",
        )
    name, head = next(iter(found.items()))
    return name, head


def _looks_like_job(text: bytes) -> bool:
    return b"\ncommand:" in b"\n" + text and b"\nid:" in b"\n" + text


def _base_state(repo: Repo, tip: str, records: str | None, trust: str | None) -> Plan:
    """The runner's walk of approved up to `tip`: the policy in force and what is unapproved
    there."""
    root, _ = trust_root(repo, tip, trust)
    now = clock.now()
    return plan(
        repo,
        tip,
        root,
        audit.read_tail(repo, records),
        records=records,
        at=now,
        runner_name="check",
        reviews=github.recorded(repo, records, now=now),
    )
