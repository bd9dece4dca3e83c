"""An idle `run --once` after a quiet pass asks the remote (`ls-remote`) and nothing else (idle.py, issue 12).

Real repositories and signed merges; which git commands ran is read from GIT_TRACE.
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from pathlib import Path

from mergegate import idle
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml
from tests.test_retries_labels import _fails_once


def _gate(world: World, **extra: object) -> str:
    if extra.get("max_retries"):
        extra["runners"] = world.signing_runner()  # retries need runner-signed records (every run_once signs)
    return world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE, {"program": "sh", "args_prefix": ["-c"]}], **extra))


def _merge(world: World, branch: str, files: dict[str, str]) -> str:
    world.propose(branch, files, who=world.alice)
    return world.signed_merge(branch, world.bob)


def _traced(world: World, tmp: Path, *args: str) -> tuple[dict[str, object], list[str]]:
    """One `run --once --json` and the git commands it ran (their verbs, in order)."""
    trace = tmp / f"trace-{time.monotonic_ns()}"
    result = world.run_once(*args, env={"GIT_TRACE": str(trace)})
    assert result.code in (0, 1), result.err
    verbs = []
    for line in trace.read_text().splitlines() if trace.exists() else []:
        if "trace: built-in: git " in line:
            words = line.split("trace: built-in: git ", 1)[1].split()
            while words and words[0].startswith("-"):  # --git-dir X, -C X, -c k=v
                words = words[2:] if words[0] in ("--git-dir", "-C", "-c") else words[1:]
            verbs.append(words[0] if words else "")
    return result.json(), verbs


def test_an_idle_run_once_after_a_quiet_pass_only_asks_the_remote_and_says_the_same(world: World, tmp_path: Path) -> None:
    root = _gate(world)
    _merge(world, "hello", {"jobs/hello.yaml": job_yaml("hello", ["echo", "hi"])})
    ran, _ = _traced(world, tmp_path, "--trust-root", root)
    assert [j["status"] for j in ran["jobs"]] == ["succeeded"]  # type: ignore[index]
    memory = idle.path(world.clone("runner") / ".git", "runner")
    assert not memory.exists()  # it recorded something: the next pass runs in full
    quiet, verbs = _traced(world, tmp_path, "--trust-root", root)
    assert quiet["jobs"] == [] and "fetch" in verbs and memory.exists()
    again, verbs = _traced(world, tmp_path, "--trust-root", root)
    assert again == quiet
    assert "ls-remote" in verbs and "fetch" not in verbs and "grep" not in verbs and len(verbs) <= 4, verbs
    plain = world.mg("run", "--once", "--trust-root", root)
    assert (plain.code, plain.out, plain.err) == (0, "nothing to run\n", "")


def test_the_quiet_ends_when_a_ref_moves_or_the_options_change(world: World, tmp_path: Path) -> None:
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
    assert [j["status"] for j in world.run_once("--trust-root", root, where="other").json()["jobs"]] == ["succeeded"]
    ran, verbs = _traced(world, tmp_path, "--trust-root", root)
    assert "fetch" in verbs and ran["jobs"] == []


def test_an_unpinned_trust_root_or_a_pass_with_warnings_leaves_no_memory(world: World, tmp_path: Path) -> None:
    _gate(world)
    for _ in range(3):
        result = world.run_once()
        assert result.code == 0 and "no trust root pinned" in result.err
    assert not idle.path(world.clone("runner") / ".git", "runner").exists()


def test_the_quiet_ends_when_a_retry_falls_due(world: World, tmp_path: Path) -> None:
    root = _gate(world, max_retries=1, retry_backoff_seconds=3)
    merge = _merge(world, "r", {"jobs/flaky.yaml": job_yaml("flaky", _fails_once(tmp_path, "flaky"), retries=1)})
    first, _ = _traced(world, tmp_path, "--trust-root", root)
    assert [j["status"] for j in first["jobs"]] == ["failed"]  # type: ignore[index]
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
