"""A git repository, as the wing's parts put together: `Repo`.

The parts, each in its own module of the wing: running git (processes), reading objects (objects),
trees (trees), diffs (diffs), history walks (walks), refs and the remote (refs), exports of a
commit's files (exports) and writes (writes). Writes use plumbing with a temporary index, so the
runner never touches a person's working tree, index or checked-out branch.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from mergegate.errors import GitError
from mergegate.git.diffs import Diffs
from mergegate.git.exports import Exports
from mergegate.git.refs import Refs
from mergegate.git.walks import Walks
from mergegate.git.writes import Writes


def _locate(path: Path) -> tuple[Path, Path, Path]:
    """(working tree or git dir, git dir, common dir) of the repository at or above `path`: one
    rev-parse."""
    proc = subprocess.run(
        [
            "git",
            "-C",
            str(path),
            "rev-parse",
            "--path-format=absolute",
            "--show-object-format",
            "--git-dir",
            "--git-common-dir",
            "--is-inside-work-tree",
            "--show-toplevel",
        ],
        capture_output=True,
        env={**os.environ, "LC_ALL": "C"},
        check=False,
    )
    object_format, *lines = proc.stdout.decode("utf-8", "surrogateescape").splitlines() or [""]
    # Outside a work tree (a bare repository, or inside .git) rev-parse stops at --show-toplevel.
    if len(lines) < 3 or (proc.returncode != 0 and (len(lines) != 3 or lines[2] != "false")):
        raise GitError(
            f"{path} is not a git repository",
            hint="run inside a clone of the gate repository, or point --repo at one",
        )
    if object_format != "sha1":
        # Said once, up front: object ids of 40 hex digits are assumed throughout (records,
        # trailers, the trust root), and a SHA-256 repository failed later: "object not found".
        raise GitError(
            f"{path} is a {object_format} repository; mergegate supports SHA-1 repositories only",
            hint="make the gate a SHA-1 repository (git init --object-format=sha1, the default)",
        )
    git_dir, common_dir = Path(lines[0]), Path(lines[1])
    if len(lines) >= 4 and lines[2] == "true":
        return Path(lines[3]), git_dir, common_dir
    if git_dir.name == ".git":  # inside a clone's .git: the clone is the repository
        return git_dir.parent, git_dir, common_dir
    return git_dir, git_dir, common_dir


class Repo(Refs, Walks, Diffs, Exports, Writes):
    """The repository at or above a path: every part of the wing, on one object process."""

    def __init__(self, path: Path) -> None:
        super().__init__(*_locate(path))

    def close(self) -> None:
        """End the object-reading process (it is restarted if the Repo is used again); drop export
        indexes."""
        self._objects.close()
        self.drop_exports()
