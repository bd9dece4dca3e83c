"""The judge's model: the facts it is handed and the verdicts it returns, as plain values.

`facts.assessor` reads git into `CommitFacts` (signatures already checked, as `SignatureCheck`
verdicts); `judge.judge_commit` returns an `Assessment`. GitHub's review reading (`github.reviews`)
hands its votes over as `Vote`s. Nothing here reads git, the audit or the network, so every wing
above the rules can import it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Literal

from mergegate.crypto.signatures import SignatureCheck
from mergegate.rules.job import Job
from mergegate.rules.policy import CommandRule, Policy, Requirement

Kind = Literal["approval", "veto", "renewal", "unapproved", "other"]
# Why a revision does not run: "" it runs; "unapproved" only its quorum is missing (or
# its approval was not a valid one); "denied" a rule refuses it; "invalid" it is not a valid job.
Refusal = Literal["", "unapproved", "denied", "invalid"]
REGULAR = ("100644", "100755")
# git's null object id, the blob of a path that is not there. Spelled out here rather than
# imported from git/: the rules are pure, and import nothing that reads git.
NULL_ID = "0" * 40


@dataclass(frozen=True)
class Entry:
    """A path's mode and blob in one tree; ABSENT when the path is not there."""

    mode: str
    blob: str

    def describe(self) -> str:
        return "absent" if self == ABSENT else f"{self.blob[:7]} (mode {self.mode})"


ABSENT = Entry("000000", NULL_ID)


@dataclass(frozen=True)
class Vote:
    person: str  # policy name, or the key fingerprint when no policy key matched
    via: str  # "merge signature of 1a2b3c4" / "approval commit 5d6e7f8" / "review 12 on PR #3"
    counted: bool
    why: str  # why it did not count ("" when it did)
    # It counted although its person wrote part of the change (allow_self_approval): `via` says
    # so to people; this says so to the code (a `started` record's `self_approved`).
    self_approved: bool = False
    # What the vote is, as data (a `started` record's `counted`, a run's attestation): ("how",
    # "merge signature" | "approval commit" | "review"), then ("commit", its full id), or
    # ("review", the review's id) and ("pull", the pull request's number).
    source: tuple[tuple[str, str], ...] = ()

    def describe(self) -> str:
        return (
            f"{self.person} ({self.via})"
            if self.counted
            else f"{self.person} ({self.via}: {self.why})"
        )


Votes = Mapping[str, tuple[Vote, ...]]  # path -> every vote for one job or policy file


def describe_votes(votes: Iterable[Vote]) -> str:
    votes = list(votes)
    counted = [v.describe() for v in votes if v.counted]
    other = [v.describe() for v in votes if not v.counted]
    text = f"counted: {', '.join(counted) or 'none'}"
    return text + (f"; not counted: {', '.join(other)}" if other else "")


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
    # Merged commits that changed it, and earlier commits that wrote these bytes.
    writers: tuple[Writer, ...] = ()
    text: bytes | None = None  # the content of a job or policy file that is a regular file
    # When the path was unapproved before: its last approved version.
    last_approved: Entry | None = None

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
    # path -> what its Mergegate-Approve trailer says after the path ("<mode> <blob>" or "<blob>")
    named: Mapping[str, str]
    # With a tree trailer naming its own tree: the entry of every path of interest.
    tree: Mapping[str, Entry] | None
    tree_mismatch: bool  # a tree trailer that does not name its own tree
    # Paths of interest that the proposal, at this commit, changed relative to the merge base.
    changed: frozenset[str]
    emergency: tuple[str, ...] = ()  # its Mergegate-Emergency trailers (reasons)


