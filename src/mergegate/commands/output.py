"""Printing for every command: JSON, warnings, one-line lists.

Commands print through here, never with print(), so `--json`, stderr warnings and line shortening
behave the same everywhere.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterable
from typing import Any

import click

from mergegate.text import for_reader


def emit(data: Any) -> None:
    """One stable JSON object on stdout (keys sorted, two-space indent)."""
    click.echo(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False))


def emit_line(data: Any) -> None:
    """One JSON object on one line (keys sorted): for streams of objects, such as the poll
    loop's."""
    click.echo(json.dumps(data, sort_keys=True, ensure_ascii=False))


def line(text: str = "", *, err: bool = False) -> None:
    """A line for people: control and bidi characters escaped, no workflow command (text.py)."""
    click.echo(for_reader(text), err=err)


def workflow_command(text: str) -> None:
    """A GitHub Actions workflow command (`::error ...`) on stderr; its values were escaped by
    whoever built it (check_annotations.py). Controls and bidi characters are still escaped."""
    click.echo("::" + for_reader(text[2:]), err=True)


def warn(warnings: Iterable[str]) -> None:
    for warning in warnings:
        click.echo(for_reader(f"warning: {warning}"), err=True)


def brief(text: str, limit: int = 140) -> str:
    """One screen line for a list; the whole reason is in --json and the audit."""
    return text if len(text) <= limit else text[: limit - 12].rstrip() + "… (--json)"


_COLOURS = {
    "succeeded": "green",
    "ok": "green",
    "allowed": "green",
    "adopted": "green",
    "approved": "green",
    "failed": "red",
    "timed_out": "red",
    "rejected": "red",
    "expired": "red",
    "denied": "red",
    "invalid": "red",
    "vetoed": "red",
    "FAILED": "red",
    "violation": "red",
    "overdue": "red",
    "queued": "yellow",
    "running": "yellow",
    "pending": "yellow",
    "would run": "yellow",
    "would reject": "red",
    "would veto": "red",
    "would close": "yellow",
}


def use_colour(*, err: bool = False) -> bool:
    """Colour only on a terminal, and never when NO_COLOR is set (https://no-color.org)."""
    if os.environ.get("NO_COLOR"):
        return False
    stream = sys.stderr if err else sys.stdout
    return stream.isatty()


def state(text: str, width: int = 0) -> str:
    """A state word padded to `width`, coloured by what it means when colour is on."""
    padded = text.ljust(width)
    colour = _COLOURS.get(text)
    if colour is None or not use_colour():
        return padded
    return click.style(text, fg=colour) + padded[len(text) :]


class Progress:
    """`what done/total` on one rewritten stderr line, only on a terminal (never piped, never with
    --json)."""

    def __init__(self, what: str, *, enabled: bool = True, every: float = 0.1) -> None:
        self.what = what
        self.enabled = enabled and sys.stderr.isatty()
        self.every = every
        self._last = 0.0
        self._shown = False

    def update(self, done: int, total: int) -> None:
        if not self.enabled:
            return
        now = time.monotonic()
        if now - self._last < self.every and done != total:
            return
        self._last = now
        self._shown = True
        sys.stderr.write(f"\r{self.what} {done}/{total} commits")
        sys.stderr.flush()

    def done(self) -> None:
        if self._shown:
            sys.stderr.write("\r\x1b[K")  # clear the line: the summary follows
            sys.stderr.flush()
