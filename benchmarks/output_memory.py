"""Does the runner's memory stay flat while a job prints 1 GiB?

executor.run() reads a job's output in chunks: it hashes and counts every byte, redacts, and keeps
only the last max_output_bytes, so the runner should not
grow with what the job prints. This script checks that with real jobs:

1. a job that prints 1 GiB of zero bytes (`head -c 1073741824 /dev/zero`), the
   fast path of the redactor;
2. a job that prints 1 GiB of log lines full of "-", ":" and "=" (a Python
   one-liner), which sends every chunk through the credential patterns.

For each it measures the runner's own peak resident memory: VmHWM from /proc/self/status, reset
through /proc/self/clear_refs right before the run (where the kernel refuses the reset it falls back
to ru_maxrss of RUSAGE_SELF). The job is a child process, so its memory is not counted. It prints a
table and rewrites the section "## Runner memory while a job prints 1 GiB" of docs/performance.md
(the generated part; notes below the end marker are kept).

Usage: python benchmarks/output_memory.py [--mib N] [--no-docs]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import resource
import sys
import tempfile
import time
from pathlib import Path

from perfdoc import write_section

from mergegate.execution import executor

SECTION = "## Runner memory while a job prints 1 GiB"
END_MARKER = (
    "<!-- end of output_memory.py output: text below, up to the next ## heading, is kept -->"
)
DOCS = Path(__file__).resolve().parents[1] / "docs" / "performance.md"
SEARCH_PATH = "/usr/local/bin:/usr/bin:/bin"
LOG_WRITER = (
    "import sys\n"
    "line = b'2024-05-01T12:00:00Z INFO build-step: compiling src/module_a.c -> obj/module_a.o "
    "[ok=1]\\n'\n"
    "block = line * (1048576 // len(line) + 1)\n"
    "left = int(sys.argv[1])\n"
    "while left > 0:\n"
    "    left -= sys.stdout.buffer.write(block[:left])\n"
)


def _status_kib(field: str) -> int | None:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return None


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")  # 5: reset the peak RSS (VmHWM)
    except OSError:
        return False
    return True


def measure(name: str, argv: list[str], size: int, workspace: Path) -> dict[str, object]:
    request = executor.ExecRequest(
        argv=tuple(argv),
        workspace=workspace,
        cwd="",
        env={"PATH": SEARCH_PATH},
        secrets=("not-in-the-output-0123456789",),
        limits=executor.ProcessLimits(timeout_seconds=600, max_output_bytes=65536),
        search_path=SEARCH_PATH,
        run_id="bench",
    )
    before_kib = _status_kib("VmRSS") or 0
    exact = _reset_peak()
    maxrss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    started = time.perf_counter()
    result = executor.run(request)
    seconds = time.perf_counter() - started
    peak_kib = (_status_kib("VmHWM") if exact else None) or resource.getrusage(
        resource.RUSAGE_SELF
    ).ru_maxrss
    if result.status != "succeeded" or result.stdout.bytes != size:
        raise SystemExit(
            f"{name}: {result.status} {result.reason} after {result.stdout.bytes} bytes"
        )
    return {
        "name": name,
        "bytes": result.stdout.bytes,
        "seconds": seconds,
        "mib_per_s": size / seconds / 2**20,
        "before_mib": before_kib / 1024,
        "peak_mib": peak_kib / 1024,
        "growth_mib": (peak_kib - (before_kib if exact else maxrss_before)) / 1024,
        "method": "VmHWM reset before the run" if exact else "ru_maxrss (lifetime peak)",
    }


def machine() -> str:
    model = "unknown CPU"
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        pass
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{datetime.date.today().isoformat()}, {platform.system()} {platform.release()}, "
        f"nproc {cpus} ({model}), Python {platform.python_version()}"
    )


def render(rows: list[dict[str, object]], size: int) -> list[str]:
    lines = [
        f"Measured by `python benchmarks/output_memory.py` on {machine()}.",
        "",
        "`executor.run()` with max_output_bytes=65536, no sandbox, on a job printing "
        f"{size / 2**30:g} GiB",
        "to stdout. RSS is the runner's own; the job is a child process and is not counted.",
        "",
        "| job output | bytes read | wall time | throughput | runner RSS before | peak RSS during "
        "| growth |",
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for r in rows:
        lines.append(
            f"| {r['name']} | {r['bytes']:,} | {r['seconds']:.1f} s | {r['mib_per_s']:.0f} MiB/s "
            f"| {r['before_mib']:.1f} MiB | {r['peak_mib']:.1f} MiB | {r['growth_mib']:+.1f} MiB |"
        )
    lines += ["", f"Peak measured as {rows[0]['method']}."]
    return lines


def write_docs(path: Path, generated: list[str]) -> None:
    write_section(path, SECTION, END_MARKER, generated)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--mib", type=int, default=1024, help="output size per job in MiB (default 1024)"
    )
    parser.add_argument(
        "--no-docs", action="store_true", help="print only; leave docs/performance.md alone"
    )
    args = parser.parse_args()
    size = args.mib * 2**20
    with tempfile.TemporaryDirectory(prefix="mergegate-bench-") as tmp:
        workspace = Path(tmp)
        measure("warm-up", ["head", "-c", "1048576", "/dev/zero"], 1048576, workspace)
        rows = [
            measure(
                "zero bytes (`head -c N /dev/zero`)",
                ["head", "-c", str(size), "/dev/zero"],
                size,
                workspace,
            ),
            measure(
                "log lines (every chunk through the patterns)",
                [sys.executable, "-c", LOG_WRITER, str(size)],
                size,
                workspace,
            ),
        ]
    generated = render(rows, size)
    print("\n".join([SECTION, "", *generated]))
    if not args.no_docs:
        write_docs(DOCS, generated)
        print(f"\nwrote {DOCS}")


if __name__ == "__main__":
    main()
