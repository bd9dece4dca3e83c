"""`audit verify`: the hash chain from seq 1 and every commit of the audit branch (linear,
only appends, signed by a runner when the policy says so), from a bare clone, offline.

It imports little at first: the log files' workers (audit_chain) start as soon as the
audit branch's tip is known, and what the commit checks need (the policy, the judge,
GitHub's stored evidence) is imported while they check (issue 12: start-up counts).
"""

from __future__ import annotations

import gc
import operator
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from itertools import compress, repeat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from mergegate import clock
from mergegate.audit import chain as audit_chain
from mergegate.audit import log as audit
from mergegate.audit.records import Finished, Record, Scanned, parse
from mergegate.errors import IntegrityError
from mergegate.facts.branches import open_branch, refuse_old_layout, trust_root
from mergegate.git.repo import Repo

if TYPE_CHECKING:
    from mergegate.crypto.signatures import PublicKey, SignatureCheck
    from mergegate.facts.assessor import Assessor
    from mergegate.facts.audit_commits import Checker
    from mergegate.git.values import Commit
    from mergegate.github.evidence import Evidence


@dataclass(frozen=True)
class AuditReport:
    tip: str
    records: int
    files: int


def verify_audit(
    *, repo_path: Path, remote: str, branch: str, fetch: bool, trust: str | None = None
) -> AuditReport:
    """The chain from seq 1, and every audit commit; IntegrityError at the first violation."""
    # No cyclic collections while it runs: the imports and the chain's facts (50,000 run ids at
    # 100,000 records) are live until the end, and each collection would walk them all again (issue
    # 12).
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _verify_audit(
            repo_path=repo_path, remote=remote, branch=branch, fetch=fetch, trust=trust
        )
    finally:
        if collecting:
            gc.enable()


def _verify_audit(
    *, repo_path: Path, remote: str, branch: str, fetch: bool, trust: str | None
) -> AuditReport:
    repo = Repo(repo_path)
    source = open_branch(repo, remote=remote, branch=branch, fetch=fetch)
    records_tip = source.audit_tip()
    # The workers start on the log files now; nothing they find is looked at before the checks below
    # (approved's tip, a rewritten branch, an old layout, the trust root) have passed, in the order
    # they always ran. (approved's tip is read after the fork: two git processes less before the
    # workers start.)
    with audit_chain.ChainCheck(repo, records_tip, _facts) as reading:
        tip = source.tip()
        source.check_not_rewritten(tip, records_tip)
        refuse_old_layout(repo, tip, records_tip)
        root, _ = trust_root(repo, tip, trust)
        # Imported here, while the workers check the log: what the commit checks need. The judge's
        # modules (approvals, GitHub's evidence, planning) only if a check asks for them
        # (`_Assessing`, issue 12).
        from mergegate.facts.audit_commits import Checker, every_commit
        from mergegate.facts.policy_log import policy_lookup

        commits = every_commit(repo, records_tip)
        repo.prefetch(
            commits
            # every commit's diff in one diff-tree, not one process per commit; while the workers
            # check
        )

        def checker(
            stored: dict[str, Evidence],
            verified: dict[str, int],
            named: dict[str, frozenset[str]] | None = None,
        ) -> Checker:
            # Policy changes approved by reviews count as `verify` counts them: from the stored
            # evidence, offline.
            now = clock.now()

            def assessor() -> Assessor:
                from mergegate.facts.assessor import Assessor
                from mergegate.github import gather as github

                return Assessor(
                    repo,
                    reviews=github.ReviewSource(
                        repo, now=now, settings=None, stored=stored, offline=True
                    ),
                )

            assessing = _Assessing(assessor, at=now)
            return Checker(
                repo,
                assessing,
                tip,
                policy_lookup(repo, assessing, at=now, root=root, records=records_tip),
                verified=verified,
                verified_names=named or {},
            )

        # The chain first, streamed: one log file in memory at a time, whatever the length of the
        # log (issue 12); then the commits, with what the chain's reading already established (the
        # evidence records name, the log files it checked whole). A broken chain is still reported
        # as the commit that broke it: the commits are checked before its error is raised.
        try:
            chain = read_chain(reading)
            chain.unapproved.check(repo, records_tip)
            stored = _stored_evidence(repo, records_tip, chain.naming)
        except IntegrityError:
            reading.close()
            from mergegate.github import gather as github

            checker(github.stored_evidence(repo, records_tip), {}).check(commits)
            raise
    checked = checker(stored, chain.verified, chain.named)
    checked.check(commits)
    _check_attestations(repo, records_tip, chain, checked)
    return AuditReport(records_tip or "", chain.records, chain.files)


