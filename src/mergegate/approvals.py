"""Which first-parent commit approved which job revision, and whether that approval holds.

A commit on `approved` is judged by the policy in force at its first parent
(the last policy validly approved before it): a merge cannot approve itself
into power. Approvals bind to content: a vote counts only for the exact blob
it names, and the authors and signers of a job never count toward its quorum.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

from mergegate.errors import ConfigError
from mergegate.git import ZERO, Commit, Repo, literal
from mergegate.job import Job, check_unique_ids, is_job_path, parse_job
from mergegate.policy import POLICY_DIR, CommandRule, Person, Policy, Requirement, load_policy
from mergegate.signatures import PublicKey, SignatureCheck, split_signed_commit, verify_signature

APPROVE_TRAILER = "Mergegate-Approve"
APPROVE_TREE_TRAILER = "Mergegate-Approve-Tree"
# Everything a job may read or execute besides job definitions and the policy.
CONTENT_PATHSPEC = (".", ":(exclude)policy", ":(exclude,glob)jobs/**/*.yaml", ":(exclude,glob)jobs/**/*.yml")
VETO_TRAILER = "Mergegate-Veto"
Kind = Literal["approval", "veto", "unapproved", "other"]


@dataclass(frozen=True)
class Vote:
    person: str  # policy name, or the key fingerprint when no policy key matched
    via: str  # "merge signature of 1a2b3c4" / "approval commit 5d6e7f8"
    counted: bool
    why: str  # why it did not count ("" when it did)

    def describe(self) -> str:
        return f"{self.person} ({self.via})" if self.counted else f"{self.person} ({self.via}: {self.why})"


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
class Assessment:
    commit: str
    kind: Kind
    policy: Policy  # the policy in force after this commit
    decisions: tuple[Decision, ...] = ()
    vetoes: tuple[Veto, ...] = ()
    policy_changed: bool = False
    policy_adopted: bool = False
    summary: str = ""
    # Files outside jobs/, policy/ and audit/ that this commit changed, and
    # whether a signed merge by an approver vouched for them.
    content: tuple[str, ...] = ()
    content_approved: bool = False


class Assessor:
    """Judges first-parent commits; caches signature checks across one walk."""

    def __init__(self, repo: Repo, *, at: datetime, known: Callable[[str, str], bool] | None = None) -> None:
        self.repo = repo
        self.at = at
        # Whether a (path, blob) may have been written before, outside the merged
        # range. Searching all history for its authors is costly on long histories,
        # so a walk narrows it to what the audit or its own memory has seen.
        self.known = known or (lambda path, blob: True)
        self._checks: dict[tuple[str, tuple[PublicKey, ...], datetime], SignatureCheck] = {}

    def signature(self, commit: Commit, keys: Sequence[PublicKey]) -> SignatureCheck:
        cache_key = (commit.sha, tuple(keys), self.at)
        if cache_key not in self._checks:
            split = split_signed_commit(commit.raw)
            if split is None:
                self._checks[cache_key] = SignatureCheck(False, None, "", "unsigned")
            else:
                self._checks[cache_key] = verify_signature(split[0], split[1], keys, at=self.at)
        return self._checks[cache_key]

    def assess(self, sha: str, policy: Policy) -> Assessment:
        commit = self.repo.commit(sha)
        parent = commit.parents[0] if commit.parents else None
        # Records live on the audit branch: on approved, audit/ is a directory like any other.
        rest = self.repo.diff(parent, sha)
        short = sha[:7]
        jobs = {c.path: c.new_blob for c in rest if is_job_path(c.path) and c.status != "D"}
        modes = {c.path: c.new_mode for c in rest}
        content_blobs = {c.path: (c.new_blob if c.status != "D" else ZERO) for c in rest
                         if not is_job_path(c.path) and not c.path.startswith(POLICY_DIR)}
        content = tuple(content_blobs)
        policy_files = {c.path: (c.new_blob if c.status != "D" else ZERO) for c in rest if c.path.startswith(POLICY_DIR)}
        # 2. A commit git could read differently from us approves nothing: the header
        #    must be git's own (tree, parents, author, committer, once each, in place).
        malformed = commit.malformed or (commit.is_merge and self.repo.git_parents(sha) != commit.parents
                                         and "git reads other parents than its header lists")
        if malformed:
            reason = f"commit {short} is malformed ({malformed}); it approves nothing"
            return self._reject_all(commit, policy, jobs, policy_files, reason, content, modes)
        # 3. A veto is an empty, signed commit naming job revisions.
        if not rest and commit.trailers(VETO_TRAILER):
            return self.veto(commit, policy)
        if len(commit.parents) > 2:
            reason = f"merge {short} has {len(commit.parents)} parents: octopus merges are not approvals"
            return self._reject_all(commit, policy, jobs, policy_files, reason, content, modes)
        # 4. Only a merge signed by an approver can approve, jobs or any other file.
        signed = self.signature(commit, policy.approver_keys()) if commit.is_merge else None
        if not jobs and not policy_files:
            owner = signed.key.owner if signed is not None and signed.ok and signed.key is not None else None
            if owner is None:
                return Assessment(sha, "other", policy, summary="changes no job or policy; not a signed approval", content=content)
            vouched, why = self._content(policy, commit, owner, content_blobs)
            summary = f"changes no job or policy; merge signed by {owner}" + (f"; other files: {why}" if content else "")
            return Assessment(sha, "other", policy, summary=summary, content=content, content_approved=vouched)
        if signed is None:
            return self._reject_all(commit, policy, jobs, policy_files, f"commit {short} is not a merge: approvals are signed merges into approved", content, modes)
        if not signed.ok or signed.key is None:
            return self._reject_all(commit, policy, jobs, policy_files, f"merge {short} is not a valid approval: {_in_policy(signed.reason, policy)}", content, modes)
        votes = self.votes(policy, base=commit.parents[0], head=sha, files={**jobs, **policy_files}, signer=signed.key.owner, merge=commit)
        # 5. A policy change needs the policy quorum of the policy before it.
        new_policy, adopted, policy_reason = policy, False, ""
        if policy_files:
            adopted, policy_reason, new_policy = self._policy_change(commit, policy, votes, policy_files)
            if not adopted:
                reason = f"merge {short} changes {POLICY_DIR} without approval ({policy_reason}); nothing in it is approved"
                result = self._reject_all(commit, policy, jobs, {}, reason, content, modes)
                return Assessment(sha, "unapproved", policy, result.decisions, policy_changed=True, summary=reason, content=content)
        unique = check_unique_ids([p for _, _, p in self.repo.ls_tree(sha, "jobs/") if is_job_path(p)])
        decisions = tuple(self._decide(commit, policy, path, blob, votes.get(path, ()), unique.get(path), modes.get(path, "100644"))
                          for path, blob in sorted(jobs.items()))
        summary = f"approval by {signed.key.owner}"
        if policy_files:
            summary += f"; policy change {'adopted' if adopted else 'rejected'}: {policy_reason}"
        vouched, why = self._content(policy, commit, signed.key.owner, content_blobs)
        if content:
            summary += f"; other files: {why}"
        return Assessment(sha, "approval", new_policy, decisions, policy_changed=bool(policy_files), policy_adopted=adopted,
                          summary=summary, content=content, content_approved=vouched)

    def _content(self, policy: Policy, merge: Commit, signer: str, files: dict[str, str]) -> tuple[bool, str]:
        """Whether the other files a merge brings (scripts a job may run) have their quorum.

        Like a job, they need the highest job requirement, from people who did not
        write them: a two-person rule must not end at the script the job calls.
        """
        if not files:
            return True, ""
        # Who approved all of them: per-file trailers or a tree approval, at the merged bytes.
        approvals = self._approval_votes(policy, merge.parents[0], merge.parents[1], files)
        people = {signer} | set.intersection(*({v.person for v in votes if v.counted} for votes in approvals.values()))
        excluded: dict[str, str] = {}
        # The merge wrote these files itself only where they differ from the merged branch.
        branch = self.repo.tree_blobs(merge.parents[1])
        merge_wrote = any(branch.get(path, ZERO) != blob for path, blob in files.items())
        suspects = {p: b for p, b in files.items() if self.known(p, b)}
        producers = {sha for shas in self.repo.producers(merge.sha, suspects).values() for sha in shas}
        # Any merged commit that changed other files (a superset of these): one git call, not one per file.
        for sha in [*self.repo.commits_touching(merge.parents[0], merge.sha, *CONTENT_PATHSPEC), *sorted(producers)]:
            if sha == merge.sha and not merge_wrote:
                continue
            commit = self.repo.commit(sha)
            if policy.require_signed_proposals and not self.signature(commit, policy.proposal_keys()).ok:
                return False, f"require_signed_proposals: commit {sha[:7]} that changes other files is not signed by a key in {policy.where}"
            self._exclude_people(policy, commit, excluded)
        if not policy.allow_self_approval:
            people -= set(excluded)
        quorum = policy.quorum(policy.content_requirement(), people)
        not_counted = "; ".join(f"{p} not counted ({why})" for p, why in sorted(excluded.items()) if not policy.allow_self_approval)
        return quorum.met, quorum.reason + (f"; {not_counted}" if not_counted else "")

    # -- votes ------------------------------------------------------------------
    def votes(self, policy: Policy, *, base: str, head: str, files: dict[str, str], signer: str | None, merge: Commit | None) -> dict[str, tuple[Vote, ...]]:
        """Every vote for each file, with why it does or does not count."""
        result: dict[str, list[Vote]] = {path: [] for path in files}
        if signer is not None and merge is not None:
            for path in files:
                result[path].append(Vote(signer, f"merge signature of {merge.sha[:7]}", True, ""))
        for path, votes in self._approval_votes(policy, base, merge.parents[1] if merge is not None else head, files).items():
            result[path] += votes
        # Separation of duties: whoever wrote or signed a change to the file does not count for it.
        producers = self.repo.producers(head, {p: b for p, b in files.items() if self.known(p, b)})
        for path in files:
            excluded = self.excluded(policy, base, head, path, merge, producers.get(path, []))
            result[path] = [self._exclude(v, excluded, policy) for v in result[path]]
        return {path: tuple(v) for path, v in result.items()}

    def _approval_votes(self, policy: Policy, base: str, tip: str, files: dict[str, str]) -> dict[str, list[Vote]]:
        """Votes of the signed approval commits between `base` and `tip`, for each file.

        `Mergegate-Approve: <path> <blob>` approves one file's bytes;
        `Mergegate-Approve-Tree: <tree>` (the approval commit's own tree) approves
        every file as it is in that tree, names git cannot put in a trailer included.
        """
        result: dict[str, list[Vote]] = {path: [] for path in files}
        for sha in self.repo.side_commits(base, tip):
            commit = self.repo.commit(sha)
            named, trees = commit.trailers(APPROVE_TRAILER), commit.trailers(APPROVE_TREE_TRAILER)
            if not named and not trees:
                continue
            check = self.signature(commit, policy.approver_keys())
            person = check.key.owner if check.ok and check.key else (check.signer or "unknown")
            via = f"approval commit {sha[:7]}"
            approved: dict[str, str] = {}
            if commit.tree in trees:
                approved = self.repo.tree_blobs(sha)
                for path in files:
                    approved.setdefault(path, ZERO)  # absent from the approved tree: its deletion is approved
            for trailer in named:
                path, _, blob = trailer.rpartition(" ")
                if path in files:
                    approved.setdefault(path, blob)
            for path, blob in approved.items():
                if path not in files:
                    continue
                if not check.ok:
                    result[path].append(Vote(person, via, False, _in_policy(check.reason, policy)))
                elif len(blob) != 40:
                    result[path].append(Vote(person, via, False, f"names blob {blob!r}, not a full 40-hex id"))
                elif blob != files[path]:
                    result[path].append(Vote(person, via, False, f"stale: approves blob {blob[:7]}, merged blob is {files[path][:7]}"))
                else:
                    result[path].append(Vote(person, via, True, ""))
            if trees and commit.tree not in trees:
                for path in files:
                    result[path].append(Vote(person, via, False, "its Mergegate-Approve-Tree does not name its own tree"))
        return result

    def excluded(self, policy: Policy, base: str, head: str, path: str, merge: Commit | None,
                 producers: list[str] | None = None) -> dict[str, str]:
        """Who may not count for `path`: authors and signers of the changes being merged, and of
        any commit anywhere in history that wrote these exact bytes (a blob pushed straight to
        approved, deleted, then merged back must not lose its author)."""
        if producers is None:
            blob = self.repo.file_blob(head, path) or ZERO
            producers = self.repo.producers(head, {path: blob}).get(path, []) if self.known(path, blob) else []
        excluded: dict[str, str] = {}
        for sha in [*self.repo.commits_touching(base, head, literal(path)), *producers]:
            commit = self.repo.commit(sha)
            if merge is not None and sha == merge.sha and self._merge_kept(merge, path):
                continue
            self._exclude_people(policy, commit, excluded)
        return excluded

    def _exclude_people(self, policy: Policy, commit: Commit, excluded: dict[str, str]) -> None:
        for person in _people_matching(policy, commit.author_name, commit.author_email):
            excluded.setdefault(person.name, f"author of {commit.sha[:7]}")
        check = self.signature(commit, policy.proposal_keys())
        if check.ok and check.key is not None:
            excluded.setdefault(check.key.owner, f"signed {commit.sha[:7]}, which changes the file")

    def _merge_kept(self, merge: Commit, path: str) -> bool:
        # The merge itself wrote the file only if its blob differs from the merged branch's.
        return self.repo.file_blob(merge.sha, path) == self.repo.file_blob(merge.parents[1], path)

    def _exclude(self, vote: Vote, excluded: dict[str, str], policy: Policy) -> Vote:
        if not vote.counted or vote.person not in excluded:
            return vote
        if policy.allow_self_approval:
            return Vote(vote.person, vote.via + f", self-approved: {excluded[vote.person]}", True, "")
        return Vote(vote.person, vote.via, False, excluded[vote.person])

    # -- decisions ----------------------------------------------------------------
    def _decide(self, commit: Commit, policy: Policy, path: str, blob: str, votes: tuple[Vote, ...], not_unique: str | None,
                mode: str = "100644") -> Decision:
        job, invalid = read_job(self.repo, path, blob, mode)
        if job is None:
            return Decision(path, blob, commit.sha, job=None, runnable=False, reason=f"invalid job file: {invalid}", votes=votes)
        if not_unique:
            return Decision(path, blob, commit.sha, job=job, runnable=False, reason=not_unique, votes=votes)
        if policy.require_signed_proposals:
            unsigned = self._unsigned_proposals(policy, commit, path, blob)
            if unsigned:
                return Decision(path, blob, commit.sha, job=job, runnable=False, reason=f"require_signed_proposals: {unsigned}", votes=votes)
        requirement = policy.requirement_for(job)
        counted = [v.person for v in votes if v.counted]
        quorum = policy.quorum(requirement, counted)
        if not quorum.met:
            return Decision(path, blob, commit.sha, job=job, runnable=False, reason=f"not approved: {quorum.reason}; {describe_votes(votes)}", votes=votes, requirement=requirement)
        command = policy.decide_command(job)
        if not command.allowed:
            return Decision(path, blob, commit.sha, job=job, runnable=False, reason=f"denied by policy: {command.reason}", votes=votes, requirement=requirement)
        self_approved = any("self-approved" in v.via for v in votes if v.counted)
        return Decision(path, blob, commit.sha, job=job, runnable=True, reason=f"{quorum.reason}; {command.reason}", votes=votes, requirement=requirement, rule=command.rule, self_approved=self_approved)

    def _unsigned_proposals(self, policy: Policy, commit: Commit, path: str, blob: str) -> str:
        producers = self.repo.producers(commit.sha, {path: blob}).get(path, []) if self.known(path, blob) else []
        for sha in [*self.repo.commits_touching(commit.parents[0], commit.sha, literal(path)), *producers]:
            if sha == commit.sha and self._merge_kept(commit, path):
                continue
            check = self.signature(self.repo.commit(sha), policy.proposal_keys())
            if not check.ok:
                return f"commit {sha[:7]} that changes {path} is not signed by a key in {policy.where} ({check.reason})"
        return ""

    def _policy_change(self, commit: Commit, policy: Policy, votes: dict[str, tuple[Vote, ...]], files: dict[str, str]) -> tuple[bool, str, Policy]:
        if policy.require_signed_proposals:
            for path, blob in files.items():
                unsigned = self._unsigned_proposals(policy, commit, path, blob)
                if unsigned:
                    return False, f"require_signed_proposals: {unsigned}", policy
        people: set[str] | None = None
        for path in files:
            counted = {v.person for v in votes[path] if v.counted}
            people = counted if people is None else people & counted
        quorum = policy.quorum(policy.policy_requirement(), people or set())
        if not quorum.met:
            details = "; ".join(f"{p}: {describe_votes(votes[p])}" for p in sorted(files))
            return False, f"{quorum.reason}; {details}", policy
        # The new policy is every file under policy/ in this tree, so every file that
        # differs from the policy in force must be one this merge's voters approved:
        # a key file swapped by an unapproved push must not ride in with it.
        drift = sorted(c.path for c in self.repo.diff(policy.commit, commit.sha, POLICY_DIR) if c.path not in files)
        if drift:
            return False, (f"{', '.join(drift)} differ from the policy in force ({policy.where}) but this merge does not "
                           "change them, so nobody approved them"), policy
        odd = [f"{p} ({_MODES.get(m, 'mode ' + m)})" for m, _, p in self.repo.ls_tree(commit.sha, POLICY_DIR) if m not in REGULAR]
        if odd:
            return False, f"the new policy is invalid: {', '.join(odd)} under {POLICY_DIR} is not a regular file", policy
        try:
            new = load_policy(lambda p: self.repo.read_file(commit.sha, p), commit=commit.sha)
        except ConfigError as exc:
            return False, f"the new policy is invalid: {exc}", policy
        except Exception as exc:  # no content may stop later passes: any parser failure rejects the change
            return False, f"the new policy is invalid: it cannot be read ({type(exc).__name__})", policy
        return True, quorum.reason, new

    def veto(self, commit: Commit, policy: Policy) -> Assessment:
        check = self.signature(commit, policy.approver_keys())
        if not check.ok or check.key is None:
            return Assessment(commit.sha, "other", policy, summary=f"veto ignored: {_in_policy(check.reason, policy)}")
        vetoes = []
        for trailer in commit.trailers(VETO_TRAILER):
            path, _, blob = trailer.rpartition(" ")
            vetoes.append(Veto(path, blob, check.key.owner, commit.sha))
        return Assessment(commit.sha, "veto", policy, vetoes=tuple(vetoes), summary=f"veto by {check.key.owner}")

    def _reject_all(self, commit: Commit, policy: Policy, jobs: dict[str, str], policy_files: dict[str, str], reason: str,
                    content: tuple[str, ...], modes: dict[str, str] | None = None) -> Assessment:
        modes = modes or {}
        # The job's id, when the file is valid, names what was refused in the record.
        decisions = tuple(Decision(path, blob, commit.sha, read_job(self.repo, path, blob, modes.get(path, "100644"))[0], False, reason)
                          for path, blob in sorted(jobs.items()))
        return Assessment(commit.sha, "unapproved", policy, decisions, policy_changed=bool(policy_files), summary=reason, content=content)


REGULAR = ("100644", "100755")
_MODES = {"120000": "a symlink", "160000": "a gitlink (submodule)"}


def read_job(repo: Repo, path: str, blob: str, mode: str) -> tuple[Job | None, str]:
    """The job at (path, mode, blob), or None and why it is not a valid job file.

    Anything but a regular file at a job path, and any failure to parse (not
    only the ones the parser reports), rejects this one file: no content of
    any commit may make later passes fail.
    """
    if mode not in REGULAR:
        return None, f"{path} is {_MODES.get(mode, 'mode ' + mode)}, not a regular file ({path})"
    try:
        return parse_job(repo.blob(blob), path=path, blob=blob), ""
    except ConfigError as exc:
        return None, str(exc)
    except Exception as exc:
        return None, f"it cannot be read ({type(exc).__name__}) ({path})"


def describe_votes(votes: Iterable[Vote]) -> str:
    votes = list(votes)
    counted = [v.describe() for v in votes if v.counted]
    other = [v.describe() for v in votes if not v.counted]
    text = f"counted: {', '.join(counted) or 'none'}"
    return text + (f"; not counted: {', '.join(other)}" if other else "")


def _people_matching(policy: Policy, name: str, email: str) -> list[Person]:
    return [p for p in (*policy.approvers, *policy.proposers) if p.name.lower() == name.lower() or (email and email.lower() in p.emails)]


def _in_policy(reason: str, policy: Policy) -> str:
    return reason if "policy" in reason else f"{reason} (judged by {policy.where})"
