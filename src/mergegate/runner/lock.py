"""One pass at a time per clone.

Two passes in one clone (a cron tick while a pass runs a job, a retried CI step) would both read the
same spool and audit tail and write two `finished` records for one run. A pass therefore holds an
exclusive `flock` on `<git common dir>/mergegate/run.lock` from its first read to its last write.

flock is released by the kernel when the process exits, however it exits, so the lock is never
stale: the file stays, only a live process can hold it. The file names the holder (pid, runner name,
since) for the message a second pass prints. A pass that finds the lock held waits up to `wait`
seconds, then refuses (Busy, exit 2) naming the file and the holder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from collections.abc import Iterator
from pathlib import Path

from mergegate import clock
from mergegate.errors import Busy, StateError

DEFAULT_WAIT = 5.0
_POLL = 0.05


def lock_path(common_dir: Path) -> Path:
    return common_dir / "mergegate" / "run.lock"


@contextlib.contextmanager
def pass_lock(common_dir: Path, *, runner_name: str, wait: float = DEFAULT_WAIT) -> Iterator[Path]:
    path = lock_path(common_dir)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    except OSError as exc:
        raise StateError(
            f"cannot open the pass lock: {exc.strerror or exc}",
            file=str(path),
            hint="the runner needs to write under .git/mergegate/; check the permissions",
        ) from None
    try:
        deadline = time.monotonic() + max(0.0, wait)
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    holder = _holder(fd)
                    raise Busy(
                        "another mergegate pass holds this clone's "
                        f"lock{' (' + holder + ')' if holder else ''}; "
                        f"waited {wait:g}s",
                        file=str(path),
                        hint="one pass at a time per clone: let it finish (or stop it), or give "
                        "each runner its own clone",
                    ) from None
                time.sleep(_POLL)
        since = clock.now().isoformat(timespec="seconds")
        with contextlib.suppress(OSError):  # who holds it is for the message only
            os.ftruncate(fd, 0)
            os.pwrite(fd, f"pid {os.getpid()}, runner {runner_name}, since {since}\n".encode(), 0)
        yield path
    finally:
        os.close(fd)  # releases the lock


def _holder(fd: int) -> str:
    with contextlib.suppress(OSError):
        return os.pread(fd, 200, 0).decode("utf-8", "replace").strip()
    return ""
