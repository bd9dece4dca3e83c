"""Hostile jobs against the executor: real subprocesses, exact outcomes."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import signal
import socket
import sys
import tempfile
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Literal

import pytest

from mergegate.errors import Denied
from mergegate.execution import executor
from mergegate.execution.executor import (
    ExecRequest,
    ExecResult,
    ProcessLimits,
    build_environment,
    forbidden_env_name,
)

SYSTEM_PATH = "/usr/local/bin:/usr/bin:/bin"
PY = sys.executable
needs_bwrap = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bwrap is not installed")


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    return ws


def _run(
    tmp_path: Path,
    argv: list[str],
    *,
    limits: ProcessLimits | None = None,
    cwd: str = "",
    env: Mapping[str, str] | None = None,
    secrets: tuple[str, ...] = (),
    sandbox: Literal["none", "bwrap"] = "none",
    network: bool = False,
    output_dir: Path | None = None,
    hide_paths: tuple[Path, ...] = (),
) -> ExecResult:
    return executor.run(
        ExecRequest(
            argv=tuple(argv),
            workspace=_workspace(tmp_path),
            cwd=cwd,
            env={"PATH": SYSTEM_PATH} if env is None else env,
            secrets=secrets,
            limits=limits or ProcessLimits(timeout_seconds=10, kill_grace_seconds=0.5),
            search_path=SYSTEM_PATH,
            run_id="run-1",
            sandbox=sandbox,
            network=network,
            output_dir=output_dir,
            hide_paths=hide_paths,
        )
    )


def _gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            if (
                entry.isdigit()
                and marker in Path(f"/proc/{entry}/cmdline").read_text()
                and not _gone(int(entry))
            ):
                found.append(int(entry))
        except OSError:
            continue
    return found


def _sandbox_python() -> str:
    # The sandbox hides /root and /home, where pyenv and virtualenvs usually live.
    for candidate in (os.path.realpath(PY), shutil.which("python3", path=SYSTEM_PATH)):
        if candidate and not candidate.startswith(("/root/", "/home/", "/tmp/")):
            return candidate
    raise AssertionError("no python3 outside /root, /home and /tmp for sandbox tests")


def test_failing_command_reports_exit_code(tmp_path: Path) -> None:
    result = _run(tmp_path, ["sh", "-c", "echo out; echo err >&2; exit 3"])
    assert (result.status, result.exit_code, result.signal) == ("failed", 3, None)
    assert result.reason == "exited with code 3"
    assert (result.stdout.tail, result.stderr.tail) == ("out\n", "err\n")
    assert result.resolved_program == shutil.which("sh", path=SYSTEM_PATH)


def test_plain_timeout(tmp_path: Path) -> None:
    started = time.monotonic()
    result = _run(
        tmp_path, ["sleep", "30"], limits=ProcessLimits(timeout_seconds=1, kill_grace_seconds=0.5)
    )
    assert result.status == "timed_out"
    assert result.reason == "exceeded timeout_seconds=1"
    assert result.signal == 15
    assert time.monotonic() - started < 3


@pytest.mark.parametrize("escape", ["same-group", "setsid", "setsid-no-cgroup"])
def test_grandchild_ignoring_sigterm_dies_after_timeout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, escape: str
) -> None:
    if escape == "setsid-no-cgroup":  # exercise the /proc descendant walk on its own
        monkeypatch.setattr(executor, "make_cgroup", lambda *_: None)
    pidfile = tmp_path / "grandchild.pid"
    setsid = "os.setsid()" if escape != "same-group" else "pass"
    script = (
        "import os, signal, time\n"
        "if os.fork() == 0:\n"
        f"    {setsid}\n"
        "    signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        f"    open({str(pidfile)!r}, 'w').write(str(os.getpid()))\n"
        "    time.sleep(60)\n"
        "time.sleep(60)\n"
    )
    started = time.monotonic()
    result = _run(
        tmp_path,
        [PY, "-c", script],
        limits=ProcessLimits(timeout_seconds=1, kill_grace_seconds=0.5),
    )
    assert result.status == "timed_out"
    assert time.monotonic() - started < 5
    assert _gone(int(pidfile.read_text()))


def test_one_gib_of_output_is_counted_hashed_and_bounded(tmp_path: Path) -> None:
    size = 1 << 30
    # The timeout is not what this test is about: a day, so that a loaded machine (2-8 s quiet, a
    # minute and more under load) cannot turn it into a timed_out. head ends by itself.
    result = _run(
        tmp_path,
        ["head", "-c", str(size), "/dev/zero"],
        limits=ProcessLimits(timeout_seconds=86400, max_output_bytes=4096),
    )
    assert result.status == "succeeded", result.status
    assert result.stdout.bytes == size
    assert (
        result.stdout.sha256 == "49bc20df15e412a64472421e13fe86ff1c5165e18b2afccf160d4dc19fe68a14"
    )
    assert result.stdout.tail == "\0" * 4096


def test_secret_written_in_pieces_is_redacted(tmp_path: Path) -> None:
    secret = "Zq8-very-secret-value-Xy7"
    script = (
        "import sys, time\n"
        f"s = {secret!r}\n"
        "for stream in (sys.stdout, sys.stderr):\n"
        "    for piece in ('token is ', s[:4], s[4:11], s[11:], ' done\\n'):\n"
        "        stream.write(piece); stream.flush(); time.sleep(0.05)\n"
    )
    result = _run(tmp_path, [PY, "-c", script], secrets=(secret,), output_dir=tmp_path / "out")
    for capture in (result.stdout, result.stderr):
        assert capture.tail == "token is *** done\n"
        assert capture.file is not None
        kept = Path(capture.file).read_bytes()
        assert kept == b"token is *** done\n"
        assert capture.file_sha256 == hashlib.sha256(kept).hexdigest()
        assert capture.sha256 == hashlib.sha256(f"token is {secret} done\n".encode()).hexdigest()


@pytest.mark.parametrize("terminated", [True, False])
def test_private_key_body_never_reaches_the_tail(tmp_path: Path, terminated: bool) -> None:
    body = ["MIIEowIBAAKCAQEA7bodyline1", "k3Ybodyline2+/abcdefghij", "zzBodyLine3=="]
    lines = ["before", "-----BEGIN RSA PRIVATE KEY-----", *body]
    lines += ["-----END RSA PRIVATE KEY-----", "after"] if terminated else []
    script = (
        f"import sys, time\nfor line in {lines!r}:\n    print(line, flush=True); time.sleep(0.02)\n"
    )
    result = _run(tmp_path, [PY, "-c", script])
    assert result.stdout.tail == ("before\n***\nafter\n" if terminated else "before\n***")
    assert not any(part in result.stdout.tail for part in body)


def test_runner_environment_does_not_reach_the_job(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GITHUB_TOKEN", "ghp_" + "a" * 36)
    monkeypatch.setenv("SSH_AUTH_SOCK", "/tmp/agent.sock")
    monkeypatch.setenv("CANARY_7F3A", "canary-value")
    env = build_environment(
        runner_env=os.environ,
        allowlist=("HOME", "LANG"),
        job_env={"JOB_SETTING": "1"},
        extra={"MERGEGATE_JOB_ID": "job-1"},
    )
    result = _run(tmp_path, ["env"], env=env)
    assert result.status == "succeeded"
    seen = dict(line.split("=", 1) for line in result.stdout.tail.splitlines())
    assert seen == {
        "HOME": os.environ["HOME"],
        "JOB_SETTING": "1",
        "MERGEGATE_JOB_ID": "job-1",
        **({"LANG": os.environ["LANG"]} if "LANG" in os.environ else {}),
    }


def test_cwd_symlink_to_root_is_denied_before_anything_runs(tmp_path: Path) -> None:
    (_workspace(tmp_path) / "escape").symlink_to("/")
    marker = f"mergegate-marker-{uuid.uuid4().hex}"
    with pytest.raises(Denied, match="cwd 'escape' resolves to /, outside the workspace"):
        _run(tmp_path, ["touch", marker], cwd="escape")
    assert not Path("/", marker).exists()
    with pytest.raises(Denied, match="outside the workspace"):
        _run(tmp_path, ["touch", marker], cwd="..")
    assert not (tmp_path / marker).exists()


def test_relative_program_symlinked_outside_is_denied(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    (ws / "x").symlink_to("/bin/sh")
    with pytest.raises(Denied, match=r"program './x' resolves to .*, outside the workspace"):
        _run(tmp_path, ["./x", "-c", "touch pwned"])
    assert not (ws / "pwned").exists()
    script = ws / "build.sh"
    script.write_text("#!/bin/sh\necho built\n")
    script.chmod(0o755)
    result = _run(tmp_path, ["./build.sh"])
    assert (result.status, result.stdout.tail, result.resolved_program) == (
        "succeeded",
        "built\n",
        str(script),
    )


def test_bare_name_is_resolved_on_search_path_not_job_path(tmp_path: Path) -> None:
    tool = _workspace(tmp_path) / "bin" / "mytool"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\necho hijacked\n")
    tool.chmod(0o755)
    with pytest.raises(Denied, match="program 'mytool' was not found on the search path"):
        _run(tmp_path, ["mytool"], env={"PATH": f"{tool.parent}:{SYSTEM_PATH}"})


def test_denied_message_is_redacted(tmp_path: Path) -> None:
    with pytest.raises(Denied) as caught:
        _run(tmp_path, ["./hunter2-is-the-secret"], secrets=("hunter2-is-the-secret",))
    assert "hunter2" not in str(caught.value) and "***" in str(caught.value)


def test_forbidden_env_names() -> None:
    for name in (
        "PATH",
        "LD_PRELOAD",
        "ld_library_path",
        "DYLD_INSERT_LIBRARIES",
        "PYTHONPATH",
        "GIT_DIR",
        "SSH_AUTH_SOCK",
        "MERGEGATE_JOB_ID",
        "BASH_ENV",
        "HOME",
        "PYTHONUSERBASE",
    ):
        assert forbidden_env_name(name), name
    assert forbidden_env_name("DEPLOY_TARGET", reserved=("DEPLOY_TARGET",))
    for name in ("LANG", "CI", "MY_PATH_SUFFIX"):
        assert not forbidden_env_name(name), name
    with pytest.raises(Denied, match="job env name 'LD_PRELOAD' is not allowed"):
        build_environment(runner_env={}, allowlist=(), job_env={"LD_PRELOAD": "/x.so"}, extra={})
    with pytest.raises(Denied, match="job env name 'MERGEGATE_JOB_ID' is not allowed"):
        build_environment(
            runner_env={},
            allowlist=(),
            job_env={"MERGEGATE_JOB_ID": "x"},
            extra={"MERGEGATE_JOB_ID": "job-1"},
        )
    assert build_environment(
        runner_env={"PATH": "/bin", "X": "1"},
        allowlist=("PATH",),
        job_env={"A": "b"},
        extra={"MERGEGATE_RUN": "r"},
    ) == {"PATH": "/bin", "A": "b", "MERGEGATE_RUN": "r"}


def test_fork_bomb_is_stopped_by_max_processes(tmp_path: Path) -> None:
    # Bounded on purpose: even without the limit it stops at 10000 forks.
    script = (
        "import os, sys, time\n"
        "n = 0\n"
        "for _ in range(10000):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        break\n"
        "    if pid == 0:\n"
        "        time.sleep(5)\n"
        "        os._exit(0)\n"
        "    n += 1\n"
        "print(n, flush=True)\n"
        "sys.exit(0 if n == 10000 else 1)\n"
    )
    started = time.monotonic()
    result = _run(
        tmp_path,
        [PY, "-c", script],
        limits=ProcessLimits(timeout_seconds=10, max_processes=20, kill_grace_seconds=0.5),
    )
    assert result.status == "failed"
    assert int(result.stdout.tail) < 25
    assert time.monotonic() - started < 5
    assert any(name in ("RLIMIT_NPROC", "cgroup pids.max") for name, _ in result.limits_applied)


def test_memory_hog_fails_naming_max_memory(tmp_path: Path) -> None:
    result = _run(
        tmp_path,
        [PY, "-c", "x = bytearray(1 << 30)"],
        limits=ProcessLimits(timeout_seconds=10, max_memory_mb=256),
    )
    assert result.status == "failed"
    assert (
        result.reason
        == "exited with code 1; max_memory_mb=256 may have been exceeded (output says MemoryError)"
    )


def test_cpu_hog_fails_naming_max_cpu_seconds(tmp_path: Path) -> None:
    result = _run(
        tmp_path,
        [PY, "-c", "while True: pass"],
        limits=ProcessLimits(timeout_seconds=10, max_cpu_seconds=1),
    )
    assert result.status == "failed"
    assert result.reason == "killed by signal 24 (SIGXCPU): exceeded max_cpu_seconds=1"


def test_big_file_fails_naming_max_file_size(tmp_path: Path) -> None:
    limits = ProcessLimits(timeout_seconds=10, max_file_size_mb=1)
    result = _run(tmp_path, ["dd", "if=/dev/zero", "of=big", "bs=1M", "count=2"], limits=limits)
    assert (result.status, result.signal) == ("failed", 25)
    assert result.reason == "killed by signal 25 (SIGXFSZ): exceeded max_file_size_mb=1"
    # Python ignores SIGXFSZ, so it gets EFBIG and exits 1.
    result = _run(tmp_path, [PY, "-c", "open('big', 'wb').write(bytes(2 << 20))"], limits=limits)
    assert result.reason == (
        "exited with code 1; max_file_size_mb=1 may have been exceeded (output says File too large)"
    )


def test_git_push_fails_without_a_repository(tmp_path: Path) -> None:
    ws = _workspace(tmp_path)
    assert not (ws / ".git").exists()
    result = _run(
        tmp_path,
        ["git", "push"],
        env={"HOME": str(tmp_path), "GIT_CEILING_DIRECTORIES": str(tmp_path)},
    )
    assert (result.status, result.exit_code) == ("failed", 128)
    assert "not a git repository" in result.stderr.tail
    assert not (ws / ".git").exists()


def test_invalid_utf8_is_replaced_and_tail_trimmed_at_a_character(tmp_path: Path) -> None:
    result = _run(tmp_path, ["printf", r"ok \377\376 \303"])
    assert (result.status, result.stdout.tail) == ("succeeded", "ok \ufffd\ufffd \ufffd")
    result = _run(
        tmp_path,
        [PY, "-c", "print('é' * 1000, end='')"],
        limits=ProcessLimits(timeout_seconds=10, max_output_bytes=101),
    )
    assert result.stdout.tail == "é" * 50
    result = _run(
        tmp_path,
        [PY, "-c", "import sys; sys.stdout.buffer.write(bytes([255]) * 1000)"],
        limits=ProcessLimits(timeout_seconds=10, max_output_bytes=100),
    )
    assert result.stdout.tail == "\ufffd" * 33


def test_job_that_closes_stdout_early_is_still_waited_for(tmp_path: Path) -> None:
    started = time.monotonic()
    result = _run(tmp_path, ["sh", "-c", "echo early; exec >&-; sleep 1; echo late >&2; exit 4"])
    assert (result.status, result.exit_code, result.stdout.tail, result.stderr.tail) == (
        "failed",
        4,
        "early\n",
        "late\n",
    )
    assert time.monotonic() - started >= 1
    result = _run(
        tmp_path,
        ["sh", "-c", "exec >&- 2>&-; sleep 30"],
        limits=ProcessLimits(timeout_seconds=1, kill_grace_seconds=0.5),
    )
    assert result.status == "timed_out"
    assert time.monotonic() - started < 5


def test_background_grandchild_holding_the_pipes_does_not_hang(tmp_path: Path) -> None:
    started = time.monotonic()
    result = _run(
        tmp_path,
        ["sh", "-c", "trap '' TERM; sleep 30 & echo started"],
        limits=ProcessLimits(timeout_seconds=20, kill_grace_seconds=0.5),
    )
    assert (result.status, result.stdout.tail) == ("succeeded", "started\n")
    assert time.monotonic() - started < 4


@needs_bwrap
@pytest.mark.parametrize("network", [False, True])
def test_sandbox_network(tmp_path: Path, network: bool) -> None:
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        script = (
            "import socket\n"
            "try:\n"
            f"    socket.create_connection(('127.0.0.1', {server.getsockname()[1]}), timeout=2)\n"
            "    print('connected')\n"
            "except OSError:\n"
            "    print('blocked')\n"
        )
        result = _run(tmp_path, [_sandbox_python(), "-c", script], sandbox="bwrap", network=network)
    assert result.stdout.tail == ("connected\n" if network else "blocked\n"), result.stderr.tail


@needs_bwrap
def test_sandbox_writes_only_the_workspace(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    name = f"mergegate-{uuid.uuid4().hex}"
    script = (
        f"echo a > /tmp/{name} && echo tmp-ok; "
        f"echo b > {outside}/{name} || echo outside-denied; "
        f"echo c > /var/{name} || echo var-denied; "
        f"echo d > {name} && echo ws-ok; "
        "ls -A /root /home | tr -d '\\n'; echo; "
        "head -c1 /etc/shadow >/dev/null 2>&1 && echo shadow-read || echo shadow-hidden; "
        f"ls {tmp_path} 2>/dev/null"
    )
    result = _run(tmp_path, ["sh", "-c", script], sandbox="bwrap")
    assert result.stdout.tail.splitlines() == [
        "tmp-ok",
        "outside-denied",
        "var-denied",
        "ws-ok",
        "/home:/root:",
        "shadow-hidden",
        "ws",
    ]
    assert (_workspace(tmp_path) / name).read_text() == "d\n"
    assert not Path("/tmp", name).exists() and not (outside / name).exists()
    assert not Path("/var", name).exists()


@needs_bwrap
def test_sandbox_timeout_kills_escaped_grandchildren(tmp_path: Path) -> None:
    marker = f"0.000{uuid.uuid4().int % 10**9:09d}"
    script = f"trap '' TERM; setsid sleep 60 {marker} & sleep 60"
    result = _run(
        tmp_path,
        ["sh", "-c", script],
        sandbox="bwrap",
        limits=ProcessLimits(timeout_seconds=1, kill_grace_seconds=0.5),
    )
    assert result.status == "timed_out"
    assert _processes_with(marker) == []


@needs_bwrap
def test_sandbox_refuses_a_program_it_would_hide(tmp_path: Path) -> None:
    tool = tmp_path / "tools" / "tool.sh"
    tool.parent.mkdir()
    tool.write_text("#!/bin/sh\ntouch ran\n")
    tool.chmod(0o755)
    with pytest.raises(
        Denied, match=f"program {re.escape(str(tool))} is under /.*, which the sandbox hides"
    ):
        _run(tmp_path, [str(tool)], sandbox="bwrap", hide_paths=(tool.parent,))
    assert not (_workspace(tmp_path) / "ran").exists()


@needs_bwrap
def test_sandbox_refuses_a_program_under_tmp(tmp_path: Path) -> None:
    """The sandbox's /tmp is a fresh tmpfs: a program under the host's /tmp is refused, naming it.
    (Made under /tmp itself: the tests' own temporary directories may be elsewhere, /dev/shm.)"""
    tools = Path(tempfile.mkdtemp(prefix="mergegate-test-tool-", dir="/tmp"))
    try:
        tool = tools / "tool.sh"
        tool.write_text("#!/bin/sh\ntouch ran\n")
        tool.chmod(0o755)
        with pytest.raises(
            Denied, match=f"^program {re.escape(str(tool))} is under /tmp, which the sandbox hides"
        ):
            _run(tmp_path, [str(tool)], sandbox="bwrap")
    finally:
        shutil.rmtree(tools)
    assert not (_workspace(tmp_path) / "ran").exists()


def test_missing_bwrap_is_denied_not_run_unsandboxed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(executor, "_bwrap_path", lambda: None)
    with pytest.raises(Denied, match=r"^policy requires sandbox bwrap but bwrap is not installed$"):
        _run(tmp_path, ["touch", "ran"], sandbox="bwrap")
    assert not (_workspace(tmp_path) / "ran").exists()


def test_runner_is_not_dumpable_while_jobs_run(tmp_path: Path) -> None:
    """A same-user job cannot read the runner's environment (its secrets) from
    /proc/<pid>/environ."""
    import ctypes

    _run(tmp_path, ["true"])
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.prctl(3, 0, 0, 0, 0) == 0  # PR_GET_DUMPABLE


def test_a_spawner_killed_while_its_job_runs_takes_the_job_with_it_and_the_next_job_gets_a_new_one(
    tmp_path: Path,
) -> None:
    """The job's result is unknown (SpawnerLost: the runner records it lost, never runs it again),
    its process is gone (its parent-death signal), and the next job is started by a new spawner."""
    import threading

    from mergegate.execution.children import Spawner, SpawnerLost

    marker = f"300.{uuid.uuid4().int % 10**9:09d}"
    outcome: list[BaseException | executor.ExecResult] = []

    def job() -> None:
        try:
            outcome.append(
                _run(
                    tmp_path,
                    ["sleep", marker],
                    limits=ProcessLimits(timeout_seconds=60, kill_grace_seconds=0.5),
                )
            )
        except BaseException as exc:
            outcome.append(exc)

    thread = threading.Thread(target=job)
    thread.start()
    deadline = time.monotonic() + 30
    while not _processes_with(marker):
        assert time.monotonic() < deadline
        time.sleep(0.02)
    spawner = Spawner.get().pid
    assert spawner is not None
    os.kill(spawner, signal.SIGKILL)
    thread.join(timeout=10)
    assert len(outcome) == 1 and isinstance(outcome[0], SpawnerLost), outcome
    assert _processes_with(marker) == []
    again = _run(tmp_path, ["echo", "next"])
    assert again.status == "succeeded" and again.stdout.tail == "next\n"
    assert Spawner.get().pid != spawner


def test_the_spawner_starts_without_site_packages_and_imports_none_of_the_runners_modules(
    tmp_path: Path,
) -> None:
    """Every job is a fork of the spawner, and a fork costs in proportion to the memory its parent
    has written (issue 12's `--parallel 8`): the spawner runs `python -S` and imports only the
    standard modules it uses, none of the runner's (typing alone was a fifth of its memory)."""
    import subprocess

    from mergegate.execution.children import Spawner
    from mergegate.execution.processes import helper_env

    assert _run(tmp_path, ["true"]).status == "succeeded"
    pid = Spawner.get().pid
    assert pid is not None
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert argv[1:4] == [b"-S", b"-m", b"mergegate.execution.spawner"], argv
    # What that command imports, in a process started the same way.
    listed = subprocess.run(
        [
            sys.executable,
            "-S",
            "-c",
            "import sys, mergegate.execution.spawner; print(' '.join(sorted(sys.modules)))",
        ],
        env=helper_env(),
        cwd="/",
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "mergegate.execution.spawner" in listed
    heavy = {
        "typing",
        "dataclasses",
        "subprocess",
        "threading",
        "pathlib",
        "site",
        "mergegate.execution.processes",
        "mergegate.execution.children",
    }
    assert heavy.isdisjoint(listed), sorted(heavy & set(listed))


def test_the_watchdog_starts_without_site_or_runpy_and_imports_only_small_standard_modules(
    tmp_path: Path,
) -> None:
    """The watchdog starts once per runner process that runs a job, so four runners started at once
    on two CPUs pay its start four times (issue 9): `python -S -c`, no runpy, and none of pathlib,
    contextlib, typing or the runner's modules (10 ms of CPU of its 25 before)."""
    import subprocess

    from mergegate.execution.processes import WATCHDOG_MAIN, Watchdog, helper_env

    assert _run(tmp_path, ["true"]).status == "succeeded"
    pid = Watchdog.get().pid
    assert pid is not None
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    assert argv[1:4] == [b"-S", b"-c", WATCHDOG_MAIN.encode()], argv
    # What that command imports, in a process started the same way (stdin at EOF: it returns at
    # once).
    shown = WATCHDOG_MAIN.replace(
        "sys.exit(main())", "main(); print(' '.join(sorted(sys.modules)))"
    )
    listed = subprocess.run(
        [sys.executable, "-S", "-c", shown],
        env=helper_env(),
        cwd="/",
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert "mergegate.execution.watchdog" in listed
    heavy = {
        "typing",
        "dataclasses",
        "subprocess",
        "threading",
        "pathlib",
        "contextlib",
        "runpy",
        "importlib.util",
        "site",
        "mergegate.execution.processes",
        "mergegate.execution.children",
    }
    assert heavy.isdisjoint(listed), sorted(heavy & set(listed))


def test_a_job_starts_with_no_signal_ignored_caught_or_blocked_whatever_its_runner_had(
    tmp_path: Path,
) -> None:
    """A runner started under nohup (SIGHUP ignored) with a signal blocked: the spawner catches the
    terminal's signals and Python ignores SIGPIPE and SIGXFSZ, and none of it reaches the job, whose
    /proc/self/status shows every signal at its default and nothing blocked."""
    import subprocess

    script = (
        "import signal, sys\n"
        "signal.signal(signal.SIGHUP, signal.SIG_IGN)\n"
        "signal.pthread_sigmask(signal.SIG_BLOCK, [signal.SIGUSR1])\n"
        "from pathlib import Path\n"
        "from mergegate.execution import executor\n"
        "ws = Path(sys.argv[1])\n"
        "r = executor.run(executor.ExecRequest(argv=('cat', '/proc/self/status'), workspace=ws, "
        "cwd='', env={'PATH': '/usr/bin:/bin'},\n"
        "    secrets=(), limits=executor.ProcessLimits(timeout_seconds=10), "
        "search_path='/usr/bin:/bin', "
        "run_id='sig-1'))\n"
        "print(r.stdout.tail)\n"
    )
    workspace = _workspace(tmp_path)
    done = subprocess.run(
        [sys.executable, "-c", script, str(workspace)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    status = dict(
        line.split(":\t", 1) for line in done.stdout.splitlines() if line.startswith("Sig")
    )
    assert status["SigIgn"].strip() == "0" * 16, status
    assert status["SigBlk"].strip() == "0" * 16, status
    assert status["SigCgt"].strip() == "0" * 16, status
