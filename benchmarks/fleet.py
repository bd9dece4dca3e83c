"""Many runners on one merge (issue 9): do four runners help, or collide?

Builds with `git fast-import` a gate (a bare remote) whose `approved` is the policy,
then one merge signed by an approver adding N jobs, and starts R runners at once
(`python -m mergegate run --once --json --runner-name rK`, each in its own clone of the
remote), timing until the last exits. Every case is a fresh gate. Checked after each:
every job exactly one `started` and one `finished` (all `succeeded`), every runner
exit 0.

Cases (the issue's goals): 100 trivial jobs (`echo`), 1 runner vs 4 (4 no slower); 20 jobs of 2 s
(`sleep 2`), 1 runner vs 4 (4 at least 3.5x faster). For each, also the bound: the same jobs dealt
over R gates of their own, one runner alone on each, all started at once (nothing to race for: what
no claim protocol can beat on this machine). CPU is that of every runner and its git.

Usage: python benchmarks/fleet.py [--trivial 100] [--slow 20] (0: leave that case out)
[--slow-seconds 2] [--runners 1,4]
                                  [--repeat 1] [--no-docs] [--keep]

The figures go to "## Many runners" in docs/performance.md.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from perfdoc import LoadWatch, cleanup, finish, header
from poll_scale import git, isolate, precompile
from throughput import check_once_each, gate, records, trivial_jobs

SECTION = "## Many runners"
END_MARKER = "<!-- end of fleet.py output: text below, up to the next ## heading, is kept -->"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "performance.md"


def race(tmp: Path, key: Path, jobs: dict[str, bytes], runners: int, label: str) -> dict[str, Any]:
    first, root = gate(tmp, label, key, jobs)
    remote = tmp / f"{label}.git"
    clones = [first] + [tmp / f"{label}-runner{k}" for k in range(1, runners)]
    for clone in clones[1:]:
        git(tmp, "clone", "-q", str(remote), str(clone))
    argv = [sys.executable, "-m", "mergegate", "run", "--once", "--json", "--trust-root", root]
    before = _cpu()
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            [*argv, "--runner-name", f"r{k + 1}"],
            cwd=clone,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )
        for k, clone in enumerate(clones)
    ]
    outputs = [p.communicate() for p in procs]
    wall = time.perf_counter() - started
    cpu = _cpu() - before
    codes = [p.returncode for p in procs]
    if any(codes):
        raise RuntimeError(f"runner exit codes {codes}: {[err[-500:] for _, err in outputs]}")
    found = records(remote)
    check_once_each(found, len(jobs))
    per_runner = [
        sum(1 for r in found if r["event"] == "started" and r["runner"] == f"r{k + 1}")
        for k in range(runners)
    ]
    pushes = int(git(remote, "rev-list", "--count", "mergegate/audit"))
    return {"wall": wall, "per_runner": per_runner, "pushes": pushes, "cpu": cpu}


def _cpu() -> float:
    """CPU seconds (user + system) of every child process waited for so far: the runners and their
    git."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def apart(tmp: Path, key: Path, jobs: dict[str, bytes], runners: int, label: str) -> dict[str, Any]:
    """The bound no claim protocol can beat on this machine: `runners` runners started at once, each
    alone on a gate of its own holding its share of `jobs` (nothing to race for), wall until the
    last exits."""
    names = sorted(jobs)
    shares = [{name: jobs[name] for name in names[k::runners]} for k in range(runners)]
    gates = [gate(tmp, f"{label}-{k}", key, share) for k, share in enumerate(shares)]
    before = _cpu()
    started = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-m",
                "mergegate",
                "run",
                "--once",
                "--json",
                "--trust-root",
                root,
                "--runner-name",
                f"r{k + 1}",
            ],
            cwd=clone,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=dict(os.environ),
        )
        for k, (clone, root) in enumerate(gates)
    ]
    outputs = [p.communicate() for p in procs]
    wall = time.perf_counter() - started
    cpu = _cpu() - before
    if any(p.returncode for p in procs):
        raise RuntimeError(
            f"runner exit codes {[p.returncode for p in procs]}: "
            f"{[err[-500:] for _, err in outputs]}"
        )
    for k, share in enumerate(shares):
        check_once_each(records(tmp / f"{label}-{k}.git"), len(share))
    pushes = sum(
        int(git(tmp / f"{label}-{k}.git", "rev-list", "--count", "mergegate/audit"))
        for k in range(runners)
    )
    return {
        "wall": wall,
        "per_runner": [len(share) for share in shares],
        "pushes": pushes,
        "cpu": cpu,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--trivial",
        type=int,
        default=100,
        help="trivial jobs in the first case (default 100; 0 leaves it out)",
    )
    parser.add_argument(
        "--slow",
        type=int,
        default=20,
        help="slow jobs in the second case (default 20; 0 leaves it out)",
    )
    parser.add_argument(
        "--slow-seconds", type=float, default=2.0, help="how long each slow job sleeps (default 2)"
    )
    parser.add_argument(
        "--runners", default="1,4", help="comma-separated runner counts (default 1,4)"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="fresh gates per figure; the median is reported"
    )
    parser.add_argument("--no-docs", action="store_true", help=f"do not rewrite {DOCS.name}")
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary files (their path is printed)"
    )
    args = parser.parse_args(argv)
    command = "python benchmarks/fleet.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )
    counts = [int(c) for c in args.runners.split(",")]
    tmp = Path(tempfile.mkdtemp(prefix="mergegate-bench-fleet-"))
    load = LoadWatch()
    rows: list[dict[str, Any]] = []
    try:
        isolate(tmp / "home")
        compiled = precompile()  # as an installed copy: no runner compiles mergegate from source
        key = tmp / "alice"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", str(key)],
            check=True,
        )
        cases = [
            (f"{args.trivial} trivial jobs (`echo`)", "trivial", trivial_jobs(args.trivial)),
            (
                f"{args.slow} jobs of {args.slow_seconds:g} s (`sleep`)",
                "slow",
                trivial_jobs(args.slow, f"[sleep, '{args.slow_seconds:g}']"),
            ),
        ]
        cases = [
            case for case in cases if case[2]
        ]  # --trivial 0 or --slow 0: that case is left out
        for title, short, jobs in cases:
            base: float | None = None
            for runners in counts:
                runs = [
                    race(tmp, key, jobs, runners, f"{short}-{runners}-{k}")
                    for k in range(args.repeat)
                ]
                load.sample()
                wall = statistics.median(r["wall"] for r in runs)
                base = wall if base is None else base
                row = {
                    "case": title,
                    "runners": runners,
                    "wall": wall,
                    "speedup": base / wall,
                    "cpu": statistics.median(r["cpu"] for r in runs),
                    "per_runner": runs[0]["per_runner"],
                    "pushes": runs[0]["pushes"],
                    "load": os.getloadavg()[0],
                }
                print(
                    f"{title}, {runners} runner(s): {wall:.2f} s ({row['speedup']:.2f}x the "
                    f"first), CPU {row['cpu']:.2f} s, jobs per runner "
                    f"{row['per_runner']}, {row['pushes']} audit commits, load {row['load']:.1f}",
                    flush=True,
                )
                rows.append(row)
            for runners in [c for c in counts if c > 1]:
                runs = [
                    apart(tmp, key, jobs, runners, f"{short}-apart-{runners}-{k}")
                    for k in range(args.repeat)
                ]
                load.sample()
                wall = statistics.median(r["wall"] for r in runs)
                assert base is not None
                row = {
                    "case": f"{title}, split over {runners} gates (no race: the bound)",
                    "runners": runners,
                    "wall": wall,
                    "speedup": base / wall,
                    "cpu": statistics.median(r["cpu"] for r in runs),
                    "per_runner": runs[0]["per_runner"],
                    "pushes": runs[0]["pushes"],
                    "load": os.getloadavg()[0],
                }
                print(
                    f"{row['case']}, {runners} runners: {wall:.2f} s ({row['speedup']:.2f}x the "
                    f"first), CPU {row['cpu']:.2f} s, "
                    f"{row['pushes']} audit commits, load {row['load']:.1f}",
                    flush=True,
                )
                rows.append(row)
        lines = [
            *header(command, load),
            f"- {compiled}",
            "- Each figure: one signed merge adding the jobs to a fresh gate (local bare remote), "
            "then that many "
            "`python -m mergegate run --once` started at once, each in its own clone with its own "
            "`--runner-name`; "
            "wall clock until the last exits. Checked: every job exactly one `started` and one "
            "`finished`, every "
            "runner exit 0.",
            "- *split over R gates*: the same jobs dealt over R gates of their own, one runner "
            "alone on each, all started "
            "at once: nothing to race for, so no claim protocol can beat it on this machine (the "
            "start-ups and the jobs "
            "share the same CPUs).",
            "",
            "| jobs | runners | wall | vs 1 runner | CPU (all runners and their git) | jobs run "
            "per runner | audit commits | load avg (1 min) |",
            "|---|---:|---:|---:|---:|---|---:|---:|",
            *(
                f"| {r['case']} | {r['runners']} | {r['wall']:.2f} s | {r['speedup']:.2f}x | "
                f"{r['cpu']:.2f} s | "
                f"{', '.join(map(str, r['per_runner']))} | {r['pushes']} | {r['load']:.1f} |"
                for r in rows
            ),
        ]
        finish(no_docs=args.no_docs, docs=DOCS, section=SECTION, end_marker=END_MARKER, lines=lines)
    finally:
        cleanup(tmp, keep=args.keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
