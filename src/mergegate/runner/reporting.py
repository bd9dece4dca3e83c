"""Results back on the pull request (`run --report`): best effort, never in the way, retried.

The publisher calls `Reporter.published` with every batch of records it pushed. For a job whose
approving commit is a pull-request merge (the review evidence it was judged on names the pull
request), a `started` record queues a `pending` commit status and a `finished` record the final
status and the run's comment (github/reports.py says what they hold). The queue is the outbox:
a small JSON file in the runner's state folder (`.git/mergegate/reports/<runner>.json`), written
before anything is posted. One worker thread posts from it while the jobs run, so a slow GitHub
never delays a job or eats its lease; the end of the pass waits for it at most FINISH_SECONDS.

What could not be posted (an outage, a 5xx, a rate limit: never waited out, a timeout) stays in
the outbox and the next pass tries it again (the poll loop runs one within RETRY_SECONDS); after
MAX_TRIES passes, or at once for an answer that cannot change (422), it is dropped with a warning.
A status superseded before it was posted is never posted (the newer one is). A comment tried
before is first looked for by its marker (an earlier answer may have been lost after GitHub made
it), so a retry edits it rather than adding a second. Nothing here changes a record or the exit
code: every failure is a warning of the pass.

The outbox lives in the checkout, and on GitHub Actions every workflow run starts from a fresh
one: what a run could not post would be lost with it. So a pass also catches up from the records
(never from local state): for this runner's latest CATCH_UP_RUNS `finished` runs of
pull-request-approved jobs within CATCH_UP of the pass (by the records' runner-signed time), it
asks GitHub for the combined status of each one's commit (one GET per commit, none when there is
no such run) and queues the final status and the comment again when the job's context is
missing or still `pending` (the comment is looked for by its marker first, as for any retry).
A process asks about a run once: a poll loop's later passes skip what it saw reported or posted.
A run with a later `started` of the same job (a retry attempt) is left to that attempt.

Each attempt of a job (its `retries`) is a run of its own, with its own records: it gets its own
comment, and the commit status of the job (one context per job) shows the latest attempt.
"""

from __future__ import annotations

import json
import os
import re
import threading
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from mergegate import clock
from mergegate.audit import log as audit
from mergegate.audit.records import Finished, Record, Started
from mergegate.errors import IntegrityError, MergegateError, UsageError
from mergegate.git.repo import Repo
from mergegate.github import reports
from mergegate.github.gather import ReviewSource, Settings
from mergegate.github.http import BadStatus
from mergegate.runner.claims import Book

REQUEST_SECONDS = 15.0  # the deadline of one request
READ_SECONDS = 10.0  # per connect/read
REPORT_SECONDS = 120.0  # all of a pass's requests to report, in all
FINISH_SECONDS = 60.0  # the longest the end of a pass waits for the outbox to drain
RETRY_SECONDS = 60.0  # the poll loop's next pass, when something waits in the outbox
MAX_TRIES = 10  # passes that tried an item before it is dropped
MAX_ITEMS = 500  # an outbox larger than this drops its oldest items
CATCH_UP = timedelta(hours=24)  # how recent a `finished` run is for a pass to check it was reported
CATCH_UP_RUNS = 10  # at most this many (the latest): at most one GET each, of its commit's status
LOOK_BACK = timedelta(minutes=10)  # a lost comment is looked for from its first try less this
_SAFE = re.compile(r"[^A-Za-z0-9._-]")
# (outbox, run id) of the runs GitHub showed reported, or whose final status this process posted:
# a poll loop's later passes do not ask about them again (a new process, a fresh checkout, does).
_CONFIRMED: set[tuple[str, str]] = set()
_CONFIRMED_LOCK = threading.Lock()


@dataclass(eq=False)  # (by identity: the worker keeps the items it tried in a set)
class Post:
    """One thing to post: a commit status (`status`) or a run's comment (`comment`)."""

    key: str  # "status <sha> <context>" or "comment <run id>": a newer item replaces an older one
    pull: int
    status: dict[str, Any] | None = None  # reports.Status's fields
    run_id: str | None = None
    comment: str | None = None  # its body
    comment_id: int | None = None  # the comment made, once known
    first_try: str | None = None  # when it was first tried (RFC 3339, GitHub's clock)
    tries: int = 0
    error: str = ""  # why the last try failed

    @classmethod
    def load(cls, value: Mapping[str, Any]) -> Post:
        item = cls(**{k: value[k] for k in cls.__dataclass_fields__ if k in value})
        if not isinstance(item.key, str) or not isinstance(item.pull, int):
            raise TypeError("not an outbox item")
        return item


