"""Run one job through the real executor, as a runner would, for the spawner's tests.

    python -m tests.helpers.spawn_job MODE MARKER WORKSPACE

MODE `kill-runner`: while another thread of this process holds the GIL in long stretches
(as a runner busy with other jobs' records does), the job starts `sleep MARKER` in the
background and then kill -9s this process (the runner) at once: the runner never got
the chance to tell its watchdog anything after the fork. MODE `environ`: the job prints
the environment of every process it may read (`/proc/*/environ`); this process was
started with a secret in its environment. Prints the job's result as one JSON line.
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

from mergegate.execution import executor


def _hog() -> None:
    while True:
        sum(range(2_000_000))  # one C call: the GIL is not released for about 20 to 50 ms


def main() -> None:
    # The test's folder (it removes it): this process may be killed, and could not.
    mode, marker, workspace = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    if mode == "kill-runner":
        script = f'sleep {marker} & kill -9 "$RUNNER_PID"; sleep {marker}'
        threading.Thread(target=_hog, daemon=True).start()
    else:
        script = (
            "for f in /proc/[0-9]*/environ; do cat \"$f\" 2>/dev/null | tr '\\0' '\\n'; done; true"
        )
    request = executor.ExecRequest(
        argv=("/bin/sh", "-c", script),
        workspace=workspace,
        cwd="",
        env={"PATH": "/usr/bin:/bin", "RUNNER_PID": str(os.getpid())},
        secrets=(),
        limits=executor.ProcessLimits(timeout_seconds=60, kill_grace_seconds=0.5),
        search_path="/usr/bin:/bin",
        run_id=f"spawn-{os.getpid()}",
    )
    result = executor.run(request)
    print(json.dumps({"status": result.status, "stdout": result.stdout.tail}), flush=True)


if __name__ == "__main__":
    main()
