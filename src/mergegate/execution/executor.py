"""Run one argument vector with limits; capture, bound and redact its output.

The caller (runner.py) gives a clean export of the approving commit as the workspace and the
complete environment; this module resolves the program and cwd inside that workspace, applies OS
limits, and returns a bounded, redacted record of what happened. No shell, ever. docs/execution.md
says what a job can and cannot see and do.
"""

from __future__ import annotations

import os
import re
import resource
import shutil
import signal
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from mergegate.errors import Denied
from mergegate.execution.children import Child, Spawner, SpawnerLost
from mergegate.execution.processes import (
    SPAWNING,
    Tracker,
    Watchdog,
    become_subreaper,
    harden_runner,
    make_cgroup,
)
from mergegate.execution.pump import pump
from mergegate.execution.shutdown import Shutdown
from mergegate.redaction import RedactedStream, Redactor
from mergegate.rules.job import forbidden_env_name

Status = Literal["succeeded", "failed", "timed_out", "interrupted"]

# What the sandbox replaces with empty directories (or /dev/null): users' files, agent and
# container-engine sockets, and secrets a root runner could read.
SANDBOX_HIDDEN: tuple[str, ...] = (
    "/root",
    "/home",
    "/run/user",
    "/var/tmp",
    "/run/docker.sock",
    "/var/run/docker.sock",
    "/run/containerd",
    "/run/podman",
    "/etc/shadow",
    "/etc/gshadow",
    "/etc/ssh",
)
SANDBOX_SCRATCH_MB = 256  # size of the sandbox's /tmp and /dev/shm without max_file_size_mb
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*\Z")
_SIGNALS = {int(s): s.name for s in signal.Signals}
_FSIZE_TEXT = re.compile(r"File too large|file size limit exceeded", re.I)
_MEMORY_TEXT = re.compile(
    r"MemoryError|Cannot allocate memory|out of memory|bad_alloc|failed to allocate", re.I
)


@dataclass(frozen=True)
class ProcessLimits:
    """What one job's process tree may use: the policy's limits, with the job's timeout."""

    timeout_seconds: int
    max_output_bytes: int = 65536
    max_memory_mb: int | None = None
    max_cpu_seconds: int | None = None
    max_file_size_mb: int | None = None
    max_processes: int | None = None
    max_open_files: int | None = None
    kill_grace_seconds: float = 5.0


@dataclass(frozen=True)
class ExecRequest:
    argv: tuple[str, ...]
    workspace: Path  # root of the clean export; the job can write only here (with a sandbox)
    cwd: str  # relative to workspace; "" or "." for the root
    env: Mapping[str, str]  # the child's complete environment
    secrets: tuple[str, ...]  # values replaced by *** wherever they appear
    limits: ProcessLimits
    search_path: str  # PATH used to resolve a bare command[0]
    run_id: str
    sandbox: Literal["none", "bwrap"] = "none"
    network: bool = False
    output_dir: Path | None = None  # keep the full redacted output here when set
    hide_paths: tuple[Path, ...] = ()  # also emptied in the sandbox, e.g. the runner's repository
    shutdown: Shutdown | None = (
        None  # the runner's stop request: grace, then kill and `interrupted`
    )
    on_start: Callable[[int], None] | None = (
        None  # told the job's pid once it exists (for the spool)
    )


@dataclass(frozen=True)
class StreamCapture:
    tail: str  # redacted, at most max_output_bytes of the end of the stream
    bytes: int  # total bytes the job wrote to the stream
    sha256: str  # of the full stream as written (before redaction)
    file: str | None = None  # full redacted output, when kept
    file_sha256: str | None = None


@dataclass(frozen=True)
class ExecResult:
    status: Status
    exit_code: int | None  # None when killed by a signal
    signal: int | None
    duration_ms: int
    stdout: StreamCapture
    stderr: StreamCapture
    reason: str | None  # why it failed or timed out, naming the limit
    resolved_program: str
    sandbox: str = "none"
    limits_applied: tuple[tuple[str, int], ...] = ()  # what the OS actually enforced


def build_environment(
    *,
    runner_env: Mapping[str, str],
    allowlist: Sequence[str],
    job_env: Mapping[str, str],
    extra: Mapping[str, str],
) -> dict[str, str]:
    """The child's complete environment: allowlisted runner names, the job's, then `extra`."""
    env = {name: runner_env[name] for name in allowlist if name in runner_env}
    for name, value in job_env.items():
        if not _ENV_NAME.match(name) or forbidden_env_name(name, tuple(extra)):
            raise Denied(
                f"job env name {name!r} is not allowed: expected a plain name that is not PATH, "
                "LD_*, DYLD_*, GIT_*, MERGEGATE_*, SSH_AUTH_SOCK or another loader variable"
            )
        env[name] = value
    env.update(extra)
    for name, value in env.items():
        if "\0" in value or "=" in name or not name:
            raise Denied(f"env {name!r}: expected a name without '=' and a value without NUL")
    return env


