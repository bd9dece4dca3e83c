"""`mergegate mcp`: a stdio MCP server so AI agents can propose jobs, and nothing more.

Agents propose; people approve. The server has tools to propose a job, check a proposal, and read
jobs and their state. There is deliberately no tool that approves, vetoes or runs: approval is a
signed merge by a person's key, which the server neither holds nor could use. Every tool result is
one JSON object; an error is a tool error whose text is {"error", "file", "line", "hint"}.

Built on the official `mcp` SDK (the extra `mcp`: `pip install '.[mcp]'` in a mergegate checkout).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias, cast

from mergegate.errors import MergegateError, UsageError

if TYPE_CHECKING:
    from mcp.server.mcpserver import MCPServer

    from mergegate.operations.status import StatusReport

# Tool I/O: every tool returns one JSON object (the SDK derives each tool's output schema from it).
ToolResult: TypeAlias = dict[str, Any]

NO_APPROVAL = (
    "This server has no tool that approves, vetoes or runs a job, by design: "
    "a job runs only after a person's signed merge into approved."
)


@dataclass(frozen=True)
class ServedGate:
    """Where the tools act: one gate repository, its remote and base branch."""

    repo: Path
    remote: str = "origin"
    base: str = "approved"
    trust_root: str | None = None
    allow_push: bool = True


def _guard(call: Callable[[], ToolResult]) -> ToolResult:
    """The tool's JSON, or a tool error (isError) whose text is exactly one JSON object."""
    from mcp.types import CallToolResult, TextContent

    from mergegate.redaction import redact_text

    try:
        return call()
    except MergegateError as exc:
        text = json.dumps(
            {
                "error": redact_text(exc.message),
                "file": exc.file,
                "line": exc.line,
                "hint": redact_text(exc.hint) if exc.hint else None,
                "ok": False,
            }
        )
        # The SDK passes a CallToolResult through as it is, so the agent sees pure JSON
        # (a raised ToolError would be prefixed with prose).
        return cast(
            "ToolResult",
            CallToolResult(content=[TextContent(type="text", text=text)], is_error=True),
        )


def _error_json(message: str, hint: str | None) -> str:
    return json.dumps({"error": message, "file": None, "line": None, "hint": hint, "ok": False})


def _server_class() -> type[MCPServer]:
    """MCPServer whose argument errors are the documented JSON, not pydantic's prose.

    The SDK validates a tool's arguments before the tool runs and answers a mismatch with the
    validation error's text (several lines of pydantic wording, quoting the rejected values). An
    agent is promised `{"error", "file", "line", "hint", "ok": false}` for every error (issue
    22, item 9), so the mismatch is said here: which arguments, never their values.
    """
    from mcp.server.mcpserver import MCPServer
    from mcp.server.mcpserver.exceptions import ToolError
    from mcp.types import CallToolResult, TextContent
    from pydantic import ValidationError

    class Server(MCPServer):
        async def call_tool(self, name: str, arguments: dict[str, Any], context: Any = None) -> Any:
            try:
                return await super().call_tool(name, arguments, context)
            except ToolError as exc:
                cause = exc.__cause__
                if not isinstance(cause, ValidationError):
                    raise
                fields = sorted(
                    {".".join(str(p) for p in e["loc"]) or "(arguments)" for e in cause.errors()}
                )
                text = _error_json(
                    f"invalid arguments for {name}: {', '.join(fields)}",
                    f"see the input schema of {name} (list_tools); docs/agents.md lists each",
                )
                return CallToolResult(content=[TextContent(type="text", text=text)], is_error=True)

    return Server


