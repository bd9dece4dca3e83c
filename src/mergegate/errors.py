"""One error base class; each subclass carries the exit code the CLI returns."""

from __future__ import annotations


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