@dataclass
class Reporter:
    """One pass's reporting: the outbox, the worker, and what it says when the pass ends."""

    path: Path
    poster: reports.Poster | None  # None: the client could not be made (the reason in `broken`)
    pull_of: Callable[[str], int | None]  # the pull request a commit of approved merged
    secrets: tuple[str, ...] = ()
    target_url: str | None = None
    broken: str = ""
    items: dict[str, Post] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)
    _tried: set[Post] = field(default_factory=set)  # the items tried in this pass
    _lock: threading.Condition = field(default_factory=threading.Condition)
    _closing: bool = False
    _stop: bool = False
    _thread: threading.Thread | None = None
    recent: list[tuple[Finished, int | None]] = field(default_factory=list)  # to catch up on

    # -- what the pass calls ------------------------------------------------------------
    def published(self, records: list[Record], book: Book) -> None:
        """Queue what `records` (just pushed) tell the pull requests; never raises."""
        try:
            queued = [item for record in records for item in self._items(record, book)]
        except Exception as exc:  # best effort: a report never stops the pass
            self.warnings.append(f"reporting on pull requests: {exc.__class__.__name__}: {exc}")
            return
        if queued:
            with self._lock:
                for item in queued:
                    self.items.pop(item.key, None)  # (re-inserted: the newest goes last)
                    self.items[item.key] = item
                self._save()
                self._lock.notify_all()
            self._start()

    def finish(self) -> list[str]:
        """Wait (at most FINISH_SECONDS) for the outbox to drain; the pass's warnings about it."""
        self.close(FINISH_SECONDS)
        with self._lock:
            left = list(self.items.values())
            self._save()
        if left:
            # (a warning also keeps the pass from being remembered as quiet: idle.py)
            why = next((i.error for i in left if i.error), "not tried within this pass")
            self.warnings.append(
                f"could not report {len(left)} result(s) on pull requests yet (first: {why}); "
                f"the next pass tries again ({self.path})"
            )
        return self.warnings

    def close(self, wait: float = 0.0) -> None:
        """Stop the worker: after it drained the outbox within `wait` seconds, or now."""
        with self._lock:
            self._closing = True
            self._lock.notify_all()
        thread = self._thread
        if thread is not None:
            thread.join(wait)
            with self._lock:
                self._stop = True  # (no new request; the one in flight ends by its deadline)
                self._lock.notify_all()
            thread.join(REQUEST_SECONDS + 1.0)
        if self.poster is not None:
            self.poster.client.close()

    @property
    def waiting(self) -> bool:
        """Whether the outbox holds something the next pass tries again."""
        with self._lock:
            return bool(self.items)

    # -- records to items ---------------------------------------------------------------
    def _items(self, record: Record, book: Book) -> list[Post]:
        if not isinstance(record, Started | Finished):
            return []
        if not reports.reportable(record.run_id, record.commit):
            return []
        pull = self.pull_of(str(record.commit))
        if pull is None:
            return []
        if isinstance(record, Started):
            return [
                _status_item(
                    pull,
                    reports.started_status(
                        record, target_url=self.target_url, secrets=self.secrets
                    ),
                )
            ]
        started = book.started.get((str(record.path), str(record.blob)))
        attempt = (
            started.attempt if started is not None and started.run_id == record.run_id else None
        )
        body = reports.comment(record, attempt=attempt, secrets=self.secrets)
        run_id = str(record.run_id)
        return [
            _status_item(
                pull,
                reports.finished_status(record, target_url=self.target_url, secrets=self.secrets),
                run_id,
            ),
            Post(f"comment {run_id}", pull, run_id=run_id, comment=body),
        ]

    # -- the worker ---------------------------------------------------------------------
    def _start(self) -> None:
        with self._lock:
            if self._thread is not None or self._closing:
                return
            self._thread = threading.Thread(target=self._work, name="mergegate-report", daemon=True)
            self._thread.start()

    def _next(self) -> Post | None:
        with self._lock:
            while not self._stop:
                for item in self.items.values():
                    if item not in self._tried:
                        self._tried.add(item)
                        item.tries += 1
                        item.first_try = item.first_try or _github_now()
                        self._save()  # (tried: a retry looks for a comment this try may make)
                        return item
                if self._closing:
                    return None
                self._lock.wait()
        return None

    def _work(self) -> None:
        self._catch_up()
        while (item := self._next()) is not None:
            try:
                self._deliver(item)
            except Exception as exc:  # MergegateError (Unavailable) or anything unforeseen
                self._failed(item, exc)
            else:
                if item.status is not None and item.run_id is not None:
                    self._confirm(item.run_id)
                with self._lock:
                    if self.items.get(item.key) is item:  # (not replaced meanwhile)
                        del self.items[item.key]
                    self._save()

    def _catch_up(self) -> None:
        """Queue again what GitHub does not show of the recent runs (the module's docstring)."""
        by_commit: dict[str, list[tuple[Finished, int | None]]] = {}
        for record, attempt in self.recent:
            by_commit.setdefault(str(record.commit), []).append((record, attempt))
        for sha, runs in by_commit.items():
            if self.poster is None or self._stop:
                return
            try:
                states = self.poster.states(sha)
            except Exception as exc:  # best effort: the next pass asks again
                said = str(exc) if isinstance(exc, MergegateError) else exc.__class__.__name__
                with self._lock:
                    self.warnings.append(f"could not check what was reported on {sha[:12]}: {said}")
                return
            for record, attempt in runs:
                if states.get(reports.context(record.job, record.path), "pending") == "pending":
                    self._again(record, attempt)
                else:
                    self._confirm(str(record.run_id))

    def _confirm(self, run_id: str) -> None:
        with _CONFIRMED_LOCK:
            _CONFIRMED.add((str(self.path), run_id))

    def confirmed(self, run_id: str) -> bool:
        with _CONFIRMED_LOCK:
            return (str(self.path), run_id) in _CONFIRMED

    def _again(self, record: Finished, attempt: int | None) -> None:
        pull = self.pull_of(str(record.commit))
        if pull is None:
            return
        status = reports.finished_status(record, target_url=None, secrets=self.secrets)
        run_id = str(record.run_id)
        body = reports.comment(record, attempt=attempt, secrets=self.secrets)
        # tries=1 and the record's time as the first try: the comment is looked for first.
        again = [
            _status_item(pull, status, run_id),
            Post(f"comment {run_id}", pull, run_id=run_id, comment=body, tries=1),
        ]
        again[1].first_try = record.time or None
        with self._lock:
            for item in again:
                self.items.setdefault(item.key, item)  # (never over what this pass queued)
            self._save()
            self._lock.notify_all()

    def _deliver(self, item: Post) -> None:
        if self.poster is None:
            raise UsageError(self.broken)
        if item.status is not None:
            self.poster.status(reports.Status(**item.status))
            return
        assert item.run_id is not None and item.comment is not None
        since = None
        if item.comment_id is None and item.tries > 1 and item.first_try is not None:
            since = _stamp(datetime.fromisoformat(item.first_try) - LOOK_BACK)
        made = self.poster.comment(
            item.pull, item.run_id, item.comment, known=item.comment_id, since=since
        )
        with self._lock:
            item.comment_id = made

    def _failed(self, item: Post, exc: Exception) -> None:
        said = str(exc) if isinstance(exc, MergegateError) else f"{exc.__class__.__name__}: {exc}"
        final = isinstance(exc, BadStatus) and exc.status == 422
        with self._lock:
            item.error = said[:300]
            if final or item.tries >= MAX_TRIES:
                if self.items.get(item.key) is item:
                    del self.items[item.key]
                self.warnings.append(
                    f"gave up reporting {item.key.split(' ')[0]} on PR #{item.pull} after "
                    f"{item.tries} tr{'y' if item.tries == 1 else 'ies'}: {item.error}"
                )
            self._save()

    # -- the outbox file ----------------------------------------------------------------
    def _save(self) -> None:
        """Write the outbox atomically (caller holds the lock); an empty one is removed."""
        if len(self.items) > MAX_ITEMS:
            for key in list(self.items)[: len(self.items) - MAX_ITEMS]:
                del self.items[key]
            self.warnings.append(
                f"the report outbox held more than {MAX_ITEMS} items: the oldest dropped"
            )
        try:
            if not self.items:
                self.path.unlink(missing_ok=True)
                return
            self.path.parent.mkdir(parents=True, exist_ok=True)
            scratch = self.path.with_name(f"{self.path.name}.{os.getpid()}.tmp")
            scratch.write_text(
                json.dumps({"version": 1, "items": [asdict(i) for i in self.items.values()]})
            )
            os.replace(scratch, self.path)
        except OSError as exc:
            message = f"cannot write the report outbox {self.path}: {exc.strerror or exc}"
            if message not in self.warnings:
                self.warnings.append(message)


