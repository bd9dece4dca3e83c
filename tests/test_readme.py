"""The README's quick start is two commands, and CI runs exactly the second one."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def quick_start_commands() -> list[str]:
    readme = (ROOT / "README.md").read_text()
    section = readme.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    return [block.strip() for block in re.findall(r"```sh\n(.*?)```", section, re.S)]


def test_quick_start_is_two_commands_install_and_demo_then_tests() -> None:
    install, tests = quick_start_commands()
    assert "\n" not in install and "\n" not in tests
    assert install.startswith("python3 -m venv .venv && ") and install.endswith(
        "&& .venv/bin/mergegate demo"
    )
    assert tests == ".venv/bin/python -m pytest -n auto"


def test_ci_runs_the_readme_test_command_verbatim() -> None:
    _, tests = quick_start_commands()
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    assert tests in ci
    # .ci/run installs into the same .venv the README's first command makes.
    assert "python3 -m venv .venv" in ci


def test_the_one_command_that_reruns_every_figure_runs_what_docs_performance_lists() -> None:
    """`python benchmarks/all.py` (issue 12: every figure rerunnable by one documented command) runs
    exactly the commands docs/performance.md lists under it, in that order."""
    import subprocess
    import sys

    page = (ROOT / "docs" / "performance.md").read_text()
    assert "`python benchmarks/all.py`" in page
    intro = page.split("\n## ", 1)[0]  # (the page's head, before its first section)
    (block,) = re.findall(r"```sh\n(.*?)```", intro, re.S)
    listed = [line.split("#", 1)[0].strip() for line in block.splitlines() if line.strip()]
    dry = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "all.py"), "--dry-run"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert dry.stdout.splitlines() == listed
