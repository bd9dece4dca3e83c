"""`approve`: sign an approval commit on a proposal (or the merge into approved) and push it.

It signs only what `check` allows, and refuses a signature the runner would not count.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mergegate import clock
from mergegate.crypto.signatures import parse_public_key
from mergegate.errors import ConfigError, GitError, JobFailed, UsageError
from mergegate.facts.assessor import APPROVE_TRAILER, APPROVE_TREE_TRAILER, Assessor
from mergegate.facts.branches import open_branch, trust_root
from mergegate.git.repo import Repo
from mergegate.git.values import ZERO
from mergegate.operations.check import CheckReport, check
from mergegate.operations.emergencies import owed_now
from mergegate.rules.break_glass import overdue_by, second_refusal
from mergegate.rules.emergency import TRAILER as EMERGENCY_TRAILER
from mergegate.rules.emergency import reason_problem
from mergegate.rules.job import is_job_path
from mergegate.rules.policy import Policy


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
    emergency: str | None = None,
) -> Approval:
    """Sign an approval commit on the proposal (or the merge into approved) and push it; with
    `emergency`, a signed merge carrying that Mergegate-Emergency reason (break-glass)."""
    if emergency is not None:
        _emergency_usable(emergency, merge=merge)
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
    can_sign(repo)
    if emergency is None:
        person = _would_count(repo, report)
    else:
        # The emergency approver may be the job's writer (the review it owes is others'); the
        # judge, handed the merge's trailer, says whether the emergency holds.
        person = _emergency_signer(repo, report)
    if merge and person is not None:
        judged = _merge_would_approve(
            repo_path,
            branch_name,
            base,
            remote,
            trust,
            person,
            emergency=() if emergency is None else (emergency.strip(),),
        )
        if emergency is not None:
            _no_overdue_review(repo, judged, trust=trust, remote=remote, base=base)
            # What is printed is the merge as signed: the emergency runs it at once, in a shut
            # window too, so the proposal's 'once merged it is waiting for window ...' is wrong.
            report = judged
    has_remote = repo.has_remote(remote)
    head = report.head
    if merge:
        tree = repo.merge_tree(report.base, head)
        message = f"Merge {branch_name} into {base} (mergegate approve)\n"
        if emergency is not None:
            message += f"\n{EMERGENCY_TRAILER}: {emergency.strip()}\n"
        sha = repo.commit_tree(
            tree=tree, parents=(report.base, head), message=message, author=None, sign=True
        )
        target, old = base, report.base
    else:
        tree = repo.commit(head).tree
        # One line per job and policy file for the reader; the tree line approves every file as it
        # is (scripts too, and names no trailer could hold).
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
        # An approval commit has the tree of its parent, so moving a checked-out branch onto it
        # leaves the working tree and index exactly as they were.
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


def can_sign(repo: Repo, what: str = "approvals") -> None:
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
    person = signing_person(repo, policy)
    if person is None:
        return None  # an OpenPGP key or one we cannot read: the runner still judges it
    if person not in {p.name for p in policy.approvers}:
        raise JobFailed(
            f"your signing key belongs to {person}, who is not an approver in {policy.where}"
        )
    if policy.allow_self_approval:
        return person
    assessor = Assessor(repo)
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


def _emergency_usable(reason: str, *, merge: bool) -> None:
    """Refuse, before anything is signed, an emergency the judge would refuse for its form."""
    if not merge:
        raise UsageError(
            "--emergency signs the merge itself: add --merge",
            hint="mergegate approve BRANCH --merge --emergency 'what broke and why it cannot wait'",
        )
    problem = reason_problem([reason]) or (
        "its reason must be one line" if "\n" in reason.strip() else ""
    )
    if problem:
        raise UsageError(
            f"--emergency: {problem}",
            hint="--emergency 'database full, pager INC-4711: purge before the 09:00 batch'",
        )


def _emergency_signer(repo: Repo, report: CheckReport) -> str:
    """The emergency approver this clone signs as: the merge is simulated as them before it is
    signed, since a merge the runner rejects is final."""
    policy = report.policy_in_force
    assert policy is not None
    person = signing_person(repo, policy)
    if person is None:
        raise UsageError(
            "--emergency: your git signing key is not an ssh key of a person in "
            f"{policy.where}, so the merge cannot be judged before it is signed",
            hint="sign with the ssh key the policy lists for you (git config user.signingkey)",
        )
    if policy.emergency is None or not policy.emergency.allows(person):
        raise JobFailed(
            f"your signing key belongs to {person}, who is not in emergency.approvers of "
            f"{policy.where}",
            hint="docs/policy.md, Break-glass: who may use an emergency is the policy's choice",
        )
    return person


def _merge_would_approve(
    repo_path: Path,
    branch_name: str,
    base: str,
    remote: str,
    trust: str | None,
    person: str,
    *,
    emergency: tuple[str, ...] = (),
) -> CheckReport:
    """Refuse a signed merge the runner would reject: a rejected revision is final, so a merge short
    of its quorum (or of the policy quorum) would need the file changed before anyone could approve
    it again."""
    report = check(
        repo_path=repo_path,
        ref=branch_name,
        base=base,
        remote=remote,
        fetch=False,
        trust=trust,
        merger=person,
        emergency=emergency,
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
    # of theirs (a script changed after the approval commits) is rejected for good too.
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
    # `judge._unapproved_after`) refuse every later job in the tree until a merge with their quorum
    # approves them.
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
    return report


def _no_overdue_review(
    repo: Repo, report: CheckReport, *, trust: str | None, remote: str, base: str
) -> None:
    """Refuse an emergency the runner would reject for good: its signer owes an overdue review
    (the runner's eligibility step, not the judge, says so, so the simulated merge cannot)."""
    now = clock.now()
    records = open_branch(repo, remote=remote, branch=base, fetch=False).audit_tip()
    root, _ = trust_root(repo, report.base, trust)
    overdue = overdue_by(owed_now(repo, report.base, root, records, at=now), now)
    assert report.assessment is not None
    for d in report.assessment.decisions:
        why = second_refusal(d, overdue)
        if why is not None:
            raise JobFailed(
                f"refusing to merge {report.ref}: the runner would reject {d.path} for good: {why}",
                hint="a rejected revision is final: have the overdue review given first "
                "(docs/policy.md, Break-glass)",
            )


def signing_person(repo: Repo, policy: Policy) -> str | None:
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
