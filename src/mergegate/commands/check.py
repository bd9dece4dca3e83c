"""`mergegate check REF`: judge a proposal before it is merged (a pull request check)."""

from __future__ import annotations

from pathlib import Path

import click

from mergegate.commands import output
from mergegate.commands.options import json_option, repo_option, trust_option
from mergegate.git.refnames import branch_name
from mergegate.git.repo import Repo
from mergegate.operations import check_annotations as actions
from mergegate.operations.check import check as run_check


@click.command("check")
@click.argument("ref", default="HEAD")
@click.option(
    "--base", default="approved", show_default=True, help="The approved branch to compare with."
)
@click.option(
    "--remote",
    default="origin",
    show_default=True,
    help="Remote to fetch the base (and REF, if remote) from.",
)
@click.option(
    "--no-fetch", "no_fetch", is_flag=True, help="Use the remote-tracking branches as they are."
)
@repo_option
@trust_option
@json_option
@click.option(
    "--github",
    is_flag=True,
    help="Also write Actions annotations, a step summary and outputs (automatic when "
    "GITHUB_ACTIONS=true).",
)
def command(
    ref: str,
    base: str,
    remote: str,
    no_fetch: bool,
    repo: Path,
    trust_root: str | None,
    as_json: bool,
    github: bool,
) -> int:
    """Validate the jobs REF adds or changes and judge them by the policy in force.

    REF defaults to HEAD (the current branch); a branch that only exists on the
    remote is read from there. Exit 0 if all would be allowed, 1 if any would be
    denied, 2 if a file is invalid, 3 if the gate's history or records fail an
    integrity check.

    \b
    Example (a pull request check):
      mergegate check origin/add-backup-job --json
    """
    return main(
        ref=ref,
        base=base,
        remote=remote,
        fetch=not no_fetch,
        repo=repo,
        trust_root=trust_root,
        as_json=as_json,
        github=github,
    )


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
            echo=output.workflow_command,
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
