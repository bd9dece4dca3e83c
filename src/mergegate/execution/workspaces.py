"""Removing a job's workspace (and the runner's export folder) without following what a job planted.

A job controls everything in its workspace: it may leave symlinks to the runner's home,
folders thousands of levels deep, or a mount. Removal never follows a symlink and never
enters another file system. The runner removes each workspace when its job ends; the
watchdog (watchdog.py) removes those a dead runner left, once their jobs are gone. Both
use `remove_tree`, so this module imports nothing beyond the standard library: the
watchdog imports it only when it has something to remove.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import shutil
import stat
import subprocess
from collections.abc import Iterable
from pathlib import Path


def remove_tree(path: Path) -> None:
    """Remove a folder, however deep a job made it, never following a symlink nor
    entering another file system (a mount the job left in it).

    Workspaces go in-process, through descriptors (`_clear`), without starting a process per
    job; a tree deeper than `CLEAR_DEPTH` is moved up, a piece at a time, to be emptied the
    same way. Anything that did not go (a mount the job left) is left to `rm -rf
    --one-file-system` (shutil.rmtree recurses and raises RecursionError on a few thousand
    levels, which would lose the job's result).
    """
    with contextlib.suppress(OSError):
        if _clear(path):
            return
    try:
        subprocess.run(
            ["rm", "-rf", "--one-file-system", "--", str(path)], check=False, capture_output=True
        )
    except OSError:  # no rm on PATH
        with contextlib.suppress(RecursionError):
            shutil.rmtree(path, ignore_errors=True)


def identity(folder: Path) -> tuple[str, int]:
    """What names a folder the runner made, for `remove_stale`: its path and inode."""
    return str(folder), os.lstat(folder).st_ino


def remove_stale(folders: Iterable[tuple[str, int]]) -> None:
    """Remove folders a dead runner named (`identity`), each only if it is named like a folder the
    runner makes (`MADE`) and is still that folder: a directory (not a symlink), of this user, with
    the same inode. Its watchdog has usually removed it already, and a later folder that happens to
    get the same name is another runner's."""
    for path, inode in folders:
        if not os.path.basename(path).startswith(MADE):
            # (a spool line is input: only a folder the runner makes is ever removed from one)
            continue
        try:
            found = os.lstat(path)
        except (OSError, ValueError):  # (ValueError: a NUL in the path)
            continue
        if stat.S_ISDIR(found.st_mode) and found.st_ino == inode and found.st_uid == os.geteuid():
            remove_tree(Path(path))


CLEAR_DEPTH = 32  # folders deep; each level holds one descriptor open
LIST_BATCH = 4096  # entries of one folder in memory at once
MADE = (
    "mergegate-job-",
    "mergegate-index-",
)  # the names of the folders the runner makes (tempfile prefixes)


def _clear(path: Path) -> bool:
    """Remove `path` (a folder) and all in it through descriptors (openat, unlinkat: a folder
    swapped for a symlink meanwhile is never followed); False when anything is left."""
    try:
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
    except FileNotFoundError:
        return True
    try:
        try:
            top = _open_folder(path.name, parent, None)
        except FileNotFoundError:
            return True
        if top is None:
            return False
        try:
            device = os.fstat(top).st_dev
            cleared, moved = _clear_in(top, device, 0, top)
            while moved:  # folders deeper than CLEAR_DEPTH were moved up into `top`: empty them too
                cleared, moved = _clear_in(top, device, 0, top)
        finally:
            os.close(top)
        if cleared:
            os.rmdir(path.name, dir_fd=parent)
        return cleared
    finally:
        os.close(parent)


def _clear_in(folder: int, device: int, depth: int, top: int) -> tuple[bool, bool]:
    """Empty `folder`: whether it is empty now, and whether a folder deeper than CLEAR_DEPTH was
    moved up into `top` instead (renameat between two descriptors: each level holds one open, and
    `rm -rf` would not give back the rights a job took away from what it made), for the next round.

    Listed LIST_BATCH entries at a time: a job may leave millions in one folder."""
    moved = False
    kept: set[str] = set()  # what stays (a mount, a folder that would not go): not listed again
    while True:
        with os.scandir(folder) as listing:
            entries = list(itertools.islice((e for e in listing if e.name not in kept), LIST_BATCH))
        if not entries:
            return not kept, moved
        for entry in entries:
            if not entry.is_dir(follow_symlinks=False):
                os.unlink(entry.name, dir_fd=folder)
                continue
            if entry.stat(follow_symlinks=False).st_dev != device:
                kept.add(
                    entry.name
                )  # another file system (a mount the job left): for rm, which does not cross it
                continue
            if depth >= CLEAR_DEPTH:
                os.rename(
                    entry.name,
                    f".mergegate-deep-{secrets.token_hex(8)}",
                    src_dir_fd=folder,
                    dst_dir_fd=top,
                )
                moved = True
                continue
            inner = _open_folder(entry.name, folder, device)
            if inner is None:
                kept.add(entry.name)
                continue
            try:
                done, deeper = _clear_in(inner, device, depth + 1, top)
            finally:
                os.close(inner)
            if done:
                os.rmdir(entry.name, dir_fd=folder)
            else:
                kept.add(entry.name)
            moved = moved or deeper


def _open_folder(name: str, at: int, device: int | None) -> int | None:
    """Folder `name` of folder `at`, open to list and empty, never through a symlink; None if it is
    on another file system than `device`. A job may have taken its own rights away on what it made
    (`chmod 000 d`, `chmod 500 .`: listing or unlinking would fail with EACCES and the folder stay
    for good): the owner's read, write and search are given back, through a descriptor of that very
    folder (O_PATH, then its /proc/self/fd link), never through a path a job could swap."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=at)
    except PermissionError:
        handle = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=at)
        try:
            if device is not None and os.fstat(handle).st_dev != device:
                return None
            os.chmod(f"/proc/self/fd/{handle}", stat.S_IRWXU)
            fd = os.open(f"/proc/self/fd/{handle}", os.O_RDONLY | os.O_DIRECTORY)
        finally:
            os.close(handle)
    try:
        found = os.fstat(fd)
        if device is not None and found.st_dev != device:
            os.close(fd)
            return None
        if found.st_mode & stat.S_IRWXU != stat.S_IRWXU:
            os.fchmod(fd, stat.S_IMODE(found.st_mode) | stat.S_IRWXU)
    except BaseException:
        os.close(fd)
        raise
    return fd
