"""Run one job through the real executor, as a runner would: the job double-forks and calls
setsid().

    python -m tests.helpers.escape_job MODE MARKER WORKSPACE

MODE: `ends` (the job exits at once, leaving `setsid sleep MARKER` behind), `times-out`
(it also sleeps past its 1 s timeout), `runs` (it sleeps 60 s; the test kills this process).
Prints the job's status as one JSON line when the job is over. The recipe is the red team's
(notes/redteam_escape.py): `(setsid sleep N &)` leaves nothing in the job's process group.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from mergegate.execution import executor


def main() -> None:
    # The test's folder (it removes it): this process may be killed, and could not.
    mode, marker, workspace = sys.argv[1], sys.argv[2], Path(sys.argv[3])
    after = {"ends": "echo done", "times-out": "sleep 30", "runs": "sleep 60"}[mode]
    script = f"(setsid sleep {marker} </dev/null >/dev/null 2>&1 &) ; {after}"
    request = executor.ExecRequest(
        argv=("/bin/sh", "-c", script),
        workspace=workspace,
        cwd="",
        env={"PATH": "/usr/bin:/bin"},
        secrets=(),
        limits=executor.ProcessLimits(
            timeout_seconds=1 if mode == "times-out" else 60, kill_grace_seconds=0.5
        ),
        search_path="/usr/bin:/bin",
        run_id=f"escape-{os.getpid()}",
    )
    result = executor.run(request)
    print(json.dumps({"status": result.status, "exit_code": result.exit_code}), flush=True)


if __name__ == "__main__":
    main()
