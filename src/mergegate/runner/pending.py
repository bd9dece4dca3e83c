"""The pending commit: the last audit commit this runner built whose push was refused.

During an outage (the remote refuses pushes: a hook, permissions, a full disk on the server) every
poll would otherwise build a new audit commit, and each holds a full copy of the current log file
(up to 4 MiB). So the commit is kept in `refs/mergegate/pending/<runner>` and the next attempt
pushes it again unchanged when it would say the same: same parent, the same records but for their
`time`. A claim (`started`) is never reused, its lease counts from now; when a new commit replaces
the pending one, or a push is refused because the branch moved (a lost race), the refused commit's
own objects are deleted (`Repo.discard`). Disk stays bounded by one pending commit, however long the
outage.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field

from mergegate.audit import log as audit
from mergegate.audit.records import Record, Started
from mergegate.git.repo import Repo

PREFIX = "refs/mergegate/pending/"
_VOLATILE = (
    "time",
    "judged",
    "seq",
    "prev",
    "hash",
)  # what differs between passes that say the same


@dataclass(frozen=True)
class Pending:
    repo: Repo
    runner_name: str
    # The ref as this pass last read or wrote it: only this runner's pass, holding the clone's pass
    # lock, writes it, so one read a pass is enough (`forget` at each pass's start: between passes
    # another `run --once` in this clone may have pushed or replaced it).
    _known: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)

    @property
    def ref(self) -> str:
        return PREFIX + re.sub(r"[^A-Za-z0-9._-]", "_", self.runner_name)

    def forget(self) -> None:
        self._known.clear()

    def get(self) -> str | None:
        if self.ref not in self._known:
            self._known[self.ref] = self.repo.rev(self.ref)
        return self._known[self.ref]

    def reusable(
        self, parent: str | None, last_seq: int, drafts: Sequence[Record]
    ) -> tuple[str, list[Record]] | None:
        """The pending commit and its new records, if pushing it says what `drafts` would on
        `parent`."""
        sha = self.get()
        if sha is None or any(isinstance(d, Started) for d in drafts):
            return None
        commit = self.repo.commit(sha)
        if commit.parents != ((parent,) if parent is not None else ()):
            return None
        records = new_records(self.repo, sha, last_seq)
        if [_same(r) for r in records] != [_same(d) for d in drafts]:
            return None
        return sha, records

    def keep(self, sha: str) -> None:
        """`sha`'s push was refused: it is the pending commit now (the one it replaces is
        discarded)."""
        old = self.get()
        self._known.pop(self.ref, None)  # (read again if the write fails halfway)
        self.repo.set_ref(self.ref, sha)
        self._known[self.ref] = sha
        if old is not None and old != sha:
            self.repo.discard(old)

    def settle(self, pushed: str | None) -> None:
        """A push landed (`pushed`) or the branch moved past the pending commit: forget it."""
        old = self.get()
        if old is None:
            return
        self._known.pop(self.ref, None)
        self.repo.delete_ref(self.ref)
        self._known[self.ref] = None
        if old != pushed:
            self.repo.discard(old)


def new_records(repo: Repo, sha: str, last_seq: int) -> list[Record]:
    """The records at `sha` after seq `last_seq` (from the last log files, newest first until
    reached)."""
    found: list[Record] = []
    for path, blob in reversed(audit.log_files(repo, sha)):
        records = audit.parse_file(repo.blob(blob), path)
        found[:0] = [r for r in records if r.seq > last_seq]
        if not records or records[0].seq <= last_seq + 1:
            break
    return found


def _same(record: Record) -> dict[str, object]:
    return {k: v for k, v in record.as_json().items() if k not in _VOLATILE}
