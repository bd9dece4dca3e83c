"""Runner throughput: one merge adding N trivial jobs, run by one `run --once` (issue 12).

Builds with `git fast-import` a gate (a bare remote and a runner clone) whose `approved` is the
policy, then one merge signed by an approver adding N jobs (`echo`), and times `python -m mergegate
run --once --json` in the runner clone, sequentially and with `--parallel P`. Each figure is a fresh
gate (so no run benefits from another's objects). Per-job cost is the wall time over N; "flat"
compares the claim-to-claim interval of the first 10% of jobs with the last 10% (from the `started`
records' times, the same clock), so a cost that grows with the jobs already recorded shows as a
ratio above 1.

Usage: python benchmarks/throughput.py [--jobs 1000] [--parallel 1,8] [--repeat 1]
                                       [--no-docs] [--keep]

The figures go to "## Runner throughput" in docs/performance.md, with the machine,
the date, the load average and the command to rerun.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

from perfdoc import LoadWatch, cleanup, finish, header
from poll_scale import ALICE, BOB, T0, _commit, fast_import, git, ident, isolate, precompile

SECTION = "## Runner throughput"
END_MARKER = "<!-- end of throughput.py output: text below, up to the next ## heading, is kept -->"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "performance.md"


def policy(public_key: str) -> bytes:
    return (
        f"version: 1\napprovers:\n  - name: {ALICE[0]}\n    email: {ALICE[1]}\n    key: "
        f"{json.dumps(public_key)}\n"
        "approvals_required: 1\nlimits:\n  max_timeout_seconds: 600\ncommands:\n  - program: "
        "echo\n  - program: sleep\n"
    ).encode()


def gate(
    base: Path,
    name: str,
    key: Path,
    jobs: dict[str, bytes],
    *,
    policy_for: Callable[[str], bytes] = policy,
) -> tuple[Path, str]:
    """A remote whose approved is the policy (`policy_for(alice's public key)`), then one merge
    signed by alice adding `jobs`; a runner clone."""
    remote, runner = base / f"{name}.git", base / f"{name}-runner"
    git(base, "init", "-q", "--bare", str(remote))
    public = Path(f"{key}.pub").read_text().strip()
    stream = _commit(
        "refs/heads/approved",
        1,
        ALICE,
        T0,
        "initial policy",
        [],
        {"policy/policy.yaml": policy_for(public)},
    )
    stream += _commit(
        "refs/heads/proposal", 2, BOB, T0 + 10, f"propose {len(jobs)} jobs", [":1"], jobs
    )
    marks = fast_import(remote, stream, base / f"{name}.marks")
    root, side = marks[1], marks[2]
    tree = git(remote, "rev-parse", f"{side}^{{tree}}")
    merge = git(
        remote,
        "-c",
        "gpg.format=ssh",
        "-c",
        f"user.signingkey={key}",
        "commit-tree",
        "-S",
        tree,
        "-p",
        root,
        "-p",
        side,
        "-m",
        "Merge the jobs into approved",
        env=ident(ALICE),
    )
    git(remote, "update-ref", "refs/heads/approved", merge)
    git(remote, "update-ref", "-d", "refs/heads/proposal")
    git(base, "clone", "-q", str(remote), str(runner))
    return runner, root


def trivial_jobs(n: int, command: str = "[echo, 'job {i}']") -> dict[str, bytes]:
    return {
        f"jobs/job-{i:05d}.yaml": f"id: job-{i:05d}\ncommand: {command.format(i=i)}\n".encode()
        for i in range(n)
    }


def records(remote: Path) -> list[dict[str, Any]]:
    names = git(remote, "ls-tree", "-r", "--name-only", "mergegate/audit", "audit/").split()
    out: list[dict[str, Any]] = []
    for name in sorted(n for n in names if n.endswith(".jsonl")):
        out += [
            json.loads(line)
            for line in git(remote, "show", f"mergegate/audit:{name}").splitlines()
            if line
        ]
    return out


def check_once_each(found: list[dict[str, Any]], n: int) -> None:
    started = [r for r in found if r["event"] == "started"]
    finished = [r for r in found if r["event"] == "finished"]
    if len(started) != n or len({r["path"] for r in started}) != n or len(finished) != n:
        raise RuntimeError(
            f"expected {n} jobs once each: {len(started)} started, {len(finished)} finished"
        )
    if {r["status"] for r in finished} != {"succeeded"}:
        raise RuntimeError(f"not all succeeded: {sorted({r['status'] for r in finished})}")


def flatness(found: list[dict[str, Any]]) -> float:
    """The time the last 10% of jobs took to be claimed over the time the first 10% took (1.0:
    flat).

    Claims go in batches, so this spans whole batches: the first tenth includes the batch
    ramp-up."""
    times = sorted(
        datetime.fromisoformat(r["time"].replace("Z", "+00:00")).timestamp()
        for r in found
        if r["event"] == "finished"
    )
    tenth = max(1, len(times) // 10)
    first, last = times[tenth] - times[0], times[-1] - times[-1 - tenth]
    return last / first if first > 0 else float("nan")


def workspace_fs() -> str:
    """Where the runner makes its jobs' workspaces (TMPDIR): the file system, and for ext4 whether
    it has a journal. Without one, each new file or folder walks past the inodes freed in the last
    minute or more (ext4's recently_deleted), so a figure depends on what was removed just before
    it."""
    where = os.path.realpath(tempfile.gettempdir())
    best = ("", "?", "?")
    try:
        for line in Path("/proc/self/mountinfo").read_text().splitlines():
            fields = line.split()
            mount, rest = fields[4], fields[fields.index("-") + 1 :]
            if (where == mount or where.startswith(mount.rstrip("/") + "/")) and len(mount) >= len(
                best[0]
            ):
                best = (mount, rest[0], rest[1])
    except (OSError, ValueError, IndexError):
        return f"{where}: file system unknown"
    mount, kind, device = best
    text = f"{where} is on {kind} ({device} at {mount})"
    if kind == "ext4":
        try:
            task = Path(f"/sys/fs/ext4/{os.path.basename(device)}/journal_task").read_text().strip()
        except OSError:
            return text
        text += (
            ", without a journal: every new file or folder walks past the inodes freed in the last "
            "minute"
            if task == "<none>"
            else ", with a journal"
        )
    return text


def one_run(tmp: Path, key: Path, n: int, parallel: int, label: str) -> dict[str, Any]:
    runner, root = gate(tmp, label, key, trivial_jobs(n))
    argv = [sys.executable, "-m", "mergegate", "run", "--once", "--json", "--trust-root", root]
    if parallel > 1:
        argv += ["--parallel", str(parallel)]
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    proc = subprocess.run(argv, cwd=runner, capture_output=True, text=True, env=dict(os.environ))
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # The runner and everything it waited for: its git processes, its spawner and the jobs the
    # spawner reaped.
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    if proc.returncode != 0:
        try:
            odd = [j for j in json.loads(proc.stdout)["jobs"] if j["status"] != "succeeded"][:3]
        except (ValueError, KeyError):
            odd = []
        raise RuntimeError(f"run --once exited {proc.returncode}: {proc.stderr[-2000:]} {odd}")
    found = records(tmp / f"{label}.git")
    check_once_each(found, n)
    pushes = int(git(tmp / f"{label}.git", "rev-list", "--count", "mergegate/audit"))
    return {"wall": wall, "cpu": cpu, "flat": flatness(found), "pushes": pushes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--jobs", type=int, default=1000, help="trivial jobs in the one merge (default 1000)"
    )
    parser.add_argument(
        "--parallel", default="1,8", help="comma-separated --parallel values (1: sequential)"
    )
    parser.add_argument(
        "--repeat", type=int, default=1, help="fresh gates per figure; the median is reported"
    )
    parser.add_argument("--no-docs", action="store_true", help=f"do not rewrite {DOCS.name}")
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary files (their path is printed)"
    )
    args = parser.parse_args(argv)
    command = "python benchmarks/throughput.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )
    tmp = Path(tempfile.mkdtemp(prefix="mergegate-bench-throughput-"))
    load = LoadWatch()
    rows = []
    try:
        isolate(tmp / "home")
        compiled = precompile()  # as an installed copy: no runner compiles mergegate from source
        key = tmp / "alice"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", str(key)],
            check=True,
        )
        for parallel in (int(p) for p in args.parallel.split(",")):
            runs = [
                one_run(tmp, key, args.jobs, parallel, f"p{parallel}-{k}")
                for k in range(args.repeat)
            ]
            load.sample()
            wall = statistics.median(r["wall"] for r in runs)
            row = {
                "parallel": parallel,
                "wall": wall,
                "per_job_ms": 1000 * wall / args.jobs,
                "cpu_ms": 1000 * statistics.median(r["cpu"] for r in runs) / args.jobs,
                "flat": statistics.median(r["flat"] for r in runs),
                "pushes": runs[0]["pushes"],
                "load": os.getloadavg()[0],
            }
            print(
                f"--parallel {parallel}: {wall:.2f} s, {row['per_job_ms']:.1f} ms/job "
                f"({row['cpu_ms']:.1f} ms of CPU), "
                f"last/first {row['flat']:.2f}, "
                f"{row['pushes']} audit commits, load {row['load']:.1f}",
                flush=True,
            )
            rows.append(row)
        lines = [
            *header(command, load),
            f"- {compiled}",
            f"- Job workspaces (TMPDIR): {workspace_fs()} (see the notes).",
            f"- Work: one signed merge adding {args.jobs} trivial jobs (`echo`), one `python -m "
            "mergegate run --once` "
            "in a fresh runner clone (local bare remote), wall clock including interpreter start; "
            "every job exactly "
            "one `started` and one `finished` (checked).",
            "- last/first: the time the last 10% of jobs took (from their `finished` records' "
            "times) over the time the first 10% took.",
            "- CPU per job: user + system time of the runner and every process it waited for (git, "
            "its spawner "
            "and the jobs), over the jobs; two CPUs can at best halve it in wall time.",
            "",
            "| runner | wall | per job | CPU per job | last/first | audit commits | load avg (1 "
            "min) |",
            "|---|---:|---:|---:|---:|---:|---:|",
            *(
                f"| {'sequential' if r['parallel'] == 1 else '--parallel ' + str(r['parallel'])} | "
                f"{r['wall']:.2f} s | "
                f"{r['per_job_ms']:.1f} ms | {r['cpu_ms']:.1f} ms | {r['flat']:.2f} | "
                f"{r['pushes']} | {r['load']:.1f} |"
                for r in rows
            ),
        ]
        finish(no_docs=args.no_docs, docs=DOCS, section=SECTION, end_marker=END_MARKER, lines=lines)
    finally:
        cleanup(tmp, keep=args.keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
