"""`mergegate audit export`: the records for a SIEM or a log shipper, one JSON object a line."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import BinaryIO

import click

from mergegate.audit.records import EVENTS
from mergegate.commands import output
from mergegate.commands.options import branch_options, trust_option
from mergegate.errors import GitError, UsageError
from mergegate.git.refnames import branch_name

FORMATS = ("jsonl", "ecs", "intoto", "slsa-source")


@click.command("export")
@branch_options
@trust_option
@click.option(
    "--format",
    "fmt",
    type=click.Choice(FORMATS),
    default="jsonl",
    show_default=True,
    help="jsonl: the records as the log holds them; ecs: Elastic Common Schema documents; "
    "intoto: each run's signed attestation (DSSE); slsa-source: a signed SLSA source summary "
    "of each commit of --ref.",
)
@click.option(
    "--since",
    type=click.IntRange(min=0),
    default=0,
    metavar="SEQ",
    help="Only records after seq SEQ (a cursor file, when there is one, says where instead).",
)
@click.option("--job", "job", default=None, metavar="ID", help="Only records of this job.")
@click.option(
    "--event",
    "events",
    multiple=True,
    type=click.Choice(EVENTS),
    help="Only these events (repeatable).",
)
@click.option(
    "--output",
    "output_file",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="Append the lines to FILE instead of printing them.",
)
@click.option("--follow", is_flag=True, help="Keep polling; print new records as they land.")
@click.option(
    "--cursor",
    type=click.Path(dir_okay=False, path_type=Path),
    default=None,
    metavar="FILE",
    help="Resume after the last line printed, kept in FILE (seq and hash, written after each "
    "line).",
)
@click.option(
    "--interval",
    type=click.FloatRange(min=0.1),
    default=5.0,
    show_default=True,
    metavar="SECONDS",
    help="With --follow: seconds between polls.",
)
@click.option(
    "--ref",
    default=None,
    metavar="BRANCH",
    help="With --format slsa-source: the branch summarised (the gate's approved branch).",
)
@click.option(
    "--signing-key",
    default=None,
    metavar="PATH",
    help="With --format slsa-source: the runner's ssh key that signs the summaries.",
)
@click.option(
    "--repository-uri",
    default=None,
    metavar="URI",
    help="With --format slsa-source: the resourceUri (default: git+ and the remote's URL).",
)
def command(
    repo: Path,
    remote: str,
    branch: str,
    no_fetch: bool,
    trust_root: str | None,
    fmt: str,
    since: int,
    job: str | None,
    events: tuple[str, ...],
    output_file: Path | None,
    follow: bool,
    cursor: Path | None,
    interval: float,
    ref: str | None,
    signing_key: str | None,
    repository_uri: str | None,
) -> int:
    """Print the records for other tools, a JSON object a line, checked as `audit verify` does.

    With --follow it keeps polling (ls-remote first; a fetch only when mergegate/audit moved)
    and prints records as they land, until SIGINT or SIGTERM. With --cursor FILE a restart
    resumes right after the last line printed: a line may be printed twice after a kill,
    never skipped. Field mapping and Vector/Fluent Bit recipes: docs/siem.md.

    --format intoto prints the attestation of each run whose `finished` record is selected,
    its DSSE envelope as the audit branch holds it, one a line (.intoto.jsonl).

    --format slsa-source prints, for each commit of approved after the trust root that
    `mergegate verify` judged, a SLSA Verification Summary Attestation in a DSSE envelope signed
    with --signing-key (a runner key of the policy), one a line (.intoto.jsonl).

    \b
    Example:
      mergegate audit export --format ecs --since 120
      mergegate audit export --format jsonl --job backup --event finished
      mergegate audit export --format intoto --job backup > backup.intoto.jsonl
      mergegate audit export --format ecs --follow --cursor /var/lib/mergegate/ecs.cursor \\
          --output /var/log/mergegate/audit.ecs.jsonl
      mergegate audit export --format slsa-source --ref approved \\
          --signing-key ~/.ssh/runner_key > approved.intoto.jsonl
    """
    return main(
        repo=repo,
        remote=remote,
        branch=branch,
        fetch=not no_fetch,
        trust_root=trust_root,
        fmt=fmt,
        since=since,
        job=job,
        events=events,
        output_file=output_file,
        follow=follow,
        cursor=cursor,
        interval=interval,
        ref=ref,
        signing_key=signing_key,
        repository_uri=repository_uri,
    )


def main(
    *,
    repo: Path,
    remote: str,
    branch: str,
    fetch: bool,
    trust_root: str | None,
    fmt: str,
    since: int = 0,
    job: str | None = None,
    events: tuple[str, ...] = (),
    output_file: Path | None = None,
    follow: bool = False,
    cursor: Path | None = None,
    interval: float = 5.0,
    ref: str | None = None,
    signing_key: str | None = None,
    repository_uri: str | None = None,
) -> int:
    from mergegate.execution.shutdown import Shutdown
    from mergegate.operations.audit_export import Export, Selection, record_line

    branch = branch_name(branch, remote)  # every spelling of the approved branch
    if fmt == "slsa-source":
        if follow or cursor is not None or since or job is not None or events:
            raise UsageError(
                "--format slsa-source summarises the whole history of the branch: --follow, "
                "--cursor, --since, --job and --event do not apply",
                hint="mergegate audit export --format slsa-source --ref approved --signing-key KEY",
            )
        return _summaries(
            repo=repo,
            remote=remote,
            branch=branch_name(ref, remote) if ref is not None else branch,
            fetch=fetch,
            trust_root=trust_root,
            signing_key=signing_key,
            repository_uri=repository_uri,
            output_file=output_file,
        )
    if ref is not None or signing_key is not None or repository_uri is not None:
        raise UsageError(
            "--ref, --signing-key and --repository-uri are for --format slsa-source",
            hint="mergegate audit export --format slsa-source --ref approved --signing-key KEY",
        )
    with ExitStack() as stack:
        sink = _sink(stack, output_file, durable=cursor is not None)
        export = Export(
            repo_path=repo,
            remote=remote,
            branch=branch,
            fetch=fetch,
            trust=trust_root,
            selection=Selection(since=since, job=job, events=events),
            line=record_line(fmt),
            emit=sink,
            cursor=cursor,
        )
        try:
            if not follow:
                export.batch(fetch=fetch)
                return 0
            stop = stack.enter_context(Shutdown().handling())
            export.follow(stop, interval=interval, on_error=_outage)
        except BrokenPipeError:
            # The reader went away (`| head`): what it read was printed; nothing more to say.
            _quiet_stdout()
    return 0


def _summaries(
    *,
    repo: Path,
    remote: str,
    branch: str,
    fetch: bool,
    trust_root: str | None,
    signing_key: str | None,
    repository_uri: str | None,
    output_file: Path | None,
) -> int:
    from mergegate import clock
    from mergegate.operations.slsa_source import summarise

    if signing_key is None:
        raise UsageError(
            "--format slsa-source needs --signing-key: the summaries are signed by a runner key",
            hint="--signing-key PATH, the ssh key a runner of the policy signs the audit with",
        )
    made = summarise(
        repo_path=repo,
        remote=remote,
        branch=branch,
        fetch=fetch,
        trust=trust_root,
        signing_key=signing_key,
        at=clock.now(),
        repository_uri=repository_uri,
    )
    with ExitStack() as stack:
        emit = _sink(stack, output_file, durable=False)
        try:
            for line in made.lines:
                emit(line)
        except BrokenPipeError:
            _quiet_stdout()
    output.warn(made.warnings)
    return 0


def _sink(stack: ExitStack, path: Path | None, *, durable: bool) -> Callable[[bytes], None]:
    """Where the lines go, each flushed before the cursor moves past it (and, to a file kept
    with a cursor, synced: the line is on disk before the cursor says so)."""
    stream: BinaryIO
    if path is None:
        stream = sys.stdout.buffer
    else:
        try:
            stream = stack.enter_context(path.open("ab"))
        except OSError as exc:
            raise UsageError(f"cannot open the output: {exc.strerror}", file=str(path)) from None

    def emit(data: bytes) -> None:
        stream.write(data)
        stream.flush()
        if durable and path is not None:
            os.fsync(stream.fileno())

    return emit


def _outage(exc: GitError, delay: float) -> None:
    output.line(f"warning: {exc} (retrying in {delay:.0f}s)", err=True)


def _quiet_stdout() -> None:
    """Python would report the broken pipe again when it flushes stdout at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
