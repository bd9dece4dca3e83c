"""Does `mergegate run --once` cost in proportion to what is new, or to all of history?

The issue: "a `run --once` must cost in proportion to what is new since the runner's last record, so
that a repository with 10,000 past jobs polls as fast as a new one." This script measures exactly
that, end to end, the way a
user runs the command (a subprocess of `python -m mergegate`):

1. It builds, with `git fast-import`, a gate (a bare remote and a runner
   clone) whose `approved` holds N past approved jobs: a root commit with the
   policy, N merges each bringing jobs/job-<i>.yaml from a side commit, and
   one commit on mergegate/audit whose hash-chained log (built with mergegate.audit.log) says
   every job started and finished and ends with a `scanned` record at the last
   merge. For the runner all of that is already processed.
2. It times `run --once --json --trust-root <root>` with nothing new (a) and
   with one new approved job, a real ssh-signed merge by an approver who did
   not write the job (b), on that gate and on a fresh gate with no past jobs,
   resetting the branch to the pre-run state between repetitions.
3. It times `status` and `audit verify` on the big gate (these may grow with
   history), and the interpreter start-up as a floor.
4. It prints a table and rewrites the section "## Polling cost with 10,000
   past jobs" of docs/performance.md (the generated part; notes below the end
   marker are kept).

Usage: python benchmarks/poll_scale.py [--jobs N] [--last-pass K] [--repeat R] [--profile DIR]
                                       [--commit-graph] [--no-docs] [--keep]

The big gate's audit branch ends as a pass that ran its last K jobs (default
300) leaves it: one audit commit per job, then one with the `scanned` record.
Row (a1) is the idle poll right after a real pass that ran K new jobs of one merge (that pass leaves
the clone's memory, idle.py, as it ended settled); (a0) is the first poll with no memory at all (a
full pass that finds nothing).

HOME, GIT_CONFIG_GLOBAL and GNUPGHOME point into a temporary directory so the machine's git config,
keys and identity are never read; it is removed at the end.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import platform
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from perfdoc import LoadWatch, write_section

from mergegate.audit import log as audit
from mergegate.audit.records import GENESIS, Record
from mergegate.facts import audit_commits as audit_branch
from mergegate.facts.branches import AUDIT_BRANCH
from mergegate.git.repo import Repo

SECTION = "## Polling cost with 10,000 past jobs"
END_MARKER = "<!-- end of poll_scale.py output: text below, up to the next ## heading, is kept -->"
DOCS = Path(__file__).resolve().parents[1] / "docs" / "performance.md"
T0 = 1_700_000_000  # commit timestamps of the generated history

ADMIN = ("admin", "admin@example.com")
ALICE = ("alice", "alice@example.com")  # the approver: signs merges
BOB = ("bob", "bob@example.com")  # the proposer: writes jobs, is not an approver
RUNNER = ("runner", "runner@mergegate.invalid")


# -- isolation and small helpers -------------------------------------------------


def isolate(home: Path) -> None:
    """Point HOME, git's global config and gpg at `home`; drop identity and repo variables."""
    home.mkdir(parents=True, exist_ok=True)
    gitconfig = home / ".gitconfig"
    gitconfig.write_text("[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n")
    os.environ.update(
        {
            "HOME": str(home),
            "GIT_CONFIG_GLOBAL": str(gitconfig),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GNUPGHOME": str(home / ".gnupg"),
            "GIT_TERMINAL_PROMPT": "0",
        }
    )
    for name in (
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_AUTHOR_DATE",
        "GIT_COMMITTER_DATE",
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "GIT_OBJECT_DIRECTORY",
        "MERGEGATE_TRUST_ROOT",
        "SSH_AUTH_SOCK",
        "GIT_TRACE2_EVENT",
    ):
        os.environ.pop(name, None)


def git(
    where: Path, *args: str, input: bytes | None = None, env: dict[str, str] | None = None
) -> str:
    proc = subprocess.run(
        ["git", "-C", str(where), *args],
        input=input,
        capture_output=True,
        env={**os.environ, **(env or {})},
        check=False,
    )
    if proc.returncode != 0:
        raise RuntimeError(
            f"git {' '.join(args)} failed in {where}: {proc.stderr.decode(errors='replace')}"
        )
    return proc.stdout.decode().strip()


def ident(who: tuple[str, str]) -> dict[str, str]:
    return {
        "GIT_AUTHOR_NAME": who[0],
        "GIT_AUTHOR_EMAIL": who[1],
        "GIT_COMMITTER_NAME": who[0],
        "GIT_COMMITTER_EMAIL": who[1],
    }


def dir_bytes(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())


def human_bytes(n: int) -> str:
    size = float(n)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    raise AssertionError


