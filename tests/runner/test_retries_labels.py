"""Labels (`runs_on`, `run --label`) and retries (`retries`, `max_retries`, `idempotent`) (issue 9,
job half).

Real repositories, real signed merges, real runner processes; records read back from the remote.
"""

from __future__ import annotations

import json
import os
import signal
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from mergegate.audit import log as audit
from mergegate.facts import audit_commits as audit_branch
from mergegate.git.repo import Repo
from mergegate.git.values import Signing
from mergegate.rules.eligibility import Attempt, AttemptHistory, judge_attempts
from mergegate.rules.policy import Retries
from tests.helpers.keys import shared_ssh_key
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml
from tests.runner.test_reliability import _kill_all, _marker, _start_runner, _until, _with

RULES = [ECHO_RULE, {"program": "sh", "args_prefix": ["-c"]}, {"program": "sleep"}]


def _gate(world: World, **extra: object) -> str:
    if extra.get("max_retries"):
        extra["runners"] = world.signing_runner()  # retries need runner-signed records
    return world.setup(policy_yaml([world.bob.approver_entry()], RULES, **extra))


def _merge(world: World, branch: str, files: dict[str, str]) -> str:
    world.propose(branch, files, who=world.alice)
    return world.signed_merge(branch, world.bob)


def _status(world: World, where: str = "runner") -> dict[str, dict[str, Any]]:
    shown = world.mg("status", "--json", where=where)
    assert shown.code == 0, shown.err
    return {j["path"]: j for j in shown.json()["jobs"]}


def _last_scanned(world: World) -> dict[str, Any]:
    return world.events("scanned")[-1]


def _fails_once(tmp: Path, name: str, code: int = 3) -> list[str]:
    """A command that fails the first time it runs and succeeds after (state outside the clean
    export)."""
    marker = tmp / f"{name}.ran"
    return [
        "sh",
        "-c",
        f"if [ -e {marker} ]; then echo second; else touch {marker}; echo first; exit {code}; fi",
    ]


# -- labels ------------------------------------------------------------------------------------


def test_a_job_runs_only_on_a_runner_that_has_all_its_labels_and_waits_queued_saying_why(
    world: World,
) -> None:
    _gate(world)
    merge = _merge(
        world,
        "gpu",
        {"jobs/train.yaml": job_yaml("train", ["echo", "trained"], runs_on=["linux", "gpu"])},
    )
    plain = world.run_once()
    assert plain.code == 0, plain.err
    assert plain.json()["jobs"] == [] and world.events("started") == []
    # It stays queued, and status says for which runner; the scanned record keeps its commit open.
    shown = _status(world)["jobs/train.yaml"]
    assert (shown["state"], shown["reason"], shown["runs_on"]) == (
        "queued",
        "waiting for a runner with labels gpu, linux",
        ["gpu", "linux"],
    )
    assert "waiting for a runner with labels gpu, linux" in world.mg("status").out
    assert [e["commit"] for e in _last_scanned(world)["open"]] == [merge]
    # Later merges are run by any runner; the labelled job still waits (another runner, another
    # clone).
    _merge(world, "other", {"jobs/plain.yaml": job_yaml("plain", ["echo", "plain"])})
    later = world.mg(
        "run",
        "--once",
        "--json",
        *world.runner_args,
        "--runner-name",
        "cpu",
        "--label",
        "gpu",
        where="cpu",
    )
    assert [(j["job"], j["status"]) for j in later.json()["jobs"]] == [("plain", "succeeded")]
    assert [e["commit"] for e in _last_scanned(world)["open"]] == [merge]
    # A runner with every label claims it, from the commit that approved it.
    gpu = world.mg(
        "run",
        "--once",
        "--json",
        *world.runner_args,
        "--runner-name",
        "gpu-1",
        "--label",
        "gpu",
        "--label",
        "linux",
        "--label",
        "x64",
        where="gpu",
    )
    assert gpu.code == 0, gpu.err
    assert [(j["job"], j["status"], j["commit"]) for j in gpu.json()["jobs"]] == [
        ("train", "succeeded", merge)
    ]
    (started,) = [r for r in world.events("started") if r["job"] == "train"]
    assert (started["runner"], started["runs_on"], started["attempt"]) == (
        "gpu-1",
        ["gpu", "linux"],
        1,
    )
    assert _last_scanned(world)["open"] == []
    assert _status(world)["jobs/train.yaml"]["state"] == "succeeded"
    # Nothing is left to do: an idle pass records nothing, and the history verifies.
    before = len(world.records())
    assert world.run_once().json()["jobs"] == [] and len(world.records()) == before
    assert world.mg("verify").code == 0


