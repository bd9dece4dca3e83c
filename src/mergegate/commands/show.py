"""`mergegate show JOB`: one screen about one job."""

from __future__ import annotations

from pathlib import Path

import click

from mergegate.commands import output
from mergegate.commands.options import branch_options, json_option, trust_option
from mergegate.git.refnames import branch_name
from mergegate.operations.show import show


@click.command("show")
@click.argument("job", metavar="JOB")
@branch_options
@trust_option
@json_option
def command(
    job: str,
    repo: Path,
    remote: str,
    branch: str,
    no_fetch: bool,
    trust_root: str | None,
    as_json: bool,
) -> int:
    """One screen about one job: file, revisions, votes, records, what happens next.

    Every revision approved brought, with the votes that counted and why the
    others did not (the judge's own verdict), each attempt with its status,
    duration and output tail, and what the next runner pass will do.

    \b
    Example:
      mergegate show backup
    """
    return main(
        job=job,
        repo=repo,
        remote=remote,
        branch=branch,
        fetch=not no_fetch,
        trust_root=trust_root,
        as_json=as_json,
    )


def main(
    *,
    job: str,
    repo: Path,
    remote: str,
    branch: str,
    fetch: bool,
    trust_root: str | None,
    as_json: bool,
) -> int:
    branch = branch_name(branch, remote)  # every spelling of the approved branch
    d = show(repo_path=repo, job=job, remote=remote, branch=branch, fetch=fetch, trust=trust_root)
    output.warn(d.warnings)
    if as_json:
        output.emit(d.as_json())
        return 0
    output.line(
        f"job {d.job}  {d.path}  {output.state(d.state)}"
        + (f": {output.brief(d.reason)}" if d.reason and d.state != "succeeded" else "")
    )
    if d.text is not None:
        for text in d.text.rstrip("\n").splitlines()[:20]:
            output.line(f"  | {text}")
    output.line(
        f"revisions on {branch}:"
        if d.revisions
        else f"revisions on {branch}: none judged since the trust root"
    )
    for r in d.revisions:
        output.line(
            f"  {r.commit[:7]} {output.state('approved' if r.approved else 'rejected', 8)} "
            f"{r.blob[:7]}: {output.brief(r.reason)}"
        )
        for v in r.votes:
            mark = "counted" if v.counted else f"not counted: {v.why}"
            output.line(f"      vote {v.person} via {v.via} ({mark})")
    output.line("records:" if d.attempts else "records: none yet")
    for a in d.attempts:
        took = f" in {a.duration_ms / 1000:.1f}s" if a.duration_ms is not None else ""
        when = f" {a.started[:19]}" if a.started else ""
        output.line(
            f"  {output.state(a.status, 10)}{when}{took}"
            + (f": {output.brief(a.reason)}" if a.reason else "")
        )
        for text in a.stdout_tail.splitlines():
            output.line(f"      out| {text}")
        for text in a.stderr_tail.splitlines():
            output.line(f"      err| {text}")
    output.line(f"next: {d.next}")
    return 0
