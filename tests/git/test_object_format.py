"""A SHA-256 repository is refused once, up front, by name (issue 22, item 9): object ids of 40
hex digits are assumed throughout, and such a gate failed later with `object ... not found`."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from mergegate.errors import GitError
from mergegate.git.repo import Repo
from tests.helpers.repos import mergegate_in_process


def test_a_sha256_repository_is_refused_up_front_for_every_command(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    subprocess.run(["git", "init", "-q", "--object-format=sha256", str(gate)], check=True)
    with pytest.raises(GitError, match="is a sha256 repository; mergegate supports SHA-1"):
        Repo(gate)
    for argv in (["status"], ["run", "--once"], ["verify"], ["audit", "verify"]):
        result = mergegate_in_process(argv, cwd=gate, env={})
        assert result.code == 2, (argv, result.err)
        assert "sha256 repository; mergegate supports SHA-1 repositories only" in result.err


def test_a_sha1_repository_opens_as_before(tmp_path: Path) -> None:
    gate = tmp_path / "gate"
    subprocess.run(["git", "init", "-q", "--object-format=sha1", str(gate)], check=True)
    assert Repo(gate).path == gate.resolve()