def test_a_bad_runs_on_label_is_an_error_naming_file_line_and_field_at_check_and_run(
    world: World,
) -> None:
    _gate(world)
    text = "id: bad\ncommand: [echo, x]\nruns_on:\n  - gpu\n  - 'no spaces'\n"
    world.propose("bad", {"jobs/bad.yaml": text}, who=world.alice)
    checked = world.mg("check", "origin/bad", where="proposer")
    assert checked.code == 2  # invalid input
    assert "jobs/bad.yaml:5" in checked.out + checked.err and "runs_on" in checked.out + checked.err
    world.signed_merge("bad", world.bob)
    ran = world.run_once()
    (job,) = ran.json()["jobs"]
    assert (
        job["status"] == "rejected"
        and "jobs/bad.yaml:5" in job["reason"]
        and "runs_on" in job["reason"]
    )
    assert world.events("started") == []
    usage = world.mg("run", "--once", "--label", "has space")
    assert usage.code == 2 and "--label 'has space' is not a label" in usage.err


# -- retries -----------------------------------------------------------------------------------


def test_retries_above_the_policys_max_retries_are_denied_naming_the_rule(world: World) -> None:
    _gate(world, max_retries=1)
    world.propose("r", {"jobs/r.yaml": job_yaml("r", ["echo", "x"], retries=2)}, who=world.alice)
    checked = world.mg("check", "origin/r", "--json", where="proposer")
    assert checked.code == 1
    assert "retries 2 exceeds max_retries 1 in policy/policy.yaml" in checked.out
    world.signed_merge("r", world.bob)
    (job,) = world.run_once().json()["jobs"]
    assert job["status"] == "rejected" and "retries 2 exceeds max_retries 1" in job["reason"]
    assert world.events("started") == []


def test_a_failed_attempt_is_retried_after_its_backoff_each_attempt_its_own_run(
    world: World, tmp_path: Path
) -> None:
    # The backoff is waited out, so it is short: the two passes and the status before it ends take
    # well under a second.
    _gate(world, max_retries=2, retry_backoff_seconds=3)
    merge = _merge(
        world,
        "r",
        {"jobs/flaky.yaml": job_yaml("flaky", _fails_once(tmp_path, "flaky"), retries=2)},
    )
    first = world.run_once()
    assert first.code == 1
    assert [(j["status"], j["commit"]) for j in first.json()["jobs"]] == [("failed", merge)]
    shown = _status(world)["jobs/flaky.yaml"]
    assert (shown["state"], shown["attempt"]) == ("retrying", 2)
    assert (
        shown["retry_at"] is not None
        and "attempt 1 of 3 failed; attempt 2 is due at" in shown["reason"]
    )
    # Before the backoff: nothing runs.
    due = datetime.fromisoformat(shown["retry_at"].replace("Z", "+00:00"))
    early = world.run_once()
    retried = [r for r in world.events("started") if r["attempt"] == 2]
    if (
        early.json()["jobs"]
        and retried
        and datetime.fromisoformat(retried[0]["judged"].replace("Z", "+00:00")) >= due
    ):
        # (a machine so loaded that this pass began after the backoff: it ran the retry, rightly)
        second = early
    else:
        assert early.code == 0 and early.json()["jobs"] == []
        assert len(world.events("started")) == 1
        time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()) + 0.5)
        second = world.run_once()
    assert second.code == 0, second.err
    assert [(j["status"], j["commit"]) for j in second.json()["jobs"]] == [("succeeded", merge)]
    started, finished = world.events("started"), world.events("finished")
    assert [s["attempt"] for s in started] == [1, 2]
    assert len({s["run_id"] for s in started}) == 2
    assert [(f["run_id"], f["status"]) for f in finished] == [
        (started[0]["run_id"], "failed"),
        (started[1]["run_id"], "succeeded"),
    ]
    assert finished[1]["stdout_tail"] == "second\n"
    assert _status(world)["jobs/flaky.yaml"]["state"] == "succeeded"
    assert _last_scanned(world)["open"] == []
    assert world.run_once().json()["jobs"] == []  # succeeded: never again
    verified = world.mg("verify")
    assert verified.code == 0, verified.err + verified.out
    assert world.mg("audit", "verify").code == 0


