"""`mergegate init`: a deny-by-default policy, jobs/, and the approved branch."""

from __future__ import annotations

from pathlib import Path

from mergegate.commands import output
from mergegate.scaffold import init as run_init


def main(*, repo: Path, approver: str | None, email: str | None, key: str | None, solo: bool, branch: str) -> int:
    result = run_init(repo_path=repo, approver=approver, key=key, email=email, solo=solo, branch=branch)
    output.warn(result.warnings)
    for path in result.written:
        output.line(f"wrote {path}")
    output.line(f"created branch {result.branch} at {result.commit[:12]} (the trust root)")
    output.line(f"next: git push origin HEAD {result.branch}; then propose jobs (and policy changes, such as "
                "command rules) on branches and approve them with signed merges (docs/getting-started.md)")
    return 0
