"""The history of `approved` read once, for a walk over all of it (`verify`).

For every merge it judges, the Assessor asks git for the merge base, the merged side's commits,
which of them touch each file (and any content file), entries of the trees involved, the job paths
and symlinks of the result, and earlier commits that wrote the same bytes: a git process each, and a
tree listing as long as the tree, so a walk over N merges cost N times the history.

`History` answers the same questions from one read of the commit graph (`rev-list --timestamp
--parents`), the first-parent diff of every commit the trust root does not reach (`diff-tree
--stdin`; a side commit with the trees of a chain commit and its parent reuses that diff) and the
objects the walk reads (`cat-file --batch`), by set algebra: each commit belongs to the first commit
of the chain that reaches it (a merge's side is what it brought), and a tree entry is the last
change of that path on the way there.

It answers only where its answer is provably git's, and `side` returns None
everywhere else (the Assessor then asks git, as before):
- committer dates never decrease from a parent to its child anywhere in the
  history (git's walks are date-ordered; with clock skew, which commits a
  range lists depends on how far the walk went: ask git);
- the merged side is a line of non-merge commits whose base is on the
  first-parent line after the trust root or reached from it by a few side
  commits (merges inside the side follow git's full-history TREESAME rules,
  which a line does not need);
- no GIT_*_PATHSPECS variable changes how git matches pathspecs;
- the side's changed names hold no glob character (`*?[\\`: the content
  pathspec is then matched here as git matches it; otherwise by git);
- for earlier writers of the same bytes (`producers`), no two of them share a
  date (git's order between equal dates depends on the whole walk);
- no diff lists a path twice (a tree git would not write: unsorted, or a name
  twice; replaying diffs and listing trees disagree on it).
`tests/facts/test_history.py` holds every answer to git's own, one question at a time.
"""

from __future__ import annotations

import bisect
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mergegate.git.repo import Repo
from mergegate.git.values import ZERO, Change, path_bytes
from mergegate.rules.job import is_job_path, job_stem
from mergegate.rules.model import ABSENT, Entry
from mergegate.rules.policy import POLICY_DIR

# Everything a job may read or execute besides job definitions and the policy.
CONTENT_PATHSPEC = (
    ".",
    ":(exclude)policy",
    ":(exclude,glob)jobs/**/*.yaml",
    ":(exclude,glob)jobs/**/*.yml",
)
SYMLINK = "120000"
# How many side commits an entry lookup follows before giving up (and asking git).
_REACH = 512
# Variables that change how git matches every pathspec.
_PATHSPEC_ENV = (
    "GIT_LITERAL_PATHSPECS",
    "GIT_GLOB_PATHSPECS",
    "GIT_NOGLOB_PATHSPECS",
    "GIT_ICASE_PATHSPECS",
)
# wildmatch's special characters: a name holding one could match a pattern literally (git's own
# rules then).
_GLOB = re.compile(rb"[*?\[\\]")


def _after(change: Change) -> Entry:
    return Entry(change.new_mode, change.new_blob)


