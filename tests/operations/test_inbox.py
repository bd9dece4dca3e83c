"""`mergegate inbox`: what waits for an approver, judged as `check` judges it."""

from __future__ import annotations

from tests.helpers.fake_github import FakeGitHub, PullRequest
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml


def gate(world: World) -> None:
    world.setup(
        policy_yaml(
            [
                world.alice.approver_entry(),
                world.bob.approver_entry(),
                world.carol.approver_entry(),
            ],
            [ECHO_RULE],
        )
    )
    world.propose("add-ok", {"jobs/ok.yaml": job_yaml("ok", ["echo", "x"])}, who=world.alice)
    world.propose("add-denied", {"jobs/no.yaml": job_yaml("no", ["rm", "x"])}, who=world.alice)
    world.propose("readme", {"README.md": "docs only\n"}, who=world.alice)
    world.propose("merged", {"jobs/m.yaml": job_yaml("m", ["echo", "m"])}, who=world.alice)
    world.signed_merge("merged", world.bob)
    # GitHub's squash button: approved gets the change as a new commit, the branch stays
    # behind, never an ancestor of approved (a walk-through found it listed forever).
    world.propose("squashed", {"jobs/s.yaml": job_yaml("s", ["echo", "s"])}, who=world.alice)
    world.git("approver", "fetch", "-q", "origin")
    world.git("approver", "checkout", "-q", "-B", "approved", "origin/approved")
    world.git("approver", "merge", "-q", "--squash", "origin/squashed")
    world.git("approver", "commit", "-q", "-m", "Add s (#9)", who=world.bob)
    world.git("approver", "push", "-q", "origin", "approved")


def test_inbox_lists_pending_proposals_with_verdict_and_who_may_approve(world: World) -> None:
    gate(world)
    result = world.mg("inbox", "--json", where="approver")
    assert result.code == 0, result.err
    items = {i["ref"]: i for i in result.json()["proposals"]}
    # no docs-only, merged or squash-merged branch
    assert sorted(items) == ["origin/add-denied", "origin/add-ok"]
    ok = items["origin/add-ok"]
    assert ok["verdict"] == "allowed" and ok["files"][0]["path"] == "jobs/ok.yaml"
    assert "needs 1 approval" in ok["files"][0]["approvals"]
    assert ok["may_approve"] == ["bob", "carol"]  # alice wrote it
    assert items["origin/add-denied"]["verdict"] == "denied"
    human = world.mg("inbox", where="approver").out
    assert "may approve: bob, carol" in human and "mergegate approve origin/add-ok --merge" in human
    # The verdict is check's, by construction: the same function.
    check = world.mg("check", "origin/add-ok", "--json", where="approver").json()
    assert check["files"] == ok["files"]


def test_inbox_with_a_token_names_open_pull_requests(world: World) -> None:
    gate(world)
    with FakeGitHub() as github:
        github.add_pull(
            PullRequest(
                number=7,
                author=2,
                head_sha="",
                merge_commit_sha="",
                merged=False,
                head_ref="add-ok",
            )
        )
        github.add_pull(
            PullRequest(
                number=8, author=2, head_sha="", merge_commit_sha="", merged=True, head_ref="merged"
            )
        )
        result = world.mg("inbox", "--json", where="approver", env=github.env())
        assert result.code == 0, result.err
        items = {i["ref"]: i for i in result.json()["proposals"]}
        assert items["origin/add-ok"]["pull"] == 7
        assert items["origin/add-denied"]["pull"] is None
        assert any(path.startswith("/repos/acme/gate/pulls") for path in github.paths())


def test_inbox_with_github_down_still_lists_branches_and_warns(world: World) -> None:
    gate(world)
    with FakeGitHub() as github:
        github.fail("/pulls", "status", status=503, times=10)
        result = world.mg("inbox", "--json", where="approver", env=github.env())
    assert result.code == 0, result.err
    assert "open pull requests not listed" in result.err and "hint" not in result.err
    assert len(result.json()["proposals"]) == 2
    # An answer a person can do something about says what (as a private CA's names
    # SSL_CERT_FILE).
    with FakeGitHub() as github:
        github.fail("/pulls", "status", status=401, times=10)
        result = world.mg("inbox", "--json", where="approver", env=github.env())
    assert result.code == 0, result.err
    assert "hint: GITHUB_TOKEN (or GH_TOKEN) is missing, expired or wrong" in result.err


def test_empty_inbox(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    result = world.mg("inbox", where="approver")
    assert (
        result.code == 0
        and result.out.strip()
        == "inbox empty: no branch changes a job or policy file relative to approved"
    )
