"""Printing for every command: JSON, warnings, one-line lists.

Commands print through here, never with print(), so `--json`, stderr
warnings and line shortening behave the same everywhere.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import click


def emit(data: Any) -> None:
    """One stable JSON object on stdout (keys sorted, two-space indent)."""
    click.echo(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False))


def line(text: str = "", *, err: bool = False) -> None:
    click.echo(text, err=err)


def warn(warnings: Iterable[str]) -> None:
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)


def brief(text: str, limit: int = 140) -> str:
    """One screen line for a list; the whole reason is in --json and the audit."""
    return text if len(text) <= limit else text[: limit - 12].rstrip() + "… (--json)"