def outbox(git_dir: Path, runner_name: str) -> Path:
    return git_dir / "mergegate" / "reports" / f"{_SAFE.sub('_', runner_name)}.json"


def for_pass(
    git_dir: Path,
    runner_name: str,
    settings: Settings | None,
    pull_of: Callable[[str], int | None],
    *,
    env: Mapping[str, str] | None = None,
) -> Reporter:
    """The pass's reporter, with what earlier passes left in the outbox (its worker started)."""
    if settings is None or not settings.token:
        raise UsageError(
            "--report posts to the pull requests of the gate: it needs GITHUB_REPOSITORY and a "
            "token (GITHUB_TOKEN or GH_TOKEN)",
            hint="GitHub Actions sets both (the token needs statuses: write and pull-requests: "
            "write); without them, leave --report off",
        )
    env = os.environ if env is None else env
    poster, broken = None, ""
    try:
        client = settings.client(
            timeout=READ_SECONDS, deadline=REQUEST_SECONDS, max_api_time=REPORT_SECONDS, max_wait=0
        )
        poster = reports.Poster(client, settings.repository)
    except MergegateError as exc:  # (a certificate or proxy setting: the evidence says so too)
        broken = str(exc)
    reporter = Reporter(
        outbox(git_dir, runner_name),
        poster,
        pull_of,
        secrets=(settings.token,),
        target_url=reports.target_url(env),
        broken=broken,
    )
    reporter.items = _read(reporter.path, reporter.warnings)
    if reporter.items:
        reporter._start()
    return reporter


