"""Vetoes a pass honours: those its walk found, and those on approved a previous pass walked past.

A veto is an empty, signed commit naming a job revision. The walk collects the vetoes of the
commits it judges; a revision approved earlier and still runnable is stopped by any valid veto
on approved, so the pass also searches approved's first-parent history for them (`Vetoes`), and
again for the commits a push fetched (publisher.py). A veto commit a previous pass walked is
judged as that pass judged it (`WalkedView`).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from mergegate import clock
from mergegate.audit import dating
from mergegate.audit import log as audit
from mergegate.audit.records import Record
from mergegate.crypto.signatures import split_signed_commit
from mergegate.facts.assessor import VETO_TRAILER, Assessor
from mergegate.facts.policy_log import policy_lookup
from mergegate.git.repo import Repo
from mergegate.git.values import Commit
from mergegate.rules.model import Decision, Veto
from mergegate.rules.policy import Policy
from mergegate.runner.plan import Plan


class WalkedView:
    """A veto commit as the pass that walked it judged it (and verify does): by the policy in force
    before it, at the time the first record covering it says (one a runner of that policy vouched
    for). A veto valid then stays a veto: judged only at the clock now and by the tip's policy, it
    lapsed for the runner once its signer's key ran out, never for verify (review redteam7a, F3)."""

    def __init__(self, repo: Repo, root: str, records: str | None, tip: str, now: datetime) -> None:
        self.repo, self.root, self.records, self.tip, self.now = repo, root, records, tip, now
        self._policy_at: Callable[[str], Policy] | None = None
        self._line: dict[str, int] = {}
        self._scanned: list[Record] = []
        self._appenders: dating.Appenders | None = None
        self._signer = Assessor(repo)
        self._found: dict[
            str, list[Veto]
        ] = {}  # (read once a pass: a veto commit costs nothing the second time)

    def vetoes(self, commit: Commit) -> list[Veto]:
        if self.records is None or not commit.parents or split_signed_commit(commit.raw) is None:
            return []  # (an unsigned commit is no veto at any time: nothing to look up)
        if commit.sha in self._found:
            return self._found[commit.sha]
        if self._policy_at is None:
            # Once a pass: the line, every `scanned` record (one git grep), one binary search's
            # memory.
            judge = Assessor(self.repo)
            self._policy_at = policy_lookup(
                self.repo, lambda: judge, at=self.now, root=self.root, records=self.records
            )
            self._line = {
                sha: place
                for place, sha in enumerate(
                    self.repo.out("rev-list", "--first-parent", self.tip).split()
                )
            }
            self._scanned = sorted(
                (
                    r
                    for r in audit.grep(self.repo, self.records, '"event":"scanned"')
                    if r.event == "scanned"
                ),
                key=lambda r: r.seq,
            )
            self._appenders = dating.Appenders(self.repo, self.records)
        assert self._appenders is not None
        before = self._policy_at(commit.parents[0])
        found: list[Veto] = []
        if (
            before.runners
        ):  # (without runners record times say nothing: judged at the clock, as the caller did)
            keys = before.runner_keys()

            def vouched(audit_commit: str, when: datetime) -> bool:
                return self._signer.signature(self.repo.commit(audit_commit), keys, at=when).ok

            when = dating.first_covering(
                self._scanned, commit.sha, self._line, self._appenders, vouched
            )
            if when is not None:
                found = list(Assessor(self.repo).veto(commit, before, at=when).vetoes)
        self._found[commit.sha] = found
        return found


class Vetoes:
    """The vetoes one pass honours (the walk's, and those searched for on approved)."""

    def __init__(self, repo: Repo, walked: WalkedView) -> None:
        self.repo = repo
        self.walked = walked

    def refusal(self, decision: Decision, work: Plan) -> tuple[str, str] | None:
        # (A revision that already started elsewhere is refused by planning:
        # eligibility.judge_attempts.)
        if not decision.runnable:
            return "rejected", decision.reason
        veto = self.of(work).get((decision.path, decision.blob))
        if veto is not None:
            return "vetoed", vetoed(veto)
        return None

    def of(self, work: Plan) -> dict[tuple[str, str], Veto]:
        """Every valid veto on approved, also those a previous pass walked past."""
        if work.all_vetoes is None:
            found = {(v.path, v.blob): v for v in work.vetoes}
            for veto in self.search(work.tip, work.policy):
                found.setdefault((veto.path, veto.blob), veto)
            work.all_vetoes = found
        return work.all_vetoes

    def more(self, work: Plan, spec: str) -> None:
        found = self.of(work)
        for veto in self.search(spec, work.policy):
            found.setdefault((veto.path, veto.blob), veto)

    def search(self, spec: str, policy: Policy) -> list[Veto]:
        """Vetoes in the first-parent commits `spec` (a tip, or old..new), and signed veto commits
        a merge brought in (a pull request merged with a merge commit: where branch protection
        lets nothing but pull requests into approved, that is how a veto gets there)."""
        assessor, now = Assessor(self.repo), clock.now()
        # As loose as the trailer parser (any case, any spacing), so that no veto the walk would
        # honour is missed here; the parser then decides.
        grep = f"--grep=^{VETO_TRAILER}:"
        listed = self.repo.out("log", "--regexp-ignore-case", grep, "--format=%H", spec).split()
        line = (  # (one git log when there is no veto at all, as on most passes)
            set(
                self.repo.out(
                    "log", "--first-parent", "--regexp-ignore-case", grep, "--format=%H", spec
                ).split()
            )
            if listed
            else set()
        )
        found: list[Veto] = []
        for sha in listed:
            commit = self.repo.commit(sha)
            if self.repo.diff(commit.parents[0] if commit.parents else None, sha):
                continue  # a veto is an empty, signed commit (a merge too), as the walk judges it
            vetoes = list(assessor.veto(commit, policy, at=now).vetoes)
            # A merged-in veto is judged by the policy at the tip, now: no pass walked it.
            if not vetoes and sha in line:
                vetoes = self.walked.vetoes(commit)
            found += vetoes
        return found


def vetoed(veto: Veto) -> str:
    return f"vetoed by {veto.person} in commit {veto.commit[:7]}"
