"""`mergegate approve BRANCH`: sign an approval commit (or the merge) and push it; `mergegate
approve --renew JOB`: sign a renewal of an expired approval on approved and push it."""

from __future__ import annotations

from pathlib import Path

import click

from mergegate.commands import output
from mergegate.commands.options import json_option, repo_option, trust_option
from mergegate.errors import UsageError
from mergegate.git.refnames import branch_name as bare_branch
from mergegate.operations.approve import approve as run_approve


@click.command("approve")
@click.argument("branch_name", metavar="BRANCH", required=False)
@click.option(
    "--renew",
    "renew",
    metavar="JOB",
    help="Renew the expired approval of JOB (a path or id on approved): a signed, empty "
    "commit on approved naming its path and blob (max_approval_age).",
)
@click.option(
    "--merge",
    is_flag=True,
    help="Make the signed merge into approved instead of an approval commit.",
)
@click.option(
    "--emergency",
    "emergency",
    metavar="REASON",
    help="Break-glass: sign the merge (with --merge) with a Mergegate-Emergency trailer, so the "
    "job runs now without its quorum; you owe its review (docs/policy.md, Break-glass).",
)
@click.option("--base", default="approved", show_default=True, help="The approved branch.")
@click.option(
    "--remote", default="origin", show_default=True, help="Remote to fetch from and push to."
)
@click.option(
    "--no-fetch", "no_fetch", is_flag=True, help="Use the remote-tracking branches as they are."
)
@repo_option
@trust_option
@json_option
def command(
    branch_name: str | None,
    renew: str | None,
    merge: bool,
    emergency: str | None,
    base: str,
    remote: str,
    no_fetch: bool,
    repo: Path,
    trust_root: str | None,
    as_json: bool,
) -> int:
    """Sign an approval of BRANCH (with your git signing key) and push it.

    Shows what `check` says first and refuses invalid or denied jobs. With
    --renew JOB instead of BRANCH, renews an approved job's expired approval
    (max_approval_age): the job runs once renewals by its quorum are in.

    \b
    Example:
      mergegate approve add-backup-job          # approval commit on the branch
      mergegate approve add-backup-job --merge  # signed merge into approved
      mergegate approve --renew jobs/prod/deploy.yaml
      mergegate approve hotfix --merge --emergency "disk full on db-1, INC-4711: purge now"
    """
    if (branch_name is None) == (renew is None):
        raise UsageError(
            "name either a BRANCH to approve or --renew JOB, not both",
            hint="mergegate approve BRANCH, or mergegate approve --renew jobs/x.yaml",
        )
    if renew is not None:
        if merge or emergency is not None:
            raise UsageError(
                "--renew signs a commit on approved: it takes no --merge or --emergency"
            )
        return renew_main(
            job=renew,
            branch=bare_branch(base, remote),
            remote=remote,
            fetch=not no_fetch,
            repo=repo,
            trust_root=trust_root,
            as_json=as_json,
        )
    assert branch_name is not None
    return main(
        branch_name=branch_name,
        merge=merge,
        emergency=emergency,
        base=base,
        remote=remote,
        fetch=not no_fetch,
        repo=repo,
        trust_root=trust_root,
        as_json=as_json,
    )


def main(
    *,
    branch_name: str,
    merge: bool,
    base: str,
    emergency: str | None = None,
    remote: str,
    fetch: bool,
    repo: Path,
    trust_root: str | None,
    as_json: bool,
) -> int:
    base = bare_branch(
        base, remote
    )  # origin/approved, refs/remotes/origin/approved, ... all name approved
    result = run_approve(
        repo_path=repo,
        branch_name=branch_name,
        base=base,
        remote=remote,
        merge=merge,
        fetch=fetch,
        trust=trust_root,
        emergency=emergency,
    )
    if as_json:
        output.emit(
            {
                "commit": result.commit,
                "kind": result.kind,
                "pushed_to": result.pushed_to,
                "files": [f.as_json() for f in result.report.files],
            }
        )
        return 0
    for f in result.report.files:
        output.line(f"{output.state(f.state, 8)} {f.path}: {f.reason}")
    # Full ids: what was signed, and the proposal commit it approves, leave no room for a
    # look-alike.
    output.line(
        f"signed {result.kind} {result.commit} of {result.report.head} pushed to {result.pushed_to}"
    )
    return 0


def renew_main(
    *,
    job: str,
    branch: str,
    remote: str,
    fetch: bool,
    repo: Path,
    trust_root: str | None,
    as_json: bool,
) -> int:
    from mergegate.operations.renew import renew

    result = renew(
        repo_path=repo, job=job, remote=remote, branch=branch, fetch=fetch, trust=trust_root
    )
    if as_json:
        output.emit(
            {
                "commit": result.commit,
                "kind": "renewal",
                "path": result.path,
                "blob": result.blob,
                "pushed_to": result.pushed_to,
                "state": result.state,
                "renewed_by": list(result.renewed_by),
                "quorum": result.quorum,
            }
        )
        return 0
    output.line(
        f"signed renewal {result.commit} of {result.path} at {result.blob[:12]} ({result.state}) "
        f"pushed to {result.pushed_to}"
    )
    if result.renewed_by:
        output.line(f"renewed: {result.quorum}; the next runner pass runs it")
    else:
        output.line(f"not renewed yet: {result.quorum}; other approvers run the same command")
    return 0
