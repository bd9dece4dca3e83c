"""One error base class; each subclass carries the exit code the CLI returns."""

from __future__ import annotations

import errno
import os


class MergegateError(Exception):
    """Base of every error mergegate reports to a user.

    `file` and `line` locate the problem when it comes from a file; `hint` says how to fix it when a
    fix is known.
    """

    exit_code = 1

    def __init__(
        self,
        message: str,
        *,
        file: str | None = None,
        line: int | None = None,
        hint: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line
        self.hint = hint

    def location(self) -> str:
        if self.file is None:
            return ""
        return f"{self.file}:{self.line}" if self.line is not None else self.file

    def __str__(self) -> str:
        where = self.location()
        return f"{self.message} ({where})" if where else self.message


class JobFailed(MergegateError):
    """A job failed, timed out, or was denied or rejected."""

    exit_code = 1


class UsageError(MergegateError):
    """Bad input: invalid YAML, schema violation, bad flag, missing policy."""

    exit_code = 2


class ConfigError(UsageError):
    """A policy or job file is invalid."""


class GitError(UsageError):
    """git could not do what was asked (missing ref, no repository).

    `detail` keeps what git said in full (bounded), for logs and --json; the message is the part
    that says why.
    """

    detail: str | None = None


class StateError(MergegateError):
    """A write the runner relies on for safety failed (a lock, permissions, a full disk).

    The pass stops before it can do anything that would need that write; nothing was decided, so the
    exit code is that of bad input or a git failure.
    """

    exit_code = 2


class Busy(StateError):
    """Not yet: another process holds what this one needs (the clone's pass lock)."""


class IntegrityError(MergegateError):
    """Tampering or a broken chain: the runner refuses to go on."""

    exit_code = 3


class Denied(JobFailed):
    """A job was refused before it started (policy, workspace or credential check)."""


class NotYet(MergegateError):
    """Evidence is missing for now (an API down, a rate limit, a lock held): never a yes.

    The job waits and is judged again on the next pass; nothing runs.
    """

    exit_code = 1


# What a write fails with when something filled up, and what filled up.
_FULL = {
    errno.ENOSPC: "the file system is full",
    errno.EDQUOT: "the disk quota is used up",
    errno.EFBIG: "the file would be over the file size limit",
}


def is_full(exc: BaseException) -> bool:
    """Whether `exc` is a write that failed because something filled up (space, quota, size)."""
    return isinstance(exc, OSError) and exc.errno in _FULL


def cannot_write(
    what: str, path: str | os.PathLike[str] | None, exc: OSError, *, hint: str | None = None
) -> StateError:
    """A write that failed as one line naming the file, and what filled up when something did.

    The state the runner relies on stays as it was (every such write goes to a temporary file that
    is renamed into place), so the same command runs again once there is room.
    """
    where = os.fspath(path) if path is not None else exc.filename
    filled = _FULL.get(exc.errno or 0)
    if filled is None:
        return StateError(
            f"cannot write {what}: {exc.strerror or exc}",
            file=None if where is None else str(where),
            hint=hint or "check the permissions of that file and its folder",
        )
    folder = os.path.dirname(str(where)) if where is not None else None
    if exc.errno == errno.EFBIG:
        advice = "raise the file size limit (ulimit -f) or make the file system allow it"
    elif exc.errno == errno.EDQUOT:
        advice = "free space or raise the disk quota there (quota -s shows it)"
    elif folder:
        advice = f"free space there (df -h {folder})"
    else:
        advice = "free space (df -h; --debug shows where it wrote)"
    return StateError(
        f"cannot write {what}: {filled} ({exc.strerror})",
        file=None if where is None else str(where),
        hint=f"{advice}, then run again; what was recorded is kept",
    )
