"""`check` in GitHub Actions: annotations, a step summary and step outputs people can read.

Everything here is presentation of the `CheckReport` that `check` computed (the same judge the
runner uses); nothing is decided here. Text that came from a proposal (paths, ids, reasons) is
escaped as workflow commands require, so a file name cannot start a workflow command of its own.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from mergegate import clock
from mergegate.errors import ConfigError
from mergegate.operations.check import CheckReport, FileCheck
from mergegate.rules import config
from mergegate.rules.job import parse_job
from mergegate.rules.model import Vote
from mergegate.text import shown

Locate = Callable[[FileCheck], "Place"]


@dataclass(frozen=True)
class Place:
    """Where a file's problem is, and what the job would run."""

    line: int
    command: str = ""


def locate(read_blob: Callable[[str], bytes]) -> Locate:
    """The line an annotation points at: the error's own line for an invalid file, else
    `command:`."""

    def place(f: FileCheck) -> Place:
        if f.blob == "0" * 40:
            return Place(1)
        text = read_blob(f.blob)
        try:
            job = (
                parse_job(text, path=f.path, blob=f.blob)
                if f.job is not None or f.state == "invalid"
                else None
            )
        except ConfigError as exc:
            return Place(exc.line or 1)
        if job is None:
            return Place(1)
        try:
            line = config.parse_yaml(text, file=f.path).line_of(("command",))
        except ConfigError:
            line = 1
        return Place(line, " ".join(job.command))

    return place


@dataclass(frozen=True)
class ReviewState:
    """Reviews on the pull request's head (from GitHub, when a token allows): who approved, who
    may."""

    votes: tuple[Vote, ...] = ()
    excluded: tuple[str, ...] = ()
    note: str = ""  # why reviews are not shown ("" when they are)

    @property
    def counted(self) -> tuple[str, ...]:
        return tuple(sorted({v.person for v in self.votes if v.counted}))


def in_actions(env: Mapping[str, str] | None = None) -> bool:
    return (os.environ if env is None else env).get("GITHUB_ACTIONS") == "true"


def escape_data(text: str) -> str:
    """A workflow command's message: %, CR and LF as Actions requires, then every other control
    and bidi character escaped visibly (the annotation is read by a reviewer)."""
    return shown(text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A"))


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation_lines(report: CheckReport, where: Locate) -> list[str]:
    """`::error` at the line of each invalid or denied file, `::warning` for content still to
    approve."""
    lines = []
    for f in report.files:
        if f.state in ("invalid", "denied"):
            level, title = "error", f"mergegate: {f.state}"
        elif f.state in ("content", "unapproved"):
            level, title = "warning", "mergegate: needs approval"
        else:
            continue
        lines.append(
            f"::{level} "
            f"file={escape_property(f.path)},line={where(f).line},title={escape_property(title)}::{escape_data(f.reason)}"
        )
    return lines


def summary(
    report: CheckReport, reviews: ReviewState, approvers: tuple[str, ...], where: Locate
) -> str:
    """The Markdown step summary: one row per file."""
    allowed = report.exit_code == 0
    out = [
        f"### mergegate check: {'allowed' if allowed else 'not allowed'}",
        "",
        f"Proposal `{report.head[:12]}` against `{report.base[:12]}`, judged by "
        f"`policy/policy.yaml` at `{report.policy[:12]}`.",
        "",
    ]
    if not report.files:
        out.append("This pull request changes no job, policy or other file the gate guards.")
        return "\n".join(out) + "\n"
    out += [
        "| job | command | decision | rule | approvals needed | reviews on this head | who may "
        "still approve |",
        "|---|---|---|---|---|---|---|",
    ]
    counted = set(reviews.counted)
    for f in report.files:
        may = [name for name in approvers if name not in counted and name not in reviews.excluded]
        given = ", ".join(sorted(counted)) if not reviews.note else reviews.note
        needed = f.approvals
        if counted and not reviews.note and f.state in ("allowed", "policy"):
            # The approvals text is the proposal's own (approval commits); reviews count at the
            # merge.
            needed += (
                f"; the reviews on this head ({given}) count too once it is merged with a "
                "merge commit or squash"
            )
        out.append(
            "| "
            + " | ".join(
                _cell(c)
                for c in (
                    f.job or f.path,
                    where(f).command,
                    f.state,
                    f.reason,
                    needed,
                    given or "none",
                    ", ".join(may) or "nobody",
                )
            )
            + " |"
        )
    return "\n".join(out) + "\n"


def outputs(report: CheckReport) -> dict[str, str]:
    states = [f.state for f in report.files]
    return {
        "allowed": "true" if report.exit_code == 0 else "false",
        "files": str(len(states)),
        "allowed-count": str(states.count("allowed")),
        "denied-count": str(states.count("denied")),
        "invalid-count": str(states.count("invalid")),
        "policy-count": str(states.count("policy")),
        "content-count": str(states.count("content")),
    }


def write(
    report: CheckReport,
    *,
    where: Locate,
    reviews: ReviewState,
    approvers: tuple[str, ...],
    env: Mapping[str, str] | None = None,
    echo: Callable[[str], None] = print,
) -> None:
    """Print the annotations, append the summary and the outputs to the files Actions names."""
    env = os.environ if env is None else env
    for line in annotation_lines(report, where):
        echo(line)
    if env.get("GITHUB_STEP_SUMMARY"):
        with Path(env["GITHUB_STEP_SUMMARY"]).open("a", encoding="utf-8") as handle:
            handle.write(summary(report, reviews, approvers, where))
    if env.get("GITHUB_OUTPUT"):
        with Path(env["GITHUB_OUTPUT"]).open("a", encoding="utf-8") as handle:
            for key, value in outputs(report).items():
                handle.write(f"{key}={value}\n")


def pull_number(env: Mapping[str, str] | None = None) -> int | None:
    """The pull request number from the event Actions ran for, if it was a pull request."""
    env = os.environ if env is None else env
    path = env.get("GITHUB_EVENT_PATH")
    if not path:
        return None
    try:
        event: Any = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    number = (event.get("pull_request") or {}).get("number") if isinstance(event, dict) else None
    return number if isinstance(number, int) else None


def _cell(text: str) -> str:
    # A table cell is one line; a pipe would end it, and HTML would render. Controls and bidi
    # characters are escaped visibly, as everywhere a reviewer reads.
    return shown(
        text.replace("\\", "\\\\")
        .replace("|", "\\|")
        .replace("\n", " ")
        .replace("<", "&lt;")
        .replace(">", "&gt;")
    )


def review_state(report: CheckReport, env: Mapping[str, str] | None = None) -> ReviewState:
    """Reviews on the proposal's head, asked of GitHub when the check runs for a pull request."""

    from mergegate.errors import NotYet
    from mergegate.github import gather as github
    from mergegate.github import reviews

    settings = github.Settings.from_env(env)
    number = pull_number(env)
    policy = report.policy_in_force
    if settings is None or number is None or policy is None:
        return ReviewState(note="not a pull request run")
    try:
        with settings.client() as client:
            evidence = github.gather_open(
                settings, client, number, now=clock.now().strftime("%Y-%m-%dT%H:%M:%SZ")
            )
    except NotYet as exc:
        return ReviewState(note=f"reviews unavailable: {exc.message}")
    verdict = reviews.on_head(evidence, number, report.head, policy)
    excluded = tuple(name for name, _ in verdict.excluded)
    if verdict.refused or verdict.waiting:
        return ReviewState(verdict.votes, excluded, note=verdict.refused or verdict.waiting)
    return ReviewState(verdict.votes, excluded)
