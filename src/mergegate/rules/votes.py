"""Votes: what each one covers, and who may not count for a file (rules 4 and 5 of the judge).

A vote binds path, mode and blob, and covers only a path the proposal changed relative to its merge
base; what the merge itself wrote (a rollback, a conflict resolution) is the merge signer's own
content. The writers and signers of a file never count for it, unless the policy allows
self-approval. Pure, as the judge is.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace

from mergegate.rules.model import (
    ABSENT,
    REGULAR,
    ApprovalFacts,
    CommitFacts,
    Entry,
    FileFacts,
    Vote,
    Writer,
)
from mergegate.rules.policy import Person, Policy
from mergegate.text import path_display


def votes_for(
    facts: CommitFacts, policy: Policy, f: FileFacts, signer: str | None
) -> tuple[Vote, ...]:
    """Every vote for one file, with why it does or does not cover it (rule 4)."""
    votes: list[Vote] = []
    if signer is not None:
        source = (("how", "merge signature"), ("commit", facts.sha))
        votes.append(Vote(signer, f"merge signature of {facts.short}", True, "", source=source))
    for approval in facts.approvals:
        votes += approval_votes(policy, approval, f)
    votes += [extra_vote(v, f) for path, v in facts.extra_votes if path == f.path]
    return tuple(votes)


def without_writers(
    facts: CommitFacts, policy: Policy, f: FileFacts, votes: Iterable[Vote]
) -> tuple[Vote, ...]:
    """The votes for one file, those of its writers and signers not counted (rule 5)."""
    excluded = excluded_for(facts, policy, f)
    return tuple(_exclude(v, excluded, policy) for v in votes)


def excluded_for(facts: CommitFacts, policy: Policy, f: FileFacts) -> dict[str, str]:
    """Who may not count for one file (rule 5): a pull request's authors, its writers and
    signers."""
    return {
        **dict(facts.review.excluded if facts.review else ()),
        **excluded_people(policy, _writers(facts, f)),
    }


def extra_vote(vote: Vote, f: FileFacts) -> Vote:
    """A review vote covers what the pull request wrote, as an approval commit does (rule 4):
    what the merge itself wrote is the merger's own, and a GitHub merge has no signer."""
    if vote.counted and f.merge_wrote:
        return replace(
            vote,
            counted=False,
            why="the merge itself wrote this content (not the reviewed pull request)",
        )
    return vote


def approval_votes(policy: Policy, approval: ApprovalFacts, f: FileFacts) -> list[Vote]:
    """The votes of one approval commit for one file: one per claim its trailers make."""
    check = approval.signature
    person = check.key.owner if check.ok and check.key else (check.signer or "unknown")
    via = f"approval commit {approval.commit[:7]}"
    source = (("how", "approval commit"), ("commit", approval.commit))
    claims: list[Entry | str] = []
    if approval.tree is not None:
        # Absent from the approved tree: its deletion is approved.
        claims.append(approval.tree.get(f.path, ABSENT))
    if f.path in approval.named:
        claims.append(_named_entry(approval.named[f.path]))
    votes = []
    for claim in claims[:1] if approval.tree is not None else claims:
        why = in_policy(check.reason, policy) if not check.ok else _not_covered(claim, approval, f)
        votes.append(Vote(person, via, not why, why, source=source))
    if approval.tree_mismatch:
        why = "its Mergegate-Approve-Tree does not name its own tree"
        votes.append(Vote(person, via, False, why, source=source))
    return votes


def _not_covered(claim: Entry | str, approval: ApprovalFacts, f: FileFacts) -> str:
    """Why a validly signed claim does not cover the merged file ("" when it does)."""
    if isinstance(claim, str):
        return claim
    if f.path not in approval.changed:
        return (
            "the proposal did not change this file relative to its merge base with "
            "approved, so the vote does not cover it"
        )
    if f.merge_wrote:
        return "the merge itself wrote this content (not the reviewed proposal)"
    if claim.blob != f.after.blob:
        return f"stale: approves blob {claim.blob[:7]}, merged blob is {f.after.blob[:7]}"
    if claim.mode != f.after.mode:
        return (
            f"stale: approves mode {claim.mode}, merged mode is {f.after.mode} "
            "(a vote binds path, mode and blob)"
        )
    return ""


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
        writers.append(merge_writer(facts))
    return writers


def merge_writer(facts: CommitFacts) -> Writer:
    """The commit judged, as the writer of what it wrote itself (its signer: the merger)."""
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
        return replace(
            vote, via=vote.via + f", self-approved: {excluded[vote.person]}", self_approved=True
        )
    return replace(vote, counted=False, why=excluded[vote.person])


def unsigned(policy: Policy, f: FileFacts) -> str:
    """Under require_signed_proposals: why a writer of `f` is not signed ("" when all are)."""
    for writer in f.writers:
        if writer.signer is None:
            return (
                f"commit {writer.commit[:7]} that changes {path_display(f.path)} is not signed "
                f"by a key in {policy.where} ({writer.signature})"
            )
    return ""


def in_policy(reason: str, policy: Policy) -> str:
    return reason if "policy" in reason else f"{reason} (judged by {policy.where})"
