"""Refs: reading them (from their files where that is exact), moving them, and the remote's.

`fetch`, `push` and `ls-remote` are the wing's only network calls; a push that lost a
race says so (False) rather than raising.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Sequence
from pathlib import Path

from mergegate.errors import GitError
from mergegate.git.objects import Objects
from mergegate.git.processes import _LOCKED, QUIET_WRITES, failure
from mergegate.git.values import _ASK_GIT, _FULL_ID, _HEX, ZERO

# How receive-pack says another push updated (or created) the ref first.
_IN_THE_WAY = re.compile(r"'(refs/[^']+)' exists; cannot create")
_LOST_RACE = re.compile(
    r"failed to update ref|cannot lock ref|reference already exists|but expected|is at [0-9a-f]+ "
    r"but"
)
_PACKED_REFS_BYTES = 65536  # a bigger packed-refs (thousands of tags) is for-each-ref's to search
_HEX_LINE = re.compile(rb"(?:[0-9a-f]{40}|[0-9a-f]{64})\n")
# Ref names _ref_from_files reads from the files: parts of these characters, none starting with a
# dot.
_PLAIN_REF = re.compile(
    r"refs/(?:[A-Za-z0-9_+=@-][A-Za-z0-9_.+=@-]*/)*[A-Za-z0-9_+=@-][A-Za-z0-9_.+=@-]*"
)


class Refs(Objects):
    """Local refs, remote branches, fetch and push."""

    def __init__(self, path: Path, git_dir: Path, common_dir: Path) -> None:
        super().__init__(path, git_dir, common_dir)
        self._plain_refs: bool | None = (
            None  # whether _ref_from_files may read refs from their files
        )

    def rev(self, ref: str) -> str | None:
        """The commit `ref` names. A full ref name (`refs/...`) is looked up exactly.

        `rev-parse refs/heads/x` is not exact: when that branch is absent, git's DWIM rules try
        `refs/tags/refs/heads/x` next, a tag anyone can push. So a full name is first resolved with
        for-each-ref, which matches names only.
        """
        if ref.startswith("refs/"):
            found = self._ref_from_files(ref)
            if found is None:
                return None
            if isinstance(found, str):
                # what for-each-ref would have said; its type is the batch process's to say
                ref = found
            else:
                listed = self.run(
                    "for-each-ref",
                    "--format=%(refname)%00%(objectname)%00%(objecttype)",
                    "--",
                    ref,
                    check=False,
                )
                exact = [
                    line.split("\0")[1:]
                    for line in listed.stdout.decode("utf-8", "replace").splitlines()
                    if line.split("\0", 1)[0] == ref
                ]
                if not exact:
                    return None
                ref, kind = exact[0][0], exact[0][1] if len(exact[0]) > 1 else ""
                if kind == "commit":
                    # a branch names a commit: nothing to peel (a rev-parse a ref read, on every
                    # push)
                    return ref
        if _FULL_ID.fullmatch(ref) and self._objects.kind(ref) == "commit":
            return (
                ref  # the batch process answers: no rev-parse for an id this clone has as a commit
            )
        proc = self.run(
            "rev-parse", "--verify", "--quiet", "--end-of-options", ref + "^{commit}", check=False
        )
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    def revs(self, refs: Sequence[str]) -> dict[str, str | None]:
        """`rev(ref)` of each full ref name in `refs`, read with one for-each-ref (a pass reads four
        at its start). Exact names only, as `rev`; a ref naming anything but a commit is peeled by
        `rev`."""
        assert all(ref.startswith("refs/") for ref in refs)
        if all(self._ref_from_files(ref) is not _ASK_GIT for ref in refs):
            return {
                ref: self.rev(ref) for ref in refs
            }  # each read from its files: no process at all
        listed = self.run(
            "for-each-ref",
            "--format=%(refname)%00%(objectname)%00%(objecttype)",
            "--",
            *refs,
            check=False,
        )
        found: dict[str, list[str]] = {}
        for line in listed.stdout.decode("utf-8", "replace").splitlines():
            name, _, rest = line.partition("\0")
            if name in refs and name not in found:
                found[name] = rest.split("\0")
        answers: dict[str, str | None] = {}
        for ref in refs:
            if ref not in found:
                answers[ref] = None
            elif len(found[ref]) > 1 and found[ref][1] == "commit":
                answers[ref] = found[ref][0]
            else:
                answers[ref] = self.rev(ref)
        return answers

    def _ref_from_files(self, ref: str) -> str | object | None:
        """The object id ref `ref` holds, read as git's files backend reads it (the loose file, else
        its line in packed-refs), None if it has none; _ASK_GIT wherever the files alone might not
        say what for-each-ref says: a name with anything but plain parts, a linked worktree
        (per-worktree refs), a reftable or case-insensitive repository, a symbolic, broken or
        unreadable ref, a packed-refs file not as git writes it. A runner pass asked for-each-ref
        this about 6 times (a process each, 5,000 in the test suite); tests/git/test_rev_equiv.py
        holds the two to the same answers."""
        if (
            not _PLAIN_REF.fullmatch(ref)
            or ".." in ref
            or ref.endswith(".")
            or ".lock/" in ref + "/"
        ):
            return _ASK_GIT
        if self._plain_refs is None:
            common = self.common_dir
            self._plain_refs = (
                self.git_dir == common
                and not (common / "reftable").exists()
                and (common / "HEAD").exists()
                and not (common / "hEAD").exists()
            )
        if not self._plain_refs:
            return _ASK_GIT
        try:
            if stat.S_ISREG(os.lstat(self.common_dir / ref).st_mode):
                data = (self.common_dir / ref).read_bytes()
                return data[:-1].decode() if _HEX_LINE.fullmatch(data) else _ASK_GIT
            return _ASK_GIT  # a folder, a symbolic link: git's rules, not these
        except FileNotFoundError:
            pass
        except (
            OSError
        ):  # not a folder on the way (refs/heads/a is a file, refs/heads/a/b asked), unreadable
            return _ASK_GIT
        try:
            packed = (self.common_dir / "packed-refs").read_bytes()
        except FileNotFoundError:
            return None
        except OSError:
            return _ASK_GIT
        return self._packed_ref(packed, ref.encode())

    @staticmethod
    def _packed_ref(packed: bytes, name: bytes) -> str | object | None:
        """`name`'s id in a packed-refs file as git writes it (its header, then `<id> <name>` lines
        in strictly increasing order, each followed by at most one `^<id>` peeled line); _ASK_GIT
        for anything else (git trusts the order it wrote: an unsorted file can hide other refs from
        it) or a big one."""
        if len(packed) > _PACKED_REFS_BYTES or (packed and not packed.endswith(b"\n")):
            return _ASK_GIT
        lines = packed.split(b"\n")[:-1]
        found, last, peelable = None, b"", False
        for line in lines[1:] if lines and lines[0].startswith(b"# pack-refs with:") else lines:
            if line.startswith(b"^"):
                if not peelable or not _HEX.fullmatch(line, 1):
                    return _ASK_GIT
                peelable = False
                continue
            sha, space, ref = line.partition(b" ")
            if not space or not _HEX.fullmatch(sha) or not ref or b" " in ref or ref <= last:
                return _ASK_GIT
            last, peelable = ref, True
            if ref == name:
                found = sha.decode()
        return found

    def has_remote(self, name: str) -> bool:
        return name in self.out("remote").split()

    def ls_remote(self, remote: str, refs: list[str]) -> dict[str, str]:
        """ref -> sha on the remote for each of `refs` it has: one round trip, no local write."""
        proc = self.run("ls-remote", "--refs", remote, *refs, check=False)
        if proc.returncode != 0:
            raise failure(f"git ls-remote {remote}", proc.stderr, proc.returncode)
        found = {}
        for line in proc.stdout.decode("utf-8", "replace").splitlines():
            sha, _, ref = line.partition("\t")
            if ref in refs:
                found[ref] = sha
        return found

    def fetch(self, remote: str, branch: str, *, also: tuple[str, ...] = ()) -> None:
        """Fetch `branch` into refs/remotes/<remote>/<branch>, and the branches in `also` if they
        exist.

        One fetch for all of them, so what is read is one moment of the remote. Each of `also` is
        fetched with a glob refspec (a branch that does not exist yet is no error) and pruned (a
        branch deleted on the remote disappears here too, so the seen ref notices that it is gone).
        """
        specs = [f"+refs/heads/{branch}:refs/remotes/{remote}/{branch}"]
        specs += [f"+refs/heads/{name}*:refs/remotes/{remote}/{name}*" for name in also]
        # No commit-graph write here (it would take commit-graph-chain.lock, which a
        # killed fetch leaves behind); operators who want one run `git maintenance`.
        proc = self.run(
            *QUIET_WRITES,
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            *(["--prune"] if also else []),
            remote,
            *specs,
            check=False,
        )
        if proc.returncode != 0:
            text = proc.stderr.decode("utf-8", "replace")
            if "couldn't find remote ref" in text:
                raise GitError(
                    f"branch {branch} does not exist on {remote}",
                    hint=f"`git ls-remote --heads {remote}` lists the branches it has",
                )
            error = failure(f"git fetch {remote}", text, proc.returncode, where=self.common_dir)
            if error.hint is None:
                error.hint = (
                    f"check that {remote} is reachable (`git ls-remote {remote}`); "
                    "--no-fetch reads what this clone already has, with no network"
                )
            raise error

    def fetch_refspec(self, remote: str, refspec: str) -> bool:
        """Fetch one refspec (a pull request's head); False when the remote has no such ref."""
        return (
            self.run("fetch", "--quiet", "--no-tags", remote, refspec, check=False).returncode == 0
        )

    def update_ref(self, ref: str, new: str, old: str | None) -> bool:
        """Move `ref` to `new` only if it still points at `old` (compare and swap).

        False when it no longer points at `old`; any other failure (a lock in the way, permissions,
        a full disk) raises, naming the file.
        """
        proc = self.run("update-ref", ref, new, old or ZERO, check=False)
        if proc.returncode == 0:
            return True
        text = proc.stderr.decode("utf-8", "replace")
        if _LOCKED.search(text) or not (
            "but expected" in text
            or "reference already exists" in text
            or "unable to resolve" in text
        ):
            raise failure(f"updating {ref}", text, proc.returncode)
        return False

    def set_ref(self, ref: str, new: str) -> None:
        """Point `ref` at `new` whatever it held (for this clone's own bookkeeping refs only)."""
        proc = self.run("update-ref", ref, new, check=False)
        if proc.returncode != 0:
            raise failure(f"updating {ref}", proc.stderr, proc.returncode)

    def delete_ref(self, ref: str) -> None:
        self.run("update-ref", "-d", ref, check=False)

    def current_branch(self) -> str | None:
        proc = self.run("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    def push(self, remote: str, sha: str, branch: str) -> bool:
        """Push without force; False when the remote moved (fetch, rebase, retry).

        A branch that does not exist on the remote yet is created; if another process created it
        first, a new root is not a fast-forward of theirs and is refused like any other stale push
        (create-only, without force).
        """
        proc = self.run(
            *QUIET_WRITES, "push", "--porcelain", remote, f"{sha}:refs/heads/{branch}", check=False
        )
        if proc.returncode == 0:
            # The remote accepted it: that is what counts (a claim is a claim). A local
            # tracking ref that cannot follow (a stale lock) is said, not fatal; the
            # next fetch names the lock if it is still there.
            tracking = f"refs/remotes/{remote}/{branch}"
            if self._ref_from_files(tracking) == sha:
                return (
                    True  # push moved it already (the remote's fetch refspec maps the branch there)
                )
            moved = self.run("update-ref", tracking, sha, check=False)
            if moved.returncode != 0:
                why = failure(f"updating {tracking}", moved.stderr, moved.returncode)
                self.warnings.append(
                    f"pushed {sha[:12]} to {remote}/{branch}, but {why.message}"
                    f"{' (' + why.file + ')' if why.file else ''}; "
                    f"{why.hint or 'the next fetch updates it'}"
                )
            return True
        text = (proc.stdout + proc.stderr).decode("utf-8", "replace")
        blocker = _IN_THE_WAY.search(text)
        if blocker:
            # A ref named like a directory of this one (mergegate/audit/x) makes every push of it
            # fail:
            # not a lost race, and retrying cannot help.
            name = blocker[1].removeprefix("refs/heads/")
            raise GitError(
                f"git push to {remote} failed: the branch {name} is in the way of {branch} (git "
                "cannot have both)",
                hint=f"delete it on the remote if it is not needed: git push {remote} --delete "
                f"{name}",
            )
        if (
            "[rejected]" in text
            or "non-fast-forward" in text
            or "fetch first" in text
            or ("[remote rejected]" in text and _LOST_RACE.search(text))
        ):
            return False
        raise failure(f"git push to {remote}", text, proc.returncode)