@dataclass(frozen=True)
class Review:
    """What GitHub's reviews say about a merge (reviews.judge): its votes sit in `extra_votes`."""

    label: str  # "reviews on PR #3 (squash)"
    refused: str  # why it is no review approval ("" when it is one)
    # (person, why): the PR's authors and committers, by GitHub id.
    excluded: tuple[tuple[str, str], ...] = ()


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
    # (path, vote) from other evidence, such as reviews.
    extra_votes: tuple[tuple[str, Vote], ...] = ()
    veto_trailers: tuple[str, ...] = ()
    emergency_trailers: tuple[str, ...] = ()  # the merge's own Mergegate-Emergency reasons
    renew_trailers: tuple[str, ...] = ()  # Mergegate-Renew: "<path> <blob>" (an empty commit)
    content_writers: tuple[Writer, ...] = ()  # merged commits that changed any other file
    job_ids: tuple[str, ...] = ()  # every job path in the resulting tree
    symlinks: tuple[tuple[str, bytes], ...] = ()  # every symlink in the resulting tree: target
    # policy/ path -> (mode, bytes), when policy/ changes.
    policy_tree: Mapping[str, tuple[str, bytes]] | None = None
    # policy/ paths that differ from the policy in force but this commit leaves.
    policy_drift: tuple[str, ...] = ()
    proposal: bool = False  # a proposal's merge that does not exist yet (check, approve)
    merger: str | None = None  # for a proposal: the person whose signed merge to assume, if any
    # GitHub review evidence, for a merge no approver key signed (docs/github.md).
    review: Review | None = None

    @property
    def short(self) -> str:
        return "the merge" if self.proposal else self.sha[:7]


@dataclass(frozen=True)
class Emergency:
    """A signed emergency that lets a job revision run without its quorum (judge, step 9), and
    the review it owes (break_glass.review_state)."""

    by: tuple[str, ...]  # the emergency approvers whose signed Mergegate-Emergency counted
    reason: str  # the first of them's reason, redacted and bounded (emergency.kept_reason)
    reviewers: tuple[str, ...]  # others whose votes counted at the merge: the review so far
    excluded: tuple[str, ...]  # who can never give the review: `by` and the file's writers
    reviewed: bool  # the revision's normal quorum was met by others at the merge already


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
    emergency: Emergency | None = None  # it runs (or would) on a signed emergency
    # (person, why) who may not count for it: its writers and signers (rule 5). A renewal of its
    # approval (rules/renewal.py) is held to the same separation of duties.
    excluded: tuple[tuple[str, str], ...] = ()

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
class Renewal:
    """A signed, empty commit on approved naming a job revision (Mergegate-Renew): its signer's
    vote to renew that revision's expired approval (rules/renewal.py counts the votes)."""

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
    renewals: tuple[Renewal, ...] = ()
    policy_changed: bool = False
    policy_adopted: bool = False
    summary: str = ""
    # Files outside jobs/ and policy/ that this commit changed, and whether a signed merge with
    # their quorum vouched for them.
    content: tuple[str, ...] = ()
    content_approved: bool = False
    # After this commit: path -> first unapproved change.
    unapproved: Mapping[str, str] = field(default_factory=dict)
    policy_verdict: PolicyVerdict | None = None
    # Who counted for those other files, none of them their writers (a source summary's
    # two-party review: operations/slsa_source.py).
    content_reviewers: tuple[str, ...] = ()

    @property
    def reviewed_by(self) -> int:
        """The fewest distinct people the judge counted for any change this commit brings, none
        of them a writer of what they approved; 0 when it approved nothing (no approval, a change
        that missed its quorum or was not adopted, nothing a vote is for). A source summary says
        SLSA_SOURCE_TWO_PARTY_REVIEWED from 2 (operations/slsa_source.py)."""
        if self.kind not in ("approval", "other"):
            return 0
        groups: list[set[str]] = []
        for decision in self.decisions:
            if not decision.approved:
                return 0
            groups.append(_independent(decision.votes))
        if self.policy_changed:
            verdict = self.policy_verdict
            if verdict is None or not verdict.adopted:
                return 0
            groups.extend(_independent(votes) for votes in verdict.votes.values())
        if self.content:
            if not self.content_approved:
                return 0
            groups.append(set(self.content_reviewers))
        return min((len(group) for group in groups), default=0)


def _independent(votes: Iterable[Vote]) -> set[str]:
    """The people whose votes counted, but for those who wrote part of what they approved."""
    return {v.person for v in votes if v.counted and not v.self_approved}
