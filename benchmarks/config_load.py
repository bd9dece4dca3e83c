"""What does reading the configuration cost: a policy and 1,000 job files, loaded and validated?

Every pass of the runner, `check`, `verify` and `lint` reads policy/policy.yaml and the job files it
judges: YAML (rules/config.py: libyaml where it reads as PyYAML does, PyYAML's own reading for the
rest) and JSON Schema (fastjsonschema's checks, compiled ahead of time into rules/schema_checks.py;
jsonschema only to word an error). Each run starts a fresh Python (so each import is made once, as
in a real process; mergegate's modules are compiled to bytecode first, as an installed copy has
them), reads the files from memory and measures the CPU time (user and system: steadier than the
wall clock on a shared machine) of, in that process:

- the policy: `load_policy` (YAML, schema, keys);
- 1,000 job files: `parse_job` on each (YAML, schema, the job's own checks), of four shapes: plain
  `key: value` lines, flow lists and mappings, block lists with a comment and a block scalar, and a
  quoted URL with a `?` in it;
- the process as a whole: starting Python, the imports and both of the above.

The figures go to the section "## Loading the configuration" of docs/performance.md (notes below
the end marker are kept).

Usage: python benchmarks/config_load.py [--jobs 1000] [--repeat 5] [--no-docs]
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
from pathlib import Path

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519
from perfdoc import LoadWatch, finish, header
from poll_scale import precompile

SECTION = "## Loading the configuration"
END_MARKER = "<!-- end of config_load.py output: text below, up to the next ## heading, is kept -->"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "performance.md"


def public_key(name: str) -> str:
    key = ed25519.Ed25519PrivateKey.generate().public_key()
    line = key.public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
    return f"{line.decode()} {name}"


POLICY = f"""\
version: 1
approvers:
  - name: alice
    email: alice@example.com
    key: {public_key("alice")}
    github: 5
  - name: bob
    emails: [bob@example.com]
    keys:
      - key: {public_key("bob")}
        valid_after: "2026-01-01T00:00:00Z"
runners:
  - name: runner
    key: {public_key("runner")}
groups:
  ops: [alice, bob]
approvals_required: 1
approval_rules:
  - name: prod
    paths: ["jobs/prod/**"]
    require: [{{group: ops, count: 2}}]
commands:
  - program: echo
  - program: sh
    args_prefix: [-c]
  - program: make
    network: false
limits:
  max_timeout_seconds: 600
env_allowlist: [PATH, HOME, LANG, TARGET]
max_retries: 3
retry_backoff_seconds: 10
sandbox: none
"""

SHAPES = [
    "id: {id}\ncommand: [echo, hello, '{n}']\ntimeout_seconds: 30\n",
    "# a job\nid: {id}\ncommand: [sh, -c, 'make -C build all']\nenv: {{LANG: C, TARGET: x{n}}}\n"
    "labels: [build, nightly]\nruns_on: [linux]\nretries: 1\n",
    "id: {id}\ndescription: |\n  Build number {n}\n  (two lines)\ncommand:\n  - make\n"
    "  - -j2  # two cores\n  - target-{n}\nidempotent: true\n",
    'id: {id}\ncommand: [curl, "https://example.com/x?n={n}"]\ncwd: sub/dir\n',
]

# Runs in a fresh Python: prints the seconds each part took, as JSON.
CHILD = """
import json, sys, time
began = time.process_time()
from mergegate.rules.job import parse_job
from mergegate.rules.policy import load_policy
imported = time.process_time()
policy, jobs = json.load(sys.stdin)
read = {"policy/policy.yaml": policy.encode()}
t0 = time.process_time()
load_policy(lambda path: read.get(path), commit="0" * 40)
t1 = time.process_time()
for path, text in jobs:
    parse_job(text.encode(), path=path, blob="0" * 40)
t2 = time.process_time()
print(json.dumps({"imports": imported - began, "policy": t1 - t0, "jobs": t2 - t1}))
"""


def job_files(count: int) -> list[tuple[str, str]]:
    files = []
    for n in range(count):
        name = f"job-{n:04d}"
        files.append((f"jobs/{name}.yaml", SHAPES[n % len(SHAPES)].format(id=name, n=n)))
    return files


def one_run(payload: str) -> dict[str, float]:
    began = _children_cpu()
    done = subprocess.run(
        [sys.executable, "-c", CHILD], input=payload, capture_output=True, text=True, check=True
    )
    figures: dict[str, float] = json.loads(done.stdout)
    figures["process"] = _children_cpu() - began
    return figures


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def row(label: str, values: list[float], per: int = 0) -> str:
    low, mid, high = min(values), statistics.median(values), max(values)
    each = f" | {mid / per * 1e6:.0f} µs" if per else " | "
    return f"| {label} | {low * 1e3:.1f} ms | {mid * 1e3:.1f} ms | {high * 1e3:.1f} ms{each} |"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--jobs", type=int, default=1000, help="job files (default 1000)")
    parser.add_argument("--repeat", type=int, default=5, help="runs, each a fresh process")
    parser.add_argument("--no-docs", action="store_true", help="print only, write no docs")
    args = parser.parse_args(argv)
    payload = json.dumps([POLICY, job_files(args.jobs)])
    compiled = precompile()  # as an installed copy: no run compiles mergegate from source
    load = LoadWatch()
    one_run(payload)  # warm-up: the files Python and the imports read come from the page cache
    runs = []
    for _ in range(args.repeat):
        runs.append(one_run(payload))
        load.sample()
    both = [r["policy"] + r["jobs"] for r in runs]
    lines = [
        *header(
            f"python benchmarks/config_load.py --jobs {args.jobs} --repeat {args.repeat}", load
        ),
        f"- {compiled}",
        "",
        f"CPU time of {args.repeat} runs, each a fresh Python reading a policy and {args.jobs} "
        "job files (four shapes, a quarter each) from memory:",
        "",
        "| what | min | median | max | median per file |",
        "|---|---|---|---|---|",
        row("policy: `load_policy`", [r["policy"] for r in runs]),
        row(f"{args.jobs} jobs: `parse_job` each", [r["jobs"] for r in runs], args.jobs),
        row(f"policy and {args.jobs} jobs", both, args.jobs + 1),
        row("imports (`rules.job`, `rules.policy`)", [r["imports"] for r in runs]),
        row("the whole process, start to exit", [r["process"] for r in runs]),
        "",
    ]
    print("\n".join(lines))
    finish(no_docs=args.no_docs, docs=DOCS, section=SECTION, end_marker=END_MARKER, lines=lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
