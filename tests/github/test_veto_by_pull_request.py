"""A veto on a gate whose branch protection admits nothing but pull requests (issue 23, item 7).

`mergegate veto` pushes a signed, empty commit onto approved; where only pull requests may
change approved, the same commit goes in through a reviewed pull request merged with a merge
commit. The signed veto commit is then a second parent's ancestor, not on the first-parent
line: it is honoured all the same.
"""

from __future__ import annotations

from typing import Any

from tests.helpers.fake_github import PullRequest
from tests.helpers.github_world import ALICE, BOB, CAROL, GithubGate


def _veto_pull(gate: GithubGate, path: str, *, sign: bool = True) -> PullRequest:
    """carol's signed veto commit on a branch, opened as a pull request (not merged yet)."""
    w = gate.world
    w.git("proposer", "fetch", "-q", "origin")
    w.git("proposer", "checkout", "-q", "-B", "veto", "origin/approved")
    blob = w.git("proposer", "rev-parse", f"origin/approved:{path}")
    w.git(
        "proposer",
        "commit",
        "-q",
        "--allow-empty",
        *(["-S"] if sign else []),
        "-m",
        "Veto backup",
        "-m",
        f"Mergegate-Veto: {path} {blob}",
        who=w.carol,
        sign=w.carol.key if sign else None,
    )
    head = w.git("proposer", "rev-parse", "HEAD")
    gate.numbers += 1
    w.git("proposer", "push", "-q", "origin", "veto", f"{head}:refs/pull/{gate.numbers}/head")
    pr = PullRequest(
        number=gate.numbers,
        author=CAROL,
        head_sha=head,
        merge_commit_sha="",
        merged=False,
        head_ref="veto",
        commits=[gate._commit(head, CAROL)],
    )
    return gate.fake.add_pull(pr)


def _run(gate: GithubGate) -> dict[str, Any]:
    result = gate.run_once()
    assert result.code in (0, 1), result.err
    return result.json()  # type: ignore[no-any-return]


def test_a_signed_veto_merged_through_a_reviewed_pull_request_stops_the_job(
    gate: GithubGate,
) -> None:
    gate.setup()
    backup = gate.open_pr("backup")
    gate.fake.review(backup.number, ALICE, "APPROVED", backup.head_sha)
    gate.merge(backup)
    veto = _veto_pull(gate, "jobs/backup.yaml")
    gate.fake.review(veto.number, BOB, "APPROVED", veto.head_sha)
    gate.merge(veto)  # "Create a merge commit": the signed veto commit is the merge's 2nd parent
    out = _run(gate)
    assert gate.world.events("started") == [], out
    [job] = out["jobs"]
    assert job["status"] == "vetoed" and job["reason"].startswith("vetoed by carol in commit ")


def test_an_unsigned_veto_merged_through_a_pull_request_is_no_veto(gate: GithubGate) -> None:
    gate.setup()
    backup = gate.open_pr("backup")
    gate.fake.review(backup.number, ALICE, "APPROVED", backup.head_sha)
    gate.merge(backup)
    veto = _veto_pull(gate, "jobs/backup.yaml", sign=False)
    gate.fake.review(veto.number, BOB, "APPROVED", veto.head_sha)
    gate.merge(veto)
    out = _run(gate)
    assert [(j["job"], j["status"]) for j in out["jobs"]] == [("backup", "succeeded")]


def test_a_veto_squashed_by_github_stops_nothing_and_the_pass_says_so(gate: GithubGate) -> None:
    """A squash (or rebase) merge re-creates the veto commit without the approver's signature:
    no veto, and the pass that walks it says so, naming the way that works."""
    from tests.helpers.github_world import GITHUB

    w = gate.world
    gate.setup()
    backup = gate.open_pr("backup")
    gate.fake.review(backup.number, ALICE, "APPROVED", backup.head_sha)
    gate.merge(backup)
    veto = _veto_pull(gate, "jobs/backup.yaml")
    w.git("approver", "fetch", "-q", "origin")
    w.git("approver", "checkout", "-q", "-B", "approved", "origin/approved")
    blob = w.git("approver", "rev-parse", "origin/approved:jobs/backup.yaml")
    message = f"Veto backup (#{veto.number})\n\nMergegate-Veto: jobs/backup.yaml {blob}"
    w.git("approver", "commit", "-q", "--allow-empty", "-m", message, who=w.carol, env=GITHUB)
    w.git("approver", "push", "-q", "origin", "approved")
    veto.merged, veto.merge_commit_sha = True, w.git("approver", "rev-parse", "HEAD")
    result = gate.run_once()
    assert result.code in (0, 1), result.err
    assert [(j["job"], j["status"]) for j in result.json()["jobs"]] == [("backup", "succeeded")]
    assert "veto ignored: unsigned" in result.err, result.err
    assert "merge it with a merge commit, not squash or rebase" in result.err
