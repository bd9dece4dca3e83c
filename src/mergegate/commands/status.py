"""`mergegate status`: every job on approved with its state."""

from __future__ import annotations

from pathlib import Path

import click

from mergegate.commands import output
from mergegate.commands.options import branch_options, json_option, trust_option
from mergegate.git.refnames import branch_name
from mergegate.operations.status import status as get_status


@click.command("status")
@branch_options
@trust_option
@json_option
@click.option(
    "--state",
    "states",
    multiple=True,
    metavar="STATE",
    type=click.Choice(
        [
            "queued",
            "retrying",
            "waiting",
            "expired",
            "running",
            "succeeded",
            "failed",
            "timed_out",
            "interrupted",
            "lost",
            "rejected",
            "vetoed",
            "not run",
        ]
    ),
    help="Only jobs in this state (repeatable).",
)
def command(
    repo: Path,
    remote: str,
    branch: str,
    no_fetch: bool,
    trust_root: str | None,
    as_json: bool,
    states: tuple[str, ...],
) -> int:
    """Show every job on approved with its state.

    States: queued (approved, waiting for a runner: with its runs_on labels, if
    any), retrying (waiting for the backoff before its next attempt), waiting (for
    GitHub review evidence, or a change window), expired (its approval is older
    than max_approval_age: renew it with mergegate approve --renew PATH), running,
    succeeded, failed, timed_out, interrupted, lost, rejected, vetoed, not run.
    Then every review a break-glass run still owes, with its deadline (owed, or
    overdue).

    \b
    Example:
      mergegate status --state queued --state running
      mergegate status --json
    """
    return main(
        repo=repo,
        remote=remote,
        branch=branch,
        fetch=not no_fetch,
        trust_root=trust_root,
        as_json=as_json,
        states=states,
    )


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
            {
                "tip": report.tip,
                "records": report.records,
                "jobs": [j.as_json() for j in jobs],
                "owed_reviews": [o.as_json(report.now) for o in report.owed if report.now],
            }
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
    for owed in report.owed:
        late = report.now is not None and owed.overdue(report.now)
        due = owed.due.strftime("%Y-%m-%dT%H:%M:%SZ") if owed.due else "no deadline"
        output.line(
            f"{output.state('overdue' if late else 'owed', 10)} review of {owed.describe()}; "
            f"due {due}; needs {owed.requirement}"
        )
    return 0
