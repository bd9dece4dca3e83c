"""One pass of a runner: discover -> decide -> claim -> execute -> record -> push.

One pass reads `approved` and the audit branch `mergegate/audit` (one fetch), walks the first-parent
commits of approved that are new since the last `scanned` record, judges each with the policy in
force before it, and for every runnable job pushes a `started` record to the audit branch *before*
the process starts (at most once), runs it, and pushes its `finished` record. The runner never
writes to approved. Records are committed with plumbing on top of the audit branch's tip and pushed
without force; a rejected push fetches both branches, re-checks the claim (records and vetoes),
rebases and retries.

Its parts: planning (plan.py), the records it drafts (drafting.py), the vetoes it honours
(vetoes.py), claiming and running in batches (claim_loop.py), the launch of one job
(launch.py), publishing (publisher.py); a dry run stops before the first claim (preview.py),
and the poll loop runs passes (poll_loop.py).
"""

from __future__ import annotations

import os
import pwd
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from mergegate import clock
from mergegate.audit import log as audit
from mergegate.audit.records import Record, Started
from mergegate.audit.tail import LogEnd
from mergegate.crypto.signatures import ssh_blob, ssh_fingerprint, ssh_key_file_blob
from mergegate.errors import UsageError
from mergegate.execution.processes import ProcessId, Watchdog
from mergegate.execution.shutdown import DEFAULT_GRACE, Shutdown
from mergegate.facts import audit_commits as audit_branch
from mergegate.facts.assessor import Assessor
from mergegate.facts.branches import AUDIT_BRANCH
from mergegate.facts.policy_log import policy_lookup
from mergegate.git.repo import Repo
from mergegate.git.values import Signing
from mergegate.github import gather as github
from mergegate.rules.eligibility import Runnable
from mergegate.rules.job import is_job_path
from mergegate.rules.model import Decision
from mergegate.rules.policy import Policy
from mergegate.runner import idle, leases, reporting, writable
from mergegate.runner.attesting import Attestor
from mergegate.runner.claim_loop import ClaimLoop, claimed_before
from mergegate.runner.claims import Book, spread
from mergegate.runner.drafting import Drafts, job_id, policy_changes
from mergegate.runner.gate import Gate, check_new_records, read_gate
from mergegate.runner.launch import UNWATCHED, JobWatch, Launcher, keep
from mergegate.runner.lock import DEFAULT_WAIT, pass_lock
from mergegate.runner.pending import Pending
from mergegate.runner.plan import Plan, open_after, plan
from mergegate.runner.preview import dry_run
from mergegate.runner.publisher import Key, Publisher
from mergegate.runner.results import Outcome, PassResult, Preview
from mergegate.runner.spool import Spool, SpoolEntry
from mergegate.runner.vetoes import Vetoes, WalkedView
from mergegate.text import path_display


@dataclass(frozen=True)
class Options:
    repo: Path
    remote: str = "origin"
    branch: str = "approved"
    fetch: bool = True
    runner_name: str = "runner"
    trust_root: str | None = None
    signing_key: str | None = None
    output_dir: Path | None = None
    shutdown_grace: float = DEFAULT_GRACE
    lock_wait: float = DEFAULT_WAIT
    parallel: int = 1  # jobs at once (each from its own thread)
    labels: (
        tuple[str, ...] | None
    ) = ()  # claim only jobs whose runs_on are all among these (None: any job, for `plan`)
    job: str | None = (
        # `run --job PATH`: claim and run only this job's runnable revision, record nothing else
        None
    )
    report: bool = False  # `run --report`: results back on the pull requests (reporting.py)


def watched(options: Options) -> list[str]:
    """The refs of the remote a runner reads: approved and the audit branch."""
    return [f"refs/heads/{options.branch}", f"refs/heads/{AUDIT_BRANCH}"]


