"""What `run --report` posts on a pull request, and how (github/reports.py): shapes GitHub
documents, bounded and redacted text, and a retried comment that edits rather than duplicates.

The posts go to the loopback fake, which holds every request body and answer to GitHub's OpenAPI
description (`FakeGitHub.check_request` / `check_shapes`: the fixture fails at exit otherwise).
"""

from __future__ import annotations

import re

import pytest

from mergegate.audit.records import Finished, Started
from mergegate.github import reports
from mergegate.github.http import Client, RateLimited, Unavailable, Unreachable
from tests.helpers.fake_github import REPOSITORY, Comment, FakeGitHub, PullRequest, ago

TOKEN = "ghs_test_token_0123456789abcdef"
SHA = "a" * 40
RUN = "0123456789abcdef0123456789abcdef"


def finished(**fields: object) -> Finished:
    values: dict[str, object] = {
        "seq": 42,
        "hash": "f" * 64,
        "job": "backup",
        "path": "jobs/backup.yaml",
        "blob": "b" * 40,
        "commit": SHA,
        "runner": "gha",
        "run_id": RUN,
        "status": "failed",
        "exit_code": 3,
        "duration_ms": 1234,
        "stdout_tail": "hello\n",
        "stderr_tail": "",
    }
    values.update(fields)
    return Finished(**values)  # type: ignore[arg-type]


def poster(fake: FakeGitHub, **options: float) -> reports.Poster:
    return reports.Poster(Client(fake.url, token=TOKEN, max_wait=0, **options), REPOSITORY)


@pytest.fixture
def pull(fake: FakeGitHub) -> int:
    fake.add_pull(PullRequest(3, 200, "c" * 40, SHA))
    return 3


def test_statuses_have_the_job_context_a_bounded_description_and_githubs_shape(
    fake: FakeGitHub,
) -> None:
    started = Started(
        seq=41,
        commit=SHA,
        job="backup",
        path="jobs/backup.yaml",
        runner="gha",
        run_id=RUN,
        attempt=2,
    )
    post = poster(fake)
    post.status(reports.started_status(started, target_url=None, secrets=()))
    long_reason = "lost: " + "x" * 400
    post.status(
        reports.finished_status(
            finished(status="lost", exit_code=None, reason=long_reason),
            target_url="https://github.com/acme/gate/actions/runs/9",
            secrets=(),
        )
    )
    first, last = fake.statuses
    assert first["state"] == "pending" and first["context"] == "mergegate/backup"
    assert "attempt 2" in first["description"] and "target_url" not in first
    assert last["state"] == "error" and len(last["description"]) <= 140
    assert last["description"].endswith(", audit seq 42")
    assert last["target_url"].endswith("/actions/runs/9")
    for status, state in (("succeeded", "success"), ("timed_out", "failure"), ("odd", "error")):
        assert (
            reports.finished_status(finished(status=status), target_url=None, secrets=()).state
            == state
        )


def test_the_states_read_back_are_each_contexts_latest_and_a_bad_answer_is_unavailable(
    fake: FakeGitHub,
) -> None:
    post = poster(fake)
    assert post.states(SHA) == {}
    for state, context in (("pending", "mergegate/a"), ("success", "mergegate/b")):
        post.status(reports.Status(SHA, state, context, "x"))
    post.status(reports.Status(SHA, "failure", "mergegate/a", "x"))
    assert post.states(SHA) == {"mergegate/a": "failure", "mergegate/b": "success"}
    fake.fail("/status", "malformed")
    with pytest.raises(Unavailable):
        post.states(SHA)


def test_the_comment_shows_result_record_and_show_command_and_nothing_secret() -> None:
    tail = (
        f"token {TOKEN}\npassword=hunter2hunter2\n```\n@alice see [link](https://evil)\n"
        "\u202eevil\x1b[31m\n"
    )
    body = reports.comment(
        finished(stdout_tail=tail, stderr_tail="boom"), attempt=2, secrets=(TOKEN,)
    )
    assert body.startswith(reports.marker(RUN) + "\n")
    assert "**failed** (exit code 3) after 1.2 s" in body
    assert "seq 42" in body and "f" * 64 in body and "`mergegate show backup`" in body
    assert "attempt 2" in body
    assert TOKEN not in body and "hunter2" not in body
    assert "\u202e" not in body and "\x1b" not in body and "\\u202e" in body
    # The output's own fence cannot close the block: the block's fence is longer.
    fences = re.findall(r"^(`{3,})text$", body, flags=re.M)
    assert fences and all(len(f) > 3 for f in fences[:1])


