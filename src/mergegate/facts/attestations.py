"""Checking the runs' attestations against the records they name (`audit verify`, `verify`).

Each file audit/attestations/<run id>.intoto.json must be a DSSE envelope of an in-toto statement
that is, byte for byte, the statement audit/attestation.py rebuilds from the `started` and
`finished` records it names (by seq and hash) and the git objects those name, signed by a runner
key of the policy in force at the audit commit that appended the run's `finished` record.

Which runs must have one: attestations start with this version of mergegate, and a gate's older
runs have none. So a runner name owes one for every run end it records **from its first
attestation on** (its first `finished` record that has one), in audit commits whose policy lists
`runners`. A runner that never signed one (an older version, an OpenPGP or FIDO key, a policy
without runners) owes none. A missing, mismatched or wrongly signed attestation is tampering.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from mergegate.audit import attestation
from mergegate.audit import log as audit
from mergegate.audit.records import Finished, Record, Started
from mergegate.crypto import dsse
from mergegate.errors import MergegateError
from mergegate.git.repo import Repo
from mergegate.rules.policy import POLICY_FILE, Policy


@dataclass(frozen=True)
class RunEnd:
    """A `finished` record, as the check needs it: its run, place and writer."""

    run_id: str
    seq: int
    runner: str


def attestation_files(repo: Repo, records_tip: str | None) -> dict[str, str]:
    """run id -> blob of each attestation file at `records_tip` (one tree read)."""
    if records_tip is None:
        return {}
    root = repo.tree_entries(repo.commit(records_tip).tree)
    if "audit" not in root:
        return {}
    held = repo.tree_entries(root["audit"][1]).get("attestations")
    if held is None or held[0] != "040000":
        return {}
    found = {}
    for name, (_, blob) in repo.tree_entries(held[1]).items():
        run_id = attestation.run_of_path(attestation.ATTESTATIONS_DIR + name)
        if run_id is not None:  # (any other name fails the commit checks)
            found[run_id] = blob
    return found


@dataclass
class AttestationCheck:
    """The check of every attestation of one audit branch; `problems()` lists what is wrong."""

    repo: Repo
    files: Mapping[str, str]  # run id -> blob (attestation_files)
    ends: Sequence[RunEnd]  # every `finished` record, in chain order
    judged: Sequence[tuple[int, str]]  # (first seq each audit commit appended, its trailer)
    policy_at: Callable[[str], Policy]
    records_at: Callable[[Iterable[int]], Mapping[int, Record]]  # records by seq

    def __post_init__(self) -> None:
        self._firsts = [first for first, _ in self.judged]

    def problems(self) -> list[str]:
        found = self._missing()
        by_run = {end.run_id: end for end in self.ends}
        attested = [(run_id, by_run.get(run_id)) for run_id in sorted(self.files)]
        stray = [run_id for run_id, end in attested if end is None]
        found += [
            f"{attestation.path_of(run_id)} attests run {run_id}, which has no finished record"
            for run_id in stray
        ]
        envelopes = {run_id: self._envelope(run_id) for run_id, end in attested if end is not None}
        wanted = {
            seq for parsed in envelopes.values() if not isinstance(parsed, str) for seq in parsed[1]
        } | {end.seq for _, end in attested if end is not None}
        records = self.records_at(wanted)
        for run_id, end in attested:
            parsed = envelopes.get(run_id)
            if end is None or parsed is None:
                continue
            problem = parsed if isinstance(parsed, str) else self._check(end, *parsed, records)
            if problem:
                found.append(f"{attestation.path_of(run_id)}: {problem}: tampering")
        return found

    def _trailer(self, seq: int) -> str | None:
        """The approved tip the audit commit that appended record `seq` says it judged."""
        at = bisect.bisect_right(self._firsts, seq) - 1
        return self.judged[at][1] if at >= 0 else None

    def _missing(self) -> list[str]:
        since: dict[str, int] = {}
        for end in self.ends:
            if end.run_id in self.files:
                since.setdefault(end.runner, end.seq)
        problems = []
        for end in self.ends:
            first = since.get(end.runner)
            if first is None or end.seq < first or end.run_id in self.files:
                continue
            trailer = self._trailer(end.seq)
            if trailer is not None and self.policy_at(trailer).runners:
                problems.append(
                    f"seq {end.seq}: run {end.run_id} has no attestation "
                    f"({attestation.path_of(end.run_id)}), although runner {end.runner!r} "
                    f"attests every run end since seq {first}: tampering"
                )
        return problems

    def _envelope(self, run_id: str) -> str | tuple[dsse.Envelope, tuple[int, int], str]:
        """(the envelope, the seqs of the records its statement names, their hashes' text), or
        what is wrong with the file."""
        try:
            envelope = dsse.Envelope.from_bytes(self.repo.blob(self.files[run_id]))
            if envelope.payload_type != dsse.INTOTO_PAYLOAD_TYPE:
                return f"payloadType is {envelope.payload_type!r}, not {dsse.INTOTO_PAYLOAD_TYPE}"
            named = json.loads(envelope.payload)["predicate"]["records"]
            seqs = (int(named["started"]["seq"]), int(named["finished"]["seq"]))
        except dsse.DsseError as exc:
            return exc.message
        except (ValueError, KeyError, TypeError):
            return "its statement does not name the seq of its started and finished records"
        return envelope, seqs, run_id

    def _check(
        self,
        end: RunEnd,
        envelope: dsse.Envelope,
        seqs: tuple[int, int],
        run_id: str,
        records: Mapping[int, Record],
    ) -> str:
        started, finished = records.get(seqs[0]), records.get(seqs[1])
        if not isinstance(finished, Finished) or finished.seq != end.seq:
            return f"it names seq {seqs[1]}, which is not the finished record of run {run_id}"
        if not isinstance(started, Started) or started.run_id != run_id:
            return f"it names seq {seqs[0]}, which is not the started record of run {run_id}"
        trailer = self._trailer(end.seq)
        policy = self.policy_at(trailer) if trailer is not None else None
        keys = [k.text for k in policy.runner_keys() if k.kind == "ssh"] if policy else []
        if not keys:
            return "the policy in force when its run ended lists no runner key that could sign it"
        if dsse.verify(envelope, keys) is None:
            return f"it is not signed by a runner key of {policy.where if policy else 'the policy'}"
        expected = attestation.payload(
            attestation.statement(
                started,
                finished,
                job_bytes=self._blob(started.blob),
                policy_blob=(
                    self.repo.file_blob(started.policy_commit, POLICY_FILE)
                    if started.policy_commit
                    else None
                ),
            )
        )
        if envelope.payload != expected:
            return (
                f"its statement does not match the records it names (seq {seqs[0]} and "
                f"{seqs[1]}) rebuilt"
            )
        return ""

    def _blob(self, blob: str | None) -> bytes:
        try:
            return self.repo.blob(str(blob))
        except MergegateError:  # (a blob this clone lacks: the statement cannot match)
            return b""


def problems_of(
    repo: Repo,
    records_tip: str | None,
    records: Sequence[Record],
    judged: Sequence[tuple[int, str]],
    policy_at: Callable[[str], Policy],
) -> list[str]:
    """`verify`'s check, every record in memory (from seq 1); none on the branch: no runner
    attests yet, nothing is owed."""
    files = attestation_files(repo, records_tip)
    if not files:
        return []
    ends = [
        RunEnd(r.run_id, r.seq, r.runner)
        for r in records
        if isinstance(r, Finished) and r.run_id is not None
    ]
    return AttestationCheck(
        repo, files, ends, judged, policy_at, records_by_seq(records)
    ).problems()


def records_by_seq(records: Sequence[Record]) -> Callable[[Iterable[int]], Mapping[int, Record]]:
    """records_at for records all in memory (verify), in chain order from seq 1."""

    def records_at(seqs: Iterable[int]) -> Mapping[int, Record]:
        return {s: records[s - 1] for s in seqs if 1 <= s <= len(records)}

    return records_at


def records_from_files(
    repo: Repo, first_seqs: Mapping[str, int]
) -> Callable[[Iterable[int]], Mapping[int, Record]]:
    """records_at reading only the log files that hold the seqs asked for (`audit verify`, which
    does not keep the records): `first_seqs` is each log file blob's first seq."""
    starts = sorted((seq, blob) for blob, seq in first_seqs.items())
    firsts = [seq for seq, _ in starts]

    def records_at(seqs: Iterable[int]) -> Mapping[int, Record]:
        found: dict[int, Record] = {}
        by_file: dict[int, list[int]] = {}
        for seq in seqs:
            at = bisect.bisect_right(firsts, seq) - 1
            if at >= 0:
                by_file.setdefault(at, []).append(seq)
        for at, wanted in by_file.items():
            first, blob = starts[at]
            lines = audit.parse_file(repo.blob(blob), blob)
            found.update((s, lines[s - first]) for s in wanted if 0 <= s - first < len(lines))
        return found

    return records_at
