"""mergegate side by side with the seed it replaces, `agent-safe-runner==0.4.3` from PyPI.

The seed is installed into a temporary virtual environment (pip, from the
package index) and both do the same work in one run:

1. jobs: N approved trivial jobs (`echo`) run by one runner pass.
   mergegate: one signed merge adding N jobs, then `run --once`.
   seed: N jobs submitted and approved, then its worker loop (`work_once`,
   in-process, as its docs drive it) until the queue is empty.
2. history: with H past jobs, one more job approved and run.
   mergegate: a gate whose approved holds H processed jobs (poll_scale.py's
   builder), one new signed merge, `run --once`.
   seed: a queue and audit log holding H finished jobs (written directly, in
   the seed's own record format and hash chain), one submit + approve +
   work_once.
3. audit verify over R records: mergegate's `audit verify` against the
   seed's `agent-safe audit-verify`, wall time and peak RSS (wait4).
4. output: one job printing B bytes (`head -c B /dev/zero`): wall time and
   peak RSS of the runner process (`run --once` against `agent-safe run
   --execute`).

Only whole figures are compared (ratios seed / mergegate: above 1 means mergegate is ahead). The
figures go to "## Side by side with the seed" in docs/performance.md.

Usage: python benchmarks/compare_seed.py [--jobs 1000] [--history 10000] [--records 100000]
                                         [--output-bytes 1073741824] [--seed-venv DIR]
                                         [--no-docs] [--keep]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from audit_verify import build as build_audit_gate
from audit_verify import measured, python_module, tree_memory, verify_argv, verify_once
from perfdoc import LoadWatch, cleanup, finish, header
from poll_scale import (
    ALICE,
    build_gate,
    git,
    isolate,
    new_approved_job,
    precompile,
)
from throughput import gate

SEED = "agent-safe-runner==0.4.3"
SECTION = "## Side by side with the seed"
END_MARKER = (
    "<!-- end of compare_seed.py output: text below, up to the next ## heading, is kept -->"
)
DOCS = Path(__file__).resolve().parents[1] / "docs" / "performance.md"

# Runs inside the seed's virtual environment: python -c DRIVER MODE ARGS...
DRIVER = r"""
import json, sys, time, sqlite3, uuid
from pathlib import Path
from agent_safe_runner.core import JobStore
from agent_safe_runner.policy import Policy
from agent_safe_runner.audit import AuditLog

mode, work = sys.argv[1], Path(sys.argv[2])
work.mkdir(parents=True, exist_ok=True)
db, log, pol = work / "q.sqlite3", work / "audit.jsonl", work / "policy.json"

def policy(programs):
    pol.write_text(json.dumps({"version": 1,
        "allowed_commands": [{"program": p, "args_prefix": []} for p in programs],
        "allowed_working_roots": [str(work)], "max_timeout_seconds": 600, "max_output_chars": 65536}))
    return Policy.from_file(pol)

def cycle(store, command):
    job = store.submit(tuple(command), cwd=str(work), timeout=600)
    store.approve(job.id, by="bench")
    return job

if mode == "jobs":
    n = int(sys.argv[3])
    with JobStore(db, log, policy=policy(["echo"])) as store:
        t = time.perf_counter()
        for i in range(n):
            cycle(store, ["echo", f"job {i}"])
        setup = time.perf_counter() - t
        t = time.perf_counter()
        done = 0
        while (job := store.work_once(execute=True, worker_id="w")) is not None:
            done += job.status == "succeeded"
        print(json.dumps({"seconds": time.perf_counter() - t, "setup": setup, "succeeded": done}))
