"""GitHub review approvals through the real runner and verify: jobs run, wait, or stay refused.

Real repositories (the "GitHub merge" is a real merge or squash commit), the real CLI,
and the loopback API pointed to by GITHUB_API_URL.
"""

from __future__ import annotations

import json
import subprocess
from typing import Any

from tests.helpers.fake_github import PullRequest
from tests.helpers.github_world import ALICE, BOB, CAROL, DAVE, GithubGate
from tests.helpers.repos import job_yaml


def run(gate: GithubGate, **env: str) -> dict[str, Any]:
    result = gate.run_once(env=env)
    assert result.code in (0, 1), result.err
    assert "ghs_test_token" not in result.out + result.err
    return result.json()  # type: ignore[no-any-return]


def started(gate: GithubGate) -> list[dict[str, Any]]:
    return gate.world.events("started")


def test_approver_review_on_the_merged_head_runs_the_job_with_evidence(gate: GithubGate) -> None:
    gate.setup()
    gate.reviewed_merge("backup", ALICE)
    out = run(gate)
    assert [(j["job"], j["status"]) for j in out["jobs"]] == [("backup", "succeeded")]
    [record] = started(gate)
    assert record["approvers"] == ["alice"] and record["votes"] == ["alice (review 1 on PR #1)"]
    [digest] = record["evidence"]
    text = gate.world.git("admin", "show", f"origin/mergegate/audit:audit/evidence/{digest}.json")
    doc = json.loads(text)
    assert doc["pull"] == 1 and doc["commit"] == record["commit"] and "ghs_test_token" not in text
    assert all(
        e["request_id"].startswith("FAKE:") and len(e["sha256"]) == 64 for e in doc["exchanges"]
    )


