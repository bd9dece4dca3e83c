"""Dating: when a runner vouched for a record's time.

A record's `time` is what its runner wrote; it decides anything (key lifetimes, approval
expiry, windows) only when the audit commit that appended it was signed by a runner of the
policy in force (`Appenders`, `first_vouched`, `first_covering`): the same answer in every
clone, and none that a person can choose.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime

# a declared dependency; without it (an environment not reinstalled yet) the json reading, as exact
# and slower
try:
    import orjson
except ImportError:  # pragma: no cover
    orjson = None  # type: ignore[assignment]

from mergegate.audit.log import _FILE, AUDIT_DIR, grep
from mergegate.audit.records import (
    Record,
    Scanned,
    parse_time,
)
from mergegate.git.repo import Repo


def judged_time(record: Record) -> datetime | None:
    """The time the runner judged the commit a record names at: its `judged` (the clock at the start
    of the pass that wrote it), else its `time` (records from before runners wrote `judged`).

    A pass judges every commit at its start and writes the records later: judging a key's lifetime
    at the record's own time would differ from the runner whenever a lifetime ended in between.
    A `judged` after the record's own time, or unreadable, is no runner's (verify reports it): then
    its time.
    """
    when = parse_time(record.time)
    judged = parse_time(record.written("judged"))
    if judged is None or when is None:
        return when
    return min(judged, when)


class Appenders:
    """Which audit commit appended a record: a binary search over the audit branch's line by the
    last seq of each commit's newest log file, confirmed by the record's own hash (in the commit,
    not in its parent).

    Anything unexpected (an unreadable log file, a record not where the search leads) answers None:
    a record whose audit commit is not known vouches for nothing."""

    def __init__(self, repo: Repo, tip: str) -> None:
        self.repo, self.tip = repo, tip
        self._line: list[str] | None = None
        self._last: dict[str, int | None] = {}
        self._of: dict[tuple[int, str], str | None] = {}

    def of(self, record: Record) -> str | None:
        key = (record.seq, record.hash)
        if key not in self._of:
            self._of[key] = self._search(record)
        return self._of[key]

    def _search(self, record: Record) -> str | None:
        if self._line is None:
            self._line = self.repo.out("rev-list", "--first-parent", "--reverse", self.tip).split()
        line, seq, lo, hi = self._line, record.seq, 0, len(self._line)
        while lo < hi:
            mid = (lo + hi) // 2
            last = self._last_seq(line[mid])
            if last is None:
                return None
            lo, hi = (lo, mid) if last >= seq else (mid + 1, hi)
        if lo == len(line):
            return None
        found, digest = line[lo], record.hash
        before = line[lo - 1] if lo else None
        here = any(r.hash == digest for r in grep(self.repo, found, digest))
        earlier = before is not None and any(
            r.hash == digest for r in grep(self.repo, before, digest)
        )
        return found if here and not earlier else None

    def _last_seq(self, commit: str) -> int | None:
        if commit not in self._last:
            self._last[commit] = None
            names = sorted(
                (path, blob)
                for mode, blob, path in self.repo.ls_tree_flat(commit, AUDIT_DIR)
                if _FILE.match(AUDIT_DIR + path) and mode == "100644"
            )
            if not names:
                self._last[commit] = 0
            else:
                lines = self.repo.blob(
                    names[-1][1]
                ).splitlines()  # (split as parse_file splits: a bare CR too)
                try:
                    value = json.loads(lines[-1]) if lines else None
                except ValueError:
                    return None
                if isinstance(value, dict) and isinstance(value.get("seq"), int):
                    self._last[commit] = value["seq"]
        return self._last[commit]


def first_covering(
    scanned: Sequence[Record],
    sha: str,
    line: Mapping[str, int],
    appenders: Appenders,
    vouched: Callable[[str, datetime], bool],
) -> datetime | None:
    """When a runner judged `sha`, an empty commit on approved's first-parent line `line` (commit ->
    place,
    0 for the tip; a veto: no record but `scanned` ones names such a commit), as verify dates it:
    the first of the `scanned` records (in chain order) whose range holds it, counting only one an
    audit commit `vouched` accepts appended (judging the signer's key at the record's time). None:
    no such record."""
    place = line.get(sha)
    if place is None:
        return None
    for record in scanned:
        if not isinstance(record, Scanned):
            continue
        end, start = line.get(str(record.commit)), line.get(str(record.start))
        if end is None or start is None or not end <= place < start:
            continue
        when = judged_time(record)
        if when is None:
            continue
        found = appenders.of(record)
        if found is not None and vouched(found, when):
            return when
    return None


def first_vouched(
    repo: Repo, commit: str | None, sha: str, vouched: Callable[[str, datetime], bool]
) -> datetime | None:
    """When the runner judged `sha`, as the first record naming it (in chain order) says, counting
    only records appended by an audit commit that `vouched` accepts: one signed by a runner of the
    policy in force before `sha`, its key judged at the record's time, as approver keys are (a
    runner key that ended since still vouched then). A record in a commit only `sha`'s own policy
    would trust cannot date `sha` (it would vouch for itself: an expired approver's policy change,
    dated inside the key's life by a runner key the change itself adds). None: no such record."""
    if commit is None:
        return None
    appenders = Appenders(repo, commit)
    for record in sorted(
        (r for r in grep(repo, commit, sha) if r.commit == sha), key=lambda r: r.seq
    ):
        when = judged_time(record)
        if when is None:
            continue  # (a record with a bad time tells nothing about when)
        found = appenders.of(record)
        if found is not None and vouched(found, when):
            return when
    return None