def job_yaml(job_id: str, arg: str) -> bytes:
    return f"id: {job_id}\ncommand: [echo, '{arg}']\n".encode()


def policy_yaml(public_key: str) -> bytes:
    return (
        "version: 1\n"
        "approvers:\n"
        f"  - name: {ALICE[0]}\n"
        f"    email: {ALICE[1]}\n"
        f"    key: {json.dumps(public_key)}\n"
        "approvals_required: 1\n"
        "commands:\n"
        "  - program: echo\n"
    ).encode()


# -- building a gate ---------------------------------------------------------------


@dataclass
class Gate:
    """A bare remote and a runner clone; `pristine` is approved as the runner last left it."""

    name: str
    jobs: int
    remote: Path
    runner: Path
    root: str
    pristine: str
    records_pristine: str | None = None  # the audit branch as the runner last left it
    build_seconds: dict[str, float] = field(default_factory=dict)
    audit_records: int = 0
    audit_files: int = 0
    audit_bytes: int = 0
    counter: int = 0

    @property
    def seen_ref(self) -> str:
        return "refs/mergegate/seen/origin/approved"

    def reset(self, tip: str) -> None:
        """approved on the remote at `tip`, and the runner as if its last pass had ended at
        pristine."""
        git(self.remote, "update-ref", "refs/heads/approved", tip)
        git(self.runner, "update-ref", "refs/remotes/origin/approved", self.pristine)
        git(self.runner, "update-ref", self.seen_ref, self.pristine)
        for where, ref in (
            (self.remote, f"refs/heads/{AUDIT_BRANCH}"),
            (self.runner, f"refs/remotes/origin/{AUDIT_BRANCH}"),
            (self.runner, f"refs/mergegate/seen/origin/{AUDIT_BRANCH}"),
        ):
            if self.records_pristine is not None:
                git(where, "update-ref", ref, self.records_pristine)
            else:
                git(where, "update-ref", "-d", ref)  # no records yet: the pass creates the branch


def _data(payload: bytes) -> bytes:
    return b"data %d\n" % len(payload) + payload + b"\n"


def _commit(
    ref: str,
    mark: int | None,
    who: tuple[str, str],
    when: int,
    message: str,
    parents: Sequence[str],
    files: dict[str, bytes],
) -> bytes:
    """One fast-import `commit` command; parents are `:mark` or sha strings."""
    out = [f"commit {ref}\n".encode()]
    if mark is not None:
        out.append(f"mark :{mark}\n".encode())
    person = f"{who[0]} <{who[1]}> {when} +0000\n"
    out += [f"author {person}".encode(), f"committer {person}".encode(), _data(message.encode())]
    if parents:
        out.append(f"from {parents[0]}\n".encode())
    for extra in parents[1:]:
        out.append(f"merge {extra}\n".encode())
    for path, content in files.items():
        out.append(f"M 100644 inline {path}\n".encode())
        out.append(_data(content))
    return b"".join(out) + b"\n"


def fast_import(remote: Path, stream: bytes, marks: Path | None = None) -> dict[int, str]:
    args = ["fast-import", "--quiet"]
    if marks is not None:
        args.append(f"--export-marks={marks}")
    git(remote, *args, input=stream)
    if marks is None:
        return {}
    result = {}
    for line in marks.read_text().splitlines():
        mark, sha = line.split()
        result[int(mark[1:])] = sha
    return result


