"""What state every job on `approved` is in, read from the audit and the unprocessed history."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mergegate import audit
from mergegate.branch import open_branch, trust_root
from mergegate.git import Repo
from mergegate.job import is_job_path, job_stem
from mergegate.planning import plan

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
    source = open_branch(repo, remote=remote, branch=branch, fetch=fetch)
    tip = source.tip()
    source.check_not_rewritten(tip)
    root, warnings = trust_root(repo, tip, trust)
    records = audit.read_all(repo, tip)
    latest: dict[tuple[str | None, str | None], audit.Record] = {}
    for record in records:
        if record.event in ("started", "finished", "rejected", "vetoed"):
            latest[record.revision] = record
    pending = plan(repo, tip, root, audit.read_tail(repo, tip), at=datetime.now(UTC), runner_name="status")
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
