"""The end of the audit log, kept in memory by a pass that appends to it.

A pass reads the tail once (back to the last `scanned` record, links checked). After
that every commit it builds starts from this value: the records are sealed after the
last one, appended to the last file's bytes (rotating as `audit.append` does), and
the trees are rebuilt from the entries already known, all in-process (no git process
for an unsigned commit). Once the push landed, the end moves on by what was appended.
Records other runners appended meanwhile are read incrementally: the bytes after the
known end of the last file and any file after it, links checked from the last known
hash. Nothing is re-read or re-hashed per job, so job #1000 costs what job #1 did.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from mergegate.audit import log as audit
from mergegate.audit.records import GENESIS, Record
from mergegate.errors import IntegrityError
from mergegate.git.repo import Repo
from mergegate.git.values import Signing

_LOG = re.compile(r"^log-(\d{6})\.jsonl$")


@dataclass(frozen=True)
class LogEnd:
    commit: str | None  # the audit commit this is the end of (None: no audit branch yet)
    last_seq: int = 0
    last_hash: str = GENESIS
    last_file: str | None = None  # audit/log-NNNNNN.jsonl
    data: bytes = b""  # the last file's bytes
    file_records: int = 0
    audit_tree: Mapping[str, tuple[str, str]] = field(default_factory=dict)  # entries of audit/
    evidence_tree: Mapping[str, tuple[str, str]] = field(
        default_factory=dict
    )  # entries of audit/evidence/

    @classmethod
    def read(cls, repo: Repo, commit: str | None, tail: audit.Tail) -> LogEnd:
        """The end at `commit`, whose (checked) tail the pass read."""
        if commit is None:
            return cls(None)
        audit_tree, evidence_tree = _trees(repo, commit)
        data = b""
        if tail.last_file is not None:
            data = repo.blob(audit_tree[tail.last_file.removeprefix(audit.AUDIT_DIR)][1])
        return cls(
            commit,
            tail.last_seq,
            tail.last_hash,
            tail.last_file,
            data,
            tail.last_file_records,
            audit_tree,
            evidence_tree,
        )

    def advance(self, repo: Repo, commit: str) -> tuple[LogEnd, list[Record]]:
        """The end at `commit` (a descendant, its commits checked) and the records appended
        since."""
        if commit == self.commit:
            return self, []
        audit_tree, evidence_tree = _trees(repo, commit)
        names = sorted(n for n in audit_tree if _LOG.match(n))
        mine = self.last_file.removeprefix(audit.AUDIT_DIR) if self.last_file else None
        new: list[Record] = []
        data, count = self.data, self.file_records
        for name in names:
            if mine is not None and name < mine:
                continue
            path = audit.AUDIT_DIR + name
            blob = repo.blob(audit_tree[name][1])
            if name == mine:
                if not blob.startswith(self.data):
                    raise IntegrityError(
                        f"{path} no longer starts with the records this pass read (rewritten?)",
                        file=path,
                    )
                records = audit.parse_file(blob[len(self.data) :], path)
                count += len(records)
            else:
                records = audit.parse_file(blob, path)
                count = len(records)
            data = blob
            new += records
        audit.check_links(new, prev_seq=self.last_seq, prev_hash=self.last_hash, where={})
        last = new[-1] if new else None
        moved = replace(
            self,
            commit=commit,
            last_seq=last.seq if last else self.last_seq,
            last_hash=last.hash if last else self.last_hash,
            last_file=audit.AUDIT_DIR + names[-1] if names else None,
            data=data,
            file_records=count,
            audit_tree=audit_tree,
            evidence_tree=evidence_tree,
        )
        return moved, new

    def build(
        self,
        repo: Repo,
        drafts: Sequence[Mapping[str, object] | Record],
        evidence: Mapping[str, bytes],
        *,
        message: str,
        author: tuple[str, str],
        signing: Signing | None,
        attest: Callable[[list[Record]], Mapping[str, bytes]] | None = None,
    ) -> tuple[str, list[Record], LogEnd]:
        """Seal `drafts` after the end, write the commit (not pushed) and return it with the end it
        makes. `attest` gives, for the sealed records, the attestation files the commit adds
        (audit/attestations/<run id>.intoto.json: they name the records' seq and hash)."""
        sealed = audit.seal(drafts, after_seq=self.last_seq, after_hash=self.last_hash)
        path, count, data = self.last_file, self.file_records, self.data
        files: dict[str, bytes] = {}
        for record in sealed:
            line = record.line()
            if (
                path is None
                or count >= audit.RECORDS_PER_FILE
                or (count > 0 and len(data) + len(line) > audit.MAX_FILE_BYTES)
            ):
                number = 1 if path is None else int(path[-12:-6]) + 1
                path, count, data = f"{audit.AUDIT_DIR}log-{number:06d}.jsonl", 0, b""
            data += line
            count += 1
            files[path] = data
        audit_tree = dict(self.audit_tree)
        for name, content in files.items():
            audit_tree[name.removeprefix(audit.AUDIT_DIR)] = (
                "100644",
                repo.write_object("blob", content),
            )
        evidence_tree = dict(self.evidence_tree)
        for name, content in evidence.items():
            short = name.removeprefix(audit.EVIDENCE_DIR)
            if short not in evidence_tree:  # a file is its hash: one that is there is this one
                evidence_tree[short] = ("100644", repo.write_object("blob", content))
        if evidence_tree:
            audit_tree["evidence"] = ("040000", repo.write_tree(evidence_tree))
        attested = attest(sealed) if attest is not None else {}
        if attested:
            held = audit_tree.get("attestations")
            entries = dict(repo.tree_entries(held[1])) if held is not None else {}
            for name, content in attested.items():
                short = name.removeprefix(audit.ATTESTATIONS_DIR)
                entries[short] = ("100644", repo.write_object("blob", content))
            audit_tree["attestations"] = ("040000", repo.write_tree(entries))
        root = repo.write_tree({"audit": ("040000", repo.write_tree(audit_tree))})
        sha = repo.write_commit_object(
            tree=root, parent=self.commit, message=message, author=author, signing=signing
        )
        assert path is not None
        after = LogEnd(
            sha, sealed[-1].seq, sealed[-1].hash, path, data, count, audit_tree, evidence_tree
        )
        return sha, sealed, after


def _trees(
    repo: Repo, commit: str
) -> tuple[dict[str, tuple[str, str]], dict[str, tuple[str, str]]]:
    root = repo.tree_entries(repo.commit(commit).tree)
    if "audit" not in root:
        return {}, {}
    audit_tree = repo.tree_entries(root["audit"][1])
    evidence = repo.tree_entries(audit_tree["evidence"][1]) if "evidence" in audit_tree else {}
    return audit_tree, evidence