def _bwrap_path() -> str | None:
    return shutil.which("bwrap")


def _inside(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip(os.sep) + os.sep)


def _resolve(request: ExecRequest) -> tuple[str, str, str]:
    """(workspace root, cwd, program), all real absolute paths; Denied when outside."""
    if not request.argv or not request.argv[0]:
        raise Denied("expected a command with a program name, found an empty command")
    root = os.path.realpath(request.workspace)
    cwd = os.path.realpath(os.path.join(root, request.cwd or "."))
    if not _inside(cwd, root):
        raise Denied(f"cwd {request.cwd!r} resolves to {cwd}, outside the workspace {root}")
    if not os.path.isdir(cwd):
        raise Denied(f"cwd {request.cwd!r} is not a directory inside the workspace {root}")
    name = request.argv[0]
    if "/" not in name:
        # Relative PATH entries would resolve against the runner's cwd: drop them.
        dirs = os.pathsep.join(d for d in request.search_path.split(os.pathsep) if os.path.isabs(d))
        found = shutil.which(name, path=dirs)
        if found is None:
            raise Denied(
                f"program {name!r} was not found on the search path {request.search_path!r}"
            )
        return root, cwd, os.path.abspath(found)
    program = name if os.path.isabs(name) else os.path.realpath(os.path.join(cwd, name))
    if not os.path.isabs(name) and not _inside(program, root):
        raise Denied(f"program {name!r} resolves to {program}, outside the workspace {root}")
    if not os.path.isfile(program) or not os.access(program, os.X_OK):
        raise Denied(f"program {name!r}: expected an executable file, found none at {program}")
    return root, cwd, program


def _rlimits(limits: ProcessLimits, root_user: bool) -> list[tuple[str, int, int, int]]:
    """(name, resource, soft, hard), never above the runner's own hard limits."""
    mib = 1024 * 1024
    wanted = [
        ("RLIMIT_AS", resource.RLIMIT_AS, limits.max_memory_mb and limits.max_memory_mb * mib, 0),
        (
            "RLIMIT_CPU",
            resource.RLIMIT_CPU,
            limits.max_cpu_seconds,
            1,
        ),  # SIGXCPU, then SIGKILL 1 s on
        (
            "RLIMIT_FSIZE",
            resource.RLIMIT_FSIZE,
            limits.max_file_size_mb and limits.max_file_size_mb * mib,
            0,
        ),
        # Root is exempt from RLIMIT_NPROC; there the pids cgroup does the work (see _run).
        ("RLIMIT_NPROC", resource.RLIMIT_NPROC, None if root_user else limits.max_processes, 0),
        ("RLIMIT_NOFILE", resource.RLIMIT_NOFILE, limits.max_open_files, 0),
        ("RLIMIT_CORE", resource.RLIMIT_CORE, 0, 0),  # a core dump would hold the job's secrets
    ]
    out = []
    for name, res, value, slack in wanted:
        if value is not None:
            current = resource.getrlimit(res)[1]
            hard = (
                value + slack if current == resource.RLIM_INFINITY else min(value + slack, current)
            )
            out.append((name, res, min(value, hard), hard))
    return out


def _bwrap_argv(bwrap: str, root: str, cwd: str, program: str, request: ExecRequest) -> list[str]:
    # Scratch space is memory: sized, so a job cannot fill the host's RAM through it.
    scratch = str((request.limits.max_file_size_mb or SANDBOX_SCRATCH_MB) * 1024 * 1024)
    argv = [
        bwrap,
        "--ro-bind",
        "/",
        "/",
        "--dev",
        "/dev",
        "--proc",
        "/proc",
        "--size",
        scratch,
        "--tmpfs",
        "/tmp",
        "--size",
        scratch,
        "--tmpfs",
        "/dev/shm",
    ]
    # Without network, also no UNIX sockets: /run holds the host's daemons (dbus, systemd, ...).
    extra = () if request.network else ("/run", "/var/run")
    hidden = sorted(
        {os.path.realpath(p) for p in (*SANDBOX_HIDDEN, *extra, *map(str, request.hide_paths))}
        - {"/"}
    )
    outer = [
        p for p in hidden if not any(_inside(p, q) and p != q for q in hidden if os.path.isdir(q))
    ]
    for path in ["/tmp", *outer]:
        if _inside(program, path) and not _inside(program, root):
            raise Denied(
                f"program {program} is under {path}, which the sandbox hides; "
                "expected a system program or one inside the workspace"
            )
        if path == "/tmp" or not os.path.exists(path):
            continue
        if os.path.isdir(path):
            argv += ["--size", "65536", "--tmpfs", path]
            argv += [] if _inside(root, path) else ["--remount-ro", path]
        else:
            argv += ["--ro-bind", "/dev/null", path]
    argv += [
        "--bind",
        root,
        root,
        "--chdir",
        cwd,
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--die-with-parent",
        "--new-session",
    ]
    argv += [] if request.network else ["--unshare-net"]
    argv += (
        ["--cap-drop", "ALL"] if os.geteuid() == 0 else []
    )  # root inside would keep every capability
    return [*argv, "--", program, *request.argv[1:]]


