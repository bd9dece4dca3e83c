"""Local state the runner cannot write (issue 23, runner faults): a full disk while a job runs, a
stale lock on the runner's own state. Any such failure ends the pass with an error naming the
file, after recording what can be recorded; it never hangs and never claims what it could not
account for. Real processes, a real full file system (a small tmpfs), real signals."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.repos import World
from tests.runner.test_reliability import (
    _gate,
    _merge_jobs,
    _spooled_process,
    _start_runner,
    _until,
)


@contextlib.contextmanager
def _small_tmpfs(where: Path, size: str = "64k") -> Iterator[Path]:
    """A tmpfs of `size` mounted at `where` (root only: skips elsewhere), unmounted after."""
    where.mkdir(parents=True, exist_ok=True)
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.strip()}")
    try:
        yield where
    finally:
        subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(folder: Path) -> None:
    """Write into `folder` until its file system has no room left."""
    fd = os.open(folder / "filler", os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        with contextlib.suppress(OSError):
            while os.write(fd, b"\0" * 4096) > 0:
                pass
    finally:
        os.close(fd)


def test_a_full_disk_while_a_job_runs_ends_the_pass_naming_the_spool_and_keeps_the_result(
    world: World,
) -> None:
    _gate(world)
    go = world.tmp / "go"
    # The job waits for the test, then prints more than a page: its result's spool line needs room.
    script = f"while [ ! -e {go} ]; do sleep 0.05; done; head -c 8000 /dev/zero | tr '\\0' x"
    _merge_jobs(world, "p", {"j": ["sh", "-c", script]})
    spool = world.clone("runner") / ".git/mergegate/spool"
    with _small_tmpfs(spool):
        runner = _start_runner(world, "--once", "--json")
        try:
            _until(lambda: _spooled_process(world))  # claimed, and its process runs
            _fill(spool)  # the disk is full now
            go.touch()
            try:
                out, err = runner.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                runner.send_signal(signal.SIGTERM)
                try:
                    runner.communicate(timeout=10)
                    stopped = "SIGTERM stopped it"
                except subprocess.TimeoutExpired:
                    stopped = "SIGTERM did not stop it either"
                pytest.fail(f"the runner hung once its result could not be spooled ({stopped})")
        finally:
            if runner.poll() is None:
                runner.kill()
                runner.wait()
            go.touch()
        (spool / "filler").unlink()
    assert runner.returncode == 2, (out, err)
    path = spool / "runner.jsonl"
    assert (
        f"error: cannot write the spool: the file system is full (No space left on device) ({path})"
        in err
    ), err
    # What could be recorded was: the job's real result is on the audit branch.
    [finished] = world.events("finished")
    assert finished["status"] == "succeeded", finished
    assert json.loads(out)["file"] == str(path), out
    # The next pass (the disk has room again) does not close that run as lost.
    again = world.run_once()
    assert again.code == 0, again.out + again.err
    assert [r["status"] for r in world.events("finished")] == ["succeeded"]


def test_a_stale_lock_on_the_audit_seen_ref_stops_the_pass_before_it_claims(world: World) -> None:
    """A `.lock` on the audit branch's seen ref, found only when the pass moved it after its jobs
    ran (issue 23, item 12): every piece of local state the pass will write is checked first."""
    _gate(world)
    assert world.run_once().code == 0  # the audit branch exists, the seen refs are set
    _merge_jobs(world, "p", {"j": ["echo", "j"]})
    lock = world.clone("runner") / ".git/refs/mergegate/seen/origin/mergegate/audit.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text("")
    result = world.run_once()
    assert result.code == 2, result.out + result.err
    assert f"({lock})" in result.err and f"rm '{lock}'" in result.err, result.err
    assert world.events("started") == [], (
        "the pass claimed and ran a job before the lock stopped it"
    )
    lock.unlink()
    assert [j["status"] for j in world.run_once().json()["jobs"]] == ["succeeded"]


@pytest.mark.parametrize(
    "blocked",
    [
        ".git/refs/mergegate/pending/runner.lock",
        ".git/mergegate/judged.json/",
        ".git/mergegate/dated.tmp/",
    ],
)
def test_any_state_the_pass_will_write_is_checked_before_it_claims(
    world: World, blocked: str
) -> None:
    _gate(world)
    assert world.run_once().code == 0
    _merge_jobs(world, "p", {"j": ["echo", "j"]})
    path = world.clone("runner") / blocked
    if blocked.endswith("/"):
        path.mkdir(parents=True)  # a folder where the runner writes a file
    else:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    result = world.run_once()
    assert result.code == 2 and f"({path})" in result.err, result.out + result.err
    assert world.events("started") == []


# -- issue 22, item 9: what filled up, named, through the one error handler ------------------------


@contextlib.contextmanager
def _objects_on_a_small_tmpfs(world: World, size: str = "8m") -> Iterator[Path]:
    """The runner clone's `.git/objects` on a tmpfs of `size`, with the objects it had."""
    objects = world.clone("runner") / ".git/objects"
    saved = world.tmp / "objects-before"
    shutil.copytree(objects, saved)
    with _small_tmpfs(objects, size):
        subprocess.run(["cp", "-a", f"{saved}/.", str(objects)], check=True)
        yield objects


