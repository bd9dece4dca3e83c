"""One revision's verdict: a job file's (`judge_job`) or the policy's (`judge_policy_change`).

Rules 7 and 8 of the judge (`judge.judge_commit` calls these with each file's votes,
its writers' already not counted): a policy change needs the policy quorum of the
policy before it, and must load; a job must parse, be unique among approved jobs, be
allowed by `commands`, be signed where the policy requires it, sit in a tree with no
symlink leading outside, and reach its requirement. Pure, as the judge is.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Mapping

from mergegate.rules.job import Job, parse_job
from mergegate.rules.model import (
    REGULAR,
    CommitFacts,
    Decision,
    Entry,
    FileFacts,
    PolicyVerdict,
    Refusal,
    Vote,
    Votes,
    describe_votes,
)
from mergegate.rules.policy import POLICY_DIR, Policy, load_policy
from mergegate.rules.votes import unsigned
from mergegate.text import path_display

_MODES = {"120000": "a symlink", "160000": "a gitlink (submodule)", "040000": "a directory"}


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
    same = _same_id(job, path, merged, by_stem, unapproved)
    if same:
        return refuse("invalid", f"job id '{job.id}' is not unique: also {', '.join(same)}", job)
    requirement = policy.requirement_for(job)
    command = policy.decide_command(job)
    denied = (
        f"denied by policy: {command.reason}" if not command.allowed else _denied(facts, policy, f)
    )
    if denied:
        return refuse("denied", denied, job, requirement=requirement)
    quorum = policy.quorum(requirement, [v.person for v in votes if v.counted])
    if not quorum.met:
        return refuse(
            "unapproved",
            f"not approved: {quorum.reason}; {describe_votes(votes)}",
            job,
            requirement=requirement,
        )
    self_approved = any(v.self_approved for v in votes if v.counted)
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


def _same_id(
    job: Job,
    path: str,
    merged: frozenset[str],
    by_stem: Mapping[str, list[str]],
    unapproved: Mapping[str, str],
) -> list[str]:
    """The other job paths of the tree with this job's id.

    Only jobs that were approved (or come in this same commit) hold an id: a stray file pushed
    without approval must not keep an approved job from running. `merged`: the job paths this commit
    merges; `by_stem`: facts.job_ids by their stem.
    """
    return sorted(
        p for p in by_stem.get(job.id, ()) if p != path and (p in merged or p not in unapproved)
    )


def _denied(facts: CommitFacts, policy: Policy, f: FileFacts) -> str:
    """Why a job the `commands` rules allow is refused all the same ("" when it is not)."""
    if policy.require_signed_proposals:
        why = unsigned(policy, f)
        if why:
            return f"require_signed_proposals: {why}"
    escape = escaping_symlink(facts.symlinks)
    if escape:
        return f"the tree at {facts.short} holds {escape}, which points outside the workspace"
    return ""


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


def judge_policy_change(
    facts: CommitFacts, policy: Policy, files: list[FileFacts], votes: Votes
) -> PolicyVerdict:
    """Whether a change under policy/ is adopted, and the policy in force after it."""

    def rejected(refusal: Refusal, reason: str) -> PolicyVerdict:
        return PolicyVerdict(False, reason, refusal, policy, votes)

    # What the new policy would be, whoever approves it: invalid means no quorum can help.
    new = _new_policy(facts, policy)
    if isinstance(new, str):
        return rejected("invalid", new)
    if policy.require_signed_proposals:
        for f in files:
            why = unsigned(policy, f)
            if why:
                return rejected("denied", f"require_signed_proposals: {why}")
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


def _new_policy(facts: CommitFacts, policy: Policy) -> Policy | str:
    """The policy the change would put in force, or why it is invalid whoever approves it."""
    tree = facts.policy_tree or {}
    odd = sorted(
        f"{path} ({_MODES.get(mode, 'mode ' + mode)})"
        for path, (mode, _) in tree.items()
        if mode not in REGULAR
    )
    if odd:
        return (
            f"the new policy is invalid: {', '.join(odd)} under {POLICY_DIR} is not a regular file"
        )
    try:
        new = load_policy(lambda p: tree[p][1] if p in tree else None, commit=facts.sha)
    except Exception as exc:  # no content may stop later passes: any parser failure rejects it
        why = str(exc) if hasattr(exc, "exit_code") else f"it cannot be read ({type(exc).__name__})"
        return f"the new policy is invalid: {why}"
    if facts.policy_drift:
        return (
            f"{', '.join(facts.policy_drift)} differ from the policy in force ({policy.where}) but "
            "this merge does not change them, so nobody approved them"
        )
    return new