def test_attempts_stop_at_one_plus_retries_and_a_timeout_is_retried(world: World) -> None:
    _gate(
        world,
        max_retries=1,
        retry_backoff_seconds=0,
        limits={"max_timeout_seconds": 30, "kill_grace_seconds": 0.2},
    )
    _merge(
        world,
        "r",
        {"jobs/slow.yaml": job_yaml("slow", ["sleep", "5"], retries=1, timeout_seconds=1)},
    )
    assert [j["status"] for j in world.run_once().json()["jobs"]] == ["timed_out"]
    assert [j["status"] for j in world.run_once().json()["jobs"]] == ["timed_out"]
    assert world.run_once().json()["jobs"] == []
    assert [s["attempt"] for s in world.events("started")] == [1, 2]
    assert _status(world)["jobs/slow.yaml"]["state"] == "timed_out"
    assert world.mg("verify").code == 0


def test_a_veto_merged_after_a_failed_attempt_stops_its_retry(world: World) -> None:
    world.setup(
        policy_yaml(
            [world.bob.approver_entry(), world.carol.approver_entry()],
            RULES,
            max_retries=1,
            retry_backoff_seconds=0,
            runners=world.signing_runner(),
        )
    )
    _merge(world, "r", {"jobs/f.yaml": job_yaml("f", ["sh", "-c", "exit 1"], retries=1)})
    assert [j["status"] for j in world.run_once().json()["jobs"]] == ["failed"]
    blob = world.blob("approved", "jobs/f.yaml")
    world.fetch("approver")
    world.git("approver", "checkout", "-q", "-B", "approved", "origin/approved")
    world.git(
        "approver",
        "commit",
        "-q",
        "--allow-empty",
        "-S",
        "-m",
        "veto",
        "-m",
        f"Mergegate-Veto: jobs/f.yaml {blob}",
        who=world.carol,
        sign=world.carol.key,
    )
    world.git("approver", "push", "-q", "origin", "approved")
    vetoed = world.run_once()
    assert [(j["status"], j["reason"][:15]) for j in vetoed.json()["jobs"]] == [
        ("vetoed", "vetoed by carol")
    ]
    assert len(world.events("started")) == 1
    assert world.run_once().json()["jobs"] == [] and _last_scanned(world)["open"] == []
    assert world.mg("verify").code == 0


