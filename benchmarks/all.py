"""Rerun every figure of docs/performance.md: each benchmark script in turn, as that page lists
them.

Each script writes its own section (notes below a section's end marker are kept). A script that
fails is reported and the others still run; the exit code is 1 if any failed. Run it on a quiet
machine (about 15 to 25 minutes on 2 cores): each section says how quiet the CPU was.

Usage: python benchmarks/all.py [--dry-run]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

# The commands of docs/performance.md's "Rerun every figure", in its order.
SCRIPTS: list[list[str]] = [
    ["output_memory.py"],
    ["fleet.py", "--repeat", "3"],
    ["throughput.py", "--jobs", "1000", "--parallel", "1,8", "--repeat", "3"],
    ["poll_scale.py", "--jobs", "10000", "--repeat", "5", "--last-pass", "300"],
    ["signature_checks.py", "--approvals", "100,1000,5000", "--repeat", "3"],
    ["config_load.py", "--jobs", "1000", "--repeat", "5"],
    ["audit_verify.py", "--records", "100000", "--repeat", "5"],
    ["compare_seed.py"],
    ["suite.py"],
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    failed = []
    for script in SCRIPTS:
        command = [sys.executable, str(HERE / script[0]), *script[1:]]
        shown = "python benchmarks/" + " ".join(script)
        if args.dry_run:
            print(shown)
            continue
        print(f"=== {shown}", flush=True)
        began = time.monotonic()
        code = subprocess.run(command, check=False).returncode
        print(f"=== {shown}: exit {code} after {time.monotonic() - began:.0f} s", flush=True)
        if code:
            failed.append(shown)
    if failed:
        print(f"failed: {', '.join(failed)}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
