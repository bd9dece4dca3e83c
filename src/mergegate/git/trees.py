"""Reading trees: recursive and flat listings, the object a path names, a file at a commit.

Trees are walked through the object process where the answer is sure to be what `ls-tree` or
`rev-parse <commit>:<path>` would say; git is asked everywhere else.
"""

from __future__ import annotations

import re
from pathlib import Path

from mergegate.errors import GitError
from mergegate.git.objects import _COMMIT_CACHE, Objects
from mergegate.git.values import _ASK_GIT, _FULL_ID, path_arg, path_bytes, path_text

_FLAT_CACHE = 64  # directory listings (an audit/ listing may name thousands of files)
_ABSENT = object()  # _subtree: no such folder
_MODES = (b"40000", b"100644", b"100755", b"120000", b"160000")  # the modes git writes
_PLAIN_PREFIX = re.compile(r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]*/)+")  # folders ls_tree walks to itself


class Trees(Objects):
    """Tree listings of commits and trees, cached by id (a tree never changes)."""

    def __init__(self, path: Path, git_dir: Path, common_dir: Path) -> None:
        super().__init__(path, git_dir, common_dir)
        self._trees: dict[
            str, dict[bytes, tuple[bytes, str]] | None
        ] = {}  # file_blob's tree listings
        self._flat: dict[
            tuple[str, str], tuple[tuple[str, str, str], ...]
        ] = {}  # ls_tree_flat's, of full ids

    def ls_tree(self, commit: str, prefix: str = "") -> list[tuple[str, str, str]]:
        """(mode, blob, path) of every file under `prefix` at `commit`."""
        listed = self._ls_tree_objects(commit, prefix)
        if listed is not None:
            return listed
        args = ["ls-tree", "-r", "-z", "--full-tree", commit]
        if prefix:
            args += ["--", prefix]
        return ls_tree_entries(self.run(*args).stdout)

    def _ls_tree_objects(self, commit: str, prefix: str) -> list[tuple[str, str, str]] | None:
        """What `ls-tree -r` lists, read through the object process (a runner pass listed a tree or
        two, a process each); None where git must say: not a full SHA-1 id of a commit or a tree, a
        prefix that is not plain folders, a file on the way, a tree not in git's own order. Held to
        ls-tree in tests/git/test_rev_equiv.py."""
        try:
            found = self._subtree(commit, prefix)
            if not isinstance(found, tuple):
                return [] if found is _ABSENT else None
            base, tree = found
            top = self._tree_listing(tree)
            if top is None:
                return None
            entries: list[tuple[str, str, str]] = []
            stack = [(base, iter(top.items()))]
            while stack:  # depth first, each tree in its own order: ls-tree -r's order
                base, items = stack[-1]
                for name, (mode, sha) in items:
                    if mode == b"40000":
                        below = self._tree_listing(sha)
                        if below is None:
                            return None
                        stack.append((base + name + b"/", iter(below.items())))
                        break
                    entries.append((mode.decode(), sha, path_text(base + name)))
                else:
                    stack.pop()
            return entries
        except GitError:
            return None

    def _subtree(self, commit: str, prefix: str) -> tuple[bytes, str] | object | None:
        """(prefix as bytes, its tree) at commit-or-tree `commit`, read through the object process;
        _ABSENT if no such folder; None where git must say (see _ls_tree_objects)."""
        if not re.fullmatch(r"[0-9a-f]{40}", commit) or (
            prefix and not _PLAIN_PREFIX.fullmatch(prefix)
        ):
            return None
        kind = self._objects.kind(commit) if commit not in self._commits else "commit"
        tree = self.commit(commit).tree if kind == "commit" else commit if kind == "tree" else ""
        if not re.fullmatch(r"[0-9a-f]{40}", tree):
            return None
        base = b""
        for part in path_bytes(prefix).split(b"/")[:-1]:
            listing = self._tree_listing(tree)
            if listing is None:
                return None
            if part not in listing:
                return _ABSENT
            mode, tree = listing[part]
            if mode != b"40000":
                return None
            base += part + b"/"
        return base, tree

    def _ls_flat_objects(self, commit: str, directory: str) -> list[tuple[str, str, str]] | None:
        """What `ls-tree <commit>:<directory>` lists, read through the object process (a look at the
        audit branch listed two or three trees, a process each); None where git must say."""
        try:
            found = self._subtree(commit, directory)
            if not isinstance(found, tuple):
                return [] if found is _ABSENT else None
            listing = self._tree_listing(found[1])
        except GitError:
            return None
        if listing is None:
            return None
        # ls-tree prints a mode in six digits: a tree's 40000 as 040000.
        return [
            ("040000" if mode == b"40000" else mode.decode(), sha, path_text(name))
            for name, (mode, sha) in listing.items()
        ]

    def ls_tree_flat(self, commit: str, directory: str = "") -> list[tuple[str, str, str]]:
        """(mode, object, name) of the entries directly in `directory` (e.g. "audit/") at `commit`;
        [] if absent."""
        key = (commit, directory)
        if key in self._flat:
            return list(self._flat[key])
        listed = self._ls_flat_objects(commit, directory)
        if listed is not None:
            return listed
        proc = self.run(
            "ls-tree", "-z", f"{commit}:{directory}" if directory else commit, check=False
        )
        entries = ls_tree_entries(proc.stdout) if proc.returncode == 0 else []
        if proc.returncode == 0 and _FULL_ID.fullmatch(commit):
            # A commit's tree never changes: a look at the audit branch read the same one up to
            # three times.
            if len(self._flat) >= _FLAT_CACHE:
                del self._flat[next(iter(self._flat))]
            self._flat[key] = tuple(entries)
        return entries

    def tree_blobs(self, commit: str) -> dict[str, str]:
        """path -> blob of every file at `commit`."""
        return {path: blob for _, blob, path in self.ls_tree(commit)}

    def tree_entries(self, sha: str) -> dict[str, tuple[str, str]]:
        """`name -> (mode, id)` of one tree, read through the batch process."""
        data = self._object(sha, "tree")
        entries, i = {}, 0
        while i < len(data):
            space = data.index(b" ", i)
            nul = data.index(b"\0", space)
            mode = data[i:space].decode().rjust(6, "0")
            entries[path_text(data[space + 1 : nul])] = (mode, data[nul + 1 : nul + 21].hex())
            i = nul + 21
        return entries

    def file_blob(self, commit: str, path: str) -> str | None:
        """The object `path` names at `commit` (what `rev-parse <commit>:<path>` says), or None if
        absent.

        Read through the object process (a planning pass asks this of every job: a
        process each cost more than the rest of its planning); git answers where the
        walk could differ from its own: a commit not named by its full id, a path with an
        empty, `.` or `..` part, or a tree on the way that is not in git's own order."""
        found = self._tree_entry(commit, path)
        if found is None or isinstance(found, str):
            return found
        proc = self.run(
            "rev-parse", "--verify", "--quiet", f"{commit}:{path_arg(path)}", check=False
        )
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    def _tree_entry(self, commit: str, path: str) -> str | object | None:
        if not re.fullmatch(r"[0-9a-f]{40}", commit) or "\n" in path:
            return _ASK_GIT
        parts = path_bytes(path).split(b"/")
        if any(part in (b"", b".", b"..") for part in parts):
            return _ASK_GIT
        try:
            if commit not in self._commits and self._objects.kind(commit) != "commit":
                return _ASK_GIT
            sha = self.commit(commit).tree
            if not re.fullmatch(r"[0-9a-f]{40}", sha):
                # not a SHA-1 repository (the 40 digits were an abbreviation), or a bad tree line
                return _ASK_GIT
            return self._walk_tree(sha, parts)
        except GitError:
            return (
                _ASK_GIT  # an object missing or not what its entry says: git says what that means
            )

    def _walk_tree(self, sha: str, parts: list[bytes]) -> str | object | None:
        for k, part in enumerate(parts):
            entries = self._tree_listing(sha)
            if entries is None:
                return _ASK_GIT
            entry = entries.get(part)
            if entry is None:
                return None
            mode, sha = entry
            if k + 1 < len(parts) and mode != b"40000":
                return None  # a file where the path goes on: git finds nothing there either
        return sha

    def _tree_listing(self, tree: str) -> dict[bytes, tuple[bytes, str]] | None:
        """name -> (mode, object) of tree `tree`; None unless its entries are in git's order, each
        name once."""
        found = self._trees.get(tree)
        if found is not None or tree in self._trees:
            return found
        raw = self._object(tree, "tree")
        entries: dict[bytes, tuple[bytes, str]] = {}
        at, last = 0, b""
        ordered = True
        while at < len(raw) and ordered:
            space, nul = raw.find(b" ", at), raw.find(b"\0", at)
            if not 0 <= space < nul or nul + 21 > len(raw):
                ordered = False  # not a tree git wrote: let git read it
                break
            mode, name = raw[at:space], raw[space + 1 : nul]
            key = name + b"/" if mode == b"40000" else name
            ordered = mode in _MODES and key > last and name not in entries and b"/" not in name
            last = key
            entries[name] = (mode, raw[nul + 1 : nul + 21].hex())
            at = nul + 21
        if len(self._trees) >= _COMMIT_CACHE:
            del self._trees[next(iter(self._trees))]
        self._trees[tree] = entries if ordered else None
        return self._trees[tree]

    def blob_size(self, commit: str, path: str) -> int | None:
        """The size of `path` at `commit` without reading it; None if absent."""
        blob = self.file_blob(commit, path)
        return None if blob is None else self.object_size(blob)

    def read_file(self, commit: str, path: str) -> bytes | None:
        blob = self.file_blob(commit, path)
        return None if blob is None else self.blob(blob)


def ls_tree_entries(output: bytes) -> list[tuple[str, str, str]]:
    """(mode, object, path) of each entry of `git ls-tree -z` output."""
    entries = []
    for item in output.split(b"\0"):
        if item:
            meta, path = item.split(b"\t", 1)
            mode, _, obj = meta.decode().split()
            entries.append((mode, obj, path_text(path)))
    return entries
