"""The one judge: every decision about a job revision or a policy change.

`judge_commit` is handed the facts of one commit on `approved` (or of a proposal's merge, for
`check` and `approve`), the policy in force before it and the files that were unapproved before it,
and returns the verdict. It is pure: it never reads git or the audit, so `check`, `approve`, the
runner and `verify` reach the same verdict by construction. Gathering the facts is
`facts.assessor.Assessor`'s job; the facts and verdicts themselves are `rules.model`'s values.

The rules, in the order they apply (step N of `judge_commit` is rule N):
1. A malformed commit (its header read differently by git) approves nothing.
2. A veto is an empty commit naming job revisions, signed by an approver; a renewal
   (Mergegate-Renew) is one too, a vote to renew their expired approval.
3. An octopus merge approves nothing; only a merge signed by an approver approves
   (or a merge GitHub made, on its review evidence).
4. A vote binds path, mode and blob, and covers only a path the proposal changed
   relative to its merge base; what the merge itself wrote (a rollback, a
   conflict resolution) is the merge signer's own content.
5. Writers and signers of a file never count for it (unless allow_self_approval).
6. Other files a merge brings need the highest job requirement from people who did
   not write them, or stay unapproved; a commit that changes no job and no policy
   file is judged by them alone.
7. A policy change needs the policy quorum of the policy before it, and must load.
8. A job must parse, be unique among approved jobs, be allowed by `commands`,
   be signed where the policy requires it, sit in a tree with no symlink leading
   outside, and reach its requirement.
9. A signed emergency (Mergegate-Emergency) by enough emergency approvers stands in
   for a job's requirement, and for nothing else; a policy change cannot use one.
10. No job runs in a tree that holds content no signed approval covers.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from mergegate.rules import break_glass
from mergegate.rules.job import is_job_path, job_stem
from mergegate.rules.model import (
    ABSENT,
    Assessment,
    CommitFacts,
    Decision,
    FileFacts,
    PolicyVerdict,
    Renewal,
    Review,
    Veto,
    Vote,
    Votes,
)
from mergegate.rules.policy import POLICY_DIR, Policy
from mergegate.rules.revisions import judge_job, judge_policy_change, read_job
from mergegate.rules.votes import (
    approval_votes,
    excluded_for,
    excluded_people,
    extra_vote,
    in_policy,
    merge_writer,
    votes_for,
    without_writers,
)
from mergegate.text import path_display


def judge_commit(
    facts: CommitFacts, policy: Policy, unapproved: Mapping[str, str] | None = None
) -> Assessment:
    """The verdict on one commit judged by `policy`, the policy in force before it.

    The steps, one function each, named for the module's rules in their order:
    1. `_malformed`: a commit git could read differently from us approves nothing.
    2. `_veto`: an empty, signed commit naming job revisions vetoes them; `_renewal`: one
       naming them with Mergegate-Renew votes to renew their approval (rules/renewal.py).
    3. `_not_an_approval`: only a merge of two parents signed by an approver (or one
       GitHub made, on its review evidence) approves jobs or policy.
    4. `_votes`: every vote for each job and policy file, and what it covers.
    5. `_without_writers`: the votes of a file's writers and signers do not count.
    6. `_other_files`: whether the other files have their quorum, and what stays
       unapproved; a commit that changes no job and no policy file ends here.
    7. `_policy_change`: a policy change not adopted approves nothing of its merge.
    8. `_jobs`: each job revision's decision.
    9. `_emergency`: a signed emergency runs a job whose only refusal is its quorum.
    10. `_taint`: no job runs in a tree holding unapproved content.
    Steps 1 to 3 and 6 to 7 may end the judging with their own verdict.
    """
    case = _Case.of(facts, policy, unapproved)
    for step in (_malformed, _veto, _renewal, _not_an_approval):  # 1, 2, 2, 3
        ended = step(case)
        if ended is not None:
            return ended
    votes = _without_writers(case, _votes(case))  # 4, 5
    other = _other_files(case)  # 6
    if not case.judged:
        return _other(case, other)
    verdict = _policy_change(case, votes)  # 7
    if verdict is not None and not verdict.adopted and not case.pending(verdict):
        return _policy_refused(case, verdict, votes)
    decisions = _emergency(case, _jobs(case, votes))  # 8, 9
    after = _jobs_after(facts, decisions, other.after)
    return _approval(case, _taint(facts, decisions, after), verdict, other, after)  # 10


@dataclass(frozen=True)
class _Case:
    """One commit as the judge sees it: its facts, the policy before it, its files by kind."""

    facts: CommitFacts
    policy: Policy
    unapproved: dict[str, str]  # before the commit: path -> its first unapproved change
    jobs: list[FileFacts]  # job files the commit adds or changes (not those it removes)
    policy_files: list[FileFacts]
    content: list[FileFacts]  # every other file it changes

    @classmethod
    def of(cls, facts: CommitFacts, policy: Policy, unapproved: Mapping[str, str] | None) -> _Case:
        return cls(
            facts,
            policy,
            dict(unapproved or {}),
            [f for f in facts.files if is_job_path(f.path) and f.after != ABSENT],
            [f for f in facts.files if f.path.startswith(POLICY_DIR)],
            [
                f
                for f in facts.files
                if not is_job_path(f.path) and not f.path.startswith(POLICY_DIR)
            ],
        )

    @property
    def judged(self) -> bool:
        """It changes a job or a policy file: it is an approval, or approves nothing."""
        return bool(self.jobs or self.policy_files)

    @property
    def signer(self) -> str | None:
        """The approver whose signed merge it is (for a proposal: who would sign it)."""
        if self.facts.proposal:
            return self.facts.merger
        check = self.facts.signature
        return check.key.owner if check is not None and check.ok and check.key is not None else None

    @property
    def review(self) -> Review | None:
        """GitHub's review evidence (never for a proposal, whose merge does not exist yet)."""
        return self.facts.review if not self.facts.proposal else None

    @property
    def reviewed(self) -> bool:
        return self.review is not None and not self.review.refused

    @property
    def merge(self) -> bool:
        """A merge whose approvals count: two parents and a signer, or a review approval."""
        two = len(self.facts.parents) == 2
        return (two and (self.signer is not None or self.facts.proposal)) or self.reviewed

    def pending(self, verdict: PolicyVerdict) -> bool:
        """A proposal still waiting for its merge has its jobs judged all the same, to say what
        else refuses them."""
        return self.facts.proposal and self.facts.merger is None and verdict.refusal == "unapproved"


