"""`mergegate mcp`, driven by the MCP SDK's own stdio client against a real gate."""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.helpers.repos import ECHO_RULE, World, policy_yaml


def call(
    world: World,
    steps: list[tuple[str, dict[str, Any]]],
    *,
    where: str = "proposer",
    extra: tuple[str, ...] = (),
) -> tuple[list[str], list[tuple[bool, Any]]]:
    """Start `mergegate mcp` in clone `where`, list its tools, call each step; (tool names,
    [(is_error, JSON)])."""
    # Imported here, not at the top: every xdist worker collects this module, and the SDK's
    # imports (anyio, pydantic, httpx) cost about 1 s of CPU in each; only the worker that runs
    # these tests needs them.
    import anyio
    from mcp import ClientSession
    from mcp.client.stdio import StdioServerParameters, stdio_client

    params = StdioServerParameters(
        command=sys.executable,
        args=["-m", "mergegate", "mcp", *extra],
        cwd=str(world.clone(where)),
        env=dict(os.environ),
    )

    async def session() -> tuple[list[str], list[tuple[bool, Any]]]:
        async with stdio_client(params) as (read, write), ClientSession(read, write) as client:
            await client.initialize()
            tools = await client.list_tools()
            names = sorted(t.name for t in tools.tools)
            descriptions = {t.name: t.description or "" for t in tools.tools}
            for name in names:
                assert "no tool that approves, vetoes or runs" in descriptions[name]
            out = []
            for name, args in steps:
                result = await client.call_tool(name, args)
                (content,) = result.content
                out.append((bool(result.is_error), json.loads(content.text)))  # type: ignore[union-attr]
            return names, out

    return anyio.run(session)


def test_mcp_tools_propose_check_list_and_show(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    world.git("proposer", "config", "user.name", "alice")
    world.git("proposer", "config", "user.email", "alice@example.com")
    names, results = call(
        world,
        [
            (
                "propose_job",
                {
                    "job_id": "hello",
                    "command": ["echo", "hi"],
                    "description": "greet",
                    "push": True,
                },
            ),
            (
                "propose_job",
                {
                    "job_id": "hello",
                    "command": ["echo", "hi"],
                    "description": "greet",
                    "push": True,
                },
            ),
            ("check_proposal", {"ref": "origin/propose/hello"}),
            ("propose_job", {"job_id": "wipe", "command": ["rm", "-rf", "/"]}),
            ("propose_job", {"job_id": "Bad Id", "command": ["echo"]}),
            ("list_jobs", {}),
        ],
    )
    assert names == ["check_proposal", "job_status", "list_jobs", "propose_job", "show_job"]
    (e1, first), (e2, again), (e3, check), (e4, denied), (e5, invalid), (e6, jobs) = results
    assert not e1 and first["created"] is True and first["branch"] == "propose/hello"
    assert first["pushed_to"] == "origin/propose/hello" and first["files"][0]["state"] == "allowed"
    assert not e2 and again["created"] is False and again["commit"] == first["commit"]
    assert not e3 and [(f["path"], f["state"]) for f in check["files"]] == [
        ("jobs/hello.yaml", "allowed")
    ]
    assert (
        e4
        and denied["error"].startswith("the policy in force would deny jobs/wipe.yaml")
        and denied["ok"] is False
    )
    assert e5 and "field 'id'" in invalid["error"]
    assert not e6 and jobs == {"jobs": []}
    # Nothing the agent did approved anything: approved is where it was.
    world.fetch("admin")
    assert world.git("admin", "rev-list", "--count", "origin/approved") == "1"
    # A person approves; the agent sees the job's state and details.
    world.signed_merge("propose/hello", world.bob)
    assert world.run_once().code == 0
    _, [(s_err, state), (d_err, dossier), (m_err, missing)] = call(
        world,
        [
            ("job_status", {"job_id": "hello"}),
            ("show_job", {"job_id": "hello"}),
            ("job_status", {"job_id": "nope"}),
        ],
    )
    assert not s_err and state["state"] == "succeeded" and state["job"] == "hello"
    assert (
        not d_err
        and dossier["state"] == "succeeded"
        and dossier["attempts"][0]["stdout_tail"] == "hi"
    )
    assert dossier["revisions"][0]["approved"] is True
    assert m_err and missing["error"] == "no job nope on approved"


def test_mcp_no_push_server_refuses_push(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    world.git("proposer", "config", "user.name", "alice")
    world.git("proposer", "config", "user.email", "alice@example.com")
    _, [(err, data)] = call(
        world,
        [("propose_job", {"job_id": "hello", "command": ["echo"], "push": True})],
        extra=("--no-push",),
    )
    assert err and data["error"] == "this server was started with --no-push"
    assert "propose/" not in world.git("admin", "ls-remote", "origin")


def test_mcp_arguments_of_the_wrong_type_are_the_documented_json_error_not_pydantic_prose(
    world: World,
) -> None:
    """Issue 22, item 9: the SDK answered a type mismatch with pydantic's wording (and the
    rejected value); every error an agent gets is `{"error", "file", "line", "hint", "ok"}`."""
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    secret = "ghp_" + "a1" * 18
    _, [(err, data), (err2, data2)] = call(
        world,
        [
            ("propose_job", {"job_id": "hello", "command": "echo hi", "timeout_seconds": secret}),
            ("job_status", {}),
        ],
    )
    assert err and sorted(data) == ["error", "file", "hint", "line", "ok"], data
    assert data["ok"] is False
    assert data["error"] == "invalid arguments for propose_job: command, timeout_seconds"
    assert secret not in json.dumps(data) and "pydantic" not in json.dumps(data)
    assert err2 and data2["error"] == "invalid arguments for job_status: job_id"


def test_mcp_without_the_sdk_says_how_to_install_it_next_to_this_mergegate(
    world: World, tmp_path: Path
) -> None:
    """The hint installs the SDK into mergegate's own environment; never `mergegate[mcp]` from an
    index, where that name is not mergegate's (it is installed from a checkout)."""
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    blocked = tmp_path / "no-sdk" / "mcp"
    blocked.mkdir(parents=True)
    (blocked / "__init__.py").write_text("raise ImportError('the MCP SDK is not installed here')\n")
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(blocked.parent), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.run(
        [sys.executable, "-m", "mergegate", "mcp"],
        cwd=world.clone("proposer"),
        env=env,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        timeout=60,
    )
    assert proc.returncode == 2
    error, hint = proc.stderr.splitlines()
    assert error == "error: mergegate mcp needs the MCP SDK"
    assert (
        hint == f"hint: {shlex.quote(sys.executable)} -m pip install 'mcp<3,>=2.3' "
        "(or, in the mergegate checkout you installed from: pip install '.[mcp]')"
    )
    pyproject = (Path(__file__).resolve().parents[2] / "pyproject.toml").read_text()
    assert 'mcp = ["mcp>=2.3,<3"]' in pyproject  # the range the hint names
