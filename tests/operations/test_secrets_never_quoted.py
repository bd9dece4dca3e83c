"""A credential-shaped value in a wrongly typed field is described by its shape, never quoted
(issue 22, item 2): not by `lint`, `check`, the Actions annotation, the step summary, nor the
permanent `rejected` record on mergegate/audit."""

from __future__ import annotations

import json

import pytest

from mergegate.errors import MergegateError
from mergegate.rules import config
from tests.helpers.repos import ECHO_RULE, World, policy_yaml

TOKEN = "ghp_" + "0123456789abcdefghijklmnopqrstuvwxyzAB"
BAD_JOB = f"id: leak\ncommand: [echo, hi]\ntimeout_seconds: {TOKEN}\n"


@pytest.mark.parametrize(
    ("text", "says"),
    [
        (
            BAD_JOB,
            "field 'timeout_seconds': expected integer, found str (looks like a GitHub token)",
        ),
        (f"id: x\ncommand: [echo]\n{TOKEN}: 1\n", "unknown key str (looks like a GitHub token)"),
        (
            "id: x\ncommand: echo AKIAABCDEFGHIJKLMNOP\n",
            "found str (looks like an AWS access key id)",
        ),
        (f"id: x\ncommand: [echo]\ndescription: [{TOKEN}]\n", "one of which looks like a secret"),
    ],
)
def test_a_schema_error_names_a_secret_by_its_shape(text: str, says: str) -> None:
    with pytest.raises(MergegateError) as caught:
        config.validate(config.load(text.encode(), file="jobs/x.yaml", schema="job"), schema="job")
    assert says in caught.value.message
    assert TOKEN not in str(caught.value) and "AKIAABCDEFGHIJKLMNOP" not in str(caught.value)


def test_an_ordinary_wrong_value_is_still_quoted() -> None:
    with pytest.raises(MergegateError) as caught:
        text = b"id: x\ncommand: [echo]\ntimeout_seconds: soon\n"
        config.validate(config.load(text, file="jobs/x.yaml", schema="job"), schema="job")
    assert "found str 'soon'" in caught.value.message


def test_lint_check_annotations_summary_and_the_rejected_record_never_quote_it(
    world: World,
) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    world.write("admin", {"jobs/leak.yaml": BAD_JOB})
    linted = world.mg("lint", "jobs/leak.yaml", where="admin")
    assert linted.code == 2 and "looks like a GitHub token" in linted.err
    world.propose("p", {"jobs/leak.yaml": BAD_JOB}, who=world.alice)
    summary = world.tmp / "summary.md"
    checked = world.mg("check", "origin/p", "--github", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert "::error " in checked.err
    world.signed_merge("p", world.bob)
    ran = world.run_once()
    (job,) = ran.json()["jobs"]
    assert job["status"] == "rejected" and "looks like a GitHub token" in job["reason"]
    seen = [linted.out, linted.err, checked.out, checked.err, summary.read_text(), ran.out]
    seen.append(json.dumps(world.records()))
    for text in seen:
        assert TOKEN not in text and TOKEN[:12] not in text