def past_records(
    n: int, root: str, merges: list[str], blobs: dict[str, str]
) -> list[dict[str, Any]]:
    """Drafts like the runner's: per job a `started` and a `finished`, then one `scanned`."""
    drafts: list[dict[str, Any]] = []
    limits = {"timeout_seconds": 300, "max_output_bytes": 65536, "kill_grace_seconds": 5.0}
    for i in range(1, n + 1):
        job, path = f"job-{i}", f"jobs/job-{i}.yaml"
        ids = {
            "runner": RUNNER[0],
            "job": job,
            "path": path,
            "blob": blobs[path],
            "commit": merges[i - 1],
        }
        vote = f"{ALICE[0]} (merge signature of {merges[i - 1][:7]})"
        run_id = uuid.UUID(int=i).hex
        drafts.append(
            audit.draft(
                "started",
                **ids,
                run_id=run_id,
                command=["echo", str(i)],
                cwd=".",
                sandbox="none",
                rule="commands[0] (echo)",
                policy_commit=root,
                self_approved=False,
                limits=limits,
                approvers=[ALICE[0]],
                votes=[vote],
                requirement="1 approval in all (approvals_required)",
                approval=f"counted: {vote}",
            )
        )
        out = f"{i}\n"
        drafts.append(
            audit.draft(
                "finished",
                **ids,
                run_id=run_id,
                status="succeeded",
                exit_code=0,
                signal=None,
                duration_ms=3,
                reason=None,
                resolved_program="/usr/bin/echo",
                stdout_tail=out,
                stdout_bytes=len(out),
                stdout_sha256=_sha256(out.encode()),
                stderr_tail="",
                stderr_bytes=0,
                stderr_sha256=_sha256(b""),
            )
        )
    last = merges[-1] if merges else root
    drafts.append(
        audit.draft(
            "scanned", runner=RUNNER[0], commit=last, start=root, policy_commit=root, commits=n
        )
    )
    return drafts


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_gate(
    base: Path,
    name: str,
    n: int,
    public_key: str,
    *,
    commit_graph: bool = False,
    last_pass: int = 0,
) -> Gate:
    """A remote whose approved holds n processed jobs (n=0: just the trust root), and a runner
    clone.

    With `last_pass` K, the audit branch ends as a pass that ran the last K jobs leaves it: one
    commit per job (its `started` and `finished`), then one with the `scanned` record.
    """
    timings: dict[str, float] = {}
    remote, runner = base / f"{name}-remote.git", base / f"{name}-runner"
    t = time.perf_counter()
    git(base, "init", "--quiet", "--bare", str(remote))
    # 1. Root, then n (side commit, merge) pairs. Marks: root 1, side 2i, merge 2i+1.
    chunks = [
        _commit(
            "refs/heads/approved",
            1,
            ADMIN,
            T0,
            "mergegate: initial policy (trust anchor)",
            [],
            {"policy/policy.yaml": policy_yaml(public_key)},
        )
    ]
    for i in range(1, n + 1):
        job = {f"jobs/job-{i}.yaml": job_yaml(f"job-{i}", str(i))}
        prev = f":{2 * i - 1}"
        when = T0 + 60 * i
        chunks.append(
            _commit("refs/heads/proposal", 2 * i, BOB, when, f"propose job-{i}", [prev], job)
        )
        chunks.append(
            _commit(
                "refs/heads/approved",
                2 * i + 1,
                ALICE,
                when + 30,
                f"Merge job-{i} into approved",
                [prev, f":{2 * i}"],
                job,
            )
        )
    chunks.append(b"reset refs/heads/main\nfrom :1\n\n")
    marks = fast_import(remote, b"".join(chunks), base / f"{name}.marks")
    git(remote, "update-ref", "-d", "refs/heads/proposal")
    timings["fast-import history"] = time.perf_counter() - t
    root, merges = marks[1], [marks[2 * i + 1] for i in range(1, n + 1)]
    # 2. One commit on the audit branch: the chain the runner would have written for all of that.
    t = time.perf_counter()
    records = 0
    if n:
        blobs = {}
        for entry in git(remote, "ls-tree", "-r", merges[-1], "--", "jobs/").splitlines():
            meta, path = entry.split("\t", 1)
            blobs[path] = meta.split()[2]
        sealed = audit.seal(past_records(n, root, merges, blobs), after_seq=0, after_hash=GENESIS)
        repo = Repo(remote)
        empty = audit.read_tail(repo, None)  # no log files yet
        files = audit.append(repo, None, empty, sealed)  # split into log-NNNNNN.jsonl files
        records = len(sealed)
        k = min(last_pass, n)
        if not k:
            message = audit_branch.message(
                f"mergegate: audit seq 1-{records} ({n} started, {n} finished, 1 scanned)",
                merges[-1],
            )
            stream = _commit(
                f"refs/heads/{AUDIT_BRANCH}", None, RUNNER, T0 + 60 * (n + 1), message, [], files
            )
        else:
            stream = _pass_commits(sealed, k, merges)
        fast_import(remote, stream)
        timings["audit records + commit" + ("s" if k else "")] = time.perf_counter() - t
    # 3. The runner's clone (main checked out, so the runner reads origin/approved).
    t = time.perf_counter()
    git(base, "clone", "--quiet", str(remote), str(runner))
    timings["clone"] = time.perf_counter() - t
    if commit_graph:
        t = time.perf_counter()
        for where in (remote, runner):
            git(where, "commit-graph", "write", "--reachable", "--changed-paths")
        timings["commit-graph"] = time.perf_counter() - t
    pristine = git(remote, "rev-parse", "refs/heads/approved")
    records_pristine = git(remote, "rev-parse", f"refs/heads/{AUDIT_BRANCH}") if n else None
    gate = Gate(name, n, remote, runner, root, pristine, records_pristine, timings)
    log = _audit_blobs(remote, records_pristine) if records_pristine else []
    gate.audit_records = records
    gate.audit_files = len(log)
    gate.audit_bytes = sum(int(git(remote, "cat-file", "-s", blob)) for blob in log)
    gate.reset(pristine)
    return gate


