"""What changed between commits: diffs, read ahead for a walk or compared tree by tree.

`prefetch` (and `remember`, for what history.History read itself) answer `diff` and
`git_parents` from memory; `diff` without pathspecs compares the trees through the object
process where that is sure to say what `diff-tree` says.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from mergegate.errors import GitError
from mergegate.git.trees import Trees
from mergegate.git.values import ZERO, Change, literal, path_text

_DIFF_DEPTH = 64  # folders deeper than this are diff-tree's to compare
_REGULAR = (b"100644", b"100755")  # one type, two modes: a change between them is an M, not a T


class Diffs(Trees):
    """Diffs between commits or trees, and the parents of a walk read ahead with them."""

    def __init__(self, path: Path, git_dir: Path, common_dir: Path) -> None:
        super().__init__(path, git_dir, common_dir)
        self._diffs: dict[tuple[str, str], list[Change]] = {}  # read ahead by prefetch
        self._parents: dict[str, tuple[str, ...]] = {}

    def git_parents(self, sha: str) -> tuple[str, ...]:
        """The parents as git itself reads them (to cross-check the parser on commits that
        approve)."""
        known = self._parents.get(sha)
        if known is not None:
            return known
        return tuple(self.out("rev-list", "--no-walk", "--parents", "-n", "1", sha).split()[1:])

    def prefetch(self, chain: Sequence[str]) -> None:
        """Read ahead, for a walk over `chain` (first-parent commits, oldest first), what it asks
        of each commit: its diff from its first parent and its parents as git reads them.

        Two processes for the whole chain instead of two per commit; `diff` and `git_parents` then
        answer from memory exactly what they would have run git for.
        """
        self._diffs.clear()
        self._parents.clear()
        if not chain:
            return
        lines = "".join(f"{sha}\n" for sha in chain).encode()
        listed = self.run(
            "rev-list", "--no-walk=unsorted", "--parents", "--stdin", input=lines
        ).stdout.decode()
        for line in listed.splitlines():
            sha, *parents = line.split()
            self._parents[sha] = tuple(parents)
        pairs = [(self._parents[sha][0], sha) for sha in chain if self._parents.get(sha)]
        answers = self.diffs(pairs)
        if answers is None:  # not what was asked: answer nothing from memory
            return
        for pair, changes in zip(pairs, answers, strict=True):
            self._diffs[pair] = changes

    def remember(
        self, parents: Mapping[str, tuple[str, ...]], diffs: Mapping[tuple[str, str], list[Change]]
    ) -> None:
        """What `prefetch` reads, read by the caller (history.History): `git_parents` and `diff`
        answer from it."""
        self._parents.update(parents)
        self._diffs.update(diffs)

    def diffs(
        self, pairs: Sequence[tuple[str | None, str]], *pathspecs: str
    ) -> list[list[Change]] | None:
        """`diff(parent, sha, *pathspecs)` for every (parent, sha) pair (parent None: a root,
        against the empty tree), in one `diff-tree --stdin`; None if git answered something else
        than asked."""
        if not pairs:
            return []
        # --always: an empty diff still prints its commit line, so every answer is told apart.
        fed = "".join(
            f"{sha} {parent}\n" if parent else f"{sha}\n" for parent, sha in pairs
        ).encode()
        args = ["diff-tree", "--stdin", "--always", "--root", "-r", "-z", "--no-renames"]
        fields = self.run(
            *args, *(["--", *pathspecs] if pathspecs else []), input=fed
        ).stdout.split(b"\0")
        answers: list[list[Change]] = []
        i = 0
        while i < len(fields) - 1:
            if fields[i].startswith(b":"):
                meta = fields[i].decode().lstrip(":").split()
                answers[-1].append(
                    Change(meta[4][0], path_text(fields[i + 1]), meta[2], meta[3], meta[0], meta[1])
                )
                i += 2
            else:
                answers.append([])
                i += 1
        return answers if len(answers) == len(pairs) else None

    def diff(self, parent: str | None, sha: str, *pathspecs: str) -> list[Change]:
        if not pathspecs and parent is not None and (parent, sha) in self._diffs:
            return list(self._diffs[(parent, sha)])
        if not pathspecs:
            compared = self._tree_diff(parent, sha)
            if compared is not None:
                return compared
        args = ["diff-tree", "-r", "-z", "--no-renames", "--no-commit-id"]
        args += ["--root", sha] if parent is None else [parent, sha]
        args += ["--", *pathspecs] if pathspecs else []
        fields = self.run(*args).stdout.split(b"\0")
        changes = []
        for i in range(0, len(fields) - 1, 2):
            meta = fields[i].decode().lstrip(":").split()
            changes.append(
                Change(meta[4][0], path_text(fields[i + 1]), meta[2], meta[3], meta[0], meta[1])
            )
        return changes

    def _tree_diff(self, parent: str | None, sha: str) -> list[Change] | None:
        """What `diff-tree -r --no-renames` says between two commits or trees (or `--root`), read
        through the
        object process (a pass diffed a commit or three, a process each); None where git must say:
        not full SHA-1 ids of commits or trees, a tree not in git's own order, deeper than
        _DIFF_DEPTH, or a gitlink that changed (git may ignore it, as a submodule's config says).
        Held to diff-tree in tests/git/test_batch_reads.py."""
        try:
            old = self._root_tree(parent) if parent is not None else ""
            new = self._root_tree(sha)
            if old is None or new is None:
                return None
            if parent is None and (
                new == sha
                or self.commit(sha).parents
                or (self.common_dir / "info" / "grafts").exists()
            ):
                # --root compares a commit with its parents (none for a root commit; grafts may add
                # some)
                return None
            changes: list[Change] = []
            return changes if self._diff_trees(old, new, b"", changes, 0) else None
        except GitError:
            return None

    def _root_tree(self, sha: str) -> str | None:
        if not re.fullmatch(r"[0-9a-f]{40}", sha):
            return None
        kind = self._objects.kind(sha) if sha not in self._commits else "commit"
        tree = self.commit(sha).tree if kind == "commit" else sha if kind == "tree" else ""
        return tree if re.fullmatch(r"[0-9a-f]{40}", tree) else None

    def _diff_trees(
        self, old: str, new: str, base: bytes, changes: list[Change], depth: int
    ) -> bool:
        """Append to `changes` what differs between trees `old` and `new` ("" for none) under
        `base`, in diff-tree's order (both trees' entries merged in tree order: a folder sorts as
        its name and "/", so a file and a folder of one name are two entries); False where git must
        say."""
        if old == new or depth > _DIFF_DEPTH:
            return old == new
        before = self._tree_listing(old) if old else {}
        after = self._tree_listing(new) if new else {}
        if before is None or after is None:
            return False
        olds = {(n + b"/" if m == b"40000" else n): (n, m, s) for n, (m, s) in before.items()}
        news = {(n + b"/" if m == b"40000" else n): (n, m, s) for n, (m, s) in after.items()}
        for k in sorted(olds.keys() | news.keys()):
            a, b = olds.get(k), news.get(k)
            name = a[0] if a is not None else b[0]  # type: ignore[index]
            if k.endswith(b"/"):
                if not self._diff_trees(
                    a[2] if a else "", b[2] if b else "", base + name + b"/", changes, depth + 1
                ):
                    return False
                continue
            if a is not None and b is not None and a[1:] == b[1:]:
                continue
            if b"160000" in (a[1] if a else b"", b[1] if b else b""):
                return (
                    False  # a gitlink: whether git reports it can depend on the submodule's config
                )
            path = path_text(base + name)
            if a is None:
                changes.append(Change("A", path, ZERO, b[2], "000000", b[1].decode()))  # type: ignore[index]
            elif b is None:
                changes.append(Change("D", path, a[2], ZERO, a[1].decode(), "000000"))
            else:
                kind = (
                    "M"
                    if (a[1] in _REGULAR) == (b[1] in _REGULAR)
                    and (a[1] in _REGULAR or a[1] == b[1])
                    else "T"
                )
                changes.append(Change(kind, path, a[2], b[2], a[1].decode(), b[1].decode()))
        return True

    def patch(self, old: str, new: str, path: str) -> str:
        """The diff of one path between two commits, as text (for a reader, never parsed)."""
        proc = self.run(
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            old,
            new,
            "--",
            literal(path),
            check=False,
        )
        return proc.stdout.decode("utf-8", "replace")
