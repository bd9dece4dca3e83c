"""The audit branch's history: what each commit on `mergegate/audit` may do.

Each commit is made by a runner, has one parent (none for the first), and only appends: lines at the
end of audit/log-NNNNNN.jsonl, new files audit/evidence/<sha256>.json named by the hash of their
bytes, and new files audit/attestations/<run id>.intoto.json (audit_files.py says what a commit may
do to each file). Its message carries `Mergegate-Approved: <sha>`, the tip of `approved` the runner
judged; that commit is an ancestor of approved's tip and descends from (or equals) the previous
audit commit's. When the policy in force at that commit lists runners, the commit is signed by one
of their keys. Anything else is tampering, and names the commit.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Protocol

from mergegate.audit import log as audit
from mergegate.errors import IntegrityError
from mergegate.facts import audit_files
from mergegate.facts.audit_files import Tampering
from mergegate.facts.branches import AUDIT_BRANCH
from mergegate.git.repo import Repo
from mergegate.git.values import ZERO, Change, Commit
from mergegate.rules.policy import Policy

if (
    TYPE_CHECKING
):  # (the judge's modules: `audit verify` imports them only if a check needs them, issue 12)
    from mergegate.crypto.signatures import PublicKey, SignatureCheck

APPROVED_TRAILER = "Mergegate-Approved"
_SHA = re.compile(r"^[0-9a-f]{40}$")
# The commits of approved a record names: its `commit` (and `open` entries'), a scan's `start`.
NAMED = re.compile(rb'"(?:commit|start)":"([0-9a-f]{40})"')  # the commits a record names


class NameSink:
    """The commits the records an audit commit appends name (`Checker._tied`), found as each
    appended piece is read, so that no piece is kept: a 78 MiB log file added in one commit is
    not held until the check ends. A log file the chain check read whole (`audit verify`) brings
    its names from there (`known`: blob -> names) instead of being read again."""

    def __init__(self, known: Mapping[str, frozenset[str]] | None = None) -> None:
        self.found: set[str] = set()
        self.known = known or {}

    def add(self, data: bytes, start: int = 0, end: int | None = None) -> None:
        """The names in data[start:end] (no copy of the slice)."""
        stop = len(data) if end is None else end
        self.found.update(m.decode() for m in NAMED.findall(data, start, stop))

    def add_blob(self, repo: Repo, blob: str) -> None:
        names = self.known.get(blob)
        if names is None:
            self.add(repo.blob(blob))
        else:
            self.found.update(names)


def approved_of(commit: Commit) -> str | None:
    """The commit's one `Mergegate-Approved` value, if it has exactly one full commit id."""
    values = commit.trailers(APPROVED_TRAILER)
    return values[0] if len(values) == 1 and _SHA.match(values[0]) else None


def message(summary: str, approved: str) -> str:
    return f"{summary}\n\n{APPROVED_TRAILER}: {approved}\n"


class Signer(Protocol):
    """What the commit checks ask of an `Assessor`: a commit's signature against keys."""

    def signature(self, commit: Commit, keys: Sequence[PublicKey]) -> SignatureCheck: ...


ASK_ALONE = 4  # ancestor questions `_tied` asks git one by one before it reads all of history


