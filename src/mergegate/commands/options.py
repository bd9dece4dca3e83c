"""The options several commands share, and what the error handler must know of them.

`cli.py`'s handler reads `Flags` (set while click parses) to show a traceback for --debug and to
print an error as JSON for --json.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import click


class Flags:
    """What the error handler must know about the parsed command line."""

    debug = False
    as_json = False


def set_debug(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    if value:
        Flags.debug = True


def set_json(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        Flags.as_json = True
    return value


def repo_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--repo",
        "repo",
        type=click.Path(file_okay=False, path_type=Path),
        default=Path("."),
        show_default=True,
        help="The gate repository.",
    )(f)


def branch_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option(
        "--no-fetch", "no_fetch", is_flag=True, help="Read the remote-tracking branch as it is."
    )(f)
    f = click.option(
        "--branch", default="approved", show_default=True, help="The approved branch."
    )(f)
    f = click.option(
        "--remote",
        default="origin",
        show_default=True,
        help="Remote to fetch from (and, for commands that push, push to).",
    )(f)
    return repo_option(f)


def trust_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--trust-root",
        "trust_root",
        envvar="MERGEGATE_TRUST_ROOT",
        default=None,
        metavar="COMMIT",
        help="Pinned trust root, or MERGEGATE_TRUST_ROOT (default: the first commit of approved "
        "with a policy, with a warning).",
    )(f)


def json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option(
        "--json",
        "as_json",
        is_flag=True,
        callback=set_json,
        help="Print one JSON object (stable format); errors too.",
    )(f)
