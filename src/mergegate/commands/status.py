"""`mergegate status`: every job on approved with its state."""

from __future__ import annotations

from pathlib import Path

from mergegate.commands import output
from mergegate.git.refnames import branch_name
from mergegate.operations.status import status as get_status


def main(
    *,
    repo: Path,
    remote: str,
    branch: str,
    fetch: bool,
    trust_root: str | None,
    as_json: bool,
    states: tuple[str, ...] = (),
) -> int:
    branch = branch_name(branch, remote)  # every spelling of the approved branch
    report = get_status(repo_path=repo, remote=remote, branch=branch, fetch=fetch, trust=trust_root)
    output.warn(report.warnings)
    jobs = [j for j in report.jobs if not states or j.state in states]
    if as_json:
        output.emit(
            {"tip": report.tip, "records": report.records, "jobs": [j.as_json() for j in jobs]}
        )
        return 0
    if states and not jobs and report.jobs:
        output.line(f"no job is {' or '.join(states)} ({len(report.jobs)} on approved)")
        return 0
    for j in jobs:
        reason = "  " + output.brief(j.reason) if j.reason and j.state != "succeeded" else ""
        if j.state == "running":
            reason = (
                f"  runner {j.runner}, {j.age_seconds}s, lease until "
                f"{j.lease_until or 'none'}{reason}"
            )
        output.line(f"{output.state(j.state, 10)} {j.job:<30} {j.path}{reason}")
    if not report.jobs:
        output.line("no jobs on approved")
    return 0
