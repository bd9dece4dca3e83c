"""The one judge: every decision about a job revision or a policy change.

`judge_commit` is handed the facts of one commit on `approved` (or of a proposal's
merge, for `check` and `approve`), the policy in force before it and the files
that were unapproved before it, and returns the verdict. It is pure: it never
reads git or the audit, so `check`, `approve`, the runner and `verify` reach the
same verdict by construction. Gathering the facts is `approvals.Assessor`'s job.

The rules, in the order they apply:
1. A malformed commit (its header read differently by git) approves nothing.
2. A veto is an empty commit naming job revisions, signed by an approver.
3. An octopus merge approves nothing; only a merge signed by an approver approves.
4. A vote binds path, mode and blob, and covers only a path the proposal changed
   relative to its merge base; what the merge itself wrote (a rollback, a
   conflict resolution) is the merge signer's own content.
5. Writers and signers of a file never count for it (unless allow_self_approval).
6. A policy change needs the policy quorum of the policy before it, and must load.
7. A job must parse, be unique among approved jobs, be allowed by `commands`,
   sit in a tree with no unapproved content and no symlink leading outside,
   and reach its requirement.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import Literal

from mergegate.crypto.signatures import SignatureCheck
from mergegate.git.repo import ZERO
from mergegate.rules.job import Job, is_job_path, job_stem, parse_job
from mergegate.rules.policy import POLICY_DIR, CommandRule, Person, Policy, Requirement, load_policy
from mergegate.text import path_display

Kind = Literal["approval", "veto", "unapproved", "other"]
# Why a revision does not run: "" it runs; "unapproved" only its quorum is missing (or
# its approval was not a valid one); "denied" a rule refuses it; "invalid" it is not a valid job.
Refusal = Literal["", "unapproved", "denied", "invalid"]
REGULAR = ("100644", "100755")
_MODES = {"120000": "a symlink", "160000": "a gitlink (submodule)", "040000": "a directory"}


@dataclass(frozen=True)
class Entry:
    """A path's mode and blob in one tree; ABSENT when the path is not there."""

    mode: str
    blob: str

    def describe(self) -> str:
        return "absent" if self == ABSENT else f"{self.blob[:7]} (mode {self.mode})"


ABSENT = Entry("000000", ZERO)


@dataclass(frozen=True)
class Vote:
    person: str  # policy name, or the key fingerprint when no policy key matched
    via: str  # "merge signature of 1a2b3c4" / "approval commit 5d6e7f8" / "review 12 on PR #3"
    counted: bool
    why: str  # why it did not count ("" when it did)

    def describe(self) -> str:
        return (
            f"{self.person} ({self.via})"
            if self.counted
            else f"{self.person} ({self.via}: {self.why})"
        )


@dataclass(frozen=True)
class Writer:
    """A commit that wrote a file's content: its authorship, and who (of the policy) signed it."""

    commit: str
    author_name: str
    author_email: str
    signer: str | None  # the policy person whose approver or proposer key signed it validly
    signature: str  # the signature check's words (why it is not signed, when signer is None)


@dataclass(frozen=True)
class FileFacts:
    """One path a commit changes relative to its first parent."""

    path: str
    before: Entry  # at the first parent
    after: Entry  # at the commit
    base: Entry  # at the merge base of the two parents (= before, for a non-merge)
    side: Entry  # at the second parent (= after, for a non-merge)
    writers: tuple[
        Writer, ...
    ] = ()  # merged commits that changed it, and earlier commits that wrote these bytes
    text: bytes | None = None  # the content of a job or policy file that is a regular file
    last_approved: Entry | None = (
        None  # when the path was unapproved before: its last approved version
    )

    @property
    def merge_wrote(self) -> bool:
        """The merge result is the merge's own content: it differs from the first parent on a
        path the second side never changed (a rollback, any edit), or from the second side's
        version (a conflict resolution)."""
        return self.after != self.before and (self.side == self.base or self.after != self.side)