def _check_attestations(
    repo: Repo, records_tip: str | None, chain: Chain, checked: Checker
) -> None:
    """Every run's attestation against the records it names (facts/attestations.py); none on the
    branch: no runner attests yet, nothing is owed (nor imported)."""
    from mergegate.facts import attestations

    files = attestations.attestation_files(repo, records_tip)
    if not files:
        return
    problems = attestations.AttestationCheck(
        repo,
        files,
        [attestations.RunEnd(*end) for end in chain.ends],
        checked.judged,
        checked.policy_at,
        attestations.records_from_files(repo, chain.verified),
    ).problems()
    if problems:
        more = f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""
        raise IntegrityError(
            problems[0] + more,
            hint="attestations are only ever written by runners, from the records they name; "
            "inspect the file with `git show origin/mergegate/audit:<file>`",
        )


def bad_attestations(
    repo: Repo, records_tip: str | None, records: list[Record], checker: Checker
) -> list[str]:
    """`verify`'s check of every run's attestation, its records in memory
    (facts/attestations.py)."""
    from mergegate.facts import attestations

    judged, policy_at = checker.judged, checker.policy_at
    return attestations.problems_of(repo, records_tip, records, judged, policy_at)


def _stored_evidence(
    repo: Repo, records_tip: str | None, naming: list[Record]
) -> dict[str, Evidence]:
    """github.stored_evidence of the records that name evidence (none: nothing to read, nor to
    import)."""
    if not naming:
        return {}
    from mergegate.github import gather as github

    return github.stored_evidence(repo, records_tip, naming)


class _Assessing:
    """The commit checks' Assessor, made when a check first asks for it: a runner's signature to
    check (at `at`), or a policy change to judge. Until then the judge's modules are not
    imported."""

    def __init__(self, make: Callable[[], Assessor], *, at: datetime) -> None:
        self.make = make
        self.at = at
        self.made: Assessor | None = None

    def __call__(self) -> Assessor:
        if self.made is None:
            self.made = self.make()
        return self.made

    def signature(self, commit: Commit, keys: Sequence[PublicKey]) -> SignatureCheck:
        return self().signature(commit, keys, at=self.at)


@dataclass
class Chain:
    """What `audit verify` keeps of the chain it read: counts, the first seq of each log-file blob
    (the commit checks need not read those again), the evidence references to check."""

    records: int = 0
    files: int = 0
    verified: dict[str, int] = field(default_factory=dict)
    named: dict[str, frozenset[str]] = field(default_factory=dict)  # blob -> commits it names
    naming: list[Record] = field(
        default_factory=list
    )  # records that may name evidence (`evidence` or `reviewed` members)
    unapproved: Unapproved = field(default_factory=lambda: Unapproved())
    ends: list[tuple[str, int, str]] = field(default_factory=list)  # (run id, seq, runner)


def read_chain(reading: audit_chain.ChainCheck[Facts]) -> Chain:
    """The whole chain, checked, and the facts verify keeps, one file's worth at a time;
    IntegrityError at the first problem in chain order (a broken link, or a run finished twice)."""
    chain, finished = Chain(), FinishedTwice()
    for log in reading:
        chain.files += 1
        chain.records += log.records
        if problem := finished.add_runs(log.summary.finished):
            raise IntegrityError(problem)
        for record in log.summary.unapproved:
            chain.unapproved.add(record)
        if log.first_seq is not None:
            chain.verified[log.blob] = log.first_seq
            chain.named[log.blob] = log.summary.named
        chain.naming += log.summary.naming
        chain.ends += log.summary.ends
    return chain