elif mode == "history":
    n = int(sys.argv[3])
    with JobStore(db, log, policy=policy(["echo"])) as store:
        cycle(store, ["echo", "template"])
        store.work_once(execute=True, worker_id="w")
        template = [json.loads(line) for line in log.read_text().splitlines()]
        row = dict(store._db.execute("SELECT * FROM jobs").fetchone())
        # n - 1 more finished jobs, as the seed would have recorded them: rows, and the same events.
        rows, records, prev = [], [], template[-1]["hash"]
        for i in range(1, n):
            job_id = uuid.uuid4().hex
            rows.append({**row, "id": job_id, "idempotency_key": uuid.uuid4().hex})
            for event in template:
                data = dict(event["data"])
                if "job_id" in data:
                    data["job_id"] = job_id
                record = {"seq": len(template) + len(records) + 1, "timestamp": event["timestamp"],
                          "event": event["event"], "prev_hash": prev, "data": data}
                record["hash"] = prev = AuditLog._digest(record)
                records.append(record)
        columns = list(row)
        store._db.executemany(f"INSERT INTO jobs ({', '.join(columns)}) VALUES ({', '.join('?' * len(columns))})",
                              [tuple(r[c] for c in columns) for r in rows])
        store._db.commit()
        with log.open("a") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
        assert AuditLog(log).verify()["entries"] == len(template) + len(records)
        t = time.perf_counter()
        cycle(store, ["echo", "one more"])
        job = store.work_once(execute=True, worker_id="w")
        print(json.dumps({"seconds": time.perf_counter() - t, "status": job.status,
                          "records": len(template) + len(records)}))
elif mode == "audit":
    n = int(sys.argv[3])
    prev = None
    with log.open("w") as handle:
        for i in range(1, n + 1):
            record = {"seq": i, "timestamp": "2026-12-01T00:00:00+00:00", "event": "job.finished" if i % 2 else "job.claimed",
                      "prev_hash": prev, "data": {"job_id": f"{i // 2:032x}", "worker_id": "w", "status": "succeeded",
                                                  "attempt": 1, "error_class": None, "retry_at": None}}
            record["hash"] = prev = AuditLog._digest(record)
            handle.write(json.dumps(record, ensure_ascii=False, sort_keys=True) + "\n")
    print(json.dumps({"audit": str(log), "bytes": log.stat().st_size}))
elif mode == "output":
    size = int(sys.argv[3])
    with JobStore(db, log, policy=policy(["head"])) as store:
        job = cycle(store, ["head", "-c", str(size), "/dev/zero"])
    print(json.dumps({"job": job.id, "db": str(db), "audit": str(log), "policy": str(pol)}))
"""


def seed_venv(where: Path) -> Path:
    """A virtual environment with the seed installed from the package index; its bin/ directory."""
    bin_dir = where / "bin"
    if not (bin_dir / "agent-safe").exists():
        subprocess.run([sys.executable, "-m", "venv", str(where)], check=True)
        subprocess.run([str(bin_dir / "python"), "-m", "pip", "install", "-q", SEED], check=True)
    version = subprocess.run(
        [str(bin_dir / "agent-safe"), "--version"], capture_output=True, text=True, check=True
    )
    print(f"seed: {version.stdout.strip()} in {where}", flush=True)
    return bin_dir


def seed(bin_dir: Path, mode: str, work: Path, *args: object) -> dict[str, Any]:
    done = subprocess.run(
        [str(bin_dir / "python"), "-c", DRIVER, mode, str(work), *map(str, args)],
        capture_output=True,
        text=True,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"seed {mode} failed: {done.stderr[-1500:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


# -- mergegate gates ---------------------------------------------------------------


def policy(public_key: str, programs: list[str]) -> bytes:
    rules = "".join(f"  - program: {p}\n" for p in programs)
    return (
        f"version: 1\napprovers:\n  - name: {ALICE[0]}\n    email: {ALICE[1]}\n    key: "
        f"{json.dumps(public_key)}\n"
        f"approvals_required: 1\nlimits:\n  max_timeout_seconds: 600\ncommands:\n{rules}"
    ).encode()


def gate_with_jobs(
    base: Path, name: str, key: Path, programs: list[str], jobs: dict[str, bytes]
) -> tuple[Path, str]:
    """throughput's gate, with a policy allowing `programs`."""
    return gate(base, name, key, jobs, policy_for=lambda public: policy(public, programs))


def run_once(runner: Path, root: str, expect: int) -> tuple[float, int]:
    argv = python_module(
        sys.executable, "mergegate", "run", "--once", "--json", "--trust-root", root
    )
    wall, rss, _, out, _ = measured(argv, env=dict(os.environ), cwd=runner)
    jobs = json.loads(out)["jobs"]
    ok = sum(1 for j in jobs if j["status"] == "succeeded")
    if ok != expect:
        raise RuntimeError(f"mergegate ran {ok} of {expect} jobs: {jobs[:3]}")
    return wall, rss


