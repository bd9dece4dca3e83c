"""Results back on the pull request: a commit status per job, a comment per run (`run --report`).

What is posted, and how it is built:
- a commit status on the commit of `approved` that approved the job (the merge or squash commit),
  context `mergegate/<job id>`: `pending` when the run's `started` record is pushed, then
  `success`, `failure` (failed, timed out) or `error` (interrupted, lost) with its `finished`
  record. Its description is at most 140 characters (GitHub's bound), its target URL the
  Actions run when the runner is one (else none);
- one comment per run on the pull request, after its `finished` record: status, exit code,
  duration, the output tail (at most 2 KB), the record's seq and hash and the command that shows
  it. It starts with a hidden marker naming the run, so a post retried after an answer that
  never came edits the comment GitHub made rather than adding a second one.

Every value a job, a proposer or another runner could choose goes through `redaction.redact_text`
(with the token as a secret too) and is escaped: inline values as code spans, the output tail in
a fenced block longer than any run of backticks it holds, control and format characters shown
(`text.shown`). Nothing here decides anything: a failure is an `Unavailable`, for the caller's
outbox (runner/reporting.py) to try again on the next pass.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from mergegate.audit.records import Finished, Started
from mergegate.github.http import BadStatus, Client, Malformed, RateLimited
from mergegate.redaction import redact_text
from mergegate.text import path_display, shown

DESCRIPTION_MAX = 140  # characters GitHub takes in a status description (more is a 422)
CONTEXT_MAX = 100
TARGET_URL_MAX = 255
TAIL_MAX = 2048  # bytes of output a comment shows, both streams together
VALUE_MAX = 300  # characters of one inline value (a reason, a path)
COMMENT_PAGES = 10  # pages of 100 comments searched for a marker (only those since the run)
_RUN_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
# The state of a commit status for each `finished` status; anything else is an `error`.
STATES = {"succeeded": "success", "failed": "failure", "timed_out": "failure"}


@dataclass(frozen=True)
class Status:
    """One commit status to set: POST /repos/{owner}/{repo}/statuses/{sha}."""

    sha: str
    state: str  # pending, success, failure, error
    context: str
    description: str
    target_url: str | None = None

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "state": self.state,
            "context": self.context,
            "description": self.description,
        }
        if self.target_url:
            body["target_url"] = self.target_url
        return body


def marker(run_id: str) -> str:
    """The hidden first line of a run's comment: how a retry finds the comment it made."""
    return f"<!-- mergegate:run {run_id} -->"


def reportable(run_id: str | None, sha: str | None) -> bool:
    """Whether a run can be reported: a run id a marker can hold and a commit id a URL can."""
    return (
        run_id is not None
        and sha is not None
        and bool(_RUN_ID.fullmatch(run_id) and _SHA.fullmatch(sha))
    )


def context(job: str | None, path: str | None) -> str:
    """`mergegate/<job id>` (the file's path when the record names no job)."""
    name = job or path_display(path or "job")
    return _bounded(shown(f"mergegate/{name}"), CONTEXT_MAX)


def started_status(record: Started, *, target_url: str | None, secrets: Sequence[str]) -> Status:
    attempt = f" (attempt {record.attempt})" if (record.attempt or 1) > 1 else ""
    runner = _plain(record.runner, secrets, 40)
    return Status(
        str(record.commit),
        "pending",
        context(record.job, record.path),
        _bounded(f"running on {runner}{attempt}, audit seq {record.seq}", DESCRIPTION_MAX),
        target_url,
    )


def finished_status(record: Finished, *, target_url: str | None, secrets: Sequence[str]) -> Status:
    status = str(record.status)
    state = STATES.get(status, "error")
    said = f"{_plain(status, secrets, 20)}{_exit(record)} after {_duration(record.duration_ms)}"
    if state == "error" and record.reason:
        said += f": {_plain(record.reason, secrets, DESCRIPTION_MAX)}"
    tail = f", audit seq {record.seq}"
    return Status(
        str(record.commit),
        state,
        context(record.job, record.path),
        _bounded(said, DESCRIPTION_MAX - len(tail)) + tail,
        target_url,
    )


