"""`mergegate verify`: re-judge the whole history and cross-check the audit."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import click

from mergegate.commands import output
from mergegate.commands.options import branch_options, json_option, trust_option
from mergegate.git.refnames import branch_name
from mergegate.operations.verify import VerifyReport, verify_history

_COUNTABLE = {
    "approval",
    "policy change",
    "veto",
}  # kinds that read as nouns ("2 approvals"); the rest are states


@click.command("verify")
@branch_options
@trust_option
@json_option
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="One line per commit with its verdict (default: a short summary).",
)
def command(
    repo: Path,
    remote: str,
    branch: str,
    no_fetch: bool,
    trust_root: str | None,
    as_json: bool,
    verbose: bool,
) -> int:
    """Re-judge the whole history of approved and cross-check the records on mergegate/audit.

    Exit 0 when every commit was judged, every started job was validly approved and
    the chain is intact; 1 when the walk stopped at a commit whose GitHub evidence
    is not recorded yet (incomplete), or a break-glass run's review is overdue;
    2 for bad input or an unreachable remote; 3 for a violation. Every review an
    emergency still owes is listed. GitHub is never asked; --no-fetch works with
    no network.

    \b
    Example (an auditor on a fresh clone, then offline):
      mergegate verify --trust-root 1a2b3c4 --json
      mergegate verify --no-fetch
    """
    return main(
        repo=repo,
        remote=remote,
        branch=branch,
        fetch=not no_fetch,
        trust_root=trust_root,
        as_json=as_json,
        verbose=verbose,
    )


def main(
    *,
    repo: Path,
    remote: str,
    branch: str,
    fetch: bool,
    trust_root: str | None,
    as_json: bool,
    verbose: bool = False,
) -> int:
    branch = branch_name(branch, remote)  # every spelling of the approved branch
    meter = output.Progress("verifying", enabled=not as_json)
    try:
        report = verify_history(
            repo_path=repo,
            remote=remote,
            branch=branch,
            fetch=fetch,
            trust=trust_root,
            progress=meter.update,
        )
    finally:
        meter.done()
    output.warn(report.warnings)
    if as_json:
        output.emit(
            {
                "trust_root": report.trust_root,
                "tip": report.tip,
                "records": report.records,
                "commits": [c.as_json() for c in report.commits],
                "violations": list(report.violations),
                "incomplete": _incomplete_json(report.incomplete),
                "owed_reviews": [o.as_json(report.now) for o in report.owed if report.now],
                "ok": not report.violations and report.incomplete is None and not report.overdue,
            }
        )
        return report.exit_code
    if verbose:
        for c in report.commits:
            output.line(f"{c.commit[:7]} {c.kind:<13} {c.summary}")
            for j in c.jobs:
                output.line(
                    f"        {output.state('approved' if j.approved else 'rejected')} "
                    f"{j.path}: {j.reason}"
                )
    else:
        # A short summary; every commit's verdict is one --verbose (or --json) away.
        kinds = Counter(c.kind for c in report.commits)
        jobs = [j for c in report.commits for j in c.jobs]
        approved = sum(1 for j in jobs if j.approved)
        output.line(
            f"trust root {report.trust_root[:12]}, tip {report.tip[:12]}: "
            + ", ".join(
                f"{n} {kind}{'s' if n != 1 and kind in _COUNTABLE else ''}"
                for kind, n in sorted(kinds.items())
            )
        )
        output.line(
            f"job revisions judged: {approved} approved, {len(jobs) - approved} rejected "
            "(--verbose lists every commit)"
        )
    for v in report.violations:
        output.line(f"violation: {v}", err=True)
    _owed(report)
    if report.violations:
        verdict = "FAILED"
    elif report.incomplete is not None:
        # An auditor reads "ok" as "everything checked": a walk that stopped early says so.
        sha, why, left = report.incomplete
        output.line(
            f"incomplete: stopped at {sha[:12]} ({why}); {left} commit{'s' if left != 1 else ''} "
            "of approved not verified",
            err=True,
        )
        output.line(
            "hint: the runner records GitHub evidence once it has it; run verify again after its "
            "next pass "
            "(a squash's PR head comes with a fetch: drop --no-fetch)",
            err=True,
        )
        verdict = "incomplete"
    elif report.overdue:
        verdict = "overdue"
    else:
        verdict = "ok"
    output.line(f"{output.state(verdict)}: {len(report.commits)} commits, {report.records} records")
    return report.exit_code


def _owed(report: VerifyReport) -> None:
    """Each review a break-glass run still owes; an overdue one fails verify until it is given."""
    overdue = set(report.overdue)
    for owed in report.owed:
        if owed.given:
            continue
        due = f"due {owed.due.strftime('%Y-%m-%dT%H:%M:%SZ')}" if owed.due else "no deadline"
        if owed in overdue:
            output.line(f"owed review overdue: {owed.describe()} ({due})", err=True)
        else:
            output.line(f"owed review: {owed.describe()} ({due}; needs {owed.requirement})")
    if overdue:
        output.line(
            "hint: approvers who are neither the emergency's signers nor the job's writers give "
            "the review: a signed commit with Mergegate-Approve: <path> <blob> on approved "
            '(docs/policy.md, "Break-glass")',
            err=True,
        )


def _incomplete_json(incomplete: tuple[str, str, int] | None) -> dict[str, object] | None:
    if incomplete is None:
        return None
    sha, why, left = incomplete
    return {"commit": sha, "reason": why, "unverified_commits": left}