# -- the four rows -------------------------------------------------------------------


def row_jobs(tmp: Path, bin_dir: Path, key: Path, n: int) -> dict[str, Any]:
    jobs = {
        f"jobs/job-{i}.yaml": f"id: job-{i}\ncommand: [echo, 'job {i}']\n".encode()
        for i in range(n)
    }
    runner, root = gate_with_jobs(tmp, "jobs", key, ["echo"], jobs)
    ours, _ = run_once(runner, root, n)
    theirs = seed(bin_dir, "jobs", tmp / "seed-jobs", n)
    assert theirs["succeeded"] == n, theirs
    return {
        "row": f"{n} approved trivial jobs, one pass",
        "ours": ours,
        "seed": theirs["seconds"],
        "unit": "s",
        "note": f"seed: submit + approve took another {theirs['setup']:.1f} s",
    }


def row_history(tmp: Path, bin_dir: Path, key: Path, n: int) -> dict[str, Any]:
    gate = build_gate(tmp, "history", n, Path(f"{key}.pub").read_text().strip())
    gate.reset(new_approved_job(gate, key))
    argv = [sys.executable, "-m", "mergegate", "run", "--once", "--json", "--trust-root", gate.root]
    ours = measured(argv, env=dict(os.environ), cwd=gate.runner).wall
    theirs = seed(bin_dir, "history", tmp / "seed-history", n)
    assert theirs["status"] == "succeeded", theirs
    return {
        "row": f"{n} past jobs, then one more approved and run",
        "ours": ours,
        "seed": theirs["seconds"],
        "unit": "s",
        "note": f"seed audit log: {theirs['records']} records",
    }


def row_audit(tmp: Path, bin_dir: Path, n: int) -> list[dict[str, Any]]:
    remote, records, _ = build_audit_gate(tmp / "audit", n)
    root = git(remote, "rev-parse", "approved")
    ours = min((verify_once(remote, root) for _ in range(3)), key=lambda r: r.wall)
    log = seed(bin_dir, "audit", tmp / "seed-audit", n)["audit"]
    argv = python_module(
        str(bin_dir / "python"), "agent_safe_runner", "--audit", log, "audit-verify"
    )
    theirs = min((measured(argv) for _ in range(3)), key=lambda r: r.wall)
    assert json.loads(theirs.out)["entries"] == n, theirs.out
    env = {**os.environ, "MERGEGATE_TRUST_ROOT": root}
    ours_pss, theirs_pss = tree_memory(verify_argv(remote), env=env)[0], tree_memory(argv)[0]
    return [
        {
            "row": f"audit verify, {records} records: time",
            "ours": ours.wall,
            "seed": theirs.wall,
            "unit": "s",
            "note": "best of 3",
        },
        {
            "row": f"audit verify, {records} records: CPU",
            "ours": ours.cpu,
            "seed": theirs.cpu,
            "unit": "s",
            "note": "user + system, children included (mergegate: its workers and git), best-time "
            "run",
        },
        {
            "row": f"audit verify, {records} records: peak RSS",
            "ours": ours.own / 2**20,
            "seed": theirs.own / 2**20,
            "unit": "MiB",
            "note": "own RSS of the main Python process, best-time run",
        },
        {
            "row": f"audit verify, {records} records: peak PSS",
            "ours": ours_pss / 2**20,
            "seed": theirs_pss / 2**20,
            "unit": "MiB",
            "note": "all Python processes (mergegate: main and workers), sampled, one more run",
        },
    ]


