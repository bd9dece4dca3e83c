"""`veto`: a signed, empty commit on approved that stops one job revision before it starts."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from mergegate.audit import log as audit
from mergegate.audit.records import Started
from mergegate.errors import GitError, UsageError
from mergegate.facts.assessor import VETO_TRAILER
from mergegate.facts.branches import open_branch
from mergegate.git.repo import Repo
from mergegate.operations.approve import can_sign


@dataclass(frozen=True)
class VetoResult:
    commit: str
    path: str
    blob: str
    pushed_to: str
    # the revision's `started` records already on the audit branch
    started: tuple[Started, ...] = ()


def veto(
    *, repo_path: Path, path: str, blob: str | None, remote: str, branch: str, fetch: bool
) -> VetoResult:
    """Push a signed, empty commit on approved that vetoes one job revision (before it starts)."""
    repo = Repo(repo_path)
    can_sign(repo, "vetoes")
    source = open_branch(repo, remote=remote, branch=branch, fetch=fetch)
    if source.remote is None and repo.current_branch() == branch:
        raise GitError(
            f"{branch} is checked out here; the veto would move it under your working tree",
            hint="git switch to another branch first",
        )
    tip = source.tip()
    target = blob or repo.file_blob(tip, path)
    if target is None:
        raise UsageError(
            f"{path} is not on {branch}",
            hint="name the job file as it is on approved, or pass --blob",
        )
    message = f"mergegate: veto {path}\n\n{VETO_TRAILER}: {path} {target}\n"
    sha = repo.commit_tree(
        tree=repo.commit(tip).tree, parents=(tip,), message=message, author=None, sign=True
    )
    if not source.publish(sha, tip):
        raise GitError(f"{branch} moved while vetoing", hint="run the command again")
    # A veto stops only what has not started: say so when the revision already did (records as of
    # this look at the audit branch; a grep, not the chain check: it only words a warning).
    _, records = source.tips()
    started = tuple(
        r
        for r in audit.grep(repo, records, target)
        if isinstance(r, Started) and r.revision == (path, target)
    )
    # Named as approve and propose name where they pushed (origin/approved), not by the ref read.
    return VetoResult(
        sha, path, target, f"{remote}/{branch}" if source.remote is not None else branch, started
    )