@dataclass(frozen=True)
class Checker:
    """Checks audit commits against the rules above.

    `policy_at(sha)` is the policy in force at an approved commit (for the runner-signature rule);
    `approved_tip` is the tip of approved as read now.
    """

    repo: Repo
    assessor: Signer  # an Assessor (or what makes one when first asked: audit verify)
    approved_tip: str
    policy_at: Callable[[str], Policy]
    # approved's first-parent line from approved_tip, read once (a trailer must name a commit on
    # it):
    # commit -> its place, 0 for the tip (an older commit has a larger place). Not an init field, so
    # that `replace(checker, approved_tip=newer)` reads the newer tip's line: a copy of the old one
    # made another runner's records, judged at a merge that landed during this pass, look like
    # tampering.
    _line: dict[str, int] = field(default_factory=dict, init=False, compare=False, repr=False)
    # (seq of the first record a checked commit appended, the approved tip it says it judged), in
    # order:
    # what each record's runner had judged when it pushed the record (verify's veto rule reads it).
    judged: list[tuple[int, str]] = field(default_factory=list, compare=False, repr=False)
    # (that seq, the audit commit), in the same order: which commit appended a record (verify's
    # dating rule).
    appended: list[tuple[int, str]] = field(default_factory=list, compare=False, repr=False)
    # Log-file blobs already read and chain-checked whole (blob -> seq of its first record):
    # a commit that adds one need not read it again (audit verify reads the chain first).
    verified: Mapping[str, int] = field(default_factory=dict, compare=False, repr=False)
    # ... and the commits each such blob's records name (blob -> names: `NameSink`).
    verified_names: Mapping[str, frozenset[str]] = field(
        default_factory=dict, compare=False, repr=False
    )

    _tips: list[Tips] = field(default_factory=list, compare=False, repr=False)
    # Where each commit off the first-parent line entered approved's history (commit -> the place
    # of the first line commit that has it), per line tip: `_tied`'s ancestor question for every
    # approval a record names, answered from one `rev-list` instead of a git process each.
    _entries: dict[str, dict[str, int]] = field(
        default_factory=dict, compare=False, repr=False, init=False
    )
    # How many ancestor questions `_tied` put to git one at a time: a runner's pass names a few
    # new approvals (a process each is cheaper than reading all of history); past ASK_ALONE, as
    # in verify and audit verify of a whole log, the rest come from `_entered`.
    _asked: list[int] = field(default_factory=lambda: [0], compare=False, repr=False, init=False)
    # The numbers of the log files at the last commit checked, when known (a check from the branch's
    # root):
    # a commit that adds a file is then checked to continue the numbering without listing its tree.
    _logs: list[set[int]] = field(default_factory=list, compare=False, repr=False)

    def check(self, shas: Sequence[str], *, shapes: bool = True) -> None:
        """Check `shas` (oldest first, each the parent of the next) and the last one's place on
        approved.

        Without `shapes`, only the signatures (the shapes were checked already, before anything read
        the records).
        """
        if shapes and len(shas) > 1:
            self._tips[:] = [
                Tips(self.repo, shas[-1])
            ]  # the log files as the last of them holds them
            if not self.repo.commit(shas[0]).parents:
                self._logs[:] = [set()]
        try:
            for sha in shas:
                self.check_commit(sha, shape=shapes)
        finally:
            self._tips.clear()
            self._logs.clear()
        if shas:
            self._on_approved(shas[-1])

    def check_commit(self, sha: str, *, shape: bool = True) -> None:
        # A commit that says it judged approved's tip (a runner's own, approved unchanged) needs no
        # look at the line, which is history-long: read it for the first commit judged elsewhere.
        said = approved_of(self.repo.commit(sha))
        line = self._first_parent_line() if self._line or said != self.approved_tip else None
        appended = NameSink(self.verified_names)
        first = (
            self.check_shape(
                self.repo,
                sha,
                verified=self.verified,
                tips=self._tips[0] if self._tips else None,
                line=line,
                logs=self._logs[0] if self._logs else None,
                sink=appended,
            )
            if shape
            else None
        )
        approved = approved_of(self.repo.commit(sha))
        if approved is None:
            raise Tampering(sha, f"carries no valid {APPROVED_TRAILER}: <commit> trailer")
        if first is not None:
            self.judged.append((first, approved))
            self.appended.append((first, sha))
        # The trailer picks the policy that says whether a runner must sign, so it must name a
        # commit on approved's own first-parent line: an ancestor reached through a second parent
        # (a proposal's merge of an old base) has a first-parent history that skips policy changes.
        if (
            line is not None
            and approved not in line
            and self.repo.rev(approved) is not None
            and self.repo.is_ancestor(approved, self.approved_tip)
        ):
            raise Tampering(
                sha,
                f"says it judged approved at {approved[:12]}, which is not on approved's "
                "first-parent line "
                f"(runners judge approved's tip, never a merged side commit)",
            )
        policy = self.policy_at(approved)
        if policy.runners:
            check = self.assessor.signature(self.repo.commit(sha), policy.runner_keys())
            if not check.ok:
                raise Tampering(
                    sha, f"is not signed by a runner in {policy.where} ({check.reason})"
                )
        # (Last: the rules above name what they find first, whatever the records say.)
        named = appended.found if shape else _appended_names(self.repo, sha)
        self._tied(sha, approved, named, line)

    def _tied(
        self, sha: str, approved: str, named: set[str], line: Mapping[str, int] | None
    ) -> None:
        """Every commit the records appended by `sha` name is its trailer's commit or an ancestor
        of it (issue 23, item 9): a trailer repeating an older tip (which picks an older policy,
        one without `runners`, say) cannot carry records of what came after it."""
        for commit in sorted(named - {approved}):
            if line is None and self._asked[0] >= ASK_ALONE:
                line = self._first_parent_line()
            if line is not None and approved in line:
                place = line.get(commit)
                if place is None:
                    place = self._entered(line).get(commit)
                inside = place is not None and place >= line[approved]
            else:
                self._asked[0] += 1
                inside = self.repo.rev(commit) is not None and self.repo.is_ancestor(
                    commit, approved
                )
            if not inside:
                raise Tampering(
                    sha,
                    f"appends a record naming commit {commit[:12]}, which is not in the history "
                    f"of {approved[:12]}, the tip of approved its {APPROVED_TRAILER} trailer "
                    "says it judged",
                )

    def _entered(self, line: Mapping[str, int]) -> Mapping[str, int]:
        """commit -> the place on `line` (approved's first-parent line, 0 its tip) of the first
        line commit whose history holds it. A commit is an ancestor of the line commit at place
        `a` exactly when it entered at a place >= `a`; one missing is in no line commit's history.

        From the oldest line commit to the tip, each one's second parents bring in what no older
        line commit had: one `rev-list --parents` and one pass over the graph, whatever the number
        of approvals the records name."""
        tip = min(line, key=line.__getitem__)
        if tip not in self._entries:
            parents = {
                sha: rest
                for sha, *rest in (
                    row.split() for row in self.repo.out("rev-list", "--parents", tip).splitlines()
                )
            }
            entered: dict[str, int] = {}
            for sha, place in sorted(line.items(), key=lambda item: -item[1]):
                entered[sha] = place
                todo = list(parents.get(sha, ())[1:])
                while todo:
                    commit = todo.pop()
                    if commit not in entered:
                        entered[commit] = place
                        todo.extend(parents.get(commit, ()))
            self._entries[tip] = entered
        return self._entries[tip]

    def moved_to(self, tip: str) -> Checker:
        """This checker for approved at `tip`, a later tip read during the same pass.

        Its line is that of `tip`: when `tip` continues the line this checker read (the usual
        case: merges landed on approved), only the new first-parent commits are read and the old
        line is kept behind them; else (a rewind, a line that joins through a second parent, or
        one never read) the whole line of `tip` is read when first asked for.
        """
        moved = replace(self, approved_tip=tip)
        if self._line and tip != self.approved_tip:
            added = self.repo.out(
                "rev-list", "--first-parent", tip, f"^{self.approved_tip}"
            ).split()
            if added and self.repo.commit(added[-1]).parents[:1] == (self.approved_tip,):
                moved._line.update((sha, place) for place, sha in enumerate(added))
                moved._line.update((sha, place + len(added)) for sha, place in self._line.items())
        return moved

    def first_parent_line(self) -> Mapping[str, int]:
        """approved's first-parent line from approved_tip: commit -> place, 0 for the tip."""
        return self._first_parent_line()

    def _first_parent_line(self) -> dict[str, int]:
        if not self._line:
            self._line.update(
                (sha, place)
                for place, sha in enumerate(
                    self.repo.out("rev-list", "--first-parent", self.approved_tip).split()
                )
            )
        return self._line

    @classmethod
    def check_shape(
        cls,
        repo: Repo,
        sha: str,
        *,
        verified: Mapping[str, int] | None = None,
        tips: Tips | None = None,
        line: Mapping[str, int] | None = None,
        logs: set[int] | None = None,
        sink: NameSink | None = None,
    ) -> int | None:
        """Every rule but the signature: linear, the trailer, only appends. Returns the seq of the
        first record the commit appends (None if it cannot be read: the chain check reports
        that); the commits the appended records name go to `sink`."""
        commit = repo.commit(sha)
        if len(commit.parents) > 1:
            raise Tampering(sha, "is a merge (the audit branch is linear)")
        approved = approved_of(commit)
        if approved is None:
            raise Tampering(sha, f"carries no valid {APPROVED_TRAILER}: <commit> trailer")
        parent = commit.parents[0] if commit.parents else None
        if parent is not None:
            before = approved_of(repo.commit(parent))
            if before is None:
                raise Tampering(parent, f"carries no valid {APPROVED_TRAILER}: <commit> trailer")
            # Both on approved's first-parent line: ancestry is their order on it (no git process
            # per commit).
            if line is not None and before in line and approved in line:
                descends = line[before] >= line[approved]
            else:
                descends = before == approved or repo.is_ancestor(before, approved)
            if not descends:
                raise Tampering(
                    sha,
                    f"says it judged approved at {approved[:12]}, which does not descend from "
                    f"{before[:12]}, "
                    "judged by the commit before it",
                )
        return cls._only_appends(repo, sha, parent, verified or {}, tips, logs, sink)

    @staticmethod
    def _only_appends(
        repo: Repo,
        sha: str,
        parent: str | None,
        verified: Mapping[str, int],
        tips: Tips | None = None,
        numbers: set[int] | None = None,
        sink: NameSink | None = None,
    ) -> int | None:
        changes = repo.diff(parent, sha)
        logs = 0
        first: int | None = None
        for change in changes:
            if audit.is_evidence_path(change.path) is not None:
                audit_files.check_evidence(repo, sha, change)
                continue
            if audit_files.is_attestation(change.path):
                audit_files.check_attestation(sha, change)
                continue
            audit_files.check_log_file(sha, change)
            logs += 1
            first = _appended(repo, sha, change, verified, tips, first, sink)
        if logs == 0:
            raise Tampering(sha, "appends no record")
        _check_numbering(repo, sha, changes, numbers)
        return first

    def _on_approved(self, sha: str) -> None:
        approved = approved_of(self.repo.commit(sha))
        assert approved is not None
        if (
            approved == self.approved_tip
            or approved in self._first_parent_line()
            or (
                self.repo.rev(approved) is not None
                and self.repo.is_ancestor(approved, self.approved_tip)
            )
        ):
            # (the line is approved_tip's first parents, read once: no merge-base process a push)
            return
        # Both branches come from one fetch, so records never judged an approved this clone lacks:
        # approved lost commits a runner judged (a force-push a fresh clone sees too), or the
        # trailer is forged.
        raise IntegrityError(
            f"audit commit {sha[:12]} on {AUDIT_BRANCH} says a runner judged approved at "
            f"{approved[:12]}, which is not in the "
            f"history of approved at {self.approved_tip[:12]}: approved was rewritten "
            "(force-push?) or the records are forged",
            hint="investigate before trusting either branch; if this clone fetched only one of "
            "them, run again with a fetch",
        )


