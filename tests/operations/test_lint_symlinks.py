"""`mergegate lint` refuses a symlinked job or policy file without reading it (issue 22, item 3):
`check` and the runner refuse them, and lint must not print what the link points at."""

from __future__ import annotations

import os

from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml

SECRET = "https://bob:ghp_0123456789abcdefghijklmnopqrstuvwxyzAB@github.com\n"


def _gate(world: World) -> None:
    world.write(
        "admin",
        {
            "policy/policy.yaml": policy_yaml([world.bob.approver_entry()], [ECHO_RULE]),
            "jobs/hello.yaml": job_yaml("hello", ["echo", "hi"]),
        },
    )


def test_lint_refuses_a_job_file_that_is_a_symlink_and_never_prints_its_target(
    world: World,
) -> None:
    _gate(world)
    admin = world.clone("admin")
    secret = world.tmp / "git-credentials"
    secret.write_text(SECRET)
    os.symlink(secret, admin / "jobs/x.yaml")
    result = world.mg("lint", "jobs/x.yaml", where="admin")
    assert result.code == 2, result.out + result.err
    assert "jobs/x.yaml is a symlink; not read" in result.out + result.err
    assert "ghp_" not in result.out + result.err and "bob:" not in result.out + result.err


def test_lint_refuses_a_job_under_a_symlinked_folder(world: World) -> None:
    _gate(world)
    admin = world.clone("admin")
    elsewhere = world.tmp / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "y.yaml").write_text("id: y\ncommand: [echo, {SECRET!r}]\n")
    os.symlink(elsewhere, admin / "jobs/linked")
    result = world.mg("lint", "jobs/linked/y.yaml", where="admin")
    assert result.code == 2
    assert "jobs/linked is a symlink; not read" in result.out + result.err


def test_lint_refuses_a_symlinked_policy_or_key_file(world: World) -> None:
    _gate(world)
    admin = world.clone("admin")
    real = world.tmp / "policy.yaml"
    (admin / "policy/policy.yaml").rename(real)
    os.symlink(real, admin / "policy/policy.yaml")
    result = world.mg("lint", "policy/policy.yaml", where="admin")
    assert result.code == 2
    assert "policy/policy.yaml is a symlink; not read" in result.out + result.err
    assert "version" not in result.out + result.err