@dataclass(frozen=True)
class Facts:
    """What `audit verify` needs of one log file beyond its chain, made where the file was read
    (a worker process): its `finished` records' (run id, seq), the fields of its `scanned`
    records naming an unapproved map, and of its records that name evidence (an `evidence` or a
    `reviewed` member: what github.stored_evidence reads)."""

    finished: list[tuple[str, int]]
    unapproved: list[Record]  # (parsed here: records pickle)
    naming: list[Record]
    ends: list[tuple[str, int, str]]  # the finished records' (run id, seq, runner): attestations
    named: frozenset[str]  # the commits its records name (the commit checks' tie, NameSink)


def _facts(data: bytes, records: Sequence[Mapping[str, Any]]) -> Facts:
    """(As `FinishedTwice.add` and `Unapproved.add` pick their records; a seq as `Record.seq` reads
    it.) Over a thousand records a file, in as few Python steps per record as it takes (issue 12).
    """
    events = list(map(operator.itemgetter("event"), records))
    picked = compress(records, map(operator.eq, events, repeat("finished")))
    ends = [
        (run_id, int(seq), str(runner))
        for run_id, seq, runner in (
            (fields.get("run_id"), fields["seq"], fields["runner"]) for fields in picked
        )
        if isinstance(run_id, str)
    ]
    finished = [(run_id, seq) for run_id, seq, _ in ends]
    unapproved = (
        []
        if "scanned" not in events
        else [
            parse(fields)
            for fields in records
            if fields["event"] == "scanned" and fields.get("unapproved_file")
        ]
    )
    # The records github.stored_evidence reads references from: those with an `evidence` or a
    # `reviewed` member (a scanned record's map need not say "evidence" anywhere). Two lookups a
    # record at C speed, not a search of the file's bytes.
    naming: list[Record] = []
    if any(map(operator.contains, records, repeat("evidence"))) or any(
        map(operator.contains, records, repeat("reviewed"))
    ):
        naming = [
            parse(fields) for fields in records if "evidence" in fields or "reviewed" in fields
        ]
    from mergegate.facts.audit_commits import NAMED  # (lazily, as the module's other uses)

    named = frozenset(m.decode() for m in NAMED.findall(data))
    return Facts(finished, unapproved, naming, ends, named)


class FinishedTwice:
    """A run has one result: two `finished` records for one run id (two passes at once)
    contradict."""

    def __init__(self) -> None:
        self.first: dict[str, int] = {}

    def add(self, record: Record) -> str | None:
        if not isinstance(record, Finished) or record.run_id is None:
            return None
        return self.add_run(record.run_id, record.seq)

    def add_runs(self, runs: Sequence[tuple[str, int]]) -> str | None:
        """add_run of each (run id, seq) in order: the same first problem, at C speed when there is
        none (a log file's 500 run ids, new and distinct, are added in one update)."""
        new = dict(runs)
        if len(new) == len(runs) and self.first.keys().isdisjoint(new):
            self.first.update(new)
            return None
        for run_id, seq in runs:
            if problem := self.add_run(run_id, seq):
                return problem
        return None

    def add_run(self, run_id: str, seq: int) -> str | None:
        if run_id in self.first:
            return (
                f"seq {seq}: run {run_id} has 2 finished records (first at seq "
                f"{self.first[run_id]})"
            )
        self.first[run_id] = seq
        return None


class Unapproved:
    """The first `scanned` record naming each evidence file of unapproved files."""

    def __init__(self) -> None:
        self.first: dict[str, Scanned] = {}

    def add(self, record: Record) -> None:
        # As written: a reference that is no hash is checked too, and fails.
        named = record.written("unapproved_file")
        if isinstance(record, Scanned) and named:
            self.first.setdefault(str(named), record)

    def check(self, repo: Repo, records_tip: str | None) -> None:
        """Every evidence file a record names is on the branch, and is what its name says."""
        for digest in sorted(self.first):
            audit.read_unapproved(repo, records_tip, self.first[digest])
