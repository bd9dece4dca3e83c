"""Write a benchmark's generated section of docs/performance.md, keeping the notes below it."""

from __future__ import annotations

import os
import platform
import resource
import shutil
import subprocess
import time
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
        path.write_text(
            text.rstrip("\n") + "\n\n" + "\n".join([section, "", *generated, end_marker]) + "\n"
        )
        return
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    marker = next((i for i in range(start + 1, end) if lines[i].strip() == end_marker), None)
    kept = lines[marker + 1 : end] if marker is not None else ([""] if end < len(lines) else [])
    new = [*lines[:start], section, "", *generated, end_marker, *kept, *lines[end:]]
    path.write_text("\n".join(new).rstrip("\n") + "\n")


def machine_line() -> str:
    """One line naming the machine: CPUs, OS, Python, git, OpenSSH."""
    cpu = next(
        (
            line.split(":", 1)[1].strip()
            for line in _read("/proc/cpuinfo").splitlines()
            if line.startswith("model name")
        ),
        platform.processor() or "unknown CPU",
    )
    tools = []
    for argv in (["git", "--version"], ["ssh", "-V"]):
        try:
            done = subprocess.run(argv, capture_output=True, text=True, check=False)
            tools.append((done.stdout or done.stderr).strip().split(",")[0])
        except OSError:
            pass
    return (
        f"{os.cpu_count()} CPUs ({cpu}), {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}, {', '.join(tools)}"
    )


class LoadWatch:
    """Was the CPU quiet? The CPU time other processes took during the run, and the 1-minute load
    average.

    The load average counts the benchmark's own processes too (four runners make a load of 2 on an
    idle machine) and lags by a minute, so quiet is judged by what the machine's busy time
    (/proc/stat) exceeds the CPU time of this process and every child it waited for: work that is
    not the benchmark's.
    """

    def __init__(self) -> None:
        self.samples = [_load()]
        self.began, self.busy, self.own = time.monotonic(), _busy(), _own()

    def sample(self) -> None:
        self.samples.append(_load())

    def others(self) -> float:
        """The share of the machine's CPU time, since this watch began, spent by processes not the
        benchmark's."""
        cpus = os.cpu_count() or 1
        span = (time.monotonic() - self.began) * cpus
        return max(0.0, (_busy() - self.busy) - (_own() - self.own)) / span if span > 0 else 0.0

    def note(self) -> str:
        self.sample()
        low, high, cpus = min(self.samples), max(self.samples), os.cpu_count() or 1
        others = self.others()
        load = (
            f"load average {low:.1f} to {high:.1f} on {cpus} CPUs, the benchmark's own "
            "processes included"
        )
        if others <= 0.1:
            return (
                f"CPU quiet during the run: other processes took {others:.0%} of the CPU time "
                f"({load})."
            )
        return (
            f"**Taken on a shared machine**: other processes took {others:.0%} of the CPU time "
            f"({load}), "
            "so times are upper bounds; ratios measured side by side hold better."
        )


def stamp() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")


def _busy() -> float:
    """Seconds of CPU time the whole machine has spent not idle since boot (/proc/stat)."""
    fields = (_read("/proc/stat").splitlines() or ["cpu"])[0].split()[1:]
    ticks = [int(f) for f in fields if f.isdigit()]
    idle = sum(ticks[3:5])  # idle, iowait
    return (sum(ticks[:8]) - idle) / os.sysconf("SC_CLK_TCK") if len(ticks) >= 5 else 0.0


def _own() -> float:
    """CPU seconds of this process and of every child it waited for."""
    me, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return me.ru_utime + me.ru_stime + children.ru_utime + children.ru_stime


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


def header(command: str, load: LoadWatch) -> list[str]:
    """The first lines of a generated section: the command, when, the machine and how loaded it
    was."""
    note = load.note()
    print(note)
    return [
        f"Generated by `{command}` on {stamp()}.",
        "",
        f"- Machine: {machine_line()}.",
        f"- {note}",
    ]


def finish(*, no_docs: bool, docs: Path, section: str, end_marker: str, lines: list[str]) -> None:
    """Write the generated section (unless --no-docs) and say so."""
    if not no_docs:
        write_section(docs, section, end_marker, lines)
        print(f"wrote {docs}")


def cleanup(tmp: Path, *, keep: bool) -> None:
    """Remove a benchmark's temporary directory, or with --keep print where it is."""
    if keep:
        print(f"kept {tmp}")
    else:
        shutil.rmtree(tmp, ignore_errors=True)
