"""`mergegate lint FILE...`: job and policy files, offline (a pre-commit hook)."""

from __future__ import annotations

from pathlib import Path

import click

from mergegate.commands import output
from mergegate.commands.options import json_option
from mergegate.errors import UsageError
from mergegate.operations.lint import lint


@click.command("lint")
@click.argument("files", nargs=-1, required=True, type=click.Path(dir_okay=False, path_type=Path))
@click.option(
    "--repo",
    "root",
    type=click.Path(file_okay=False, path_type=Path),
    default=Path("."),
    help="Where the working tree is (default: the one holding the current directory).",
)
@click.option("-q", "--quiet", is_flag=True, help="Print only problems.")
@json_option
def command(files: tuple[Path, ...], root: Path, quiet: bool, as_json: bool) -> int:
    """Validate job and policy files offline: schema, ids, paths, credential shapes.

    The same parsers the runner uses; whether the policy in force allows a
    command is `mergegate check`'s question. Exit 0 if all are valid, 2 if not.
    A pre-commit hook: id `mergegate-lint` in this repository's .pre-commit-hooks.yaml.

    \b
    Example:
      mergegate lint jobs/backup.yaml policy/policy.yaml
    """
    return main(files=files, root=root, as_json=as_json, quiet=quiet)


def main(*, files: tuple[Path, ...], root: Path, as_json: bool, quiet: bool) -> int:
    findings = lint(list(files), root=_toplevel(root.resolve()))
    code = 0 if all(f.ok for f in findings) else UsageError.exit_code
    if as_json:
        output.emit({"files": [f.as_json() for f in findings], "ok": code == 0, "exit_code": code})
        return code
    for f in findings:
        if f.ok:
            if not quiet:
                output.line(f"{output.state('ok', 3)} {f.path}: {f.message}")
            continue
        where = f"{f.path}:{f.line}" if f.line is not None else f.path
        output.line(f"error: {f.message} ({where})", err=True)
        if f.hint:
            output.line(f"hint: {f.hint}", err=True)
    return code


def _toplevel(start: Path) -> Path:
    """The working tree holding `start` (paths are judged as jobs/ and policy/ there), else
    `start`."""
    for candidate in (start, *start.parents):
        if (candidate / ".git").exists():
            return candidate
    return start
