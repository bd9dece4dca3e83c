"""One audit record as an Elastic Common Schema document (`audit export --format ecs`).

Pure: a record in, a JSON object out. The mapping is documented field by field in docs/siem.md;
what a record says that ECS has no field for stays in `labels` (keyword values) or under the
custom namespace `mergegate` (ECS asks custom fields to live under a name of their own). Values
are the record's, as the runner wrote them (already redacted and bounded when they were written);
nothing is judged here.
"""

from __future__ import annotations

from mergegate.audit.records import (
    Finished,
    PolicyChange,
    Record,
    Rejected,
    Scanned,
    Started,
    Vetoed,
    Votes,
)
from mergegate.operations.audit_log import describe

ECS_VERSION = "8.11.0"
DATASET = "mergegate.audit"

# event -> (event.category, event.type), values from ECS's allowed lists.
_KINDS: dict[str, tuple[str, str]] = {
    "started": ("process", "start"),
    "finished": ("process", "end"),
    "rejected": ("process", "denied"),
    "vetoed": ("process", "denied"),
    "policy": ("configuration", "change"),
    "scanned": ("process", "info"),
}


def outcome(record: Record) -> str | None:
    """event.outcome: success, failure or unknown; None for an event with no outcome (ECS leaves
    it out of `info` events: a `scanned` record only says how far a pass walked)."""
    if isinstance(record, Finished):
        return "success" if record.status == "succeeded" else "failure"
    if isinstance(record, Rejected | Vetoed):
        return "failure"
    if isinstance(record, PolicyChange):
        return "success" if record.status == "adopted" else "failure"
    if isinstance(record, Started):
        return "unknown"  # the run's end is its own record
    return None


def document(record: Record) -> dict[str, object]:
    """The ECS document of one record (see docs/siem.md for the mapping)."""
    category, kind = _KINDS.get(record.event, ("process", "info"))
    event: dict[str, object] = {
        "kind": "event",
        "action": record.event,
        "category": [category],
        "type": [kind],
        "id": record.hash,
        "sequence": record.seq,
        "dataset": DATASET,
        "module": "mergegate",
        "provider": "mergegate",
    }
    said = outcome(record)
    if said is not None:
        event["outcome"] = said
    reason = getattr(record, "reason", None)
    if isinstance(reason, str) and reason:
        event["reason"] = reason
    if isinstance(record, Finished) and record.duration_ms is not None:
        event["duration"] = record.duration_ms * 1_000_000  # ECS durations are nanoseconds
    doc: dict[str, object] = {
        "@timestamp": record.time,
        "ecs": {"version": ECS_VERSION},
        "event": event,
        "message": describe(record) or record.event,
        "labels": _labels(record),
        "mergegate": _own(record),
    }
    if isinstance(record, Votes) and record.approvers:
        # ECS user fields may hold several values; `related.user` is where every person an event
        # involves is searched for.
        doc["user"] = {"name": list(record.approvers)}
        doc["related"] = {"user": list(record.approvers)}
    process = _process(record)
    if process:
        doc["process"] = process
    return doc


def _labels(record: Record) -> dict[str, str]:
    """The record's subject as ECS labels (keyword values only: numbers are written as text)."""
    labels: dict[str, object] = {
        "job": record.job,
        "path": record.path,
        "commit": record.commit,
        "blob": record.blob,
        "runner": record.runner or None,
    }
    if isinstance(record, Started | Finished):
        labels["run_id"] = record.run_id
    if isinstance(record, Finished | PolicyChange):
        labels["status"] = record.status
    if isinstance(record, Started):
        labels["attempt"] = str(record.attempt_number)
    if isinstance(record, Started | PolicyChange | Scanned):
        labels["policy_commit"] = record.policy_commit
    return {name: value for name, value in labels.items() if isinstance(value, str)}


def _process(record: Record) -> dict[str, object]:
    process: dict[str, object] = {}
    if isinstance(record, Started) and record.command is not None:
        process["args"] = list(record.command)
        process["args_count"] = len(record.command)
        if record.cwd is not None:
            process["working_directory"] = record.cwd
    if isinstance(record, Started | Finished) and record.resolved_program is not None:
        process["executable"] = record.resolved_program
    if isinstance(record, Finished):
        if record.exit_code is not None:
            process["exit_code"] = record.exit_code
    return process


def _own(record: Record) -> dict[str, object]:
    """What only mergegate has a word for: the chain link (a SIEM can check `prev` follows the
    `event.id` of the record before), and the approval's words."""
    own: dict[str, object] = {"seq": record.seq, "prev": record.prev, "hash": record.hash}
    if isinstance(record, Votes):
        if record.requirement is not None:
            own["requirement"] = record.requirement
        if record.votes:
            own["votes"] = list(record.votes)
    if isinstance(record, Finished):
        if record.signal is not None:
            own["signal"] = record.signal  # (ECS has no field for the signal that ended a process)
        for name in ("stdout_sha256", "stderr_sha256"):
            value = getattr(record, name)
            if value is not None:
                own[name] = value
    return own
