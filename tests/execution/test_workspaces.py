"""A runner leaves nothing in TMPDIR: job workspaces (an export of the approving commit and whatever
the job wrote) and its export folder go when the job ends, when a pass fails, when the runner is
stopped, and when it is killed (its watchdog removes them; if the watchdog died too, the pass that
closes the run does). Real runners, real jobs, real signals; each runner's TMPDIR is the test's
own."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

from tests.helpers.keys import make_ssh_key
from tests.helpers.repos import World, job_yaml, policy_yaml
from tests.runner.test_reliability import (
    RULES,
    _alive,
    _children,
    _gate,
    _kill_all,
    _marker,
    _merge_jobs,
    _spooled_process,
    _start_runner,
    _until,
    _with,
)


def _scratch(world: World, name: str = "runner-tmp") -> Path:
    scratch = world.tmp / name
    scratch.mkdir(exist_ok=True)
    return scratch


def _left(scratch: Path) -> list[str]:
    return sorted(p.name for p in scratch.iterdir())


def _planting_job(marker: str, outside: Path) -> list[str]:
    """A job that writes into its workspace, plants symlinks to a folder and a file outside it, then
    sleeps."""
    return [
        "sh",
        "-c",
        f"echo secret > out && ln -s {outside} to-folder && ln -s {outside}/keep to-file && mkdir "
        "-p a/b "
        f"&& ln -s {outside} a/b/up && sleep {marker}",
    ]


def _outside(world: World) -> Path:
    outside = world.tmp / "outside"
    outside.mkdir()
    (outside / "keep").write_text("kept")
    return outside


def test_kill_9_of_a_runner_with_a_running_job_leaves_no_workspace_nor_export_folder(
    world: World,
) -> None:
    """Its watchdog, which outlives it to kill the job, removes them once the job is gone, never
    following a symlink the job planted. (A TMPDIR with a space: the watchdog reads a folder's
    name to the end of its line.)"""
    _gate(world)
    marker, outside, scratch = _marker(), _outside(world), _scratch(world, "runner  tmp")
    _merge_jobs(world, "p", {"plant": _planting_job(marker, outside)})
    runner = _start_runner(world, "--once", env={"TMPDIR": str(scratch)})
    try:
        _until(lambda: len(_with(marker)) == 2)  # sh and its sleep
        (workspace,) = [p for p in scratch.iterdir() if p.name.startswith("mergegate-job-")]
        assert (workspace / "out").read_text() == "secret\n" and (
            workspace / "to-folder"
        ).is_symlink()
        assert [p.name.split("-")[1] for p in scratch.iterdir()].count(
            "index"
        ) == 1  # the export folder
        os.kill(runner.pid, signal.SIGKILL)
        runner.wait()
        killed = time.monotonic()
        _until(lambda: not _left(scratch), timeout=5.0, step=0.02)
        assert time.monotonic() - killed < 5.0
    finally:
        _kill_all(_with(marker))
    assert (outside / "keep").read_text() == "kept"  # not followed through the job's links
    assert sorted(p.name for p in outside.iterdir()) == ["keep"]


def test_passes_that_end_fail_or_are_stopped_leave_nothing_in_tmpdir(world: World) -> None:
    """Jobs that succeed, fail, are denied before they start; a pass that fails after preparing a
    job (a signing key the policy does not list, in a PEM file: its public half shows only in the
    signature of the first audit commit, after the jobs were prepared); a pass stopped by SIGTERM
    while its job runs."""
    runner_key = make_ssh_key(world.tmp / "keys", "runner")
    other = world.tmp / "keys" / "other_pem"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "rsa", "-b", "2048", "-m", "PEM", "-N", "", "-f", str(other)],
        check=True,
    )
    world.setup(
        policy_yaml(
            [world.bob.approver_entry()],
            RULES,
            runners=[{"name": "ci", "key": runner_key.public_line}],
        )
    )
    scratch = _scratch(world)
    env = {"TMPDIR": str(scratch)}
    world.propose(
        "first",
        {
            "jobs/ok.yaml": job_yaml("ok", ["echo", "ok"]),
            "jobs/bad.yaml": job_yaml("bad", ["sh", "-c", "echo x > out; exit 3"]),
            # denied before it starts, after its export: its cwd is not in the workspace
            "jobs/denied.yaml": job_yaml("denied", ["sh", "-c", "true"], cwd="nowhere"),
        },
        who=world.alice,
    )
    world.signed_merge("first", world.bob)
    failed = world.run_once("--signing-key", str(other), env=env, process=True)
    assert failed.code == 2 and "does not make a signature the policy accepts" in failed.err, (
        failed.err
    )
    assert (
        "does not list under runners" not in failed.err
    )  # (refused at its first audit commit, after the exports)
    assert _left(scratch) == []
    signing = ("--signing-key", str(runner_key.private), "--runner-name", "ci")
    ran = world.run_once(*signing, env=env, process=True)
    statuses = {j["job"]: j["status"] for j in ran.json()["jobs"]}
    assert statuses == {"ok": "succeeded", "bad": "failed", "denied": "rejected"}, ran.out
    assert _left(scratch) == []
    marker = _marker()
    _merge_jobs(world, "long", {"long": ["sleep", marker]})
    runner = _start_runner(world, "--once", "--json", "--shutdown-grace", "0.5", *signing, env=env)
    try:
        _until(lambda: _with(marker))
        os.kill(runner.pid, signal.SIGTERM)
        runner.communicate(timeout=30)
    finally:
        _kill_all(_with(marker))
    assert runner.returncode == 1
    assert _left(scratch) == []


def test_the_pass_that_closes_a_run_whose_runner_and_watchdog_died_removes_its_folders(
    world: World,
) -> None:
    """The runner, its watchdog and its spawner killed together (an OOM kill of all three): the
    spool names the run's workspace and export folder. A pass leaves them while a process of the job
    still runs, and removes them in the pass that closes the run."""
    _gate(world)
    marker, outside, scratch = _marker(), _outside(world), _scratch(world)
    _merge_jobs(
        world, "p", {"stay": ["sh", "-c", f"sleep {marker} & " + _planting_job(marker, outside)[2]]}
    )
    runner = _start_runner(world, "--once", env={"TMPDIR": str(scratch)})
    try:
        _until(lambda: len(_with(marker)) == 3)  # sh and its two sleeps
        # The spool names the job's process once the runner hears it started (not synced: a line
        # written survives the runner). Killed before that, a pass cannot know the job runs
        # (docs/execution.md).
        _until(lambda: _spooled_process(world))
        helpers = {p: Path(f"/proc/{p}/cmdline").read_bytes() for p in _children(runner.pid)}
        watchdogs = [
            p for p, cmdline in helpers.items() if b"mergegate.execution.watchdog" in cmdline
        ]
        spawners = [
            p for p, cmdline in helpers.items() if b"mergegate.execution.spawner" in cmdline
        ]
        assert len(watchdogs) == 1 and len(spawners) == 1
        for pid in (*watchdogs, *spawners, runner.pid):
            os.kill(pid, signal.SIGKILL)
        runner.wait()
        _until(lambda: not _alive(watchdogs[0]) and not _alive(spawners[0]))
        left = _left(scratch)
        assert len(left) == 2, left  # the workspace and the export folder: nobody removed them
        assert _with(marker)  # a child of the job survives in its process group
        early = world.run_once()
        assert early.code == 0 and "may still be running" in early.err, early.out + early.err
        assert _left(scratch) == left  # never removed under a process of the job
    finally:
        _kill_all(_with(marker))
    _until(lambda: not _with(marker))
    late = world.run_once()
    (job,) = late.json()["jobs"]
    assert job["status"] == "lost"
    assert _left(scratch) == []
    assert (
        sorted(p.name for p in outside.iterdir()) == ["keep"]
        and (outside / "keep").read_text() == "kept"
    )


def test_a_folder_named_in_the_spool_is_removed_only_while_it_is_the_same_folder(
    tmp_path: Path,
) -> None:
    """A later folder that got the same name (another runner's: another inode), a symlink put in its
    place (even to the very folder named): neither is touched, nor what they hold."""
    from mergegate.execution.workspaces import identity, remove_stale

    path = tmp_path / "mergegate-job-x"
    path.mkdir()
    named = identity(path)
    moved = tmp_path / "moved"
    path.rename(moved)  # (still holds the inode named: the next folder cannot get it)
    (moved / "file").write_text("kept")
    path.mkdir()
    (path / "theirs").write_text("in use")
    remove_stale([named])
    assert (path / "theirs").read_text() == "in use"
    (path / "theirs").unlink()
    path.rmdir()
    path.symlink_to(moved)
    remove_stale([named])
    assert path.is_symlink() and (moved / "file").read_text() == "kept"
    path.unlink()
    moved.rename(path)  # the folder named, with a link out of it somewhere inside
    (path / "sub").mkdir()
    keep = tmp_path / "keep"
    keep.mkdir()
    (keep / "file").write_text("kept")
    (path / "sub" / "up").symlink_to(keep)
    remove_stale([named])
    assert not path.exists() and (keep / "file").read_text() == "kept"
