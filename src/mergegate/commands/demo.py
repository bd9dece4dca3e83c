"""`mergegate demo [DIR]`: the whole flow on a throwaway gate, printing every command it runs."""

from __future__ import annotations

import shlex
import shutil
import sys
from pathlib import Path

import click

from mergegate.commands import output
from mergegate.operations.demo import run_demo


@click.command("demo")
@click.argument(
    "directory", metavar="[DIR]", required=False, type=click.Path(file_okay=False, path_type=Path)
)
def command(directory: Path | None) -> int:
    """Build a throwaway gate and walk through the whole flow, printing every command.

    In DIR (default: a new temporary directory): a local bare remote, ssh keys
    for alice and bob, `init`, `propose`, `check`, `approve --merge`, `run`,
    `status`, `audit verify` and `verify`. Needs only git and ssh-keygen; your
    own git config is never read or changed (HOME points inside DIR).

    \b
    Example:
      mergegate demo /tmp/gate-demo
    """
    return main(directory=directory)


def main(*, directory: Path | None) -> int:
    colour = output.use_colour()

    def say(title: str) -> None:
        output.line()
        output.line(click.style(title, bold=True) if colour else title)

    def show(who: str, command: str, said: str) -> None:
        output.line(f"  {who}$ {command}")
        for text in said.splitlines():
            output.line(f"      {text}")

    root = run_demo(directory, say=say, show=show)
    output.line()
    output.line(f"done: the demo gate is in {root} (remote.git, and clones alice/, bob/, runner/).")
    output.line(
        f"look around: cd {shlex.quote(str(root / 'runner'))} && {_this_mergegate()} audit log; "
        f"remove it with rm -rf {shlex.quote(str(root))}"
    )
    output.line(
        "your own git config was not read or changed: every command ran with HOME set inside the "
        "demo."
    )
    return 0


def _this_mergegate() -> str:
    """How a shell reaches this mergegate: `mergegate` when that is the one on PATH, else its path
    (after the quick start it is `.venv/bin/mergegate`, not on PATH), else `python -m mergegate`."""
    here = Path(sys.argv[0]).resolve() if sys.argv and sys.argv[0] else None
    found = shutil.which("mergegate")
    if here is not None and found is not None and Path(found).resolve() == here:
        return "mergegate"
    if here is not None and here.name == "mergegate" and here.is_file():
        return shlex.quote(str(here))
    return f"{shlex.quote(sys.executable)} -m mergegate"