@dataclass(frozen=True)
class ApprovalFacts:
    """A signed approval commit on the merged side (Mergegate-Approve / Mergegate-Approve-Tree)."""

    commit: str
    signature: SignatureCheck  # against the approver keys of the policy in force
    named: Mapping[
        str, str
        # path -> what its Mergegate-Approve trailer says after the path ("<mode> <blob>" or
        # "<blob>")
    ]
    tree: (
        Mapping[str, Entry] | None
    )  # with a tree trailer naming its own tree: the entry of every path of interest
    tree_mismatch: bool  # a tree trailer that does not name its own tree
    changed: frozenset[
        str
    ]  # paths of interest that the proposal, at this commit, changed relative to the merge base


@dataclass(frozen=True)
class Review:
    """What GitHub's reviews say about a merge (reviews.judge): its votes sit in `extra_votes`."""

    label: str  # "reviews on PR #3 (squash)"
    refused: str  # why it is no review approval ("" when it is one)
    excluded: tuple[
        tuple[str, str], ...
    ] = ()  # (person, why): the PR's authors and committers, by GitHub id


@dataclass(frozen=True)
class CommitFacts:
    sha: str
    parents: tuple[str, ...]
    malformed: str  # "" when git reads the header as it is written
    author_name: str
    author_email: str
    files: tuple[FileFacts, ...]
    signature: SignatureCheck | None = None  # of the merge (or veto), against the approver keys
    approvals: tuple[ApprovalFacts, ...] = ()
    extra_votes: tuple[
        tuple[str, Vote], ...
    ] = ()  # (path, vote) from other evidence, such as reviews
    veto_trailers: tuple[str, ...] = ()
    content_writers: tuple[Writer, ...] = ()  # merged commits that changed any other file
    job_ids: tuple[str, ...] = ()  # every job path in the resulting tree
    symlinks: tuple[
        tuple[str, bytes], ...
    ] = ()  # every symlink in the resulting tree and its target
    policy_tree: Mapping[str, tuple[str, bytes]] | None = (
        None  # policy/ path -> (mode, bytes), when policy/ changes
    )
    policy_drift: tuple[
        str, ...
    ] = ()  # policy/ paths that differ from the policy in force but this commit leaves
    proposal: bool = False  # a proposal's merge that does not exist yet (check, approve)
    merger: str | None = None  # for a proposal: the person whose signed merge to assume, if any
    review: Review | None = (
        None  # GitHub review evidence, for a merge no approver key signed (docs/github.md)
    )

    @property
    def short(self) -> str:
        return "the merge" if self.proposal else self.sha[:7]


@dataclass(frozen=True)
class Decision:
    """The verdict on one job revision introduced by one commit."""

    path: str
    blob: str
    commit: str
    job: Job | None
    runnable: bool
    reason: str
    votes: tuple[Vote, ...] = ()
    requirement: Requirement | None = None
    rule: CommandRule | None = None
    self_approved: bool = False
    refusal: Refusal = ""
    approved: bool = False  # its quorum is met (whatever else refuses it)

    @property
    def approvers(self) -> tuple[str, ...]:
        return tuple(sorted({v.person for v in self.votes if v.counted}))


@dataclass(frozen=True)
class Veto:
    path: str
    blob: str
    person: str
    commit: str