@pytest.mark.parametrize("idempotent", [False, True])
def test_a_lost_attempt_is_retried_only_when_the_job_is_idempotent(
    world: World, tmp_path: Path, idempotent: bool
) -> None:
    _gate(world, max_retries=1, retry_backoff_seconds=0)
    marker = _marker()
    seen = tmp_path / "first"
    command = [
        "sh",
        "-c",
        f"if [ -e {seen} ]; then echo again; else touch {seen}; sleep {marker}; fi",
    ]
    _merge(world, "r", {"jobs/l.yaml": job_yaml("l", command, retries=1, idempotent=idempotent)})
    runner = _start_runner(world, "--once", *world.runner_args)
    try:
        _until(lambda: _with(marker))
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        _until(lambda: not _with(marker), timeout=5.0)
    finally:
        _kill_all(_with(marker))
    closed = world.run_once()
    assert [j["status"] for j in closed.json()["jobs"]] == ["lost"]
    after = world.run_once()
    if idempotent:
        assert [j["status"] for j in after.json()["jobs"]] == ["succeeded"]
        assert [s["attempt"] for s in world.events("started")] == [1, 2]
    else:
        assert after.json()["jobs"] == []
        assert len(world.events("started")) == 1
        assert _status(world)["jobs/l.yaml"]["state"] == "lost"
    assert world.mg("verify").code == 0


def test_the_backoff_doubles_per_attempt_and_is_capped() -> None:
    schedule = Retries(max_retries=5, backoff_seconds=30, max_backoff_seconds=100)
    assert [schedule.delay(n) for n in (1, 2, 3, 4)] == [30, 60, 100, 100]
    assert Retries().delay(1) == 30 and Retries().delay(10) == 3600


def test_eligibility_is_pure_planning_from_records_and_the_time(tmp_path: Path) -> None:
    # One judge-approved decision, its recorded attempts, and two moments: before and after the
    # backoff.
    from mergegate.rules.job import parse_job
    from mergegate.rules.model import Decision
    from mergegate.rules.policy import load_policy

    runner = shared_ssh_key(tmp_path / "keys", "runner")
    text = policy_yaml(
        [],
        [ECHO_RULE],
        max_retries=1,
        retry_backoff_seconds=60,
        runners=[{"name": "ci", "key": runner.public_line}],
    )
    policy = load_policy(
        lambda p: text.encode() if p == "policy/policy.yaml" else None, commit="c" * 40
    )
    job = parse_job(job_yaml("j", ["echo"], retries=1).encode(), path="jobs/j.yaml", blob="b" * 40)
    decision = Decision("jobs/j.yaml", "b" * 40, "c" * 40, job, True, "ok")
    ended = datetime(2026, 1, 1, tzinfo=UTC)
    failed = AttemptHistory((Attempt(1, "r1", "c" * 40, "runner", 5, "failed", ended, 6),))
    waiting = judge_attempts(decision, policy, failed, now=ended.replace(second=59))
    assert type(waiting).__name__ == "Queued" and waiting.state == "retrying"  # type: ignore[union-attr]
    due = judge_attempts(decision, policy, failed, now=ended.replace(minute=1))
    assert type(due).__name__ == "Runnable" and due.attempt == 2  # type: ignore[union-attr]
    succeeded = AttemptHistory((Attempt(1, "r1", "c" * 40, "runner", 5, "succeeded", ended, 6),))
    assert judge_attempts(decision, policy, succeeded, now=ended.replace(hour=5)) is None


# -- verify --------------------------------------------------------------------------------------


def _append(
    world: World, drafts: list[dict[str, Any]], *, where: str = "runner", sign: bool = True
) -> None:
    """Records appended through the runner's own code path (as a runner that broke the rules would,
    with its key; or, `sign=False`, as anyone who can push mergegate/audit of a gate that lists no
    runners)."""
    clone = world.clone(where)
    repo = Repo(clone)
    world.git(where, "fetch", "-q", "origin")
    tip = repo.rev("refs/remotes/origin/mergegate/audit")
    assert tip is not None
    # The trailer a runner writes: the tip of approved it judged (records naming commits past
    # the trailer are tampering, issue 23 item 9).
    approved = repo.rev("refs/remotes/origin/approved")
    assert approved is not None and audit_branch.approved_of(repo.commit(tip)) is not None
    tail = audit.read_tail(repo, tip)
    records = audit.seal(drafts, after_seq=tail.last_seq, after_hash=tail.last_hash)
    sha = repo.write_commit(
        parent=tip,
        files=audit.append(repo, tip, tail, records),
        message=audit_branch.message("forged", approved),
        author=("runner", "runner@mergegate.invalid"),
        signing=Signing(world.runner_args[1]) if world.runner_args and sign else None,
    )
    world.git(where, "push", "-q", "origin", f"{sha}:refs/heads/mergegate/audit")


