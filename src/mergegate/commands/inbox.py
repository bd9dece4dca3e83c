"""`mergegate inbox`: proposals waiting for a decision, with check's verdict and who may approve."""

from __future__ import annotations

from pathlib import Path

import click

from mergegate.commands import output
from mergegate.commands.options import json_option, repo_option, trust_option
from mergegate.git.refnames import branch_name
from mergegate.operations.inbox import Inbox, inbox


@click.command("inbox")
@click.option(
    "--base",
    default="approved",
    show_default=True,
    help="The approved branch (approved, origin/approved, ...).",
)
@click.option(
    "--remote", default="origin", show_default=True, help="Remote whose branches are proposals."
)
@click.option(
    "--no-fetch", "no_fetch", is_flag=True, help="Use the remote-tracking branches as they are."
)
@repo_option
@trust_option
@json_option
def command(
    base: str, remote: str, no_fetch: bool, repo: Path, trust_root: str | None, as_json: bool
) -> int:
    """Proposals waiting for a decision, with check's verdict and who may approve.

    Every branch on the remote (and, with GITHUB_TOKEN, every open pull
    request against approved) that adds or changes a job or policy file,
    judged as `mergegate check` judges it, with the approvals each file still
    needs and the approvers whose vote would count.

    \b
    Example:
      mergegate inbox
    """
    return main(
        repo=repo,
        remote=remote,
        base=branch_name(base, remote),
        fetch=not no_fetch,
        trust_root=trust_root,
        as_json=as_json,
    )


def main(
    *, repo: Path, remote: str, base: str, fetch: bool, trust_root: str | None, as_json: bool
) -> int:
    box = inbox(repo_path=repo, remote=remote, base=base, fetch=fetch, trust=trust_root)
    output.warn(box.warnings)
    if as_json:
        output.emit(
            {
                "base": box.base,
                "proposals": [i.as_json() for i in box.items],
                "owed_reviews": [o.as_json(box.now) for o in box.owed if box.now],
            }
        )
        return 0
    _owed(box)
    if not box.items:
        output.line(f"inbox empty: no branch changes a job or policy file relative to {box.base}")
        return 0
    for item in box.items:
        pr = f"  PR #{item.pull}" if item.pull is not None else ""
        output.line(f"{output.state(item.verdict, 8)} {item.ref} ({item.head[:7]}){pr}")
        if item.error:
            output.line(f"         {output.brief(item.error)}")
        for f in item.files:
            output.line(f"         {f.state:<8} {f.path}: {output.brief(f.reason)}")
            if f.approvals:
                output.line(f"                  approvals: {output.brief(f.approvals)}")
        if item.verdict == "allowed":
            who = ", ".join(item.may_approve) or "nobody: every approver wrote part of it"
            output.line(f"         may approve: {who}")
            if item.pull is not None:
                output.line(
                    f"         next: review PR #{item.pull} and merge it (merge commit or squash), "
                    f"or mergegate approve {item.ref} --merge"
                )
            else:
                output.line(
                    f"         next: review the diff, then mergegate approve {item.ref} --merge"
                )
    return 0


def _owed(box: Inbox) -> None:
    """Reviews break-glass runs owe: a decision waiting for approvers too, with its deadline."""
    for owed in box.owed:
        late = box.now is not None and owed.overdue(box.now)
        due = owed.due.strftime("%Y-%m-%dT%H:%M:%SZ") if owed.due else "no deadline"
        output.line(f"{output.state('overdue' if late else 'owed', 8)} review of {owed.describe()}")
        output.line(f"         due {due}; needs {owed.requirement}")
        output.line(
            f"         next: approvers other than {', '.join(owed.by)} and its writers sign "
            f"Mergegate-Approve: {owed.path} {owed.blob} on approved"
        )
