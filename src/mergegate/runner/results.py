"""What a pass and a dry run report: each job's outcome, the pass's result, the dry run's plan.

`run` prints them (text or --json), `plan` turns a dry run's jobs into a GitHub Actions matrix.
"""

from __future__ import annotations

from dataclasses import dataclass

from mergegate.audit.records import Record


@dataclass(frozen=True)
class Outcome:
    job: str | None
    path: str
    commit: str
    # succeeded, failed, timed_out, interrupted, lost, rejected, vetoed, claimed (by another runner)
    status: str
    reason: str | None
    run_id: str | None = None
    attempt: int | None = None  # of a run this pass started
    retry_at: str | None = (
        None  # when the next attempt is due, if this one ended retriable with retries left
    )

    def as_json(self) -> dict[str, object]:
        return {
            "job": self.job,
            "path": self.path,
            "commit": self.commit,
            "status": self.status,
            "reason": self.reason,
            "run_id": self.run_id,
            "attempt": self.attempt,
            "retry_at": self.retry_at,
        }


@dataclass(frozen=True)
class PassResult:
    tip: str
    outcomes: tuple[Outcome, ...]
    warnings: tuple[str, ...] = ()
    policy_changes: tuple[tuple[str, str, str], ...] = ()  # (commit, adopted|rejected, why)
    stopped_by: str | None = None  # the signal that stopped the pass, if one did
    waiting: tuple[str, str] | None = (
        None  # (commit, why): the walk stopped there for missing evidence
    )

    @property
    def exit_code(self) -> int:
        # A job another runner claimed first is that runner's outcome, not this one's.
        # Waiting for evidence is "not yet": never the exit code of a pass that ran everything.
        # A policy change this pass refused is a rejection like a job's (README: "1 any
        # failed/rejected"): a policy pull request merged with too few reviews shows red.
        return (
            0
            if all(o.status in ("succeeded", "claimed") for o in self.outcomes)
            and self.waiting is None
            and all(verdict != "rejected" for _, verdict, _ in self.policy_changes)
            else 1
        )


@dataclass(frozen=True)
class Planned:
    """One job in a dry run: what the pass would do with it."""

    job: str | None
    path: str
    commit: str
    status: str  # would run, would reject, would veto, would close
    reason: str | None
    command: tuple[str, ...]
    blob: str | None = None
    attempt: int | None = None  # would run: which attempt
    runs_on: tuple[str, ...] = ()

    def as_json(self) -> dict[str, object]:
        return {
            "job": self.job,
            "path": self.path,
            "commit": self.commit,
            "status": self.status,
            "reason": self.reason,
            "command": list(self.command),
            "blob": self.blob,
            "attempt": self.attempt,
            "runs_on": list(self.runs_on),
        }


@dataclass(frozen=True)
class Preview:
    tip: str
    jobs: tuple[Planned, ...]
    # drafts, as the pass would record them (the results are unknown yet)
    records: tuple[Record, ...]
    warnings: tuple[str, ...]
    policy_changes: tuple[tuple[str, str, str], ...]
    waiting: tuple[str, str] | None = (
        None  # (commit, why) when the walk stopped for missing evidence
    )
