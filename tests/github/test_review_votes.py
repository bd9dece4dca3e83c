"""GitHub review evidence → votes, against the loopback API and real merge/squash/rebase commits."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from mergegate.errors import IntegrityError, NotYet
from mergegate.git.repo import Repo
from mergegate.github import gather as github
from mergegate.github.evidence import Evidence
from mergegate.rules.policy import load_policy
from tests.helpers.fake_github import PullRequest
from tests.helpers.github_world import ALICE, BOB, CAROL, DAVE, GithubGate
from tests.helpers.keys import make_ssh_key


def outcome(gate: GithubGate, sha: str, **kw: object) -> github.ReviewOutcome:
    w = gate.world
    w.git("runner", "fetch", "-q", "origin")
    repo = Repo(w.clone("runner"))
    parent = repo.commit(sha).parents[0]
    policy = load_policy(lambda p: repo.read_file(parent, p), commit=parent)
    settings = github.Settings(gate.fake.url, "acme/gate", "ghs_token_xyz")
    return github.review(
        repo,
        policy,
        sha,
        now=datetime.now(UTC),
        settings=settings,
        remote="origin",
        client=settings.client(max_wait=5, sleep=lambda s: None),
        **kw,
    )  # type: ignore[arg-type]


def test_approver_review_on_the_merged_head_counts(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    sha = gate.merge(pr)
    verdict = outcome(gate, sha).verdict
    assert verdict.refused == "" and verdict.method == "merge"
    assert verdict.counted == ("alice",)
    assert verdict.votes[0].via == f"review 1 on PR #{pr.number}"


def test_review_on_an_older_head_does_not_count(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    gate.push_more(pr, {"jobs/backup.yaml": "id: backup\ncommand: [echo, changed]\n"})
    verdict = outcome(gate, gate.merge(pr)).verdict
    assert verdict.counted == ()
    assert "not the merged head" in verdict.votes[0].why


def test_review_repointed_after_a_force_push_does_not_count(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha, minutes_ago=-0.1)
    gate.push_more(pr, {"jobs/backup.yaml": "id: backup\ncommand: [echo, sneaky]\n"}, force=True)
    assert pr.reviews[0].commit_id == pr.head_sha  # GitHub re-pointed it
    verdict = outcome(gate, gate.merge(pr)).verdict
    assert verdict.counted == ()
    assert "submitted before the pull request last changed" in verdict.votes[0].why
    assert verdict.votes[0].why.endswith(
        f"at {pr.force_pushes[0]})"
    )  # the force-push, not the commit date


def test_dismissed_latest_review_counts_as_nothing(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha, minutes_ago=-0.1)
    gate.fake.review(pr.number, ALICE, "DISMISSED", pr.head_sha, minutes_ago=-0.2)
    gate.fake.review(pr.number, ALICE, "COMMENTED", pr.head_sha, minutes_ago=-0.3)  # never decides
    verdict = outcome(gate, gate.merge(pr)).verdict
    assert verdict.counted == ()
    assert [v.why for v in verdict.votes] == ["dismissed"]


def test_changes_requested_by_an_approver_blocks(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    gate.fake.review(pr.number, BOB, "CHANGES_REQUESTED", pr.head_sha)
    verdict = outcome(gate, gate.merge(pr)).verdict
    assert verdict.refused.startswith("changes requested by bob (review 2 on PR #1)")


def test_pr_authors_own_review_does_not_count(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup", author=ALICE)
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    verdict = outcome(gate, gate.merge(pr)).verdict
    assert verdict.counted == ()
    assert verdict.votes[0].why == "author of PR #1"


def test_reviewer_who_authored_a_commit_of_the_pr_does_not_count(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.push_more(pr, {"jobs/backup.yaml": "id: backup\ncommand: [echo, bobs]\n"}, uid=BOB)
    gate.fake.review(pr.number, BOB, "APPROVED", pr.head_sha, minutes_ago=-1)
    verdict = outcome(gate, gate.merge(pr)).verdict
    assert verdict.counted == ()
    assert verdict.votes[0].why.startswith("author of commit")


def test_bot_review_does_not_count(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha, kind="Bot")
    verdict = outcome(gate, gate.merge(pr)).verdict
    assert verdict.counted == () and "a Bot account, not a person" in verdict.votes[0].why


def test_unmapped_commit_author_fails_closed(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup", commit_author=None)
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    verdict = outcome(gate, gate.merge(pr)).verdict
    assert "is no GitHub account" in verdict.refused and "allow_unmapped_authors" in verdict.refused


def test_two_reviewers_and_one_person_with_two_accounts(gate: GithubGate) -> None:
    w = gate.world
    gate.setup(
        required=2,
        approvers=[w.alice.approver_entry(github=[ALICE, 555]), w.bob.approver_entry(github=BOB)],
    )
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    gate.fake.review(pr.number, 555, "APPROVED", pr.head_sha)
    gate.fake.review(pr.number, BOB, "APPROVED", pr.head_sha)
    verdict = outcome(gate, gate.merge(pr)).verdict
    assert verdict.counted == ("alice", "bob")
    assert (
        sum(1 for v in verdict.votes if v.person == "alice" and v.counted) == 2
    )  # two accounts, one person


def _three_pages_of_reviews(gate: GithubGate) -> tuple[PullRequest, github.ReviewOutcome]:
    """A PR with 230 comments and carol's approval (three pages of 100), merged and judged."""
    gate.setup()
    pr = gate.open_pr("backup")
    for i in range(230):
        gate.fake.review(pr.number, 10_000 + i, "COMMENTED", pr.head_sha, minutes_ago=20)
    gate.fake.review(pr.number, CAROL, "APPROVED", pr.head_sha)
    return pr, outcome(gate, gate.merge(pr))


