"""`run --report`: a review-approved job's result on its pull request, best effort (issue 24, §4).

Through the real CLI on a real gate whose merges GitHub "made", against the loopback fake
GitHub (every request and answer held to GitHub's OpenAPI description). What is protected: the
status and the comment land on the right commit and pull request; a failure to post (5xx, a rate
limit, a timeout) changes no record and no exit code, and the next pass posts it, editing the
comment an answer-less try made rather than adding a second one.
"""

from __future__ import annotations

import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from mergegate.runner import reporting
from tests.helpers.fake_github import REPOSITORY
from tests.helpers.github_world import ALICE, GithubGate
from tests.helpers.repos import Result

TOKEN = "ghs_test_token_0123456789abcdef"


def report(gate: GithubGate, *args: str, env: dict[str, str] | None = None) -> Result:
    result = gate.run_once("--report", *args, env=env)
    assert TOKEN not in result.out + result.err
    return result


def outbox(gate: GithubGate) -> Path:
    return reporting.outbox(gate.world.clone("runner") / ".git", "gha")


def events(gate: GithubGate) -> list[str]:
    return [r["event"] for r in gate.world.records()]


def fresh_checkout(gate: GithubGate) -> None:
    """What a new workflow run (a new process, a fresh checkout) lacks: the runner's memory of a
    quiet pass (idle.py) and of the runs it saw reported (the CLI runs in this process here)."""
    reporting._CONFIRMED.clear()
    shutil.rmtree(gate.world.clone("runner") / ".git" / "mergegate" / "quiet", ignore_errors=True)


def status_reads(paths: list[str]) -> list[str]:
    """The combined-status reads among `paths` (their query left off)."""
    return [p.split("?")[0] for p in paths if p.split("?")[0].endswith("/status")]


def finished(gate: GithubGate) -> dict[str, Any]:
    [record] = gate.world.events("finished")
    return record


def test_a_review_approved_job_gets_a_pending_then_final_status_and_one_comment(
    gate: GithubGate,
) -> None:
    gate.setup()
    pr = gate.reviewed_merge("backup", ALICE)
    result = report(gate)
    assert result.code == 0, result.err
    assert [j["status"] for j in result.json()["jobs"]] == ["succeeded"]
    record = finished(gate)
    states = [(s["sha"], s["context"], s["state"]) for s in gate.fake.statuses]
    merge = pr.merge_commit_sha
    assert states == [
        (merge, "mergegate/backup", "pending"),
        (merge, "mergegate/backup", "success"),
    ]
    assert gate.fake.status_of(merge, "mergegate/backup")["description"].endswith(  # type: ignore[index]
        f"audit seq {record['seq']}"
    )
    [comment] = gate.fake.comments_on(pr.number)
    assert comment.body.startswith(f"<!-- mergegate:run {record['run_id']} -->")
    assert record["hash"] in comment.body and f"seq {record['seq']}" in comment.body
    assert "**succeeded** (exit code 0)" in comment.body and "backup" in comment.body
    assert "mergegate show backup" in comment.body
    assert not outbox(gate).exists()
    assert gate.fake.shape_errors == []


def test_without_report_nothing_is_posted(gate: GithubGate) -> None:
    gate.setup()
    gate.reviewed_merge("backup", ALICE)
    result = gate.run_once()
    assert result.code == 0, result.err
    assert gate.fake.statuses == [] and gate.fake.comments == {}
    assert not any(m in ("POST", "PATCH") for m, _, _ in gate.fake.requests)


def test_a_job_not_approved_through_a_pull_request_is_not_reported(gate: GithubGate) -> None:
    gate.setup()
    w = gate.world
    w.propose("signed", {"jobs/signed.yaml": "id: signed\ncommand: [echo, hi]\n"}, who=w.mallory)
    w.signed_merge("signed", w.alice)
    result = report(gate)
    assert result.code == 0, result.err
    assert [j["status"] for j in result.json()["jobs"]] == ["succeeded"]
    assert gate.fake.statuses == [] and gate.fake.comments == {}