def _pass_commits(sealed: Sequence[Record], k: int, merges: list[str]) -> bytes:
    """fast-import commands for the audit branch: everything before the last k jobs in one commit,
    then one commit per job (2 records) and one with the final `scanned` record, as a pass writes
    them."""
    lines = [r.line() for r in sealed]

    def files_upto(count: int, only_last: bool) -> dict[str, bytes]:
        # Rotation as audit.append does it for these records (about 800 bytes each: the record count
        # decides).
        out = {}
        first = (
            0 if not only_last else ((count - 1) // audit.RECORDS_PER_FILE) * audit.RECORDS_PER_FILE
        )
        for start in range(first, count, audit.RECORDS_PER_FILE):
            out[f"{audit.AUDIT_DIR}log-{start // audit.RECORDS_PER_FILE + 1:06d}.jsonl"] = b"".join(
                lines[start : min(count, start + audit.RECORDS_PER_FILE)]
            )
        return out

    ref = f"refs/heads/{AUDIT_BRANCH}"
    before = len(sealed) - 1 - 2 * k
    chunks = [
        _commit(
            ref,
            1,
            RUNNER,
            T0,
            audit_branch.message(f"mergegate: audit seq 1-{before}", merges[-1]),
            [],
            files_upto(before, only_last=False),
        )
    ]
    for j in range(k):
        upto = before + 2 * (j + 1)
        message = audit_branch.message(f"mergegate: audit seq {upto - 1}-{upto}", merges[-1])
        chunks.append(
            _commit(
                ref, j + 2, RUNNER, T0 + j, message, [f":{j + 1}"], files_upto(upto, only_last=True)
            )
        )
    message = audit_branch.message(f"mergegate: audit seq {len(sealed)} (scanned)", merges[-1])
    chunks.append(
        _commit(
            ref,
            k + 2,
            RUNNER,
            T0 + k,
            message,
            [f":{k + 1}"],
            files_upto(len(sealed), only_last=True),
        )
    )
    return b"".join(chunks)


def _audit_blobs(remote: Path, commit: str) -> list[str]:
    """Blob ids of the audit log files at `commit`."""
    text = git(remote, "ls-tree", "-r", commit, "--", "audit/")
    return [line.split("\t")[0].split()[2] for line in text.splitlines() if line.endswith(".jsonl")]


def new_approved_job(gate: Gate, key: Path, count: int = 1) -> str:
    """A proposal by bob adding `count` jobs, merged with a merge signed by alice; returns the
    merge."""
    ids = []
    with tempfile.TemporaryDirectory(prefix="poll-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(gate.remote, "read-tree", gate.pristine, env=env)
        for _ in range(count):
            gate.counter += 1
            ids.append(f"new-{gate.counter}")
        for i in ids:
            Path(tmp, i).write_bytes(job_yaml(i, "hello"))
        blobs = git(
            gate.remote,
            "hash-object",
            "-w",
            "--stdin-paths",
            input="".join(f"{tmp}/{i}\n" for i in ids).encode(),
        )
        entries = "".join(
            f"100644 {blob} 0\tjobs/{i}.yaml\n" for i, blob in zip(ids, blobs.split(), strict=True)
        )
        git(gate.remote, "update-index", "--index-info", input=entries.encode(), env=env)
        tree = git(gate.remote, "write-tree", env=env)
    what = ids[0] if count == 1 else f"{count} jobs"
    side = git(
        gate.remote,
        "commit-tree",
        tree,
        "-p",
        gate.pristine,
        "-m",
        f"propose {what}",
        env=ident(BOB),
    )
    merge = git(
        gate.remote,
        "-c",
        "gpg.format=ssh",
        "-c",
        f"user.signingkey={key}",
        "commit-tree",
        "-S",
        tree,
        "-p",
        gate.pristine,
        "-p",
        side,
        "-m",
        f"Merge {what} into approved",
        env=ident(ALICE),
    )
    return merge


# -- measuring -----------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    label: str
    samples: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.samples)

    @property
    def best(self) -> float:
        return min(self.samples)


def mergegate_argv(*args: str) -> list[str]:
    return [sys.executable, "-m", "mergegate", *args]


def run_mergegate(
    cwd: Path, args: Sequence[str], *, prefix: Sequence[str] = (), env: dict[str, str] | None = None
) -> tuple[float, subprocess.CompletedProcess[str]]:
    argv = [sys.executable, *prefix, "-m", "mergegate", *args] if prefix else mergegate_argv(*args)
    t = time.perf_counter()
    proc = subprocess.run(
        argv,
        cwd=cwd,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        env={**os.environ, **(env or {})},
        check=False,
    )
    return time.perf_counter() - t, proc


def poll_args(gate: Gate) -> list[str]:
    return ["run", "--once", "--json", "--trust-root", gate.root]


def expect_poll(proc: subprocess.CompletedProcess[str], *, jobs: int, what: str) -> None:
    if proc.returncode != 0:
        raise RuntimeError(
            f"{what}: exit {proc.returncode}\nstdout: {proc.stdout}\nstderr: {proc.stderr}"
        )
    out = json.loads(proc.stdout)
    if len(out["jobs"]) != jobs or any(j["status"] != "succeeded" for j in out["jobs"]):
        raise RuntimeError(f"{what}: expected {jobs} succeeded job(s), got {out['jobs']}")


def measure(
    label: str, repeat: int, setup: Callable[[], None], once: Callable[[], float]
) -> Timing:
    """One untimed warm-up, then `repeat` timed runs, each after `setup`."""
    samples = []
    for index in range(repeat + 1):
        setup()
        elapsed = once()
        if index:
            samples.append(elapsed)
    return Timing(label, tuple(samples))


def poll_nothing_new(gate: Gate, repeat: int) -> Timing:
    def once() -> float:
        elapsed, proc = run_mergegate(gate.runner, poll_args(gate))
        expect_poll(proc, jobs=0, what=f"{gate.name}: run --once with nothing new")
        return elapsed

    return measure(
        f"(a) run --once, nothing new, {gate.jobs} past jobs",
        repeat,
        lambda: gate.reset(gate.pristine),
        once,
    )


def poll_first_idle(gate: Gate, repeat: int) -> Timing:
    """(a) without the clone's quiet memory (idle.py): the full pass the first idle poll after any
    change makes."""

    def setup() -> None:
        gate.reset(gate.pristine)
        shutil.rmtree(gate.runner / ".git" / "mergegate" / "quiet", ignore_errors=True)

    def once() -> float:
        elapsed, proc = run_mergegate(gate.runner, poll_args(gate))
        expect_poll(proc, jobs=0, what=f"{gate.name}: first run --once with nothing new")
        return elapsed

    return measure(
        f"(a0) first run --once, nothing new (full pass), {gate.jobs} past jobs",
        repeat,
        setup,
        once,
    )


def poll_one_new(gate: Gate, key: Path, repeat: int) -> Timing:
    def setup() -> None:
        gate.reset(new_approved_job(gate, key))

    def once() -> float:
        elapsed, proc = run_mergegate(gate.runner, poll_args(gate))
        expect_poll(proc, jobs=1, what=f"{gate.name}: run --once with one new job")
        return elapsed

    timing = measure(f"(b) run --once, 1 new job, {gate.jobs} past jobs", repeat, setup, once)
    gate.reset(gate.pristine)
    return timing


def poll_after_pass(gate: Gate, key: Path, jobs: int, repeat: int) -> tuple[Timing, float]:
    """(a1): the idle poll right after a real pass that ran `jobs` new jobs (that pass, untimed but
    reported, is what leaves the clone's memory: it ended settled). Every idle poll after it is that
    poll: it changes nothing, so no reset between them."""
    gate.reset(new_approved_job(gate, key, jobs))
    shutil.rmtree(gate.runner / ".git" / "mergegate" / "quiet", ignore_errors=True)
    took, proc = run_mergegate(gate.runner, poll_args(gate))
    expect_poll(proc, jobs=jobs, what=f"{gate.name}: the pass that ran {jobs} new jobs")

    def once() -> float:
        elapsed, proc = run_mergegate(gate.runner, poll_args(gate))
        expect_poll(
            proc, jobs=0, what=f"{gate.name}: run --once right after a pass that ran {jobs} jobs"
        )
        return elapsed

    timing = measure(
        f"(a1) run --once, nothing new, right after a pass that ran {jobs} jobs, {gate.jobs} past "
        "jobs",
        repeat,
        lambda: None,
        once,
    )
    gate.reset(gate.pristine)
    return timing, took


def plain_command(gate: Gate, label: str, args: Sequence[str], repeat: int) -> Timing:
    def once() -> float:
        elapsed, proc = run_mergegate(gate.runner, args)
        if proc.returncode != 0:
            raise RuntimeError(f"{label}: exit {proc.returncode}\n{proc.stdout}\n{proc.stderr}")
        return elapsed

    return measure(label, repeat, lambda: gate.reset(gate.pristine), once)


def startup(repeat: int, cwd: Path) -> Timing:
    def once() -> float:
        elapsed, proc = run_mergegate(cwd, ["--version"])
        if proc.returncode != 0:
            raise RuntimeError(proc.stderr)
        return elapsed

    return measure("python -m mergegate --version (start-up floor)", repeat, lambda: None, once)


def precompile() -> str:
    """Compile mergegate's modules to bytecode first, as an installed copy has them (pip compiles a
    wheel on install; an editable install writes them on first import). Where
    PYTHONDONTWRITEBYTECODE is set, every process would compile all of mergegate from source again
    (about 0.2 s of CPU for `run`)."""
    import compileall

    import mergegate

    package = Path(mergegate.__file__).parent
    ok = compileall.compile_dir(str(package), quiet=1, force=False)
    how = (
        "PYTHONDONTWRITEBYTECODE is set here"
        if os.environ.get("PYTHONDONTWRITEBYTECODE")
        else "as Python would on first import"
    )
    return (
        f"Bytecode: mergegate's modules compiled once before measuring ({how}; an installed "
        "package "
        f"has them){'' if ok else ' (some failed to compile)'}."
    )


# -- profiling (--profile DIR) ------------------------------------------------------

SKIP_FILES = ("cli.py", "__main__.py")  # the CLI wrappers around everything
SKIP_FUNCTIONS = ("command",)  # each command module's click callback, wrapping its main


def profile(gate: Gate, key: Path, out: Path) -> list[str]:
    """cProfile and git trace2 of one poll of each kind on the big gate; returns a text summary."""
    out.mkdir(parents=True, exist_ok=True)
    lines = []
    for kind in ("a", "b"):
        gate.reset(gate.pristine if kind == "a" else new_approved_job(gate, key))
        prof, trace = out / f"poll-{kind}.prof", out / f"poll-{kind}.trace2.json"
        trace.unlink(missing_ok=True)
        elapsed, proc = run_mergegate(
            gate.runner,
            poll_args(gate),
            prefix=("-m", "cProfile", "-o", str(prof)),
            env={"GIT_TRACE2_EVENT": str(trace)},
        )
        expect_poll(proc, jobs=0 if kind == "a" else 1, what=f"profiled poll ({kind})")
        lines.append(f"== poll ({kind}) under cProfile: {elapsed:.2f} s; {prof}")
        stats = pstats.Stats(str(prof))
        ranked = sorted(
            (
                (where, row[3])
                for where, row in stats.stats.items()  # type: ignore[attr-defined]
                if f"src{os.sep}mergegate" in where[0]
                and where[2] != "<module>"
                and Path(where[0]).name not in SKIP_FILES
                and where[2] not in SKIP_FUNCTIONS
            ),
            key=lambda item: -item[1],
        )
        lines.append("   mergegate functions by cumulative time:")
        for (file, line, func), cum in ranked[:12]:
            lines.append(f"   {cum:8.3f} s  src/mergegate/{Path(file).name}:{line} {func}")
        lines.append("   slowest git processes (trace2):")
        for seconds, argv in git_processes(trace)[:8]:
            lines.append(f"   {seconds:8.3f} s  {' '.join(argv)[:140]}")
        gate.reset(gate.pristine)
    return lines


def git_processes(trace: Path) -> list[tuple[float, list[str]]]:
    """(elapsed, argv) of every git process in a trace2 event file, slowest first."""
    argv: dict[str, list[str]] = {}
    elapsed: dict[str, float] = {}
    if not trace.exists():
        return []
    for line in trace.read_text().splitlines():
        event = json.loads(line)
        sid = event.get("sid", "")
        if event.get("event") == "start":
            argv[sid] = event.get("argv", [])
        elif event.get("event") == "exit":
            elapsed[sid] = float(event.get("t_abs", 0.0))
    # The persistent `cat-file --batch` reader only reports its lifetime, not work: left out.
    rows = [(elapsed[s], argv.get(s, [])) for s in elapsed if "--batch" not in argv.get(s, [])]
    return sorted(rows, key=lambda item: -item[0])


# -- reporting -------------------------------------------------------------------------


def machine() -> dict[str, str]:
    cpu = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "nproc": str(os.cpu_count()),
        "cpu": cpu or platform.processor() or "unknown",
        "os": f"{platform.system()} {platform.release()}",
        "python": platform.python_version(),
        "git": subprocess.run(
            ["git", "--version"], capture_output=True, text=True, check=False
        ).stdout.strip(),
    }


