"""Re-check, from a bare clone and no runner state, everything the runner decided.

`audit verify` checks the hash chain and that every audit commit only
appended. `verify` also walks the whole first-parent history from the trust
root, judges every commit again, and cross-checks the audit against it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from mergegate import audit
from mergegate.approvals import Assessor
from mergegate.branch import open_branch, trust_root
from mergegate.errors import IntegrityError, MergegateError
from mergegate.git import Repo
from mergegate.planning import Walk
from mergegate.policy import load_policy


@dataclass(frozen=True)
class AuditReport:
    tip: str
    records: int
    files: int


def verify_audit(*, repo_path: Path, remote: str, branch: str, fetch: bool) -> AuditReport:
    """The chain from seq 1, and append-only history; IntegrityError at the first violation."""
    repo = Repo(repo_path)
    tip = open_branch(repo, remote=remote, branch=branch, fetch=fetch).tip()
    records = audit.read_all(repo, tip)
    _append_only_history(repo, tip)
    for problem in _finished_twice(records):
        raise IntegrityError(problem)
    return AuditReport(tip, len(records), len(audit.log_files(repo, tip)))


def _finished_twice(records: list[audit.Record]) -> list[str]:
    """A run has one result: two `finished` records for one run id (two passes at once) contradict."""
    first: dict[str, int] = {}
    problems = []
    for record in records:
        run_id = record.get("run_id")
        if record.event != "finished" or not isinstance(run_id, str):
            continue
        if run_id in first:
            problems.append(f"seq {record.seq}: run {run_id} has 2 finished records (first at seq {first[run_id]})")
        first.setdefault(run_id, record.seq)
    return problems


def _append_only_history(repo: Repo, tip: str) -> None:
    for sha in repo.out("rev-list", "--first-parent", tip, "--", audit.AUDIT_DIR).split():
        commit = repo.commit(sha)
        if not commit.parents:
            continue
        changes = [c for c in repo.diff(commit.parents[0], sha) if c.path.startswith(audit.AUDIT_DIR)]
        audit.check_append_only(repo, sha, changes, logs_only=True)


@dataclass(frozen=True)
class CommitLine:
    commit: str
    kind: str
    summary: str
    jobs: tuple[dict[str, Any], ...] = ()

    def as_json(self) -> dict[str, Any]:
        return {"commit": self.commit, "kind": self.kind, "summary": self.summary, "jobs": list(self.jobs)}


@dataclass(frozen=True)
class VerifyReport:
    trust_root: str
    tip: str
    records: int
    commits: tuple[CommitLine, ...]
    violations: tuple[str, ...]
    warnings: tuple[str, ...] = field(default=())

    @property
    def exit_code(self) -> int:
        return IntegrityError.exit_code if self.violations else 0


def verify_history(*, repo_path: Path, remote: str, branch: str, fetch: bool, trust: str | None) -> VerifyReport:
    repo = Repo(repo_path)
    source = open_branch(repo, remote=remote, branch=branch, fetch=fetch)
    tip = source.tip()
    root, warnings = trust_root(repo, tip, trust)
    violations: list[str] = []
    try:
        last_seen = source.check_not_rewritten(tip)
    except IntegrityError as exc:
        violations.append(str(exc))
        last_seen = tip
    records: list[audit.Record] = []
    try:
        records = audit.read_all(repo, tip)
        _append_only_history(repo, tip)
    except IntegrityError as exc:
        violations.append(f"audit: {exc}")
    chain = repo.first_parent_chain(root, tip)
    seen = _first_seen(repo, records, set(chain))
    policy = load_policy(lambda p: repo.read_file(root, p), commit=root)
    now = datetime.now(UTC)
    walk = Walk(Assessor(repo, at=now), policy, tip=tip)
    lines: list[CommitLine] = [CommitLine(root, "trust root", f"policy trusted as it is ({policy.where})")]
    valid: dict[tuple[str, str, str], str] = {}
    rejected: dict[tuple[str, str, str], str] = {}
    for sha in chain:
        # Record times are trustworthy only when runners sign the audit commits.
        walk.assessor.at = seen.get(sha, now) if walk.policy.runners else now
        try:
            assessment = walk.step(sha)
        except MergegateError as exc:
            violations.append(f"commit {sha[:12]}: {exc}")
            lines.append(CommitLine(sha, "tampering", str(exc)))
            break
        jobs = []
        for d in assessment.decisions:
            (valid if d.runnable else rejected)[(d.path, d.blob, d.commit)] = d.reason
            jobs.append({"path": d.path, "blob": d.blob, "approved": d.runnable, "approvers": list(d.approvers), "reason": d.reason})
        kind = "policy change" if assessment.policy_changed and assessment.kind == "approval" else assessment.kind
        lines.append(CommitLine(sha, kind, assessment.summary, tuple(jobs)))
    violations.extend(_cross_check(records, valid, rejected, set(chain)))
    if not violations:
        source.remember(tip, last_seen)
    return VerifyReport(root, tip, len(records), tuple(lines), tuple(violations), tuple(warnings))


def _first_seen(repo: Repo, records: list[audit.Record], chain: set[str]) -> dict[str, datetime]:
    """When the runner first recorded each commit: the time key lifetimes are judged at."""
    seen: dict[str, datetime] = {}
    for record in records:
        when = datetime.fromisoformat(str(record["time"]))
        commits = [record.get("commit")]
        if record.event == "scanned" and record.get("start"):
            commits = repo.first_parent_chain(str(record["start"]), str(record["commit"]))
        for sha in commits:
            if isinstance(sha, str) and sha in chain and sha not in seen:
                seen[sha] = when
    return seen


def _cross_check(records: list[audit.Record], valid: dict[tuple[str, str, str], str],
                 rejected: dict[tuple[str, str, str], str], chain: set[str]) -> list[str]:
    problems: list[str] = []
    started: dict[tuple[str, str], int] = {}
    for record in records:
        if record.event != "started":
            continue
        key = (str(record.get("path")), str(record.get("blob")), str(record.get("commit")))
        if key[2] not in chain:
            problems.append(f"seq {record.seq}: started {key[0]} from commit {key[2][:12]}, which is not on approved after the trust root")
        elif key not in valid:
            why = rejected.get(key, "the commit introduces no such job revision")
            problems.append(f"seq {record.seq}: started {key[0]} at {key[1][:7]} without a valid approval: {why}")
        revision = key[:2]
        if revision in started:
            problems.append(f"seq {record.seq}: {key[0]} at {key[1][:7]} started twice (first at seq {started[revision]})")
        started.setdefault(revision, record.seq)
    return [*problems, *_finished_twice(records)]