def _retry_of(record: dict[str, Any], attempt: int, status: str) -> list[dict[str, Any]]:
    ids = {k: record[k] for k in ("job", "path", "blob", "commit")}
    run_id = f"forged{attempt}"
    return [
        audit.draft(
            "started",
            runner="runner",
            run_id=run_id,
            attempt=attempt,
            command=record["command"],
            **ids,
        ),
        audit.draft("finished", runner="runner", run_id=run_id, status=status, exit_code=1, **ids),
    ]


def test_verify_flags_an_attempt_beyond_the_jobs_retries(world: World, tmp_path: Path) -> None:
    _gate(world, max_retries=1, retry_backoff_seconds=0)
    _merge(world, "r", {"jobs/f.yaml": job_yaml("f", ["sh", "-c", "exit 1"], retries=1)})
    world.run_once()
    world.run_once()
    assert [s["attempt"] for s in world.events("started")] == [1, 2]
    assert world.mg("verify").code == 0  # the legitimate retry is accepted
    (first, _) = world.events("started")
    _append(world, _retry_of(first, 3, "failed"))
    verified = world.mg("verify")
    assert verified.code == 3
    assert "attempt 3 exceeds the 2 the job allows (retries: 1)" in verified.err + verified.out


def test_verify_flags_a_retry_of_a_succeeded_attempt(world: World) -> None:
    _gate(world, max_retries=1, retry_backoff_seconds=0)
    _merge(world, "r", {"jobs/f.yaml": job_yaml("f", ["echo", "x"], retries=1)})
    world.run_once()
    (first,) = world.events("started")
    _append(world, _retry_of(first, 2, "succeeded"))
    verified = world.mg("verify")
    assert verified.code == 3
    assert (
        "attempt 2 retried an attempt that ended succeeded (only failed and timed_out attempts are "
        "retried)" in verified.err + verified.out
    )


def test_verify_flags_a_lost_attempt_retried_without_idempotent(world: World) -> None:
    _gate(world, max_retries=2, retry_backoff_seconds=0)
    _merge(world, "r", {"jobs/f.yaml": job_yaml("f", ["sh", "-c", "exit 1"], retries=2)})
    world.run_once()  # attempt 1 failed
    (first,) = world.events("started")
    ids = {k: first[k] for k in ("path", "blob", "commit")}
    _append(
        world,
        [
            audit.draft(
                "started",
                runner="runner",
                job="f",
                run_id="r2",
                attempt=2,
                command=first["command"],
                **ids,
            ),
            audit.draft(
                "finished",
                runner="runner",
                job="f",
                run_id="r2",
                status="lost",
                exit_code=None,
                **ids,
            ),
            audit.draft(
                "started",
                runner="runner",
                job="f",
                run_id="r3",
                attempt=3,
                command=first["command"],
                **ids,
            ),
        ],
    )
    verified = world.mg("verify")
    assert verified.code == 3
    assert (
        "attempt 3 retried an attempt that ended lost (a lost attempt is retried only when the job "
        "says idempotent: true)" in verified.err + verified.out
    )


# -- plan --json and run --once --job: the fan-out -------------------------------------------------


