"""Runner reliability (issue 9): kills, signals, locks, torn state, outages. Real processes, real
signals."""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml

RULES = [ECHO_RULE, {"program": "sh", "args_prefix": ["-c"]}, {"program": "sleep"}]


def _gate(world: World, **extra: object) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], RULES, **extra))


def _merge_jobs(world: World, branch: str, jobs: dict[str, list[str]]) -> str:
    world.propose(
        branch,
        {f"jobs/{name}.yaml": job_yaml(name, command) for name, command in jobs.items()},
        who=world.alice,
    )
    return world.signed_merge(branch, world.bob)


def _marker() -> str:
    """A sleep duration no other process on the machine has: how the test finds the job's
    processes."""
    return f"300.{uuid.uuid4().int % 10**9:09d}"


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


def _with(marker: str) -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in Path(f"/proc/{entry}/cmdline").read_bytes().decode(
                "utf-8", "replace"
            ) and _alive(int(entry)):
                found.append(int(entry))
        except OSError:
            continue
    return found


def _spooled_process(world: World) -> bool:
    """Whether the runner's spool names a job's process (spool.py: `"job"` not null)."""
    folder = world.clone("runner") / ".git" / "mergegate" / "spool"
    lines = (
        [line for path in folder.glob("*.jsonl") for line in path.read_text().splitlines()]
        if folder.is_dir()
        else []
    )
    return any(json.loads(line).get("job") for line in lines if line.startswith("{"))


def _children(pid: int) -> list[int]:
    out = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            if int(Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[1]) == pid:
                out.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return out


def _until(what: Callable[[], object], timeout: float = 30.0, step: float = 0.05) -> None:
    deadline = time.monotonic() + timeout
    while not what():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(step)


def _start_runner(
    world: World, *args: str, where: str = "runner", env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "mergegate", "run", *args],
        cwd=world.clone(where),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
    )


def _git_calls(trace: Path, verb: str) -> int:
    """How many `git VERB` processes a runner started with GIT_TRACE=<trace> has run so far."""
    try:
        text = trace.read_text(errors="replace")
    except FileNotFoundError:
        return 0
    return sum(1 for line in text.splitlines() if f"built-in: git {verb} " in line)


def _kill_9_and_see_the_jobs_die(runner: subprocess.Popen[str], marker: str) -> None:
    """kill -9 the runner; every process of its jobs (found by `marker`) is gone within a second."""
    os.kill(runner.pid, signal.SIGKILL)
    runner.wait()
    killed = time.monotonic()
    _until(lambda: not _with(marker), timeout=1.0, step=0.02)
    assert time.monotonic() - killed < 1.0


def _kill_all(pids: list[int]) -> None:
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


# -- defect 5: a job never outlives its runner -----------------------------------------------


def test_kill_9_of_the_runner_kills_the_whole_job_tree_within_a_second(world: World) -> None:
    _gate(world)
    marker = _marker()
    # The job leaves a background child in its group and one in a session of its own.
    _merge_jobs(
        world,
        "p",
        {"tree": ["sh", "-c", f"sleep {marker} & setsid sleep {marker} & sleep {marker}"]},
    )
    runner = _start_runner(world, "--once")
    try:
        _until(lambda: len(_with(marker)) == 4)  # sh and its three sleeps
        _kill_9_and_see_the_jobs_die(runner, marker)
    finally:
        _kill_all(_with(marker))
    # The next pass in the same clone closes it, once, and never runs it again.
    again = world.run_once()
    assert again.code == 1, again.err
    (job,) = again.json()["jobs"]
    assert job["status"] == "lost" and "at most once" in job["reason"]
    assert len(world.events("started")) == 1 and len(world.events("finished")) == 1


def test_an_orphan_is_not_closed_while_its_process_still_runs(world: World) -> None:
    """The runner, its watchdog and its spawner die together (say, an OOM kill of all three): a
    child of the job survives in the job's process group. The next pass must not close the job while
    it runs."""
    _gate(world)
    marker = _marker()
    _merge_jobs(world, "p", {"stay": ["sh", "-c", f"sleep {marker} & wait"]})
    runner = _start_runner(world, "--once")
    try:
        _until(lambda: len(_with(marker)) == 2)  # sh and its sleep
        _until(lambda: _spooled_process(world))  # (killed before, no pass could know the job runs)
        helpers = {p: Path(f"/proc/{p}/cmdline").read_bytes() for p in _children(runner.pid)}
        watchdogs = [
            p for p, cmdline in helpers.items() if b"mergegate.execution.watchdog" in cmdline
        ]
        spawners = [
            p for p, cmdline in helpers.items() if b"mergegate.execution.spawner" in cmdline
        ]
        assert len(watchdogs) == 1 and len(spawners) == 1
        os.kill(watchdogs[0], signal.SIGKILL)
        os.kill(
            spawners[0], signal.SIGKILL
        )  # else it kills the job's process group when the runner is gone
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        _until(lambda: not _alive(watchdogs[0]) and not _alive(spawners[0]))
        # The job's leader dies of the parent-death signal (sent as the spawner exits, acted on when
        # the leader next runs: on a loaded machine a moment later); its child does not.
        _until(lambda: len(_with(marker)) == 1)
        assert len(_with(marker)) == 1
        early = world.run_once()
        assert early.code == 0, early.err
        assert early.json()["jobs"] == []
        assert "may still be running" in early.err
        assert world.events("finished") == []
        states = {j["job"]: j["state"] for j in world.mg("status", "--json").json()["jobs"]}
        assert states == {"stay": "running"}
    finally:
        _kill_all(_with(marker))
    _until(lambda: not _with(marker))
    late = world.run_once()
    (job,) = late.json()["jobs"]
    assert job["status"] == "lost" and "at most once" in job["reason"]
    assert len(world.events("started")) == 1 and len(world.events("finished")) == 1