class Runner:
    """A runner of one clone: its passes (`run_once`), its dry runs (`preview`), and what the poll
    loop reads between them (`plan`, `wake`, the spool)."""

    def __init__(
        self, options: Options, *, shutdown: Shutdown | None = None, repo: Repo | None = None
    ) -> None:
        self.options = options
        self.repo = (
            repo if repo is not None else Repo(options.repo)
        )  # `repo`: options.repo, already opened
        self.repo.on_export_dir = keep  # the watchdog removes the export folder if this runner dies
        self.shutdown = shutdown or Shutdown(options.shutdown_grace)
        self.signing = Signing(options.signing_key) if options.signing_key else None
        self.attestor = Attestor(self.repo, options.signing_key)  # (a run's attestation)
        self.spool = Spool.for_runner(self.repo.git_dir, options.runner_name)
        self.pending = Pending(self.repo, options.runner_name)
        self.plan: Plan | None = (
            None  # the last pass's plan (`run --job` says from it why a job did not run)
        )
        self.wake: datetime | None = (
            None  # when the last pass's time-based work falls due (a retry, a lease's end)
        )
        self._me = ProcessId.of(os.getpid())  # this runner process, as the spool names it
        self.watch: JobWatch = UNWATCHED  # told as each job starts and ends (`run` prints it)
        self._reports: reporting.Reporter | None = None
        self._home = Path(
            pwd.getpwuid(os.geteuid()).pw_dir
        )  # (the passwd entry: read once, not for every job)

    def run_once(self) -> PassResult:
        """One pass, holding the clone's pass lock, with SIGINT/SIGTERM stopping it gracefully."""
        with (
            self.shutdown.handling(),
            pass_lock(
                self.repo.common_dir,
                runner_name=self.options.runner_name,
                wait=self.options.lock_wait,
            ),
        ):
            try:
                return self._pass()
            finally:
                if self._reports is not None:
                    self._reports.close()  # (a failed pass: what it queued waits in the outbox)
                exports = self.repo.export_dir
                self.repo.drop_exports()  # every job of the pass has its own copy by now
                if exports is not None:
                    Watchdog.get().forget(exports)

    def _pass(self) -> PassResult:
        self.spool.warnings.clear()
        self.repo.warnings.clear()
        self.attestor.notes.clear()
        # Whatever this pass does, the last quiet pass no longer stands for the next one (idle.py).
        idle.forget(self.repo.git_dir, self.options.runner_name)
        self.pending.forget()
        now = clock.now()
        # Every commit this pass judges, it judges at `now`; its records say so (`judged`), so that
        # verify judges key lifetimes at the same time, not at the records' own (later) times.
        judged = audit.stamp(now)
        gate = read_gate(
            self.repo,
            remote=self.options.remote,
            branch=self.options.branch,
            fetch=self.options.fetch,
            trust=self.options.trust_root,
            remember=True,
        )
        branch, tip, warnings = gate.branch, gate.tip, list(gate.warnings)
        reviews = self._review_source(gate, now)
        self._drafts = Drafts(self.options.runner_name, judged=judged, reviews=reviews)
        self._reports = reporting.start(
            self.options.report, self.repo, gate.records, self.options.runner_name, reviews
        )
        self._vetoes = Vetoes(self.repo, WalkedView(self.repo, gate.root, gate.records, tip, now))
        clone = leases.clone_id(self.repo.git_dir)  # (its orphans are its own: leases.mine)
        work = plan(
            self.repo,
            tip,
            gate.root,
            gate.tail,
            records=gate.records,
            at=now,
            runner_name=self.options.runner_name,
            clone=clone,
            reviews=reviews,
            labels=self._labels(),
            before_walk=self._can_sign,
        )
        self.plan = work
        # Records other runners (or anyone who can push) appended since the last complete pass.
        check_new_records(self.repo, gate, work, at=now, reviews=reviews)
        # Before anything runs: a rewrite later must be seen against these tips, so a
        # seen ref that cannot be written stops the pass here (StateError, naming it).
        # (The audit tip only now: it is where the next pass starts checking.)
        seen = branch.remember(tip, gate.records, gate.seen)
        # And everything else this pass will write, before it claims anything: a stale lock found
        # only at the end (after the jobs ran) let a rewind of the audit branch go unseen.
        writable.check_pass(
            self.repo,
            [branch.seen_ref, branch.seen_audit_ref, self.pending.ref],
            self.spool.path,
            self.options.runner_name,
        )
        self._can_sign(
            work.policy, key=work.waiting is None
        )  # (again: a policy change the walk adopted may list runners)
        assessor = Assessor(self.repo, reviews=reviews)
        known = {work.start: work.start_policy, **{a.commit: a.policy for a in work.assessments}}
        checker = audit_branch.Checker(
            self.repo,
            assessor.signer(at=now),
            tip,
            policy_lookup(
                self.repo,
                lambda: assessor,
                at=now,
                root=gate.root,
                records=gate.records,
                known=known,
            ),
        )
        # Results a previous pass could not push come first; their jobs are not orphans,
        # and a job whose process may still run is not closed yet.
        spooled, running = self.spool.recover(self.repo, gate.records, self._me)
        recovered = {d.run_id for d in spooled} | {e.run_id for e in running}
        work.orphans = [o for o in work.orphans if o.run_id not in recovered]
        closing = recovered | {o.run_id for o in work.orphans}
        runs = leases.open_runs(self.repo, gate.records)
        work.expired = [r for r in leases.ended(runs, now) if r.run_id not in closing]
        warnings += [self._still_running(entry) for entry in running]
        warnings += leases.shared_name(runs, self.options.runner_name, clone, now)
        outcomes = [
            Outcome(d.job, str(d.path), str(d.commit), str(d.status), d.reason, d.run_id)
            for d in spooled
        ]
        warnings += _newly_unapproved(work) + _ignored_vetoes(work)
        # `run --job PATH` claims and runs that one revision and records nothing else (the sweep
        # pass does).
        pending: list[Record] = (
            [*spooled, *self._drafts.bookkeeping(work, outcomes)]
            if self.options.job is None
            else [*spooled]
        )
        self._pub = self._publisher(gate, work, checker)
        runnable, done = self._refuse(work, pending, outcomes)
        if runnable or spooled or work.orphans or work.expired:
            # A key that cannot sign a run's attestation stops the pass before any job starts; an
            # idle pass asks no passphrase (nothing to sign), as git's signing asks none.
            self.attestor.check(work.policy)
        launcher = Launcher(
            repo=self.repo,
            spool=self.spool,
            shutdown=self.shutdown,
            drafts=self._drafts,
            output_dir=self.options.output_dir,
            signing_key=self.options.signing_key,
            me=self._me,
            home=self._home,
            watch=self.watch,
        )
        ran, pending = ClaimLoop(
            runner_name=self.options.runner_name,
            clone=clone,
            parallel=self.options.parallel,
            shutdown=self.shutdown,
            spool=self.spool,
            publisher=self._pub,
            drafts=self._drafts,
            launcher=launcher,
            publish=self._publish,
        ).run(spread(runnable, self.options.runner_name), pending)
        outcomes += ran
        if self.options.job is None:  # (`run --job PATH` says its one job's state instead)
            outcomes += claimed_before(work, outcomes, self._pub.book, self.options.runner_name)
        took = {(o.path, o.commit): o.status for o in ran}  # (a commit has one blob per path)
        done.update(
            {
                (i.path, i.blob, i.commit): took[(i.path, i.commit)]
                for i in runnable
                if (i.path, i.commit) in took
            }
        )
        if not self.shutdown.is_set():
            pending += self._scanned(work, done, pending)
        if pending:
            self._publish(pending)
        if self._reports is not None:  # best effort: its failures are warnings, never the exit code
            warnings += self._reports.finish()
        # Remember what was seen (all of it checked), so that a later rewrite of either branch
        # (which may also erase the records that would have told) stops this runner.
        branch.remember(branch.tip(), self._pub.checked, seen)
        stopped = (
            (self.shutdown.signal_name or "a stop request") if self.shutdown.is_set() else None
        )
        self.wake = reporting.wake(self._reports, _due(work, runs))
        if not (spooled or running or warnings or self.spool.warnings or self.repo.warnings):
            self._remember_quiet(gate, work, runs, outcomes)
        return PassResult(
            tip,
            tuple(outcomes),
            tuple([*warnings, *self.spool.warnings, *self.repo.warnings, *self.attestor.notes]),
            policy_changes(work),
            stopped,
            work.waiting,
        )

    def _still_running(self, entry: SpoolEntry) -> str:
        where = f" as pid {entry.job.pid}" if entry.job else ""
        return (
            f"{entry.record.path} (run {entry.run_id}) may still be running{where}, "
            "from a runner "
            f"that stopped; it is closed once its process is gone ({self.spool.path})"
        )

    def _publisher(self, gate: Gate, work: Plan, checker: audit_branch.Checker) -> Publisher:
        """The pass's publisher, from the audit branch's end as the pass read it."""
        # Every revision with a `started` record, for all the pass's candidates: planning's one
        # grep.
        book = Book.of(work.revisions)
        return Publisher(
            self.repo,
            gate.branch,
            self.options.runner_name,
            self.options.fetch,
            self.signing,
            self.spool,
            self.pending,
            work.tip,
            LogEnd.read(self.repo, gate.records, gate.tail),
            checker,
            book,
            vetoes=lambda: self._vetoes.of(work),
            more_vetoes=lambda spec: self._vetoes.more(work, spec),
            vetoed_draft=self._drafts.refusal,
            attestor=self.attestor,
            on_published=self._reports.published if self._reports is not None else None,
        )

    def _refuse(
        self, work: Plan, pending: list[Record], outcomes: list[Outcome]
    ) -> tuple[list[Runnable], dict[tuple[str, str, str], str]]:
        """Record what planning refused and what a veto stops; the rest is this pass's to claim.
        Also returns what the pass did with each runnable item (for `open`)."""
        only = self.options.job
        runnable: list[Runnable] = []
        done: dict[tuple[str, str, str], str] = {}
        for refused in work.refused if only is None else ():
            decision = refused.decision
            pending.append(
                self._drafts.refusal("rejected", decision, refused.reason, expiry=refused.expiry)
            )
            outcomes.append(
                Outcome(
                    job_id(decision), decision.path, decision.commit, "rejected", refused.reason
                )
            )
        for item in work.runnable:
            decision = item.decision
            if only is not None and decision.path != only:
                continue
            refusal = self._vetoes.refusal(decision, work)
            if refusal is not None:
                event, reason = refusal
                pending.append(self._drafts.refusal(event, decision, reason))
                outcomes.append(
                    Outcome(job_id(decision), decision.path, decision.commit, event, reason)
                )
                done[(item.path, item.blob, item.commit)] = event
            else:
                runnable.append(item)
        return runnable, done

    def _scanned(
        self, work: Plan, done: dict[tuple[str, str, str], str], pending: list[Record]
    ) -> list[Record]:
        """The pass's `scanned` record, when it walked new commits or the open list changed."""
        still, files = open_after(work, done)
        if self.options.job is not None or not (
            work.new_commits or still != list(work.open_before) or work.later
        ):
            return []
        # `open` lists commits whose jobs may still need a runner: the next pass judges them again.
        self._drafts.files.update(files)
        return [self._drafts.scanned(work, still=still, pending=pending)]

    def quiet_key(self) -> str:
        """What the pass decides by besides the two refs and the time (idle.py): the same key,
        computed by `run --once` from its command line, finds this pass's memory."""
        return idle.key(
            remote=self.options.remote,
            branch=self.options.branch,
            trust_root=self.options.trust_root,
            runner_name=self.options.runner_name,
            labels=self.options.labels,
            signing_key=self.options.signing_key,
        )

    def _remember_quiet(
        self, gate: Gate, work: Plan, runs: list[Started], outcomes: list[Outcome]
    ) -> None:
        """A pass that ended settled leaves its memory, so that the next `run --once` with nothing
        new costs one `ls-remote` (idle.py), also right after a pass that ran jobs.

        Settled: the next pass, from the refs this one fetched and pushed, would find nothing to
        do before the memory's wake time. So: every record pushed (nothing spooled or pending);
        the remote's refs are the tip of approved it judged and its own last audit commit (no
        other runner's records came in meanwhile: their claims and leases are not in this
        plan); nothing waiting for evidence or carried over for it; no job of this pass with a
        retry to come (its due time is the next plan's to say) and no lost job closed (it may
        be retried); the trust root pinned by commit id; fetched from a remote. (The caller
        also wants no warnings and no results recovered from an earlier pass.)
        """
        pinned = self.options.trust_root or os.environ.get("MERGEGATE_TRUST_ROOT") or ""
        if (
            self.options.job is not None
            or not self.options.fetch
            or gate.branch.remote is None
            or work.waiting is not None
            or work.carried
            or work.asking
            or work.orphans
            or work.expired
            or self.shutdown.is_set()
            or not _FULL_ID.fullmatch(pinned)
            or any(o.retry_at is not None for o in outcomes)
            or self._pub.others
            or self.spool.path.exists()
            or self.pending.get() is not None
        ):
            return
        prefix, ours = f"refs/remotes/{self.options.remote}/", watched(self.options)
        read = self.repo.revs([prefix + ref.removeprefix("refs/heads/") for ref in ours])
        refs = {ref: read[prefix + ref.removeprefix("refs/heads/")] or "" for ref in ours}
        if list(refs.values()) != [gate.tip, self._pub.checked or ""]:
            # approved moved while the pass ran, or the audit branch is not where its last push left
            # it
            return
        # A commit still open (a job queued for a runner with its labels, or for its retry) is
        # judged again by the next pass at its time: a key of its policy starting or ending its
        # lifetime then changes the verdict, so the memory wakes then too (an OpenPGP key's own
        # expiry is gpg's: no memory).
        keys = [
            key
            for q in work.queued
            for person in (*q.policy.approvers, *q.policy.proposers)
            for key in person.keys
        ]
        if any(key.expires for key in keys):
            return
        now = clock.now()
        times = [
            t if t.tzinfo is not None else t.replace(tzinfo=UTC)
            for key in keys
            for t in (key.valid_after, key.valid_before)
            if t
        ]
        bounds = [
            t for t in times if t > now
        ]  # (a time without a zone is UTC, as signatures reads it)
        due = min([*bounds, *([self.wake] if self.wake is not None else [])], default=None)
        wake = due.isoformat() if due is not None else None
        idle.remember(
            self.repo.git_dir,
            self.options.runner_name,
            idle.Quiet(self.quiet_key(), refs, gate.tip, wake),
        )

    def _can_sign(self, policy: Policy, *, key: bool = False) -> None:
        """A policy that lists runners needs signed audit commits: without a key, refuse before any
        work.

        With `key` (`policy` is the one in force at the tip: the walk got there), an ssh key the
        policy does not list is refused too, also by a pass with nothing to run: a runner set up
        with the wrong key must not idle green until its first job. (Not before the walk: a policy
        change it adopts may list the key.) An OpenPGP key, or an ssh key file that does not show
        its public half, is judged by the signature of the pass's first audit commit (publisher.py).
        """
        if policy.runners and self.signing is None:
            raise UsageError(
                f"{policy.where} lists runners, so audit commits must be signed",
                hint="pass --signing-key with the runner's ssh key path or OpenPGP key id",
            )
        if not key or not policy.runners or self.signing is None:
            return
        blob = ssh_key_file_blob(self.signing.key) if os.path.isfile(self.signing.key) else None
        if blob is not None and all(ssh_blob(listed) != blob for listed in policy.runner_keys()):
            raise UsageError(
                "--signing-key does not make a signature the policy accepts from a runner: "
                f"{self.signing.key} "
                f"is the key {ssh_fingerprint(blob)}, which {policy.where} does not list under "
                "runners",
                hint="use the private key of a key listed under runners in the policy (ssh-keygen "
                "-lf KEY shows its fingerprint)",
            )

    def _labels(self) -> frozenset[str] | None:
        return None if self.options.labels is None else frozenset(self.options.labels)

    def _review_source(
        self, gate: Gate, now: datetime, *, remember: bool = True
    ) -> github.ReviewSource:
        """GitHub review evidence: what the records were decided on first, else asked of the API."""
        return github.ReviewSource(
            self.repo,
            now=now,
            settings=github.Settings.from_env(),
            stored=github.stored_evidence(self.repo, gate.records, remember=remember),
            remote=self.options.remote if gate.branch.remote is not None else None,
        )

    def preview(self) -> Preview:
        """What a pass would claim, run and record (`run --dry-run`): nothing written, pushed or
        remembered.

        The same reading, planning, bookkeeping and refusals as `_pass`; it stops where
        `_pass` would start claiming. No lock, spool, seen ref or judged-times file is touched.
        """
        now = clock.now()
        judged = audit.stamp(now)
        gate = read_gate(
            self.repo,
            remote=self.options.remote,
            branch=self.options.branch,
            fetch=self.options.fetch,
            trust=self.options.trust_root,
        )
        # The same evidence a pass would judge with (the refusals below read it too).
        reviews = self._review_source(gate, now, remember=False)
        drafts = Drafts(self.options.runner_name, judged=judged, reviews=reviews)
        vetoes = Vetoes(self.repo, WalkedView(self.repo, gate.root, gate.records, gate.tip, now))
        work = plan(
            self.repo,
            gate.tip,
            gate.root,
            gate.tail,
            records=gate.records,
            at=now,
            runner_name=self.options.runner_name,
            remember=False,
            reviews=reviews,
            labels=self._labels(),
        )
        self.plan = work
        check_new_records(self.repo, gate, work, at=now, reviews=reviews)
        warnings = list(gate.warnings)
        if work.policy.runners and self.signing is None:
            warnings.append(f"{work.policy.where} lists runners: a real pass needs --signing-key")
        return dry_run(work, drafts, vetoes, tip=gate.tip, warnings=warnings)

    def _publish(
        self,
        drafts: list[Record],
        claims: Mapping[Key, tuple[Decision, int]] | None = None,
    ) -> dict[Key, tuple[str, str]]:
        """Push drafts (publisher.py), with the evidence files they name."""
        self._pub.files.update(self._drafts.take_files())
        return self._pub.publish(drafts, claims=claims)


