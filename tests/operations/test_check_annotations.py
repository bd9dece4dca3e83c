"""`check` in GitHub Actions: annotations at the exact line, a step summary, step outputs."""

from __future__ import annotations

import json
from pathlib import Path

from tests.helpers.fake_github import FakeGitHub
from tests.helpers.github_world import ALICE, BOB, GithubGate
from tests.helpers.repos import World, job_yaml


def _actions_env(tmp_path: Path, fake: FakeGitHub, number: int | None) -> dict[str, str]:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": number}} if number else {}))
    return {
        **fake.env(),
        "GITHUB_ACTIONS": "true",
        "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
        "GITHUB_OUTPUT": str(tmp_path / "output"),
        "GITHUB_EVENT_PATH": str(event),
    }


def test_denied_and_invalid_jobs_are_annotated_at_their_line(
    world: World, fake: FakeGitHub, tmp_path: Path
) -> None:
    gate = GithubGate(world, fake)
    gate.setup()
    pr = gate.open_pr(
        "mixed",
        {
            "jobs/ok.yaml": job_yaml("ok", ["echo", "hi"]),
            "jobs/rm.yaml": "id: rm\ndescription: cleanup\ncommand: [rm, -rf, /]\n",
            "jobs/bad.yaml": "id: bad\ncommand: [echo]\nbogus: 1\n",
        },
    )
    gate.fake.review(pr.number, BOB, "APPROVED", pr.head_sha)
    env = _actions_env(tmp_path, fake, pr.number)
    result = world.mg("check", "origin/mixed", where="proposer", env=env)
    assert result.code == 2  # an invalid file
    errors = [line for line in result.err.splitlines() if line.startswith("::")]
    assert "::error file=jobs/rm.yaml,line=3,title=mergegate%3A denied::" in "\n".join(errors)
    assert any(
        line.startswith("::error file=jobs/bad.yaml,line=")
        and "title=mergegate%3A invalid::" in line
        for line in errors
    )
    assert not any("jobs/ok.yaml" in line for line in errors)
    summary = (tmp_path / "summary.md").read_text()
    assert "### mergegate check: not allowed" in summary
    row = next(line for line in summary.splitlines() if line.startswith("| ok |"))
    assert "| echo hi | allowed |" in row and "| bob |" in row and "alice, carol" in row
    # The approvals it still needs say that bob's review counts at the merge (not "no approvals"
    # alone).
    assert (
        "the reviews on this head (bob) count too once it is merged with a merge commit or squash"
        in row
    )
    outputs = dict(line.split("=", 1) for line in (tmp_path / "output").read_text().splitlines())
    assert (
        outputs["allowed"] == "false"
        and outputs["denied-count"] == "1"
        and outputs["invalid-count"] == "1"
    )
    assert outputs["allowed-count"] == "1"


def test_allowed_proposal_outputs_true_and_the_authors_review_is_not_counted(
    world: World, fake: FakeGitHub, tmp_path: Path
) -> None:
    gate = GithubGate(world, fake)
    gate.setup()
    pr = gate.open_pr("hello", author=ALICE)
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    result = world.mg(
        "check",
        "origin/hello",
        "--json",
        where="proposer",
        env=_actions_env(tmp_path, fake, pr.number),
    )
    assert result.code == 0, result.err
    assert result.json()["files"][0]["state"] == "allowed"  # stdout stays JSON
    outputs = (tmp_path / "output").read_text()
    assert "allowed=true\n" in outputs
    row = next(
        line
        for line in (tmp_path / "summary.md").read_text().splitlines()
        if line.startswith("| hello |")
    )
    assert "| none |" in row  # alice wrote the PR: her review does not count
    assert row.endswith("| bob, carol |")


def test_api_down_still_writes_the_summary_and_says_why(
    world: World, fake: FakeGitHub, tmp_path: Path
) -> None:
    gate = GithubGate(world, fake)
    gate.setup()
    pr = gate.open_pr("hello")
    fake.fail("/pulls/", "status", status=503, times=10)
    result = world.mg(
        "check", "origin/hello", where="proposer", env=_actions_env(tmp_path, fake, pr.number)
    )
    assert result.code == 0
    assert "reviews unavailable: GET" in (tmp_path / "summary.md").read_text()


def test_hostile_file_names_cannot_start_a_workflow_command(
    world: World, fake: FakeGitHub, tmp_path: Path
) -> None:
    from mergegate.operations.check_annotations import escape_data, escape_property

    assert escape_property("a,b:c%\n::add-mask::x") == "a%2Cb%3Ac%25%0A%3A%3Aadd-mask%3A%3Ax"
    assert "\n" not in escape_data("x\n::warning::y")


def test_outside_actions_nothing_is_written(world: World, fake: FakeGitHub, tmp_path: Path) -> None:
    gate = GithubGate(world, fake)
    gate.setup()
    gate.open_pr("hello")
    env = {**_actions_env(tmp_path, fake, 1), "GITHUB_ACTIONS": ""}
    result = world.mg("check", "origin/hello", where="proposer", env=env)
    assert result.code == 0 and "::" not in result.err
    assert not (tmp_path / "summary.md").exists()