@dataclass(frozen=True)
class PolicyVerdict:
    adopted: bool
    reason: str
    refusal: Refusal  # "invalid" when the new policy cannot be in force whoever approves it
    policy: Policy  # the policy in force after the change
    votes: Mapping[str, tuple[Vote, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class Assessment:
    commit: str
    kind: Kind
    policy: Policy  # the policy in force after this commit
    decisions: tuple[Decision, ...] = ()
    vetoes: tuple[Veto, ...] = ()
    policy_changed: bool = False
    policy_adopted: bool = False
    summary: str = ""
    # Files outside jobs/ and policy/ that this commit changed, and whether a
    # signed merge with their quorum vouched for them.
    content: tuple[str, ...] = ()
    content_approved: bool = False
    unapproved: Mapping[str, str] = field(
        default_factory=dict
    )  # after this commit: path -> first unapproved change
    policy_verdict: PolicyVerdict | None = None


def judge_commit(
    facts: CommitFacts, policy: Policy, unapproved: Mapping[str, str] | None = None
) -> Assessment:
    """The verdict on one commit judged by `policy`, the policy in force before it."""
    unapproved = dict(unapproved or {})
    jobs = [f for f in facts.files if is_job_path(f.path) and f.after != ABSENT]
    policy_files = [f for f in facts.files if f.path.startswith(POLICY_DIR)]
    content = [
        f for f in facts.files if not is_job_path(f.path) and not f.path.startswith(POLICY_DIR)
    ]
    names = tuple(f.path for f in content)
    short = facts.short
    # 1. A commit git could read differently from us approves nothing.
    if facts.malformed:
        return _reject_all(
            facts,
            policy,
            jobs,
            policy_files,
            content,
            unapproved,
            f"commit {short} is malformed ({facts.malformed}); it approves nothing",
        )
    # 2. A veto is an empty, signed commit naming job revisions.
    if not facts.files and facts.veto_trailers and not facts.proposal:
        return _veto(facts, policy, unapproved)
    # 3. Only a merge of two parents, signed by an approver, approves.
    if len(facts.parents) > 2:
        return _reject_all(
            facts,
            policy,
            jobs,
            policy_files,
            content,
            unapproved,
            f"merge {short} has {len(facts.parents)} parents: octopus merges are not approvals",
        )
    signer: str | None = facts.merger
    review = facts.review if not facts.proposal else None
    reviewed = review is not None and not review.refused
    if not facts.proposal:
        check = facts.signature
        signer = (
            check.key.owner if check is not None and check.ok and check.key is not None else None
        )
        # 3b. A merge GitHub made (a merge commit or a squash) approves on its review evidence.
        if review is not None and review.refused and (jobs or policy_files):
            return _reject_all(
                facts,
                policy,
                jobs,
                policy_files,
                content,
                unapproved,
                f"{short} is not a review approval: {review.refused}",
            )
        if len(facts.parents) < 2 and (jobs or policy_files) and not reviewed:
            return _reject_all(
                facts,
                policy,
                jobs,
                policy_files,
                content,
                unapproved,
                f"commit {short} is not a merge: approvals are signed merges into approved",
            )
        if signer is None and (jobs or policy_files) and not reviewed:
            reason = check.reason if check is not None else "unsigned"
            return _reject_all(
                facts,
                policy,
                jobs,
                policy_files,
                content,
                unapproved,
                f"merge {short} is not a valid approval: {_in_policy(reason, policy)}",
            )
    merge = (len(facts.parents) == 2 and (signer is not None or facts.proposal)) or reviewed
    content_ok, content_why = _content(facts, policy, signer, content) if merge else (False, "")
    after = _unapproved_after(facts, content, content_ok, unapproved)
    if not jobs and not policy_files:
        by = (
            f"merge signed by {signer}"
            if signer
            else f"approval by {review.label}"
            if reviewed and review
            else "not a signed approval"
        )
        removed = [
            path_display(f.path) for f in facts.files if is_job_path(f.path) and f.after == ABSENT
        ]
        summary = (
            f"removes {', '.join(removed)}; " if removed else "changes no job or policy; "
        ) + by
        summary += f"; other files: {content_why}" if content and (signer or reviewed) else ""
        return Assessment(
            facts.sha,
            "other",
            policy,
            summary=summary,
            content=names,
            content_approved=content_ok,
            unapproved=after,
        )
    votes = {f.path: _votes(facts, policy, f, signer) for f in (*jobs, *policy_files)}
    # 4. A policy change needs the policy quorum of the policy before it.
    verdict = judge_policy_change(facts, policy, policy_files, votes) if policy_files else None
    # (A proposal still waiting for its merge has its jobs judged all the same, to say what else
    # refuses them.)
    pending = (
        facts.proposal
        and facts.merger is None
        and verdict is not None
        and verdict.refusal == "unapproved"
    )
    if verdict is not None and not verdict.adopted and not pending:
        reason = (
            f"merge {short} changes {POLICY_DIR} without approval ({verdict.reason}); nothing "
            "in it is approved"
        )
        result = _reject_all(facts, policy, jobs, [], content, unapproved, reason, votes=votes)
        return replace(result, policy_changed=True, policy_verdict=verdict)
    # 5. Each job revision.
    # Built once for the whole commit (each job compared with every other job path was
    # quadratic: a merge of a thousand jobs made a million comparisons).
    merged = frozenset(j.path for j in jobs)
    by_stem: dict[str, list[str]] = {}
    for other in facts.job_ids:
        by_stem.setdefault(job_stem(other), []).append(other)
    decisions = tuple(
        judge_job(facts, policy, f, votes[f.path], merged, by_stem, unapproved)
        for f in sorted(jobs, key=lambda f: f.path)
    )
    after = _jobs_after(facts, decisions, after)
    decisions = _taint(facts, decisions, after)
    summary = (
        f"approval by {signer}"
        if signer
        else f"approval by {review.label}"
        if reviewed and review
        else "proposal"
    )
    if verdict is not None:
        summary += (
            f"; policy change {'adopted' if verdict.adopted else 'pending'}: {verdict.reason}"
        )
    if content:
        summary += f"; other files: {content_why}"
    return Assessment(
        facts.sha,
        "approval",
        verdict.policy if verdict else policy,
        decisions,
        policy_changed=verdict is not None,
        policy_adopted=verdict is not None and verdict.adopted,
        summary=summary,
        content=names,
        content_approved=content_ok,
        unapproved=after,
        policy_verdict=verdict,
    )


def judge_job(
    facts: CommitFacts,
    policy: Policy,
    f: FileFacts,
    votes: tuple[Vote, ...],
    merged: frozenset[str],
    by_stem: Mapping[str, list[str]],
    unapproved: Mapping[str, str],
) -> Decision:
    """One job revision: valid, unique, allowed, signed where required, then its quorum."""
    path, blob = f.path, f.after.blob

    def refuse(refusal: Refusal, reason: str, job: Job | None, **extra: object) -> Decision:
        return Decision(path, blob, facts.sha, job, False, reason, votes, refusal=refusal, **extra)  # type: ignore[arg-type]

    job, invalid = read_job(path, f.after, f.text)
    if job is None:
        return refuse("invalid", f"invalid job file: {invalid}", None)
    # Only jobs that were approved (or come in this same commit) hold an id: a stray file
    # pushed without approval must not keep an approved job from running.
    # `merged`: the job paths this commit merges; `by_stem`: facts.job_ids by their stem.
    same = sorted(
        p for p in by_stem.get(job.id, ()) if p != path and (p in merged or p not in unapproved)
    )
    if same:
        return refuse("invalid", f"job id '{job.id}' is not unique: also {', '.join(same)}", job)
    requirement = policy.requirement_for(job)
    command = policy.decide_command(job)
    if not command.allowed:
        return refuse("denied", f"denied by policy: {command.reason}", job, requirement=requirement)
    if policy.require_signed_proposals:
        unsigned = _unsigned(policy, f, facts)
        if unsigned:
            return refuse(
                "denied", f"require_signed_proposals: {unsigned}", job, requirement=requirement
            )
    escape = escaping_symlink(facts.symlinks)
    if escape:
        return refuse(
            "denied",
            f"the tree at {facts.short} holds {escape}, which points outside the workspace",
            job,
            requirement=requirement,
        )
    quorum = policy.quorum(requirement, [v.person for v in votes if v.counted])
    if not quorum.met:
        return refuse(
            "unapproved",
            f"not approved: {quorum.reason}; {describe_votes(votes)}",
            job,
            requirement=requirement,
        )
    self_approved = any("self-approved" in v.via for v in votes if v.counted)
    return Decision(
        path,
        blob,
        facts.sha,
        job,
        True,
        f"{quorum.reason}; {command.reason}",
        votes,
        requirement,
        command.rule,
        self_approved,
        approved=True,
    )


def judge_policy_change(
    facts: CommitFacts,
    policy: Policy,
    files: list[FileFacts],
    votes: Mapping[str, tuple[Vote, ...]],
) -> PolicyVerdict:
    """Whether a change under policy/ is adopted, and the policy in force after it."""

    def rejected(refusal: Refusal, reason: str) -> PolicyVerdict:
        return PolicyVerdict(False, reason, refusal, policy, votes)

    # What the new policy would be, whoever approves it: invalid means no quorum can help.
    tree = facts.policy_tree or {}
    odd = sorted(
        f"{path} ({_MODES.get(mode, 'mode ' + mode)})"
        for path, (mode, _) in tree.items()
        if mode not in REGULAR
    )
    if odd:
        return rejected(
            "invalid",
            f"the new policy is invalid: {', '.join(odd)} under {POLICY_DIR} is not a regular file",
        )
    try:
        new = load_policy(lambda p: tree[p][1] if p in tree else None, commit=facts.sha)
    except (
        Exception
    ) as exc:  # no content may stop later passes: any parser failure rejects the change
        why = str(exc) if hasattr(exc, "exit_code") else f"it cannot be read ({type(exc).__name__})"
        return rejected("invalid", f"the new policy is invalid: {why}")
    if facts.policy_drift:
        return rejected(
            "invalid",
            f"{', '.join(facts.policy_drift)} differ from the policy in force ({policy.where}) but "
            "this "
            "merge does not change them, so nobody approved them",
        )
    if policy.require_signed_proposals:
        for f in files:
            unsigned = _unsigned(policy, f, facts)
            if unsigned:
                return rejected("denied", f"require_signed_proposals: {unsigned}")
    people: set[str] | None = None
    for f in files:
        counted = {v.person for v in votes[f.path] if v.counted}
        people = counted if people is None else people & counted
    quorum = policy.quorum(policy.policy_requirement(), people or set())
    if not quorum.met:
        details = "; ".join(
            f"{f.path}: {describe_votes(votes[f.path])}"
            for f in sorted(files, key=lambda f: f.path)
        )
        return rejected("unapproved", f"{quorum.reason}; {details}")
    return PolicyVerdict(True, quorum.reason, "", new, votes)


def read_job(path: str, entry: Entry, text: bytes | None) -> tuple[Job | None, str]:
    """The job at `entry`, or None and why it is not a valid job file.

    Anything but a regular file at a job path, and any failure to parse (not only
    the ones the parser reports), rejects this one file: no content of any commit
    may make later passes fail.
    """
    if entry.mode not in REGULAR:
        return (
            None,
            f"{path_display(path)} is {_MODES.get(entry.mode, 'mode ' + entry.mode)}, not a "
            f"regular file ({path_display(path)})",
        )
    if text is None:
        return None, f"its content is not available ({path_display(path)})"
    try:
        return parse_job(text, path=path, blob=entry.blob), ""
    except Exception as exc:
        return None, str(exc) if hasattr(
            exc, "exit_code"
        ) else f"it cannot be read ({type(exc).__name__}) ({path_display(path)})"


def escaping_symlink(symlinks: Iterable[tuple[str, bytes]]) -> str:
    """'a symlink x -> ../..' for the first symlink whose target leaves the tree, else ''.

    Judged lexically from the link's own directory (parents in a git tree are real
    directories); an absolute target, or one that climbs above the root, escapes.
    """
    for path, target in symlinks:
        text = target.decode("utf-8", "replace")
        joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), text))
        if text.startswith("/") or joined == ".." or joined.startswith("../") or "\0" in text:
            return f"a symlink {path_display(path)} -> {text[:80]}"
    return ""