class Tips:
    """The log files as one audit commit holds them, one file's bytes in memory at a time.

    A commit before it that changed a file left a version that only ever grew since, so each
    version is normally the first bytes of that file: proven, without reading it, when its
    object id is the SHA-1 of the blob of those bytes. Checking every commit of a long audit
    branch then reads each file once (git would inflate every version), at the cost of hashing
    the prefixes. A version that is not a prefix is read and checked as before, which names
    what it changed.
    """

    def __init__(self, repo: Repo, tip: str) -> None:
        self.repo = repo
        try:
            self.blobs = dict(audit.log_files(repo, tip))
        except IntegrityError:
            self.blobs = {}  # the commits' own checks say what is wrong
        self.path: str | None = None
        self.data = b""
        self.sizes: dict[
            str, int
        ] = {}  # versions of `path` proven to be prefixes of `data`, by size

    def prefix(self, path: str, blob: str) -> int | None:
        """The size of version `blob` of `path` if it is the first bytes of that file at the tip,
        else None."""
        tip_blob = self.blobs.get(path)
        if tip_blob is None or len(blob) != 40:
            return None
        if self.path != path:
            self.path, self.data = path, self.repo.blob(tip_blob)
            self.sizes = {tip_blob: len(self.data)}
        if blob in self.sizes:
            return self.sizes[blob]
        size = self.repo.object_size(blob)
        if size is None or size > len(self.data):
            return None
        digest = hashlib.sha1(b"blob %d\0" % size, usedforsecurity=False)
        digest.update(memoryview(self.data)[:size])
        if digest.hexdigest() != blob:
            return None
        self.sizes[blob] = size
        return size