def test_spool_entry_is_gone_only_when_its_processes_are(tmp_path: Path) -> None:
    from mergegate.audit.records import Finished
    from mergegate.execution.processes import ProcessId
    from mergegate.runner.spool import SpoolEntry

    record = Finished(run_id="r1")
    child = subprocess.Popen(["sleep", "30"], start_new_session=True)
    try:
        job = ProcessId.of(child.pid)
        assert job is not None
        entry = SpoolEntry(record, job, None)
        assert not entry.gone()
        assert not SpoolEntry(record, None, ProcessId.of(os.getppid())).gone()  # its runner lives
        assert SpoolEntry(record, ProcessId(job.pid, job.start, "another-boot"), None).gone()
    finally:
        child.kill()
        child.wait()
    assert entry.gone()


# -- defect 4: signals ---------------------------------------------------------------------


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_signal_to_run_once_gives_the_job_its_grace_then_kills_and_records_interrupted(
    world: World, sig: int
) -> None:
    _gate(world)
    marker = _marker()
    _merge_jobs(
        world,
        "p",
        {
            "a-long": ["sh", "-c", f"setsid sleep {marker} & sleep {marker}"],
            "b-next": ["echo", "b"],
        },
    )
    runner = _start_runner(world, "--once", "--json", "--shutdown-grace", "1")
    try:
        _until(lambda: len(_with(marker)) == 3)  # sh and its two sleeps
        os.kill(runner.pid, sig)
        signalled = time.monotonic()
        out, err = runner.communicate(timeout=15)
        elapsed = time.monotonic() - signalled
        assert not _with(marker)
    finally:
        _kill_all(_with(marker))
    assert 1.0 <= elapsed < 8.0, (elapsed, err)
    assert runner.returncode == 1, err
    assert [(j["job"], j["status"]) for j in json.loads(out)["jobs"]] == [("a-long", "interrupted")]
    lines = [line for line in err.splitlines() if line.startswith("stopped by")]
    assert lines == [
        f"stopped by {signal.Signals(sig).name}: no more jobs claimed, 1 interrupted, records "
        "pushed"
    ]
    (finished,) = world.events("finished")
    assert finished["status"] == "interrupted" and "--shutdown-grace=1s" in finished["reason"]
    assert [r["job"] for r in world.events("started")] == ["a-long"]  # b-next was not claimed
    # The next pass runs what was not claimed, and never the interrupted job again.
    nxt = world.run_once()
    assert [(j["job"], j["status"]) for j in nxt.json()["jobs"]] == [("b-next", "succeeded")]


def test_a_job_that_ends_within_the_grace_keeps_its_real_result(world: World) -> None:
    _gate(world)
    go = (
        world.tmp / "go"
    )  # the job ends only after the signal, however loaded the machine (at most 30 s)
    _merge_jobs(
        world,
        "p",
        {
            "short": [
                "sh",
                "-c",
                f"i=0; while [ ! -e {go} ] && [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; "
                "echo done",
            ]
        },
    )
    runner = _start_runner(world, "--once", "--json", "--shutdown-grace", "5")
    world.until_records(lambda: world.events("started"))
    time.sleep(0.3)
    os.kill(runner.pid, signal.SIGTERM)
    time.sleep(0.3)
    go.write_text("")
    _out, err = runner.communicate(timeout=15)
    assert runner.returncode == 0, err
    (finished,) = world.events("finished")
    assert (finished["status"], finished["stdout_tail"]) == ("succeeded", "done\n")
    assert "stopped by SIGTERM: no more jobs claimed, 0 interrupted, records pushed" in err


def test_sigterm_stops_the_poll_loop_the_same_way(world: World) -> None:
    _gate(world)
    marker = _marker()
    _merge_jobs(world, "p", {"long": ["sleep", marker]})
    runner = _start_runner(world, "--interval", "0.2", "--json", "--shutdown-grace", "0.5")
    try:
        _until(lambda: len(_with(marker)) == 1)
        os.kill(runner.pid, signal.SIGTERM)
        out, err = runner.communicate(timeout=15)
    finally:
        _kill_all(_with(marker))
    assert runner.returncode == 0, err
    objects = [json.loads(line) for line in out.splitlines()]  # one JSON object per line
    assert [o["event"] for o in objects] == ["pass"]
    assert (
        objects[0]["stopped_by"] == "SIGTERM" and objects[0]["jobs"][0]["status"] == "interrupted"
    )
    assert [r["status"] for r in world.events("finished")] == ["interrupted"]


# -- defect 3: one pass at a time per clone ---------------------------------------------------