def describe_votes(votes: Iterable[Vote]) -> str:
    votes = list(votes)
    counted = [v.describe() for v in votes if v.counted]
    other = [v.describe() for v in votes if not v.counted]
    text = f"counted: {', '.join(counted) or 'none'}"
    return text + (f"; not counted: {', '.join(other)}" if other else "")


# -- votes --------------------------------------------------------------------------


def _votes(
    facts: CommitFacts, policy: Policy, f: FileFacts, signer: str | None
) -> tuple[Vote, ...]:
    """Every vote for one file, with why it does or does not count."""
    votes: list[Vote] = []
    if signer is not None:
        votes.append(Vote(signer, f"merge signature of {facts.short}", True, ""))
    for approval in facts.approvals:
        votes += _approval_votes(policy, approval, f)
    votes += [_extra_vote(v, f) for path, v in facts.extra_votes if path == f.path]
    excluded = {
        **dict(facts.review.excluded if facts.review else ()),
        **excluded_people(policy, _writers(facts, f)),
    }
    return tuple(_exclude(v, excluded, policy) for v in votes)


def _extra_vote(vote: Vote, f: FileFacts) -> Vote:
    """A review vote covers what the pull request wrote, as an approval commit does (rule 4):
    what the merge itself wrote is the merger's own, and a GitHub merge has no signer."""
    if vote.counted and f.merge_wrote:
        return Vote(
            vote.person,
            vote.via,
            False,
            "the merge itself wrote this content (not the reviewed pull request)",
        )
    return vote


