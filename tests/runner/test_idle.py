"""An idle `run --once` after a quiet pass asks the remote (`ls-remote`) and nothing else (idle.py,
issue 12).

Real repositories and signed merges; which git commands ran is read from GIT_TRACE.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path

from mergegate.audit import log as audit
from mergegate.git.repo import Repo
from mergegate.runner import idle
from mergegate.runner.spool import Spool
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml
from tests.runner.test_retries_labels import _append, _fails_once


def _gate(world: World, **extra: object) -> str:
    if extra.get("max_retries"):
        extra["runners"] = (
            world.signing_runner()
        )  # retries need runner-signed records (every run_once signs)
    return world.setup(
        policy_yaml(
            [world.bob.approver_entry()],
            [ECHO_RULE, {"program": "sh", "args_prefix": ["-c"]}],
            **extra,
        )
    )


def _merge(world: World, branch: str, files: dict[str, str]) -> str:
    world.propose(branch, files, who=world.alice)
    return world.signed_merge(branch, world.bob)


def _traced(
    world: World, tmp: Path, *args: str, env_trust: str | None = None
) -> tuple[dict[str, object], list[str]]:
    """One `run --once --json` and the git commands it ran (their verbs, in order)."""
    trace = tmp / f"trace-{time.monotonic_ns()}"
    env = {"GIT_TRACE": str(trace), **({"MERGEGATE_TRUST_ROOT": env_trust} if env_trust else {})}
    result = world.run_once(*args, env=env)
    assert result.code in (0, 1), result.err
    verbs = []
    for line in trace.read_text().splitlines() if trace.exists() else []:
        if "trace: built-in: git " in line:
            words = line.split("trace: built-in: git ", 1)[1].split()
            while words and words[0].startswith("-"):  # --git-dir X, -C X, -c k=v
                words = words[2:] if words[0] in ("--git-dir", "-C", "-c") else words[1:]
            verbs.append(words[0] if words else "")
    return result.json(), verbs


def test_an_idle_run_once_after_a_quiet_pass_only_asks_the_remote_and_says_the_same(
    world: World, tmp_path: Path
) -> None:
    root = _gate(world)
    _merge(world, "hello", {"jobs/hello.yaml": job_yaml("hello", ["echo", "hi"])})
    ran, _ = _traced(world, tmp_path, "--trust-root", root)
    assert [j["status"] for j in ran["jobs"]] == ["succeeded"]  # type: ignore[index]
    memory = idle.path(world.clone("runner") / ".git", "runner")
    assert (
        memory.exists()
    )  # the pass ran a job and ended settled: the next idle poll is the cheap one
    quiet = _full_pass_is_quiet(world, tmp_path, root)
    again, verbs = _traced(world, tmp_path, "--trust-root", root)
    assert again == quiet
    assert (
        "ls-remote" in verbs and "fetch" not in verbs and "grep" not in verbs and len(verbs) <= 4
    ), verbs
    plain = world.mg("run", "--once", "--trust-root", root)
    assert (plain.code, plain.out, plain.err) == (0, "nothing to run\n", "")


def test_the_quiet_ends_when_a_ref_moves_or_the_options_change(
    world: World, tmp_path: Path
) -> None:
    root = _gate(world)
    _traced(world, tmp_path, "--trust-root", root)
    _traced(world, tmp_path, "--trust-root", root)
    _, verbs = _traced(world, tmp_path, "--trust-root", root)
    assert "fetch" not in verbs
    # Another set of options plans differently: a full pass.
    _, verbs = _traced(world, tmp_path, "--trust-root", root, "--label", "gpu")
    assert "fetch" in verbs
    # A new approved job on the remote: ls-remote sees approved move, and the job runs.
    _traced(world, tmp_path, "--trust-root", root)
    merge = _merge(world, "late", {"jobs/late.yaml": job_yaml("late", ["echo", "late"])})
    ran, verbs = _traced(world, tmp_path, "--trust-root", root)
    assert [(j["status"], j["commit"]) for j in ran["jobs"]] == [("succeeded", merge)]  # type: ignore[index]
    # Records another runner pushed (the audit branch moved): a full pass, which checks them.
    _traced(world, tmp_path, "--trust-root", root)
    _traced(world, tmp_path, "--trust-root", root)
    other = world.run_once("--trust-root", root, where="other")
    assert other.code == 0, other.err
    _merge(world, "third", {"jobs/third.yaml": job_yaml("third", ["echo", "3"])})
    assert [
        j["status"] for j in world.run_once("--trust-root", root, where="other").json()["jobs"]
    ] == ["succeeded"]
    ran, verbs = _traced(world, tmp_path, "--trust-root", root)
    assert "fetch" in verbs and ran["jobs"] == []


def test_an_unpinned_trust_root_or_a_pass_with_warnings_leaves_no_memory(
    world: World, tmp_path: Path
) -> None:
    _gate(world)
    for _ in range(3):
        result = world.run_once()
        assert result.code == 0 and "no trust root pinned" in result.err
    assert not idle.path(world.clone("runner") / ".git", "runner").exists()


def test_the_quiet_ends_when_a_retry_falls_due(world: World, tmp_path: Path) -> None:
    root = _gate(world, max_retries=1, retry_backoff_seconds=3)
    merge = _merge(
        world,
        "r",
        {"jobs/flaky.yaml": job_yaml("flaky", _fails_once(tmp_path, "flaky"), retries=1)},
    )
    first, _ = _traced(world, tmp_path, "--trust-root", root)
    assert [j["status"] for j in first["jobs"]] == ["failed"]  # type: ignore[index]
    assert (
        idle.recall(world.clone("runner") / ".git", "runner") is None
    )  # its retry is the next plan's to time
    waiting, verbs = _traced(world, tmp_path, "--trust-root", root)  # quiet until the backoff ends
    assert waiting["jobs"] == [] and "fetch" in verbs
    wake = idle.recall(world.clone("runner") / ".git", "runner")
    assert wake is not None and wake.wake is not None
    due = datetime.fromisoformat(wake.wake)
    if datetime.now(UTC) < due:
        early, verbs = _traced(world, tmp_path, "--trust-root", root)
        assert early["jobs"] == [] and ("fetch" not in verbs or datetime.now(UTC) >= due)
    time.sleep(max(0.0, (due - datetime.now(UTC)).total_seconds()) + 0.3)
    second, verbs = _traced(world, tmp_path, "--trust-root", root)
    assert "fetch" in verbs
    assert [(j["status"], j["commit"]) for j in second["jobs"]] == [("succeeded", merge)]  # type: ignore[index]


def test_a_pass_after_the_idle_check_goes_on_with_its_repository(
    world: World, tmp_path: Path
) -> None:
    """The idle check opens the clone (one `rev-parse`) and, when a pass must run, the pass goes on
    with it: four runners started at once on two CPUs each paid a second `rev-parse` (issue 9)."""
    root = _gate(world)
    _merge(world, "hello", {"jobs/hello.yaml": job_yaml("hello", ["echo", "hi"])})
    ran, verbs = _traced(world, tmp_path, "--trust-root", root)
    assert [j["status"] for j in ran["jobs"]] == ["succeeded"]  # type: ignore[index]
    assert (
        "ls-remote" not in verbs
    )  # no memory yet: the check found nothing to compare, and the pass ran
    assert verbs.count("rev-parse") == 1, verbs


def _full_pass_is_quiet(world: World, tmp: Path, root: str) -> dict[str, object]:
    """What the memory stands for, checked: without it, a full pass finds nothing, writes nothing,
    warns of nothing and leaves the same memory (the reference the cheap poll is held to)."""
    memory = idle.path(world.clone("runner") / ".git", "runner")
    kept = json.loads(memory.read_text())
    memory.unlink()
    records = world.audit_tip()
    trace = tmp / f"trace-{time.monotonic_ns()}"
    result = world.run_once("--trust-root", root, env={"GIT_TRACE": str(trace)})
    assert result.code == 0 and result.err == "", result.err
    assert "built-in: git fetch" in trace.read_text()
    full = result.json()
    assert (full["jobs"], full["policy_changes"], full["waiting"]) == ([], [], None)
    assert world.audit_tip() == records
    assert json.loads(memory.read_text()) == kept
    return full  # type: ignore[no-any-return]


def test_a_pass_that_ran_rejected_and_queued_jobs_leaves_the_memory_a_full_pass_would(
    world: World, tmp_path: Path
) -> None:
    root = _gate(world)
    _merge(
        world,
        "mixed",
        {
            "jobs/a.yaml": job_yaml("a", ["echo", "a"]),
            "jobs/b.yaml": job_yaml("b", ["sh", "-c", "exit 4"]),  # fails, no retries: final
            "jobs/c.yaml": job_yaml("c", ["rm", "-rf", "x"]),  # no rule allows it: rejected
            "jobs/d.yaml": job_yaml("d", ["echo", "d"], runs_on=["gpu"]),
        },
    )  # stays open (queued)
    ran, _ = _traced(world, tmp_path, "--trust-root", root)
    assert sorted((j["path"], j["status"]) for j in ran["jobs"]) == [  # type: ignore[union-attr]
        ("jobs/a.yaml", "succeeded"),
        ("jobs/b.yaml", "failed"),
        ("jobs/c.yaml", "rejected"),
    ]
    full = _full_pass_is_quiet(world, tmp_path, root)
    idle_poll, verbs = _traced(world, tmp_path, "--trust-root", root)
    assert idle_poll == full and "fetch" not in verbs and "grep" not in verbs
    # A policy change adopted in a pass that also runs a job: settled too.
    policy = policy_yaml(
        [world.bob.approver_entry()],
        [
            ECHO_RULE,
            {"program": "sh", "args_prefix": ["-c"]},
            {"program": "true", "args_prefix": []},
        ],
    )
    _merge(
        world, "policy", {"policy/policy.yaml": policy, "jobs/e.yaml": job_yaml("e", ["echo", "e"])}
    )
    ran, _ = _traced(world, tmp_path, "--trust-root", root)
    assert [j["status"] for j in ran["jobs"]] == ["succeeded"] and ran["policy_changes"]  # type: ignore[index]
    _full_pass_is_quiet(world, tmp_path, root)


def _in_background(world: World, root: str) -> subprocess.Popen[str]:
    """`run --once --json` as a process of its own, so that the test can act while its jobs run."""
    return subprocess.Popen(
        [sys.executable, "-m", "mergegate", "run", "--once", "--json", "--trust-root", root],
        cwd=world.clone("runner"),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env=dict(os.environ),
    )


def _until(done: Callable[[], bool], seconds: float = 30.0) -> None:
    deadline = time.monotonic() + seconds
    while not done():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def _slow_jobs(tmp: Path, *names: str) -> dict[str, str]:
    """Jobs that say they started (a file outside the export), then take 1.5 s (longer than a
    runner's look at the branches stays fresh) and wait until the test says go (`tmp/go`, at most 30
    s): what the test does while a job runs lands before the job ends, however loaded the machine.
    """
    wait = (
        f"sleep 1.5; i=0; while [ ! -e {tmp / 'go'} ] && [ $i -lt 600 ]; do sleep 0.05; "
        "i=$((i+1)); done"
    )
    return {
        f"jobs/{n}.yaml": job_yaml(n, ["sh", "-c", f"touch {tmp / n}.started; {wait}"])
        for n in names
    }


def test_no_memory_when_approved_moved_while_the_pass_ran(world: World, tmp_path: Path) -> None:
    root = _gate(world)
    _merge(world, "slow", _slow_jobs(tmp_path, "s1", "s2"))
    runner = _in_background(world, root)
    _until(lambda: any((tmp_path / f"{n}.started").exists() for n in ("s1", "s2")))
    # Approved moves while the first job runs; claiming the second fetches it (a veto may be in it).
    late = _merge(world, "late", {"jobs/late.yaml": job_yaml("late", ["echo", "late"])})
    (tmp_path / "go").touch()
    out, err = runner.communicate(timeout=60)
    assert runner.returncode == 0, err
    assert [j["status"] for j in json.loads(out)["jobs"]] == ["succeeded", "succeeded"]
    assert (
        Repo(world.clone("runner")).rev("refs/remotes/origin/approved") == late
    )  # the pass saw it, did not judge it
    assert idle.recall(world.clone("runner") / ".git", "runner") is None
    ran, _ = _traced(world, tmp_path, "--trust-root", root)
    assert [(j["path"], j["status"]) for j in ran["jobs"]] == [("jobs/late.yaml", "succeeded")]  # type: ignore[index]


def _foreign_claim(world: World, commit: str, seconds: float) -> str:
    """Another runner's claim (a `started` record with a lease) appended to the audit branch; its
    run id."""
    run_id = "f0" * 16
    lease = {
        "holder": "other",
        "until": (datetime.now(UTC) + timedelta(seconds=seconds))
        .isoformat()
        .replace("+00:00", "Z"),
    }
    _append(
        world,
        [
            audit.draft(
                "started",
                runner="other",
                job="ghost",
                path="jobs/ghost.yaml",
                blob="1" * 40,
                commit=commit,
                run_id=run_id,
                command=["echo", "ghost"],
                attempt=1,
                lease=lease,
            )
        ],
        where="admin",
    )
    return run_id


def test_no_memory_when_another_runners_records_came_in_while_the_pass_ran(
    world: World, tmp_path: Path
) -> None:
    root = _gate(world)
    merge = _merge(world, "slow", _slow_jobs(tmp_path, "s1"))
    runner = _in_background(world, root)
    _until(lambda: (tmp_path / "s1.started").exists())
    # Another runner's claim lands while the job runs: this pass's last push builds on it.
    run_id = _foreign_claim(world, merge, seconds=2.5)
    (tmp_path / "go").touch()
    out, err = runner.communicate(timeout=60)
    assert runner.returncode == 0, err
    assert [j["status"] for j in json.loads(out)["jobs"]] == ["succeeded"]
    assert (
        idle.recall(world.clone("runner") / ".git", "runner") is None
    )  # that claim's lease is not in its plan
    time.sleep(3.0)
    ran, _ = _traced(world, tmp_path, "--trust-root", root)
    assert [(j["run_id"], j["status"]) for j in ran["jobs"]] == [(run_id, "lost")]  # type: ignore[index]


def test_the_quiet_ends_when_another_runners_lease_runs_out(world: World, tmp_path: Path) -> None:
    root = _gate(world)
    merge = _merge(world, "one", {"jobs/one.yaml": job_yaml("one", ["echo", "1"])})
    _traced(world, tmp_path, "--trust-root", root)
    run_id = _foreign_claim(world, merge, seconds=3.0)
    quiet, verbs = _traced(
        world, tmp_path, "--trust-root", root
    )  # a full pass (the branch moved): quiet till the lease ends
    assert quiet["jobs"] == [] and "fetch" in verbs
    memory = idle.recall(world.clone("runner") / ".git", "runner")
    assert memory is not None and memory.wake is not None
    _, verbs = _traced(world, tmp_path, "--trust-root", root)
    assert "fetch" not in verbs or datetime.now(UTC) >= datetime.fromisoformat(memory.wake)
    time.sleep(
        max(0.0, (datetime.fromisoformat(memory.wake) - datetime.now(UTC)).total_seconds()) + 0.3
    )
    closed, verbs = _traced(world, tmp_path, "--trust-root", root)
    assert [(j["run_id"], j["status"]) for j in closed["jobs"]] == [(run_id, "lost")]  # type: ignore[index]


def test_the_quiet_ends_with_a_spooled_result_a_pending_commit_or_another_trust_root(
    world: World, tmp_path: Path
) -> None:
    root = _gate(world)
    merge = _merge(world, "one", {"jobs/one.yaml": job_yaml("one", ["echo", "1"])})
    _traced(world, tmp_path, "--trust-root", root)
    git_dir = world.clone("runner") / ".git"
    spool = Spool.for_runner(git_dir, "runner").path
    spool.parent.mkdir(parents=True, exist_ok=True)
    spool.write_text(
        ""
    )  # results not pushed yet (here none, but the poll cannot know without reading)
    _, verbs = _traced(world, tmp_path, "--trust-root", root)
    assert "fetch" in verbs
    spool.unlink(missing_ok=True)
    _traced(world, tmp_path, "--trust-root", root)
    # A pending commit of this runner (a push the remote refused): a full pass, which pushes it
    # again or drops it.
    world.git(
        "runner",
        "update-ref",
        "refs/mergegate/pending/runner",
        "refs/remotes/origin/mergegate/audit",
    )
    _, verbs = _traced(world, tmp_path, "--trust-root", root)
    assert "fetch" in verbs
    world.git("runner", "update-ref", "-d", "refs/mergegate/pending/runner")
    _traced(world, tmp_path, "--trust-root", root)
    _, verbs = _traced(world, tmp_path, "--trust-root", root)
    assert "fetch" not in verbs
    # The trust root named another way (another commit, or the environment's): planned from there, a
    # full pass.
    _, verbs = _traced(world, tmp_path, "--trust-root", merge)
    assert "fetch" in verbs
    _traced(world, tmp_path, "--trust-root", root)
    assert "fetch" not in _traced(world, tmp_path, "--trust-root", root)[1]
    _, verbs = _traced(world, tmp_path, "--trust-root", root, env_trust=merge)
    assert "fetch" in verbs


def test_a_full_pass_with_nothing_new_walks_back_to_the_trust_root_once(
    world: World, tmp_path: Path
) -> None:
    """The trust root against the tip, then against the last scanned commit (the same one): one walk
    through all of history, not two (git.Repo.is_ancestor keeps its yes answers)."""
    root = _gate(world)
    tip = _merge(world, "one", {"jobs/one.yaml": job_yaml("one", ["echo", "1"])})
    _traced(world, tmp_path, "--trust-root", root)
    idle.forget(world.clone("runner") / ".git", "runner")
    (
        world.clone("runner") / ".git" / "mergegate" / "ancestors"
    ).unlink()  # (the clone's memory of it: the next test)
    trace = tmp_path / "walks"
    result = world.run_once("--trust-root", root, env={"GIT_TRACE": str(trace)})
    assert result.code == 0 and result.json()["jobs"] == [], result.err
    assert trace.read_text().count(f"merge-base --is-ancestor {root} {tip}") == 1


def test_the_walks_back_to_the_trust_root_are_remembered_by_the_clone(
    world: World, tmp_path: Path
) -> None:
    """The trust root's ancestry and the policy log from it are walks of all history; between two
    commit ids their answers never change, so a second full pass at the same commits walks neither.
    A new commit is a new question (a policy change after it is found), and what the clone kept
    cannot say yes to a no."""
    from mergegate.facts.branches import policy_changes

    root = _gate(world)
    first = _merge(world, "one", {"jobs/one.yaml": job_yaml("one", ["echo", "1"])})
    _traced(world, tmp_path, "--trust-root", root)
    for _ in range(2):
        idle.forget(world.clone("runner") / ".git", "runner")
        trace = tmp_path / f"walks-{time.monotonic_ns()}"
        result = world.run_once("--trust-root", root, env={"GIT_TRACE": str(trace)})
        assert result.code == 0 and result.json()["jobs"] == [], result.err
    text = trace.read_text()
    assert f"merge-base --is-ancestor {root} {first}" not in text and "-- policy/" not in text
    repo = Repo(world.clone("runner"))
    assert policy_changes(repo, root, first) == []
    policy = policy_yaml(
        [world.bob.approver_entry()],
        [ECHO_RULE, {"program": "sh", "args_prefix": ["-c"]}, {"program": "true"}],
    )
    change = _merge(world, "policy", {"policy/policy.yaml": policy})
    world.fetch("runner")
    assert policy_changes(repo, root, change) == [change] and policy_changes(
        Repo(repo.path), root, change
    ) == [change]
    # A no is never kept; a yes only for its two ids; a memory it cannot read is no memory.
    assert not Repo(repo.path).is_ancestor(change, root, remember=True)
    assert f"{change} {root}" not in (repo.git_dir / "mergegate" / "ancestors").read_text()
    assert not Repo(repo.path).is_ancestor(change, first, remember=True)
    (repo.git_dir / "mergegate" / "ancestors").write_bytes(b"\xff\xfe nonsense")
    assert Repo(repo.path).is_ancestor(root, change, remember=True)
    (repo.git_dir / "mergegate" / "policy-changes.json").write_text(
        json.dumps({f"{root}..{change}": "x"})
    )
    assert policy_changes(Repo(repo.path), root, change) == [change]


def test_the_quiet_ends_when_a_key_of_an_open_commit_reaches_the_end_of_its_lifetime(
    world: World, tmp_path: Path
) -> None:
    """A job queued for a runner with its labels keeps its commit open: the next pass judges it
    again, at its time. When the approver's key stops being valid, that pass rejects the job; the
    memory wakes for it."""
    runners = world.signing_runner()
    ends = (datetime.now(UTC) + timedelta(seconds=6)).replace(microsecond=0)
    bob = world.bob.approver_entry()
    bob = {
        "name": bob["name"],
        "email": bob["email"],
        "keys": [{"key": bob["key"], "valid_before": ends.isoformat().replace("+00:00", "Z")}],
    }
    root = world.setup(policy_yaml([bob], [ECHO_RULE], runners=runners))
    merge = _merge(
        world, "gpu", {"jobs/train.yaml": job_yaml("train", ["echo", "t"], runs_on=["gpu"])}
    )
    queued, _ = _traced(world, tmp_path, "--trust-root", root)
    assert queued["jobs"] == []
    memory = idle.recall(world.clone("runner") / ".git", "runner")
    assert (
        memory is not None
        and memory.wake is not None
        and datetime.fromisoformat(memory.wake) <= ends
    )
    time.sleep(max(0.0, (ends - datetime.now(UTC)).total_seconds()) + 1.2)
    late, verbs = _traced(world, tmp_path, "--trust-root", root)
    assert "fetch" in verbs
    assert [(j["commit"], j["status"]) for j in late["jobs"]] == [(merge, "rejected")]  # type: ignore[index]
