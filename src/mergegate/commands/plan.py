"""`mergegate plan`: the jobs a runner would claim now, as a GitHub Actions matrix.

The list is the one a pass claims from, made the same way (`Runner.preview`, as `run --dry-run`: the
same reading, judge, planning and refusals, nothing written). Each entry names one revision;
`mergegate run --once --job PATH` claims and runs it with the same at-most-once claim as any pass.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import click

from mergegate.commands import output
from mergegate.commands.options import branch_options, json_option, trust_option
from mergegate.git.refnames import branch_name
from mergegate.operations.check_annotations import escape_data
from mergegate.rules.job import runner_labels
from mergegate.runner.one_pass import Options, Runner
from mergegate.runner.results import Planned

# GitHub refuses a matrix of more than 256 entries; the rest wait for the next plan.
GITHUB_MATRIX_LIMIT = 256


@click.command("plan")
@branch_options
@trust_option
@json_option
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="LABEL",
    help="Only jobs a runner with these labels may claim "
    "(repeatable; default: every runnable job).",
)
@click.option(
    "--github",
    is_flag=True,
    help="Also write matrix=, count= and more= to $GITHUB_OUTPUT (automatic when "
    "GITHUB_ACTIONS=true).",
)
@click.option(
    "--limit",
    type=click.IntRange(min=1),
    default=256,
    show_default=True,
    metavar="N",
    help="At most N entries (GitHub refuses a matrix of more than 256); the rest wait for the next "
    "plan.",
)
def command(
    repo: Path,
    remote: str,
    branch: str,
    no_fetch: bool,
    trust_root: str | None,
    as_json: bool,
    labels: tuple[str, ...],
    github: bool,
    limit: int,
) -> int:
    """List the jobs a runner would claim now, as a GitHub Actions matrix with --json.

    The same planning as a pass (`run --dry-run`); nothing is written. Each
    entry is one revision: path, job, blob, commit, attempt and runs_on. Run an
    entry with `mergegate run --once --job PATH`: the same at-most-once claim.

    \b
    Example:
      mergegate plan
      mergegate plan --json            # {"include": [{"path": "jobs/a.yaml", ...}]}
      mergegate plan --github          # in Actions: matrix=... count=N in $GITHUB_OUTPUT
    """
    return main(
        repo=repo,
        remote=remote,
        branch=branch,
        fetch=not no_fetch,
        trust_root=trust_root,
        as_json=as_json,
        labels=labels,
        github=github,
        limit=limit,
    )


def main(
    *,
    repo: Path,
    remote: str,
    branch: str,
    fetch: bool,
    trust_root: str | None,
    as_json: bool,
    labels: tuple[str, ...] = (),
    github: bool = False,
    limit: int = GITHUB_MATRIX_LIMIT,
) -> int:
    branch = branch_name(branch, remote)
    github = github or os.environ.get("GITHUB_ACTIONS") == "true"
    # For a matrix, the entries are for legs started with these same labels (none: a plain runner),
    # so every entry is one its leg can claim; without --github and --label, what any runner may
    # claim.
    runner = Runner(
        Options(
            repo=repo,
            remote=remote,
            branch=branch,
            fetch=fetch,
            runner_name="plan",
            trust_root=trust_root,
            labels=runner_labels(labels) if labels or github else None,
        )
    )
    preview = runner.preview()
    # Planning signs nothing: the fan-out's plan step has no key, and needs none.
    output.warn([w for w in preview.warnings if not w.endswith("a real pass needs --signing-key")])
    if preview.waiting is not None:
        # Not an empty plan: what comes after this commit is not judged yet (the next plan asks
        # again).
        commit, why = preview.waiting
        output.warn([f"stopped at {commit[:12]}: {why}; jobs from there on are not planned yet"])
        if github:
            output.workflow_command(
                "::warning title=mergegate: waiting for evidence::"
                + escape_data(f"stopped at {commit[:12]}: {why}")
            )
    runnable = [j for j in preview.jobs if j.status == "would run"]
    include = [entry(j) for j in runnable[:limit]]
    matrix = {"include": include}
    if github:
        write_outputs(matrix, left=len(runnable) - len(include))
    if as_json:
        output.emit(matrix)
        return 0
    for job in runnable[:limit]:
        labels_text = f"  runs_on: {', '.join(job.runs_on)}" if job.runs_on else ""
        retry = f"  attempt {job.attempt}" if job.attempt is not None and job.attempt > 1 else ""
        output.line(
            f"{output.state('runnable', 10)} {job.path}  ({job.commit[:7]}){retry}{labels_text}"
        )
    if len(runnable) > len(include):
        output.line(
            f"{len(runnable) - len(include)} more runnable: left for the next plan (at most "
            f"{limit} at once)"
        )
    if not include:
        output.line("nothing to run now")
    # What is approved but not runnable now, and why (labels, a retry's backoff, a run elsewhere).
    for waiting in runner.plan.queued if runner.plan is not None else ():
        output.line(
            f"{output.state(waiting.state, 10)} {waiting.decision.path}  "
            f"({waiting.decision.commit[:7]}): {waiting.reason}"
        )
    return 0


def entry(job: Planned) -> dict[str, object]:
    """One matrix entry: what `run --once --job` needs, and what a workflow may show or route on."""
    return {
        "path": job.path,
        "job": job.job,
        "blob": job.blob,
        "commit": job.commit,
        "attempt": job.attempt,
        "runs_on": list(job.runs_on),
    }


def write_outputs(matrix: dict[str, list[dict[str, object]]], *, left: int) -> None:
    """`matrix=<one line of JSON>`, `count=N` and `more=N` in $GITHUB_OUTPUT, for
    `fromJSON(needs.plan.outputs.matrix)`."""
    target = os.environ.get("GITHUB_OUTPUT")
    if not target:
        return
    line = json.dumps(matrix, sort_keys=True, separators=(",", ":"))
    with Path(target).open("a", encoding="utf-8") as handle:
        handle.write(f"matrix={line}\ncount={len(matrix['include'])}\nmore={left}\n")