def _approval_votes(policy: Policy, approval: ApprovalFacts, f: FileFacts) -> list[Vote]:
    check = approval.signature
    person = check.key.owner if check.ok and check.key else (check.signer or "unknown")
    via = f"approval commit {approval.commit[:7]}"
    claims: list[Entry | str] = []
    if approval.tree is not None:
        claims.append(
            approval.tree.get(f.path, ABSENT)
        )  # absent from the approved tree: its deletion is approved
    if f.path in approval.named:
        claims.append(_named_entry(approval.named[f.path]))
    votes = []
    for claim in claims[:1] if approval.tree is not None else claims:
        if not check.ok:
            votes.append(Vote(person, via, False, _in_policy(check.reason, policy)))
        elif isinstance(claim, str):
            votes.append(Vote(person, via, False, claim))
        elif f.path not in approval.changed:
            votes.append(
                Vote(
                    person,
                    via,
                    False,
                    "the proposal did not change this file relative to its merge base with "
                    "approved, so the vote does not cover it",
                )
            )
        elif f.merge_wrote:
            votes.append(
                Vote(
                    person,
                    via,
                    False,
                    "the merge itself wrote this content (not the reviewed proposal)",
                )
            )
        elif claim.blob != f.after.blob:
            votes.append(
                Vote(
                    person,
                    via,
                    False,
                    f"stale: approves blob {claim.blob[:7]}, merged blob is {f.after.blob[:7]}",
                )
            )
        elif claim.mode != f.after.mode:
            votes.append(
                Vote(
                    person,
                    via,
                    False,
                    f"stale: approves mode {claim.mode}, merged mode is {f.after.mode} "
                    "(a vote binds path, mode and blob)",
                )
            )
        else:
            votes.append(Vote(person, via, True, ""))
    if approval.tree_mismatch:
        votes.append(
            Vote(person, via, False, "its Mergegate-Approve-Tree does not name its own tree")
        )
    return votes


