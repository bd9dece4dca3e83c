"""Writing objects: commits and trees, built with plumbing and a private index or in-process.

The runner's audit commits are written in-process (`write_object`: no git process per
record); nothing here touches a working tree, an index or a checked-out branch. A commit
no push landed has its loose objects removed (`discard`).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Mapping
from pathlib import Path

from mergegate.errors import GitError, cannot_write
from mergegate.git.processes import GitProcesses
from mergegate.git.values import Signing

# (hashlib, tempfile and zlib are imported where objects are written: an idle `run --once`
# asks `ls-remote` through the wing and needs none of them, nor the modules they import.)


class Writes(GitProcesses):
    """New commits, trees and loose objects; and the removal of a refused commit's objects."""

    def write_commit(
        self,
        *,
        parent: str | None,
        files: Mapping[str, bytes],
        message: str,
        author: tuple[str, str] | None,
        signing: Signing | None,
        sign: bool = False,
    ) -> str:
        """A commit on `parent` (a root commit if None) that sets `files`, built with a private
        index (author None: the person's own)."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="mergegate-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            self.run("read-tree", *([parent] if parent else ["--empty"]), env=env)
            lines = []
            for path, data in sorted(files.items()):
                blob = self.run("hash-object", "-w", "--stdin", input=data).stdout.decode().strip()
                lines.append(f"100644 {blob}\t{path}\n")
            self.run("update-index", "--index-info", input="".join(lines).encode(), env=env)
            tree = self.run("write-tree", env=env).stdout.decode().strip()
        return self.commit_tree(
            tree=tree,
            parents=(parent,) if parent else (),
            message=message,
            author=author,
            signing=signing,
            sign=sign,
        )

    def commit_tree(
        self,
        *,
        tree: str,
        parents: tuple[str, ...],
        message: str,
        author: tuple[str, str] | None,
        signing: Signing | None = None,
        sign: bool = False,
    ) -> str:
        """A commit object; `author` None and `sign` use the person's own git identity and key."""
        ident = (
            {}
            if author is None
            else {
                "GIT_AUTHOR_NAME": author[0],
                "GIT_AUTHOR_EMAIL": author[1],
                "GIT_COMMITTER_NAME": author[0],
                "GIT_COMMITTER_EMAIL": author[1],
            }
        )
        args = [*(signing.args() if signing else []), "commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        if signing is not None or sign:
            args.append("-S")
        return self.run(*args, input=message.encode(), env=ident).stdout.decode().strip()

    def write_object(self, kind: str, data: bytes) -> str:
        """Store a loose object, as `git hash-object -w` would, without a process: its id.

        The object is zlib-compressed `<kind> <size>\\0<data>` at objects/xx/yyyy..., written
        to a temporary file in that directory and renamed into place (so a reader never
        sees half of it); an object that exists already is left as it is.
        """
        import hashlib
        import tempfile
        import zlib

        body = f"{kind} {len(data)}".encode() + b"\0" + data
        sha = hashlib.sha1(body, usedforsecurity=False).hexdigest()
        folder = self.common_dir / "objects" / sha[:2]
        target = folder / sha[2:]
        if target.exists():
            return sha
        temporary = ""
        try:
            folder.mkdir(exist_ok=True)
            fd, temporary = tempfile.mkstemp(dir=folder, prefix="tmp_obj_")
            with os.fdopen(fd, "wb") as f:
                f.write(zlib.compress(body, 1))
            os.chmod(temporary, 0o444)
            os.replace(temporary, target)
        except BaseException as exc:
            if temporary:
                with contextlib.suppress(OSError):
                    os.unlink(temporary)
            if isinstance(exc, OSError):
                # A full disk, a quota or a file size limit (or permissions): one line naming the
                # object's file, never "unexpected OSError" (issue 22, item 9).
                raise cannot_write(f"a git {kind} object", target, exc) from None
            raise
        return sha

    def write_tree(self, entries: Mapping[str, tuple[str, str]]) -> str:
        """A tree of `name -> (mode, id)` (modes as ls-tree prints them: 100644, 040000)."""

        def key(item: tuple[str, tuple[str, str]]) -> bytes:
            name, (mode, _) = item
            return name.encode() + (b"/" if mode == "040000" else b"")

        data = b"".join(
            f"{mode.lstrip('0')} {name}".encode() + b"\0" + bytes.fromhex(sha)
            for name, (mode, sha) in sorted(entries.items(), key=key)
        )
        return self.write_object("tree", data)

    def write_commit_object(
        self,
        *,
        tree: str,
        parent: str | None,
        message: str,
        author: tuple[str, str],
        signing: Signing | None,
    ) -> str:
        """A commit of `tree` on `parent` by `author` (as committer too); signed through git when
        `signing`."""
        if signing is not None:
            return self.commit_tree(
                tree=tree,
                parents=(parent,) if parent else (),
                message=message,
                author=author,
                signing=signing,
            )
        stamp = f"{author[0]} <{author[1]}> {int(time.time())} +0000"
        header = (
            f"tree {tree}\n"
            + (f"parent {parent}\n" if parent else "")
            + f"author {stamp}\ncommitter {stamp}\n\n"
        )
        return self.write_object("commit", (header + message).encode())

    def merge_tree(self, ours: str, theirs: str) -> str:
        proc = self.run("merge-tree", "--write-tree", "--no-messages", ours, theirs, check=False)
        if proc.returncode != 0:
            raise GitError(
                f"merging {theirs[:7]} into {ours[:7]} has conflicts",
                hint="rebase the proposal on approved first",
            )
        return proc.stdout.decode().split()[0]

    def discard(self, sha: str) -> int:
        """Delete the loose objects that only `sha` (a commit no push landed) holds: those reachable
        from it and from no ref, reflog or index (move or delete the refs to it first).

        A refused push must not leave a full copy of the log file behind each time. Objects
        anything else can reach (its parent's, an equal evidence file) are kept, and so is
        everything once `sha` is reachable from any other ref (the push landed after all
        and was fetched). Packed objects are left to `git gc`. Returns how many were removed.
        """
        proc = self.run(
            "rev-list",
            "--objects",
            sha,
            "--not",
            "--all",
            "--reflog",
            "--indexed-objects",
            check=False,
        )
        if proc.returncode != 0:
            return 0
        objects = self.common_dir / "objects"
        removed = 0
        for line in proc.stdout.decode().splitlines():
            name = line.split(" ", 1)[0]
            if len(name) == 40:
                try:
                    (objects / name[:2] / name[2:]).unlink()
                    removed += 1
                except OSError:
                    continue
        return removed
