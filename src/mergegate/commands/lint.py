"""`mergegate lint FILE...`: job and policy files, offline (a pre-commit hook)."""

from __future__ import annotations

from pathlib import Path

from mergegate.commands import output
from mergegate.errors import UsageError
from mergegate.operations.lint import lint


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
