"""What state every job on `approved` is in, read from the audit branch and the unprocessed history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mergegate import audit
from mergegate.git import Repo
from mergegate.job import is_job_path, job_stem
from mergegate.planning import check_new_records, plan, read_gate

_STATE = {"started": "running", "rejected": "rejected", "vetoed": "vetoed"}


@dataclass(frozen=True)
class JobState:
    job: str
    path: str
    blob: str
    state: str  # queued, running, succeeded, failed, timed_out, rejected, vetoed, not run
    reason: str | None
    commit: str | None
    time: str | None

    def as_json(self) -> dict[str, Any]:
        return {"job": self.job, "path": self.path, "blob": self.blob, "state": self.state, "reason": self.reason,
                "commit": self.commit, "time": self.time}


@dataclass(frozen=True)
class StatusReport:
    tip: str
    records: int
    jobs: tuple[JobState, ...]
    warnings: tuple[str, ...]


def status(*, repo_path: Path, remote: str, branch: str, fetch: bool, trust: str | None) -> StatusReport:
    repo = Repo(repo_path)
    gate = read_gate(repo, remote=remote, branch=branch, fetch=fetch, trust=trust)
    tip, warnings, now = gate.tip, gate.warnings, datetime.now(UTC)
    records = audit.read_all(repo, gate.records)
    latest: dict[tuple[str | None, str | None], audit.Record] = {}
    for record in records:
        if record.event in ("started", "finished", "rejected", "vetoed"):
            latest[record.revision] = record
    pending = plan(repo, tip, gate.root, gate.tail, records=gate.records, at=now, runner_name="status")
    check_new_records(repo, gate, pending, at=now)
    planned = {(d.path, d.blob): d for d, _ in pending.items}
    jobs = []
    for _, blob, path in repo.ls_tree(tip, "jobs/"):
        if not is_job_path(path):
            continue
        found = latest.get((path, blob))
        if found is not None:
            state = str(found.get("status")) if found.event == "finished" else _STATE[found.event]
            jobs.append(JobState(job_stem(path), path, blob, state, found.get("reason"), found.get("commit"), found.get("time")))
        elif (path, blob) in planned:
            d = planned[(path, blob)]
            jobs.append(JobState(job_stem(path), path, blob, "queued" if d.runnable else "rejected",
                                 None if d.runnable else f"(not yet recorded) {d.reason}", d.commit, None))
        else:
            jobs.append(JobState(job_stem(path), path, blob, "not run", "present at the trust root or before the runner's first pass; never approved as a change", None, None))
    return StatusReport(tip, len(records), tuple(jobs), tuple(warnings))
