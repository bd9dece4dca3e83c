"""`mergegate run`: one pass (`--once`) or a loop of passes (runner/poll_loop.py)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import click

from mergegate.commands import output
from mergegate.commands.job_lines import JobLines
from mergegate.commands.options import branch_options, json_option, trust_option
from mergegate.errors import GitError, MergegateError, UsageError
from mergegate.git.refnames import branch_name
from mergegate.git.repo import Repo
from mergegate.git.values import check_signing_key
from mergegate.runner import idle

if (
    TYPE_CHECKING
):  # the planning stack is imported only when a pass runs (an idle `run --once` needs none of it)
    from mergegate.runner.one_pass import Runner
    from mergegate.runner.results import PassResult


@click.command("run")
@branch_options
@trust_option
@json_option
@click.option("--once", is_flag=True, help="Process what is pending, then exit.")
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=10.0,
    show_default=True,
    help="Seconds between polls.",
)
@click.option(
    "--runner-name", default="runner", show_default=True, help="Name written into every record."
)
@click.option(
    "--signing-key",
    default=None,
    help="Sign audit commits: ssh private key path or OpenPGP key id.",
)
@click.option(
    "--output-dir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Keep full redacted output here.",
)
@click.option(
    "--shutdown-grace",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    metavar="SECONDS",
    help="On SIGINT/SIGTERM, let the job in flight run this long "
    "before its process tree is killed.",
)
@click.option(
    "--lock-wait",
    type=click.FloatRange(min=0),
    default=5.0,
    show_default=True,
    metavar="SECONDS",
    help="Wait this long for another pass in this clone to finish before refusing.",
)
@click.option(
    "--max-backoff",
    type=click.FloatRange(min=0.1),
    default=300.0,
    show_default=True,
    metavar="SECONDS",
    help="Longest wait between polls while the remote is unreachable (the loop).",
)
@click.option(
    "--dry-run",
    "dry_run",
    is_flag=True,
    help="Say what one pass would claim, run and record; write, push and run nothing.",
)
@click.option(
    "--label",
    "labels",
    multiple=True,
    metavar="LABEL",
    help="This runner's label (repeatable): it claims only jobs whose runs_on it has all of.",
)
@click.option(
    "--job",
    "job",
    default=None,
    metavar="PATH",
    help="With --once: claim and run only this job's runnable revision (a matrix entry of "
    "`mergegate plan`).",
)
@click.option(
    "--parallel",
    type=click.IntRange(min=1, max=256),
    default=1,
    show_default=True,
    metavar="N",
    help="Run up to N jobs at once (their claims go in one push).",
)
@click.option(
    "--report",
    is_flag=True,
    help="Report each run of a job approved through a pull request on that pull request: a "
    "commit status and a comment (needs GITHUB_REPOSITORY and a token; best effort).",
)
def command(
    repo: Path,
    remote: str,
    branch: str,
    no_fetch: bool,
    trust_root: str | None,
    as_json: bool,
    once: bool,
    interval: float,
    runner_name: str,
    signing_key: str | None,
    output_dir: Path | None,
    shutdown_grace: float,
    lock_wait: float,
    max_backoff: float,
    dry_run: bool,
    parallel: int,
    labels: tuple[str, ...],
    job: str | None,
    report: bool,
) -> int:
    """Run every newly approved job and push its records to the branch mergegate/audit.

    The first SIGINT or SIGTERM stops claiming; the job in flight gets
    --shutdown-grace seconds, then is killed and recorded `interrupted`, and
    the records are pushed before the runner exits. With --json, each pass
    (and, in the loop, each outage and recovery) is one JSON object per line.
    Each job's start and end are said on stderr as they happen (on a terminal,
    without --json, also a live line of what runs); stdout keeps the summary.

    A runner with --label claims only jobs whose runs_on it has all of; a job
    without runs_on is claimed by any runner. --job PATH claims and runs that
    one revision and records nothing else (exit 0 if another runner has it).
    --report posts each result on its pull request (docs/github.md); a post
    that fails is retried by the next pass and never changes the exit code.

    \b
    Example:
      mergegate run --once --runner-name ci-1 --json
      mergegate run --interval 30 --runner-name host-1   # the poll loop
      mergegate run --once --label gpu --label linux     # only jobs it has the labels for
      mergegate run --once --job jobs/deploy.yaml        # one entry of a `mergegate plan` matrix
      mergegate run --dry-run                            # what a pass would do
      mergegate run --once --parallel 8                  # up to 8 jobs at once
      mergegate run --once --report                      # results on the pull requests
    """
    if signing_key is not None:
        check_signing_key(signing_key)
    if dry_run:
        return dry_pass(
            repo=repo,
            remote=remote,
            branch=branch,
            fetch=not no_fetch,
            trust_root=trust_root,
            as_json=as_json,
            runner_name=runner_name,
            signing_key=signing_key,
            labels=labels,
        )
    return main(
        repo=repo,
        remote=remote,
        branch=branch,
        fetch=not no_fetch,
        trust_root=trust_root,
        as_json=as_json,
        once=once,
        interval=interval,
        runner_name=runner_name,
        signing_key=signing_key,
        output_dir=output_dir,
        shutdown_grace=shutdown_grace,
        lock_wait=lock_wait,
        max_backoff=max_backoff,
        parallel=parallel,
        labels=labels,
        job=job,
        report=report,
    )


def main(
    *,
    repo: Path,
    remote: str,
    branch: str,
    fetch: bool,
    trust_root: str | None,
    as_json: bool,
    once: bool,
    interval: float,
    runner_name: str,
    signing_key: str | None,
    output_dir: Path | None,
    shutdown_grace: float = 5.0,
    lock_wait: float = 5.0,
    max_backoff: float = 300.0,
    parallel: int = 1,
    labels: tuple[str, ...] = (),
    job: str | None = None,
    report: bool = False,
) -> int:
    branch = branch_name(branch, remote)  # every spelling of the approved branch
    if job is not None and not once:
        raise UsageError(
            "--job needs --once: it claims and runs one revision, then exits",
            hint="mergegate run --once --job jobs/NAME.yaml",
        )
    clone: Repo | None = (
        None  # the idle check's, which the pass goes on with (one `rev-parse` less)
    )
    if once and job is None and fetch:
        clone = _open(repo)  # (None: the pass says what is wrong)
        if clone is not None and _quiet(
            clone,
            remote=remote,
            branch=branch,
            trust_root=trust_root,
            runner_name=runner_name,
            labels=labels,
            signing_key=signing_key,
            as_json=as_json,
        ):
            clone.close()
            return 0
    from mergegate.rules.job import is_job_path, runner_labels
    from mergegate.runner.one_pass import Options, Runner

    if job is not None and not is_job_path(job):
        raise UsageError(
            f"--job {job!r} is not a job path",
            hint="a job is a file jobs/NAME.yaml (as `mergegate plan` prints it)",
        )
    runner = Runner(
        Options(
            repo=repo,
            remote=remote,
            branch=branch,
            fetch=fetch,
            runner_name=runner_name,
            trust_root=trust_root,
            signing_key=signing_key,
            output_dir=output_dir,
            shutdown_grace=shutdown_grace,
            lock_wait=lock_wait,
            parallel=parallel,
            labels=runner_labels(labels),
            job=job,
            report=report,
        ),
        repo=clone,
    )
    # Each job's start and end on stderr as it happens (stdout keeps the summary, or the JSON).
    lines = JobLines(live=not as_json)
    runner.watch = lines
    if once:
        try:
            result = runner.run_once()
        finally:
            lines.close()
        if job is not None and not any(o.path == job for o in result.outcomes):
            return _not_run(runner, result, job, as_json=as_json)
        _report(result, as_json=as_json, once=True)
        return result.exit_code
    from mergegate.runner.poll_loop import PollLoop

    what = (
        f"a new commit on {branch} or mergegate/audit at {remote}"
        if fetch and runner.repo.has_remote(remote)
        else f"the next pass (no remote {remote} to ask first)"
    )

    def on_pass(result: PassResult) -> None:
        lines.close()
        _report(result, as_json=as_json, once=False)

    try:
        PollLoop(runner, interval=interval, max_backoff=max_backoff).run(
            on_pass=on_pass,
            on_error=lambda exc, delay, failures: _outage(
                exc,
                delay,
                failures,
                as_json=as_json,
                spool=runner.spool.path,
                apart=max(interval, max_backoff),
            ),
            on_recover=lambda failures, seconds: _recovered(failures, seconds, as_json=as_json),
            on_wait=lambda seconds, wake: lines.waiting(seconds, wake, what=what),
        )
    finally:
        lines.close()
    return 0


def _open(repo: Path) -> Repo | None:
    try:
        return Repo(repo)
    except GitError:
        return None


def _report(result: PassResult, *, as_json: bool, once: bool) -> None:
    _show(result, as_json=as_json, once=once)
    if result.stopped_by:
        interrupted = sum(o.status == "interrupted" for o in result.outcomes)
        output.line(
            f"stopped by {result.stopped_by}: no more jobs claimed, {interrupted} interrupted, "
            "records pushed",
            err=True,
        )


def _outage(
    exc: MergegateError, delay: float, failures: int, *, as_json: bool, spool: Path, apart: float
) -> None:
    """An outage began or changed its cause (the poll loop says each once, not once per poll)."""
    cause = str(exc)
    detail = exc.detail if isinstance(exc, GitError) else None
    if as_json:
        output.emit_line(
            {
                "event": "outage",
                "error": exc.message,
                "file": exc.file,
                "hint": exc.hint,
                "detail": detail,
                "failures": failures,
                "retry_in": round(delay, 3),
                "spool": str(spool),
            }
        )
        return
    output.line(f"error: {cause}", err=True)
    if exc.hint:
        output.line(f"hint: {exc.hint}", err=True)
    if detail and detail.strip() not in cause:
        output.line(
            "git said: "
            + " | ".join(line.strip() for line in detail.strip().splitlines() if line.strip()),
            err=True,
        )
    output.line(
        f"retrying with backoff (next in {delay:.1f}s, at most {apart:g}s "
        "apart); "
        f"results not yet pushed are kept in {spool}",
        err=True,
    )


def _recovered(failures: int, seconds: float, *, as_json: bool) -> None:
    if as_json:
        output.emit_line({"event": "recovered", "failures": failures, "seconds": round(seconds, 3)})
    else:
        output.line(f"recovered after {failures} failed poll(s) over {seconds:.0f}s", err=True)


def _quiet(
    clone: Repo,
    *,
    remote: str,
    branch: str,
    trust_root: str | None,
    runner_name: str,
    labels: tuple[str, ...],
    signing_key: str | None,
    as_json: bool,
) -> bool:
    """Say what the last quiet pass said, if a pass now would find the same nothing (idle.py)."""
    key = idle.key(
        remote=remote,
        branch=branch,
        trust_root=trust_root,
        runner_name=runner_name,
        labels=labels,
        signing_key=signing_key,
    )
    quiet = idle.still_quiet(clone, runner_name=runner_name, remote=remote, key=key)
    if quiet is None:
        return False
    if as_json:
        output.emit(
            {
                "tip": quiet.tip,
                "jobs": [],
                "policy_changes": [],
                "exit_code": 0,
                "stopped_by": None,
                "waiting": None,
            }
        )
    else:
        output.line("nothing to run")
    return True


def _show(result: PassResult, *, as_json: bool, once: bool) -> None:
    output.warn(result.warnings)
    if as_json:
        changes = [{"commit": c, "status": s, "reason": r} for c, s, r in result.policy_changes]
        data = {
            "tip": result.tip,
            "jobs": [o.as_json() for o in result.outcomes],
            "policy_changes": changes,
            "exit_code": result.exit_code,
            "stopped_by": result.stopped_by,
            "waiting": {"commit": result.waiting[0], "reason": result.waiting[1]}
            if result.waiting
            else None,
        }
        # The loop prints a stream: one object per line, so a JSON-lines reader can follow it.
        (output.emit if once else output.emit_line)(data if once else {"event": "pass", **data})
        return
    for commit, state, why in result.policy_changes:
        # A rejected policy change says why: the reason is what the approvers must fix.
        output.line(
            f"policy    {output.state(state)} "
            f"({commit[:7]}){': ' + why if state == 'rejected' and why else ''}"
        )
    for o in result.outcomes:
        reason = ": " + o.reason if o.reason and o.status != "succeeded" else ""
        output.line(f"{output.state(o.status, 10)} {o.job or o.path}  ({o.commit[:7]}){reason}")
    if result.waiting is not None:
        commit, why = result.waiting
        output.line(
            f"{output.state('waiting', 10)} ({commit[:7]}) {why}; judged again on the next pass"
        )
    elif not result.outcomes and once:
        output.line("nothing to run")


def _not_run(runner: Runner, result: PassResult, path: str, *, as_json: bool) -> int:
    """`run --once --job PATH` found nothing of PATH to claim: say why (exit 0 when another runner
    has it)."""
    from mergegate.runner.plan import why_not

    code, state, reason = why_not(
        runner.plan, runner.repo, result.tip, path, labels=runner.options.labels or ()
    )
    output.warn(result.warnings)
    if as_json:
        output.emit(
            {
                "tip": result.tip,
                "jobs": [],
                "job": {"path": path, "state": state, "reason": reason},
                "exit_code": code,
                "stopped_by": result.stopped_by,
                "waiting": None,
            }
        )
    else:
        output.line(f"{output.state(state, 10)} {path}: {reason}")
    return code


def dry_pass(
    *,
    repo: Path,
    remote: str,
    branch: str,
    fetch: bool,
    trust_root: str | None,
    as_json: bool,
    runner_name: str,
    signing_key: str | None,
    labels: tuple[str, ...] = (),
) -> int:
    """One pass's plan: the same planning and refusals as a pass, stopping before the first
    claim."""
    from mergegate.rules.job import runner_labels
    from mergegate.runner.one_pass import Options, Runner

    branch = branch_name(branch, remote)
    runner = Runner(
        Options(
            repo=repo,
            remote=remote,
            branch=branch,
            fetch=fetch,
            runner_name=runner_name,
            trust_root=trust_root,
            signing_key=signing_key,
            labels=runner_labels(labels),
        )
    )
    preview = runner.preview()
    output.warn(preview.warnings)
    if as_json:
        changes = [{"commit": c, "status": s, "reason": r} for c, s, r in preview.policy_changes]
        output.emit(
            {
                "dry_run": True,
                "tip": preview.tip,
                "jobs": [j.as_json() for j in preview.jobs],
                "records": [r.as_json() for r in preview.records],
                "policy_changes": changes,
            }
        )
        return 0
    for commit, state, _ in preview.policy_changes:
        output.line(f"policy      would be {state} ({commit[:7]})")
    for j in preview.jobs:
        what = " ".join(j.command) if j.status == "would run" else (j.reason or "")
        output.line(
            f"{output.state(j.status, 12)} {j.job or j.path}  ({j.commit[:7]}): "
            f"{output.brief(what)}"
        )
    events = [r.event for r in preview.records]
    counts = ", ".join(f"{events.count(e)} {e}" for e in dict.fromkeys(events))
    output.line(f"would record: {counts}" if events else "nothing to run or record")
    output.line("dry run: nothing was written or pushed")
    return 0
