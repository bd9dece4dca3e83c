"""What one audit commit may do to each file of audit/: the add-only and append-only rules.

A log file (audit/log-NNNNNN.jsonl) only grows by complete lines; an evidence file
(audit/evidence/<sha256>.json) and an attestation (audit/attestations/<run id>.intoto.json) are
only ever added, as plain files, an evidence file's bytes hashing to its name. Nothing else may be
touched. (That an attestation says what its records say is audit verify's check:
facts/attestations.py.) audit_commits.py applies these rules to each commit.
"""

from __future__ import annotations

import hashlib
import json
import re

from mergegate.audit import attestation
from mergegate.audit import log as audit
from mergegate.errors import IntegrityError
from mergegate.facts.branches import AUDIT_BRANCH
from mergegate.git.repo import Repo
from mergegate.git.values import Change


class Tampering(IntegrityError):
    def __init__(
        self, sha: str, what: str, *, file: str | None = None, line: int | None = None
    ) -> None:
        super().__init__(
            f"audit commit {sha[:12]} on {AUDIT_BRANCH} {what}: tampering",
            file=file,
            line=line,
            hint="records are only ever appended by runners; "
            f"inspect it with `git show {sha[:12]}`",
        )


def check_evidence(repo: Repo, sha: str, change: Change) -> None:
    """An evidence file is only ever added, and its bytes hash to its name."""
    path = change.path
    if change.status != "A":
        verb = "removes" if change.status == "D" else "changes"
        raise Tampering(
            sha, f"{verb} evidence file {path} (evidence is only ever added)", file=path
        )
    if change.new_mode != "100644" or hashlib.sha256(
        repo.blob(change.new_blob)
    ).hexdigest() != audit.is_evidence_path(path):
        raise Tampering(
            sha,
            f"adds evidence file {path}, whose bytes do not hash to its name",
            file=path,
        )


def check_log_file(sha: str, change: Change) -> None:
    """Anything but an evidence file is a log file, kept and plain."""
    path = change.path
    if not re.match(r"^audit/log-\d{6}\.jsonl$", path):
        raise Tampering(
            sha,
            f"touches {path}: audit commits may only append to audit/log-NNNNNN.jsonl "
            "and add audit/evidence/<sha256>.json",
            file=path,
        )
    if change.status == "D":
        raise Tampering(sha, f"deletes audit file {path}", file=path)
    if change.new_mode != "100644":
        raise Tampering(
            sha,
            f"makes {path} something other than a plain file (mode {change.new_mode})",
            file=path,
        )


def extends(repo: Repo, new: bytes, old_blob: str) -> bool:
    """Whether `new` starts with the bytes of blob `old_blob`, without reading that blob:
    the git object id of new's prefix of that size must be `old_blob` (SHA-1 object ids)."""
    size = repo.object_size(old_blob) if len(old_blob) == 40 else None
    if size is None or size > len(new):
        return False
    return (
        hashlib.sha1(b"blob %d\0" % size + new[:size], usedforsecurity=False).hexdigest()
        == old_blob
    )


def first_seq(data: bytes, offset: int, known: int | None) -> int | None:
    """The smaller of `known` and the seq of the record starting at `offset` (None when
    unreadable)."""
    end = data.find(b"\n", offset)
    try:
        seq = json.loads(data[offset:end])["seq"]
    except (ValueError, KeyError, TypeError):
        return known
    if not isinstance(seq, int) or isinstance(seq, bool):
        return known
    return seq if known is None else min(known, seq)


def first_difference(old: bytes, new: bytes) -> int:
    for number, (a, b) in enumerate(zip(old.splitlines(), new.splitlines(), strict=False), start=1):
        if a != b:
            return number
    return min(old.count(b"\n"), new.count(b"\n")) + 1


def is_attestation(path: str) -> bool:
    return attestation.run_of_path(path) is not None


def is_log(path: str) -> bool:
    return audit.is_evidence_path(path) is None and attestation.run_of_path(path) is None


def check_attestation(sha: str, change: Change) -> None:
    """An attestation file is only ever added, as a plain file (audit verify checks its content
    against the records it names)."""
    if change.status != "A" or change.new_mode != "100644":
        verb = {"D": "removes", "A": "adds a non-plain"}.get(change.status, "changes")
        raise Tampering(
            sha,
            f"{verb} attestation file {change.path} (attestations are only ever added)",
            file=change.path,
        )
