"""GitHub's answers as they come, large, slow or odd, never freeze the gate (issue 23, 1-5).

Every bound ends in a decision the records keep (the merge is refused as unreviewable and
says why), never in "waiting" forever; a page named the way GitHub names it is read back.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.fake_github import REPOSITORY_ID, FakeGitHub, PullRequest, comment_event
from tests.helpers.github_world import ALICE, DAVE, GithubGate

OFFLINE = {"GITHUB_API_URL": "http://127.0.0.1:9", "GITHUB_REPOSITORY": "acme/gate"}


def run(gate: GithubGate, **env: str) -> dict[str, Any]:
    result = gate.run_once(env=env)
    assert result.code in (0, 1), result.err
    return result.json()  # type: ignore[no-any-return]


def started(gate: GithubGate) -> list[str]:
    return sorted(str(r["job"]) for r in gate.world.events("started"))


def reasons(out: dict[str, Any]) -> dict[str, str]:
    return {str(j["job"]): str(j.get("reason") or "") for j in out["jobs"]}


def verify_fresh(gate: GithubGate, name: str = "fresh") -> dict[str, Any]:
    gate.world.clone(name)
    result = gate.world.mg("verify", "--json", where=name, env=OFFLINE)
    assert result.code == 0, result.out + result.err
    return result.json()  # type: ignore[no-any-return]


# --- 1: GitHub's own pagination links ----------------------------------------------------------


@pytest.mark.parametrize("form", ["repositories", "repos"])
def test_pages_linked_by_repository_id_are_followed_and_read_back(
    gate: GithubGate, form: str
) -> None:
    """GitHub's Link headers name page 2 as /repositories/<id>/...: the runner reads it, stores
    it, and reading the evidence back (the next pass, verify) keeps it: the job runs, verify ok."""
    gate.fake.link_form = form
    gate.setup()
    pr = gate.open_pr("backup")
    for i in range(150):  # two pages of reviews and of timeline events
        gate.fake.review(pr.number, 10_000 + i, "COMMENTED", pr.head_sha, minutes_ago=20)
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    gate.merge(pr)
    out = run(gate)
    assert out["waiting"] is None and started(gate) == ["backup"], out
    by_id = [p for p in gate.fake.paths() if p.startswith(f"/repositories/{REPOSITORY_ID}/")]
    assert bool(by_id) is (form == "repositories")
    assert verify_fresh(gate)["incomplete"] is None
    audit = gate.world.mg("audit", "verify", where="fresh", env=OFFLINE)
    assert audit.code == 0, audit.out + audit.err


def test_a_next_link_to_another_listing_is_not_followed(fake: FakeGitHub) -> None:
    """A Link to a page of something else (even on the API's origin) is no page of this listing."""
    from mergegate.github import gather
    from mergegate.github.http import Client, Malformed

    fake.add_pull(PullRequest(1, 200, "a" * 40, "", merged=False))
    fake.review(1, ALICE, "APPROVED", "a" * 40)
    fake.fail("/reviews", "other-next")
    with Client(fake.url) as client, pytest.raises(Malformed, match="is not a page of"):
        gather._listing(client, "acme/gate", "/pulls/1/reviews", [])


def test_listing_pages_in_both_forms() -> None:
    from mergegate.github.evidence import is_listing_page

    api = "https://ghe.example/api/v3"
    suffix = "/issues/3/timeline"
    assert is_listing_page(f"{api}/repositories/42{suffix}?page=2", api, suffix)
    assert is_listing_page(f"{api}/repos/a/b{suffix}?page=2", api, suffix, repository="a/b")
    assert not is_listing_page(f"{api}/repos/a/c{suffix}?page=2", api, suffix, repository="a/b")
    assert not is_listing_page(f"{api}/repositories/x1{suffix}", api, suffix)
    assert not is_listing_page(f"{api}/repositories/42/issues/4/timeline", api, suffix)
    assert not is_listing_page(f"https://other/api/v3/repositories/42{suffix}", api, suffix)


# --- 5: a deadline per answer, a budget per pass -------------------------------------------------


@pytest.mark.parametrize("kind", ["trickle", "trickle-headers"])
def test_an_answer_trickling_in_ends_at_its_deadline(fake: FakeGitHub, kind: str) -> None:
    """One byte every 0.2s of a body (or of a header) resets every per-read timeout: the request's
    deadline ends it all the same, as a "not yet" naming the deadline."""
    import time

    from mergegate.github.http import Client, Unreachable

    fake.add_pull(PullRequest(1, 200, "a" * 40, "", merged=False))
    fake.fail("/pulls/1", kind)
    began = time.monotonic()
    with Client(fake.url, deadline=1.5) as client, pytest.raises(Unreachable) as caught:
        client.get("/repos/acme/gate/pulls/1")
    assert time.monotonic() - began < 4
    assert "no complete answer within 1.5s (its deadline)" in caught.value.message
    # The client (one per pass) still asks and gets answers after a request was cut off.
    with Client(fake.url, deadline=1.5) as client:
        fake.fail("/pulls/1", kind)
        with pytest.raises(Unreachable):
            client.get("/repos/acme/gate/pulls/1")
        assert client.get("/repos/acme/gate/pulls/1").json()["number"] == 1


def test_a_pass_spends_at_most_its_budget_asking_github(fake: FakeGitHub) -> None:
    import time

    from mergegate.github.http import Client, Unreachable

    fake.add_pull(PullRequest(1, 200, "a" * 40, "", merged=False))
    fake.fail("/pulls/1", "trickle", times=5)
    began = time.monotonic()
    with Client(fake.url, deadline=1.0, max_api_time=2.8) as client:
        for _ in range(2):
            with pytest.raises(Unreachable, match="within 1s"):
                client.get("/repos/acme/gate/pulls/1")
        with pytest.raises(Unreachable, match=r"what is left of this pass's 2\.8s for GitHub"):
            client.get("/repos/acme/gate/pulls/1")
        with pytest.raises(Unreachable, match=r"its budget \(2\.8s\)"):
            client.get("/repos/acme/gate/pulls/1")
    assert time.monotonic() - began < 6


# --- 4: one merge, two pull requests -------------------------------------------------------------


def _copy(gate: GithubGate, pr: PullRequest, number: int) -> PullRequest:
    """Another pull request with the same head, which GitHub marks merged with the same commit."""
    copy = PullRequest(
        number=number,
        author=DAVE,
        head_sha=pr.head_sha,
        merge_commit_sha=pr.merge_commit_sha,
        head_ref=f"copy-{number}",
        commits=list(pr.commits),
        merged_at=pr.merged_at,
    )
    return gate.fake.add_pull(copy)


def test_two_merged_pulls_for_one_merge_the_one_its_message_names_is_judged(
    gate: GithubGate,
) -> None:
    gate.setup()
    pr = gate.reviewed_merge("backup", ALICE)  # "Merge pull request #1 from acme/backup"
    _copy(gate, pr, 2)
    out = run(gate)
    assert out["waiting"] is None and started(gate) == ["backup"], out
    [record] = gate.world.events("started")
    assert record["votes"] == ["alice (review 1 on PR #1)"]
    assert verify_fresh(gate)["incomplete"] is None


def test_two_merged_pulls_its_message_names_neither_is_refused_and_later_merges_proceed(
    gate: GithubGate,
) -> None:
    gate.setup()
    pr = gate.reviewed_merge("backup", ALICE)
    _copy(gate, pr, 2)
    _copy(gate, pr, 3)
    del gate.fake.pulls[1]  # GitHub lists #2 and #3; the message names #1
    out = run(gate)
    assert out["waiting"] is None and started(gate) == [], out
    reason = reasons(out)["backup"]
    assert "GitHub lists pull requests #2, #3 as merged with merge commit" in reason
    assert "its message names none of them" in reason and "signed merge" in reason
    gate.numbers = 3
    gate.reviewed_merge("cleanup", ALICE)
    assert run(gate)["waiting"] is None and started(gate) == ["cleanup"]
    assert verify_fresh(gate)["incomplete"] is None


# --- 3: size bounds decide, they never freeze the gate nor taint what comes after ---------------


def _comments(count: int, size: int) -> list[dict[str, Any]]:
    return [comment_event(60_000 + i, 424242, "x" * size) for i in range(count)]


def _refused_then_later_runs(gate: GithubGate, out: dict[str, Any], why: str) -> None:
    """The bounded merge is refused in this pass with its reason; a later merge runs."""
    assert out["waiting"] is None, out
    assert started(gate) == []
    reason = reasons(out)["backup"]
    assert "pass mergegate's bounds" in reason and why in reason, reason
    assert "approve it with a signed merge" in reason
    gate.reviewed_merge("cleanup", ALICE)
    again = run(gate)
    assert again["waiting"] is None and started(gate) == ["cleanup"], again
    assert verify_fresh(gate)["incomplete"] is None


def test_a_timeline_page_past_the_body_bound_refuses_the_merge_not_waits(gate: GithubGate) -> None:
    """45 comments of 200 kB make one timeline page larger than 8 MiB."""
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    spam = _comments(45, 200_000)
    original = pr.timeline
    pr.timeline = lambda: [*original(), *spam]  # type: ignore[method-assign]
    gate.merge(pr)
    _refused_then_later_runs(gate, run(gate), "the body is larger than 8388608 bytes")


def test_a_huge_commit_message_in_the_merged_pull_refuses_it_not_waits(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    pr.commits[-1].message = "m" * 9_000_000  # as GitHub would list a 9 MB commit message
    gate.merge(pr)
    _refused_then_later_runs(gate, run(gate), "the body is larger than")


def test_spam_past_the_total_bound_refuses_the_merge_not_waits(
    gate: GithubGate, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mergegate.github import gather

    monkeypatch.setattr(gather, "MAX_EVIDENCE_BYTES", 200_000)
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    spam = _comments(250, 2_000)  # three pages, past 200 kB in all
    original = pr.timeline
    pr.timeline = lambda: [*original(), *spam]  # type: ignore[method-assign]
    gate.merge(pr)
    _refused_then_later_runs(gate, run(gate), "GitHub's answers pass 0 MiB")


def test_a_lookup_past_its_bounds_refuses_the_merge_not_waits(
    gate: GithubGate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Anyone may open pull requests whose head holds the merge commit: a lookup past its pages
    is decided too."""
    from mergegate.github import gather

    monkeypatch.setattr(gather, "MAX_PAGES", 1)
    monkeypatch.setattr(gather, "PER_PAGE", 1)
    gate.setup()
    pr = gate.reviewed_merge("backup", ALICE)
    for number in (2, 3):
        gate.fake.add_pull(
            PullRequest(number, DAVE, pr.merge_commit_sha, "", merged=False, head_ref=f"x{number}")
        )
    out = run(gate)
    assert out["waiting"] is None and started(gate) == [], out
    reason = reasons(out)["backup"]
    assert "cannot be judged on reviews" in reason and "more than 1 pages" in reason, reason


def test_the_pull_request_judged_is_rederived_from_the_stored_lookup(gate: GithubGate) -> None:
    """verify re-derives which of two merged pull requests a merge is: evidence naming the other
    one (a runner's choice, stored) is refused, never judged on the other one's reviews."""
    import dataclasses
    from datetime import UTC, datetime

    from mergegate.git.repo import Repo
    from mergegate.github import gather
    from mergegate.rules.policy import load_policy

    w = gate.world
    gate.setup()
    pr = gate.reviewed_merge("backup", ALICE)
    copy = _copy(gate, pr, 2)
    gate.fake.review(copy.number, ALICE, "APPROVED", copy.head_sha)
    sha = pr.merge_commit_sha
    w.git("runner", "fetch", "-q", "origin")
    repo = Repo(w.clone("runner"))
    parent = repo.commit(sha).parents[0]
    policy = load_policy(lambda p: repo.read_file(parent, p), commit=parent)
    settings = gather.Settings(gate.fake.url, "acme/gate", "ghs_token_xyz")
    now = datetime.now(UTC)
    with settings.client() as client:
        result = gather.review(repo, policy, sha, now=now, settings=settings, client=client)
    assert result.evidence.pull == 1 and result.verdict.counted == ("alice",)
    other = dataclasses.replace(result.evidence, pull=2)
    again = gather.review(repo, policy, sha, now=now, stored=other)
    assert again.verdict.refused == (
        "the evidence judges PR #2, but GitHub's lookup names PR #1"
    ), again.verdict
