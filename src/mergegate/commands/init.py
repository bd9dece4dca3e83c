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
    output.line(f"created branch {result.branch} at {result.commit[:12]}")
    output.line(f"trust root: {result.commit}")
    output.line("  every run, status, check and verify trusts the policy of this commit; pin it so that a rewritten")
    output.line(f"  history cannot swap it: --trust-root {result.commit}")
    output.line(f"  or once for all commands: export MERGEGATE_TRUST_ROOT={result.commit}  (in CI: a repository variable)")
    output.line(f"next: git push origin HEAD {result.branch}; then propose jobs (mergegate propose ID -- COMMAND...) and "
                "approve them with signed merges (mergegate approve BRANCH --merge); mergegate demo shows the whole flow")
    return 0
