"""`mergegate init`: a deny-by-default policy, jobs/, and the approved branch."""

from __future__ import annotations

from pathlib import Path

import click

from mergegate.commands import output
from mergegate.commands.options import json_option, repo_option
from mergegate.errors import UsageError
from mergegate.github.workflows import ENVIRONMENT, PIN_HINT
from mergegate.operations.init import add_workflows, is_gate
from mergegate.operations.init import init as run_init


@click.command("init")
@repo_option
@click.option("--approver", default=None, help="Approver name (default: git user.name).")
@click.option("--email", default=None, help="Approver email, used to spot self-approval.")
@click.option(
    "--key",
    default=None,
    help="Approver ssh public key: a file or a key line (default: git user.signingkey).",
)
@click.option(
    "--solo",
    is_flag=True,
    help="One-person setup: allow self-approval, policy changes need one approver.",
)
@click.option("--branch", default="approved", show_default=True)
@click.option(
    "--github",
    is_flag=True,
    help="Also write the GitHub Actions pull-request check and runner workflows.",
)
@click.option(
    "--action",
    default=None,
    metavar="OWNER/REPO@COMMIT",
    help="With --github: the mergegate action to use, pinned to a commit id.",
)
@click.option(
    "--fan-out",
    "fan_out",
    is_flag=True,
    help="With --github: the runner workflow fans each merge out over a matrix, one entry per job "
    "(docs/github.md).",
)
@json_option
def command(
    repo: Path,
    approver: str | None,
    email: str | None,
    key: str | None,
    solo: bool,
    branch: str,
    github: bool,
    action: str | None,
    fan_out: bool,
    as_json: bool,
) -> int:
    """Write a deny-by-default policy and jobs/, and create the approved branch.

    No records are written: the first `mergegate run` creates the branch mergegate/audit.

    An existing policy/policy.yaml is validated and kept as it is (then
    --approver, --key, --email and --solo are ignored, with a warning). The
    commit init makes is the trust root.

    \b
    Example:
      mergegate init --approver alice --key ~/.ssh/id_ed25519.pub
      mergegate init --github --action OWNER/mergegate@COMMIT   # plus the Actions workflows
      mergegate init --github --fan-out --action OWNER/mergegate@COMMIT   # one matrix entry per job
      export MERGEGATE_TRUST_ROOT=$(mergegate init --json | jq -r .trust_root)
    """
    return main(
        repo=repo,
        approver=approver,
        email=email,
        key=key,
        solo=solo,
        branch=branch,
        github=github,
        action=action,
        fan_out=fan_out,
        as_json=as_json,
    )


def main(
    *,
    repo: Path,
    approver: str | None,
    email: str | None,
    key: str | None,
    solo: bool,
    branch: str,
    github: bool = False,
    action: str | None = None,
    fan_out: bool = False,
    as_json: bool = False,
) -> int:
    if fan_out and not github:
        raise UsageError(
            "--fan-out is a kind of GitHub runner workflow: it needs --github",
            hint="mergegate init --github --fan-out --action OWNER/REPO@COMMIT",
        )
    if github and action is None:
        raise UsageError(
            "init --github needs --action OWNER/REPO@COMMIT: the mergegate action the workflows "
            "run, pinned",
            hint=PIN_HINT,
        )
    if action is not None and not github:
        raise UsageError(
            "--action is used only with --github (it pins the action the GitHub workflows run)",
            hint="mergegate init --github --action OWNER/REPO@COMMIT",
        )
    if github and action is not None and is_gate(repo, branch):
        # An existing gate: the workflows are a change to propose and approve, never a commit onto
        # approved.
        written, removed = add_workflows(repo_path=repo, action=action, fan_out=fan_out)
        if as_json:  # (nothing committed: the workflows are a change to propose)
            output.emit(
                {
                    "branch": branch,
                    "trust_root": None,
                    "written": [str(p) for p in written],
                    "removed": [str(p) for p in removed],
                    "warnings": [],
                }
            )
            return 0
        for path in written:
            output.line(f"wrote {path}")
        for path in removed:
            output.line(
                f"removed {path}: a gate runs one runner workflow (commit its removal with the "
                "rest)"
            )
        output.line(
            f"next: {branch} already has a policy, so commit these on a branch from {branch} and "
            "propose them "
            f"(git switch -c add-workflows origin/{branch} && git add -A .github/workflows && git "
            "commit -m 'GitHub workflows' "
            "&& git push origin add-workflows); they need the approvals the policy demands of "
            "other files"
        )
        return 0
    result = run_init(
        repo_path=repo,
        approver=approver,
        key=key,
        email=email,
        solo=solo,
        branch=branch,
        github_action=action if github else None,
        fan_out=fan_out,
    )
    output.warn(result.warnings)
    if as_json:
        output.emit(
            {
                "branch": result.branch,
                "trust_root": result.commit,
                "written": [str(p) for p in result.written],
                "removed": [],
                "warnings": list(result.warnings),
            }
        )
        return 0
    for path in result.written:
        output.line(f"wrote {path}")
    output.line(f"created branch {result.branch} at {result.commit[:12]}")
    output.line(f"trust root: {result.commit}")
    output.line(
        "  every run, status, check and verify trusts the policy of this commit; pin it so that a "
        "rewritten"
    )
    output.line(f"  history cannot swap it: --trust-root {result.commit}")
    output.line(
        f"  or once for all commands: export MERGEGATE_TRUST_ROOT={result.commit}  (in CI: a "
        "repository variable)"
    )
    if not github:
        output.line(
            f"next: git push origin HEAD {result.branch}; then propose jobs (mergegate propose ID "
            "-- COMMAND...) and "
            "approve them with signed merges (mergegate approve BRANCH --merge); mergegate demo "
            "shows the whole flow"
        )
    else:
        output.line(
            f"next: git push origin HEAD {result.branch}; then propose jobs as pull requests into "
            f"{result.branch} "
            "(mergegate propose ID --open-pr -- COMMAND...), reviewed by the policy's approvers "
            "and merged with "
            "a merge commit or squash"
        )
        output.line(
            f"next on GitHub: make {result.branch} the default branch, set the repository variable "
            f"MERGEGATE_TRUST_ROOT={result.commit}, put the runner's private ssh key (its public "
            "key under "
            "runners: in the policy) in the secret MERGEGATE_RUNNER_KEY of the environment "
            f"{ENVIRONMENT} "
            f"(deployment branches: {result.branch} only), and protect {result.branch} and "
            "mergegate/audit "
            "(docs/github.md)"
        )
    return 0
