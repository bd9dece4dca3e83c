"""Write a benchmark's generated section of docs/performance.md, keeping the notes below it."""

from __future__ import annotations

import os
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path


def write_section(path: Path, section: str, end_marker: str, generated: list[str]) -> None:
    """Replace the generated part of `section` (or add the section at the end), keeping notes.

    Text after `end_marker`, up to the next `## ` heading, is written by people and kept.
    """
    text = path.read_text() if path.exists() else "# Performance\n"
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == section), None)
    if start is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.rstrip("\n") + "\n\n" + "\n".join([section, "", *generated, end_marker]) + "\n")
        return
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    marker = next((i for i in range(start + 1, end) if lines[i].strip() == end_marker), None)
    kept = lines[marker + 1:end] if marker is not None else ([""] if end < len(lines) else [])
    new = [*lines[:start], section, "", *generated, end_marker, *kept, *lines[end:]]
    path.write_text("\n".join(new).rstrip("\n") + "\n")


def machine_line() -> str:
    """One line naming the machine: CPUs, OS, Python, git, OpenSSH."""
    cpu = next(
        (line.split(":", 1)[1].strip() for line in _read("/proc/cpuinfo").splitlines()
         if line.startswith("model name")),
        platform.processor() or "unknown CPU",
    )
    tools = []
    for argv in (["git", "--version"], ["ssh", "-V"]):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            tools.append((done.stdout or done.stderr).strip().split(",")[0])
        except OSError:
            pass
    return (f"{os.cpu_count()} CPUs ({cpu}), {platform.system()} {platform.release()}, "
            f"Python {platform.python_version()}, {', '.join(tools)}")


class LoadWatch:
    """The 1-minute load average before and after a run: was the CPU quiet?"""

    def __init__(self) -> None:
        self.samples = [_load()]

    def sample(self) -> None:
        self.samples.append(_load())

    def note(self) -> str:
        self.sample()
        low, high, cpus = min(self.samples), max(self.samples), os.cpu_count() or 1
        if high <= 0.5 * cpus:
            return f"CPU quiet during the run (load average {low:.1f} to {high:.1f} on {cpus} CPUs)."
        return (f"**Taken on a shared machine**: load average {low:.1f} to {high:.1f} on {cpus} CPUs "
                "(other work was running), so times are upper bounds; ratios measured side by side hold better.")


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _load() -> float:
    try:
        return float(_read("/proc/loadavg").split()[0])
    except (IndexError, ValueError):
        return 0.0


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""
