"""`mergegate run` says what it does as it happens (issue 22, item 8): a line when each job starts
and ends, a live line on a terminal (and no control codes anywhere else), a line when the poll
loop starts waiting, and one `error:` per outage however many polls it lasts. Real runner
processes, real jobs; stderr read as the runner writes it, never timed."""

from __future__ import annotations

import json
import os
import pty
import select
import signal
import subprocess
import sys
import time
from collections.abc import Callable

from tests.helpers.repos import World
from tests.runner.test_reliability import (
    _gate,
    _git_calls,
    _merge_jobs,
    _refusals,
    _refusing_remote,
    _start_runner,
    _until,
)


def _read(fd: int, done: Callable[[str], bool], seen: str = "", timeout: float = 60.0) -> str:
    """What was written to `fd` so far, read as it comes, until `done` holds for it."""
    data, deadline = seen.encode(), time.monotonic() + timeout
    while not done(data.decode(errors="replace")):
        left = deadline - time.monotonic()
        if left <= 0:
            raise AssertionError(f"timed out waiting for {done}: {data!r}")
        if select.select([fd], [], [], left)[0]:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # a pty whose other end closed
                chunk = b""
            if not chunk:
                raise AssertionError(f"closed before {done}: {data!r}")
            data += chunk
    return data.decode(errors="replace")


def _gated_job(world: World) -> tuple[str, object]:
    """A job that runs until the test lets it end (a file appears): its start line must come
    before its end, whatever the machine's speed."""
    _gate(world)
    go = world.tmp / "go"
    _merge_jobs(world, "p", {"slow": ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.02; done"]})
    return "jobs/slow.yaml", go


def test_run_once_says_when_a_job_starts_before_it_ends_and_when_it_ends(world: World) -> None:
    path, go = _gated_job(world)
    runner = _start_runner(world, "--once", "--json")
    assert runner.stderr is not None
    try:
        err = _read(runner.stderr.fileno(), lambda text: f"started  {path}" in text)
        # The job is still running (it waits for `go`): nothing says it finished yet.
        assert "finished" not in err and world.events("finished") == []
        [start] = [line for line in err.splitlines() if line.startswith("started ")]
        run_id = world.events("started")[0]["run_id"]
        assert "job slow" in start and f"run {run_id[:8]}" in start
        os.close(os.open(str(go), os.O_CREAT | os.O_WRONLY))
        out, rest = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.communicate()
    err += rest
    [end] = [line for line in err.splitlines() if line.startswith("finished ")]
    assert end.startswith(f"finished {path} (job slow): succeeded, exit 0, ")
    assert end.endswith("; output: mergegate show slow")
    # --json on stdout is what it always was; no live line or control code off a terminal.
    assert json.loads(out)["jobs"][0]["status"] == "succeeded"
    assert "\x1b" not in err and "\r" not in err
    assert runner.returncode == 0


def test_on_a_terminal_a_live_line_shows_the_running_job(world: World) -> None:
    path, go = _gated_job(world)
    leader, follower = pty.openpty()
    runner = subprocess.Popen(
        [sys.executable, "-m", "mergegate", "run", "--once"],
        cwd=world.clone("runner"),
        stdout=subprocess.PIPE,
        stderr=follower,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    os.close(follower)
    try:
        # The live line is drawn in place (`\r`, erase) and counts the job's seconds.
        err = _read(leader, lambda text: f"\r\x1b[Krunning {path} " in text)
        os.close(os.open(str(go), os.O_CREAT | os.O_WRONLY))
        err = _read(leader, lambda text: "finished " in text, err)
        out, _ = runner.communicate(timeout=60)
    finally:
        if runner.poll() is None:
            runner.kill()
            runner.communicate()
        os.close(leader)
    assert "succeeded" in out and "\x1b" not in out


def test_the_poll_loop_says_once_that_it_waits_and_when_it_looks_next(world: World) -> None:
    _gate(world)
    assert world.run_once().code == 0
    trace = world.tmp / "git-trace"
    runner = _start_runner(world, "--interval", "0.1", env={"GIT_TRACE": str(trace)})
    assert runner.stderr is not None
    try:
        err = _read(runner.stderr.fileno(), lambda text: "waiting  " in text)
        _until(lambda: _git_calls(trace, "ls-remote") >= 6, timeout=60)  # five idle polls more
    finally:
        runner.send_signal(signal.SIGTERM)
        _out, rest = runner.communicate(timeout=15)
    lines = [line for line in (err + rest).splitlines() if line.startswith("waiting ")]
    assert len(lines) == 1, err + rest
    assert lines[0].startswith("waiting  for a new commit on approved or mergegate/audit at origin")
    assert "next look in 0.1s (at " in lines[0]


def test_an_outage_of_refused_pushes_is_one_error_however_many_polls(world: World) -> None:
    """Each refused attempt names its own new commit: the same outage all the same."""
    _gate(world)
    assert world.run_once().code == 0
    block, tally = world.tmp / "block", world.tmp / "tally"
    _refusing_remote(world, block, tally)
    block.write_text("1")
    _merge_jobs(world, "q", {"later": ["echo", "later"]})
    runner = _start_runner(world, "--interval", "0.1", "--max-backoff", "0.1")
    try:
        _until(lambda: _refusals(tally) >= 6, timeout=60)
        block.unlink()
        world.until_records(lambda: world.events("finished"), timeout=60)
    finally:
        runner.send_signal(signal.SIGTERM)
        _out, err = runner.communicate(timeout=15)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, err
    assert "pre-receive hook declined" in errors[0]
    assert len([line for line in err.splitlines() if line.startswith("recovered after")]) == 1
    assert [r["status"] for r in world.events("finished")] == ["succeeded"]