def verdict(big: Timing, fresh: Timing) -> tuple[bool, str]:
    """Close means within 20 % plus 50 ms of the fresh gate's median (noise of a subprocess)."""
    close = big.median <= fresh.median * 1.2 + 0.05
    ratio = big.median / fresh.median if fresh.median else float("inf")
    return (
        close,
        f"{big.median:.2f} s vs {fresh.median:.2f} s ({ratio:.1f}x, "
        f"{big.median - fresh.median:+.2f} s)",
    )


def table(rows: Sequence[Timing]) -> list[str]:
    width = max(len(r.label) for r in rows)
    lines = [
        f"| {'measurement':<{width}} | median (s) | min (s) | runs |",
        f"|{'-' * (width + 2)}|-----------:|--------:|-----:|",
    ]
    lines += [
        f"| {r.label:<{width}} | {r.median:10.3f} | {r.best:7.3f} | {len(r.samples):4d} |"
        for r in rows
    ]
    return lines


def interpretation(n: int, a: tuple[bool, str], b: tuple[bool, str]) -> str:
    text = (
        f"With nothing new, a poll of the gate with {n} past jobs takes {a[1]} on the fresh gate; "
        f"with one new approved job it takes {b[1]}. "
    )
    if a[0] and b[0]:
        return text + (
            "Both are within noise of the fresh gate: polling cost follows what is new, "
            "not the size of the history, as the issue requires."
        )
    slow = [
        w
        for w, ok in (("the idle poll (a)", a[0]), ("the poll with one new job (b)", b[0]))
        if not ok
    ]
    which = " and ".join(slow)
    verb = "do" if len(slow) > 1 else "does"
    return text + (
        f"So {which} {verb} NOT cost in proportion to what is new: part of the work grows with the "
        "number of past jobs. The profile and the causes are in the notes below."
    )