def comment(
    record: Finished,
    *,
    attempt: int | None,
    secrets: Sequence[str],
    audit_branch: str = "mergegate/audit",
) -> str:
    """The comment of one run: what it did, the output tail, and where its record is."""
    status = str(record.status)
    job = record.job or path_display(record.path or "")
    lines = [
        marker(str(record.run_id)),
        f"**mergegate**: job {_code(job, secrets)} **{_plain(status, secrets, 20)}**"
        f"{_exit(record)} after {_duration(record.duration_ms)}",
        "",
        f"- file {_code(path_display(record.path or ''), secrets)} at "
        f"{_code(str(record.commit)[:12], secrets)}"
        + (f", attempt {attempt}" if attempt else "")
        + f", runner {_code(record.runner, secrets)}",
        f"- record: seq {record.seq}, hash {_code(record.hash, secrets)} on "
        f"{_code(audit_branch, secrets)}",
    ]
    if record.reason:
        lines.append(f"- reason: {_code(record.reason, secrets)}")
    out, err = record.stdout_tail or "", record.stderr_tail or ""
    err_room = min(len(err.encode()), TAIL_MAX // 2 if out else TAIL_MAX)
    for name, tail, room in (("stdout", out, TAIL_MAX - err_room), ("stderr", err, err_room)):
        if tail:
            lines += ["", f"{name} (the end, redacted):", *_block(_last(tail, room), secrets)]
    lines += [
        "",
        f"In a clone of the gate: `mergegate show {_show_arg(job)}` (every attempt and its "
        f"output), `mergegate audit log` (the records).",
    ]
    return "\n".join(lines) + "\n"


class Poster:
    """Posts statuses and comments to one repository through the one HTTP client."""

    def __init__(self, client: Client, repository: str) -> None:
        self.client = client
        self.repository = repository

    def status(self, status: Status) -> None:
        self.client.post(f"/repos/{self.repository}/statuses/{status.sha}", body=status.body())

    def comment(
        self, pull: int, run_id: str, body: str, *, known: int | None, since: str | None
    ) -> int:
        """Post the comment of `run_id` on pull request `pull`, or edit the one it made; its id.

        `known`: the comment's id, if this runner saw it made. `since` (RFC 3339): an earlier
        try may have made it without the answer arriving: look for its marker among the comments
        since then first. An edit GitHub refuses (403: someone else's comment carrying the marker;
        404: deleted) posts a new one."""
        if known is None and since is not None:
            known = self.find(pull, run_id, since=since)
        if known is not None:
            try:
                self.client.request(
                    "PATCH",
                    f"/repos/{self.repository}/issues/comments/{known}",
                    body={"body": body},
                )
                return known
            except BadStatus as exc:
                if isinstance(exc, RateLimited) or exc.status not in (403, 404):
                    raise
        answer = self.client.post(
            f"/repos/{self.repository}/issues/{pull}/comments", body={"body": body}
        )
        return _comment_id(answer.json(), answer.url)

    def states(self, sha: str) -> dict[str, str]:
        """The state of each context's latest status on `sha`: one GET of its combined status
        (GET /repos/{owner}/{repo}/commits/{ref}/status, the first 100 contexts)."""
        answer = self.client.get(
            f"/repos/{self.repository}/commits/{sha}/status", params={"per_page": 100}
        )
        data = answer.json()
        items = data.get("statuses") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise Malformed(f"GET {answer.url}: not a combined status", url=answer.url)
        found: dict[str, str] = {}
        for item in items:
            if isinstance(item, dict):
                context, state = item.get("context"), item.get("state")
                if isinstance(context, str) and isinstance(state, str):
                    found.setdefault(context, state)  # (GitHub lists the latest first)
        return found

    def find(self, pull: int, run_id: str, *, since: str) -> int | None:
        """The id of the comment starting with the run's marker, among those updated since."""
        wanted = marker(run_id)
        url: str | None = f"/repos/{self.repository}/issues/{pull}/comments"
        params: dict[str, str | int] | None = {"per_page": 100, "since": since}
        for _ in range(COMMENT_PAGES):
            if url is None:
                return None
            answer = self.client.get(url, params=params)
            items = answer.json()
            if not isinstance(items, list):
                raise Malformed(f"GET {answer.url}: not a list of comments", url=answer.url)
            for item in items:
                body = item.get("body") if isinstance(item, dict) else None
                if isinstance(body, str) and body.startswith(wanted):
                    return _comment_id(item, answer.url)
            url, params = answer.next_url(), None
        return None


def target_url(env: Mapping[str, str]) -> str | None:
    """The Actions run a status links to, when the runner is one: GITHUB_SERVER_URL (https, no
    credentials), GITHUB_REPOSITORY and GITHUB_RUN_ID (digits); else None."""
    server = str(env.get("GITHUB_SERVER_URL") or "").rstrip("/")
    repository = str(env.get("GITHUB_REPOSITORY") or "")
    run = str(env.get("GITHUB_RUN_ID") or "")
    parts = urlsplit(server)
    if (
        parts.scheme != "https"
        or not parts.hostname
        or "@" in parts.netloc
        or parts.path not in ("", "/")
        or not run.isdigit()
        or not re.fullmatch(r"[A-Za-z0-9._-]+/[A-Za-z0-9._-]+", repository)
    ):
        return None
    url = f"{server}/{repository}/actions/runs/{run}"
    return url if len(url) <= TARGET_URL_MAX else None


def _comment_id(item: Any, url: str) -> int:
    value = item.get("id") if isinstance(item, dict) else None
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise Malformed(f"{url}: the comment has no id", url=url)
    return value


def _exit(record: Finished) -> str:
    if record.exit_code is not None:
        return f" (exit code {record.exit_code})"
    if record.signal is not None:
        return f" (signal {record.signal})"
    return ""


def _duration(ms: int | None) -> str:
    if ms is None:
        return "an unknown time"
    if ms < 1000:
        return f"{ms} ms"
    if ms < 60_000:
        return f"{ms / 1000:.1f} s"
    minutes, seconds = divmod(ms // 1000, 60)
    return f"{minutes} min {seconds} s"


def _bounded(value: str, limit: int) -> str:
    return value if len(value) <= limit else value[: max(0, limit - 1)] + "…"


def _plain(value: str, secrets: Sequence[str], limit: int) -> str:
    """A value inside a sentence: redacted, every control shown, bounded."""
    return _bounded(shown(redact_text(value, secrets)), limit)


def _code(value: str, secrets: Sequence[str]) -> str:
    """A value as a Markdown code span: nothing in it is markup, a mention or a link."""
    text = _plain(value, secrets, VALUE_MAX)
    fence = "`" * (max((len(run) for run in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or not text.strip() else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _block(value: str, secrets: Sequence[str]) -> list[str]:
    """Output as a fenced block: longer fences than any run of backticks inside, every control
    character but the newline shown."""
    lines = [shown(line) for line in redact_text(value, secrets).split("\n")]
    longest = max((len(run) for line in lines for run in re.findall(r"`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence + "text", *lines, fence]


def _last(text: str, room: int) -> str:
    """The end of `text`, at most `room` bytes of UTF-8 (whole characters), marked when cut."""
    data = text.encode()
    if len(data) <= room:
        return text
    return "…" + data[len(data) - room :].decode("utf-8", "ignore")


def _show_arg(job: str) -> str:
    """The job as `mergegate show` takes it, when it is a plain id or path; else the placeholder."""
    return job if re.fullmatch(r"[A-Za-z0-9._/-]{1,200}", job) else "JOB"
