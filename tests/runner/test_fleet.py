"""Many runners and `--parallel` (issue 9): the claim protocol, real runners racing on one
remote."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

from mergegate.runner.claims import offset
from mergegate.runner.publisher import FRESH_SECONDS
from tests.git.test_ref_shadowing import _forge
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml
from tests.runner.test_reliability import (
    _kill_9_and_see_the_jobs_die,
    _kill_all,
    _marker,
    _start_runner,
    _until,
    _with,
)

RULES = [ECHO_RULE, {"program": "sh", "args_prefix": ["-c"]}, {"program": "sleep"}]


def _gate(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], RULES))


def _merge(world: World, jobs: dict[str, list[str]]) -> None:
    world.propose(
        "p",
        {f"jobs/{name}.yaml": job_yaml(name, command) for name, command in jobs.items()},
        who=world.alice,
    )
    world.signed_merge("p", world.bob)


def _once_each(world: World, names: list[str]) -> None:
    started = Counter(r["job"] for r in world.events("started"))
    finished = Counter(r["job"] for r in world.events("finished"))
    assert started == Counter(names), started
    assert finished == Counter(names), finished
    assert {r["status"] for r in world.events("finished")} == {"succeeded"}


def test_four_runners_share_a_merge_each_job_exactly_once_and_everything_verifies(
    world: World,
) -> None:
    _gate(world)
    names = [f"j{i:02d}" for i in range(24)]
    _merge(world, {name: ["echo", name] for name in names})
    runners = ["r1", "r2", "r3", "r4"]
    for name in runners:
        world.clone(name)
    procs = [
        _start_runner(world, "--once", "--json", "--runner-name", name, where=name)
        for name in runners
    ]
    results = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0, 0], results
    _once_each(world, names)
    # Every runner accounts for every job: ran it, or says who claimed it.
    for (out, _err), name in zip(results, runners, strict=True):
        jobs = json.loads(out)["jobs"]
        assert sorted(j["job"] for j in jobs) == names
        assert all(
            j["status"] == "succeeded"
            or (j["status"] == "claimed" and j["reason"].startswith("claimed by r"))
            for j in jobs
        )
        ran = {j["job"] for j in jobs if j["status"] == "succeeded"}
        assert ran == {r["job"] for r in world.events("started") if r["runner"] == name}
    assert world.mg("audit", "verify").code == 0
    verified = world.mg("verify", where="admin")
    assert verified.code == 0, verified.err


def test_a_merge_landing_mid_run_neither_hides_its_claim_from_a_later_runner_nor_stops_it(
    world: World, tmp_path: Path
) -> None:
    """r2 plans after r1's claim landed: planning leaves that job out of what to run, and the pass
    still says who has it (the fleet test above met this at random: a runner that planned after r1's
    claim of j16 landed said nothing of j16). r1 then reads r2's records, judged at a merge that
    landed after r1 planned: they are not tampering (r1 checked them against its first look at
    approved's line, and stopped with exit
    3)."""
    _gate(world)
    go = tmp_path / "go"
    _merge(world, {"slow": ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done"]})
    world.clone("r1")
    world.clone("r2")
    first = _start_runner(world, "--once", "--json", "--runner-name", "r1", where="r1")
    try:
        _until(lambda: world.events("started") != [], timeout=120)
        _merge(
            world, {"quick": ["echo", "quick"]}
        )  # after r1 planned: r2 has both merges to walk, r1 one
        second = world.mg("run", "--once", "--json", "--runner-name", "r2", where="r2")
        assert second.code == 0, second.err
        assert sorted((j["job"], j["status"], j["reason"]) for j in second.json()["jobs"]) == [
            ("quick", "succeeded", None),
            ("slow", "claimed", "claimed by r1"),
        ]
    finally:
        go.touch()
        out, err = first.communicate(timeout=120)
    assert first.returncode == 0, err
    assert [(j["job"], j["status"]) for j in json.loads(out)["jobs"]] == [("slow", "succeeded")]
    _once_each(world, ["quick", "slow"])


def _side_merge(world: World, name: str) -> str:
    """A proposal brought up to date with `git merge origin/approved`, signed-merged: its head is a
    side commit."""
    p = world.clone("proposer")
    world.git(p, "fetch", "-q", "origin")
    world.git(p, "checkout", "-q", "-B", name, "origin/approved~1")
    world.write("proposer", {f"jobs/{name}.yaml": job_yaml(name, ["echo", name])})
    world.git(p, "add", "-A")
    world.git(p, "commit", "-q", "-m", f"add {name}", who=world.alice)
    world.git(p, "merge", "-q", "--no-edit", "origin/approved", who=world.alice)
    side = world.git(p, "rev-parse", "HEAD")
    world.git(p, "push", "-q", "-f", "origin", name)
    world.signed_merge(name)
    return side


def test_a_side_commit_trailer_pushed_mid_pass_stops_the_pass(world: World, tmp_path: Path) -> None:
    """The checker re-read for a newer approved (above) still calls a trailer naming a merged side
    commit tampering."""
    _gate(world)
    go = tmp_path / "go"
    _merge(world, {"slow": ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done"]})
    world.clone("runner")
    runner = _start_runner(world, "--once", "--json", "--runner-name", "r1", where="runner")
    try:
        _until(lambda: world.events("started") != [], timeout=120)
        side = _side_merge(
            world, "k"
        )  # approved moves during the pass; `side` is on it through a second parent
        _forge(
            world,
            {
                "event": "started",
                "job": "k",
                "path": "jobs/k.yaml",
                "blob": world.blob("approved", "jobs/k.yaml"),
                "commit": world.git(
                    "proposer", "ls-remote", "origin", "refs/heads/approved"
                ).split()[0],
                "run_id": "e" * 32,
                "runner": "r9",
            },
            trailer=side,
        )
    finally:
        go.touch()
        out, err = runner.communicate(timeout=180)
    assert runner.returncode == 3, (out, err)
    assert "first-parent line" in err, err


def test_a_veto_merged_before_a_queued_claims_process_starts_stops_it(
    world: World, tmp_path: Path
) -> None:
    """A job claimed ahead of a free slot waits; a veto merged meanwhile stops it before its process
    starts."""
    _gate(world)
    go, marker = tmp_path / "go", tmp_path / "victim.ran"
    jobs = {f"a{i:02d}": ["echo", str(i)] for i in range(12)}
    running = tmp_path / "b12.running"
    jobs["b12"] = [
        "sh",
        "-c",
        f"touch {running}; while [ ! -e {go} ]; do sleep 0.02; done",
    ]  # the claims behind it wait
    jobs["c13"] = ["sh", "-c", f"touch {marker}"]
    jobs["d14"], jobs["d15"] = ["echo", "14"], ["echo", "15"]
    name = next(
        f"solo{i}" for i in range(1000) if offset(f"solo{i}", len(jobs)) == 0
    )  # walks the list in order
    world.propose("p", {f"jobs/{n}.yaml": job_yaml(n, c) for n, c in jobs.items()}, who=world.alice)
    world.signed_merge("p", world.bob)
    blob = world.blob("approved", "jobs/c13.yaml")
    runner = _start_runner(world, "--once", "--json", "--runner-name", name, where="runner")
    try:
        # c13 is claimed (its `started` is on the remote) and b12 runs; c13's process has not
        # started.
        _until(
            lambda: running.exists() and any(r["job"] == "c13" for r in world.events("started")),
            timeout=180,
        )
        since = time.monotonic()
        assert not marker.exists()
        veto = world.veto_commit("jobs/c13.yaml", blob, world.bob)
        world.git("approver", "push", "-q", "origin", "approved")
        assert not marker.exists()
        # The runner's last look at the branches was before b12 started; it looks again before a
        # start when that look is older than FRESH_SECONDS (a veto cannot be seen sooner than it
        # lands).
        time.sleep(max(0.0, FRESH_SECONDS + 0.2 - (time.monotonic() - since)))
    finally:
        go.touch()
        out, _err = runner.communicate(timeout=180)
    said = {j["job"]: (j["status"], j["reason"]) for j in json.loads(out)["jobs"]}
    assert runner.returncode == 1, said  # a job that did not run as approved is not a success
    # Before: c13 succeeded, its process started after the veto landed on approved.
    assert not marker.exists()
    assert said["c13"] == (
        "vetoed",
        f"vetoed by bob in commit {veto[:7]} after it was claimed; it was not started",
    ), said
    assert [r["status"] for r in world.events("finished") if r["job"] == "c13"] == ["vetoed"]
    assert world.mg("verify", where="admin").code == 0


def test_runners_start_on_different_parts_of_the_runnable_list() -> None:
    from mergegate.runner.claims import offset, spread

    items = list(range(100))
    starts = {spread(items, name)[0] for name in ("r1", "r2", "r3", "r4")}
    assert len(starts) == 4
    assert all(
        spread(items, name) == items[offset(name, 100) :] + items[: offset(name, 100)]
        for name in ("r1", "ci-7")
    )


def test_a_runner_meeting_others_claims_jumps_to_the_middle_of_the_longest_free_stretch() -> None:
    """Following the other runner it met, a runner would lose every later claim to it (a push each
    for nothing)."""
    from mergegate.runner.claims import jump

    items = list(range(12))
    taken = [
        k in (0, 1, 6, 11) for k in items
    ]  # free: 2-5 (4 jobs) and 7-10 (4 jobs): the first longest
    assert jump(items, taken) == [4, 5, 7, 8, 9, 10, 2, 3]
    assert jump(items, [k in (0, 3) for k in items]) == [8, 9, 10, 11, 1, 2, 4, 5, 6, 7]
    assert jump([1, 2, 3], [True, True, True]) == []


def test_while_jobs_are_short_a_runner_claims_at_least_a_fair_share_of_what_nobody_claimed() -> (
    None
):
    from mergegate.runner.claims import MAX_BATCH, BatchSize

    size = BatchSize(1)
    assert size.target(untaken=99, runners=1) == 1  # nothing ended yet: one claim at a time
    size.ended(0.01)
    assert size.short and size.size == 2
    assert (
        size.target(untaken=99, runners=1) == 50
    )  # alone so far: half, for a runner that may come
    assert size.target(untaken=99, runners=3) == 25
    assert size.target(untaken=1000, runners=1) == MAX_BATCH
    assert size.target(untaken=1, runners=3) == 2  # never below the doubling batch
    size.ended(5.0)  # a long job: one at a time again, whatever is left
    assert not size.short and size.target(untaken=99, runners=1) == 1


def test_with_more_slots_a_runner_holds_more_claims_so_a_push_claims_as_many_per_slot() -> None:
    """--parallel 8 on trivial jobs: up to 16 rounds of its slots (128 claims) where one slot holds
    MAX_BATCH (64); about ten pushes for a thousand jobs, not twenty (issue 12)."""
    from mergegate.runner.claims import MAX_BATCH, SLOT_ROUNDS, BatchSize

    assert BatchSize(1).cap == BatchSize(2).cap == MAX_BATCH == 64
    size = BatchSize(8)
    assert size.target(untaken=1000, runners=1) == 8  # nothing ended yet: one claim per slot
    size.ended(0.01, push_seconds=0.05)
    assert size.target(untaken=1000, runners=1) == SLOT_ROUNDS * 8 == 128
    assert size.target(untaken=1000, runners=3) == 128
    assert size.target(untaken=100, runners=1) == 50
    for _ in range(10):
        size.ended(0.01, push_seconds=0.05)
    assert size.size == 128


def test_the_book_says_which_runners_hold_any_of_a_passs_revisions() -> None:
    """BatchSize.target's count of runners, kept as records are added (counting it from every record
    at each turn of the claim loop made job #1,000 of a merge cost more than job #1 with --parallel
    8)."""
    from mergegate.audit.records import Started
    from mergegate.runner.claims import Book

    def started(runner: str, path: str, attempt: int = 1) -> Started:
        return Started(runner=runner, path=path, blob="b" * 40, attempt=attempt)

    book = Book.of(
        [started("r1", "jobs/a.yaml"), started("r2", "jobs/b.yaml"), started("r3", "jobs/old.yaml")]
    )
    book.add([started("r4", "jobs/a.yaml", attempt=2)])
    ours = {("jobs/a.yaml", "b" * 40), ("jobs/b.yaml", "b" * 40)}
    assert book.runners(ours) == {"r1", "r2", "r4"}
    assert book.runners({("jobs/none.yaml", "b" * 40)}) == set()


def test_parallel_runs_jobs_at_once_with_their_claims_in_one_push(
    world: World, tmp_path: Path
) -> None:
    """Four jobs that each wait until all four have started: only concurrent runs can all
    succeed."""
    _gate(world)
    meeting = tmp_path / "meeting"
    meeting.mkdir()
    wait_for_all = (
        f"touch {meeting}/$MERGEGATE_JOB_ID; i=0; while [ $(ls {meeting} | wc -l) -lt 4 ]; do "
        "sleep 0.05; i=$((i+1)); [ $i -gt 600 ] && exit 1; done; exit 0"
    )
    names = ["a", "b", "c", "d"]
    _merge(world, {name: ["sh", "-c", wait_for_all] for name in names})
    result = world.run_once("--parallel", "4")
    assert result.code == 0, result.err
    _once_each(world, names)
    # One push claimed all four (before any started); one more brought the four results.
    log = world.git(
        "admin", "log", "--reverse", "--format=%s", "origin/mergegate/audit"
    ).splitlines()
    assert log[0].endswith("(4 started)"), log
    assert len(log) == 2, log
    runs = {r["run_id"] for r in world.events("started")}
    assert len(runs) == 4 and runs == {r["run_id"] for r in world.events("finished")}


def test_sigterm_to_a_parallel_runner_interrupts_every_job_in_flight(world: World) -> None:
    _gate(world)
    marker = _marker()
    _merge(world, {"a": ["sleep", marker], "b": ["sleep", marker], "c": ["echo", "c"]})
    runner = _start_runner(world, "--once", "--json", "--parallel", "2", "--shutdown-grace", "0.5")
    try:
        _until(lambda: len(_with(marker)) == 2)
        runner.send_signal(signal.SIGTERM)
        _out, err = runner.communicate(timeout=60)
        assert not _with(marker)
    finally:
        _kill_all(_with(marker))
    assert runner.returncode == 1, err
    assert "stopped by SIGTERM" in err
    finished = {r["job"]: r["status"] for r in world.events("finished")}
    assert finished == {"a": "interrupted", "b": "interrupted"} or finished == {
        "a": "interrupted",
        "b": "interrupted",
        "c": "succeeded",
    }
    assert len(world.events("started")) == len(finished)


def test_kill_9_of_a_parallel_runner_kills_every_job_tree_within_a_second(world: World) -> None:
    _gate(world)
    marker = _marker()
    _merge(
        world,
        {"a": ["sh", "-c", f"setsid sleep {marker} & sleep {marker}"], "b": ["sleep", marker]},
    )
    runner = _start_runner(world, "--once", "--parallel", "2")
    try:
        _until(lambda: len(_with(marker)) == 4)  # a's sh and its two sleeps, b's sleep
        time.sleep(0.3)  # the trackers have seen (and told the watchdog of) every process
        _kill_9_and_see_the_jobs_die(runner, marker)
    finally:
        _kill_all(_with(marker))
    again = world.run_once()
    assert again.code == 1, again.err
    assert sorted(j["status"] for j in again.json()["jobs"]) == ["lost", "lost"]
    assert len(world.events("started")) == 2 and len(world.events("finished")) == 2


def test_batches_double_while_jobs_are_short_and_fall_back_when_one_is_long() -> None:
    from mergegate.runner.claims import MAX_BATCH, BatchSize

    size = BatchSize(parallel=2)
    assert size.size == 2
    for expected in (4, 8, 16, 32, 64, MAX_BATCH):
        size.ended(0.01, push_seconds=0.05)
        assert size.size == expected
    size.ended(0.5, push_seconds=0.05)  # longer than two pushes: claim only what can start
    assert size.size == 2
    size.ended(0.5, push_seconds=0.2)  # a slow remote: a job shorter than four pushes is short
    assert size.size == 4


def test_short_jobs_are_claimed_in_growing_batches(world: World) -> None:
    """Trivial jobs cost a few pushes, not one each: the batch doubles while jobs are short."""
    _gate(world)
    names = [f"t{i:02d}" for i in range(40)]
    _merge(world, {name: ["echo", name] for name in names})
    result = world.run_once()
    assert result.code == 0, result.err
    _once_each(world, names)
    commits = int(world.git("admin", "rev-list", "--count", "origin/mergegate/audit"))
    # 1 + 2 + 4 + 8 + 16 + 9 claims and the last results on a quiet machine; one push per job
    # without batches.
    assert commits <= 2 * len(names) // 3, commits


def test_a_claim_waiting_for_a_slot_has_a_lease_covering_the_jobs_ahead(world: World) -> None:
    _gate(world)
    names = [f"q{i:02d}" for i in range(12)]
    _merge(world, {name: ["echo", name] for name in names})
    assert world.run_once().code == 0
    started = sorted(world.events("started"), key=lambda r: r["seq"])
    for record in started:
        claimed = datetime.fromisoformat(record["time"].replace("Z", "+00:00"))
        until = datetime.fromisoformat(record["lease"]["until"].replace("Z", "+00:00"))
        own = record["limits"]["timeout_seconds"] + record["limits"]["kill_grace_seconds"]
        assert (until - claimed).total_seconds() >= own
    assert any(
        (
            datetime.fromisoformat(r["lease"]["until"].replace("Z", "+00:00"))
            - datetime.fromisoformat(r["time"].replace("Z", "+00:00"))
        ).total_seconds()
        >= 2 * (r["limits"]["timeout_seconds"] + r["limits"]["kill_grace_seconds"])
        for r in started
    ), "no claim waited behind another: the test did not reach the rule"


def test_many_short_jobs_in_parallel_all_succeed(world: World) -> None:
    """Jobs ending while others are forked: no job's scan reaps (or adopts) another's just-forked
    main process."""
    _gate(world)
    names = [f"s{i:02d}" for i in range(40)]
    _merge(world, {name: ["echo", name] for name in names})
    result = world.run_once("--parallel", "8")
    assert result.code == 0, result.out[-3000:]
    _once_each(world, names)
