"""Rough edges a new user hit, each through the real CLI on a real gate."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

from mergegate import __version__
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml


def on_terminal(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run mergegate with stdout and stderr on a pseudo-terminal; return what it printed."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "mergegate", *args], cwd=cwd, stdin=subprocess.DEVNULL,
                            stdout=follower, stderr=follower, env={**os.environ, **(env or {})})
    os.close(follower)
    chunks = []
    while True:
        try:
            data = os.read(leader, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=60)
    os.close(leader)
    return b"".join(chunks).decode()


def test_short_version_flag(world: World) -> None:
    for flag in ("-V", "--version"):
        result = world.mg(flag, where="admin")
        assert result.code == 0
        assert result.out.strip() == f"mergegate, version {__version__}"


def test_debug_works_after_the_subcommand(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    after = world.mg("check", "nope", "--debug")
    assert "Traceback" in after.err and "GitError" in after.err
    plain = world.mg("check", "nope")
    assert "Traceback" not in plain.err and plain.code == 2


def test_json_errors_are_json_on_stdout_with_the_same_exit_code(world: World) -> None:
    world.setup("version: 1\napprovers: []\ncommands:\n  - program: echo\n    args: [x]\n")
    result = world.mg("run", "--once", "--json")
    assert result.code == 2
    assert result.err.startswith("error: field 'commands.0.args': unknown key 'args'")
    data = result.json()
    assert data == {"error": "field 'commands.0.args': unknown key 'args'; allowed keys: args_prefix, network, program",
                    "file": "policy/policy.yaml", "line": 5, "hint": None, "ok": False}
    missing = world.mg("check", "no-such-branch", "--json")
    assert missing.code == 2
    error = missing.json()
    assert error["error"] == "no-such-branch is not a branch or commit here" and error["file"] is None
    assert error["hint"].startswith("fetch the proposal first")
    # Without --json, stdout stays empty: a script reading it never sees half a line.
    assert world.mg("check", "no-such-branch").out == ""


def test_status_colours_only_on_a_terminal_and_respects_no_color(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE, {"program": "false"}]))
    world.propose("a", {"jobs/ok.yaml": job_yaml("ok", ["echo", "x"]), "jobs/bad.yaml": job_yaml("bad", ["false"])},
                  who=world.alice)
    world.signed_merge("a", world.bob)
    world.run_once()
    world.propose("b", {"jobs/later.yaml": job_yaml("later", ["echo", "y"])}, who=world.alice)
    world.signed_merge("b", world.bob)
    runner = world.clone("runner")
    coloured = on_terminal(["status"], runner)
    assert "\x1b[32msucceeded\x1b[0m" in coloured
    assert "\x1b[31mfailed\x1b[0m" in coloured
    assert "\x1b[33mqueued\x1b[0m" in coloured
    assert "\x1b[" not in on_terminal(["status"], runner, env={"NO_COLOR": "1"})
    piped = world.mg("status")
    assert "succeeded" in piped.out and "\x1b[" not in piped.out + piped.err
    assert json.loads(world.mg("status", "--json").out)["jobs"]
