"""Text that lies to a reviewer (issue 22, item 4): bidi controls, other control characters and
a newline followed by `::` in a file name or an argument reach `check`, `lint`, the step summary
and the Actions log escaped, never raw."""

from __future__ import annotations

import pytest

from mergegate.text import for_reader, shown
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml

RLO = "\u202e"
FORGED = "x\n::error title=forged::all clear"


@pytest.mark.parametrize(
    ("raw", "escaped"),
    [
        (f"gpl.{RLO}yaml.sh", "gpl.\\u202eyaml.sh"),
        ("a\nb\r\tc", "a\\nb\\r\\tc"),
        ("bell\x07 del\x7f c1\x9b", "bell\\x07 del\\x7f c1\\x9b"),
        ("zero\u200bwidth\ufeff", "zero\\u200bwidth\\ufeff"),
        ("isolate\u2066x\u2069", "isolate\\u2066x\\u2069"),
        ("José García 李", "José García 李"),
    ],
)
def test_a_value_is_shown_with_every_control_and_format_character_escaped(
    raw: str, escaped: str
) -> None:
    assert shown(raw) == escaped


def test_a_line_for_a_reader_keeps_newlines_and_our_colours_but_never_starts_a_command() -> None:
    text = "ok \x1b[32mgreen\x1b[0m\n  ::error ::x\n::set-output name=a::b\nfine :: here\x1b[2J"
    assert for_reader(text) == (
        "ok \x1b[32mgreen\x1b[0m\n  \\x3a:error ::x\n\\x3a:set-output name=a::b\nfine :: here"
        "\\x1b[2J"
    )


def _proposal(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    world.propose(
        "p",
        {
            "jobs/hello.yaml": job_yaml("hello", ["echo", f"safe{RLO}txt.exe", FORGED]),
            f"jobs/evil{RLO}lmy.yaml": "id: nope\ncommand: [echo]\n",
        },
        who=world.alice,
    )


def test_check_escapes_bidi_and_forged_workflow_commands_for_people_and_actions(
    world: World, tmp_path: object
) -> None:
    _proposal(world)
    summary = world.tmp / "summary.md"
    result = world.mg("check", "origin/p", "--github", env={"GITHUB_STEP_SUMMARY": str(summary)})
    seen = result.out + result.err + summary.read_text("utf-8")
    assert RLO not in seen, seen
    assert "\n::error title=forged" not in "\n" + result.out + result.err
    assert "\\u202e" in seen
    # The annotations mergegate means are still workflow commands.
    assert any(line.startswith("::error ") for line in result.err.splitlines()), result.err


def test_lint_escapes_a_bidi_file_name(world: World) -> None:
    world.write("admin", {f"jobs/evil{RLO}lmy.yaml": "id: nope\ncommand: [echo]\n"})
    result = world.mg("lint", f"jobs/evil{RLO}lmy.yaml", where="admin")
    assert result.code == 2
    assert RLO not in result.out + result.err and "evil\\u202elmy.yaml" in result.err