def test_review_on_an_older_head_does_not_run(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    gate.push_more(pr, {"jobs/backup.yaml": job_yaml("backup", ["echo", "changed"])})
    gate.merge(pr)
    out = run(gate)
    assert started(gate) == []
    [job] = out["jobs"]
    assert job["status"] == "rejected" and "not the merged head" in job["reason"]


def test_the_api_unreachable_nothing_runs_the_job_waits_with_the_reason(gate: GithubGate) -> None:
    gate.setup()
    gate.reviewed_merge("backup", ALICE)
    result = gate.run_once(env={"GITHUB_API_URL": "http://127.0.0.1:9"})
    assert result.code == 1
    out = result.json()
    assert out["jobs"] == [] and started(gate) == []
    assert out["waiting"]["reason"].startswith("waiting for evidence: GET http://127.0.0.1:9/")
    human = gate.world.mg(
        "run",
        "--once",
        *gate.runner_args,
        env={**gate.fake.env(), "GITHUB_API_URL": "http://127.0.0.1:9"},
    )
    assert "waiting" in human.out and "judged again on the next pass" in human.out
    # The API is back: the next pass judges the same commit again and runs the job.
    out = run(gate)
    assert [(j["job"], j["status"]) for j in out["jobs"]] == [("backup", "succeeded")] and out[
        "waiting"
    ] is None


def test_500_then_success_on_the_next_pass(gate: GithubGate) -> None:
    gate.setup()
    gate.reviewed_merge("backup", ALICE)
    gate.fake.fail("/pulls/1", "status", status=500, times=1)
    out = run(gate)
    assert out["jobs"] == [] and "HTTP 500" in out["waiting"]["reason"]
    assert started(gate) == []
    out = run(gate)
    assert [j["status"] for j in out["jobs"]] == ["succeeded"]


def test_a_403_rate_limit_with_a_near_reset_is_waited_out(gate: GithubGate) -> None:
    gate.setup()
    gate.reviewed_merge("backup", ALICE)
    gate.fake.fail("/reviews", "rate", status=403, reset_in=1)
    out = run(gate)
    assert [j["status"] for j in out["jobs"]] == ["succeeded"], out
    assert (
        len([p for p in gate.fake.paths() if "/reviews" in p]) == 2
    )  # limited, waited, asked again


def test_a_403_rate_limit_with_a_far_reset_waits_for_the_next_pass(gate: GithubGate) -> None:
    gate.setup()
    gate.reviewed_merge("backup", ALICE)
    gate.fake.fail("/reviews", "rate", status=403, reset_in=3600)
    out = run(gate)
    assert out["jobs"] == [] and "rate limited" in out["waiting"]["reason"]


def test_squash_merge_runs(gate: GithubGate) -> None:
    gate.setup()
    gate.reviewed_merge("backup", BOB, method="squash")
    out = run(gate)
    assert [(j["job"], j["status"]) for j in out["jobs"]] == [("backup", "succeeded")]


def test_rebase_merge_is_refused_with_the_reason(gate: GithubGate) -> None:
    gate.setup()
    gate.reviewed_merge("backup", BOB, method="rebase")
    out = run(gate)
    [job] = out["jobs"]
    assert job["status"] == "rejected" and "rebase merges approve nothing" in job["reason"]
    assert started(gate) == []


def test_merge_keys_set_and_the_merge_unsigned_does_not_run(
    gate: GithubGate, tmp_path: Any
) -> None:
    from tests.helpers.keys import make_ssh_key

    key = make_ssh_key(tmp_path / "web-flow", "github")
    gate.setup(github={"merge_keys": [key.public_line]})
    gate.reviewed_merge("backup", BOB)
    out = run(gate)
    assert (
        out["jobs"][0]["status"] == "rejected"
        and "github.merge_keys is set" in out["jobs"][0]["reason"]
    )
    pr2 = gate.open_pr("second")
    gate.fake.review(pr2.number, BOB, "APPROVED", pr2.head_sha)
    gate.merge(pr2, sign=key)
    out = run(gate)
    assert [(j["job"], j["status"]) for j in out["jobs"]] == [("second", "succeeded")]


def test_review_and_signature_votes_fill_one_two_person_quorum(gate: GithubGate) -> None:
    w = gate.world
    gate.setup(required=2)
    pr = gate.open_pr("backup")
    blob = w.blob("backup", "jobs/backup.yaml")
    w.approval_commit(
        "backup", [("jobs/backup.yaml", blob)], who=w.carol, sign=w.carol.key
    )  # carol signs
    head = w.git("reviewer", "rev-parse", "HEAD")
    pr.head_sha = head
    pr.commits.append(gate._commit(head, CAROL))
    w.git("reviewer", "push", "-q", "-f", "origin", f"{head}:refs/pull/{pr.number}/head")
    gate.fake.review(pr.number, BOB, "APPROVED", head)  # bob reviews
    gate.merge(pr)
    out = run(gate)
    assert [(j["job"], j["status"]) for j in out["jobs"]] == [("backup", "succeeded")]
    assert started(gate)[0]["approvers"] == ["bob", "carol"]


def test_one_person_counts_once_across_key_and_review(gate: GithubGate) -> None:
    w = gate.world
    gate.setup(required=2)
    pr = gate.open_pr("backup")
    blob = w.blob("backup", "jobs/backup.yaml")
    w.approval_commit("backup", [("jobs/backup.yaml", blob)], who=w.bob, sign=w.bob.key)
    head = w.git("reviewer", "rev-parse", "HEAD")
    pr.head_sha = head
    pr.commits.append(gate._commit(head, BOB))
    w.git("reviewer", "push", "-q", "-f", "origin", f"{head}:refs/pull/{pr.number}/head")
    gate.fake.review(pr.number, BOB, "APPROVED", head)
    gate.merge(pr)
    out = run(gate)
    assert out["jobs"][0]["status"] == "rejected" and "1 of 2 approvals" in out["jobs"][0]["reason"]


def test_policy_change_by_reviews_needs_distinct_eligible_reviewers(gate: GithubGate) -> None:
    w = gate.world
    gate.setup(policy_approvals_required=2)
    policy = w.git("admin", "show", "origin/approved:policy/policy.yaml").replace(
        "approvals_required: 1", "approvals_required: 1\nkeep_output: true"
    )
    pr = gate.open_pr("policy", {"policy/policy.yaml": policy}, author=CAROL)
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    gate.fake.review(pr.number, CAROL, "APPROVED", pr.head_sha)  # the author: does not count
    gate.merge(pr)
    out = run(gate)
    [(_commit, status, reason)] = [
        (c["commit"], c["status"], c["reason"]) for c in out["policy_changes"]
    ]
    assert status == "rejected" and "1 of 2 approvals" in reason
    pr2 = gate.open_pr("policy2", {"policy/policy.yaml": policy + "\n"}, author=CAROL)
    gate.fake.review(pr2.number, ALICE, "APPROVED", pr2.head_sha)
    gate.fake.review(pr2.number, BOB, "APPROVED", pr2.head_sha)
    gate.merge(pr2)
    out = run(gate)
    assert [c["status"] for c in out["policy_changes"]] == ["adopted"]
    [record] = [r for r in w.events("policy") if r["status"] == "adopted"]
    assert record["evidence"]


def test_verify_offline_from_a_fresh_clone_rejudges_and_flags_tampered_evidence(
    gate: GithubGate, tmp_path: Any
) -> None:
    w = gate.world
    gate.setup()
    gate.reviewed_merge("backup", ALICE)
    run(gate)
    fresh = "fresh"
    w.clone(fresh)  # a fresh clone, after the runner pushed
    env = {
        "GITHUB_API_URL": "http://127.0.0.1:9",
        "GITHUB_REPOSITORY": "acme/gate",
    }  # offline: nothing to ask
    result = w.mg("verify", "--json", where=fresh, env=env)
    assert result.code == 0, result.out + result.err
    assert any("reviews on PR #1" in c["summary"] for c in result.json()["commits"])
    # Tamper: rewrite the stored answer so the review looks like someone else's.
    [record] = started(gate)
    digest = record["evidence"][0]
    work = w.checkout_audit("mallory")
    path = work / f"audit/evidence/{digest}.json"
    text = path.read_text()
    assert '\\"id\\": 101' in text
    path.write_text(text.replace('\\"id\\": 101', '\\"id\\": 102'))
    w.commit_audit("mallory", "edit evidence")
    result = w.mg("verify", "--json", where=fresh, env=env)
    assert result.code == 3
    assert f"evidence file audit/evidence/{digest}.json" in result.out


OFFLINE = {"GITHUB_API_URL": "http://127.0.0.1:9", "GITHUB_REPOSITORY": "acme/gate"}


def test_verify_rejudges_a_reviewed_merge_of_other_files_from_stored_evidence(
    gate: GithubGate,
) -> None:
    w = gate.world
    gate.setup()
    readme = gate.open_pr("readme", {"README.md": "how to use this gate\n"})
    gate.fake.review(readme.number, ALICE, "APPROVED", readme.head_sha)
    readme_merge = gate.merge(readme)
    assert run(gate)["jobs"] == []  # a pass that walks only the README merge
    [scanned] = w.events("scanned")
    assert list(scanned["reviewed"]) == [
        readme_merge
    ]  # its evidence goes with the records all the same
    # A pass finds it too (one grep of the log for the records that name evidence, `reviewed` maps
    # included).
    from mergegate.git.repo import Repo
    from mergegate.github import gather as github

    runner = Repo(w.clone("runner"))
    assert readme_merge in github.stored_evidence(
        runner, runner.rev("refs/remotes/origin/mergegate/audit")
    )
    runner.close()
    gate.reviewed_merge("backup", ALICE)
    assert [j["status"] for j in run(gate)["jobs"]] == ["succeeded"]
    w.clone("fresh")
    result = w.mg("verify", "--json", where="fresh", env=OFFLINE)
    assert result.code == 0, result.out + result.err
    assert result.json()["incomplete"] is None


def test_verify_is_incomplete_not_ok_while_the_runner_waits_for_evidence(gate: GithubGate) -> None:
    w = gate.world
    gate.setup()
    gate.reviewed_merge("backup", ALICE)
    run(gate)
    second = gate.open_pr("cleanup")
    gate.fake.review(second.number, ALICE, "APPROVED", second.head_sha)
    waiting = gate.merge(second)
    assert gate.run_once(env={"GITHUB_API_URL": "http://127.0.0.1:9"}).code == 1  # the API is down
    w.clone("fresh")
    result = w.mg("verify", "--json", where="fresh", env=OFFLINE)
    assert result.code == 1, result.out + result.err
    out = result.json()
    assert out["ok"] is False and out["violations"] == []
    assert out["incomplete"] == {
        "commit": waiting,
        "reason": f"waiting for evidence: no stored GitHub evidence for {waiting[:7]}",
        "unverified_commits": 1,
    }
    human = w.mg("verify", where="fresh", env=OFFLINE)
    assert human.code == 1 and f"incomplete: stopped at {waiting[:12]}" in human.err
    assert "ok:" not in human.out


def test_verify_fetches_a_squashed_prs_head_and_without_a_fetch_says_incomplete(
    gate: GithubGate,
) -> None:
    w = gate.world
    gate.setup()
    pr = gate.reviewed_merge("backup", BOB, method="squash")
    assert [j["status"] for j in run(gate)["jobs"]] == ["succeeded"]
    w.git(
        "admin", "push", "-q", "origin", ":backup"
    )  # GitHub deletes the head branch after the merge
    # Over file:// (a local-path clone would copy every object, the PR head too), as from GitHub.
    subprocess.run(
        ["git", "clone", "-q", f"file://{w.remote}", str(w.tmp / "fresh")],
        check=True,
        capture_output=True,
    )
    w._clones["fresh"] = w.tmp / "fresh"
    assert (
        w.git("fresh", "rev-parse", "--verify", "--quiet", f"{pr.head_sha}^{{commit}}", check=False)
        == ""
    )  # not in the clone
    offline = w.mg("verify", "--no-fetch", where="fresh", env=OFFLINE)
    assert offline.code == 1, offline.out + offline.err
    assert (
        f"the head {pr.head_sha[:7]} of PR #1 is not in this clone" in offline.err
        and "violation" not in offline.err
    )
    result = w.mg("verify", where="fresh", env=OFFLINE)
    assert result.code == 0, result.out + result.err


def test_status_says_waiting_and_show_judges_reviews_as_the_runner_did(gate: GithubGate) -> None:
    w = gate.world
    gate.setup()
    gate.reviewed_merge("backup", ALICE)
    run(gate)
    shown = w.mg("show", "backup", "--json", where="runner")
    assert shown.code == 0, shown.err
    [revision] = shown.json()["revisions"]
    assert revision["approved"] is True, (
        revision
    )  # the review, as the runner judged it; not "unsigned"
    gate.reviewed_merge("cleanup", ALICE)
    assert gate.run_once(env={"GITHUB_API_URL": "http://127.0.0.1:9"}).code == 1  # the API is down
    status = w.mg("status", "--json", where="runner")
    jobs = {j["job"]: j for j in status.json()["jobs"]}
    assert jobs["backup"]["state"] == "succeeded"
    assert (
        jobs["cleanup"]["state"] == "waiting"
        and "waiting for evidence" in jobs["cleanup"]["reason"]
    )
    assert "judges it once" in w.mg("show", "cleanup", where="runner").out


def test_a_merged_unapproved_file_is_reported_loudly_and_removing_it_clears_the_gate(
    gate: GithubGate,
) -> None:
    w = gate.world
    gate.setup()
    readme = gate.open_pr("readme", {"README.md": "how to use this gate\n"})
    gate.fake.review(
        readme.number, 300, "APPROVED", readme.head_sha
    )  # a reviewer with write access, not in the policy
    gate.merge(readme)
    result = gate.run_once()
    assert (
        result.code == 0
        and "warning: not approved: README.md" in result.err
        and "removed" in result.err
    )
    gate.reviewed_merge("backup", ALICE)
    [job] = run(gate)["jobs"]
    assert (
        job["status"] == "rejected"
        and "put them back to their last approved version (or remove them)" in job["reason"]
    )
    # Doing what it says: a change that removes the file (it had no approved version), merged as any
    # PR.
    w.git("proposer", "fetch", "-q", "origin")
    w.git("proposer", "checkout", "-q", "-B", "unreadme", "origin/approved")
    w.git("proposer", "rm", "-q", "README.md")
    w.git("proposer", "commit", "-q", "-m", "remove the unreviewed README", who=w.mallory)
    head = w.git("proposer", "rev-parse", "HEAD")
    w.git(
        "proposer", "push", "-q", "origin", "unreadme", f"{head}:refs/pull/{gate.numbers + 1}/head"
    )
    gate.numbers += 1
    removal = gate.fake.add_pull(
        PullRequest(
            number=gate.numbers,
            author=DAVE,
            head_sha=head,
            merge_commit_sha="",
            merged=False,
            head_ref="unreadme",
            commits=[gate._commit(head, DAVE)],
        )
    )
    gate.fake.review(removal.number, 300, "APPROVED", head)
    gate.merge(removal)
    run(gate)
    gate.reviewed_merge("cleanup", ALICE)
    assert [(j["job"], j["status"]) for j in run(gate)["jobs"]] == [("cleanup", "succeeded")]


def test_a_pass_that_runs_a_job_then_waits_names_the_last_commit_it_judged(
    gate: GithubGate,
) -> None:
    """The audit commit's Mergegate-Approved is the last commit judged, never past the one whose
    evidence is missing."""
    w = gate.world
    gate.setup()
    first = gate.reviewed_merge("backup", ALICE)
    gate.fake.fail(
        "/pulls/2", "status", status=500, times=1000
    )  # the second PR's evidence stays missing
    gate.reviewed_merge("cleanup", ALICE)
    result = gate.run_once()
    assert result.code == 1, result.err  # waiting
    out = result.json()
    assert [(j["job"], j["status"]) for j in out["jobs"]] == [("backup", "succeeded")]
    assert "HTTP 500" in out["waiting"]["reason"]
    w.git("admin", "fetch", "-q", "origin")
    judged = w.git(
        "admin",
        "log",
        "-1",
        "--format=%(trailers:key=Mergegate-Approved,valueonly)",
        "origin/mergegate/audit",
    ).strip()
    assert judged == first.merge_commit_sha
    # A fresh clone checks that commit (its trailer's policy is derivable) and waits at the same
    # commit.
    w.clone("fresh")
    result = w.mg("verify", "--json", where="fresh", env=OFFLINE)
    assert result.code == 1, result.out + result.err
    assert result.json()["violations"] == []


def test_a_runner_without_its_key_asks_github_nothing(gate: GithubGate) -> None:
    """A policy with runners needs signed audit commits: a keyless runner refuses before any API
    call."""
    gate.setup()
    gate.reviewed_merge("backup", ALICE)
    before = len(gate.fake.requests)
    result = gate.world.run_once("--runner-name", "ci", env=gate.fake.env())
    assert result.code == 2 and "lists runners, so audit commits must be signed" in result.err
    assert gate.fake.requests[before:] == [] and started(gate) == []


def test_plan_says_it_stopped_at_a_merge_whose_evidence_is_missing(gate: GithubGate) -> None:
    """An API outage is not an empty plan: the fan-out's plan step says why nothing is listed."""
    gate.setup()
    gate.reviewed_merge("backup", ALICE)
    shown = gate.world.mg(
        "plan",
        "--github",
        env={
            **gate.fake.env(),
            "GITHUB_API_URL": "http://127.0.0.1:9",
            "GITHUB_OUTPUT": str(gate.world.tmp / "out"),
        },
        where="runner",
    )
    assert shown.code == 0, shown.err
    assert (
        "jobs from there on are not planned yet" in shown.err
        and "waiting for evidence" in shown.err
    )
    assert "::warning title=mergegate: waiting for evidence::" in shown.err
