"""The local state a pass will write, checked before it claims anything (issue 23, item 12).

A pass writes the seen refs of both branches (the audit branch's at its end, after its jobs ran),
its pending ref, its spool and the files under `.git/mergegate/`. A stale lock on one of them, or a
folder it cannot write, used to be found only when the pass came to write it: after its jobs had
run, so that a rewind of the audit branch to the tip it had last seen went unnoticed and the job
ran again. Every such obstacle git or the kernel can tell in advance (a `<ref>.lock`, a file where
a folder must be, a folder where a file must be, a folder that is not writable, a read-only file
system) now stops the pass before it claims anything, naming the file. A full disk cannot be told
in advance: writes that fail later stop the pass as loudly (spool.py, claim_loop.py).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from mergegate.errors import StateError
from mergegate.facts.policy_log import DATED, JUDGED
from mergegate.git.repo import Repo
from mergegate.runner import idle, leases

_HINT_LOCK = (
    "another git process may be using the repository; if none is (one was killed), remove it: "
    "rm '{lock}'"
)


def check_pass(repo: Repo, refs: list[str], spool: Path, runner_name: str) -> None:
    """What one runner pass writes: `refs` (the seen refs, its pending ref), its `spool` (its
    temporary file is the spool's own first write, before any claim), its quiet-pass memory, the
    clone's id and the judged-times files."""
    state = repo.git_dir / "mergegate"
    check(
        repo.common_dir,
        refs=refs,
        files=[
            spool,
            idle.path(repo.git_dir, runner_name),
            leases.clone_path(repo.git_dir),
            *(state / name for name in (JUDGED, DATED)),
            *(state / Path(name).with_suffix(".tmp") for name in (JUDGED, DATED)),
        ],
    )


def check(common_dir: Path, *, refs: Iterable[str], files: Iterable[Path]) -> None:
    """Stop (StateError naming the file) if one of `refs` (in the repository whose common git
    folder is `common_dir`) or `files` could not be written now."""
    for ref in refs:
        path = common_dir / ref
        lock = path.with_name(path.name + ".lock")
        if lock.exists():
            raise StateError(
                f"cannot write {ref}: a lock is in the way",
                file=str(lock),
                hint=_HINT_LOCK.format(lock=lock),
            )
        _file(path, f"cannot write {ref}")
    for path in files:
        _file(path, "cannot write the runner's state")


def _file(path: Path, what: str) -> None:
    if path.is_dir():
        raise StateError(
            f"{what}: a folder is where a file must be",
            file=str(path),
            hint="remove it (the runner writes a file there)",
        )
    folder = path.parent
    while not folder.exists():
        if folder == folder.parent:
            break
        folder = folder.parent
    if not folder.is_dir():
        raise StateError(
            f"{what}: {folder} is not a folder",
            file=str(folder),
            hint="remove it (the runner keeps a folder there)",
        )
    if not os.access(folder, os.W_OK | os.X_OK):
        raise StateError(
            f"{what}: the folder {folder} is not writable",
            file=str(folder),
            hint="fix its permissions (or the mount): the runner must be able to write its state",
        )
    if path.exists() and not os.access(path, os.W_OK):
        raise StateError(
            f"{what}: the file is not writable",
            file=str(path),
            hint="fix its permissions: the runner must be able to write its state",
        )