def build(gate: ServedGate) -> Any:
    """The MCPServer with mergegate's five tools."""
    from mergegate import __version__

    server = _server_class()(
        "mergegate",
        version=__version__,
        instructions=(
            "Propose automation as mergegate jobs; a person approves it with a signed merge before "
            "it runs. " + NO_APPROVAL
        ),
    )

    @server.tool(
        description=(
            "Propose a job: writes jobs/<job_id>.yaml running `command` (an argument vector, no "
            "shell) on a branch "
            "from approved, after validating it against the job schema and judging it exactly as "
            "`mergegate check` "
            "would (refused if invalid or denied by the policy in force; nothing is written then). "
            "Credentials in "
            "arguments are refused. Proposing the same content again returns the existing branch. "
            "With push, the "
            "branch is pushed (never forced). Returns the branch, commit and check verdict. "
            + NO_APPROVAL
        )
    )
    def propose_job(
        job_id: str,
        command: list[str],
        description: str | None = None,
        timeout_seconds: int | None = None,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        branch: str | None = None,
        push: bool = False,
        retries: int | None = None,
        idempotent: bool = False,
        runs_on: list[str] | None = None,
    ) -> ToolResult:
        from mergegate.operations.propose import Draft, propose

        def call() -> ToolResult:
            if push and not gate.allow_push:
                raise UsageError(
                    "this server was started with --no-push",
                    hint="propose without push; a person pushes the branch",
                )
            draft = Draft(
                job=job_id,
                command=tuple(command),
                description=description,
                timeout_seconds=timeout_seconds,
                cwd=cwd,
                env=tuple((env or {}).items()),
                retries=retries,
                idempotent=idempotent,
                runs_on=tuple(runs_on or ()),
            )
            result = propose(
                draft,
                repo_path=gate.repo,
                base=gate.base,
                remote=gate.remote,
                branch=branch,
                push=push,
                fetch=True,
                trust=gate.trust_root,
            )
            return result.as_json()

        return _guard(call)

    @server.tool(
        description=(
            "Check a proposal branch or commit (ref) as a pull request check does: every job and "
            "policy file it adds "
            "or changes, judged by the policy in force on approved, with the approvals it still "
            "needs. Read-only. " + NO_APPROVAL
        )
    )
    def check_proposal(ref: str) -> ToolResult:
        from mergegate.operations.check import check

        def call() -> ToolResult:
            report = check(
                repo_path=gate.repo,
                ref=ref,
                base=gate.base,
                remote=gate.remote,
                fetch=True,
                trust=gate.trust_root,
            )
            return {
                "ref": report.ref,
                "head": report.head,
                "base": report.base,
                "policy_commit": report.policy,
                "files": [f.as_json() for f in report.files],
                "exit_code": report.exit_code,
            }

        return _guard(call)

    @server.tool(
        description="List every job on approved with its state (queued, running, succeeded, "
        "failed, "
        "timed_out, rejected, vetoed, not run). Read-only. " + NO_APPROVAL
    )
    def list_jobs() -> ToolResult:
        return _guard(lambda: {"jobs": [j.as_json() for j in _status(gate).jobs]})

    @server.tool(
        description="The state of one job on approved (by id), with the reason and the commit that "
        "approved it. Read-only. " + NO_APPROVAL
    )
    def job_status(job_id: str) -> ToolResult:
        def call() -> ToolResult:
            found: list[dict[str, object]] = [
                j.as_json() for j in _status(gate).jobs if j.job == job_id
            ]
            if not found:
                raise UsageError(
                    f"no job {job_id} on {gate.base}", hint="list_jobs lists the jobs there"
                )
            return found[0]

        return _guard(call)

    @server.tool(
        description="Everything about one job: its file, its revisions on approved with the votes "
        "that "
        "counted and why others did not, its records, and what happens next. Read-only. "
        + NO_APPROVAL
    )
    def show_job(job_id: str) -> ToolResult:
        from mergegate.operations.show import show

        return _guard(
            lambda: show(
                repo_path=gate.repo,
                job=job_id,
                remote=gate.remote,
                branch=gate.base,
                fetch=True,
                trust=gate.trust_root,
            ).as_json()
        )

    return server


def _status(gate: ServedGate) -> StatusReport:
    from mergegate.operations.status import status

    return status(
        repo_path=gate.repo, remote=gate.remote, branch=gate.base, fetch=True, trust=gate.trust_root
    )


def serve(gate: ServedGate) -> None:
    try:
        server = build(gate)
    except ImportError:
        raise UsageError("mergegate mcp needs the MCP SDK", hint=install_hint()) from None
    server.run("stdio")


def install_hint() -> str:
    """Install the SDK next to this mergegate, by the range its `mcp` extra asks for.

    Never `pip install mergegate[mcp]`: mergegate is installed from a checkout, and that
    name on a package index is not ours to vouch for."""
    import importlib.metadata
    import shlex
    import sys

    try:
        wanted = importlib.metadata.requires("mergegate") or []
    except importlib.metadata.PackageNotFoundError:
        wanted = []
    spec = next(
        (r.split(";")[0].strip() for r in wanted if r.startswith("mcp") and 'extra == "mcp"' in r),
        "mcp",
    )
    return (
        f"{shlex.quote(sys.executable)} -m pip install {shlex.quote(spec)} "
        "(or, in the mergegate checkout you installed from: pip install '.[mcp]')"
    )