def unchecked(repo: Repo, tip: str | None, *, seen: str | None, tail: audit.Tail) -> list[str]:
    """The audit commits a pass checks, oldest first: those after the one this clone last saw,
    or, in a clone that saw none, back to the one that added the last `scanned` record.

    That is what is new since the last complete pass (few commits, whatever the history's length);
    `audit verify` and `verify` check every commit.
    """
    if tip is None:
        return []
    found: list[str] = []
    sha: str | None = tip
    while sha is not None and sha != seen:
        found.append(sha)
        commit = repo.commit(sha)
        if len(commit.parents) != 1:
            break  # the root, or a merge (which the check reports)
        parent = commit.parents[0]
        if seen is None and tail.scanned is not None and tail.scanned_file is not None:
            size = repo.blob_size(parent, tail.scanned_file)
            if size is None or size < tail.scanned_end:
                break  # the parent did not hold the last scanned record yet: this commit added it
        sha = parent
    return found[::-1]


def explain(
    repo: Repo, tip: str, seen: str | None, error: IntegrityError, *, limit: int = 200
) -> IntegrityError:
    """The commit that broke the log, when reading it failed: the newest one (after `seen`) that
    breaks a rule."""
    for sha in repo.out(
        "rev-list",
        f"--max-count={limit}",
        tip,
        *([f"^{seen}"] if seen and repo.is_ancestor(seen, tip) else []),
    ).split():
        try:
            Checker.check_shape(repo, sha)
        except Tampering as found:
            return found
    return IntegrityError(
        f"{error.message}; tampering? the audit branch's tip is {tip[:12]}",
        file=error.file,
        line=error.line,
        hint="`mergegate audit verify` checks every commit of the audit branch",
    )


