"""A merge's side read from git: what the facts of a merge need of the commits it brings.

`Reads` is the questions (`history.Side` answers them from the whole history read
once, for `verify`); `GitSide` asks them of git, a process (or a tree listing) each,
the trees read through the `Assessor`'s cache of them (`TreeReader`).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from mergegate.facts.history import CONTENT_PATHSPEC, SYMLINK
from mergegate.git.repo import Repo
from mergegate.git.values import literal, path_bytes
from mergegate.rules.job import is_job_path, job_stem
from mergegate.rules.model import ABSENT, Entry


class Reads(Protocol):
    """What the facts of a merge of `second` into `first` need from git (history.Side answers the
    same)."""

    @property
    def base(self) -> str | None: ...

    def side_commits(self) -> list[str]: ...
    def touching(self, path: str) -> list[str]: ...
    def touching_content(self) -> list[str]: ...
    def entry(self, sha: str, path: str) -> Entry: ...
    def job_paths(self, tree: str, stems: set[str]) -> tuple[str, ...]: ...
    def symlinks(self, tree: str) -> tuple[tuple[str, str], ...]: ...


class TreeReader(Protocol):
    """What `GitSide` asks of the `Assessor`: its repository, and its cache of listed trees."""

    @property
    def repo(self) -> Repo: ...

    def tree(self, commit: str) -> dict[str, Entry]: ...


class GitSide:
    """The questions of `Reads` asked of git, a process (or a tree listing) each."""

    def __init__(self, assessor: TreeReader, first: str, second: str) -> None:
        self.assessor, self.repo, self.first, self.second = assessor, assessor.repo, first, second
        self.base = self.repo.merge_base(first, second)
        self._touched: list[tuple[str, frozenset[bytes]]] | bool | None = False  # not read yet
        self._listed: list[list[str]] | None = None

    def _side(self) -> list[list[str]]:
        """`rev-list --parents first..second`: each commit of the side with its parents, newest
        first."""
        if self._listed is None:
            self._listed = [
                line.split()
                for line in self.repo.out(
                    "rev-list", "--parents", f"{self.first}..{self.second}"
                ).splitlines()
            ]
        return self._listed

    def side_commits(self) -> list[str]:
        # `rev-list --reverse first..second` (Repo.side_commits): the same walk in the same order
        # (--parents only prints, without a pathspec), so the listing the touched paths need answers
        # it too, a git process less per merge.
        return [item[0] for item in reversed(self._side())]

    def touching(self, path: str) -> list[str]:
        side = self._touched_side()
        if side is None:
            return self.repo.commits_touching(self.first, self.second, literal(path))
        wanted = path_bytes(path)
        return [sha for sha, names in side if wanted in names]

    def _touched_side(self) -> list[tuple[str, frozenset[bytes]]] | None:
        """The merged side as (commit, every path it changes and each folder above one), in
        rev-list's order; None if git's diffs could not be read (git then answers each path, as
        before).

        The writers of `path` on the side: a root that holds it; a commit that differs on it from
        one of its parents on the side, or, with no parent on the side, from one of its parents.
        That is `rev-list --full-history first..second -- :(literal)path` but at its edges
        (redteam8b): git also counts the bottom `first` as a relevant parent, so it lists a merge of
        main into the side that differs on the path only from main (it wrote none of those bytes),
        and with some dates leaves out an octopus merge that did change it; here every commit that
        put bytes of the path on the side is a writer, which is what the self-approval rule asks,
        for the runner and `verify` alike. Computed from full diffs (`diff-tree` against each such
        parent): one `rev-list` and one `diff-tree --stdin` for every job file of the merge, not a
        `rev-list` each (a merge adding 100 jobs asked git 100 times). Full diffs also see what
        git's path-limited walk misses in a tree not in git's order (an entry after one that sorts
        later ends that
        walk):
        such a tree cannot hide who wrote a job (an author approving her own job)."""
        if self._touched is False:
            self._touched = None
            listed = self._side()
            on_side = {item[0] for item in listed}
            pairs: list[tuple[str | None, str]] = []
            for sha, *parents in listed:
                relevant = [p for p in parents if p in on_side] or parents
                pairs += [(p, sha) for p in relevant] if relevant else [(None, sha)]
            diffs = self.repo.diffs(pairs)
            if diffs is not None:
                names: dict[str, set[bytes]] = {item[0]: set() for item in listed}
                for (_, sha), changes in zip(pairs, diffs, strict=True):
                    names[sha] |= _with_folders(c.path for c in changes)
                self._touched = [(sha, frozenset(found)) for sha, found in names.items()]
        return self._touched if isinstance(self._touched, list) else None

    def touching_content(self) -> list[str]:
        return self.repo.commits_touching(self.first, self.second, *CONTENT_PATHSPEC)

    def entry(self, sha: str, path: str) -> Entry:
        return self.assessor.tree(sha).get(path, ABSENT)

    def job_paths(self, tree: str, stems: set[str]) -> tuple[str, ...]:
        return tuple(
            sorted(
                (p for p in self.assessor.tree(tree) if is_job_path(p) and job_stem(p) in stems),
                key=path_bytes,
            )
        )

    def symlinks(self, tree: str) -> tuple[tuple[str, str], ...]:
        links = [(p, e.blob) for p, e in self.assessor.tree(tree).items() if e.mode == SYMLINK]
        return tuple(sorted(links, key=lambda item: path_bytes(item[0])))


def _with_folders(paths: Iterable[str]) -> set[bytes]:
    """Each path and every folder above it (`a/b/c`: `a/b/c`, `a/b`, `a`)."""
    found: set[bytes] = set()
    for path in paths:
        raw = path_bytes(path)
        found.add(raw)
        while b"/" in raw:
            raw = raw.rpartition(b"/")[0]
            found.add(raw)
    return found