def test_the_output_tail_is_at_most_2_kb_both_streams_together() -> None:
    body = reports.comment(
        finished(stdout_tail="o" * 5000, stderr_tail="e" * 5000), attempt=None, secrets=()
    )
    assert body.count("o") + body.count("e") < reports.TAIL_MAX + 200
    assert "o" * 900 in body and "e" * 900 in body


def test_a_comment_is_posted_then_found_by_its_marker_and_edited_not_duplicated(
    fake: FakeGitHub, pull: int
) -> None:
    post = poster(fake)
    made = post.comment(pull, RUN, reports.marker(RUN) + "\nfirst\n", known=None, since=None)
    # A retry that never learnt the id (the answer was lost) finds it and edits it.
    again = post.comment(pull, RUN, reports.marker(RUN) + "\nsecond\n", known=None, since=ago(5))
    assert again == made and fake.edits == [made]
    [comment] = fake.comments_on(pull)
    assert comment.body.endswith("second\n")


def test_a_marker_in_someone_elses_comment_is_not_ours_to_edit(fake: FakeGitHub, pull: int) -> None:
    now = ago(0)
    fake.comments[5] = Comment(5, pull, reports.marker(RUN) + "\nnot yours", 666, now, now)
    made = poster(fake).comment(
        pull, RUN, reports.marker(RUN) + "\nours\n", known=None, since=ago(5)
    )
    assert made != 5 and fake.comments[5].body.endswith("not yours")
    assert len(fake.comments_on(pull)) == 2


def test_the_search_pages_through_comments_since_the_first_try(fake: FakeGitHub, pull: int) -> None:
    now = ago(0)
    for n in range(150):
        fake.comments[100 + n] = Comment(100 + n, pull, f"chatter {n}", 7, now, now)
    post = poster(fake)
    made = post.comment(pull, RUN, reports.marker(RUN) + "\nx\n", known=None, since=None)
    assert post.find(pull, RUN, since=ago(5)) == made
    assert any("since=" in p and "/issues/3/comments" in p for p in fake.paths())


def test_faults_are_unavailable_and_a_rate_limit_is_never_waited_out(
    fake: FakeGitHub, pull: int
) -> None:
    fake.fail("/statuses/", "rate", reset_in=3000)
    with pytest.raises(RateLimited):
        poster(fake).status(reports.Status(SHA, "success", "mergegate/x", "ok"))
    fake.hang_seconds = 2.0
    fake.fail("/issues/3/comments", "timeout")
    with pytest.raises(Unreachable):
        poster(fake, deadline=0.5).comment(pull, RUN, "x", known=None, since=None)


def test_the_target_url_is_the_actions_run_or_nothing() -> None:
    env = {
        "GITHUB_SERVER_URL": "https://github.com",
        "GITHUB_REPOSITORY": "acme/gate",
        "GITHUB_RUN_ID": "123",
    }
    assert reports.target_url(env) == "https://github.com/acme/gate/actions/runs/123"
    for bad in (
        {"GITHUB_SERVER_URL": "http://github.com"},
        {"GITHUB_SERVER_URL": "https://user:pw@github.com"},
        {"GITHUB_RUN_ID": "12; rm"},
        {"GITHUB_REPOSITORY": "acme/gate/../x"},
    ):
        assert reports.target_url({**env, **bad}) is None
    assert reports.target_url({}) is None


def test_only_plain_run_ids_and_commit_ids_are_reported() -> None:
    assert reports.reportable(RUN, SHA)
    assert not reports.reportable("a b", SHA) and not reports.reportable(RUN, "HEAD")
    assert not reports.reportable(None, SHA)
    assert reports.context(None, "jobs/x\u202e.yaml") == "mergegate/jobs/x\\u202e.yaml"