def write_docs(path: Path, generated: list[str]) -> None:
    write_section(path, SECTION, END_MARKER, generated)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--jobs", type=int, default=10000, help="past jobs in the big gate (default 10000)"
    )
    parser.add_argument(
        "--repeat", type=int, default=5, help="timed runs per measurement (default 5)"
    )
    parser.add_argument(
        "--profile",
        type=Path,
        default=None,
        metavar="DIR",
        help="also profile one poll of each kind on the big gate; keep .prof files in DIR",
    )
    parser.add_argument(
        "--commit-graph",
        action="store_true",
        help="write a commit-graph with changed-path Bloom filters in both gates before measuring",
    )
    parser.add_argument(
        "--last-pass",
        type=int,
        default=300,
        metavar="K",
        help="the big gate's audit branch ends as a pass that ran its last K jobs left it: "
        "one commit per job, then the scanned record (default 300)",
    )
    parser.add_argument("--no-docs", action="store_true", help=f"do not rewrite {DOCS.name}")
    parser.add_argument(
        "--no-audit-verify",
        action="store_true",
        help="leave out the audit verify row (one git process per side commit a record names "
        "since issue 23, item 9: minutes at 10,000 past jobs)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the temporary gates (their path is printed)"
    )
    args = parser.parse_args(argv)
    if args.jobs < 1 or args.repeat < 1:
        parser.error("--jobs and --repeat must be at least 1")
    if args.profile is not None:
        args.profile = args.profile.resolve()

    tmp = Path(tempfile.mkdtemp(prefix="mergegate-poll-"))
    try:
        return bench(tmp, args)
    finally:
        if args.keep:
            print(f"kept {tmp}")
        else:
            shutil.rmtree(tmp, ignore_errors=True)