class History:
    """Answers about the merges of `chain` (first-parent commits after `root`, oldest first)."""

    def __init__(
        self,
        repo: Repo,
        root: str,
        chain: Sequence[str],
        graph: list[tuple[str, int, tuple[str, ...], str]],
        diffs: Mapping[str, list[Change]],
        root_tree: Mapping[str, Entry],
    ) -> None:
        self.repo = repo
        self.line = [root, *chain]
        self.position = {sha: k for k, sha in enumerate(self.line)}
        self.parents = {sha: parents for sha, _, parents, _ in graph}
        self.date = {sha: date for sha, date, _, _ in graph}
        self.diffs = diffs  # first-parent diff of every commit the root does not reach
        self.root_tree = root_tree
        self.intro = _introductions(self.line, self.parents)
        # Per path: the line positions where it changed, and its entry after each change.
        self._changes: dict[str, tuple[list[int], list[Entry]]] = {}
        self._stems: dict[str, set[str]] = {}  # job paths ever on the line, by stem
        self._symlinks: set[str] = {p for p, e in root_tree.items() if e.mode == SYMLINK}
        for path in root_tree:
            if is_job_path(path):
                self._stems.setdefault(job_stem(path), set()).add(path)
        for k, sha in enumerate(chain, start=1):
            for change in diffs[sha]:
                positions, entries = self._changes.setdefault(change.path, ([], []))
                positions.append(k)
                entries.append(_after(change))
                if is_job_path(change.path):
                    self._stems.setdefault(job_stem(change.path), set()).add(change.path)
                if change.new_mode == SYMLINK:
                    self._symlinks.add(change.path)
        self._touched: dict[str, frozenset[bytes]] = {}
        self._writers: dict[tuple[str, str], list[str]] | None = None

    @classmethod
    def read(cls, repo: Repo, root: str, chain: Sequence[str]) -> History | None:
        """The history up to the chain's last commit, or None where it could not answer as git does.

        Also tells `repo` the chain's parents and first-parent diffs (what `Repo.prefetch`
        reads)."""
        if not chain or any(name in os.environ for name in _PATHSPEC_ENV):
            return None  # git would match pathspecs as the environment says: let it
        graph = repo.graph(chain[-1])
        parents = {sha: p for sha, _, p, _ in graph}
        dates = {sha: date for sha, date, _, _ in graph}
        trees = {sha: tree for sha, _, _, tree in graph}
        line = [root, *chain]
        if any(parents.get(sha, ())[:1] != (line[k],) for k, sha in enumerate(chain)):
            return None  # not one first-parent line from the root: ask git
        if any(dates[p] > date for _, date, ps, _ in graph for p in ps):
            return (
                None  # clock skew somewhere: git's date-ordered walks may differ from reachability
            )
        intro = _introductions(line, parents)
        on_line = set(chain)
        rest = [
            (p[0] if p else None, sha)
            for sha, _, p, _ in graph
            if intro[sha] > 0 and sha not in on_line
        ]
        # git processes at once (two cores): the chain's diffs in two halves (each compares whole
        # trees of folders that grow with the history: most of git's work), while the commits stream
        # in.
        pairs = [(line[k], sha) for k, sha in enumerate(chain)]
        half = len(pairs) // 2
        # Imported here: concurrent.futures brings logging, and a runner's pass imports this module
        # (approvals.py) without ever reading a whole history.
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=2) as pool:
            readings = [pool.submit(repo.diffs, part) for part in (pairs[:half], pairs[half:])]
            repo.preload([*chain, *(sha for _, sha in rest)])
            root_tree = {path: Entry(mode, blob) for mode, blob, path in repo.ls_tree(root)}
            halves = [reading.result() for reading in readings]
        if halves[0] is None or halves[1] is None:
            return None
        chain_diffs = [*halves[0], *halves[1]]
        diffs = dict(zip(chain, chain_diffs, strict=True))
        # A diff is its two trees': a side's commit with the trees of a chain commit and its parent
        # (a proposal of one commit on approved's tip, merged as it is) has that diff, read once.
        by_trees = {
            (trees[line[k]], trees[sha]): changes
            for k, (sha, changes) in enumerate(zip(chain, chain_diffs, strict=True))
        }
        for parent, sha in rest:
            if parent is not None and (trees[parent], trees[sha]) in by_trees:
                diffs[sha] = by_trees[(trees[parent], trees[sha])]
        unread = [(parent, sha) for parent, sha in rest if sha not in diffs]
        answers = repo.diffs(unread)
        if answers is None:
            return None
        diffs.update((sha, changes) for (_, sha), changes in zip(unread, answers, strict=True))
        if any(len({c.path for c in changes}) != len(changes) for changes in diffs.values()):
            # A path twice in one diff: a tree git never writes (unsorted, or a name twice), where
            # replaying diffs and listing trees disagree. Ask git, as the runner does.
            return None
        repo.remember(
            {sha: parents[sha] for sha in chain},
            {(line[k], sha): diffs[sha] for k, sha in enumerate(chain)},
        )
        # The job and policy files the walk reads, streamed by one process rather than a round trip
        # each.
        repo.preload(
            [
                c.new_blob
                for sha in chain
                for c in diffs[sha]
                if c.new_mode in ("100644", "100755")
                and (is_job_path(c.path) or c.path.startswith(POLICY_DIR))
            ]
        )
        return cls(repo, root, chain, graph, diffs, root_tree)

    def side(self, merge: str, first: str, second: str) -> Side | None:
        """What the merge of `second` into `first` (the chain commit `merge`) brought, or None: ask
        git."""
        k = self.position.get(merge)
        if k is None or k == 0 or self.parents.get(merge) != (first, second):
            return None
        commits: list[str] = []  # tip first, as rev-list lists them
        sha = second
        while self.intro.get(sha) == k:
            if len(self.parents[sha]) != 1:
                return None  # a merge or a root inside the side
            commits.append(sha)
            sha = self.parents[sha][0]
        if (
            sha not in self.intro
            or not self._reachable(sha)
            or any(self.content(c) is None for c in commits)
        ):
            return None
        return Side(self, k, sha, commits)

    # -- entries -----------------------------------------------------------------------
    def _reachable(self, sha: str) -> bool:
        """Whether entries at `sha` can be read from the diffs: on the line, or a few first parents
        off it."""
        for _ in range(_REACH):
            if sha in self.position:
                return True
            parents = self.parents.get(sha, ())
            if not parents or self.intro.get(sha, 0) == 0:
                return False
            sha = parents[0]
        return False

    def entry(self, sha: str, path: str) -> Entry:
        """`path`'s mode and blob at commit `sha` (one `_reachable`)."""
        while sha not in self.position:
            for change in self.diffs[sha]:
                if change.path == path:
                    return _after(change)
            sha = self.parents[sha][0]
        positions, entries = self._changes.get(path, ([], []))
        at = bisect.bisect_right(positions, self.position[sha]) - 1
        return entries[at] if at >= 0 else self.root_tree.get(path, ABSENT)

    def touches(self, sha: str, path: str) -> bool:
        """Whether `sha`'s diff touches `:(literal)path` (the path itself, or anything under it as a
        folder)."""
        touched = self._touched.get(sha)
        if touched is None:
            names = {path_bytes(c.path) for c in self.diffs[sha]}
            folders = {
                name[:i] for name in names for i in range(len(name)) if name[i : i + 1] == b"/"
            }
            touched = self._touched[sha] = frozenset(names | folders)
        return path_bytes(path) in touched

    def content(self, sha: str) -> bool | None:
        """Whether `sha`'s diff touches CONTENT_PATHSPEC; None when a changed name holds a glob
        character (then git's own pathspec matching decides)."""
        names = [path_bytes(c.path) for c in self.diffs[sha]]
        if any(_GLOB.search(name) for name in names):
            return None
        return any(_content(name) for name in names)

    def job_paths(self, k: int, stems: set[str]) -> tuple[str, ...]:
        sha = self.line[k]
        found = {
            p for stem in stems for p in self._stems.get(stem, ()) if self.entry(sha, p) != ABSENT
        }
        return tuple(sorted(found, key=path_bytes))

    def symlinks(self, k: int) -> tuple[tuple[str, str], ...]:
        sha = self.line[k]
        found = [(p, e.blob) for p in self._symlinks if (e := self.entry(sha, p)).mode == SYMLINK]
        return tuple(sorted(found, key=lambda item: path_bytes(item[0])))

    # -- earlier writers of the same bytes -------------------------------------------------
    def writers(self, k: int, files: Mapping[str, str]) -> dict[str, list[str]] | None:
        """`Repo.producers(line[k], files)`: every non-merge commit reaching line[k] that set a path
        to its blob, newest first; None when two of them share a date (git's order between them is
        the walk's)."""
        if self._writers is None:
            self._writers = self._all_writers()
            if self._writers is None:
                return None
        found: dict[str, list[str]] = {}
        for path, blob in files.items():
            if blob == ZERO:
                continue
            shas = [s for s in self._writers.get((path, blob), ()) if self.intro[s] <= k]
            dates = [self.date[s] for s in shas]
            if len(set(dates)) != len(dates):
                return None
            found[path] = sorted(shas, key=lambda s: -self.date[s])
        return found

    def _all_writers(self) -> dict[tuple[str, str], list[str]] | None:
        # The commits the root reaches are read only now: verify needs them only for bytes seen
        # before.
        older = [
            (p[0] if p else None, sha) for sha, p in self.parents.items() if self.intro[sha] == 0
        ]
        answers = self.repo.diffs(older)
        if answers is None:
            return None
        diffs = {
            **self.diffs,
            **{sha: changes for (_, sha), changes in zip(older, answers, strict=True)},
        }
        writers: dict[tuple[str, str], list[str]] = {}
        for sha, changes in diffs.items():
            if len(self.parents[sha]) <= 1:  # git log shows no diff of a merge
                for change in changes:
                    writers.setdefault((change.path, change.new_blob), []).append(sha)
        return writers