def _no_hang(runner: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        return runner.communicate(timeout=120)
    except subprocess.TimeoutExpired:
        runner.kill()
        runner.communicate()
        pytest.fail("the runner hung on a full disk")


def test_a_full_objects_folder_is_one_error_naming_the_object_and_the_result_is_kept(
    world: World,
) -> None:
    """The job fills the file system of `.git/objects`; the runner's own (in-process) write of
    the result's audit commit fails. Once that was `unexpected OSError ... report it`."""
    _gate(world)
    assert world.run_once().code == 0
    with _objects_on_a_small_tmpfs(world) as objects:
        filler = objects / "filler"
        fill = f"head -c 100000000 /dev/zero > {filler}; true"
        _merge_jobs(world, "p", {"j": ["sh", "-c", fill]})
        out, err = _no_hang(_start_runner(world, "--once", "--json"))
        assert filler.exists()
        [error, hint] = [line for line in err.splitlines() if line.startswith(("error:", "hint:"))]
        assert (
            error.startswith("error: cannot write a git ")
            and "object: the file system is full (No space left on device) (" in error
        ), err
        assert f"({objects}/" in error  # the object's own file
        assert hint.startswith(f"hint: free space there (df -h {objects}/"), hint
        assert "unexpected" not in err
        assert json.loads(out)["file"].startswith(f"{objects}/")
        filler.unlink()
        # What could be recorded was (the claim); the result waited in the spool.
        assert world.events("finished") == []
        again = world.run_once()
    assert again.code == 0, again.out + again.err
    assert [r["status"] for r in world.events("finished")] == ["succeeded"]


def test_a_fetch_into_a_full_objects_folder_names_git_and_what_filled_up(world: World) -> None:
    _gate(world)
    assert world.run_once().code == 0
    with _objects_on_a_small_tmpfs(world) as objects:
        _merge_jobs(world, "p", {"j": ["echo", "j"]})
        _fill(objects)
        result = world.mg("run", "--once")
        (objects / "filler").unlink()
    assert result.code == 2, result.err
    error, hint = result.err.splitlines()[:2]
    assert error.startswith("error: git fetch origin failed: ") and error.endswith(
        "No space left on device"
    ), error
    # The hint is about room in the objects folder, not about reaching the remote.
    assert (
        hint.startswith(f"hint: make room where git writes ({objects}): ")
        and "reachable" not in hint
    )
    assert world.events("started") == []


def test_a_file_size_limit_is_named_as_one_with_its_hint(world: World) -> None:
    """RLIMIT_FSIZE (SIGXFSZ ignored, as a service manager may set it): writes past it fail with
    EFBIG. The audit log's next blob (the log so far, compressed) is over the limit, though the
    job's own spool line is not: the runner's in-process object write says so, named."""
    _gate(world)
    # A log of some size first: a job whose output tail (64 KiB of random text) is recorded.
    _merge_jobs(world, "p", {"big": ["sh", "-c", "head -c 200000 /dev/urandom | base64"]})
    assert world.run_once().code == 0
    _merge_jobs(world, "q", {"small": ["echo", "small"]})

    def limited() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (24 * 1024, resource.RLIM_INFINITY))

    runner = subprocess.Popen(
        [sys.executable, "-m", "mergegate", "run", "--once"],
        cwd=world.clone("runner"),
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        preexec_fn=limited,
    )
    _out, err = _no_hang(runner)
    assert runner.returncode == 2, err
    [error] = [line for line in err.splitlines() if line.startswith("error:")]
    assert error.startswith(
        "error: cannot write a git blob object: the file would be over the "
        "file size limit (File too large) ("
    ), err
    assert ".git/objects/" in error
    assert "hint: raise the file size limit (ulimit -f)" in err
    assert "unexpected" not in err
    # Without the limit, the next pass records what waited in the spool.
    assert world.run_once().code == 0
    assert [r["status"] for r in world.events("finished")] == ["succeeded", "succeeded"]
