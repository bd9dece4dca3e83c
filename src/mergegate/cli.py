"""Command line: parse, call one function, print, return an exit code.

This is the only module that imports click. One handler turns every
MergegateError into `error: <what> (<file>:<line>)` and a `hint:`.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from mergegate import __version__
from mergegate.errors import MergegateError, UsageError

_debug = False


def _repo_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--repo", "repo", type=click.Path(file_okay=False, path_type=Path), default=Path("."),
                        show_default=True, help="The gate repository.")(f)


def _branch_options(f: Callable[..., Any]) -> Callable[..., Any]:
    f = click.option("--no-fetch", "no_fetch", is_flag=True, help="Read the remote-tracking branch as it is.")(f)
    f = click.option("--branch", default="approved", show_default=True, help="The approved branch.")(f)
    f = click.option("--remote", default="origin", show_default=True, help="Remote to fetch from and push to.")(f)
    return _repo_option(f)


def _trust_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--trust-root", "trust_root", envvar="MERGEGATE_TRUST_ROOT", default=None, metavar="COMMIT",
                        help="Pinned trust root, or MERGEGATE_TRUST_ROOT (default: the first commit of approved with a policy, with a warning).")(f)


def _json_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--json", "as_json", is_flag=True, help="Print one JSON object (stable format).")(f)


def _emit(data: Any) -> None:
    click.echo(json.dumps(data, indent=2, sort_keys=True, ensure_ascii=False))


def _brief(text: str, limit: int = 140) -> str:
    """One screen line for a list; the whole reason is in --json and the audit."""
    return text if len(text) <= limit else text[: limit - 12].rstrip() + "… (--json)"


def _warn(warnings: tuple[str, ...] | list[str]) -> None:
    for warning in warnings:
        click.echo(f"warning: {warning}", err=True)


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="mergegate")
@click.option("--debug", is_flag=True, help="Show tracebacks.")
def cli(debug: bool) -> None:
    """mergegate: run a job only after a signed, policy-checked merge into `approved`.

    \b
    Example:
      mergegate init --key ~/.ssh/id_ed25519.pub
      mergegate check origin/add-backup-job
      mergegate approve origin/add-backup-job --merge
      mergegate run --once
      mergegate verify

    Exit codes: 0 ok, 1 a job failed or was refused, 2 bad input, 3 integrity.
    Docs: docs/getting-started.md, docs/cli.md.
    """
    global _debug
    _debug = debug


@cli.command()
@_branch_options
@_trust_option
@_json_option
@click.option("--once", is_flag=True, help="Process what is pending, then exit.")
@click.option("--interval", type=click.FloatRange(min=0.1), default=10.0, show_default=True, help="Seconds between polls.")
@click.option("--runner-name", default="runner", show_default=True, help="Name written into every record.")
@click.option("--signing-key", default=None, help="Sign audit commits: ssh private key path or OpenPGP key id.")
@click.option("--output-dir", type=click.Path(file_okay=False, path_type=Path), default=None, help="Keep full redacted output here.")
def run(repo: Path, remote: str, branch: str, no_fetch: bool, trust_root: str | None, as_json: bool, once: bool,
        interval: float, runner_name: str, signing_key: str | None, output_dir: Path | None) -> int:
    """Run every newly approved job and push its audit records.

    \b
    Example:
      mergegate run --once --runner-name ci-1 --json
    """
    from mergegate.runner import Options, PassResult, Runner

    runner = Runner(Options(repo=repo, remote=remote, branch=branch, fetch=not no_fetch, runner_name=runner_name,
                            trust_root=trust_root, signing_key=signing_key, output_dir=output_dir))

    def show(result: PassResult) -> None:
        _warn(result.warnings)
        if as_json:
            changes = [{"commit": c, "status": s, "reason": r} for c, s, r in result.policy_changes]
            _emit({"tip": result.tip, "jobs": [o.as_json() for o in result.outcomes], "policy_changes": changes,
                   "exit_code": result.exit_code})
            return
        for commit, state, _ in result.policy_changes:
            click.echo(f"policy    {state} ({commit[:7]})")
        for o in result.outcomes:
            click.echo(f"{o.status:<10} {o.job or o.path}  ({o.commit[:7]}){': ' + o.reason if o.reason and o.status != 'succeeded' else ''}")
        if not result.outcomes and once:
            click.echo("nothing to run")

    if once:
        result = runner.run_once()
        show(result)
        return result.exit_code

    def retry(exc: MergegateError) -> None:
        click.echo(f"error: {exc} (retrying in {interval:g}s)", err=True)

    runner.run_forever(interval=interval, on_pass=show, on_error=retry)
    return 0


@cli.command()
@_branch_options
@_trust_option
@_json_option
def status(repo: Path, remote: str, branch: str, no_fetch: bool, trust_root: str | None, as_json: bool) -> int:
    """Show every job on approved with its state.

    States: queued, running, succeeded, failed, timed_out, rejected, vetoed, not run.

    \b
    Example:
      mergegate status --json
    """
    from mergegate.status import status as get_status

    report = get_status(repo_path=repo, remote=remote, branch=branch, fetch=not no_fetch, trust=trust_root)
    _warn(report.warnings)
    if as_json:
        _emit({"tip": report.tip, "records": report.records, "jobs": [j.as_json() for j in report.jobs]})
        return 0
    for j in report.jobs:
        click.echo(f"{j.state:<10} {j.job:<30} {j.path}{'  ' + _brief(j.reason) if j.reason and j.state != 'succeeded' else ''}")
    if not report.jobs:
        click.echo("no jobs on approved")
    return 0


@cli.command()
@click.argument("ref", default="HEAD")
@click.option("--base", default="approved", show_default=True, help="The approved branch to compare with.")
@click.option("--remote", default="origin", show_default=True, help="Remote to fetch the base (and REF, if remote) from.")
@click.option("--no-fetch", "no_fetch", is_flag=True, help="Use the remote-tracking branches as they are.")
@_repo_option
@_trust_option
@_json_option
def check(ref: str, base: str, remote: str, no_fetch: bool, repo: Path, trust_root: str | None, as_json: bool) -> int:
    """Validate the jobs REF adds or changes and judge them by the policy in force.

    REF defaults to HEAD (the current branch); a branch that only exists on the
    remote is read from there. Exit 0 if all would be allowed, 1 if any would be
    denied, 2 if a file is invalid.

    \b
    Example (a pull request check):
      mergegate check origin/add-backup-job --json
    """
    from mergegate.proposals import check as run_check

    report = run_check(repo_path=repo, ref=ref, base=base, remote=remote, fetch=not no_fetch, trust=trust_root)
    if as_json:
        _emit({"ref": report.ref, "head": report.head, "base": report.base, "policy_commit": report.policy,
               "files": [f.as_json() for f in report.files], "exit_code": report.exit_code})
        return report.exit_code
    for f in report.files:
        click.echo(f"{f.state:<8} {f.path}: {f.reason}")
        if f.approvals:
            click.echo(f"         approvals: {f.approvals}")
    if not report.files:
        click.echo(f"{ref} changes no job or policy file relative to {base}")
    return report.exit_code


@cli.command()
@click.argument("branch_name", metavar="BRANCH")
@click.option("--merge", is_flag=True, help="Make the signed merge into approved instead of an approval commit.")
@click.option("--base", default="approved", show_default=True, help="The approved branch.")
@click.option("--remote", default="origin", show_default=True, help="Remote to fetch from and push to.")
@click.option("--no-fetch", "no_fetch", is_flag=True, help="Use the remote-tracking branches as they are.")
@_repo_option
@_trust_option
@_json_option
def approve(branch_name: str, merge: bool, base: str, remote: str, no_fetch: bool, repo: Path, trust_root: str | None,
            as_json: bool) -> int:
    """Sign an approval of BRANCH (with your git signing key) and push it.

    Shows what `check` says first and refuses invalid or denied jobs.

    \b
    Example:
      mergegate approve add-backup-job          # approval commit on the branch
      mergegate approve add-backup-job --merge  # signed merge into approved
    """
    from mergegate.proposals import approve as run_approve

    result = run_approve(repo_path=repo, branch_name=branch_name, base=base, remote=remote, merge=merge,
                         fetch=not no_fetch, trust=trust_root)
    if as_json:
        _emit({"commit": result.commit, "kind": result.kind, "pushed_to": result.pushed_to,
               "files": [f.as_json() for f in result.report.files]})
        return 0
    for f in result.report.files:
        click.echo(f"{f.state:<8} {f.path}: {f.reason}")
    click.echo(f"signed {result.kind} {result.commit[:12]} pushed to {result.pushed_to}")
    return 0


@cli.command()
@click.argument("path")
@click.option("--blob", default=None, help="The revision to veto (default: the file as it is on approved).")
@_branch_options
@_json_option
def veto(path: str, blob: str | None, repo: Path, remote: str, branch: str, no_fetch: bool, as_json: bool) -> int:
    """Stop an approved job that has not started: push a signed veto to approved.

    Signed with your git signing key, which must be an approver key. A veto
    that arrives after the job started has no effect.

    \b
    Example:
      mergegate veto jobs/deploy.yaml
    """
    from mergegate.proposals import veto as run_veto

    result = run_veto(repo_path=repo, path=path, blob=blob, remote=remote, branch=branch, fetch=not no_fetch)
    if as_json:
        _emit({"commit": result.commit, "path": result.path, "blob": result.blob, "pushed_to": result.pushed_to})
        return 0
    click.echo(f"signed veto {result.commit[:12]} of {result.path} at {result.blob[:7]} pushed to {result.pushed_to}")
    return 0


@cli.command()
@_branch_options
@_trust_option
@_json_option
def verify(repo: Path, remote: str, branch: str, no_fetch: bool, trust_root: str | None, as_json: bool) -> int:
    """Re-judge the whole history of approved and cross-check the audit.

    Exit 0 when every started job was validly approved and the chain is intact, 3 otherwise.

    \b
    Example (an auditor on a fresh clone):
      mergegate verify --trust-root 1a2b3c4 --json
    """
    from mergegate.verification import verify_history

    report = verify_history(repo_path=repo, remote=remote, branch=branch, fetch=not no_fetch, trust=trust_root)
    _warn(report.warnings)
    if as_json:
        _emit({"trust_root": report.trust_root, "tip": report.tip, "records": report.records,
               "commits": [c.as_json() for c in report.commits], "violations": list(report.violations),
               "ok": not report.violations})
        return report.exit_code
    for c in report.commits:
        click.echo(f"{c.commit[:7]} {c.kind:<13} {c.summary}")
        for j in c.jobs:
            click.echo(f"        {'approved' if j['approved'] else 'rejected'} {j['path']}: {j['reason']}")
    for v in report.violations:
        click.echo(f"violation: {v}", err=True)
    click.echo(f"{'ok' if not report.violations else 'FAILED'}: {len(report.commits)} commits, {report.records} records")
    return report.exit_code


@cli.group()
def audit() -> None:
    """Inspect the audit log.

    \b
    Example:
      mergegate audit verify
    """


@audit.command("verify")
@_branch_options
@_json_option
def audit_verify(repo: Path, remote: str, branch: str, no_fetch: bool, as_json: bool) -> int:
    """Verify the hash chain and that audit history only ever appended.

    \b
    Example:
      mergegate audit verify --json
    """
    from mergegate.errors import IntegrityError
    from mergegate.verification import verify_audit

    try:
        report = verify_audit(repo_path=repo, remote=remote, branch=branch, fetch=not no_fetch)
    except IntegrityError as exc:
        if as_json:
            _emit({"ok": False, "error": exc.message, "file": exc.file, "line": exc.line})
        raise
    if as_json:
        _emit({"ok": True, "records": report.records, "files": report.files, "tip": report.tip})
    else:
        click.echo(f"ok: {report.records} records in {report.files} file(s) verified at {report.tip[:12]}")
    return 0


@cli.command()
@_repo_option
@click.option("--approver", default=None, help="Approver name (default: git user.name).")
@click.option("--email", default=None, help="Approver email, used to spot self-approval.")
@click.option("--key", default=None, help="Approver ssh public key: a file or a key line (default: git user.signingkey).")
@click.option("--solo", is_flag=True, help="One-person setup: allow self-approval, policy changes need one approver.")
@click.option("--branch", default="approved", show_default=True)
def init(repo: Path, approver: str | None, email: str | None, key: str | None, solo: bool, branch: str) -> int:
    """Write a deny-by-default policy, jobs/ and audit/, and create the approved branch.

    An existing policy/policy.yaml is validated and kept as it is (then
    --approver, --key, --email and --solo are ignored, with a warning). The
    commit init makes is the trust root.

    \b
    Example:
      mergegate init --approver alice --key ~/.ssh/id_ed25519.pub
    """
    from mergegate.scaffold import init as run_init

    result = run_init(repo_path=repo, approver=approver, key=key, email=email, solo=solo, branch=branch)
    _warn(result.warnings)
    for path in result.written:
        click.echo(f"wrote {path}")
    click.echo(f"created branch {result.branch} at {result.commit[:12]} (the trust root)")
    click.echo(f"next: git push origin HEAD {result.branch}; then propose jobs (and policy changes, such as "
               "command rules) on branches and approve them with signed merges (docs/getting-started.md)")
    return 0


def main(argv: list[str] | None = None) -> int:
    try:
        code = cli.main(args=argv, prog_name="mergegate", standalone_mode=False)
    except MergegateError as exc:
        if _debug:
            raise
        from mergegate.redaction import redact_text

        click.echo(f"error: {redact_text(str(exc))}", err=True)
        if exc.hint:
            click.echo(f"hint: {exc.hint}", err=True)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.ClickException as exc:
        exc.show()
        return UsageError.exit_code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # one line for the person; the traceback is for --debug
        if _debug:
            raise
        click.echo(f"error: unexpected {type(exc).__name__}: {exc}", err=True)
        click.echo("hint: run again with --debug for a traceback, and report it", err=True)
        return 1
    return int(code) if isinstance(code, int) else 0


def entry() -> None:
    sys.exit(main())
