"""Command line: the group and the one error handler.

Each command lives in its own module under `mergegate/commands/`: its click definition (arguments,
options, help) next to its glue (calling the domain, printing); the options several share are in
`commands/options.py`. Only the command asked for is imported, so `mergegate --help` and `--version`
import none of them. One handler turns every MergegateError into `error: <what> (<file>:<line>)` and
a `hint:`.
"""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Mapping
from typing import Any

import click

from mergegate import __version__
from mergegate.commands.options import Flags, set_debug
from mergegate.errors import MergegateError, UsageError, cannot_write, is_full

# Every command: its module under mergegate.commands (which defines `command`) and the first
# line of its help, which `mergegate --help` lists without importing the module (start-up:
# importing all sixteen costs about 0.15 s of CPU, three times a whole `--help`).
# tests/test_cli.py checks each line against the command's own help.
COMMANDS: Mapping[str, tuple[str, str]] = {
    "approve": ("approve", "Sign an approval of BRANCH (with your git signing key) and push it."),
    "check": (
        "check",
        "Validate the jobs REF adds or changes and judge them by the policy in force.",
    ),
    "demo": (
        "demo",
        "Build a throwaway gate and walk through the whole flow, printing every command.",
    ),
    "inbox": (
        "inbox",
        "Proposals waiting for a decision, with check's verdict and who may approve.",
    ),
    "init": (
        "init",
        "Write a deny-by-default policy and jobs/, and create the approved branch.",
    ),
    "lint": (
        "lint",
        "Validate job and policy files offline: schema, ids, paths, credential shapes.",
    ),
    "mcp": (
        "mcp",
        "Serve MCP over stdio so AI agents can propose jobs (never approve, veto or run).",
    ),
    "plan": (
        "plan",
        "List the jobs a runner would claim now, as a GitHub Actions matrix with --json.",
    ),
    "propose": ("propose", "Propose jobs/ID.yaml running ARGV, on a branch from approved."),
    "run": (
        "run",
        "Run every newly approved job and push its records to the branch mergegate/audit.",
    ),
    "show": (
        "show",
        "One screen about one job: file, revisions, votes, records, what happens next.",
    ),
    "status": ("status", "Show every job on approved with its state."),
    "verify": (
        "verify",
        "Re-judge the whole history of approved and cross-check the records on mergegate/audit.",
    ),
    "veto": (
        "veto",
        "Stop an approved job that has not started: push a signed veto to approved.",
    ),
}
AUDIT_COMMANDS: Mapping[str, tuple[str, str]] = {
    "export": (
        "audit_export",
        "Print the records for other tools, a JSON object a line, checked as `audit verify` does.",
    ),
    "log": ("audit_log", "Print the records, oldest first, after checking the whole chain."),
    "verify": (
        "audit_verify",
        "Verify the hash chain and every commit of mergegate/audit (linear, append-only, signed).",
    ),
}


class _Group(click.Group):
    """A group whose commands are imported when asked for, each also accepting --debug.

    `lazy` maps a command name to (module under mergegate.commands, first line of its help).
    --debug is added to every command, so it works after the command name too.
    """

    def __init__(
        self, *args: Any, lazy: Mapping[str, tuple[str, str]] | None = None, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: Mapping[str, tuple[str, str]] = lazy or {}

    def add_command(self, cmd: click.Command, name: str | None = None) -> None:
        if not isinstance(cmd, click.Group):
            cmd.params.append(
                click.Option(
                    ["--debug"],
                    is_flag=True,
                    expose_value=False,
                    callback=set_debug,
                    help="Show tracebacks.",
                )
            )
        super().add_command(cmd, name)

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*self.commands, *self.lazy})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in self.lazy:
            module = importlib.import_module(f"mergegate.commands.{self.lazy[cmd_name][0]}")
            self.add_command(module.command, cmd_name)
        return self.commands.get(cmd_name)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        if args and args[0] not in self.commands and args[0] not in self.lazy:
            # Not a command: load them all, so click's "Did you mean" picks from every name.
            for name in self.lazy:
                self.get_command(ctx, name)
        return super().resolve_command(ctx, args)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """As click's, but a command is listed by its line in `lazy`, its module not imported."""
        names = self.list_commands(ctx)
        if not names:
            return
        limit = formatter.width - 6 - max(len(name) for name in names)
        rows = []
        for name in names:
            # A stand-in with the same first line is shortened exactly as the command would be.
            shown = click.Command(name, help=self.lazy[name][1]) if name in self.lazy else None
            rows.append((name, (shown or self.commands[name]).get_short_help_str(limit)))
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=_Group, lazy=COMMANDS, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, "-V", "--version", prog_name="mergegate")
@click.option(
    "--debug", is_flag=True, callback=set_debug, expose_value=False, help="Show tracebacks."
)
def cli() -> None:
    """mergegate: run a job only after a signed, policy-checked merge into `approved`.

    \b
    Example:
      mergegate demo                                   # the whole flow on a throwaway gate
      mergegate init --key ~/.ssh/id_ed25519.pub
      mergegate propose backup --push -- restic backup /srv
      mergegate inbox                                  # what waits for approval
      mergegate approve origin/propose/backup --merge
      mergegate run --once
      mergegate show backup
      mergegate verify

    Exit codes: 0 ok, 1 a job failed or was refused, 2 bad input, 3 integrity.
    See it work: mergegate demo. Each command: mergegate COMMAND --help.
    """


