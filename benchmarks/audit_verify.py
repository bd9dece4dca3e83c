"""`mergegate audit verify` over 100,000 records: wall time and peak memory of the whole process.

1. It builds a bare gate: `approved` holds the policy (the trust root) and
   `mergegate/audit` one runner commit whose tree holds the hash-chained log
   of N jobs (a `started` and a `finished` each, then one `scanned`: 2N + 1
   records, rotated into audit/log-NNNNNN.jsonl files of 1,000), built with
   mergegate.audit.log and `git fast-import`.
2. It times `python -m mergegate audit verify --json` on it (a subprocess,
   after one untimed warm-up, mergegate's modules compiled to bytecode first
   as an installed copy has them) and reads the child's peak RSS.
3. It writes the section "## audit verify, 100,000 records" of
   docs/performance.md (notes below the end marker are kept).

Usage: python benchmarks/audit_verify.py [--records 100000] [--repeat 5] [--commits 1] [--no-docs]
[--keep]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import NamedTuple

from perfdoc import LoadWatch, cleanup, finish, header
from poll_scale import (
    ALICE,
    RUNNER,
    T0,
    _commit,
    fast_import,
    git,
    isolate,
    past_records,
    policy_yaml,
    precompile,
)

from mergegate.audit import log as audit
from mergegate.audit.records import GENESIS
from mergegate.facts import audit_commits as audit_branch
from mergegate.facts.branches import AUDIT_BRANCH
from mergegate.git.repo import Repo

SECTION = "## audit verify, 100,000 records"
END_MARKER = (
    "<!-- end of audit_verify.py output: text below, up to the next ## heading, is kept -->"
)
DOCS = Path(__file__).resolve().parents[1] / "docs" / "performance.md"


def build(base: Path, records: int, commits: int = 1) -> tuple[Path, int, int]:
    """A bare gate with about `records` audit records in `commits` audit commits (each appending the
    next records, as runner passes do); returns (path, records, bytes of log)."""
    remote = base / "gate.git"
    base.mkdir(parents=True, exist_ok=True)
    git(base, "init", "-q", "--bare", str(remote))
    key = base / "alice"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", str(key)], check=True
    )
    public = Path(f"{key}.pub").read_text().strip()
    marks = fast_import(
        remote,
        _commit(
            "refs/heads/approved",
            1,
            ALICE,
            T0,
            "initial policy",
            [],
            {"policy/policy.yaml": policy_yaml(public)},
        ),
        base / "root.marks",
    )
    root = marks[1]
    jobs = max(1, (records - 1) // 2)
    # The records name commits and blobs; `audit verify` checks the chain, and that every commit a
    # record names is in the history its audit commit's trailer judged (here: the one commit).
    merges = [root] * jobs
    blobs = {f"jobs/job-{i}.yaml": f"{i:040x}" for i in range(1, jobs + 1)}
    sealed = audit.seal(past_records(jobs, root, merges, blobs), after_seq=0, after_hash=GENESIS)
    repo = Repo(remote)
    files = audit.append(repo, None, audit.read_tail(repo, None), sealed)
    # Where each record ends: (its file, the offset after its line), to cut the files as each commit
    # left them.
    ends: list[tuple[str, int]] = []
    for path, data in files.items():
        offset = 0
        for line in data.splitlines(keepends=True):
            offset += len(line)
            ends.append((path, offset))
    size = -(-len(sealed) // max(1, commits))
    stream = []
    for start in range(0, len(sealed), size):
        stop = min(start + size, len(sealed))
        changed = {
            path: files[path][:end] for path, end in ends[start:stop]
        }  # the last end per file wins
        message = audit_branch.message(f"mergegate: audit seq {start + 1}-{stop}", root)
        # Successive commits to one ref in one fast-import stream chain onto each other.
        stream.append(
            _commit(
                f"refs/heads/{AUDIT_BRANCH}", None, RUNNER, T0 + 60 + start, message, [], changed
            )
        )
    fast_import(remote, b"".join(stream))
    # fast-import stores each log file as a delta of the one before (50 deep), a layout no gate has:
    # an audit branch grows by pushes (loose objects) that gc, or the host, repacks with deltas
    # chosen afresh. Repacked once so, reading the 100 files costs git about 120 ms of CPU less
    # (av8, session 8).
    git(remote, "repack", "-adfq")
    return remote, len(sealed), sum(len(data) for data in files.values())


# Runs a module as `python -m` would, then writes the process's own peak RSS (KiB) to $MG_SELF_RSS.
SELF_RSS = (
    "import os, resource, runpy, sys\n"
    "sys.argv = sys.argv[1:]\n"
    "try:\n"
    "    runpy.run_module(sys.argv[0], run_name='__main__', alter_sys=True)\n"
    "finally:\n"
    "    open(os.environ['MG_SELF_RSS'], "
    "'w').write(str(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss))\n"
)


def python_module(python: str, module: str, *args: str) -> list[str]:
    """argv running `python -m module args` so that `measured` reads that process's own peak RSS."""
    return [python, "-c", SELF_RSS, module, *args]


