"""A proposal before it is merged: what `check` reports and what `approve` signs."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mergegate.audit import log as audit
from mergegate.crypto.signatures import parse_public_key
from mergegate.errors import ConfigError, GitError, JobFailed, UsageError
from mergegate.facts.assessor import APPROVE_TRAILER, APPROVE_TREE_TRAILER, VETO_TRAILER, Assessor
from mergegate.facts.branches import open_branch, trust_root
from mergegate.git.repo import ZERO, Repo
from mergegate.github import gather as github
from mergegate.rules.job import is_job_path
from mergegate.rules.judge import (
    ABSENT,
    Assessment,
    CommitFacts,
    Decision,
    Entry,
    Vote,
    describe_votes,
    judge_commit,
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

    def as_json(self) -> dict[str, Any]:
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
    assessor = Assessor(repo, at=datetime.now(UTC))
    unapproved = work.unapproved
    assessor.known = lambda path, blob: (
        path in unapproved or (is_job_path(path) and audit.mentions(repo, records, path, blob))
    )
    facts = assessor.proposal_facts(
        base_tip=base_tip, head=head, tree=tree, policy=policy, unapproved=unapproved, merger=merger
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
    needs = f"needs {policy.content_requirement().describe()}, from approvers who did not write it"
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
    elif d.runnable:
        words = f"quorum met; {votes}"
    else:
        # The judge's refusal ('not approved: 1 of 2 ...; counted: ...') already lists the votes:
        # said once, and without 'not approved' on a line that is about the approvals.
        words = d.reason.removeprefix("not approved: ")
        words = words if words.endswith(votes) else f"{words}; {votes}"
    if not d.approved and merger is None:
        words += (
            "; a signed merge, or a review on GitHub, by an approver who did not write it "
            "counts as one more"
        )
    return FileCheck(
        d.path,
        d.blob,
        d.job.id,
        state,
        policy.decide_command(d.job).reason,
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
    now = datetime.now(UTC)
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


@dataclass(frozen=True)
class Approval:
    commit: str
    kind: str  # "approval commit" or "merge"
    pushed_to: str
    report: CheckReport


def approve(
    *,
    repo_path: Path,
    branch_name: str,
    base: str,
    remote: str,
    merge: bool,
    fetch: bool,
    trust: str | None = None,
) -> Approval:
    """Sign an approval commit on the proposal (or the merge into approved) and push it."""
    report = check(
        repo_path=repo_path, ref=branch_name, base=base, remote=remote, fetch=fetch, trust=trust
    )
    if report.exit_code != 0:
        bad = next(f for f in report.files if f.state in ("invalid", "denied"))
        raise JobFailed(
            f"refusing to approve {branch_name}: {bad.path} is {bad.state}: {bad.reason}"
        )
    if not report.files:
        raise UsageError(f"{branch_name} changes no job or policy file relative to {base}")
    repo = Repo(repo_path)
    _can_sign(repo)
    person = _would_count(repo, report)
    if merge and person is not None:
        _merge_would_approve(repo_path, branch_name, base, remote, trust, person)
    has_remote = repo.has_remote(remote)
    head = report.head
    if merge:
        tree = repo.merge_tree(report.base, head)
        message = f"Merge {branch_name} into {base} (mergegate approve)\n"
        sha = repo.commit_tree(
            tree=tree, parents=(report.base, head), message=message, author=None, sign=True
        )
        target, old = base, report.base
    else:
        tree = repo.commit(head).tree
        # One line per job and policy file for the reader; the tree line approves
        # every file as it is (scripts too, and names no trailer could hold).
        named = "".join(
            f"{APPROVE_TRAILER}: {f.path} {f.mode} {f.blob}\n"
            for f in report.files
            if f.state != "content"
            and f.blob != ZERO
            and "\n" not in f.path
            and not f.path.startswith("\0")
        )
        message = (
            f"mergegate: approve {len(report.files)} "
            f"file(s)\n\n{named}{APPROVE_TREE_TRAILER}: {tree}\n"
        )
        sha = repo.commit_tree(tree=tree, parents=(head,), message=message, author=None, sign=True)
        target, old = _branch_name(report.resolved, remote), head
    if has_remote:
        if not repo.push(remote, sha, target):
            raise GitError(f"{remote}/{target} moved while approving", hint="run the command again")
        local = repo.rev(f"refs/heads/{target}")
        # An approval commit has the tree of its parent, so moving a checked-out
        # branch onto it leaves the working tree and index exactly as they were.
        if local == old and (not merge or repo.current_branch() != target):
            repo.update_ref(f"refs/heads/{target}", sha, old)
        pushed = f"{remote}/{target}"
    else:
        if repo.current_branch() == target and merge:
            raise GitError(
                f"{target} is checked out here; switch branches before approving into it"
            )
        if not repo.update_ref(f"refs/heads/{target}", sha, old):
            raise GitError(f"{target} moved while approving", hint="run the command again")
        pushed = target
    return Approval(sha, "merge" if merge else "approval commit", pushed, report)


def _can_sign(repo: Repo, what: str = "approvals") -> None:
    if (repo.config("gpg.format") or "openpgp") == "ssh" and repo.config("user.signingkey") is None:
        raise UsageError(
            "git is set to sign with ssh but has no signing key",
            hint="git config user.signingkey ~/.ssh/id_ed25519",
        )
    if repo.config("gpg.format") is None and repo.config("user.signingkey") is None:
        raise UsageError(
            f"git has no signing key configured: {what} must be signed",
            hint="git config gpg.format ssh && git config user.signingkey ~/.ssh/id_ed25519",
        )


def _would_count(repo: Repo, report: CheckReport) -> str | None:
    """Refuse to sign an approval that the runner would not count, and say why; the signer, when
    known."""
    policy = report.policy_in_force
    assert policy is not None
    person = _signing_person(repo, policy)
    if person is None:
        return None  # an OpenPGP key or one we cannot read: the runner still judges it
    if person not in {p.name for p in policy.approvers}:
        raise JobFailed(
            f"your signing key belongs to {person}, who is not an approver in {policy.where}"
        )
    if policy.allow_self_approval:
        return person
    assessor = Assessor(repo, at=datetime.now(UTC))
    assert report.facts is not None
    for f in report.files:
        why = assessor.excluded(policy, report.facts, f.path).get(person)
        if why is not None:
            raise JobFailed(
                f"your approval of {f.path} would not count: you ({person}) are the {why}",
                hint="ask another approver; an author or signer of a change never counts for it "
                "(mergegate inbox lists who may approve)",
            )
    return person


def _merge_would_approve(
    repo_path: Path, branch_name: str, base: str, remote: str, trust: str | None, person: str
) -> None:
    """Refuse a signed merge the runner would reject: a rejected revision is final, so a merge short
    of
    its quorum (or of the policy quorum) would need the file changed before anyone could approve it
    again."""
    report = check(
        repo_path=repo_path,
        ref=branch_name,
        base=base,
        remote=remote,
        fetch=False,
        trust=trust,
        merger=person,
    )
    assessment = report.assessment
    assert assessment is not None
    verdict = assessment.policy_verdict
    if verdict is not None and not verdict.adopted:
        raise JobFailed(
            f"refusing to merge {branch_name}: its policy change would not be adopted with your "
            f"signature: {verdict.reason}",
            hint="first the approval commits it lacks: other approvers run mergegate approve "
            "BRANCH (without --merge)",
        )
    # Not runnable, not only not approved: a job with its quorum in a tree holding other files short
    # of
    # theirs (a script changed after the approval commits) is rejected for good too.
    short = next((d for d in assessment.decisions if not d.runnable), None)
    if short is not None:
        raise JobFailed(
            f"refusing to merge {branch_name}: with your signature the runner would reject "
            f"{short.path} "
            f"for good: {short.reason}",
            hint="a rejected revision is final: first the approval commits it lacks (other "
            "approvers run "
            "mergegate approve BRANCH, without --merge); mergegate check BRANCH shows the votes",
        )
    # Other files this merge would leave unapproved (dated by the proposal's head:
    # `judge._unapproved_after`)
    # refuse every later job in the tree until a merge with their quorum approves them.
    left = sorted(
        path
        for path, since in assessment.unapproved.items()
        if since == report.head and not is_job_path(path)
    )
    if left:
        raise JobFailed(
            f"refusing to merge {branch_name}: with your signature {', '.join(left[:5])} would be "
            "left without the "
            "approvals other files need, and every later job in the tree refused until a merge "
            "with them",
            hint="first the approval commits it lacks (other approvers run mergegate approve "
            "BRANCH, without "
            "--merge); mergegate check BRANCH shows what each file needs",
        )


def _signing_person(repo: Repo, policy: Policy) -> str | None:
    """The policy person whose ssh key is this clone's git signing key, if any can be told."""
    if (repo.config("gpg.format") or "openpgp") != "ssh":
        return None
    configured = repo.config("user.signingkey")
    if configured is None:
        raise UsageError(
            "git has no signing key configured",
            hint="git config gpg.format ssh && git config user.signingkey ~/.ssh/id_ed25519",
        )
    line = configured[len("key::") :] if configured.startswith("key::") else None
    if line is None:
        path = Path(configured).expanduser()
        public = path if path.suffix == ".pub" else path.with_name(path.name + ".pub")
        if not public.exists():
            return None
        line = public.read_text().strip()
    try:
        fingerprint = parse_public_key(line, owner="you", source="user.signingkey").fingerprint
    except ConfigError:
        return None
    owner = next(
        (
            k.owner
            for p in (*policy.approvers, *policy.proposers)
            for k in p.keys
            if k.fingerprint == fingerprint
        ),
        None,
    )
    if owner is None:
        raise JobFailed(
            f"your signing key {fingerprint} is not a key in {policy.where}",
            hint="sign with the key the policy lists for you, or have it added by a policy change",
        )
    return owner


