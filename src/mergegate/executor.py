"""Run one argument vector with limits; capture, bound and redact its output.

The caller (runner.py) gives a clean export of the approving commit as the
workspace and the complete environment; this module resolves the program and
cwd inside that workspace, applies OS limits, and returns a bounded, redacted
record of what happened. No shell, ever.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

Status = Literal["succeeded", "failed", "timed_out"]


@dataclass(frozen=True)
class Limits:
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
    limits: Limits
    search_path: str  # PATH used to resolve a bare command[0]
    run_id: str
    sandbox: Literal["none", "bwrap"] = "none"
    network: bool = False
    output_dir: Path | None = None  # keep the full redacted output here when set


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


def run(request: ExecRequest) -> ExecResult:
    """Run the job; raises errors.Denied (nothing started) when program or cwd leave the workspace."""
    raise NotImplementedError
