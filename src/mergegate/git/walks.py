"""Walking history: ancestry, commit ranges, and which commits wrote what.

`is_ancestor` keeps its yes answers (between two commit ids they never change), and
`chain` walks the few single-parent commits an audit branch grew by without a process.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path

from mergegate.errors import GitError
from mergegate.git.objects import Objects
from mergegate.git.values import _FULL_ID, ZERO, path_text

_BATCH = 256  # pathspecs per git call: a merge may bring more files than one command line holds
_ANCESTOR_PAIR = re.compile(r"(?:[0-9a-f]{40}|[0-9a-f]{64}) (?:[0-9a-f]{40}|[0-9a-f]{64})")


def _batches(items: list[str]) -> list[list[str]]:
    return [items[i : i + _BATCH] for i in range(0, len(items), _BATCH)] or [[]]


class Walks(Objects):
    """History walks: `rev-list`, `log` and `merge-base`, and the ancestry they proved."""

    def __init__(self, path: Path, git_dir: Path, common_dir: Path) -> None:
        super().__init__(path, git_dir, common_dir)
        self._ancestors: set[tuple[str, str]] = (
            set()
        )  # is_ancestor's yes answers between full commit ids

    def is_ancestor(self, ancestor: str, descendant: str, *, remember: bool = False) -> bool:
        """Whether `ancestor` is an ancestor of (or is) `descendant`.

        Between two commit ids the answer never changes: asked twice in a pass (the trust root
        against the tip, then against the last scanned commit, the same one when nothing is new),
        the second is not another walk through all of history. With `remember`, a yes is also kept
        in the clone (`<git dir>/mergegate/ancestors`, the latest 64), for the walks back to the
        trust root that every pass makes. (Only a yes is kept: a no may be a commit not fetched
        yet.)
        """
        key = (ancestor, descendant)
        full = bool(_FULL_ID.fullmatch(ancestor) and _FULL_ID.fullmatch(descendant))
        if key in self._ancestors or (
            remember and full and f"{ancestor} {descendant}" in self._remembered_ancestors()
        ):
            return True
        if full and ancestor == descendant and self._objects.kind(ancestor) == "commit":
            # (each look at the branches asks it of approved's unchanged tip: no merge-base for
            # that)
            return True
        answer = (
            self.run("merge-base", "--is-ancestor", ancestor, descendant, check=False).returncode
            == 0
        )
        if answer and full:
            self._ancestors.add(key)
            if remember:
                self._remember_ancestor(f"{ancestor} {descendant}")
        return answer

    def _remembered_ancestors(self) -> list[str]:
        try:
            return (self.git_dir / "mergegate" / "ancestors").read_text("ascii").split("\n")
        except (OSError, UnicodeDecodeError):
            return []

    def _remember_ancestor(self, pair: str) -> None:
        """Best effort (a cache): a clone that cannot write it walks again next time."""
        target = self.git_dir / "mergegate" / "ancestors"
        kept = [
            p for p in self._remembered_ancestors() if _ANCESTOR_PAIR.fullmatch(p) and p != pair
        ][-63:]
        scratch = target.with_name(f"ancestors.{os.getpid()}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            scratch.write_text("\n".join([*kept, pair]), "ascii")
            os.replace(scratch, target)
        except OSError:
            scratch.unlink(missing_ok=True)

    def root_commit(self, tip: str) -> str:
        roots = self.out("rev-list", "--first-parent", "--max-parents=0", tip).split()
        return roots[-1]

    def chain(self, old: str, new: str, *, limit: int = 256) -> list[str] | None:
        """The commits after `old` up to `new`, oldest first, when `new` reaches `old` through at
        most `limit` well-formed single-parent commits; None where git must say (a merge, a root, a
        malformed commit, grafts or a shallow clone, which rev-list honours and the object reader
        does not, or further back than `limit`).

        What `rev-list --reverse --topo-order old..new` lists, and the proof `merge-base
        --is-ancestor old new`
        gives, without their two processes: an audit branch only grows by single-parent commits, and
        every look at it after another runner's push walks the few it added (held to git in
        tests/git/test_batch_reads.py)."""
        if not (_FULL_ID.fullmatch(old) and _FULL_ID.fullmatch(new)):
            return None
        if (self.common_dir / "info" / "grafts").exists() or (self.common_dir / "shallow").exists():
            return None
        found: list[str] = []
        sha = new
        try:
            while sha != old:
                if len(found) >= limit:
                    return None
                commit = self.commit(sha)  # (a GitError where `sha` is no commit here)
                if commit.malformed or len(commit.parents) != 1:
                    return None
                found.append(sha)
                sha = commit.parents[0]
        except GitError:
            return None
        found.reverse()
        if not found and self._objects.kind(old) != "commit":
            return None  # (is_ancestor(x, x) holds only for a commit)
        self._ancestors.add((old, new))
        return found

    def first_parent_chain(self, start: str | None, tip: str) -> list[str]:
        """First-parent commits after `start` up to `tip`, oldest first."""
        spec = [tip] if start is None else [f"{start}..{tip}"]
        return self.out("rev-list", "--first-parent", "--reverse", *spec).split()

    def side_commits(self, base: str, tip: str) -> list[str]:
        """Commits reachable from `tip` but not from `base` (a merged branch), oldest first."""
        return self.out("rev-list", "--reverse", f"{base}..{tip}").split()

    def commits_touching(self, base: str, tip: str, *pathspecs: str) -> list[str]:
        found: dict[str, None] = {}
        for batch in _batches(list(pathspecs)):
            found.update(
                dict.fromkeys(
                    self.out("rev-list", "--full-history", f"{base}..{tip}", "--", *batch).split()
                )
            )
        return list(found)

    def producers(self, tip: str, files: Mapping[str, str]) -> dict[str, list[str]]:
        """For each path, every non-merge commit up to `tip` that set it to exactly its blob in
        `files`."""
        wanted = {(path, blob) for path, blob in files.items() if blob != ZERO}
        found: dict[str, list[str]] = {path: [] for path, _ in wanted}
        if not wanted:
            return found
        # Every commit's whole diff, not a walk limited to the paths: git's path-limited tree walk
        # stops at the first entry that sorts after the path, so a tree not in git's order (written
        # with `hash-object --literally`; a plain bare remote takes it) hid its writer from that
        # walk. For the trees git writes, the non-merge commits that set a path to a blob are the
        # same.
        proc = self.run(
            "log",
            "--full-history",
            "--no-renames",
            "--raw",
            "--no-abbrev",
            "-z",
            "--format=%x00C%H",
            tip,
        )
        fields = proc.stdout.split(b"\0")
        commit = ""
        i = 0
        while i < len(fields):
            item = fields[i].strip(b"\n")
            if item.startswith(b"C") and len(item) == 41:
                commit = item[1:].decode()
            elif item.startswith(b":") and i + 1 < len(fields):
                blob = item.decode().split()[3]
                path = path_text(fields[i + 1])
                if (path, blob) in wanted:
                    found[path].append(commit)
                i += 1
            i += 1
        return found

    def first_parent_adding(self, tip: str, path: str) -> str | None:
        """The oldest first-parent commit up to `tip` that added `path`."""
        shas = self.out(
            "log", "--first-parent", "--reverse", "--diff-filter=A", "--format=%H", tip, "--", path
        ).split()
        return shas[0] if shas else None

    def merge_base(self, a: str, b: str) -> str | None:
        proc = self.run("merge-base", a, b, check=False)
        return proc.stdout.decode().strip() or None

    def graph(self, tip: str) -> list[tuple[str, int, tuple[str, ...], str]]:
        """(commit, committer date as git's walks order by it, parents and tree as git reads them)
        of every commit reachable from `tip`, in one `rev-list`."""
        found = []
        lines = self.out("rev-list", "--timestamp", "--parents", "--format=%T", tip).splitlines()
        for header, tree in zip(lines[::2], lines[1::2], strict=True):
            date, _, sha, *parents = header.split()
            found.append((sha, int(date), tuple(parents), tree))
        return found
