"""`mergegate mcp`: the stdio MCP server for agents (propose and read; never approve, veto or
run)."""

from __future__ import annotations

from pathlib import Path

import click

from mergegate.commands.options import repo_option, trust_option
from mergegate.mcp_server import ServedGate, serve


@click.command("mcp")
@repo_option
@click.option(
    "--remote",
    default="origin",
    show_default=True,
    help="Remote to fetch from and push proposals to.",
)
@click.option("--base", default="approved", show_default=True, help="The approved branch.")
@click.option(
    "--no-push",
    "no_push",
    is_flag=True,
    help="Never push: proposals stay local branches for a person to push.",
)
@trust_option
def command(repo: Path, remote: str, base: str, no_push: bool, trust_root: str | None) -> int:
    """Serve MCP over stdio so AI agents can propose jobs (never approve, veto or run).

    Tools: propose_job, check_proposal, list_jobs, job_status, show_job; every
    result is JSON. There is no tool that approves, vetoes or runs, by design:
    a job runs only after a person's signed merge. Needs the MCP SDK:
    `pip install '.[mcp]'` in the mergegate checkout you installed from.

    \b
    Example (an MCP client's server entry):
      {"command": "mergegate", "args": ["mcp", "--repo", "/path/to/gate"]}
    """
    return main(repo=repo, remote=remote, base=base, trust_root=trust_root, allow_push=not no_push)


def main(*, repo: Path, remote: str, base: str, trust_root: str | None, allow_push: bool) -> int:
    from mergegate.git.refnames import branch_name
    from mergegate.git.repo import Repo

    path = Repo(repo).path  # a clear error now, not on the agent's first call
    serve(
        ServedGate(
            repo=path,
            remote=remote,
            base=branch_name(base, remote),
            trust_root=trust_root,
            allow_push=allow_push,
        )
    )
    return 0