# -- 1, 2, 3: what the commit is -------------------------------------------------------------


def _malformed(case: _Case) -> Assessment | None:
    """1. A commit git could read differently from us approves nothing."""
    if not case.facts.malformed:
        return None
    why = f"commit {case.facts.short} is malformed ({case.facts.malformed}); it approves nothing"
    return _reject_all(case, why)


def _veto(case: _Case) -> Assessment | None:
    """2. A veto is an empty commit naming job revisions, signed by an approver."""
    signer = _empty_and_signed(case, case.facts.veto_trailers, "veto")
    if not isinstance(signer, str):
        return signer
    return Assessment(
        case.facts.sha,
        "veto",
        case.policy,
        vetoes=tuple(
            Veto(path, blob, signer, case.facts.sha)
            for path, blob in _revisions(case.facts.veto_trailers)
        ),
        summary=f"veto by {signer}",
        unapproved=case.unapproved,
    )


def _renewal(case: _Case) -> Assessment | None:
    """2. A renewal is an empty commit naming job revisions (Mergegate-Renew: path blob), signed
    by an approver: its signer's vote to renew their expired approval. Whether the votes reach
    the revision's quorum, by people who may approve it, is rules/renewal.py's (eligibility)."""
    signer = _empty_and_signed(case, case.facts.renew_trailers, "renewal")
    if not isinstance(signer, str):
        return signer
    return Assessment(
        case.facts.sha,
        "renewal",
        case.policy,
        renewals=tuple(
            Renewal(path, blob, signer, case.facts.sha)
            for path, blob in _revisions(case.facts.renew_trailers)
        ),
        summary=f"renewal by {signer}",
        unapproved=case.unapproved,
    )


def _empty_and_signed(case: _Case, trailers: tuple[str, ...], kind: str) -> Assessment | str | None:
    """Step 2's common part: None when the commit is no empty one carrying `trailers`; when it is
    but its signature is not valid, the assessment that says the `kind` is ignored; else the name
    of its signer."""
    facts, policy = case.facts, case.policy
    if facts.files or not trailers or facts.proposal:
        return None
    check = facts.signature
    if check is None or not check.ok or check.key is None:
        why = check.reason if check is not None else "unsigned"
        return Assessment(
            facts.sha,
            "other",
            policy,
            summary=f"{kind} ignored: {in_policy(why, policy)}",
            unapproved=case.unapproved,
        )
    return check.key.owner


def _revisions(trailers: tuple[str, ...]) -> list[tuple[str, str]]:
    """(path, blob) of each `path blob` trailer value (a path may hold spaces)."""
    return [(path, blob) for path, _, blob in (t.rpartition(" ") for t in trailers)]