_FULL_ID = re.compile(r"[0-9a-f]{40}")


def _due(work: Plan, runs: list[Started]) -> datetime | None:
    """When time-based work falls due: a retry's backoff ending, another runner's lease running out
    (its job is then closed as lost), whichever is first."""
    dues = [q.due for q in work.queued if q.due is not None] + [
        end for r in runs if (end := leases.until(r)) is not None
    ]
    return min(d.astimezone(UTC) for d in dues) if dues else None


def _ignored_vetoes(work: Plan) -> list[str]:
    """Loud, once (the pass that walks it): a veto that stops nothing, so its author knows.
    A veto pull request merged by squash or rebase is one: GitHub re-creates the commit under
    its own signature, not the approver's."""
    return [
        f"{a.summary} (commit {a.commit[:7]}): it stops nothing. A veto is an empty commit signed "
        "by an approver; through a pull request, merge it with a merge commit, not squash or "
        "rebase (docs/github.md, vetoes on a gate that admits only pull requests)"
        for a in work.assessments
        if a.summary.startswith("veto ignored:")
    ]


def _newly_unapproved(work: Plan) -> list[str]:
    """Loud, once (the pass that walks it): a file no approval covers stops every later job."""
    walked = {a.commit for a in work.assessments}
    new = sorted(
        path
        for path, sha in work.unapproved.items()
        if sha in walked and not is_job_path(path) and not path.startswith("policy/")
    )
    if not new:
        return []
    shown = ", ".join(path_display(p) for p in new[:5]) + (
        f" and {len(new) - 5} more" if len(new) > 5 else ""
    )
    return [
        f"not approved: {shown} (changed by {work.unapproved[new[0]][:7]}); no job runs in a tree "
        "that holds them until they are "
        "put back to their last approved version or removed (mergegate check on a proposal shows "
        "the diff from it)"
    ]