@dataclass
class Side:
    """The merge at line position `k`: its base and the side commits it brought (tip first)."""

    history: History
    k: int
    base: str
    commits: list[str]

    def side_commits(self) -> list[str]:
        """`rev-list --reverse first..second`."""
        return self.commits[::-1]

    def touching(self, path: str) -> list[str]:
        """`rev-list --full-history first..second -- :(literal)path`."""
        return [sha for sha in self.commits if self.history.touches(sha, path)]

    def touching_content(self) -> list[str]:
        """`rev-list --full-history first..second -- CONTENT_PATHSPEC`."""
        return [sha for sha in self.commits if self.history.content(sha)]

    def entry(self, sha: str, path: str) -> Entry:
        """An entry of the base, the side's tip or a side commit."""
        return self.history.entry(sha, path)

    def producers(self, files: Mapping[str, str]) -> dict[str, list[str]] | None:
        """`Repo.producers(merge, files)`, or None: ask git."""
        return self.history.writers(self.k, files)

    def job_paths(self, tree: str, stems: set[str]) -> tuple[str, ...]:
        """The job paths of the merge's tree (`tree` is the merge) with one of `stems`, in path
        order."""
        assert tree == self.history.line[self.k]
        return self.history.job_paths(self.k, stems)

    def symlinks(self, tree: str) -> tuple[tuple[str, str], ...]:
        """(path, blob) of every symlink in the merge's tree (`tree` is the merge), in path
        order."""
        assert tree == self.history.line[self.k]
        return self.history.symlinks(self.k)


def _content(name: bytes) -> bool:
    """Whether CONTENT_PATHSPEC matches the file `name` (no glob characters in it), as git matches
    it:
    everything but `policy` and what is under it (a literal prefix), and the paths the two
    `:(exclude,glob)` patterns match (wildmatch with WM_PATHNAME: `jobs/`, any folders, then a last
    component ending in `.yaml` or `.yml`)."""
    if name == b"policy" or name.startswith(b"policy/"):
        return False
    return not (name.startswith(b"jobs/") and name.endswith((b".yaml", b".yml")))


def _introductions(line: Sequence[str], parents: Mapping[str, tuple[str, ...]]) -> dict[str, int]:
    """For every commit, the position of the first commit of `line` that reaches it (0: the root
    does)."""
    intro: dict[str, int] = {}
    for k, sha in enumerate(line):
        stack = [sha]
        while stack:
            current = stack.pop()
            if current in intro:
                continue
            intro[current] = k
            stack.extend(p for p in parents.get(current, ()) if p not in intro)
    return intro