def _not_an_approval(case: _Case) -> Assessment | None:
    """3. An octopus merge approves nothing; only a merge of two parents signed by an approver
    approves jobs or policy, or a merge GitHub made (a merge commit or a squash) on its review
    evidence."""
    facts, short = case.facts, case.facts.short
    if len(facts.parents) > 2:
        return _reject_all(
            case,
            f"merge {short} has {len(facts.parents)} parents: octopus merges are not approvals",
        )
    if facts.proposal or not case.judged:
        return None
    review = case.review
    if review is not None and review.refused:
        return _reject_all(case, f"{short} is not a review approval: {review.refused}")
    if len(facts.parents) < 2 and not case.reviewed:
        return _reject_all(
            case, f"commit {short} is not a merge: approvals are signed merges into approved"
        )
    if case.signer is None and not case.reviewed:
        reason = facts.signature.reason if facts.signature is not None else "unsigned"
        return _reject_all(
            case, f"merge {short} is not a valid approval: {in_policy(reason, case.policy)}"
        )
    return None


# -- 4, 5: votes -----------------------------------------------------------------------------


def _votes(case: _Case) -> dict[str, tuple[Vote, ...]]:
    """4. Every vote for each job and policy file: a vote binds path, mode and blob, and covers
    only what the proposal changed (votes.votes_for)."""
    return {
        f.path: votes_for(case.facts, case.policy, f, case.signer)
        for f in (*case.jobs, *case.policy_files)
    }


def _without_writers(case: _Case, votes: Votes) -> dict[str, tuple[Vote, ...]]:
    """5. Writers and signers of a file never count for it (unless allow_self_approval)."""
    return {
        f.path: without_writers(case.facts, case.policy, f, votes[f.path])
        for f in (*case.jobs, *case.policy_files)
    }


# -- 6: other files --------------------------------------------------------------------------


@dataclass(frozen=True)
class _OtherFiles:
    approved: bool  # a merge with their quorum vouched for them
    why: str  # the quorum's words ("" when the commit is no merge whose approvals count)
    after: dict[str, str]  # what stays unapproved after the commit (jobs not yet counted)
    reviewers: tuple[str, ...] = ()  # who counted for them, none of them their writers


def _other_files(case: _Case) -> _OtherFiles:
    """6. Other files a merge brings need their quorum, or stay unapproved."""
    approved, why, reviewers = _content(case) if case.merge else (False, "", ())
    return _OtherFiles(
        approved,
        why,
        _unapproved_after(case.facts, case.content, approved, case.unapproved),
        reviewers,
    )


def _content(case: _Case) -> tuple[bool, str, tuple[str, ...]]:
    """Whether the other files a merge brings (scripts a job may run) have their quorum, its
    words, and who counted for them other than their writers.

    Like a job, they need the highest job requirement, from people who did not write
    them: a two-person rule must not end at the script the job calls.
    """
    facts, policy, files, signer = case.facts, case.policy, case.content, case.signer
    if not files:
        return True, "", ()
    voters = [
        {v.person for a in facts.approvals for v in approval_votes(policy, a, f) if v.counted}
        | {v.person for path, v in facts.extra_votes if path == f.path and extra_vote(v, f).counted}
        for f in files
    ]
    people = ({signer} if signer else set()) | set.intersection(*voters)
    writers = list(facts.content_writers)
    if any(f.merge_wrote for f in files):
        writers.append(merge_writer(facts))
    if policy.require_signed_proposals:
        for writer in writers:
            if writer.signer is None and writer.commit != facts.sha:
                return (
                    False,
                    f"require_signed_proposals: commit {writer.commit[:7]} that changes other "
                    f"files is not signed by a key in {policy.where}",
                    (),
                )
    excluded = {
        **dict(facts.review.excluded if facts.review else ()),
        **excluded_people(policy, writers),
    }
    reviewers = tuple(sorted(people - set(excluded)))
    if not policy.allow_self_approval:
        people -= set(excluded)
    quorum = policy.quorum(policy.content_requirement(), people)
    not_counted = "; ".join(
        f"{p} not counted ({why})"
        for p, why in sorted(excluded.items())
        if not policy.allow_self_approval
    )
    return quorum.met, quorum.reason + (f"; {not_counted}" if not_counted else ""), reviewers


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


def _other(case: _Case, other: _OtherFiles) -> Assessment:
    """The verdict on a commit that changes no job and no policy file (its other files')."""
    facts, signer, review = case.facts, case.signer, case.review
    by = (
        f"merge signed by {signer}"
        if signer
        else f"approval by {review.label}"
        if case.reviewed and review
        else "not a signed approval"
    )
    removed = [
        path_display(f.path) for f in facts.files if is_job_path(f.path) and f.after == ABSENT
    ]
    summary = (f"removes {', '.join(removed)}; " if removed else "changes no job or policy; ") + by
    summary += f"; other files: {other.why}" if case.content and (signer or case.reviewed) else ""
    return Assessment(
        facts.sha,
        "other",
        case.policy,
        summary=summary,
        content=tuple(f.path for f in case.content),
        content_approved=other.approved,
        unapproved=other.after,
        content_reviewers=other.reviewers,
    )