class Run(NamedTuple):
    """One whole-process run, as `measured` takes it."""

    wall: float  # seconds
    own: int  # peak RSS of the Python process itself (bytes)
    # GNU time's %M: the peak RSS of the largest of it and the children it waited for (bytes)
    total: int
    out: str  # its stdout
    cpu: float  # user + system seconds of it and every child it waited for (workers, git)


def measured(argv: list[str], env: dict[str, str] | None = None, cwd: Path | None = None) -> Run:
    """Wall seconds, own peak RSS, peak RSS with children (bytes), stdout and CPU seconds of one
    process.

    Peaks: GNU time's %M (`/usr/bin/time`) is the process and every child it waited for (git, for
    mergegate; a job's process for a runner). For argv made by python_module, the Python process's
    own peak is read too; else it is reported as the %M figure. (wait4() from this 40 MB process
    would not do: on Linux a child's ru_maxrss starts at its parent's size at fork.) CPU is GNU
    time's %U + %S: user and system time of the process and every child it waited for, which load
    inflates less than wall time. RuntimeError if the process fails.
    """
    if not Path("/usr/bin/time").exists():
        raise RuntimeError("GNU time is needed to measure peak memory: apt-get install time")
    with tempfile.TemporaryDirectory(prefix="mg-rss-") as scratch:
        total_file, self_file = Path(scratch, "total"), Path(scratch, "self")
        wrapped = ["/usr/bin/time", "-f", "%M %U %S", "-o", str(total_file), *argv]
        full_env = {**(env if env is not None else os.environ), "MG_SELF_RSS": str(self_file)}
        t = time.perf_counter()
        done = subprocess.run(
            wrapped,
            capture_output=True,
            stdin=subprocess.DEVNULL,
            env=full_env,
            cwd=cwd,
            check=False,
        )
        wall = time.perf_counter() - t
        peak, user, system = total_file.read_text().strip().splitlines()[-1].split()
        total = int(peak) * 1024
        own = int(self_file.read_text()) * 1024 if self_file.exists() else total
    if done.returncode != 0:
        raise RuntimeError(
            f"{' '.join(argv[:5])} failed ({done.returncode}): "
            f"{done.stderr.decode(errors='replace')[-800:]}"
        )
    return Run(wall, own, total, done.stdout.decode(errors="replace"), float(user) + float(system))


def tree_memory(
    argv: list[str], env: dict[str, str] | None = None, every: float = 0.005
) -> tuple[int, int, int]:
    """Peak memory of a process and all its descendants, sampled every `every` seconds from
    /proc/<pid>/smaps_rollup: (peak summed PSS of its Python processes, peak summed PSS of all,
    most processes at once). PSS divides each shared page among the processes that map it, so
    forked workers are counted for what they add, not for the pages they share with their parent.
    (A separate run: sampling takes CPU the timed runs should not lose.)"""
    with tempfile.TemporaryDirectory(prefix="mg-pss-") as scratch:
        full_env = {
            **(env if env is not None else os.environ),
            "MG_SELF_RSS": str(Path(scratch, "self")),
        }
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            env=full_env,
        )
        python = everything = most = 0
        while proc.poll() is None:
            pids = _tree(proc.pid)
            sizes = {pid: _pss(pid) for pid in pids}
            python = max(
                python, sum(size for pid, size in sizes.items() if _comm(pid).startswith("python"))
            )
            everything = max(everything, sum(sizes.values()))
            most = max(most, len(pids))
            time.sleep(every)
        err = proc.stderr.read() if proc.stderr else b""
    if proc.wait() != 0:
        raise RuntimeError(
            f"{' '.join(argv[:5])} failed ({proc.returncode}): "
            f"{err.decode(errors='replace')[-800:]}"
        )
    return python, everything, most


def _tree(pid: int) -> list[int]:
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        try:
            for task in os.listdir(f"/proc/{current}/task"):
                todo += [
                    int(child)
                    for child in Path(f"/proc/{current}/task/{task}/children").read_text().split()
                ]
        except (OSError, ValueError):  # gone meanwhile
            continue
    return found


