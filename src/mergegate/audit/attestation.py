"""A run's attestation: an in-toto Statement v1 about one run, made from its two records.

When a runner records a run's end (its `finished` record, whatever the status: succeeded, failed,
timed out, interrupted, lost, denied before start) under a policy that lists `runners`, it adds to
the same audit commit `audit/attestations/<run id>.intoto.json`: this statement in a DSSE envelope
(crypto/dsse.py) signed with its `--signing-key`. Everything the statement says is read from the
run's `started` and `finished` records and two git objects they name (the job file's bytes, the
policy file's blob id), so `audit verify` rebuilds it from the records and compares it byte for
byte (docs/audit-format.md, "Attestations"; the predicate's JSON Schema is
docs/attestation-run-v1.schema.json).

Pure values: no git here (the caller reads the two objects), no clock, no key.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping

from mergegate.audit.records import Finished, Started, canonical

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PREDICATE_TYPE = "https://mergegate.dev/attestation/run/v1"
ATTESTATIONS_DIR = "audit/attestations/"
SUFFIX = ".intoto.json"
APPROVED_SUBJECT = "approved"  # the name of the approving commit's subject
_PATH = re.compile(r"^audit/attestations/([0-9a-f]{32})\.intoto\.json$")


def path_of(run_id: str) -> str:
    return f"{ATTESTATIONS_DIR}{run_id}{SUFFIX}"


def run_of_path(path: str) -> str | None:
    """The run id an attestation file's name claims, or None if it is not named like one."""
    match = _PATH.match(path)
    return match.group(1) if match else None


def _sha256(text: str | None) -> str | None:
    return None if text is None else hashlib.sha256(text.encode("utf-8")).hexdigest()


def _stream(finished: Finished, name: str) -> dict[str, object] | None:
    tail = getattr(finished, f"{name}_tail")
    if tail is None:  # a run that never started, or was lost: no output was recorded
        return None
    return {
        "tailSha256": _sha256(tail),
        "bytes": getattr(finished, f"{name}_bytes"),
        "sha256": getattr(finished, f"{name}_sha256"),
    }


def predicate(
    started: Started, finished: Finished, *, policy_blob: str | None
) -> dict[str, object]:
    """The run's predicate (`https://mergegate.dev/attestation/run/v1`)."""
    counted: list[Mapping[str, str]] | None = (
        None if started.counted is None else [dict(v) for v in started.counted]
    )
    return {
        "run": {
            "id": finished.run_id,
            "attempt": started.attempt_number,
            "job": started.job,
            "path": started.path,
            "blob": started.blob,
        },
        "approval": {
            "commit": started.commit,
            "votes": counted,
            "requirement": started.requirement,
            "selfApproved": started.self_approved,
        },
        "policy": {
            "commit": started.policy_commit,
            "path": "policy/policy.yaml",
            "blob": policy_blob,
            "rule": started.rule,
        },
        "runner": {"started": started.runner, "finished": finished.runner},
        "invocation": {
            "argv": None if started.command is None else list(started.command),
            "resolvedProgram": started.resolved_program,
            "cwd": started.cwd,
            "sandbox": started.sandbox,
        },
        "startedOn": started.time,
        "finishedOn": finished.time,
        "result": {
            "status": finished.status,
            "exitCode": finished.exit_code,
            "signal": finished.signal,
            "reason": finished.reason,
            "durationMs": finished.duration_ms,
        },
        "output": {"stdout": _stream(finished, "stdout"), "stderr": _stream(finished, "stderr")},
        "records": {
            "started": {"seq": started.seq, "hash": started.hash},
            "finished": {"seq": finished.seq, "hash": finished.hash},
        },
    }


def statement(
    started: Started, finished: Finished, *, job_bytes: bytes, policy_blob: str | None
) -> dict[str, object]:
    """The in-toto Statement v1 of a run: its job file and approving commit as subjects."""
    return {
        "_type": STATEMENT_TYPE,
        "subject": [
            {
                "name": started.path,
                "digest": {
                    "sha256": hashlib.sha256(job_bytes).hexdigest(),
                    "gitBlob": started.blob,
                },
            },
            {"name": APPROVED_SUBJECT, "digest": {"gitCommit": started.commit}},
        ],
        "predicateType": PREDICATE_TYPE,
        "predicate": predicate(started, finished, policy_blob=policy_blob),
    }


def payload(value: Mapping[str, object]) -> bytes:
    """A statement's bytes, the envelope's payload: as records are written (sorted keys, no
    whitespace, raw UTF-8), so that a rebuilt statement is the same bytes."""
    return canonical(value)