def _named_entry(value: str) -> Entry | str:
    """`<mode> <blob>` or `<blob>` (a regular, non-executable file), or why neither."""
    mode, _, blob = value.rpartition(" ")
    mode = mode or "100644"
    if len(blob) != 40 or any(c not in "0123456789abcdef" for c in blob):
        return f"names blob {blob!r}, not a full 40-hex id"
    if mode not in (*REGULAR, "120000"):
        return f"names mode {mode!r}, not 100644, 100755 or 120000"
    return Entry(mode, blob)


def _writers(facts: CommitFacts, f: FileFacts) -> list[Writer]:
    writers = list(f.writers)
    if f.merge_wrote or len(facts.parents) < 2:
        writers.append(_self(facts))
    return writers


def _self(facts: CommitFacts) -> Writer:
    owner = (
        facts.merger
        if facts.proposal
        else (
            facts.signature.key.owner
            if facts.signature is not None and facts.signature.ok and facts.signature.key
            else None
        )
    )
    return Writer(facts.sha, facts.author_name, facts.author_email, owner, "")


def excluded_people(policy: Policy, writers: Iterable[Writer]) -> dict[str, str]:
    """Who may not count for a file: the authors and signers of the commits that wrote it."""
    excluded: dict[str, str] = {}
    for writer in writers:
        for person in people_matching(policy, writer.author_name, writer.author_email):
            excluded.setdefault(person.name, f"author of {writer.commit[:7]}")
        if writer.signer is not None:
            excluded.setdefault(
                writer.signer, f"signed {writer.commit[:7]}, which changes the file"
            )
    return excluded