def _read(path: Path, warnings: list[str]) -> dict[str, Post]:
    try:
        data = json.loads(path.read_text())
        items = [Post.load(value) for value in data["items"]]
    except FileNotFoundError:
        return {}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        warnings.append(
            f"the report outbox {path} cannot be read ({exc.__class__.__name__}): "
            "what it held is not reported"
        )
        return {}
    for item in items:
        item.error = ""
    return {item.key: item for item in items}


def _status_item(pull: int, status: reports.Status, run_id: str | None = None) -> Post:
    """A status to post; a final one names its run (posted, the catch-up need not ask again)."""
    return Post(f"status {status.sha} {status.context}", pull, status=asdict(status), run_id=run_id)


def _github_now() -> str:
    # GitHub's clock, not the runner's (MERGEGATE_CLOCK): it is compared with GitHub's
    # `updated_at` when a lost comment is looked for, and decides nothing.
    return _stamp(datetime.now(UTC))


def _stamp(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def recent(
    repo: Repo,
    records_tip: str | None,
    runner_name: str,
    pull_of: Callable[[str], int | None],
    *,
    now: datetime,
) -> list[tuple[Finished, int | None]]:
    """This runner's latest CATCH_UP_RUNS `finished` runs of pull-request-approved jobs within
    CATCH_UP of `now`, with their attempts: from the last two log files (each holds at most
    RECORDS_PER_FILE records), read as the pass's tail was, without local state."""
    records: list[Record] = []
    for path, blob in audit.log_files(repo, records_tip)[-2:]:
        records += audit.parse_file(repo.blob(blob), path)
    return recent_runs(records, runner_name, pull_of, now=now)


def recent_runs(
    records: list[Record],
    runner_name: str,
    pull_of: Callable[[str], int | None],
    *,
    now: datetime,
) -> list[tuple[Finished, int | None]]:
    """`recent`, of `records` (in chain order)."""
    since = audit.stamp(now - CATCH_UP)
    latest: dict[tuple[str, str], Started] = {}  # the latest start of each job on each commit
    attempts: dict[str, int] = {}
    for record in records:
        if isinstance(record, Started) and record.runner == runner_name:
            latest[(str(record.commit), str(record.path))] = record
            attempts[str(record.run_id)] = record.attempt or 1
    found = [
        (record, attempts.get(str(record.run_id)))
        for record in records
        if isinstance(record, Finished)
        and record.runner == runner_name
        and record.time >= since
        and reports.reportable(record.run_id, record.commit)
        and getattr(latest.get((str(record.commit), str(record.path))), "run_id", None)
        in (None, record.run_id)
        and pull_of(str(record.commit)) is not None
    ]
    return found[-CATCH_UP_RUNS:]


def start(
    on: bool, repo: Repo, records_tip: str | None, runner_name: str, reviews: ReviewSource
) -> Reporter | None:
    """The pass's reporter when the runner reports (`--report`), else None."""
    if not on:
        return None

    def pull_of(sha: str) -> int | None:
        evidence = reviews.evidence_for(sha)
        return evidence.pull if evidence is not None else None

    reporter = for_pass(repo.git_dir, runner_name, reviews.settings, pull_of)
    try:
        if reviews.stored:  # (no pull request approved anything: nothing to catch up on)
            found = recent(repo, records_tip, runner_name, pull_of, now=clock.now())
            reporter.recent = [(r, a) for r, a in found if not reporter.confirmed(str(r.run_id))]
    except (IntegrityError, ValueError) as exc:  # (the pass's own reading says what is wrong)
        reporter.warnings.append(f"could not read the recent runs to report: {exc}")
    if reporter.recent:
        reporter._start()
    return reporter


def wake(reporter: Reporter | None, due: datetime | None) -> datetime | None:
    """When the next pass is due: `due`, or sooner when the outbox holds something to retry."""
    if reporter is None or not reporter.waiting:
        return due
    soon = clock.now() + timedelta(seconds=RETRY_SECONDS)
    return soon if due is None or soon < due else due
