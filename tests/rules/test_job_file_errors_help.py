"""Job-file errors that lead somewhere (issue 22, item 9): a NUL byte is one line with its line,
an unquoted `yes` says to quote it, and lint reports every problem of a file (capped), not only
the first."""

from __future__ import annotations

import pytest

from mergegate.errors import MergegateError
from mergegate.rules import config
from mergegate.rules.job import parse_job
from tests.helpers.repos import World


def _error(text: bytes) -> MergegateError:
    with pytest.raises(MergegateError) as caught:
        parse_job(text, path="jobs/x.yaml", blob="0" * 40)
    return caught.value


def test_a_nul_byte_is_one_line_with_its_line_and_a_hint() -> None:
    error = _error(b"id: x\ncommand: [echo,\n  \x00]\n")
    assert error.message == "invalid YAML: character U+0000 is not allowed in YAML"
    assert "\n" not in error.message and error.line == 3 and error.hint


@pytest.mark.parametrize("word", ["yes", "no", "on", "off", "true", "1", "1.5"])
def test_an_unquoted_boolean_or_number_argument_says_to_quote_it(word: str) -> None:
    error = _error(f"id: x\ncommand: [echo, {word}]\n".encode())
    assert error.hint is not None and error.hint.startswith("quote it")


def test_every_other_job_error_points_at_the_job_keys() -> None:
    error = _error(b"id: x\ncommand: [echo]\ncomand: [echo]\n")
    assert error.hint == "every job key is in docs/policy.md#job-files"


def test_problems_lists_every_schema_problem_first_as_validate_raises_it() -> None:
    text = b"id: x\ncommand: [echo, yes]\ntimeout_seconds: soon\nretries: many\nbogus: 1\n"
    doc = config.parse_yaml(text, file="jobs/x.yaml")
    found = config.problems(doc, schema="job")
    with pytest.raises(MergegateError) as first:
        config.validate(doc, schema="job")
    assert found[0].message == first.value.message and "bogus" in found[0].message
    assert [p.line for p in found[1:]] == sorted(p.line or 0 for p in found[1:])
    assert len(found) == 4
    many = b"id: x\ncommand: [echo" + b", 1" * 40 + b"]\n"
    assert len(config.problems(config.parse_yaml(many, file="x"), schema="job")) == 20


def test_lint_reports_every_problem_of_a_file(world: World) -> None:
    world.write(
        "admin", {"jobs/x.yaml": "id: x\ncommand: [echo, yes]\ntimeout_seconds: soon\nbogus: 1\n"}
    )
    result = world.mg("lint", "jobs/x.yaml", where="admin")
    assert result.code == 2
    errors = [line for line in result.err.splitlines() if line.startswith("error: ")]
    assert len(errors) == 3, result.err
    assert errors[0].endswith("(jobs/x.yaml:4)") and "bogus" in errors[0]
    assert "hint: quote it" in result.err