def bench(tmp: Path, args: argparse.Namespace) -> int:
    isolate(tmp / "home")
    info = machine()
    load = LoadWatch()  # figures taken while other work ran are marked as such
    key = tmp / "keys" / "alice_ed25519"
    key.parent.mkdir()
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", str(key)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    public_key = key.with_name(key.name + ".pub").read_text().strip()

    print(f"{info['date']}; {info['nproc']} CPUs; Python {info['python']}; {info['git']}")
    print(f"building a gate with {args.jobs} past jobs ...", flush=True)
    t = time.perf_counter()
    big = build_gate(
        tmp, "big", args.jobs, public_key, commit_graph=args.commit_graph, last_pass=args.last_pass
    )
    build_total = time.perf_counter() - t
    fresh = build_gate(tmp, "fresh", 0, public_key, commit_graph=args.commit_graph)
    steps = ", ".join(f"{k} {v:.1f} s" for k, v in big.build_seconds.items())
    print(
        f"built in {build_total:.1f} s ({steps}); audit: {big.audit_records} records in "
        f"{big.audit_files} "
        f"files, {human_bytes(big.audit_bytes)}; remote .git {human_bytes(dir_bytes(big.remote))}",
        flush=True,
    )

    rows: list[Timing] = []

    def add(timing: Timing) -> Timing:
        rows.append(timing)
        runs = ", ".join(f"{x:.2f}" for x in timing.samples)
        print(
            f"  {timing.label}: median {timing.median:.3f} s, min {timing.best:.3f} s ({runs})",
            flush=True,
        )
        return timing

    compiled = precompile()
    add(startup(args.repeat, fresh.runner))
    fresh_a = add(poll_nothing_new(fresh, args.repeat))
    fresh_b = add(poll_one_new(fresh, key, args.repeat))
    fresh_a0 = add(poll_first_idle(fresh, args.repeat))
    big_a = add(poll_nothing_new(big, args.repeat))
    big_a0 = add(poll_first_idle(big, args.repeat))
    big_b = add(poll_one_new(big, key, args.repeat))
    after = min(args.last_pass, big.jobs) or 1
    big_a1, pass_seconds = poll_after_pass(big, key, after, args.repeat)
    add(big_a1)
    print(
        f"  (the untimed pass before (a1), which ran {after} new jobs, took {pass_seconds:.1f} s)",
        flush=True,
    )
    add(
        plain_command(
            big,
            f"mergegate status --json, {big.jobs} past jobs",
            ["status", "--json", "--trust-root", big.root],
            args.repeat,
        )
    )
    if not args.no_audit_verify:
        add(
            plain_command(
                big,
                f"mergegate audit verify --json, {big.jobs} past jobs",
                ["audit", "verify", "--json"],
                args.repeat,
            )
        )

    a, b = verdict(big_a, fresh_a), verdict(big_b, fresh_b)
    a0 = verdict(big_a0, fresh_a0)
    a1 = verdict(big_a1, fresh_a)
    goal = "met" if a1[0] and a[0] and max(big_a.median, big_a1.median) <= 0.150 else "NOT met"
    summary = interpretation(big.jobs, a, b) + (
        " (a) is the idle poll as a polling clone sees it: after one settled pass (the untimed "
        "warm-up) it asks "
        "`ls-remote` and stops (idle.py); (a1) is the idle poll right after a pass that ran "
        f"{after} jobs "
        f"({pass_seconds:.1f} s, untimed), which leaves the same memory: {a1[1]} against (a) on "
        "the fresh gate. "
        "The goal (at most 1.2x a fresh gate and at most 150 ms, also right after a pass that ran "
        "hundreds of "
        f"jobs): {big_a.median * 1000:.0f} ms (a) and {big_a1.median * 1000:.0f} ms (a1), {goal}. "
        "The first poll "
        "after a change with nothing to run for this runner (a0: no memory, a full pass) takes "
        f"{a0[1]} on the fresh gate."
    )
    print()
    print("\n".join(table(rows)))
    print()
    print(summary)
    if args.profile is not None:
        print()
        print("\n".join(profile(big, key, args.profile)))

    generated = [
        f"Generated by `python benchmarks/poll_scale.py --jobs {args.jobs} --repeat {args.repeat}"
        f" --last-pass {args.last_pass}{' --commit-graph' if args.commit_graph else ''}"
        f"{' --no-audit-verify' if args.no_audit_verify else ''}` on "
        f"{info['date']}.",
        "",
        f"- Machine: {info['nproc']} CPUs ({info['cpu']}), {info['os']}, Python {info['python']}, "
        f"{info['git']}.",
        f"- {load.note()}",
        f"- Gate: a bare remote and a runner clone; `approved` holds N = {big.jobs} past jobs "
        f"({2 * big.jobs + 1} commits: root, {big.jobs} side commits and merges); mergegate/audit "
        "ends as a pass "
        f"that ran the last {min(args.last_pass, big.jobs)} jobs leaves it (one commit per job, "
        "then the scanned record), "
        "built with `git fast-import` (one pack, "
        + (
            "with a commit-graph file and changed-path Bloom filters)."
            if args.commit_graph
            else "no commit-graph file)."
        ),
        f"- Build time (d): {build_total:.1f} s ({steps}).",
        f"- Audit: {big.audit_records} records in {big.audit_files} files, "
        f"{human_bytes(big.audit_bytes)}.",
        "- Each figure is the wall clock of `python -m mergegate ...` as a subprocess, after one "
        "untimed "
        "warm-up; (b) adds a fresh job per run (a proposal by a non-approver and a merge "
        "ssh-signed by the "
        "approver) on top of the same state, and includes running the job (`echo`) and pushing its "
        "records; "
        f"(a1) follows one real pass that ran {after} new jobs of one merge "
        f"({pass_seconds:.1f} s).",
        f"- {compiled}",
        "",
        *table(rows),
        "",
        summary,
        "",
    ]
    if not args.no_docs:
        write_docs(DOCS, generated)
        print(f"\nwrote the section '{SECTION}' in {DOCS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