@pytest.mark.parametrize(
    "fault",
    [
        {"kind": "status", "status": 503},
        {"kind": "rate", "status": 403, "reset_in": 3000},
    ],
    ids=["5xx", "rate-limit"],
)
def test_a_failed_post_changes_no_record_nor_the_exit_code_and_the_next_pass_posts_it(
    gate: GithubGate, fault: dict[str, Any]
) -> None:
    gate.setup()
    pr = gate.reviewed_merge("backup", ALICE)
    gate.fake.fail("/statuses/", times=100, **fault)
    gate.fake.fail("/comments", times=100, **fault)
    result = report(gate)
    assert result.code == 0, result.err
    assert [j["status"] for j in result.json()["jobs"]] == ["succeeded"]
    assert events(gate) == ["started", "finished", "scanned"]
    assert "could not report" in result.err and "next pass tries again" in result.err
    assert outbox(gate).exists()
    before = gate.world.records()
    gate.fake.faults.clear()
    again = report(gate)
    assert again.code == 0, again.err
    assert gate.world.records() == before  # the retry writes no record
    merge = pr.merge_commit_sha
    assert gate.fake.status_of(merge, "mergegate/backup")["state"] == "success"  # type: ignore[index]
    # A 5xx may have come after GitHub made the comment: the retry found it by its marker.
    assert len(gate.fake.comments_on(pr.number)) == 1
    assert not outbox(gate).exists() and "could not report" not in again.err


@pytest.mark.parametrize(
    ("status_fault", "comment_fault"),
    [
        ({"kind": "rate", "status": 403, "reset_in": 3000}, {"kind": "rate", "status": 403}),
        # GitHub made the comment but the answer was a 503: found by its marker, not repeated.
        ({"kind": "rate", "status": 403, "reset_in": 3000}, {"kind": "status", "status": 503}),
    ],
    ids=["nothing-made", "comment-made"],
)
def test_a_post_failing_for_a_whole_run_is_caught_up_from_the_records_in_a_fresh_checkout(
    gate: GithubGate, status_fault: dict[str, Any], comment_fault: dict[str, Any]
) -> None:
    gate.setup()
    pr = gate.reviewed_merge("backup", ALICE)
    gate.fake.fail("/statuses/", times=100, **status_fault)
    gate.fake.fail("/comments", times=100, **comment_fault)
    result = report(gate)
    assert result.code == 0, result.err
    assert "could not report" in result.err
    outbox(gate).unlink()  # the next workflow run's checkout has no outbox
    fresh_checkout(gate)
    before = gate.world.records()
    gate.fake.faults.clear()
    again = report(gate)
    assert again.code == 0, again.err
    assert gate.world.records() == before  # the catch-up writes no record
    merge = pr.merge_commit_sha
    assert gate.fake.status_of(merge, "mergegate/backup")["state"] == "success"  # type: ignore[index]
    [comment] = gate.fake.comments_on(pr.number)
    assert comment.body.startswith(f"<!-- mergegate:run {finished(gate)['run_id']} -->")
    assert not outbox(gate).exists() and "could not" not in again.err
    assert gate.fake.shape_errors == []


