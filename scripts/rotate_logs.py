"""Example job script: runs inside the clean export of the approving commit."""

from __future__ import annotations

import argparse
import os

parser = argparse.ArgumentParser()
parser.add_argument("--keep", type=int, default=7)
args = parser.parse_args()
print(f"would rotate logs, keeping {args.keep}; job {os.environ.get('MERGEGATE_JOB_ID')}")
