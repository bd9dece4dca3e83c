"""The one HTTP client against the loopback GitHub: timeouts, bounds, rate limits, no token
leaks."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from mergegate.errors import MergegateError, NotYet
from mergegate.github.http import BadStatus, Client, Malformed, RateLimited, Unreachable
from tests.helpers.fake_github import REPOSITORY, FakeGitHub, PullRequest

TOKEN = "ghs_secret_token_must_not_leak_42"


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        server.add_pull(
            PullRequest(number=1, author=10, head_sha="a" * 40, merge_commit_sha="b" * 40)
        )
        yield server


def client(fake: FakeGitHub, **options: object) -> Client:
    slept: list[float] = []
    c = Client(fake.url, token=TOKEN, sleep=slept.append, **options)  # type: ignore[arg-type]
    c.slept = slept  # type: ignore[attr-defined]
    return c


def test_get_returns_body_status_request_id_and_hash(fake: FakeGitHub) -> None:
    with client(fake) as c:
        r = c.get(f"/repos/{REPOSITORY}/pulls/1")
    assert r.status == 200 and r.json()["number"] == 1
    assert r.request_id.startswith("FAKE:") and len(r.sha256) == 64
    assert fake.requests[-1][2]["authorization"] == f"Bearer {TOKEN}"
    assert TOKEN not in repr(r)


def test_errors_are_not_yet_and_never_name_the_token(fake: FakeGitHub) -> None:
    fake.fail("/pulls/1", "status", status=500, times=5)
    with client(fake) as c, pytest.raises(BadStatus) as info:
        c.get(f"/repos/{REPOSITORY}/pulls/1")
    assert isinstance(info.value, NotYet) and isinstance(info.value, MergegateError)
    assert info.value.status == 500 and TOKEN not in str(info.value)


def test_a_502_is_retried_once(fake: FakeGitHub) -> None:
    fake.fail("/pulls/1", "status", status=502, times=1)
    with client(fake) as c:
        assert c.get(f"/repos/{REPOSITORY}/pulls/1").status == 200
    assert len(fake.requests) == 2


def test_a_post_answered_502_is_not_sent_again(fake: FakeGitHub) -> None:
    """A 502 may come after GitHub made the comment: asking again would make a second one (the
    caller looks for it first: run --report's marker)."""
    fake.fail("/statuses/", "status", status=502, times=1)
    with client(fake) as c, pytest.raises(BadStatus):
        c.post(f"/repos/{REPOSITORY}/statuses/{'a' * 40}", body={"state": "success"})
    assert len(fake.requests) == 1


def test_404_is_bad_status_with_a_hint(fake: FakeGitHub) -> None:
    with client(fake) as c, pytest.raises(BadStatus) as info:
        c.get(f"/repos/{REPOSITORY}/pulls/99")
    assert info.value.status == 404 and "Not Found" in str(info.value) and info.value.hint


def test_rate_limit_within_the_bound_is_waited_out(fake: FakeGitHub) -> None:
    fake.fail("/pulls/1", "rate", status=403, reset_in=5)
    with client(fake, max_wait=30) as c:
        assert c.get(f"/repos/{REPOSITORY}/pulls/1").status == 200
        assert 4 <= c.slept[0] <= 7  # type: ignore[attr-defined]


def test_retry_after_429_is_honoured(fake: FakeGitHub) -> None:
    fake.fail("/pulls/1", "rate", status=429, reset_in=3, header="retry-after")
    with client(fake) as c:
        assert c.get(f"/repos/{REPOSITORY}/pulls/1").status == 200
        assert c.slept == [3.0]  # type: ignore[attr-defined]


def test_retry_after_as_an_http_date_is_honoured(fake: FakeGitHub) -> None:
    """Retry-After may be a date (RFC 9110): read with email.utils, which http.py imports only
    then."""
    fake.fail("/pulls/1", "rate", status=429, reset_in=5, header="retry-after-date")
    with client(fake) as c:
        assert c.get(f"/repos/{REPOSITORY}/pulls/1").status == 200
        assert len(c.slept) == 1 and 3 <= c.slept[0] <= 6  # type: ignore[attr-defined]


def test_rate_limit_beyond_the_bound_gives_up_for_this_pass(fake: FakeGitHub) -> None:
    fake.fail("/pulls/1", "rate", status=403, reset_in=3600)
    with client(fake, max_wait=60) as c, pytest.raises(RateLimited) as info:
        c.get(f"/repos/{REPOSITORY}/pulls/1")
        assert c.slept == []  # type: ignore[attr-defined]
    assert info.value.reset_in is not None and info.value.reset_in > 3000
    assert "rate limited" in str(info.value)


def test_a_plain_403_is_not_a_rate_limit(fake: FakeGitHub) -> None:
    fake.fail("/pulls/1", "status", status=403)
    with client(fake) as c, pytest.raises(BadStatus) as info:
        c.get(f"/repos/{REPOSITORY}/pulls/1")
    assert not isinstance(info.value, RateLimited) and info.value.status == 403


def test_timeout_is_unreachable(fake: FakeGitHub) -> None:
    fake.hang_seconds = 2.0
    fake.fail("/pulls/1", "timeout")
    with client(fake, timeout=0.3) as c, pytest.raises(Unreachable) as info:
        c.get(f"/repos/{REPOSITORY}/pulls/1")
    assert "timed out" in str(info.value)


def test_connection_refused_is_unreachable() -> None:
    with (
        Client("http://127.0.0.1:9", token=TOKEN, timeout=2) as c,
        pytest.raises(Unreachable) as info,
    ):
        c.get("/repos/x/y/pulls/1")
    assert TOKEN not in str(info.value)


def test_malformed_body(fake: FakeGitHub) -> None:
    fake.fail("/pulls/1", "malformed")
    with client(fake) as c, pytest.raises(Malformed):
        c.get(f"/repos/{REPOSITORY}/pulls/1").json()


def test_body_over_the_bound_is_refused(fake: FakeGitHub) -> None:
    with client(fake, max_body=100) as c, pytest.raises(Malformed) as info:
        c.get(f"/repos/{REPOSITORY}/pulls/1")
    assert "larger than 100 bytes" in str(info.value)


def test_requests_to_another_origin_are_refused_so_the_token_stays_home(fake: FakeGitHub) -> None:
    with client(fake) as c, pytest.raises(Malformed) as info:
        c.get("https://evil.example/steal")
    assert "not the API's origin" in str(info.value)
    assert fake.requests == []


def test_link_next_parsing() -> None:
    from mergegate.github.http import Response

    r = Response(
        url="u",
        status=200,
        request_id="",
        at="",
        body=b"[]",
        link='<https://api.github.com/x?page=3>; rel="last", <https://api.github.com/x?page=2>; '
        'rel="next"',
    )
    assert r.next_url() == "https://api.github.com/x?page=2"
    assert Response(url="u", status=200, request_id="", at="", body=b"[]").next_url() is None


def test_no_api_url_scheme_is_refused() -> None:
    with pytest.raises(Unreachable):
        Client("file:///etc/passwd")
