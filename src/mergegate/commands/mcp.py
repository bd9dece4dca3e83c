"""`mergegate mcp`: the stdio MCP server for agents (propose and read; never approve, veto or
run)."""

from __future__ import annotations

from pathlib import Path

from mergegate.mcp_server import Gate, serve


def main(*, repo: Path, remote: str, base: str, trust_root: str | None, allow_push: bool) -> int:
    from mergegate.git.refnames import branch_name
    from mergegate.git.repo import Repo

    path = Repo(repo).path  # a clear error now, not on the agent's first call
    serve(
        Gate(
            repo=path,
            remote=remote,
            base=branch_name(base, remote),
            trust_root=trust_root,
            allow_push=allow_push,
        )
    )
    return 0