def test_plan_json_is_a_matrix_of_the_runnable_jobs_and_run_job_claims_exactly_that_one(
    world: World, tmp_path: Path
) -> None:
    _gate(world, max_retries=1, retry_backoff_seconds=0)
    merge = _merge(
        world,
        "many",
        {
            "jobs/a.yaml": job_yaml("a", ["echo", "a"]),
            "jobs/b.yaml": job_yaml("b", ["sh", "-c", "exit 4"], retries=1),
            "jobs/gpu.yaml": job_yaml("gpu", ["echo", "g"], runs_on=["gpu"]),
            "jobs/denied.yaml": job_yaml("denied", ["rm", "-rf", "x"]),
        },
    )
    planned = world.mg("plan", "--json")
    assert planned.code == 0, planned.err
    include = planned.json()["include"]
    assert planned.json() == {"include": include}  # nothing else: the object is the matrix
    assert [(e["path"], e["job"], e["commit"], e["attempt"], e["runs_on"]) for e in include] == [
        ("jobs/a.yaml", "a", merge, 1, []),
        ("jobs/b.yaml", "b", merge, 1, []),
        ("jobs/gpu.yaml", "gpu", merge, 1, ["gpu"]),
    ]
    assert include[0]["blob"] == world.blob("approved", "jobs/a.yaml")
    assert [e["path"] for e in world.mg("plan", "--json", "--label", "cpu").json()["include"]] == [
        "jobs/a.yaml",
        "jobs/b.yaml",
    ]
    # In Actions: one line of JSON for fromJSON(), and the count, in $GITHUB_OUTPUT.
    outputs = tmp_path / "github_output"
    # A matrix is for legs with the plan's labels (none): the gpu job is left to a gpu runner.
    world.mg("plan", "--github", env={"GITHUB_OUTPUT": str(outputs)})
    lines = dict(line.split("=", 1) for line in outputs.read_text().splitlines())
    assert (
        json.loads(lines["matrix"]) == {"include": include[:2]}
        and lines["count"] == "2"
        and lines["more"] == "0"
    )
    human = world.mg("plan").out
    assert "jobs/gpu.yaml" in human and "runs_on: gpu" in human
    # One matrix entry: that job and nothing else is claimed, run and recorded.
    ran = world.run_once("--job", "jobs/a.yaml", "--runner-name", "matrix-1")
    assert ran.code == 0, ran.err
    assert [(j["job"], j["status"]) for j in ran.json()["jobs"]] == [("a", "succeeded")]
    assert [(r["event"], r["job"]) for r in world.records()] == [
        ("started", "a"),
        ("finished", "a"),
    ]
    # A second runner for the same entry (a re-run of the workflow): nothing to do, exit 0.
    again = world.run_once("--job", "jobs/a.yaml", "--runner-name", "matrix-2", where="other")
    assert again.code == 0, again.err
    assert again.json()["job"]["state"] == "done" and again.json()["jobs"] == []
    # What it cannot do, it says: labels (exit 2), a refused job (exit 1), no such file (exit 2).
    gpu = world.run_once("--job", "jobs/gpu.yaml")
    assert (
        gpu.code == 2
        and "waiting for a runner with labels gpu (this runner lacks gpu)"
        in gpu.json()["job"]["reason"]
    )
    denied = world.run_once("--job", "jobs/denied.yaml")
    assert (
        denied.code == 1
        and denied.json()["job"]["state"] == "rejected"
        and "denied by policy" in denied.json()["job"]["reason"]
    )
    unknown = world.mg("run", "--once", *world.runner_args, "--job", "jobs/nope.yaml")
    assert unknown.code == 2 and "no file jobs/nope.yaml on approved" in unknown.out
    assert world.mg("run", "--job", "jobs/a.yaml").code == 2  # --job needs --once
    # A failed entry's retry is a new matrix entry, attempt 2.
    assert world.run_once("--job", "jobs/b.yaml").code == 1
    assert [(e["path"], e["attempt"]) for e in world.mg("plan", "--json").json()["include"]] == [
        ("jobs/b.yaml", 2),
        ("jobs/gpu.yaml", 1),
    ]
    assert [r["event"] for r in world.records()] == ["started", "finished", "started", "finished"]
    # The sweep (a normal pass) records the refusal and keeps the gpu job's commit open.
    swept = world.run_once()
    assert sorted((j["job"], j["status"]) for j in swept.json()["jobs"]) == [
        ("a", "claimed"),
        ("b", "failed"),
        ("denied", "rejected"),
    ]
    assert [e["commit"] for e in _last_scanned(world)["open"]] == [merge]
    assert [s["attempt"] for s in world.events("started") if s["job"] == "b"] == [1, 2]
    assert world.mg("verify").code == 0


