"""Write requirements/action.txt: mergegate's runtime dependencies, pinned with hashes.

The action (action.yml) installs exactly these with `pip install --require-hashes --no-deps`
into the job that holds the write token and the runner key, so a new release of a dependency
reaches that job only through a reviewed change of this file. Run it again whenever
pyproject.toml's dependencies change (tests/test_action_lock.py says when):

    pip install uv && python scripts/lock_action.py

The resolution is universal (every platform and Python from 3.11), so the lock holds for
whatever runner image the workflow uses.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCK = "requirements/action.txt"


def main() -> int:
    uv = shutil.which("uv") or str(Path(sys.executable).with_name("uv"))
    argv = [uv, "pip", "compile", "pyproject.toml", "--universal", "--generate-hashes"]
    argv += ["--python-version", "3.11", "--upgrade", "-o", LOCK]
    argv += ["--custom-compile-command", "python scripts/lock_action.py"]
    return subprocess.run(argv, cwd=ROOT, check=False).returncode


if __name__ == "__main__":
    sys.exit(main())