def test_the_catch_up_asks_once_per_recent_run_and_not_at_all_without_one(
    gate: GithubGate,
) -> None:
    gate.setup()
    w = gate.world
    w.propose("signed", {"jobs/signed.yaml": "id: signed\ncommand: [echo, hi]\n"}, who=w.mallory)
    w.signed_merge("signed", w.alice)
    assert report(gate).code == 0 and report(gate).code == 0
    assert status_reads(gate.fake.paths()) == []  # no PR-approved run: not one request
    pr = gate.reviewed_merge("backup", ALICE)
    assert report(gate).code == 0
    posts = len(gate.fake.statuses)
    asked = len(gate.fake.requests)
    fresh_checkout(gate)
    again = report(gate)
    assert again.code == 0, again.err
    reads = [p for p in gate.fake.paths()[asked:] if "/status" in p or "/comments" in p]
    assert status_reads(reads) == [f"/repos/{REPOSITORY}/commits/{pr.merge_commit_sha}/status"]
    assert len(reads) == 1
    assert len(gate.fake.statuses) == posts  # reported already: nothing posted again
    # The same process (a poll loop) does not ask again about a run it saw reported.
    shutil.rmtree(outbox(gate).parent.parent / "quiet", ignore_errors=True)
    asked = len(gate.fake.requests)
    assert report(gate).code == 0
    assert status_reads(gate.fake.paths()[asked:]) == []
    # Past CATCH_UP (by the runner's clock) the run is not asked about any more.
    asked = len(gate.fake.requests)
    in_two_days = (datetime.now(UTC) + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    fresh_checkout(gate)
    later = report(gate, env={"MERGEGATE_CLOCK": in_two_days})
    assert later.code == 0, later.err
    assert status_reads(gate.fake.paths()[asked:]) == []


def test_a_comment_whose_answer_never_came_is_edited_by_the_retry_not_duplicated(
    gate: GithubGate, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(reporting, "REQUEST_SECONDS", 0.5)
    gate.setup()
    pr = gate.reviewed_merge("backup", ALICE)
    gate.fake.hang_seconds = 2.0
    gate.fake.fail("/issues/1/comments", "timeout")  # GitHub makes it; the answer is too late
    result = report(gate)
    assert result.code == 0, result.err
    assert "could not report 1 result" in result.err
    [made] = gate.fake.comments_on(pr.number)
    again = report(gate)
    assert again.code == 0, again.err
    assert [c.id for c in gate.fake.comments_on(pr.number)] == [made.id]
    assert gate.fake.edits == [made.id]
    assert not outbox(gate).exists()


def test_report_without_a_repository_or_token_is_a_usage_error(gate: GithubGate) -> None:
    gate.setup()
    gate.reviewed_merge("backup", ALICE)
    result = gate.world.run_once(*gate.runner_args, "--report", env={"GITHUB_REPOSITORY": ""})
    assert result.code == 2
    assert "--report" in result.err and "GITHUB_REPOSITORY" in result.err
    assert gate.world.events("started") == []


# -- the outbox, without a gate: records as values, the fake as GitHub -------------------------

SHA = "a" * 40


def _reporter(tmp_path: Path, fake: Any) -> reporting.Reporter:
    from mergegate.github.gather import Settings

    settings = Settings(fake.url, "acme/gate", TOKEN)
    return reporting.for_pass(tmp_path, "r", settings, lambda sha: 1, env={})


def _run(run_id: str, attempt: int, status: str, seq: int) -> tuple[Any, Any]:
    from mergegate.audit.records import Finished, Started

    ids = {"job": "flaky", "path": "jobs/flaky.yaml", "blob": "b" * 40, "commit": SHA}
    started = Started(seq=seq, run_id=run_id, attempt=attempt, runner="r", **ids)  # type: ignore[arg-type]
    done = Finished(
        seq=seq + 1,
        hash="f" * 64,
        run_id=run_id,
        status=status,
        exit_code=1,
        duration_ms=5,
        runner="r",
        **ids,
    )  # type: ignore[arg-type]
    return started, done


def test_each_attempt_of_a_retried_job_has_its_own_comment_and_the_status_shows_the_last(
    tmp_path: Path, fake: Any
) -> None:
    from mergegate.runner.claims import Book
    from tests.helpers.fake_github import PullRequest

    fake.add_pull(PullRequest(1, 200, "c" * 40, SHA))
    reporter = _reporter(tmp_path, fake)
    book = Book()
    for attempt, (run_id, status) in enumerate((("1" * 32, "failed"), ("2" * 32, "succeeded")), 1):
        started, done = _run(run_id, attempt, status, 10 * attempt)
        book.add([started])
        reporter.published([started], book)
        reporter.published([done], book)
    assert reporter.finish() == []
    bodies = [c.body for c in fake.comments_on(1)]
    assert len(bodies) == 2 and "attempt 1" in bodies[0] and "attempt 2" in bodies[1]
    assert fake.status_of(SHA, "mergegate/flaky")["state"] == "success"


def test_an_item_github_refuses_for_good_is_dropped_and_others_give_up_after_max_tries(
    tmp_path: Path, fake: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mergegate.runner.claims import Book

    monkeypatch.setattr(reporting, "MAX_TRIES", 2)
    fake.fail("/statuses/", "status", status=422, times=1)
    fake.fail("/comments", "status", status=500, times=10)
    _, done = _run("3" * 32, 1, "failed", 1)
    reporter = _reporter(tmp_path, fake)
    reporter.published([done], Book())
    said = reporter.finish()
    assert any("gave up reporting status" in w and "422" in w for w in said)
    assert any("could not report 1 result" in w for w in said)
    second = _reporter(tmp_path, fake)  # the next pass
    assert any("gave up reporting comment" in w for w in second.finish())
    assert not reporting.outbox(tmp_path, "r").exists()


def test_an_unreadable_outbox_is_said_and_set_aside(tmp_path: Path, fake: Any) -> None:
    path = reporting.outbox(tmp_path, "r")
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    reporter = _reporter(tmp_path, fake)
    assert any("cannot be read" in w for w in reporter.finish())


def test_a_waiting_outbox_brings_the_next_pass_within_a_minute(tmp_path: Path, fake: Any) -> None:
    from datetime import timedelta

    from mergegate import clock
    from mergegate.runner.claims import Book

    assert reporting.wake(None, None) is None
    fake.fail("/statuses/", "status", status=500, times=10)
    fake.fail("/comments", "status", status=500, times=10)
    reporter = _reporter(tmp_path, fake)
    reporter.published([_run("4" * 32, 1, "failed", 1)[1]], Book())
    reporter.finish()
    later = clock.now() + timedelta(hours=1)
    soon = reporting.wake(reporter, later)
    assert soon is not None and soon < later
    assert soon <= clock.now() + timedelta(seconds=reporting.RETRY_SECONDS)


def test_the_catch_up_takes_this_runners_latest_recent_finished_runs_of_pull_requests() -> None:
    from dataclasses import replace

    from mergegate.audit import log as audit

    now = datetime(2026, 12, 6, 12, tzinfo=UTC)
    fresh, stale = audit.stamp(now - timedelta(hours=1)), audit.stamp(now - timedelta(hours=25))
    records: list[Any] = []
    for n in range(reporting.CATCH_UP_RUNS + 2):  # more recent runs than are asked about
        started, done = _run(f"{n:032d}", 1, "succeeded", 10 * n + 10)
        job = {"job": f"j{n}", "path": f"jobs/j{n}.yaml"}
        records += [replace(started, **job), replace(done, time=fresh if n else stale, **job)]
    retried, superseded = _run("a" * 32, 1, "failed", 500)
    again, _ = _run("b" * 32, 2, "succeeded", 502)  # its later attempt started: left to it
    other = replace(_run("c" * 32, 1, "failed", 600)[1], runner="other", time=fresh, path="o")
    records += [retried, replace(superseded, time=fresh), again, other]
    found = reporting.recent_runs(records, "r", lambda sha: 1, now=now)
    assert [(r.run_id, attempt) for r, attempt in found] == [
        (f"{n:032d}", 1) for n in range(2, reporting.CATCH_UP_RUNS + 2)
    ]
    assert reporting.recent_runs(records, "r", lambda sha: None, now=now) == []  # no pull request


def test_a_run_posted_or_seen_reported_is_not_asked_about_again_by_this_process(
    tmp_path: Path, fake: Any
) -> None:
    from mergegate.runner.claims import Book
    from tests.helpers.fake_github import PullRequest

    fake.add_pull(PullRequest(1, 200, "c" * 40, SHA))
    posted = _reporter(tmp_path, fake)
    started, done = _run("1" * 32, 1, "succeeded", 10)
    posted.published([started, done], Book())
    assert posted.finish() == []
    seen = _reporter(tmp_path / "other", fake)  # (another checkout: its own memory)
    assert posted.confirmed("1" * 32) and not seen.confirmed("1" * 32)
    seen.recent = [(done, 1)]
    seen._start()
    assert seen.finish() == [] and seen.confirmed("1" * 32)  # GitHub shows it: not posted again
    assert len(fake.statuses) == 1 and len(fake.comments_on(1)) == 1