def _failure(rc: int, limits: ProcessLimits, cpu: float, output: str, sandboxed: bool) -> str:
    sig = -rc if rc < 0 else None
    text = (
        f"killed by signal {-rc} ({_SIGNALS.get(-rc, '?')})" if rc < 0 else f"exited with code {rc}"
    )
    if sandboxed and 128 < rc <= 128 + 64:  # bwrap reports a signal death as 128 + signal
        sig = rc - 128
        text += f" (128 + {sig}: probably killed by {_SIGNALS.get(sig, '?')} inside the sandbox)"
    if sig == signal.SIGXCPU and limits.max_cpu_seconds is not None:
        return f"{text}: exceeded max_cpu_seconds={limits.max_cpu_seconds}"
    if (
        sig == signal.SIGKILL
        and limits.max_cpu_seconds is not None
        and cpu >= limits.max_cpu_seconds
    ):
        return f"{text}: exceeded max_cpu_seconds={limits.max_cpu_seconds} (at the hard limit)"
    if sig == signal.SIGXFSZ and limits.max_file_size_mb is not None:
        return f"{text}: exceeded max_file_size_mb={limits.max_file_size_mb}"
    if limits.max_file_size_mb is not None and (said := _FSIZE_TEXT.search(output)):
        # Programs that ignore SIGXFSZ (Python does) get EFBIG instead.
        return (
            f"{text}; max_file_size_mb={limits.max_file_size_mb} may have been exceeded (output "
            f"says {said[0]})"
        )
    if limits.max_memory_mb is not None:
        said = _MEMORY_TEXT.search(output)
        if said or sig in (signal.SIGSEGV, signal.SIGABRT, signal.SIGBUS, signal.SIGKILL):
            hint = f" (output says {said[0]})" if said else ""
            return f"{text}; max_memory_mb={limits.max_memory_mb} may have been exceeded{hint}"
    return text


def _unenforceable(max_processes: int) -> Denied:
    return Denied(
        f"max_processes={max_processes} cannot be enforced: the runner is root "
        "(exempt from RLIMIT_NPROC) and no pids cgroup is writable",
        hint="run the runner as an unprivileged user, or give it a pids cgroup",
    )


def preflight(request: ExecRequest) -> str:
    """Every check `run` makes before starting anything; the resolved program, or Denied.

    The runner calls this before it claims a job, so a job that cannot start is rejected instead of
    using up its one run.
    """
    try:
        if not _RUN_ID.match(request.run_id):
            raise Denied(f"run id {request.run_id!r}: expected letters, digits, '.', '_' or '-'")
        root, cwd, program = _resolve(request)
        if request.sandbox == "bwrap":
            if (bwrap := _bwrap_path()) is None:
                raise Denied("policy requires sandbox bwrap but bwrap is not installed")
            _bwrap_argv(bwrap, root, cwd, program, request)
        if request.limits.max_processes is not None and os.geteuid() == 0:
            probe = make_cgroup(request.run_id, request.limits.max_processes)
            if probe is None:
                raise _unenforceable(request.limits.max_processes)
            probe.rmdir()
        return program
    except Denied as exc:
        raise Denied(Redactor(request.secrets).redact_text(exc.message), hint=exc.hint) from None


_HARDENED: list[
    int
] = []  # the pid of the process made non-dumpable and a subreaper (both are per process)


def run(request: ExecRequest) -> ExecResult:
    """Run the job; raises errors.Denied (nothing started) when program or cwd leave the
    workspace."""
    if _HARDENED != [
        os.getpid()
    ]:  # once per process (a fork is a new one): two system calls per job otherwise
        harden_runner()
        become_subreaper()  # before the job exists: its orphans come back here
        _HARDENED[:] = [os.getpid()]
    try:
        return _run(request)
    except Denied as exc:  # messages quote job input, which may hold a secret
        raise Denied(Redactor(request.secrets).redact_text(exc.message), hint=exc.hint) from None


