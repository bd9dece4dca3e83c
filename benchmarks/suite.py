"""How long does README's test command take, and how much of it is CPU?

Runs `python -m pytest -n auto` (README's command, tests/test_readme.py keeps the two equal) in
this checkout and measures the whole run: wall time, the CPU time (user + sys) of pytest and
every process it started, and the load average around it. On a shared machine the wall time is
an upper bound; the CPU time is what the suite costs (half of it is the floor of the wall time on
2 cores). The slowest tests are pytest's own `--durations`.

It rewrites the generated part of "## Test suite" in docs/performance.md (notes below the end
marker are kept).

Usage: python benchmarks/suite.py [--no-docs] [pytest arguments, e.g. -p no:randomly]
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

from perfdoc import LoadWatch, finish, header

SECTION = "## Test suite"
END_MARKER = "<!-- end of suite.py output: text below, up to the next ## heading, is kept -->"
ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs" / "performance.md"
COMMAND = [sys.executable, "-m", "pytest", "-n", "auto"]
SLOWEST = 10


def run(extra: list[str]) -> dict[str, object]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    began = time.monotonic()
    done = subprocess.run(
        [*COMMAND, "-q", f"--durations={SLOWEST}", *extra],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.monotonic() - began
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    summary = next(
        (
            line.strip("= ")
            for line in reversed(done.stdout.splitlines())
            if " in " in line and re.search(r"\d+ (passed|failed)", line)
        ),
        "no summary line",
    )
    slowest = [
        line.strip()
        for line in done.stdout.splitlines()
        if re.match(r"^\d+\.\d+s (call|setup|teardown) ", line)
    ]
    return {
        "code": done.returncode,
        "wall": wall,
        "user": after.ru_utime - before.ru_utime,
        "sys": after.ru_stime - before.ru_stime,
        "summary": summary,
        "slowest": slowest[:SLOWEST],
        "tail": done.stdout[-3000:] + done.stderr[-2000:],
    }


def render(result: dict[str, object], head: list[str]) -> list[str]:
    cpu = float(result["user"]) + float(result["sys"])  # type: ignore[arg-type]
    cores = len(os.sched_getaffinity(0))
    lines = [
        *head,
        "",
        f"`python -m pytest -n auto` on {cores} cores (tests/conftest.py: 3 workers for 2 cores): "
        f"{result['summary']}.",
        "",
        "| wall | CPU (user + sys) | CPU / cores: the wall time's floor |",
        "|---:|---:|---:|",
        f"| {float(result['wall']):.0f} s | {cpu:.0f} s ({float(result['user']):.0f} + "  # type: ignore[arg-type]
        f"{float(result['sys']):.0f}) "
        f"| {cpu / cores:.0f} s |",
        "",
        f"The {SLOWEST} slowest test phases (pytest `--durations`):",
        "",
    ]
    lines += [f"- `{line}`" for line in result["slowest"]]  # type: ignore[attr-defined]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--no-docs", action="store_true", help="print only; leave docs/performance.md alone"
    )
    args, extra = parser.parse_known_args()
    load = LoadWatch()
    result = run(extra)
    if result["code"] != 0:
        print(result["tail"])
        raise SystemExit(f"the suite failed (exit {result['code']}): no figures written")
    lines = render(result, header("python benchmarks/suite.py", load))
    print("\n".join([SECTION, "", *lines]))
    finish(no_docs=args.no_docs, docs=DOCS, section=SECTION, end_marker=END_MARKER, lines=lines)


if __name__ == "__main__":
    main()