def every_commit(repo: Repo, tip: str | None) -> list[str]:
    """Every commit of the audit branch, oldest first (a merge's other side included, to be
    reported)."""
    return [] if tip is None else repo.out("rev-list", "--reverse", "--topo-order", tip).split()


def _appended_names(repo: Repo, sha: str) -> set[str]:
    """The commits named by what an audit commit whose shape was checked already appended to its
    log files."""
    commit = repo.commit(sha)
    parent = commit.parents[0] if commit.parents else None
    sink = NameSink()
    for change in repo.diff(parent, sha):
        if change.status != "D" and audit_files.is_log(change.path):
            start = (repo.object_size(change.old_blob) or 0) if change.old_blob != ZERO else 0
            sink.add(repo.blob(change.new_blob), start)
    return sink.found


def _appended(
    repo: Repo,
    sha: str,
    change: Change,
    verified: Mapping[str, int],
    tips: Tips | None,
    first: int | None,
    sink: NameSink | None = None,
) -> int | None:
    """Check that a log file's change only appends complete lines; the smaller of `first` and the
    seq of the first record it appends. The commits the appended records name go to `sink`."""
    sink = sink if sink is not None else NameSink()
    path = change.path
    if change.status == "A" and change.new_blob in verified:  # complete lines, first seq known
        sink.add_blob(repo, change.new_blob)
        return verified[change.new_blob] if first is None else min(first, verified[change.new_blob])
    size = tips.prefix(path, change.new_blob) if tips is not None else None
    if tips is not None and size is not None:
        # this version is the first `size` bytes of the file at the last commit
        data = tips.data
        if size == 0 or data[size - 1] != 0x0A:
            raise Tampering(
                sha,
                f"leaves an incomplete last line in {path}",
                file=path,
                line=data.count(b"\n", 0, size) + 1,
            )
        if change.status == "A":
            sink.add(data, 0, size)
            return audit_files.first_seq(data, 0, first)
        old_size = tips.prefix(path, change.old_blob)
        if (
            old_size is not None and old_size <= size
        ):  # the old version is a prefix too, and shorter: appended
            sink.add(data, old_size, size)
            return audit_files.first_seq(data, old_size, first)
    new = repo.blob(change.new_blob)
    if not new.endswith(b"\n"):
        raise Tampering(
            sha,
            f"leaves an incomplete last line in {path}",
            file=path,
            line=new.count(b"\n") + 1,
        )
    if change.status == "A":
        sink.add(new)
        return audit_files.first_seq(new, 0, first)
    if audit_files.extends(repo, new, change.old_blob):
        sink.add(new, repo.object_size(change.old_blob) or 0)
        return audit_files.first_seq(new, repo.object_size(change.old_blob) or 0, first)
    old = repo.blob(change.old_blob) if change.old_blob != ZERO else b""
    if not new.startswith(old):
        raise Tampering(
            sha,
            f"rewrites existing audit records in {path}",
            file=path,
            line=audit_files.first_difference(old, new),
        )
    sink.add(new, len(old))
    return audit_files.first_seq(new, len(old), first)


def _check_numbering(
    repo: Repo, sha: str, changes: Sequence[Change], numbers: set[int] | None
) -> None:
    """A log file the commit adds continues the numbering."""
    added = {
        int(c.path[len("audit/log-") : -len(".jsonl")])
        for c in changes
        if c.status == "A" and c.path.endswith(".jsonl")
    }
    if (
        numbers is not None
        # the files before this commit are known (every commit since the root passed these
        # rules)
    ):
        numbers |= added
        if numbers == set(range(1, len(numbers) + 1)):
            return
    if added:
        try:
            audit.log_files(repo, sha)  # a new file continues the numbering
        except IntegrityError as exc:
            raise Tampering(sha, exc.message, file=exc.file) from None