def row_output(tmp: Path, bin_dir: Path, key: Path, size: int) -> list[dict[str, Any]]:
    job = f"id: big\ncommand: [head, -c, '{size}', /dev/zero]\ntimeout_seconds: 600\n".encode()
    runner, root = gate_with_jobs(tmp, "output", key, ["head"], {"jobs/big.yaml": job})
    ours, ours_rss = run_once(runner, root, 1)
    queued = seed(bin_dir, "output", tmp / "seed-output", size)
    argv = python_module(
        str(bin_dir / "python"),
        "agent_safe_runner",
        "--db",
        queued["db"],
        "--audit",
        queued["audit"],
        "--policy",
        queued["policy"],
        "run",
        queued["job"],
        "--execute",
        "--worker",
        "w",
    )
    theirs, theirs_rss, _, out, _ = measured(argv, cwd=tmp / "seed-output")
    assert json.loads(out)["status"] == "succeeded", out[:300]
    shown = f"{size / 2**30:g} GiB" if size >= 2**30 else f"{size / 2**20:g} MiB"
    return [
        {
            "row": f"a job printing {shown}: time",
            "ours": ours,
            "seed": theirs,
            "unit": "s",
            "note": "",
        },
        {
            "row": f"a job printing {shown}: runner peak RSS",
            "ours": ours_rss / 2**20,
            "seed": theirs_rss / 2**20,
            "unit": "MiB",
            "note": "",
        },
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--jobs", type=int, default=1000, help="approved trivial jobs in one pass (default 1000)"
    )
    parser.add_argument(
        "--history", type=int, default=10000, help="past jobs before one more (default 10000)"
    )
    parser.add_argument(
        "--records", type=int, default=100_000, help="records for audit verify (default 100000)"
    )
    parser.add_argument(
        "--output-bytes", type=int, default=2**30, help="bytes one job prints (default 1 GiB)"
    )
    parser.add_argument(
        "--only",
        action="append",
        choices=["jobs", "history", "audit", "output"],
        help="run only these rows (repeatable)",
    )
    parser.add_argument(
        "--seed-venv", type=Path, default=None, help="reuse (or create) the seed's venv here"
    )
    parser.add_argument("--no-docs", action="store_true", help=f"do not rewrite {DOCS.name}")
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary files (their path is printed)"
    )
    args = parser.parse_args(argv)
    command = "python benchmarks/compare_seed.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:])
    )
    rows_wanted = args.only or ["jobs", "history", "audit", "output"]
    tmp = Path(tempfile.mkdtemp(prefix="mergegate-bench-seed-"))
    load = LoadWatch()
    rows: list[dict[str, Any]] = []
    try:
        bin_dir = seed_venv(args.seed_venv or tmp / "seed-venv")
        isolate(tmp / "home")
        compiled = (
            precompile()
        )  # as an installed copy (the seed's is installed by pip, with its bytecode)
        key = tmp / "alice"
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", str(key)],
            check=True,
        )
        for name in rows_wanted:
            t = time.perf_counter()
            if name == "jobs":
                found = [row_jobs(tmp, bin_dir, key, args.jobs)]
            elif name == "history":
                found = [row_history(tmp, bin_dir, key, args.history)]
            elif name == "audit":
                found = row_audit(tmp, bin_dir, args.records)
            else:
                found = row_output(tmp, bin_dir, key, args.output_bytes)
            load.sample()
            for row in found:
                print(
                    f"{row['row']}: mergegate {row['ours']:.2f} {row['unit']}, seed "
                    f"{row['seed']:.2f} {row['unit']}, "
                    f"seed/mergegate {row['seed'] / row['ours']:.1f}x",
                    flush=True,
                )
            print(f"  ({time.perf_counter() - t:.0f} s with building)", flush=True)
            rows += found
        lines = [
            *header(command, load),
            f"- Seed: `{SEED}` installed with pip into a temporary virtual environment, driven "
            "through its "
            "own API (`JobStore.submit/approve/work_once`) and CLI (`agent-safe audit-verify`, "
            "`agent-safe run "
            "--execute`); mergegate as `python -m mergegate` subprocesses.",
            f"- {compiled}",
            "",
            "| work | mergegate | seed | seed / mergegate | note |",
            "|---|---:|---:|---:|---|",
            *(
                f"| {r['row']} | {r['ours']:.2f} {r['unit']} | {r['seed']:.2f} {r['unit']} | "
                f"{r['seed'] / r['ours']:.1f}x | {r['note']} |"
                for r in rows
            ),
        ]
        finish(no_docs=args.no_docs, docs=DOCS, section=SECTION, end_marker=END_MARKER, lines=lines)
    finally:
        cleanup(tmp, keep=args.keep)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