def people_matching(policy: Policy, name: str, email: str) -> list[Person]:
    return [
        p
        for p in (*policy.approvers, *policy.proposers)
        if p.name.lower() == name.lower() or (email and email.lower() in p.emails)
    ]


def _exclude(vote: Vote, excluded: Mapping[str, str], policy: Policy) -> Vote:
    if not vote.counted or vote.person not in excluded:
        return vote
    if policy.allow_self_approval:
        return Vote(vote.person, vote.via + f", self-approved: {excluded[vote.person]}", True, "")
    return Vote(vote.person, vote.via, False, excluded[vote.person])


def _unsigned(policy: Policy, f: FileFacts, facts: CommitFacts) -> str:
    for writer in f.writers:
        if writer.signer is None:
            return (
                f"commit {writer.commit[:7]} that changes {path_display(f.path)} is not signed "
                f"by a key in {policy.where} ({writer.signature})"
            )
    return ""


# -- other files ------------------------------------------------------------------------


def _content(
    facts: CommitFacts, policy: Policy, signer: str | None, files: list[FileFacts]
) -> tuple[bool, str]:
    """Whether the other files a merge brings (scripts a job may run) have their quorum.

    Like a job, they need the highest job requirement, from people who did not write
    them: a two-person rule must not end at the script the job calls.
    """
    if not files:
        return True, ""
    voters = [
        {v.person for a in facts.approvals for v in _approval_votes(policy, a, f) if v.counted}
        | {
            v.person
            for path, v in facts.extra_votes
            if path == f.path and _extra_vote(v, f).counted
        }
        for f in files
    ]
    people = ({signer} if signer else set()) | set.intersection(*voters)
    excluded: dict[str, str] = {}
    writers = list(facts.content_writers)
    if any(f.merge_wrote for f in files):
        writers.append(_self(facts))
    if policy.require_signed_proposals:
        for writer in writers:
            if writer.signer is None and writer.commit != facts.sha:
                return False, (
                    f"require_signed_proposals: commit {writer.commit[:7]} that changes other "
                    "files is not signed "
                    f"by a key in {policy.where}"
                )
    excluded = {
        **dict(facts.review.excluded if facts.review else ()),
        **excluded_people(policy, writers),
    }
    if not policy.allow_self_approval:
        people -= set(excluded)
    quorum = policy.quorum(policy.content_requirement(), people)
    not_counted = "; ".join(
        f"{p} not counted ({why})"
        for p, why in sorted(excluded.items())
        if not policy.allow_self_approval
    )
    return quorum.met, quorum.reason + (f"; {not_counted}" if not_counted else "")