def _branch_name(ref: str, remote: str) -> str:
    """The branch an approval commit goes on: the one the proposal was resolved as."""
    for prefix in (f"refs/remotes/{remote}/", "refs/heads/"):
        if ref.startswith(prefix):
            return ref[len(prefix) :]
    raise UsageError(
        f"{ref} is not a branch, so an approval commit has nowhere to go",
        hint="name the proposal branch, or approve with --merge",
    )


@dataclass(frozen=True)
class VetoResult:
    commit: str
    path: str
    blob: str
    pushed_to: str
    started: tuple[
        audit.Record, ...
    ] = ()  # the revision's `started` records already on the audit branch


def veto(
    *, repo_path: Path, path: str, blob: str | None, remote: str, branch: str, fetch: bool
) -> VetoResult:
    """Push a signed, empty commit on approved that vetoes one job revision (before it starts)."""
    repo = Repo(repo_path)
    _can_sign(repo, "vetoes")
    source = open_branch(repo, remote=remote, branch=branch, fetch=fetch)
    if source.remote is None and repo.current_branch() == branch:
        raise GitError(
            f"{branch} is checked out here; the veto would move it under your working tree",
            hint="git switch to another branch first",
        )
    tip = source.tip()
    target = blob or repo.file_blob(tip, path)
    if target is None:
        raise UsageError(
            f"{path} is not on {branch}",
            hint="name the job file as it is on approved, or pass --blob",
        )
    message = f"mergegate: veto {path}\n\n{VETO_TRAILER}: {path} {target}\n"
    sha = repo.commit_tree(
        tree=repo.commit(tip).tree, parents=(tip,), message=message, author=None, sign=True
    )
    if not source.publish(sha, tip):
        raise GitError(f"{branch} moved while vetoing", hint="run the command again")
    # A veto stops only what has not started: say so when the revision already did (records as of
    # this
    # look at the audit branch; a grep, not the chain check: it only words a warning).
    _, records = source.tips()
    started = tuple(
        r
        for r in audit.grep(repo, records, target)
        if r.event == "started" and r.get("path") == path and r.get("blob") == target
    )
    # Named as approve and propose name where they pushed (origin/approved), not by the ref read.
    return VetoResult(
        sha, path, target, f"{remote}/{branch}" if source.remote is not None else branch, started
    )