def test_a_second_pass_in_the_same_clone_is_refused_naming_the_lock(world: World) -> None:
    _gate(world)
    go = world.tmp / "go"  # the job runs until the test says so
    _merge_jobs(
        world, "p", {"slow": ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done; exit 3"]}
    )
    first = _start_runner(world, "--once", "--json")
    world.until_records(lambda: world.events("started"))
    second = world.mg("run", "--once", "--json", "--lock-wait", "0.2")
    go.write_text("")
    first.communicate(timeout=30)
    assert second.code == 2
    assert "another mergegate pass holds this clone's lock" in second.err
    assert ".git/mergegate/run.lock" in second.err and "hint:" in second.err
    finished = world.events("finished")
    assert [(f["status"], f["exit_code"]) for f in finished] == [("failed", 3)]
    # Waiting works too: a pass that starts while one runs waits for it and then has nothing to do.
    assert world.run_once("--lock-wait", "10").json()["jobs"] == []


def test_verify_reports_two_finished_records_for_one_run(world: World) -> None:
    _gate(world)
    _merge_jobs(world, "p", {"j": ["echo", "j"]})
    assert world.run_once().code == 0
    # A second `finished` for the same run, appended through the runner's own code path,
    # as two passes in one clone used to write it.
    from mergegate.audit import log as audit
    from mergegate.facts import audit_commits as audit_branch
    from mergegate.git.repo import Repo

    clone = world.clone("runner")
    repo = Repo(clone)
    world.fetch("runner")
    tip = repo.rev("refs/remotes/origin/mergegate/audit")
    assert tip is not None
    approved = audit_branch.approved_of(repo.commit(tip))
    assert approved is not None
    (finished,) = world.events("finished")
    tail = audit.read_tail(repo, tip)
    draft = audit.draft(
        "finished",
        runner="runner",
        job="j",
        path=finished["path"],
        blob=finished["blob"],
        commit=finished["commit"],
        run_id=finished["run_id"],
        status="failed",
        exit_code=None,
        reason="again",
    )
    records = audit.seal([draft], after_seq=tail.last_seq, after_hash=tail.last_hash)
    sha = repo.write_commit(
        parent=tip,
        files=audit.append(repo, tip, tail, records),
        message=audit_branch.message("again", approved),
        author=("runner", "runner@mergegate.invalid"),
        signing=None,
    )
    world.git("runner", "push", "-q", "origin", f"{sha}:refs/heads/mergegate/audit")
    verified = world.mg("verify")
    assert verified.code == 3
    assert f"run {finished['run_id']} has 2 finished records" in verified.err
    audited = world.mg("audit", "verify")
    assert audited.code == 3 and f"run {finished['run_id']} has 2 finished records" in audited.err


# -- defect 1: safety writes fail loudly ------------------------------------------------------


def test_a_seen_ref_that_cannot_be_written_stops_the_pass_before_anything_runs(
    world: World,
) -> None:
    _gate(world)
    assert world.run_once().code == 0
    _merge_jobs(world, "p", {"j": ["echo", "j"]})
    lock = world.clone("runner") / ".git/refs/mergegate/seen/origin/approved.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    result = world.run_once()
    assert result.code == 2
    assert f"({lock})" in result.err and "refs/mergegate/seen/origin/approved" in result.err
    assert (
        "hint: another git process may be using the repository; if none is (one was killed), "
        f"remove it: rm '{lock}'" in result.err
    )
    assert world.events("started") == []
    lock.unlink()
    assert [j["status"] for j in world.run_once().json()["jobs"]] == ["succeeded"]


def test_a_spool_that_cannot_be_written_claims_nothing(world: World) -> None:
    _gate(world)
    _merge_jobs(world, "p", {"j": ["echo", "j"]})
    spool = world.clone("runner") / ".git/mergegate/spool/runner.jsonl"
    (spool.parent / "runner.jsonl.tmp").mkdir(parents=True)  # where the atomic write would go
    result = world.run_once()
    assert result.code == 2
    assert result.err.startswith(f"error: cannot write the spool: Is a directory ({spool})")
    assert world.events("started") == []


# -- defect 10: a torn spool line -------------------------------------------------------------


def test_a_torn_spool_line_is_set_aside_with_a_warning_and_the_pass_goes_on(world: World) -> None:
    _gate(world)
    _merge_jobs(world, "p", {"j": ["echo", "j"]})
    path = world.clone("runner") / ".git/mergegate/spool/runner.jsonl"
    path.parent.mkdir(parents=True)
    path.write_bytes(b'{"event": "finished", "run_id": "0123", "status": "fai')
    result = world.run_once()
    assert result.code == 0, result.err
    assert [j["status"] for j in result.json()["jobs"]] == ["succeeded"]
    assert (
        f"warning: spool {path}: line(s) 1 could not be read (a torn write?); moved to "
        f"{path}.corrupt" in result.err
    )
    assert b'"status": "fai' in Path(f"{path}.corrupt").read_bytes()
    assert not path.exists()
    assert world.run_once().code == 0


def test_the_spool_is_a_journal_a_change_appends_one_line_and_reading_keeps_each_runs_last_state(
    tmp_path: Path,
) -> None:
    """A change costs one appended line (and one fsync), not a rewrite of every entry (issue 12: the
    rewrite under a lock bounded --parallel); a fresh reader sees exactly what the writer holds."""
    import threading

    from mergegate.audit.records import Finished, parse
    from mergegate.runner.spool import COMPACT_SLACK, Spool, SpoolEntry

    def entry(run_id: str, *, done: bool = False, n: int = 0) -> SpoolEntry:
        record = parse({"event": "finished", "run_id": run_id, "n": n})
        assert isinstance(record, Finished)
        return SpoolEntry(record, None, None, done=done)

    spool = Spool(tmp_path / "s.jsonl")
    spool.put_many([entry("a"), entry("b")])  # created: an atomic write
    inode = spool.path.stat().st_ino
    spool.put(entry("a", done=True))
    spool.drop({"b"})
    spool.put(entry("c"))
    assert spool.path.stat().st_ino == inode  # appended to, never rewritten
    assert len(spool.path.read_bytes().splitlines()) == 5
    assert [(e.run_id, e.done) for e in Spool(spool.path).read()] == [("a", True), ("c", False)]
    # A line torn by a crash: each run keeps its last complete state.
    with open(spool.path, "ab") as f:
        f.write(b'{"done": true, "job": null, "record": {"event": "finished", "run_')
    fresh = Spool(spool.path)
    assert [(e.run_id, e.done) for e in fresh.read()] == [("a", True), ("c", False)]
    assert "could not be read (a torn write?)" in fresh.warnings[0]
    # Compacted once it holds more than twice its live entries plus the slack; removed once empty.
    for n in range(3 * COMPACT_SLACK):
        fresh.put(entry("c", n=n))
    assert len(fresh.path.read_bytes().splitlines()) <= 2 * 2 + COMPACT_SLACK + 1
    assert [(e.run_id, e.record.written("n")) for e in Spool(fresh.path).read()] == [
        ("a", 0),
        ("c", 3 * COMPACT_SLACK - 1),
    ]
    # Jobs in parallel report from their own threads: every state lands.
    threads = [
        threading.Thread(target=lambda k=k: [fresh.put(entry(f"t{k}", n=n)) for n in range(20)])
        for k in range(8)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert {e.run_id: e.record.written("n") for e in Spool(fresh.path).read()} == {
        "a": 0,
        "c": 3 * COMPACT_SLACK - 1,
        **{f"t{k}": 19 for k in range(8)},
    }
    fresh.drop({"a", "c", *(f"t{k}" for k in range(8))})
    assert not fresh.path.exists() and Spool(fresh.path).read() == []


def test_a_spool_line_the_disk_has_no_room_for_stops_the_pass_and_loses_no_state(
    tmp_path: Path,
) -> None:
    """A full disk (here a file size limit) writes part of a line: that is an error naming the
    spool, not a line torn in silence that the next append is glued to (and both set aside: the real
    result lost)."""
    script = f"""
import os, resource, signal
from pathlib import Path
from mergegate.errors import StateError
from mergegate.runner.spool import Spool, SpoolEntry
from mergegate.audit.records import parse
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
spool = Spool(Path({str(tmp_path / "s.jsonl")!r}))
record = {{"event": "finished", "run_id": "run-1", "status": "lost"}}
spool.put_many([SpoolEntry(parse(record), None, None)])
resource.setrlimit(resource.RLIMIT_FSIZE, (spool.path.stat().st_size + 40, resource.RLIM_INFINITY))
try:
    spool.put(SpoolEntry(parse({{**record, "reason": "x" * 200}}), None, None))
    print("no error")
except StateError as exc:
    print("error:", exc.message, exc.file)
resource.setrlimit(resource.RLIMIT_FSIZE, (resource.RLIM_INFINITY, resource.RLIM_INFINITY))
spool.put(SpoolEntry(parse({{**record, "status": "succeeded"}}), None, None, done=True))
"""
    proc = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert (
        proc.stdout.strip()
        == "error: cannot write the spool: the file would be over the file size limit (File too "
        f"large) {tmp_path / 's.jsonl'}"
    )
    from mergegate.runner.spool import Spool

    fresh = Spool(tmp_path / "s.jsonl")
    assert [(e.run_id, e.record.status, e.done) for e in fresh.read()] == [
        ("run-1", "succeeded", True)
    ]


def test_spool_survives_any_bytes(tmp_path: Path) -> None:
    from mergegate.audit.records import Finished
    from mergegate.runner.spool import Spool, SpoolEntry

    spool = Spool(tmp_path / "s.jsonl")
    good = SpoolEntry(Finished(run_id="ok"), None, None, done=True)
    spool.write([good])
    with open(spool.path, "ab") as f:
        f.write(b"\xff\xfe[1,2]\n{}\n\n" + b'{"record": {"event": "finished"}}\n')
    assert [e.run_id for e in spool.read()] == ["ok"]
    assert len(spool.warnings) == 1 and "line(s) 2, 3, 5" in spool.warnings[0]
    assert [e.run_id for e in Spool(spool.path).read()] == ["ok"]  # set aside once, not again


# -- defect 7: locks the runner does not need, and locks named --------------------------------


def test_a_stale_commit_graph_lock_does_not_stop_the_runner(world: World) -> None:
    _gate(world)
    assert world.run_once().code == 0
    _merge_jobs(world, "p", {"j": ["echo", "j"]})
    graphs = world.clone("runner") / ".git/objects/info/commit-graphs"
    graphs.mkdir(parents=True, exist_ok=True)
    (graphs / "commit-graph-chain.lock").write_text("")
    (world.clone("runner") / ".git/objects/info/commit-graph.lock").write_text("")
    result = world.run_once()
    assert result.code == 0, result.err
    assert [j["status"] for j in result.json()["jobs"]] == ["succeeded"]
    assert not (
        world.clone("runner") / ".git/FETCH_HEAD"
    ).exists()  # the runner's fetches write none
    assert not list(graphs.glob("*.graph"))


def test_a_stale_ref_lock_is_named_with_a_hint(world: World) -> None:
    _gate(world)
    assert world.run_once().code == 0
    _merge_jobs(world, "p", {"j": ["echo", "j"]})
    lock = world.clone("runner") / ".git/refs/remotes/origin/approved.lock"
    lock.write_text("")
    result = world.run_once()
    assert result.code == 2
    first = result.err.splitlines()[0]
    assert first == f"error: git fetch origin failed: a lock is in the way ({lock})"
    assert f"rm '{lock}'" in result.err
    assert world.events("started") == []


# -- defect 9 (part): outages in the poll loop ------------------------------------------------


def test_backoff_grows_with_jitter_is_capped_and_resets() -> None:
    import random

    from mergegate.runner.backoff import Backoff

    b = Backoff(base=1.0, cap=8.0, rng=random.Random(7))
    delays = [b.failed() for _ in range(6)]
    for n, delay in enumerate(delays, start=1):
        step = min(8.0, 2.0 ** (n - 1))
        assert step / 2 <= delay <= step
    assert len({round(d, 6) for d in delays}) == 6  # jittered
    assert b.failures == 6
    b.reset()
    assert b.failures == 0 and b.failed() <= 1.0


def test_an_unreachable_remote_is_one_line_with_its_cause_and_one_on_recovery(world: World) -> None:
    _gate(world)
    assert world.run_once().code == 0
    moved = world.tmp / "remote-away.git"
    world.remote.rename(moved)
    trace = world.tmp / "git-trace"
    runner = _start_runner(
        world, "--interval", "0.1", "--max-backoff", "0.1", env={"GIT_TRACE": str(trace)}
    )
    try:
        # Counted, not slept: however slow the machine, the runner has failed a dozen polls
        # (each asks ls-remote first) before the remote comes back. The backoff is capped at the
        # interval: how it grows is test_backoff_grows_with_jitter_is_capped_and_resets's question.
        _until(lambda: _git_calls(trace, "ls-remote") >= 12, timeout=120)
        moved.rename(world.remote)
        _merge_jobs(world, "p", {"after": ["echo", "after"]})
        world.until_records(lambda: world.events("finished"), timeout=30)
    finally:
        runner.send_signal(signal.SIGTERM)
        _out, err = runner.communicate(timeout=15)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert "does not appear to be a git repository" in errors[0]
    assert "retrying with backoff" in err and ".git/mergegate/spool/runner.jsonl" in err
    assert len([line for line in err.splitlines() if line.startswith("recovered after")]) == 1
    assert [r["status"] for r in world.events("finished")] == ["succeeded"]


def _read_until(
    proc: subprocess.Popen[str], done: Callable[[list[str]], bool], timeout: float = 30.0
) -> str:
    """What `proc` printed on stdout, read unbuffered (communicate() gets the rest) until `done`
    holds for its whole lines."""
    assert proc.stdout is not None
    fd, data, deadline = proc.stdout.fileno(), b"", time.monotonic() + timeout
    while not done(
        [
            line
            for line in data.decode(errors="replace").splitlines(keepends=True)
            if line.endswith("\n")
        ]
    ):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out waiting for {done}: {data!r}")
        if select.select([fd], [], [], left)[0]:
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError(f"stdout closed before {done}: {data!r}")
            data += chunk
    return data.decode(errors="replace")


def test_loop_json_is_one_object_per_line(world: World) -> None:
    _gate(world)
    world.clone("runner")
    away = world.tmp / "away.git"
    world.remote.rename(away)
    trace = world.tmp / "git-trace"
    runner = _start_runner(
        world, "--interval", "0.1", "--max-backoff", "0.2", "--json", env={"GIT_TRACE": str(trace)}
    )
    seen = _read_until(runner, lambda lines: len(lines) >= 1)  # the outage, once
    _until(
        lambda: _git_calls(trace, "ls-remote") >= 6, timeout=60
    )  # and five more failed polls, said nothing
    away.rename(world.remote)
    seen += _read_until(
        runner, lambda lines: any(json.loads(line)["event"] == "pass" for line in lines[1:])
    )
    runner.send_signal(signal.SIGINT)
    out, _err = runner.communicate(timeout=15)
    objects = [json.loads(line) for line in (seen + out).splitlines()]
    events = [o["event"] for o in objects]
    assert events[0] == "outage" and events.count("outage") == 1 and "recovered" in events
    assert "pass" in events
    outage = objects[0]
    assert outage["spool"].endswith(".git/mergegate/spool/runner.jsonl")
    assert "does not appear to be a git repository" in outage["detail"]


# -- defect 2: a claim the remote accepted is a claim --------------------------------------


def test_a_claim_the_remote_accepted_runs_though_the_tracking_ref_cannot_follow(
    world: World,
) -> None:
    _gate(world)
    assert world.run_once().code == 0
    clone = world.clone("runner")
    lock = clone / ".git/refs/remotes/origin/mergegate/audit.lock"
    ran = world.tmp / "b-ran"
    # Job a leaves a stale lock on the tracking ref after the pass fetched (as a git process
    # killed at that moment would); job b's claim is then accepted by the remote.
    _merge_jobs(
        world, "p", {"a": ["sh", "-c", f"touch {lock}"], "b": ["sh", "-c", f"touch {ran}; echo b"]}
    )
    first = world.run_once()
    assert ran.exists(), first.err  # the accepted claim was run
    assert str(lock) in first.err
    lock.unlink()
    second = world.run_once()
    assert second.code == 0, second.err
    finished = {r["job"]: r for r in world.events("finished")}
    assert finished["b"]["status"] == "succeeded" and finished["b"]["stdout_tail"] == "b\n"
    assert len(world.events("started")) == 2


# -- the poll loop asks ls-remote first; an idle poll writes nothing -------------------------


def _snapshot(root: Path) -> dict[str, tuple[int, int]]:
    return {
        str(p): (p.stat().st_mtime_ns, p.stat().st_size) for p in root.rglob("*") if p.is_file()
    }


def test_an_idle_poll_writes_nothing_and_a_moved_ref_is_still_seen(world: World) -> None:
    _gate(world)
    assert world.run_once().code == 0
    git_dir = world.clone("runner") / ".git"
    lock = git_dir / "mergegate/run.lock"
    taken = lock.stat().st_mtime_ns if lock.exists() else None
    trace = world.tmp / "git-trace"
    runner = _start_runner(world, "--interval", "0.1", env={"GIT_TRACE": str(trace)})
    try:
        # The loop's first pass ran: it took the pass lock (or, before issue 9, wrote FETCH_HEAD).
        _until(
            lambda: (
                (lock.exists() and lock.stat().st_mtime_ns != taken)
                or (git_dir / "FETCH_HEAD").exists()
            )
        )
        # Counted, not slept: at three ls-remote calls, two polls at least began after the first
        # pass.
        _until(lambda: _git_calls(trace, "ls-remote") >= 3)
        before = _snapshot(git_dir)
        polls = _git_calls(trace, "ls-remote")
        _until(lambda: _git_calls(trace, "ls-remote") >= polls + 12)  # a dozen idle polls
        assert _snapshot(git_dir) == before
        _merge_jobs(world, "p", {"j": ["echo", "j"]})
        world.until_records(lambda: world.events("finished"), timeout=30)
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.communicate(timeout=15)
    assert [r["status"] for r in world.events("finished")] == ["succeeded"]


# -- defect 6: leases ------------------------------------------------------------------------


def test_a_dead_runners_job_is_closed_as_lost_by_another_runner_after_its_lease(
    world: World,
) -> None:
    world.setup(
        policy_yaml(
            [world.bob.approver_entry()],
            RULES,
            limits={"max_timeout_seconds": 60, "kill_grace_seconds": 0.5},
        )
    )
    marker = _marker()
    world.propose(
        "p", {"jobs/s.yaml": job_yaml("s", ["sleep", marker], timeout_seconds=2)}, who=world.alice
    )
    world.signed_merge("p", world.bob)
    # Lease: 2 + 0.5 + 2 + 5 s. The test waits it out, so it is short; what runs before it ends
    # (the kill, an early pass, two status calls) took 1.5 s at load 5, well inside it.
    runner = _start_runner(world, "--once", "--runner-name", "a", "--shutdown-grace", "2")
    try:
        _until(lambda: _with(marker))
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        _until(lambda: not _with(marker), timeout=1.0)
    finally:
        _kill_all(_with(marker))
    (started,) = world.events("started")
    assert started["lease"]["holder"] == "a"
    # Another runner, in a fresh clone, with another name: before the lease ends, it waits.
    early = world.mg("run", "--once", "--json", "--runner-name", "b", where="elsewhere")
    assert early.code == 0 and [
        (j["job"], j["status"], j["reason"]) for j in early.json()["jobs"]
    ] == [("s", "claimed", "claimed by a")]
    shown = world.mg("status", "--json", where="elsewhere").json()["jobs"]
    assert [(j["state"], j["runner"], j["lease_until"]) for j in shown] == [
        ("running", "a", started["lease"]["until"])
    ]
    assert shown[0]["age_seconds"] >= 0
    human = world.mg("status", where="elsewhere").out
    assert "  runner a, " in human and f"s, lease until {started['lease']['until']}" in human
    until = datetime.fromisoformat(started["lease"]["until"].replace("Z", "+00:00"))
    time.sleep(max(0.0, (until - datetime.now(UTC)).total_seconds()) + 0.5)
    late = world.mg("run", "--once", "--json", "--runner-name", "b", where="elsewhere")
    (job,) = late.json()["jobs"]
    assert job["status"] == "lost" and "the lease of a expired" in job["reason"]
    assert [r["status"] for r in world.events("finished")] == ["lost"]
    assert len(world.events("started")) == 1  # never run again
    again = world.mg("run", "--once", "--json", "--runner-name", "b", where="elsewhere")
    assert again.json()["jobs"] == []
    assert world.mg("verify", where="elsewhere").code == 0


# -- defect 8: a lost claim race is not a failure -------------------------------------------


def test_runners_that_lose_claim_races_exit_0_and_say_claimed_by(world: World) -> None:
    _gate(world)
    _merge_jobs(world, "p", {f"j{i}": ["echo", str(i)] for i in range(8)})
    names = ["r1", "r2", "r3", "r4"]
    for name in names:
        world.clone(name)
    procs = [
        _start_runner(world, "--once", "--json", "--runner-name", name, where=name)
        for name in names
    ]
    results = [p.communicate(timeout=180) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], results
    outcomes = [j for out, _ in results for j in json.loads(out)["jobs"]]
    assert {j["status"] for j in outcomes} <= {"succeeded", "claimed"}
    claimed = [j for j in outcomes if j["status"] == "claimed"]
    assert claimed, "no race happened: the test did not reach the rule"
    assert all(j["reason"] in {f"claimed by {n}" for n in names} for j in claimed)
    started = world.events("started")
    assert sorted(r["job"] for r in started) == sorted(f"j{i}" for i in range(8))
    assert sorted(r["job"] for r in world.events("finished")) == sorted(f"j{i}" for i in range(8))
    assert world.events("rejected") == []


# -- PR_SET_CHILD_SUBREAPER: an unprivileged runner without the sandbox leaves nothing behind -----


def _unprivileged_python() -> tuple[list[str], dict[str, str]]:
    """How to run Python as an unprivileged user (uid 65534, no cgroup it could write) with this
    checkout's code: setpriv when the tests run as root, else the current user if it has no
    writable cgroup either. Skips where neither is possible (the case would not reach the gap)."""
    from tests.helpers.readable import for_others

    root = Path(__file__).resolve().parents[2]
    # uid 65534 must reach the code wherever the checkout is (a 0700 /root included): there it
    # is a readable copy, and the cases run rather than skip (issue 22, item 7).
    site = [p for p in sys.path if p.endswith("site-packages")]
    path = os.pathsep.join(
        [
            str(for_others(root / "tests").parent),
            str(for_others(root / "src")),
            *(str(for_others(Path(p))) for p in site),
        ]
    )
    env = {"PATH": "/usr/bin:/bin", "HOME": "/tmp", "PYTHONPATH": path, "LC_ALL": "C"}
    if os.geteuid() != 0:
        from mergegate.execution.processes import make_cgroup

        probe = make_cgroup("probe", None)
        if probe is not None:
            probe.rmdir()
            pytest.skip(
                "this user can write a cgroup: the job would be caught by it, not reach the gap"
            )
        return [sys.executable], env
    if shutil.which("setpriv") is None:
        pytest.skip("running as root without setpriv: no unprivileged user to run the runner as")
    # The interpreter must also start itself as that user (the watchdog is `sys.executable -m ...`).
    check = (
        "import subprocess, sys, mergegate.execution.executor, tests.helpers.escape_job; "
        "subprocess.run([sys.executable, '-c', ''], check=True)"
    )
    for python in (os.path.realpath(sys.executable), "/usr/bin/python3"):
        prefix = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", python]
        probe = subprocess.run([*prefix, "-c", check], env=env, cwd="/tmp", capture_output=True)
        if probe.returncode == 0:
            return prefix, env
    pytest.skip("uid 65534 cannot read this checkout or an interpreter for it")


@pytest.fixture
def helper_workspace() -> Iterator[Path]:
    """The helper's job workspace, removed after the test however the helper ended (killed, it could
    not). Under /tmp, owned by the helper's uid: pytest's tmp_path is not reachable for uid 65534.
    """
    import tempfile

    made = Path(tempfile.mkdtemp(prefix="mergegate-test-workspace-", dir="/tmp"))
    try:
        if os.geteuid() == 0:
            os.chown(made, 65534, 65534)
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)


def _sleeping(marker: str) -> list[int]:
    """The escaped `sleep MARKER` itself (not the shell whose command line names it too)."""
    return [
        pid
        for pid in _with(marker)
        if Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0] == b"sleep"
    ]