@cli.group(cls=_Group, lazy=AUDIT_COMMANDS)
def audit() -> None:
    """Inspect the audit log (the branch mergegate/audit).

    \b
    Example:
      mergegate audit log --job backup
      mergegate audit verify
    """


def main(argv: list[str] | None = None) -> int:
    Flags.debug = Flags.as_json = False
    try:
        code = cli.main(args=argv, prog_name="mergegate", standalone_mode=False)
    except MergegateError as exc:
        if Flags.debug:
            raise
        from mergegate.redaction import redact_text

        message, hint = redact_text(str(exc)), redact_text(exc.hint) if exc.hint else None
        _say(f"error: {message}")
        if hint:
            _say(f"hint: {hint}")
        _json_error(redact_text(exc.message), file=exc.file, line=exc.line, hint=hint)
        return exc.exit_code
    except click.exceptions.Abort:
        click.echo("aborted", err=True)
        return 130
    except click.exceptions.NoArgsIsHelpError as exc:
        exc.show()  # a group named alone (`mergegate audit`): its help is the answer
        return UsageError.exit_code
    except click.ClickException as exc:
        # A bad flag or argument is an error like any other: one line, and a hint that leads on.
        ctx = getattr(exc, "ctx", None)
        hint = (
            f"{ctx.command_path if ctx is not None else 'mergegate'} --help shows how to call "
            "it, with an example"
        )
        _say(f"error: {exc.format_message()}")
        _say(f"hint: {hint}")
        _json_error(exc.format_message(), hint=hint)
        return UsageError.exit_code
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except KeyboardInterrupt:
        return 130
    except OSError as exc:
        if Flags.debug:
            raise
        # A write no part of mergegate turned into an error of its own: the file (when the OS says
        # it) and what filled up, never "unexpected OSError" without either (issue 22, item 9).
        if not is_full(exc):
            return _unexpected(exc)
        state = cannot_write("a file", None, exc)
        _say(f"error: {state}")
        _say(f"hint: {state.hint}")
        _json_error(state.message, file=state.file, hint=state.hint)
        return state.exit_code
    except Exception as exc:  # one line for the person; the traceback is for --debug
        if Flags.debug:
            raise
        return _unexpected(exc)
    return int(code) if isinstance(code, int) else 0


_REPORT = "run again with --debug for a traceback, and report it"


def _unexpected(exc: Exception) -> int:
    _say(f"error: unexpected {type(exc).__name__}: {exc}")
    _say(f"hint: {_REPORT}")
    _json_error(f"unexpected {type(exc).__name__}: {exc}", hint=_REPORT)
    return 1


def _say(text: str) -> None:
    """An error line for people: control and bidi characters escaped, no workflow command."""
    from mergegate.text import for_reader

    click.echo(for_reader(text), err=True)


def _json_error(
    message: str, *, file: str | None = None, line: int | None = None, hint: str | None = None
) -> None:
    """With --json, the error is also one JSON object on stdout, so a script never parses stderr."""
    if Flags.as_json:
        from mergegate.commands import output

        output.emit({"error": message, "file": file, "line": line, "hint": hint, "ok": False})


def entry() -> None:
    code = main()
    # The process ends now. Left to itself, Python's exit would walk every object still tracked once
    # more (20 to 35 ms of CPU after `audit verify`, every command alike) to free cycles that die
    # with the process anyway; frozen, they are not walked (issue 12).
    gc.freeze()
    sys.exit(code)