def test_reviews_over_three_pages(gate: GithubGate) -> None:
    _, result = _three_pages_of_reviews(gate)
    assert result.verdict.counted == ("carol",)
    pages = [p for p in gate.fake.paths() if "/reviews" in p]
    assert len(pages) == 3 and "page=3" in pages[-1]


def test_broken_pagination_is_not_yet(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    sha = gate.merge(pr)
    gate.fake.fail("/reviews", "bad-next", times=10)
    with pytest.raises(NotYet, match=r"waiting for evidence: .*pagination loops"):
        outcome(gate, sha)


def test_a_next_link_to_another_host_is_refused(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    sha = gate.merge(pr)
    gate.fake.fail("/reviews", "foreign-next")
    with pytest.raises(NotYet, match="not the API's origin"):
        outcome(gate, sha)


@pytest.mark.parametrize(
    ("kind", "options", "match"),
    [
        ("status", {"status": 500, "times": 2}, "HTTP 500"),
        ("rate", {"status": 403, "reset_in": 3600}, "rate limited"),
        ("malformed", {}, "not JSON"),
    ],
)
def test_faults_are_not_yet(
    gate: GithubGate, kind: str, options: dict[str, object], match: str
) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    sha = gate.merge(pr)
    gate.fake.fail("/pulls/1", kind, **options)
    with pytest.raises(NotYet, match=match):
        outcome(gate, sha)


def test_empty_pr_lookup_right_after_a_merge_waits(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    sha = gate.merge(pr)
    gate.fake.fail("/pulls", "empty")
    with pytest.raises(NotYet, match="no merged pull request"):
        outcome(gate, sha)


def test_squash_merge_is_accepted(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    verdict = outcome(gate, gate.merge(pr, method="squash")).verdict
    assert verdict.method == "squash" and verdict.refused == "" and verdict.counted == ("alice",)


def test_rebase_merge_is_refused(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    verdict = outcome(gate, gate.merge(pr, method="rebase")).verdict
    assert verdict.method == "rebase" and "rebase merges approve nothing" in verdict.refused


def test_merge_keys_set_and_the_merge_unsigned(gate: GithubGate, tmp_path: Path) -> None:
    key = make_ssh_key(tmp_path / "gh", "github-web-flow")
    gate.setup(github={"merge_keys": [key.public_line]})
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    verdict = outcome(gate, gate.merge(pr)).verdict
    assert "github.merge_keys is set" in verdict.refused and "unsigned" in verdict.refused


def test_merge_keys_set_and_the_merge_signed(gate: GithubGate, tmp_path: Path) -> None:
    key = make_ssh_key(tmp_path / "gh", "github-web-flow")
    gate.setup(github={"merge_keys": [key.public_line]})
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    verdict = outcome(gate, gate.merge(pr, sign=key)).verdict
    assert verdict.refused == "" and verdict.counted == ("alice",)


def test_stored_evidence_rejudges_offline_and_tampering_is_detected(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    sha = gate.merge(pr)
    first = outcome(gate, sha)
    data = first.evidence.to_bytes()
    stored = Evidence.from_bytes(data, name=first.evidence.sha256)
    requests = len(gate.fake.requests)
    again = outcome(gate, sha, stored=stored)
    assert again.verdict == first.verdict and len(gate.fake.requests) == requests  # nothing asked
    with pytest.raises(IntegrityError, match="not named by its SHA-256"):
        Evidence.from_bytes(data.replace(b'"pull":1', b'"pull":2'), name=first.evidence.sha256)
    forged = data.replace(b"APPROVED", b"COMMENTED")
    assert forged != data
    import hashlib

    with pytest.raises(IntegrityError, match="does not match its SHA-256"):
        Evidence.from_bytes(forged, name=hashlib.sha256(forged).hexdigest())


def test_token_never_in_evidence(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    result = outcome(gate, gate.merge(pr))
    assert b"ghs_token_xyz" not in result.evidence.to_bytes()
    assert gate.fake.requests[0][2]["authorization"] == "Bearer ghs_token_xyz"
    assert "ghs_token_xyz" not in repr(github.Settings("u", "a/b", "ghs_token_xyz"))


def test_settings_from_env() -> None:
    assert github.Settings.from_env({}) is None
    s = github.Settings.from_env({"GITHUB_REPOSITORY": "acme/gate", "GH_TOKEN": "t"})
    assert s is not None and s.api_url == "https://api.github.com" and s.token == "t"
    with pytest.raises(Exception, match="not owner/name"):
        github.Settings.from_env({"GITHUB_REPOSITORY": "nope"})


_ = DAVE


def _policy(text: str) -> object:
    return load_policy(
        lambda p: text.encode() if p == "policy/policy.yaml" else None, commit="0" * 40
    )


def test_policy_github_ids_and_merge_keys(tmp_path: Path) -> None:
    key = make_ssh_key(tmp_path, "gh")
    policy = _policy(
        "version: 1\napprovers:\n  - name: alice\n    github: 101\n  - name: bob\n    github: "
        "[102, 103]\n"
        f"github:\n  merge_keys: ['{key.public_line}']\n  allow_unmapped_authors: true\n"
        f"runners:\n  - name: gha\n    key: '{key.public_line}'\n"
    )
    assert policy.github_person(103).name == "bob" and policy.github_person(101).name == "alice"  # type: ignore[attr-defined]
    assert policy.github_person(999) is None  # type: ignore[attr-defined]
    assert policy.github.allow_unmapped_authors and len(policy.github.merge_keys) == 1  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("version: 1\ngithub:\n  merge_key: []\n", "merge_key"),
        ("version: 1\napprovers:\n  - name: alice\n    github: alice\n", "github"),
        (
            "version: 1\napprovers:\n  - name: a\n    github: 7\n  - name: b\n    github: 7\n",
            "GitHub id 7 belongs to both 'a' and 'b'",
        ),
        ("version: 1\napprovers:\n  - name: a\n", "name"),
    ],
)
def test_policy_github_bad_input_is_a_config_error(text: str, message: str) -> None:
    from mergegate.errors import ConfigError

    with pytest.raises(ConfigError, match=message) as info:
        _policy(text)
    assert info.value.file == "policy/policy.yaml" and info.value.line is not None


def test_stored_evidence_keeps_each_pages_link_and_a_left_out_page_is_malformed(
    gate: GithubGate,
) -> None:
    """verify re-reads listings from the evidence: a page its predecessor's Link names must be
    there."""
    from dataclasses import replace

    from mergegate.github.http import Malformed

    pr, judged = _three_pages_of_reviews(gate)
    evidence = judged.evidence
    suffix = f"/pulls/{pr.number}/reviews"
    pages = [e for e in evidence.exchanges if e.url.split("?")[0].endswith(suffix)]
    assert len(pages) == 3 and 'rel="next"' in pages[0].link and 'rel="next"' not in pages[2].link
    again = Evidence.from_bytes(evidence.to_bytes(), name=evidence.sha256)
    assert again == evidence and len(again.pages(suffix)) == 231
    without_middle = replace(
        evidence, exchanges=tuple(e for e in evidence.exchanges if e is not pages[1])
    )
    with pytest.raises(Malformed, match="stops before"):
        without_middle.pages(suffix)
    # An answer without a Link header is stored as before (its evidence file keeps its name).
    assert (
        '"link"'
        not in replace(evidence, exchanges=tuple(replace(e, link="") for e in evidence.exchanges))
        .to_bytes()
        .decode()
    )