def _argv(request: ExecRequest) -> tuple[str, str, list[str]]:
    """(program, cwd, argv): the program resolved, wrapped in bwrap when the policy says so."""
    if not _RUN_ID.match(request.run_id):
        raise Denied(f"run id {request.run_id!r}: expected letters, digits, '.', '_' or '-'")
    root, cwd, program = _resolve(request)
    argv = [program, *request.argv[1:]]
    if request.sandbox == "bwrap":
        if (bwrap := _bwrap_path()) is None:
            raise Denied("policy requires sandbox bwrap but bwrap is not installed")
        argv = _bwrap_argv(bwrap, root, cwd, program, request)
    return program, cwd, argv


def _run(request: ExecRequest) -> ExecResult:
    limits, sandboxed = request.limits, request.sandbox == "bwrap"
    program, cwd, argv = _argv(request)
    root_user = os.geteuid() == 0
    rlimits = _rlimits(limits, root_user)
    applied = [(name, soft) for name, _, soft, _ in rlimits]
    cgroup = make_cgroup(request.run_id, limits.max_processes)
    if limits.max_processes is not None and cgroup is not None:
        applied.append(("cgroup pids.max", limits.max_processes))
    elif limits.max_processes is not None and root_user:
        raise _unenforceable(limits.max_processes)
    if request.output_dir is not None:
        request.output_dir.mkdir(parents=True, exist_ok=True)
    out_dir = request.output_dir
    streams = [
        RedactedStream(
            request.secrets,
            limits.max_output_bytes,
            out_dir and out_dir / f"{request.run_id}.{name}.log",
        )
        for name in ("stdout", "stderr")
    ]
    started = time.monotonic()
    try:
        watchdog = Watchdog.get()
        watchdog.start()  # before the job exists: nothing runs that could outlive the runner
        if cgroup is not None:
            # Told before the fork: the job joins its cgroup before it execs.
            watchdog.tell(f"+ {request.run_id} c {cgroup}")
        spawner = Spawner.get()
        with SPAWNING:  # registered (as a Tracker) before another job's scan can see it
            # An argv list, never a shell. The spawner tells the watchdog of the job's process group
            # before the job may exec: a runner killed right after the fork leaves nothing running.
            child = spawner.spawn(
                argv,
                cwd=cwd,
                env=dict(request.env),
                rlimits=[(r, s, h) for _, r, s, h in rlimits],
                cgroup=None if cgroup is None else str(cgroup),
                run_id=request.run_id,
                watchdog=watchdog.fileno(),
            )
            tracker = Tracker(child, cgroup, sandboxed, run_id=request.run_id, reaper=spawner.pid)
    except OSError as exc:
        if cgroup is not None:
            cgroup.rmdir()  # still empty: nothing started
            Watchdog.get().tell(f"- {request.run_id}")
        for stream in streams:
            stream.close()
        raise Denied(f"could not start {program}: {exc}") from None
    sinks = {child.stdout: streams[0], child.stderr: streams[1]}
    try:
        if request.on_start is not None:
            request.on_start(child.pid)
        ended = pump(child, sinks, limits, tracker, request.shutdown)
    finally:
        if tracker.main_running:
            tracker.signal(signal.SIGKILL)
            child.wait()
            tracker.reap()
        tracker.cleanup()
        child.close()
    if child.lost:
        raise SpawnerLost("the job's spawner died while the job ran; its result is not known")
    return _result(request, program, child, streams, tracker, ended, started, tuple(applied))


def _result(
    request: ExecRequest,
    program: str,
    child: Child,
    streams: list[RedactedStream],
    tracker: Tracker,
    ended: str | None,
    started: float,
    applied: tuple[tuple[str, int], ...],
) -> ExecResult:
    """What one run came to: its status and reason, the captured output, the limits applied."""
    limits, sandboxed = request.limits, request.sandbox == "bwrap"
    out, err = (
        StreamCapture(
            s.close(),
            s.count,
            s.raw.hexdigest(),
            None if s.path is None else str(s.path),
            None if s.path is None else s.kept.hexdigest(),
        )
        for s in streams
    )
    rc = child.returncode
    assert rc is not None
    reason = None
    status: Status = "succeeded" if rc == 0 else "failed"
    if ended == "timed_out":
        status, reason = "timed_out", f"exceeded timeout_seconds={limits.timeout_seconds}"
    elif ended == "interrupted" and request.shutdown is not None:
        status, reason = "interrupted", request.shutdown.describe()
    elif rc != 0:
        reason = _failure(rc, limits, tracker.cpu, err.tail + out.tail, sandboxed)
    return ExecResult(
        status=status,
        exit_code=rc if rc >= 0 else None,
        signal=-rc if rc < 0 else None,
        duration_ms=int((time.monotonic() - started) * 1000),
        stdout=out,
        stderr=err,
        reason=reason and Redactor(request.secrets).redact_text(reason),
        resolved_program=program,
        sandbox=request.sandbox,
        limits_applied=applied,
    )
