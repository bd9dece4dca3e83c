"""`mergegate verify`: re-judge the whole history and cross-check the audit."""

from __future__ import annotations

from pathlib import Path

from mergegate.commands import output
from mergegate.verification import verify_history


def main(*, repo: Path, remote: str, branch: str, fetch: bool, trust_root: str | None, as_json: bool) -> int:
    report = verify_history(repo_path=repo, remote=remote, branch=branch, fetch=fetch, trust=trust_root)
    output.warn(report.warnings)
    if as_json:
        output.emit({"trust_root": report.trust_root, "tip": report.tip, "records": report.records,
                     "commits": [c.as_json() for c in report.commits], "violations": list(report.violations),
                     "ok": not report.violations})
        return report.exit_code
    for c in report.commits:
        output.line(f"{c.commit[:7]} {c.kind:<13} {c.summary}")
        for j in c.jobs:
            output.line(f"        {'approved' if j['approved'] else 'rejected'} {j['path']}: {j['reason']}")
    for v in report.violations:
        output.line(f"violation: {v}", err=True)
    output.line(f"{output.state('ok' if not report.violations else 'FAILED')}: {len(report.commits)} commits, {report.records} records")
    return report.exit_code
