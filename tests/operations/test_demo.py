"""`mergegate demo`: the whole flow on a throwaway gate, with the user's git config untouched."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_demo_runs_the_whole_flow_and_leaves_git_config_alone(tmp_path: Path) -> None:
    home = Path(os.environ["HOME"])
    config = Path(os.environ["GIT_CONFIG_GLOBAL"])
    config.write_text(
        "[user]\n\tname = Someone Real\n\temail = real@example.com\n[init]\n\tdefaultBranch = "
        "main\n"
    )
    before = config.read_bytes()
    target = tmp_path / "gate"
    proc = subprocess.run(
        [sys.executable, "-m", "mergegate", "demo", str(target)],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    out = proc.stdout
    for command in (
        "alice$ mergegate propose hello",
        "bob$ mergegate check origin/propose/hello",
        "bob$ mergegate approve origin/propose/hello --merge",
        "runner$ mergegate run --once",
        "runner$ mergegate status",
        "runner$ mergegate audit verify",
        "runner$ mergegate verify",
    ):
        assert command in out, command
    assert "succeeded  hello" in out
    assert "ok: " in out.split("runner$ mergegate verify")[1]
    assert "\x1b[" not in out  # piped: no colour
    # The closing line's command runs as printed (here `python -m mergegate`: no mergegate script
    # ran).
    (look,) = [line for line in out.splitlines() if line.startswith("look around: ")]
    shown = look.removeprefix("look around: ").split("; remove it")[0]
    assert shown == f"cd {target / 'runner'} && {sys.executable} -m mergegate audit log", look
    # The gate is real: its remote's approved has the job's merge, and records.
    log = subprocess.run(
        ["git", "-C", str(target / "remote.git"), "log", "--format=%s", "approved"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "Merge origin/propose/hello into approved" in log
    # The person's git config and home were neither read for identity nor changed.
    assert config.read_bytes() == before
    assert sorted(p.name for p in home.iterdir()) == [".gitconfig"]
    assert (
        "Someone Real"
        not in subprocess.run(
            ["git", "-C", str(target / "remote.git"), "log", "--all", "--format=%an %cn"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    )


def test_demo_refuses_a_directory_that_is_not_empty(tmp_path: Path) -> None:
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "file").write_text("x")
    proc = subprocess.run(
        [sys.executable, "-m", "mergegate", "demo", str(tmp_path / "busy")],
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith(f"error: {tmp_path / 'busy'} is not empty")