def _unapproved_after(
    facts: CommitFacts, files: list[FileFacts], approved: bool, unapproved: dict[str, str]
) -> dict[str, str]:
    """Other files left unapproved after this commit (path -> the first unapproved change).

    An unapproved change stays so until a merge with the quorum approves the file
    relative to its last approved version (the reviewer's diff started there), or
    the file is back at that version; a file no longer in the tree taints nothing.
    """
    after = dict(unapproved)
    for f in files:
        last = f.last_approved if f.path in unapproved else None
        if f.after == ABSENT or (last is not None and f.after == last):
            after.pop(f.path, None)
        elif approved and (last is None or f.base == last):
            after.pop(f.path, None)
        else:
            after.setdefault(f.path, facts.sha)
    return after


def _jobs_after(
    facts: CommitFacts, decisions: tuple[Decision, ...], after: dict[str, str]
) -> dict[str, str]:
    """A job file's revision that did not reach its quorum is unapproved: it holds no id."""
    for f in facts.files:
        if is_job_path(f.path) and f.after == ABSENT:
            after.pop(f.path, None)
    for d in decisions:
        if d.approved:
            after.pop(d.path, None)
        else:
            after.setdefault(d.path, facts.sha)
    return after


def _taint(
    facts: CommitFacts, decisions: tuple[Decision, ...], unapproved: Mapping[str, str]
) -> tuple[Decision, ...]:
    """No job runs in a tree that holds content no signed approval covers."""
    tainted = sorted(p for p in unapproved if not is_job_path(p) and not p.startswith(POLICY_DIR))
    if not tainted or not any(d.runnable for d in decisions):
        return decisions
    shown = ", ".join(f"{path_display(p)} (changed by {unapproved[p][:7]})" for p in tainted[:5])
    reason = (
        f"the tree at {facts.short} holds changes that no signed approval covers: {shown}; "
        "put them back to their last approved version (or remove them), then propose the change "
        "again"
    )
    return tuple(
        replace(d, runnable=False, reason=reason, refusal="denied") if d.runnable else d
        for d in decisions
    )


def _reject_all(
    facts: CommitFacts,
    policy: Policy,
    jobs: list[FileFacts],
    policy_files: list[FileFacts],
    content: list[FileFacts],
    unapproved: dict[str, str],
    reason: str,
    *,
    votes: Mapping[str, tuple[Vote, ...]] | None = None,
) -> Assessment:
    # The job's id, when the file is valid, names what was refused in the record.
    decisions = tuple(
        Decision(
            f.path,
            f.after.blob,
            facts.sha,
            read_job(f.path, f.after, f.text)[0],
            False,
            reason,
            (votes or {}).get(f.path, ()),
            refusal="unapproved",
        )
        for f in sorted(jobs, key=lambda f: f.path)
    )
    after = _jobs_after(facts, decisions, _unapproved_after(facts, content, False, unapproved))
    return Assessment(
        facts.sha,
        "unapproved",
        policy,
        decisions,
        policy_changed=bool(policy_files),
        summary=reason,
        content=tuple(f.path for f in content),
        unapproved=after,
    )


def _veto(facts: CommitFacts, policy: Policy, unapproved: dict[str, str]) -> Assessment:
    check = facts.signature
    if check is None or not check.ok or check.key is None:
        why = check.reason if check is not None else "unsigned"
        return Assessment(
            facts.sha,
            "other",
            policy,
            summary=f"veto ignored: {_in_policy(why, policy)}",
            unapproved=unapproved,
        )
    vetoes = []
    for trailer in facts.veto_trailers:
        path, _, blob = trailer.rpartition(" ")
        vetoes.append(Veto(path, blob, check.key.owner, facts.sha))
    return Assessment(
        facts.sha,
        "veto",
        policy,
        vetoes=tuple(vetoes),
        summary=f"veto by {check.key.owner}",
        unapproved=unapproved,
    )


def _in_policy(reason: str, policy: Policy) -> str:
    return reason if "policy" in reason else f"{reason} (judged by {policy.where})"