def _pss(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 0


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""


def verify_argv(remote: Path) -> list[str]:
    return python_module(
        sys.executable, "mergegate", "audit", "verify", "--repo", str(remote), "--json"
    )


def verify_once(remote: Path, root: str) -> Run:
    run = measured(verify_argv(remote), env={**os.environ, "MERGEGATE_TRUST_ROOT": root})
    assert '"ok": true' in run.out, run.out[:300]
    return run


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--records", type=int, default=100_000, help="records in the log (default 100000)"
    )
    parser.add_argument("--repeat", type=int, default=5, help="timed runs (default 5)")
    parser.add_argument(
        "--commits",
        type=int,
        default=1,
        help="audit commits the records are spread over, as passes append them (default 1)",
    )
    parser.add_argument("--no-docs", action="store_true", help=f"do not rewrite {DOCS.name}")
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary gate (its path is printed)"
    )
    args = parser.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix="mergegate-bench-audit-"))
    load = LoadWatch()
    try:
        isolate(tmp / "home")
        t = time.perf_counter()
        remote, records, size = build(tmp, args.records, args.commits)
        built = time.perf_counter() - t
        root = git(remote, "rev-parse", "approved")
        compiled = precompile()  # as an installed copy: no run compiles mergegate from source
        runs: list[Run] = []
        for i in range(args.repeat + 1):  # the first is a warm-up
            run = verify_once(remote, root)
            if i:
                runs.append(run)
            load.sample()
        python_pss, all_pss, processes = tree_memory(
            verify_argv(remote), env={**os.environ, "MERGEGATE_TRUST_ROOT": root}
        )
        load.sample()
        walls, cpus = [r.wall for r in runs], [r.cpu for r in runs]
        peaks, totals = [r.own for r in runs], [r.total for r in runs]
        median, fastest = statistics.median(walls), min(walls)
        print(
            f"audit verify, {records} records ({size / 2**20:.1f} MiB): median {median:.2f} s, min "
            f"{fastest:.2f} s, "
            f"CPU median {statistics.median(cpus):.2f} s, peak RSS {max(peaks) / 2**20:.1f} MiB, "
            f"Python processes' peak PSS {python_pss / 2**20:.1f} MiB (with git "
            f"{all_pss / 2**20:.1f} MiB)"
        )
        lines = [
            *header(
                f"python benchmarks/audit_verify.py --records {args.records} --repeat {args.repeat}"
                + (f" --commits {args.commits}" if args.commits != 1 else ""),
                load,
            ),
            f"- Log: {records} records in {len(range(0, records, audit.RECORDS_PER_FILE))} files, "
            f"{size / 2**20:.1f} MiB, "
            f"{'one commit' if args.commits == 1 else f'{args.commits} commits'} on {AUDIT_BRANCH} "
            f"(built in {built:.1f} s).",
            "- Each run is `python -m mergegate audit verify --json` as a subprocess, which checks "
            "the log files in "
            "forked workers (one per CPU); CPU is user + system time of it, its workers and its "
            "git processes "
            "(GNU time); peak RSS is the main Python process's own ru_maxrss; PSS (proportional: a "
            "page shared by "
            "the workers and their parent counted once in all) is sampled every 5 ms over the "
            "whole process tree "
            f"in one more run (at most {processes} processes at once).",
            f"- {compiled}",
            "",
            "| measurement | median | min | runs | goal |",
            "|---|---:|---:|---:|---|",
            f"| wall time | {median:.2f} s | {fastest:.2f} s | {len(walls)} | at most 1 s |",
            f"| CPU time, with workers and git | {statistics.median(cpus):.2f} s | {min(cpus):.2f} "
            f"s | {len(cpus)} | |",
            f"| peak RSS, main process | {statistics.median(peaks) / 2**20:.1f} MiB | "
            f"{min(peaks) / 2**20:.1f} MiB | "
            f"{len(peaks)} | at most 60 MiB |",
            f"| peak PSS, all its Python processes (main and workers) | {python_pss / 2**20:.1f} "
            "MiB | | 1 | at most 60 MiB |",
            f"| peak PSS, with its git processes | {all_pss / 2**20:.1f} MiB | | 1 | (git maps the "
            "pack) |",
            "| peak RSS of the largest process, git included (GNU time) | "
            f"{statistics.median(totals) / 2**20:.1f} MiB | "
            f"{min(totals) / 2**20:.1f} MiB | {len(totals)} | |",
        ]
        finish(no_docs=args.no_docs, docs=DOCS, section=SECTION, end_marker=END_MARKER, lines=lines)
    finally:
        cleanup(tmp, keep=args.keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
