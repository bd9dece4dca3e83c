"""Exporting a commit's files into a folder, for a job to run in: no .git, no hooks.

A private index per (commit, skip) is built once and checked out by `checkout-index`;
a small tree is checked out once and copied for each export, as checkout-index writes it.
"""

from __future__ import annotations

import os
import shutil
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from mergegate.errors import GitError
from mergegate.git.trees import Trees
from mergegate.git.values import path_bytes

if TYPE_CHECKING:
    import tempfile
# (tempfile is imported where an export needs it: an idle `run --once` exports nothing.)

_TEMPLATE_FILES = 64  # an export of at most this many files copies one checkout-index's output


def _copy_checkout(source: Path, dest: Path, prefix: bytes, executable: frozenset[bytes]) -> None:
    """Write into `dest` what checkout-index wrote into `source`, as it writes it: folders with
    mode 0777 and files with 0666, or 0777 when the tree says 100755 (`executable`: paths from
    the root), both less the umask; symlinks as symlinks; contents byte for byte, a chunk at a
    time."""
    with os.scandir(source) as entries:
        for entry in entries:
            target = os.path.join(dest, entry.name)
            path = prefix + os.fsencode(entry.name)
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), target)
            elif entry.is_dir(follow_symlinks=False):
                os.mkdir(target)
                _copy_checkout(Path(entry.path), Path(target), path + b"/", executable)
            else:
                _copy_file(entry.path, target, 0o777 if path in executable else 0o666)


def _copy_file(source: str, target: str, mode: int) -> None:
    """`source`'s bytes into a new file `target` (mode less the umask), a chunk at a time, with
    plain descriptors: once per file of every job's export, where file objects cost twice the system
    calls."""
    src = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            while chunk := os.read(src, 1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
        finally:
            os.close(out)
    finally:
        os.close(src)


class Exports(Trees):
    """`export` and the private indexes and templates it keeps between exports of a pass."""

    def __init__(self, path: Path, git_dir: Path, common_dir: Path) -> None:
        super().__init__(path, git_dir, common_dir)
        # export(): one private index per (commit, skip), built once and read by every export of it.
        self._indexes: dict[
            tuple[str, Callable[[str], bool]], tuple[Path, frozenset[bytes] | None]
        ] = {}
        self._exports_made = 0  # names each index apart, also after drop_exports
        self._index_dir: tempfile.TemporaryDirectory[str] | None = None
        # Told of that folder as soon as it exists (the runner tells its watchdog, which removes it
        # if the runner dies).
        self.on_export_dir: Callable[[Path], None] | None = None
        self._index_lock = threading.Lock()

    def export(
        self, commit: str, dest: Path, *, skip: Callable[[str], bool] = lambda path: False
    ) -> None:
        """Write the files of `commit` (less those `skip` names) into `dest`: no .git, no hooks.

        A private index and checkout-index do it in C; unlike `git archive`, this applies no
        export-subst (which would put commit subjects, written by whoever named a branch, into
        files) and no export-ignore.
        """
        # checkout-index without -u only reads the index, so a merge of many jobs builds it once.
        index, executable = self._export_index(commit, skip)
        if executable is None:
            self.run(
                "--work-tree",
                str(dest),
                "checkout-index",
                "--all",
                "--force",
                "--quiet",
                env={"GIT_INDEX_FILE": str(index)},
            )
            return
        # A small tree: checkout-index writes it once, and each export copies what it wrote
        # as it would have written it (a git process per job cost more than the rest of the
        # export: issue 12's throughput). The copy is of checkout-index's own output, so
        # attributes, filters and core.symlinks apply exactly as they do to a large tree.
        # Under the lock: drop_exports never removes a template while a copy reads it.
        with self._index_lock:
            template = index.with_name(index.name + ".files")
            try:
                if not template.exists():
                    building = index.with_name(index.name + ".building")
                    shutil.rmtree(building, ignore_errors=True)
                    building.mkdir()
                    self.run(
                        "--work-tree",
                        str(building),
                        "checkout-index",
                        "--all",
                        "--force",
                        "--quiet",
                        env={"GIT_INDEX_FILE": str(index)},
                    )
                    building.rename(template)
                _copy_checkout(template, dest, b"", executable)
            except OSError as exc:  # as checkout-index failing would: a GitError naming the folder
                raise GitError(
                    f"could not write the job's files into {dest}: {exc.strerror or exc}",
                    hint="free disk space in TMPDIR or fix its permissions",
                ) from None

    def _export_index(
        self, commit: str, skip: Callable[[str], bool]
    ) -> tuple[Path, frozenset[bytes] | None]:
        """The private index of `commit` less what `skip` names, and (for a tree of at most
        _TEMPLATE_FILES files, which exports copy) the paths of its executable files."""
        with self._index_lock:
            found = self._indexes.get((commit, skip))
            if found is not None and found[0].exists():
                return found
            if self._index_dir is None:
                import tempfile

                self._index_dir = tempfile.TemporaryDirectory(prefix="mergegate-index-")
                if self.on_export_dir is not None:
                    self.on_export_dir(Path(self._index_dir.name))
            index = Path(self._index_dir.name) / f"{commit}-{self._exports_made}"
            self._exports_made += 1
            entries = [
                (mode, obj, path)
                for mode, obj, path in self.ls_tree(commit)
                if mode != "160000" and not skip(path)
            ]
            data = b"".join(
                f"{mode} {obj}\t".encode() + path_bytes(path) + b"\0" for mode, obj, path in entries
            )
            self.run(
                "update-index", "-z", "--index-info", input=data, env={"GIT_INDEX_FILE": str(index)}
            )
            # The executable bit comes from the tree, not from the file checkout-index wrote (a
            # umask can take the owner's x away from it, and the copy would then drop the others'
            # too).
            small = len(entries) <= _TEMPLATE_FILES
            executable = (
                frozenset(path_bytes(p) for mode, _, p in entries if mode == "100755")
                if small
                else None
            )
            self._indexes[(commit, skip)] = (index, executable)
            return index, executable

    @property
    def export_dir(self) -> Path | None:
        """The folder of the export indexes and small trees' copies ($TMPDIR/mergegate-index-*),
        while there is one."""
        return None if self._index_dir is None else Path(self._index_dir.name)

    def drop_exports(self) -> None:
        """Remove the export indexes and the small trees' copies (the runner does it after each
        pass:
        a daemon would otherwise keep every exported commit's files until it exits)."""
        with self._index_lock:
            if self._index_dir is not None:
                self._index_dir.cleanup()
            self._index_dir, self._indexes = None, {}
