"""`mergegate demo [DIR]`: the whole flow on a throwaway gate, printing every command it runs."""

from __future__ import annotations

from pathlib import Path

import click

from mergegate.commands import output
from mergegate.demo import run_demo


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
    output.line(f"look around: cd {root / 'runner'} && mergegate audit log; remove it with rm -rf {root}")
    output.line("your own git config was not read or changed: every command ran with HOME set inside the demo.")
    return 0
