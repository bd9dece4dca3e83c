"""The one error handler (issue 22, item 4): an error line escapes control and bidi characters,
as every line for people does, and cannot start a workflow command."""

from __future__ import annotations

from tests.helpers.repos import ECHO_RULE, World, policy_yaml


def test_an_error_line_escapes_bidi_and_control_characters(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    result = world.mg("status", "--branch", "ab\u202ecd\n::error::forged")
    assert result.code == 2
    assert "\u202e" not in result.err and "\\u202e" in result.err
    assert not any(line.startswith("::") for line in result.err.splitlines())
