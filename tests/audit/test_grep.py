"""The pass-start greps of the audit log read only what is new (loggrep.py, issue 12), and say what
a grep of the whole log says: the closed log files' part comes from the clone's memory only when it
is of exactly those files."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from mergegate.audit import grep as loggrep
from mergegate.audit import log as audit
from mergegate.git.repo import Repo
from mergegate.github import gather as github
from mergegate.runner import leases
from tests.audit.test_log import _append, _repo


def _whole_log(repo: Repo, tip: str) -> tuple[set[str], set[str], list[dict[str, object]]]:
    """The reference: one grep of every log file (as before the memory): run ids started, finished,
    evidence-naming records."""
    out = repo.run(
        "grep",
        "-a",
        "-h",
        "-o",
        "-E",
        "-e",
        '"event":"(started|finished)"|"run_id":"[0-9a-f]+"',
        tip,
        "--",
        "audit/log-*.jsonl",
        check=False,
    ).stdout
    runs = leases._pairs(leases._Runs(), out.splitlines())
    named = audit.grep_any(repo, tip, ['"evidence"', '"reviewed"'])
    return runs.started, runs.finished, [r.as_json() for r in named]


def _ours(repo: Repo, tip: str) -> tuple[set[str], set[str], list[dict[str, object]]]:
    runs = loggrep.folded(
        repo,
        tip,
        "runs",
        ["-a", "--no-color", "-o", "-E", "-e", '"event":"(started|finished)"|"run_id":"[0-9a-f]+"'],
        leases._pairs,
        leases._Runs(),
        dump=leases._Runs.dump,
        load=leases._Runs.load,
    )
    return (
        runs.started,
        runs.finished,
        [r.as_json() for r in github._naming(repo, tip, remember=True)],
    )


def _greps(trace: Path) -> list[list[str]]:
    """The log files each `git grep` in the trace read."""
    found = []
    for line in trace.read_text().splitlines() if trace.exists() else []:
        if "trace: built-in: git grep" in line:
            found.append(re.findall(r"audit/log-\d{6}\.jsonl", line))
    trace.unlink(missing_ok=True)
    return found


def test_the_memory_of_closed_log_files_gives_what_a_grep_of_the_whole_log_gives(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(audit, "RECORDS_PER_FILE", 4)
    trace = tmp_path / "trace"
    monkeypatch.setenv("GIT_TRACE", str(trace))
    repo = _repo(tmp_path)
    tip = repo.rev("HEAD")
    assert tip is not None

    def started(run_id: str, **extra: object) -> dict[str, object]:
        return audit.draft("started", runner="r", path="jobs/a.yaml", run_id=run_id, **extra)

    def finished(run_id: str) -> dict[str, object]:
        return audit.draft(
            "finished", runner="r", path="jobs/a.yaml", run_id=run_id, status="succeeded"
        )

    batches: list[list[dict[str, object]]] = [
        [
            started("a1"),
            finished("a1"),
            started("b2", evidence=["e" * 64]),
        ],  # b2 stays open; it names evidence
        [
            audit.draft("started", runner="r", path="jobs/x.yaml"),
            audit.draft("rejected", runner="r", run_id="c3"),
        ],  # no run id, then one
        [
            started("f" * 65),
            started("XYZ"),
            finished("b2"),
            started("d4"),
        ],  # too long, not hex: not runs
        [audit.draft("scanned", runner="r", commit="0" * 40, reviewed={"1" * 40: "2" * 64})],
        [finished("d4"), started("d4")],  # a run id started again after it finished: still closed
        [started("e5"), finished("a1"), started("ef6")],
    ]
    for number, batch in enumerate(batches):
        tip = _append(repo, tip, batch)
        ours = _ours(repo, tip)
        greps = _greps(trace)
        assert ours == _whole_log(repo, tip), number
        _greps(trace)
        files = [name for name, _ in loggrep.log_files(repo, tip)]
        assert all(g for g in greps) and greps, greps
        # After the first pass over a log of several files, only the files after the remembered ones
        # are grepped.
        if number >= 2:
            assert all(
                g == [f"audit/{n}" for n in files[-len(g) :]] and len(g) <= 2 for g in greps
            ), (greps, files)
    assert len(files) == 4
    # The quirks of the grep's pairing are kept (a `started` with no run id pairs with the next run
    # id, c3).
    assert ours[0] - ours[1] == {"c3", "e5", "ef6"}
    assert [r.written("run_id") for r in leases.open_runs(repo, tip)] == [
        "e5",
        "ef6",
    ]  # (c3 has no started record to read)
    assert [r.seq for r in github._naming(repo, tip, remember=True)] == [3, 10]
    # A closed file that is not the one remembered (a rewrite; here the memory is of another
    # branch): all files again.
    other = _repo(tmp_path / "other")
    other_tip = other.rev("HEAD")
    assert other_tip is not None
    for batch in batches[:3]:
        other_tip = _append(
            other, other_tip, [*batch, audit.draft("rejected", runner="r", reason="other")]
        )
    (other.git_dir / "mergegate").mkdir(exist_ok=True)
    (other.git_dir / "mergegate" / "grep.json").write_bytes(
        (repo.git_dir / "mergegate" / "grep.json").read_bytes()
    )
    _greps(trace)
    ours = _ours(other, other_tip)
    assert [len(g) for g in _greps(trace)] == [len(loggrep.log_files(other, other_tip))] * 2
    assert ours == _whole_log(other, other_tip)
    # A memory this version cannot read: the whole log, the same answers.
    closed = [list(f) for f in loggrep.log_files(repo, tip)[:-1]]
    (repo.git_dir / "mergegate" / "grep.json").write_text(
        json.dumps({"runs": {"files": closed, "state": {"event": 7}}})
    )
    assert _ours(repo, tip) == _whole_log(repo, tip)


def test_evidence_files_are_not_records_to_the_open_runs_grep(tmp_path: Path) -> None:
    """A file under audit/evidence/ that looks like records neither opens nor closes a run (it did,
    before)."""
    repo = _repo(tmp_path)
    tip = repo.rev("HEAD")
    assert tip is not None
    tip = _append(
        repo, tip, [audit.draft("started", runner="r", path="jobs/a.yaml", run_id="ab12")]
    )
    files = {"audit/evidence/" + "9" * 64 + ".json": b'{"event":"finished","run_id":"ab12"}\n'}
    tip = repo.write_commit(
        parent=tip, files=files, message="evidence\n", author=("t", "t@x"), signing=None
    )
    assert [r.written("run_id") for r in leases.open_runs(repo, tip)] == ["ab12"]
