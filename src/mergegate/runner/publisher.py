"""Publishing records: commit drafts on the audit branch's tip and push them, without force.

The runner never writes to approved. A commit is built in memory from the end of the log
(`logend.LogEnd`) and pushed as a plain push (a compare-and-swap on the tip). When the push is
rejected because the branch moved, the publisher fetches both branches once, checks the commits
other runners added, reads the records they appended (and adds them to the claim `Book`), drops
claims another runner made first (or that a veto merged meanwhile now stops), re-seals the rest on
the new tip and tries again. A push the remote refused outright is kept as the pending commit
(pending.py) and the error goes up: the results stay in the spool.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

from mergegate import clock
from mergegate.audit import log as audit
from mergegate.audit.records import Finished, Record, Started
from mergegate.audit.tail import LogEnd
from mergegate.errors import GitError, IntegrityError, UsageError
from mergegate.facts import audit_commits as audit_branch
from mergegate.facts.branches import AUDIT_BRANCH, Branch
from mergegate.git.repo import Repo
from mergegate.git.values import Signing
from mergegate.rules.eligibility import Standing, late_refusal
from mergegate.rules.model import Decision, Veto
from mergegate.runner import leases
from mergegate.runner.attesting import Attestor
from mergegate.runner.claims import Book, holder
from mergegate.runner.pending import Pending
from mergegate.runner.spool import Spool

# Many runners move the tip all the time: a push built on an older tip loses and is rebuilt on the
# new one. After a lost race a runner waits a random moment so that runners pushing in lockstep fall
# out of step: binary exponential backoff whose slot is what one try took here (a look at the
# branches, a commit, a push), up to one slot per runner pushing (at most RETRY_SLOTS). Retrying at
# once, the losers of a race met again at the next push (four runners on one merge lost two pushes
# of three).
MAX_PUSH_ATTEMPTS = 40
RETRY_JITTER_SECONDS = 0.02  # the least slot
RETRY_SLOTS = 16
# A claim is pushed only after a look at both branches at most this old: a veto merged while earlier
# jobs of the pass ran must still stop the next one.
FRESH_SECONDS = 1.0

Key = tuple[str, str, str]  # (path, blob, commit) of a job revision


@dataclass
class Publisher:
    repo: Repo
    branch: Branch
    runner_name: str
    fetch: bool
    signing: Signing | None
    spool: Spool
    pending: Pending
    judged: str  # the tip of approved the pass judged (each audit commit's Mergegate-Approved)
    end: LogEnd  # the audit branch up to which every commit was checked, and its log's end
    checker: audit_branch.Checker
    book: Book
    vetoes: Callable[[], dict[tuple[str, str], Veto]]  # every valid veto on approved known so far
    more_vetoes: Callable[
        [str], None
    ]  # search first-parent commits old..new of approved for vetoes
    # the `vetoed` or `rejected` record for a dropped claim
    vetoed_draft: Callable[[str, Decision, str], Record]
    veto_tip: str = ""
    fetched: float = field(default_factory=time.monotonic)  # the last look at both branches
    files: dict[str, bytes] = field(default_factory=dict)  # evidence files the next commit adds
    own_checked: str | None = None  # the trailer with which an own commit was fully checked
    push_seconds: float = (
        0.0  # how long the last push that landed took (batches grow while jobs are shorter)
    )
    # whether another runner's audit commits came in during the pass (idle.py: not settled)
    others: bool = False
    attestor: Attestor | None = None  # signs each run end's attestation (attesting.py)
    # told every batch of records once pushed (`run --report`: runner/reporting.py)
    on_published: Callable[[list[Record], Book], None] | None = None

    def __post_init__(self) -> None:
        self.veto_tip = self.veto_tip or self.judged

    @property
    def checked(self) -> str | None:
        return self.end.commit

    def publish(
        self,
        drafts: list[Record],
        *,
        claims: Mapping[Key, tuple[Decision, int]] | None = None,
    ) -> dict[Key, tuple[str, str]]:
        """Push `drafts`; with `claims` (their `started` drafts among them, each with its attempt),
        what was dropped and why:
        {key: ("claimed", "claimed by <runner>") or ("vetoed", reason)}. A `vetoed` record replaces
        a claim a veto now stops; the other drafts are pushed without the dropped claims."""
        claims = dict(claims or {})
        drafts, dropped = self._one_per_revision(drafts, claims)
        # A claim's lease counts from its push, not from its draft: lost races and the backoff
        # between them would otherwise spend the few seconds of slack, and the job, started late,
        # outlive its lease.
        drafted, ends = time.monotonic(), _leases(drafts)
        if claims:
            self.fresh()  # a veto merged while earlier jobs ran
        tried = (
            time.monotonic()
        )  # when this try began (its look at the branches, its commit, its push)
        for attempt in range(MAX_PUSH_ATTEMPTS):
            if attempt:
                drafts = self._not_closed_yet(drafts)
            drafts = _later_leases(drafts, ends, time.monotonic() - drafted)
            for key, (decision, number) in list(claims.items()):
                why = self._claim_dropped(decision, number, self.end.commit)
                if why is not None:
                    dropped[key] = why
                    del claims[key]
                    drafts = [d for d in drafts if not (isinstance(d, Started) and _key(d) == key)]
                    if why[0] in ("vetoed", "rejected"):
                        drafts.append(self.vetoed_draft(why[0], decision, why[1]))
            if not drafts:
                return dropped
            parent = self.end.commit
            reuse = self.pending.reusable(parent, self.end.last_seq, drafts)
            if reuse is not None:
                sha, records = (
                    reuse  # the same records a refused push held: pushed again, nothing new on disk
                )
                after = self.end  # moved on by advance() once pushed
            else:
                judged = self._trailer(parent)
                evidence = {
                    p: d
                    for p, d in self.files.items()
                    if p.removeprefix(audit.EVIDENCE_DIR) not in self.end.evidence_tree
                }
                sha, records, after = self.end.build(
                    self.repo,
                    drafts,
                    evidence,
                    message=audit_branch.message(_summary(drafts, self.end.last_seq), judged),
                    author=(self.runner_name, "runner@mergegate.invalid"),
                    signing=self.signing,
                    attest=self._attest(judged, parent),
                )
                self._check_own_commit(sha, judged)
            began = time.monotonic()
            try:
                published = self.branch.publish_records(sha, parent)
            except GitError as exc:
                self.pending.keep(sha)  # the next attempt pushes it again if it would say the same
                if any(isinstance(d, Finished) for d in drafts):
                    exc.hint = (
                        f"the job's result is kept in {self.spool.path} and pushed by the next run"
                    )
                raise
            if published:
                self.push_seconds = time.monotonic() - began
                self.pending.settle(sha)
                self.end = after if reuse is None else self.end.advance(self.repo, sha)[0]
                self.book.add(records)
                self.files = {}
                self.spool.drop({d.run_id for d in drafts if isinstance(d, Finished)})
                if self.on_published is not None:
                    self.on_published(records, self.book)
                return dropped
            # Refused because the branch moved: this commit can never be pushed; its objects go.
            if reuse is not None:
                self.pending.settle(None)
            else:
                self.repo.discard(sha)
            slot = max(RETRY_JITTER_SECONDS, time.monotonic() - tried)
            # As many slots as runners push here (those with claims in the book, and this one),
            # doubling with the losses up to that: more only leaves the CPUs idle while the others
            # are done.
            pushing = len(self.book.holders.keys() - {self.runner_name}) + 1
            wait = random.uniform(0, slot * min(2**attempt, RETRY_SLOTS, max(2, pushing)))
            left = self._lease_left(drafts)
            if left is not None:
                # A result must land within its run's lease (else any runner may close the run
                # `lost` and this result is dropped): the waits leave room for the next tries in
                # what is left of it.
                wait = min(wait, max(0.0, (left - slot) / 2))
            time.sleep(wait)
            tried = time.monotonic()
            self.refresh(fetch=True)
        raise GitError(
            f"could not push audit records to {AUDIT_BRANCH} after {MAX_PUSH_ATTEMPTS} attempts "
            "(other pushes kept landing first)",
            hint="another process keeps moving the branch; run again",
        )

    def _attest(
        self, judged: str, parent: str | None
    ) -> Callable[[list[Record]], Mapping[str, bytes]] | None:
        """The attestations of the run ends a commit on `parent` records (under the policy in
        force at `judged`, the commit's trailer)."""
        if self.attestor is None:
            return None
        attestor, policy = self.attestor, self.checker.policy_at(judged)
        return lambda sealed: attestor.files(
            sealed, policy=policy, known=self.book.started.values(), parent=parent
        )

    def _one_per_revision(
        self, drafts: list[Record], claims: dict[Key, tuple[Decision, int]]
    ) -> tuple[list[Record], dict[Key, tuple[str, str]]]:
        """At most once within one push too: one claim per revision (planning makes one; this is
        the backstop). Drops the others from `claims`; returns the drafts left and those dropped."""
        dropped: dict[Key, tuple[str, str]] = {}
        held: set[tuple[str, str]] = set()
        for key in list(claims):
            if key[:2] in held:
                dropped[key] = ("claimed", f"claimed by {self.runner_name} in the same push")
                del claims[key]
                drafts = [d for d in drafts if not (isinstance(d, Started) and _key(d) == key)]
            held.add(key[:2])
        return drafts, dropped

    def _lease_left(self, drafts: list[Record]) -> float | None:
        """Seconds until the first lease ends of the runs whose results `drafts` carry (None: no
        result)."""
        ends = []
        for d in drafts:
            started = (
                self.book.started.get((str(d.path), str(d.blob)))
                if isinstance(d, Finished)
                else None
            )
            until = (
                leases.until(started)
                if started is not None and isinstance(d, Finished) and started.run_id == d.run_id
                else None
            )
            if until is not None:
                ends.append(until)
        return (min(ends) - clock.now()).total_seconds() if ends else None

    def fresh(self) -> None:
        """Look at both branches again if the last look is older than FRESH_SECONDS (before choosing
        claims)."""
        if time.monotonic() - self.fetched > FRESH_SECONDS:
            self.refresh(fetch=self.fetch)

    def refresh(self, *, fetch: bool) -> None:
        """One fetch of both branches; check what other runners appended; look for new vetoes."""
        if fetch:
            self.branch.refresh()
        tip, records = self.branch.tips()
        if not self.repo.is_ancestor(self.judged, tip):
            raise IntegrityError(
                f"approved was rewritten during this pass: {self.judged[:12]} is not an ancestor "
                f"of the new tip {tip[:12]} (force-push?)"
            )
        checked = self.end.commit
        if records != checked:
            self.others = True
            # Another runner's push added a few commits: walked in-process (git asked only where the
            # walk cannot say).
            added = (
                None if records is None or checked is None else self.repo.chain(checked, records)
            )
            if records is None or (
                checked is not None
                and added is None
                and not self.repo.is_ancestor(checked, records)
            ):
                raise IntegrityError(
                    f"the audit branch {AUDIT_BRANCH} was rewritten during this pass: it no longer "
                    "descends from "
                    f"{(checked or '')[:12]} (force-push?)"
                )
            if added is None:
                spec = records if checked is None else f"{checked}..{records}"
                added = self.repo.out("rev-list", "--reverse", "--topo-order", spec).split()
            if tip != self.checker.approved_tip:
                self.checker = self.checker.moved_to(
                    tip
                )  # (its memo of approved's line: of that tip)
            self.checker.check(added)
            if checked is None:
                self.end = LogEnd.read(self.repo, records, audit.read_tail(self.repo, records))
                self.book.add(audit.read_all(self.repo, records))
            else:
                self.end, new = self.end.advance(self.repo, records)
                self.book.add(new)
        if tip != self.veto_tip:
            self.more_vetoes(f"{self.veto_tip}..{tip}")
            self.veto_tip = tip
        self.fetched = time.monotonic()

    def _not_closed_yet(self, drafts: list[Record]) -> list[Record]:
        """Drafts less `finished` ones whose run another runner closed meanwhile (its lease ran
        out): one result per run."""
        keep = []
        for d in drafts:
            run_id = d.run_id if isinstance(d, Finished) else None
            if isinstance(d, Finished) and run_id is not None and run_id in self.book.finished:
                self.repo.warnings.append(
                    f"run {run_id} of {d.path} was closed by another runner first (lease "
                    "expired); "
                    f"its result here ({d.status}) is not recorded"
                )
                self.spool.drop({run_id})
                continue
            keep.append(d)
        return keep

    def _claim_dropped(
        self, claim: Decision, attempt: int, parent: str | None
    ) -> tuple[str, str] | None:
        """Why the claim must not be pushed now: another runner's claim (of this attempt or a later
        one), a veto, or (a retry) a change of its file on approved that the commit will say it
        judged."""
        judged = self._trailer(parent)
        if attempt > 1 and judged != self.judged:
            # The commit will say it judged a newer tip than planning did: the retry must stand
            # there too (the rule verify applies to it).
            why = late_refusal(
                claim,
                Standing(
                    judged, self.repo.file_blob(judged, claim.path), self.checker.policy_at(judged)
                ),
                attempt,
            )
            if why is not None:
                return "rejected", why
        earlier = self.book.taken(claim.path, claim.blob, claim.commit, attempt)
        if earlier is not None:
            # Losing a race is not an outcome of this runner: it is reported as `claimed`.
            return "claimed", f"claimed by {holder(earlier)}"
        veto = self.vetoes().get((claim.path, claim.blob))
        if veto is not None:
            return "vetoed", f"vetoed by {veto.person} in commit {veto.commit[:7]}"
        return None

    def _trailer(self, parent: str | None) -> str:
        """The approved tip this commit says it judged: the pass's, or a newer one another runner
        already named."""
        before = audit_branch.approved_of(self.repo.commit(parent)) if parent is not None else None
        if (
            before is not None
            and before != self.judged
            and self.repo.is_ancestor(self.judged, before)
        ):
            return before
        return self.judged

    def _check_own_commit(self, sha: str, judged: str) -> None:
        """A commit the next pass would call tampering is never pushed: it would stop the gate for
        good.

        Checked in full once per trailer: the next commits are built the same way, with the same
        key."""
        if self.own_checked == judged:
            return
        policy = self.checker.policy_at(judged)
        if policy.runners:
            check = self.checker.assessor.signature(self.repo.commit(sha), policy.runner_keys())
            if not check.ok:
                raise UsageError(
                    "--signing-key does not make a signature the policy accepts from a runner: "
                    f"{check.reason}",
                    hint="use the private key (or OpenPGP key id) of a key listed under runners in "
                    "the policy",
                )
        self.checker.check_commit(sha)
        self.own_checked = judged


def _leases(drafts: list[Record]) -> dict[str, datetime]:
    """The lease end of each `started` draft, by run id, as the runner stamped it."""
    found = {}
    for d in drafts:
        until = leases.until(d) if isinstance(d, Started) else None
        if until is not None and isinstance(d, Started) and d.run_id is not None:
            found[d.run_id] = until
    return found


def _later_leases(drafts: list[Record], ends: Mapping[str, datetime], late: float) -> list[Record]:
    """`drafts` with each claim's lease moved on by `late` seconds (the time since it was
    stamped)."""
    moved = []
    for d in drafts:
        until = ends.get(d.run_id) if isinstance(d, Started) and d.run_id is not None else None
        if until is not None and isinstance(d, Started) and d.lease is not None:
            later = (until + timedelta(seconds=late)).isoformat().replace("+00:00", "Z")
            d = replace(d, lease=replace(d.lease, until=later))
        moved.append(d)
    return moved


def _key(draft: Record) -> Key:
    return (str(draft.path), str(draft.blob), str(draft.commit))


def _summary(drafts: list[Record], after_seq: int) -> str:
    summary: dict[str, int] = {}
    for draft in drafts:
        summary[draft.event] = summary.get(draft.event, 0) + 1
    parts = ", ".join(f"{n} {event}" for event, n in summary.items())
    return f"mergegate: audit seq {after_seq + 1}-{after_seq + len(drafts)} ({parts})"
