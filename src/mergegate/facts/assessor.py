"""The facts of a commit on `approved` (or of a proposal's merge), read from git for the judge.

`Assessor` reads what `rules.judge.judge_commit` needs, and nothing decides here:
changed paths with mode and blob at both parents and the merge base, who wrote each file (authors,
and the policy person who signed), the signed approval commits on the merged side and what each
approves, the tree's job ids and symlinks, the new policy's files. Signatures are verified here
(against the keys of the policy in force) and handed over as verdicts; the judge counts.

A commit on `approved` is judged by the policy in force at its first parent (the last policy validly
approved before it): a merge cannot approve itself into power.

The clock signatures are judged at (`at`), and which bytes may have an earlier life
(`known`), are the caller's values for each call: an `Assessor` holds only what it
read from git, so one serves a walk whose commits are judged at different times.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime
from typing import TYPE_CHECKING

from mergegate.crypto.signatures import (
    PublicKey,
    SignatureCheck,
    split_signed_commit,
    verify_signature,
)
from mergegate.facts.git_side import GitSide, Reads
from mergegate.facts.history import History, Side
from mergegate.git.repo import Repo
from mergegate.git.values import Change, Commit
from mergegate.rules.emergency import TRAILER as EMERGENCY_TRAILER
from mergegate.rules.job import is_job_path, job_stem
from mergegate.rules.judge import judge_commit
from mergegate.rules.model import (
    ABSENT,
    REGULAR,
    ApprovalFacts,
    Assessment,
    CommitFacts,
    Entry,
    FileFacts,
    Review,
    Writer,
)
from mergegate.rules.policy import POLICY_DIR, Policy
from mergegate.rules.votes import excluded_people

if TYPE_CHECKING:
    from mergegate.github.gather import ReviewSource
    from mergegate.github.reviews import Verdict

APPROVE_TRAILER = "Mergegate-Approve"
APPROVE_TREE_TRAILER = "Mergegate-Approve-Tree"
VETO_TRAILER = "Mergegate-Veto"
RENEW_TRAILER = "Mergegate-Renew"  # an empty commit on approved renewing an expired approval

# Whether a (path, blob) may have been written before, outside the merged range: searching all
# history for its authors is costly on long histories, so a walk narrows it to what the audit or
# its own memory has seen.
Known = Callable[[str, str], bool]


def anything(path: str, blob: str) -> bool:
    """`Known` when nothing narrows it: any bytes may have had an earlier life."""
    return True


class Assessor:
    """Reads the facts of first-parent commits and hands them to the judge; caches signature
    checks."""

    def __init__(
        self,
        repo: Repo,
        *,
        reviews: ReviewSource | None = None,
        history: History | None = None,
    ) -> None:
        self.repo = repo
        # The whole history read once (verify): a merge's side answered from memory where it can be.
        self.history = history
        # GitHub review evidence for merges no approver key signed (None: reviews are not used).
        self.reviews = reviews
        self._checks: dict[tuple[str, tuple[PublicKey, ...], datetime], SignatureCheck] = {}
        self._trees: dict[str, dict[str, Entry]] = {}
        self._targets: dict[str, bytes] = {}  # symlink blob -> target
        self._changes: dict[
            str, tuple[str, ...] | None
        ] = {}  # an unapproved change -> its parents (None: not here)

    def signature(
        self, commit: Commit, keys: Sequence[PublicKey], *, at: datetime
    ) -> SignatureCheck:
        """The commit's signature against `keys`, each key's lifetime judged at `at`."""
        cache_key = (commit.sha, tuple(keys), at)
        if cache_key not in self._checks:
            split = split_signed_commit(commit.raw)
            if split is None:
                self._checks[cache_key] = SignatureCheck(False, None, "", "unsigned")
            else:
                self._checks[cache_key] = verify_signature(split[0], split[1], keys, at=at)
        return self._checks[cache_key]

    def signer(self, *, at: datetime) -> SignerAt:
        """This assessor's signature checks, all at `at` (what the audit commit checks ask)."""
        return SignerAt(self, at)

    def assess(
        self,
        sha: str,
        policy: Policy,
        unapproved: Mapping[str, str] | None = None,
        *,
        at: datetime,
        known: Known = anything,
    ) -> Assessment:
        """The judge's verdict on one first-parent commit, by the policy in force before it."""
        # Records live on the audit branch: on approved, audit/ is a directory like any other.
        facts = self.facts(sha, policy, unapproved or {}, at=at, known=known)
        return judge_commit(facts, policy, unapproved)

    def veto(self, commit: Commit, policy: Policy, *, at: datetime) -> Assessment:
        return judge_commit(self.facts(commit.sha, policy, {}, at=at), policy, {})

    # -- facts ------------------------------------------------------------------------
    def facts(
        self,
        sha: str,
        policy: Policy,
        unapproved: Mapping[str, str],
        *,
        at: datetime,
        known: Known = anything,
    ) -> CommitFacts:
        facts = self._facts(sha, policy, unapproved, at=at, known=known)
        signed = facts.signature is not None and facts.signature.ok
        if (
            self.reviews is None
            or facts.malformed
            or signed
            or not facts.files
            or len(facts.parents) > 2
            or not self.reviews.enabled(policy)
        ):
            return facts
        verdict = self.reviews.outcome(facts.sha, policy, at=at).verdict
        if (
            len(facts.parents) == 1
            and verdict.method == "squash"
            and not verdict.refused
            and not verdict.waiting
        ):
            # A squash of a known head: the same facts as a merge of that head, so every
            # git-level rule (signed proposals, authors, symlinks, ids) applies to it too.
            facts = self._squash_facts(
                sha, verdict.head, policy, unapproved, facts, at=at, known=known
            )
        return self._with_reviews(facts, verdict)

    def _with_reviews(self, facts: CommitFacts, verdict: Verdict) -> CommitFacts:
        """A merge no approver key signed, that changes something, gets GitHub's review verdict
        (NotYet while the evidence is not there): its votes count for the files it changes
        (the judge refuses them for what the merge itself wrote)."""
        label = f"reviews on PR #{verdict.pull} ({verdict.method})"
        # Stored evidence that does not (yet) derive a verdict approves nothing.
        refused = verdict.refused or verdict.waiting
        votes = (
            tuple((f.path, v) for f in facts.files for v in verdict.votes) if not refused else ()
        )
        return replace(
            facts,
            review=Review(label, refused, verdict.excluded),
            extra_votes=(*facts.extra_votes, *votes),
        )

    def _squash_facts(
        self,
        sha: str,
        head: str,
        policy: Policy,
        unapproved: Mapping[str, str],
        facts: CommitFacts,
        *,
        at: datetime,
        known: Known,
    ) -> CommitFacts:
        commit = self.repo.commit(sha)
        return self._merge_facts(
            sha=sha,
            first=commit.parents[0],
            second=head,
            changes_of=self.repo.diff(commit.parents[0], sha),
            policy=policy,
            unapproved=unapproved,
            signature=facts.signature,
            author=(commit.author_name, commit.author_email),
            parents=commit.parents,
            veto_trailers=facts.veto_trailers,
            emergency_trailers=facts.emergency_trailers,
            squash=True,
            at=at,
            known=known,
        )

    def _facts(
        self, sha: str, policy: Policy, unapproved: Mapping[str, str], *, at: datetime, known: Known
    ) -> CommitFacts:
        commit = self.repo.commit(sha)
        first = commit.parents[0] if commit.parents else None
        changes = self.repo.diff(first, sha)
        # A merge's parents as git reads them: a header a looser reader reads differently is
        # malformed.
        malformed = (
            commit.malformed
            or (
                commit.is_merge
                and self.repo.git_parents(sha) != commit.parents
                and "git reads other parents than its header lists"
            )
            or ""
        )
        two = len(commit.parents) == 2 and not malformed
        # (A renewal is judged as a veto is: an empty commit whose signature names its voter.)
        veto = not changes and bool(commit.trailers(VETO_TRAILER) or commit.trailers(RENEW_TRAILER))
        signature = (
            self.signature(commit, policy.approver_keys(), at=at)
            if (two or veto) and not malformed
            else None
        )
        if not two:
            files = tuple(
                FileFacts(
                    c.path,
                    Entry(c.old_mode, c.old_blob),
                    Entry(c.new_mode, c.new_blob),
                    Entry(c.old_mode, c.old_blob),
                    Entry(c.new_mode, c.new_blob),
                    text=self._text(c.path, Entry(c.new_mode, c.new_blob)),
                    last_approved=self._last_approved(c.path, unapproved),
                )
                for c in changes
            )
            return CommitFacts(
                sha,
                commit.parents,
                malformed,
                commit.author_name,
                commit.author_email,
                files,
                signature,
                veto_trailers=commit.trailers(VETO_TRAILER),
                emergency_trailers=commit.trailers(EMERGENCY_TRAILER),
                renew_trailers=commit.trailers(RENEW_TRAILER) if not changes else (),
            )
        second = commit.parents[1]
        return self._merge_facts(
            sha=sha,
            first=commit.parents[0],
            second=second,
            changes_of=changes,
            policy=policy,
            unapproved=unapproved,
            signature=signature,
            author=(commit.author_name, commit.author_email),
            parents=commit.parents,
            veto_trailers=commit.trailers(VETO_TRAILER),
            emergency_trailers=commit.trailers(EMERGENCY_TRAILER),
            at=at,
            known=known,
        )

    def proposal_facts(
        self,
        *,
        base_tip: str,
        head: str,
        tree: str,
        policy: Policy,
        unapproved: Mapping[str, str],
        merger: str | None,
        at: datetime,
        known: Known = anything,
        emergency: tuple[str, ...] = (),
    ) -> CommitFacts:
        """The facts of the merge of `head` into `base_tip` that `approve --merge` would sign (tree
        `tree`; `emergency`: the Mergegate-Emergency reasons its message would carry)."""
        person = policy.person(merger) if merger else None
        author = (merger or "", person.emails[0] if person and person.emails else "")
        return self._merge_facts(
            sha=head,
            first=base_tip,
            second=head,
            changes_of=self.repo.diff(base_tip, tree),
            policy=policy,
            unapproved=unapproved,
            signature=None,
            author=author,
            parents=(base_tip, head),
            veto_trailers=(),
            result=tree,
            merger=merger,
            at=at,
            known=known,
            emergency_trailers=emergency,
        )

    def _merge_facts(
        self,
        *,
        sha: str,
        first: str,
        second: str,
        changes_of: list[Change],
        policy: Policy,
        unapproved: Mapping[str, str],
        signature: SignatureCheck | None,
        author: tuple[str, str],
        parents: tuple[str, ...],
        veto_trailers: tuple[str, ...],
        emergency_trailers: tuple[str, ...] = (),
        result: str | None = None,
        merger: str | None = None,
        squash: bool = False,
        at: datetime,
        known: Known,
    ) -> CommitFacts:
        result = result or sha
        side: Side | GitSide | None = (
            self.history.side(sha, first, second) if self.history and result == sha else None
        )
        reads = side or GitSide(self, first, second)
        base = reads.base
        paths = [c.path for c in changes_of]
        judged = [c for c in changes_of if is_job_path(c.path) or c.path.startswith(POLICY_DIR)]
        judged_paths = {
            c.path for c in judged
        }  # `c in judged` was a list scan per file: quadratic in the merge
        # Who wrote each job and policy file: the merged commits that change it, and any
        # commit in history that wrote these exact bytes (bytes with an earlier life).
        earlier = {
            c.path: c.new_blob for c in judged if c.status != "D" and known(c.path, c.new_blob)
        }
        tip = (
            sha if result == sha else second
        )  # a proposal's merge does not exist yet: its side does
        merge = (
            sha if result == sha else None
        )  # the merge is a writer only of what it wrote (the judge decides)
        # A squash's own history lacks the reviewed side: bytes may have lived on either.
        tips = (tip, second) if squash else (tip,)
        producers = self._producers(tips, earlier, reads)
        files = []
        for c in changes_of:
            before, after = Entry(c.old_mode, c.old_blob), Entry(c.new_mode, c.new_blob)
            writers: tuple[Writer, ...] = ()
            if c.path in judged_paths:
                shas = [*reads.touching(c.path), *producers.get(c.path, [])]
                writers = tuple(
                    self._writer(s, policy, at=at) for s in dict.fromkeys(shas) if s != merge
                )
            files.append(
                FileFacts(
                    c.path,
                    before,
                    after,
                    reads.entry(base, c.path) if base else ABSENT,
                    reads.entry(second, c.path),
                    writers,
                    self._text(c.path, after),
                    self._last_approved(c.path, unapproved),
                )
            )
        content = {
            c.path: c.new_blob for c in changes_of if c.path not in judged_paths and c.status != "D"
        }
        suspects = {p: b for p, b in content.items() if known(p, b)}
        content_shas = [
            *reads.touching_content(),
            *sorted({s for shas in self._producers(tips, suspects, reads).values() for s in shas}),
        ]
        content_writers = tuple(
            self._writer(s, policy, at=at) for s in dict.fromkeys(content_shas) if s != merge
        )
        # The judge compares a job's id with the other job paths of the tree that have its name.
        stems = {job_stem(c.path) for c in changes_of if is_job_path(c.path) and c.status != "D"}
        policy_changes = any(c.path.startswith(POLICY_DIR) for c in changes_of)
        return CommitFacts(
            sha=sha,
            parents=parents,
            malformed="",
            author_name=author[0],
            author_email=author[1],
            files=tuple(files),
            signature=signature,
            approvals=tuple(self._approvals(reads, base, set(paths), policy, at=at)),
            veto_trailers=veto_trailers,
            emergency_trailers=emergency_trailers,
            content_writers=content_writers,
            job_ids=reads.job_paths(result, stems) if stems else (),
            symlinks=tuple((path, self._target(blob)) for path, blob in reads.symlinks(result))
            if stems
            else (),
            policy_tree=self._policy_tree(result) if policy_changes else None,
            policy_drift=tuple(
                sorted(
                    c.path
                    for c in self.repo.diff(policy.commit, result, POLICY_DIR)
                    if c.path not in paths
                )
            )
            if policy_changes
            else (),
            proposal=result != sha,
            merger=merger,
        )

    def _producers(
        self, tips: tuple[str, ...], files: Mapping[str, str], reads: Reads
    ) -> dict[str, list[str]]:
        if not files:
            return {}
        if isinstance(reads, Side) and tips == (reads.history.line[reads.k],):
            answered = reads.producers(files)
            if answered is not None:
                return answered
        found: dict[str, list[str]] = {}
        for tip in tips:
            for path, shas in self.repo.producers(tip, files).items():
                found[path] = list(dict.fromkeys([*found.get(path, []), *shas]))
        return found

    def _approvals(
        self, reads: Reads, base: str | None, paths: set[str], policy: Policy, *, at: datetime
    ) -> list[ApprovalFacts]:
        """The signed approval commits between `first` and `second`, and what each approves of
        `paths`.

        `Mergegate-Approve: <path> [<mode>] <blob>` approves one file's mode and bytes;
        `Mergegate-Approve-Tree: <tree>` (the approval commit's own tree) approves every
        file as it is in that tree, names git cannot put in a trailer included.
        """
        found = []
        base_entries = {p: reads.entry(base, p) if base else ABSENT for p in paths}
        for sha in reads.side_commits():
            commit = self.repo.commit(sha)
            named, trees = commit.trailers(APPROVE_TRAILER), commit.trailers(APPROVE_TREE_TRAILER)
            if not named and not trees:
                continue
            claims: dict[str, str] = {}
            for trailer in named:
                path, rest = _split_named(trailer)
                if path in paths:
                    claims.setdefault(path, rest)
            if not claims and not trees:
                continue
            entries = {p: reads.entry(sha, p) for p in paths}
            tree = entries if commit.tree in trees else None
            changed = frozenset(p for p in paths if entries[p] != base_entries[p])
            found.append(
                ApprovalFacts(
                    sha,
                    self.signature(commit, policy.approver_keys(), at=at),
                    claims,
                    tree,
                    bool(trees) and commit.tree not in trees,
                    changed,
                    commit.trailers(EMERGENCY_TRAILER),
                )
            )
        return found

    def _writer(self, sha: str, policy: Policy, *, at: datetime) -> Writer:
        commit = self.repo.commit(sha)
        check = self.signature(commit, policy.proposal_keys(), at=at)
        return Writer(
            sha,
            commit.author_name,
            commit.author_email,
            check.key.owner if check.ok and check.key else None,
            check.reason,
        )

    def tree(self, commit: str) -> dict[str, Entry]:
        """Every file of a commit (or tree), by tree: a merge's result, its side and the next
        merge's base are mostly one tree, listed once."""
        tree = self.repo.tree_of(commit)
        if tree not in self._trees:
            if len(self._trees) > 64:
                self._trees.clear()
            self._trees[tree] = {
                path: Entry(mode, blob) for mode, blob, path in self.repo.ls_tree(tree)
            }
        return self._trees[tree]

    def _text(self, path: str, entry: Entry) -> bytes | None:
        if entry.mode not in REGULAR or not (is_job_path(path) or path.startswith(POLICY_DIR)):
            return None
        return self.repo.blob(entry.blob)

    def _last_approved(self, path: str, unapproved: Mapping[str, str]) -> Entry | None:
        """The version of an unapproved path before its first unapproved change."""
        change = unapproved.get(path)
        if change is None:
            return None
        if change not in self._changes:  # one change usually holds many paths: asked of git once
            self._changes[change] = (
                self.repo.commit(change).parents if self.repo.rev(change) is not None else None
            )
        parents = self._changes[change]
        if parents is None:
            return None
        return self.tree(parents[0]).get(path, ABSENT) if parents else ABSENT

    def _target(self, blob: str) -> bytes:
        """A symlink's target (one read per blob: a long walk meets the same links in every
        tree)."""
        if blob not in self._targets:
            self._targets[blob] = self.repo.blob(blob)
        return self._targets[blob]

    def _policy_tree(self, tree: str) -> dict[str, tuple[str, bytes]]:
        return {
            path: (mode, self.repo.blob(blob) if mode in REGULAR else b"")
            for mode, blob, path in self.repo.ls_tree(tree, POLICY_DIR)
        }

    def excluded(self, policy: Policy, facts: CommitFacts, path: str) -> dict[str, str]:
        """Who may not count for `path` in the merge `facts` describes (for `approve` to warn)."""
        return next((excluded_people(policy, f.writers) for f in facts.files if f.path == path), {})


@dataclass(frozen=True)
class SignerAt:
    """An assessor's signature checks at one time: `audit_commits.Signer`, for the audit commit
    checks, which judge every runner key at the same clock."""

    assessor: Assessor
    at: datetime

    def signature(self, commit: Commit, keys: Sequence[PublicKey]) -> SignatureCheck:
        return self.assessor.signature(commit, keys, at=self.at)


def _split_named(trailer: str) -> tuple[str, str]:
    """A Mergegate-Approve trailer as (path, "<mode> <blob>" or "<blob>")."""
    path, _, blob = trailer.rpartition(" ")
    rest, _, mode = path.rpartition(" ")
    if rest and mode in ("100644", "100755", "120000"):
        return rest, f"{mode} {blob}"
    return path, blob
