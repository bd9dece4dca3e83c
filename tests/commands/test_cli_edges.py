"""Rough edges a new user hit, each through the real CLI on a real gate."""

from __future__ import annotations

import json
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from mergegate import __version__
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml


def on_terminal(args: list[str], cwd: Path, env: dict[str, str] | None = None) -> str:
    """Run mergegate with stdout and stderr on a pseudo-terminal; return what it printed."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "mergegate", *args],
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=follower,
        stderr=follower,
        env={**os.environ, **(env or {})},
    )
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
    assert data == {
        "error": "field 'commands.0.args': unknown key 'args'; allowed keys: args_prefix, network, "
        "program",
        "file": "policy/policy.yaml",
        "line": 5,
        "hint": "every policy key is in docs/policy.md",
        "ok": False,
    }
    missing = world.mg("check", "no-such-branch", "--json")
    assert missing.code == 2
    error = missing.json()
    assert (
        error["error"] == "no-such-branch is not a branch or commit here" and error["file"] is None
    )
    assert error["hint"].startswith("fetch the proposal first")
    # Without --json, stdout stays empty: a script reading it never sees half a line.
    assert world.mg("check", "no-such-branch").out == ""


def test_status_colours_only_on_a_terminal_and_respects_no_color(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE, {"program": "false"}]))
    world.propose(
        "a",
        {
            "jobs/ok.yaml": job_yaml("ok", ["echo", "x"]),
            "jobs/bad.yaml": job_yaml("bad", ["false"]),
        },
        who=world.alice,
    )
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


def test_init_prints_the_trust_root_and_how_to_pin_it(world: World) -> None:
    admin = world.clone("admin")
    world.git(admin, "config", "user.name", "bob")
    world.git(admin, "config", "user.email", "bob@example.com")
    result = world.mg(
        "init", "--approver", "bob", "--key", str(world.bob.key.private) + ".pub", where="admin"
    )
    assert result.code == 0, result.err
    root = world.git(admin, "rev-parse", "approved")
    assert f"trust root: {root}" in result.out
    assert (
        f"--trust-root {root}" in result.out and f"export MERGEGATE_TRUST_ROOT={root}" in result.out
    )
    assert "docs/" not in result.out  # not installed: point to what the user has
    world.git(admin, "push", "-q", "origin", "main", "approved")
    # The pin it printed silences the warning, by flag and by environment variable.
    assert "no trust root pinned" in world.mg("status").err
    assert world.mg("status", "--trust-root", root).err == ""
    assert world.mg("status", env={"MERGEGATE_TRUST_ROOT": root}).err == ""


def test_help_points_to_what_the_user_has(world: World) -> None:
    top = world.mg("--help", where="admin")
    assert "docs/" not in top.out and "mergegate demo" in top.out


def test_verify_prints_a_summary_and_every_commit_with_verbose(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    for name in ("a", "b"):
        world.propose(name, {f"jobs/{name}.yaml": job_yaml(name, ["echo", name])}, who=world.alice)
        world.signed_merge(name, world.bob)
    world.run_once()
    short = world.mg("verify")
    assert short.code == 0, short.err
    lines = short.out.splitlines()
    assert len(lines) == 3
    assert lines[0].endswith(": 2 approvals, 1 trust root")
    assert lines[1] == "job revisions judged: 2 approved, 0 rejected (--verbose lists every commit)"
    assert lines[2].startswith("ok: ")
    verbose = world.mg("verify", "--verbose")
    assert verbose.code == 0 and "approved jobs/a.yaml: quorum met" in verbose.out
    assert len(verbose.out.splitlines()) > len(lines)


def test_every_spelling_of_the_base_is_accepted(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    world.propose("p", {"jobs/j.yaml": job_yaml("j", ["echo", "x"])}, who=world.alice)
    for base in (
        "approved",
        "origin/approved",
        "refs/remotes/origin/approved",
        "refs/heads/approved",
    ):
        result = world.mg("check", "origin/p", "--base", base, "--json")
        assert result.code == 0, (base, result.err)
        assert result.json()["files"][0]["state"] == "allowed"
    for branch in ("origin/approved", "refs/remotes/origin/approved"):
        assert world.mg("status", "--branch", branch).code == 0
    world.git("approver", "config", "gpg.format", "ssh")
    world.git("approver", "config", "user.signingkey", str(world.bob.key.private))
    world.git("approver", "config", "user.name", "bob")
    world.git("approver", "config", "user.email", "bob@example.com")
    approved = world.mg(
        "approve", "origin/p", "--merge", "--base", "origin/approved", where="approver"
    )
    assert approved.code == 0, approved.err
    assert "pushed to origin/approved" in approved.out
    # No junk ref named origin/approved was created on the remote.
    assert "refs/heads/origin/" not in world.git("admin", "ls-remote", "origin")


def test_no_hint_suggests_pushing_a_junk_ref(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    result = world.mg("check", "HEAD", "--base", "origin/nope")
    assert result.code == 2
    assert "git push origin HEAD origin/" not in result.err
    assert result.err.splitlines()[0] == "error: branch nope does not exist on origin"


def test_verify_shows_progress_on_a_terminal_only(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    for name in ("a", "b", "c"):
        world.propose(name, {f"jobs/{name}.yaml": job_yaml(name, ["echo", name])}, who=world.alice)
        world.signed_merge(name, world.bob)
    runner = world.clone("runner")
    shown = on_terminal(["verify"], runner)
    assert "\rverifying 3/3 commits" in shown  # the last update is always drawn
    assert shown.rstrip().endswith("\x1b[32mok\x1b[0m: 4 commits, 0 records")
    piped = world.mg("verify")
    assert "verifying" not in piped.err and "\r" not in piped.out + piped.err
    assert "verifying" not in on_terminal(["verify", "--json"], runner)


def test_a_gate_without_a_policy_gets_hints_that_lead_somewhere(world: World) -> None:
    admin = world.clone("admin")
    world.git(admin, "config", "user.name", "bob")
    world.git(admin, "config", "user.email", "bob@example.com")
    world.write("admin", {"README.md": "hi\n"})
    world.git(admin, "add", "-A")
    world.git(admin, "commit", "-qm", "start")
    world.git(admin, "branch", "approved")
    world.git(admin, "push", "-q", "origin", "main", "approved")
    run = world.mg("run", "--once")
    assert run.code == 2
    assert (
        "hint: if approved has no policy yet: git switch approved && mergegate init, then git push "
        "origin approved" in run.err
    )
    # init, where approved is not checked out, says exactly how; it no longer sends the person to
    # status.
    elsewhere = world.mg("init", "--key", world.bob.key.public_line, where="admin")
    assert elsewhere.code == 2 and "has no policy/policy.yaml yet" in elsewhere.err
    assert (
        "hint: git switch approved && mergegate init" in elsewhere.err
        and "status" not in elsewhere.err
    )
    # Following the hints makes a working gate.
    world.git(admin, "switch", "-q", "approved")
    done = world.mg("init", "--key", world.bob.key.public_line, where="admin")
    assert done.code == 0, done.err
    world.git(admin, "push", "-q", "origin", "approved")
    root = world.git(admin, "rev-parse", "approved")
    status = world.mg("status", "--trust-root", root)
    assert status.code == 0, status.err
    assert status.out.strip() == "no jobs on approved"
    # And a gate that has a policy says where to look instead.
    again = world.mg("init", "--key", world.bob.key.public_line, where="admin")
    assert again.code == 2 and "already a gate" in again.err and "mergegate inbox" in again.err


NEW_COMMANDS = [["propose"], ["mcp"], ["inbox"], ["show"], ["audit", "log"], ["lint"], ["demo"]]


@pytest.mark.parametrize("command", NEW_COMMANDS, ids=" ".join)
def test_every_new_command_has_help_with_an_example(world: World, command: list[str]) -> None:
    result = world.mg(*command, "--help", where="admin")
    assert result.code == 0
    assert "Example" in result.out and "docs/" not in result.out
