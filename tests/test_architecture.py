"""The wings stay as issue 21 built them: what a newcomer reads in the folders is the floor plan.

import-linter (in .ci/run) keeps the direction of imports; ruff keeps complexity and line length;
this keeps the rest of the shape: few files at the root, every wing documented, no room over 600
lines, records typed rather than dicts, and the helper processes' packages import-free."""

from __future__ import annotations

import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "src" / "mergegate"
WINGS = ("git", "crypto", "audit", "rules", "github", "facts", "execution", "runner", "operations")


def _sources() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_package_root_holds_at_most_eight_files_and_every_wing_is_a_subpackage() -> None:
    root_files = [p.name for p in PACKAGE.glob("*.py")]
    assert len(root_files) <= 8, sorted(root_files)
    for wing in WINGS:
        assert (PACKAGE / wing / "__init__.py").is_file(), wing


def test_every_wing_says_what_lives_there_and_what_it_may_import() -> None:
    for wing in (*WINGS, "commands"):
        init = PACKAGE / wing / "__init__.py"
        tree = ast.parse(init.read_text())
        doc = ast.get_docstring(tree)
        assert doc and len(doc) > 40, f"{wing}/__init__.py has no docstring worth reading"


def test_the_helper_processes_packages_import_nothing() -> None:
    """The spawner and the watchdog start with `python -S` and import these first."""
    for init in (PACKAGE / "__init__.py", PACKAGE / "execution" / "__init__.py"):
        tree = ast.parse(init.read_text())
        imports = [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]
        assert [ast.unparse(n) for n in imports] in ([], ["from __future__ import annotations"])


# Generated (scripts/schema_checks.py), read by no one: JSON Schema checks compiled ahead of time.
GENERATED = ("rules/schema_checks.py",)


def test_no_source_file_is_over_600_lines() -> None:
    long = {
        str(p.relative_to(PACKAGE)): n
        for p in _sources()
        if (n := len(p.read_text().splitlines())) > 600
        and str(p.relative_to(PACKAGE)) not in GENERATED
    }
    assert not long, long


def test_records_and_values_are_typed_not_dicts_of_anything() -> None:
    """`dict[str, Any]` in at most 10 places (issue 21): JSON at the edges has one named alias
    each; what mergegate itself builds is a dataclass."""
    places = [
        f"{p.relative_to(PACKAGE)}:{i}"
        for p in _sources()
        for i, line in enumerate(p.read_text().splitlines(), start=1)
        if re.search(r"dict\[str, Any\]", line)
    ]
    assert len(places) <= 10, places


def test_one_class_name_per_concept() -> None:
    where: dict[str, list[str]] = {}
    for p in _sources():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
                where.setdefault(node.name, []).append(str(p.relative_to(PACKAGE)))
    twice = {name: files for name, files in where.items() if len(files) > 1}
    assert not twice, twice
