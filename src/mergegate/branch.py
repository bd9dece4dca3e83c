"""The approved branch: where it is read, how records are published to it, and what anchors trust."""

from __future__ import annotations

import os
from dataclasses import dataclass

from mergegate.errors import GitError, IntegrityError, StateError, UsageError
from mergegate.git import Repo
from mergegate.policy import POLICY_FILE


@dataclass(frozen=True)
class Branch:
    """Where `approved` is read from and how records are published to it."""

    repo: Repo
    ref: str
    remote: str | None
    branch: str

    @property
    def seen_ref(self) -> str:
        return f"refs/mergegate/seen/{self.remote or 'local'}/{self.branch}"

    def check_not_rewritten(self, tip: str) -> str | None:
        """IntegrityError when `tip` does not descend from the tip this clone last saw."""
        seen = self.repo.rev(self.seen_ref)
        if seen is not None and not self.repo.is_ancestor(seen, tip):
            raise IntegrityError(
                f"{self.ref} was rewritten: this clone last saw {seen[:12]}, which is not an ancestor of the new tip {tip[:12]} (force-push?)",
                hint=f"investigate before trusting it; to accept the new history: git update-ref -d {self.seen_ref}",
            )
        return seen

    def remember(self, tip: str, seen: str | None) -> None:
        """Remember what was seen, so that a later rewrite of it (which may also
        erase the audit that would have told) is noticed by this clone.

        This write is what rewrite detection rests on: when it fails (a lock in
        the way, permissions, a full disk) the pass stops, naming the ref.
        """
        for _ in range(3):
            if tip == seen:
                return
            try:
                if self.repo.update_ref(self.seen_ref, tip, seen):
                    return
            except GitError as exc:
                raise StateError(f"cannot record the tip this clone has seen in {self.seen_ref}: {exc.message}",
                                 file=exc.file or str(self.repo.git_dir / self.seen_ref),
                                 hint=exc.hint or "the runner detects a rewritten branch with it; fix the cause and run again") from None
            # Another process (a `verify`, a `status`) moved it meanwhile: fine if along the same line.
            now = self.repo.rev(self.seen_ref)
            if now is not None and self.repo.is_ancestor(tip, now):
                return
            if now is not None and not self.repo.is_ancestor(now, tip):
                self.check_not_rewritten(tip)
            seen = now
        raise StateError(f"{self.seen_ref} keeps changing while this pass runs", hint="one pass at a time per clone")

    def tip(self) -> str:
        sha = self.repo.rev(self.ref)
        if sha is None:
            raise GitError(f"branch {self.ref} does not exist", hint="run `mergegate init`, or pass --remote/--branch")
        return sha

    def refresh(self) -> None:
        if self.remote is not None:
            self.repo.fetch(self.remote, self.branch)

    def publish(self, sha: str, old: str) -> bool:
        if self.remote is not None:
            return self.repo.push(self.remote, sha, self.branch)
        return self.repo.update_ref(self.ref, sha, old)


def open_branch(repo: Repo, *, remote: str, branch: str, fetch: bool) -> Branch:
    """origin/approved after a fetch; the local branch in a repository without that remote."""
    if repo.has_remote(remote):
        result = Branch(repo, f"refs/remotes/{remote}/{branch}", remote, branch)
        if fetch:
            try:
                result.refresh()
            except GitError as exc:
                if "does not exist" in exc.message:
                    exc.hint = f"after `mergegate init`, publish it: git push {remote} HEAD {branch}"
                raise
        return result
    if repo.current_branch() == branch:
        raise GitError(f"{branch} is checked out here; the runner would move it under your working tree", hint="git switch to another branch first")
    return Branch(repo, f"refs/heads/{branch}", None, branch)


def trust_root(repo: Repo, tip: str, given: str | None) -> tuple[str, list[str]]:
    """The pinned trust root (checked to be an ancestor of tip), or the root commit with a warning."""
    given = given or os.environ.get("MERGEGATE_TRUST_ROOT") or None
    if given is None:
        root = repo.root_commit(tip)
        # In a repository that had history before `mergegate init`, the root
        # commit has no policy; the first commit that brought one is the anchor.
        if repo.file_blob(root, POLICY_FILE) is None:
            introduced = repo.first_parent_adding(tip, POLICY_FILE)
            root = introduced or root
        return root, [f"no trust root pinned; trusting {root[:12]}, the first commit of approved with a policy (pin it with --trust-root)"]
    sha = repo.rev(given)
    if sha is None:
        raise UsageError(f"trust root {given!r} does not name a commit in this repository",
                         hint="pass the full id of the commit whose policy you reviewed (fetch it first)")
    if not repo.is_ancestor(sha, tip):
        raise IntegrityError(f"trust root {sha[:12]} is not an ancestor of approved at {tip[:12]}: history was rewritten or the wrong root is pinned")
    return sha, []