# -- 7: the policy change --------------------------------------------------------------------


def _policy_change(case: _Case, votes: Votes) -> PolicyVerdict | None:
    """7. A policy change needs the policy quorum of the policy before it, and must load."""
    if not case.policy_files:
        return None
    return judge_policy_change(case.facts, case.policy, case.policy_files, votes)


def _policy_refused(case: _Case, verdict: PolicyVerdict, votes: Votes) -> Assessment:
    """A merge whose policy change is not adopted approves nothing in it."""
    reason = (
        f"merge {case.facts.short} changes {POLICY_DIR} without approval ({verdict.reason}); "
        "nothing in it is approved"
    )
    return replace(_reject_all(case, reason, votes=votes), policy_verdict=verdict)


# -- 8: each job revision --------------------------------------------------------------------


def _jobs(case: _Case, votes: Votes) -> tuple[Decision, ...]:
    """8. Each job revision, in path order (judge_job)."""
    # Built once for the whole commit (each job compared with every other job path was
    # quadratic: a merge of a thousand jobs made a million comparisons).
    merged = frozenset(j.path for j in case.jobs)
    by_stem: dict[str, list[str]] = {}
    for other in case.facts.job_ids:
        by_stem.setdefault(job_stem(other), []).append(other)
    return tuple(
        replace(
            judge_job(case.facts, case.policy, f, votes[f.path], merged, by_stem, case.unapproved),
            excluded=tuple(sorted(excluded_for(case.facts, case.policy, f).items())),
        )
        for f in sorted(case.jobs, key=lambda f: f.path)
    )


# -- 9: an emergency ------------------------------------------------------------------------


def _emergency(case: _Case, decisions: tuple[Decision, ...]) -> tuple[Decision, ...]:
    """9. A signed emergency by enough emergency approvers stands in for a job's requirement
    (break_glass.apply): never for `commands`, limits, a veto or a policy change's quorum."""
    files = {f.path: f for f in case.jobs}
    return tuple(
        break_glass.apply(
            case.facts,
            case.policy,
            files[d.path],
            d,
            signer=case.signer,
            policy_change=bool(case.policy_files),
        )
        for d in decisions
    )


def _jobs_after(
    facts: CommitFacts, decisions: tuple[Decision, ...], after: dict[str, str]
) -> dict[str, str]:
    """A job file's revision that did not reach its quorum is unapproved: it holds no id."""
    after = dict(after)
    for f in facts.files:
        if is_job_path(f.path) and f.after == ABSENT:
            after.pop(f.path, None)
    for d in decisions:
        if d.approved or d.emergency is not None:  # (an emergency's revision holds its id)
            after.pop(d.path, None)
        else:
            after.setdefault(d.path, facts.sha)
    return after


# -- 10: taint, and the verdict --------------------------------------------------------------


def _taint(
    facts: CommitFacts, decisions: tuple[Decision, ...], unapproved: Mapping[str, str]
) -> tuple[Decision, ...]:
    """10. No job runs in a tree that holds content no signed approval covers."""
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


def _approval(
    case: _Case,
    decisions: tuple[Decision, ...],
    verdict: PolicyVerdict | None,
    other: _OtherFiles,
    after: dict[str, str],
) -> Assessment:
    """The verdict on an approval (or a proposal's merge): its decisions and policy change."""
    signer, review = case.signer, case.review
    summary = (
        f"approval by {signer}"
        if signer
        else f"approval by {review.label}"
        if case.reviewed and review
        else "proposal"
    )
    if verdict is not None:
        summary += (
            f"; policy change {'adopted' if verdict.adopted else 'pending'}: {verdict.reason}"
        )
    if case.content:
        summary += f"; other files: {other.why}"
    return Assessment(
        case.facts.sha,
        "approval",
        verdict.policy if verdict else case.policy,
        decisions,
        policy_changed=verdict is not None,
        policy_adopted=verdict is not None and verdict.adopted,
        summary=summary,
        content=tuple(f.path for f in case.content),
        content_approved=other.approved,
        unapproved=after,
        policy_verdict=verdict,
        content_reviewers=other.reviewers,
    )


def _reject_all(case: _Case, reason: str, *, votes: Votes | None = None) -> Assessment:
    """A commit that approves nothing: every job revision in it refused for `reason`."""
    facts = case.facts
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
        for f in sorted(case.jobs, key=lambda f: f.path)
    )
    unapproved = _unapproved_after(facts, case.content, False, case.unapproved)
    return Assessment(
        facts.sha,
        "unapproved",
        case.policy,
        decisions,
        policy_changed=bool(case.policy_files),
        summary=reason,
        content=tuple(f.path for f in case.content),
        unapproved=_jobs_after(facts, decisions, unapproved),
    )