@pytest.mark.parametrize("mode", ["ends", "times-out"])
def test_a_setsid_grandchild_of_an_unprivileged_job_dies_with_the_job(
    mode: str, helper_workspace: Path
) -> None:
    prefix, env = _unprivileged_python()
    marker = _marker()
    try:
        proc = subprocess.run(
            [*prefix, "-m", "tests.helpers.escape_job", mode, marker, str(helper_workspace)],
            env=env,
            cwd="/tmp",
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        assert json.loads(proc.stdout)["status"] == ("succeeded" if mode == "ends" else "timed_out")
        assert _with(marker) == []  # gone when the job's result is known, not later
    finally:
        _kill_all(_with(marker))


def test_a_setsid_grandchild_of_an_unprivileged_job_dies_with_its_killed_runner(
    helper_workspace: Path,
) -> None:
    prefix, env = _unprivileged_python()
    marker = _marker()
    runner = subprocess.Popen(
        [*prefix, "-m", "tests.helpers.escape_job", "runs", marker, str(helper_workspace)],
        env=env,
        cwd="/tmp",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        _until(lambda: _sleeping(marker))
        (escaped,) = _sleeping(marker)
        # Reparented to the job's main process (a subreaper), not to init: still the job's
        # descendant.
        _until(
            lambda: (
                int(Path(f"/proc/{escaped}/stat").read_text().rpartition(")")[2].split()[1]) != 1
            ),
            timeout=1.0,
        )
        time.sleep(0.3)  # a few of the tracker's scans: the watchdog has been told of it
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        _until(lambda: not _with(marker), timeout=2.0, step=0.02)
    finally:
        runner.kill()
        runner.wait()
        _kill_all(_with(marker))


def test_a_runner_killed_right_after_the_fork_leaves_no_process_of_the_job_alive(
    helper_workspace: Path,
) -> None:
    """No cgroup, and the runner busy (another thread holds the GIL): the job starts a child and
    kill -9s its runner at once, before the runner could tell its watchdog anything after the fork.
    The spawner told the watchdog of the job's process group before the job could exec."""
    prefix, env = _unprivileged_python()
    marker = _marker()
    runner = subprocess.Popen(
        [*prefix, "-m", "tests.helpers.spawn_job", "kill-runner", marker, str(helper_workspace)],
        env=env,
        cwd="/tmp",
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert runner.wait(timeout=60) == -signal.SIGKILL, (
            runner.stderr.read() if runner.stderr else ""
        )
        killed = time.monotonic()
        _until(lambda: not _with(marker), timeout=1.0, step=0.02)
        assert time.monotonic() - killed < 1.0
    finally:
        runner.kill()
        runner.wait()
        _kill_all(_with(marker))


def test_no_helper_of_an_unprivileged_runner_shows_a_job_the_runners_environment(
    helper_workspace: Path,
) -> None:
    """A same-user job may read /proc/<pid>/environ of every dumpable process of its user: its
    parent (the spawner) and the watchdog carry none of the runner's environment."""
    prefix, env = _unprivileged_python()
    secret = f"canary-{uuid.uuid4().hex}"
    proc = subprocess.run(
        [*prefix, "-m", "tests.helpers.spawn_job", "environ", _marker(), str(helper_workspace)],
        env={**env, "RUNNER_CANARY": secret},
        cwd="/tmp",
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout)
    assert result["status"] == "succeeded"
    assert "RUNNER_PID=" in result["stdout"]  # it did read environments (its own)
    assert secret not in result["stdout"]


# -- defect 9 (rest): a refused push reuses the pending commit; disk stays bounded --------------


def _refusing_remote(world: World, block: Path, tally: Path) -> None:
    """A pre-receive hook that refuses every push to the audit branch while `block` exists, counting
    each refusal."""
    hook = world.remote / "hooks" / "pre-receive"
    hook.write_text(
        '#!/bin/sh\nwhile read old new ref; do\n  if [ "$ref" = refs/heads/mergegate/audit ] && [ '
        f"-e {block} ]; then\n"
        f"    echo refused >> {tally}; echo 'remote is read-only' >&2; exit 1\n  fi\ndone\n"
    )
    hook.chmod(0o755)


def _refusals(tally: Path) -> int:
    return len(tally.read_text().splitlines()) if tally.exists() else 0


def _loose_objects(clone: Path) -> int:
    out = subprocess.run(
        ["git", "count-objects", "-v"], cwd=clone, capture_output=True, text=True, check=True
    ).stdout
    return int(next(line.split()[1] for line in out.splitlines() if line.startswith("count:")))


def _pending(clone: Path) -> str:
    return subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", "refs/mergegate/pending/runner"],
        cwd=clone,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_a_refused_result_push_reuses_one_pending_commit_so_disk_stays_bounded(
    world: World,
) -> None:
    _gate(world)
    block, tally = world.tmp / "block", world.tmp / "tally"
    _refusing_remote(world, block, tally)
    # The job itself closes the remote between its claim and its result.
    _merge_jobs(world, "p", {"close": ["sh", "-c", f"echo 1 > {block}"]})
    clone = world.clone("runner")
    runner = _start_runner(world, "--interval", "0.1", "--max-backoff", "0.1")
    try:
        _until(lambda: _refusals(tally) >= 2, timeout=60)
        early, pending = _loose_objects(clone), _pending(clone)
        assert pending
        _until(lambda: _refusals(tally) >= 10, timeout=60)
        # Eight more refused pushes of the same records: the same commit each time, no new objects.
        assert _pending(clone) == pending
        assert _loose_objects(clone) <= early + 1
        block.unlink()
        world.until_records(lambda: world.events("finished"), timeout=120)
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.communicate(timeout=15)
    assert [r["status"] for r in world.events("finished")] == ["succeeded"]
    assert len(world.events("started")) == 1
    assert _pending(clone) == ""
    assert world.mg("audit", "verify").code == 0


def test_refused_claims_in_the_poll_loop_leave_one_pending_commit_on_disk(world: World) -> None:
    """A claim is never reused (its lease counts from the push); each new attempt's commit
    replaces the refused one, whose objects are deleted: one full copy of the log, not one per
    poll."""
    _gate(world)
    _merge_jobs(world, "p", {f"j{i}": ["echo", str(i)] for i in range(20)})  # a log of some size
    assert world.run_once().code == 0
    block, tally = world.tmp / "block", world.tmp / "tally"
    _refusing_remote(world, block, tally)
    block.write_text("1")
    _merge_jobs(world, "q", {"later": ["echo", "later"]})
    clone = world.clone("runner")
    runner = _start_runner(world, "--interval", "0.1", "--max-backoff", "0.1")
    try:
        _until(lambda: _refusals(tally) >= 2, timeout=60)
        early = _loose_objects(clone)
        _until(
            lambda: _refusals(tally) >= 8, timeout=60
        )  # each attempt a new claim: +4 objects each without the fix
        # At most one attempt's commit more than before (the one being pushed when counted):
        # bounded, where six more attempts would have left 24 more objects.
        assert _loose_objects(clone) <= early + 5
        block.unlink()
        world.until_records(lambda: len(world.events("finished")) == 21, timeout=120)
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.communicate(timeout=15)
    assert len(world.events("started")) == 21
    assert _pending(clone) == ""