def test_a_merge_fanned_out_over_a_matrix_runs_every_job_exactly_once(world: World) -> None:
    # As the fan-out workflow does it: plan, then one `run --once --job` per entry, each in a clone
    # of its own with a name of its own, all at once, every entry twice (a re-run of the workflow),
    # then a sweep.
    _gate(world)
    names = [f"j{i}" for i in range(4)]
    _merge(world, "many", {f"jobs/{n}.yaml": job_yaml(n, ["echo", n]) for n in names})
    include = world.mg("plan", "--json").json()["include"]
    assert [e["path"] for e in include] == [f"jobs/{n}.yaml" for n in names]
    entries = [
        (e["path"], f"gha-{copy}-{index}") for copy in range(2) for index, e in enumerate(include)
    ]
    procs = [
        _start_runner(
            world,
            "--once",
            *world.runner_args,
            "--json",
            "--job",
            path,
            "--runner-name",
            name,
            where=name,
        )
        for path, name in entries
    ]
    results = [(p.wait(timeout=300), p.communicate()) for p in procs]
    assert [code for code, _ in results] == [0] * len(entries), results
    outcomes: dict[str, list[str]] = {}
    for (path, _), (_, (out, _)) in zip(entries, results, strict=True):
        shown = json.loads(out)
        outcomes.setdefault(path, []).extend(
            [j["status"] for j in shown["jobs"]]
            + ([shown["job"]["state"]] if "job" in shown else [])
        )
    for path, seen in outcomes.items():
        assert sorted(seen)[-1] == "succeeded" and seen.count("succeeded") == 1, (path, seen)
    started, finished = world.events("started"), world.events("finished")
    assert (
        sorted(s["job"] for s in started) == names and sorted(f["job"] for f in finished) == names
    )
    assert world.events("scanned") == []  # entries record only their job
    swept = world.run_once()
    # The sweep runs nothing and accounts for every job of the merge it walked: each entry's runner
    # has it.
    holders = {s["job"]: s["runner"] for s in started}
    assert swept.code == 0 and sorted(
        (j["job"], j["status"], j["reason"]) for j in swept.json()["jobs"]
    ) == [(n, "claimed", f"claimed by {holders[n]}") for n in names]
    assert len(world.events("scanned")) == 1 and len(world.events("started")) == len(names)
    assert world.mg("plan", "--json").json() == {"include": []}
    assert world.mg("verify").code == 0


def test_a_failed_leg_whose_retry_waits_is_not_reported_claimed_by_the_sweep(world: World) -> None:
    _gate(world, max_retries=1, retry_backoff_seconds=3600)
    _merge(world, "b", {"jobs/b.yaml": job_yaml("b", ["sh", "-c", "exit 4"], retries=1)})
    leg = world.run_once("--job", "jobs/b.yaml", "--runner-name", "leg-1", where="leg")
    assert leg.code == 1, leg.err  # attempt 1 failed; attempt 2 is due in an hour
    shown = _status(world)["jobs/b.yaml"]
    assert shown["state"] == "retrying", shown  # nobody holds it: it waits for its retry
    swept = world.run_once()
    assert swept.code == 0, swept.err
    # Nobody holds it: not `claimed by leg-1` (the run ended, failed); status says it is retrying.
    assert swept.json()["jobs"] == []
