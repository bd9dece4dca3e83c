"""`mergegate check REF`: judge a proposal before it is merged (a pull request check)."""

from __future__ import annotations

from pathlib import Path

from mergegate.commands import output
from mergegate.git.refnames import branch_name
from mergegate.git.repo import Repo
from mergegate.operations import check_annotations as actions
from mergegate.operations.proposals import check as run_check


def main(
    *,
    ref: str,
    base: str,
    remote: str,
    fetch: bool,
    repo: Path,
    trust_root: str | None,
    as_json: bool,
    github: bool = False,
) -> int:
    base = branch_name(
        base, remote
    )  # origin/approved, refs/remotes/origin/approved, ... all name approved
    report = run_check(
        repo_path=repo, ref=ref, base=base, remote=remote, fetch=fetch, trust=trust_root
    )
    if github or actions.in_actions():
        policy = report.policy_in_force
        actions.write(
            report,
            where=actions.locate(Repo(repo).blob),
            reviews=actions.review_state(report),
            approvers=tuple(p.name for p in policy.approvers) if policy is not None else (),
            echo=lambda text: output.line(text, err=True),
        )  # Actions reads commands on stderr too; stdout stays --json
    if as_json:
        output.emit(
            {
                "ref": report.ref,
                "head": report.head,
                "base": report.base,
                "policy_commit": report.policy,
                "files": [f.as_json() for f in report.files],
                "exit_code": report.exit_code,
            }
        )
        return report.exit_code
    for f in report.files:
        output.line(f"{output.state(f.state, 8)} {f.path}: {f.reason}")
        if f.approvals:
            output.line(f"         approvals: {f.approvals}")
    if not report.files:
        output.line(f"{ref} changes no job or policy file relative to {base}")
    return report.exit_code
