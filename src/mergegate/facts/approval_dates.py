"""When a runner first judged an approving commit: the time `max_approval_age` counts from.

An approval's time must be one nobody can choose: not a commit date (its author writes it), but
the `judged` time of the first `scanned` record whose range holds the approving commit
(dating.first_covering, as `verify` dates commits), appended by an audit commit that a runner of
the policy before that commit signed. That is why `max_approval_age` requires `runners`.

A renewal (rules/renewal.py) is dated the same way: each signed, empty `Mergegate-Renew` commit
on approved's first-parent line after the approving commit, by the first `scanned` record whose
range holds it (a runner of the policy before it vouching), or by this pass's clock when this
pass is the first to judge it (its `scanned` record will say so). Its vote is the judge's (step
2), its signature checked at that time by the policy before it.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime

from mergegate.audit import dating
from mergegate.audit import log as audit
from mergegate.audit.records import Record
from mergegate.facts.assessor import RENEW_TRAILER, Assessor
from mergegate.facts.policy_log import policy_lookup
from mergegate.git.repo import Repo
from mergegate.rules.model import Decision
from mergegate.rules.policy import Policy
from mergegate.rules.renewal import RenewalVote

Named = tuple[str, str, RenewalVote]  # (path, blob, the vote): one revision a renewal names


class ApprovalDates:
    """Read once a pass, and only when an age limit applies to a job of it."""

    def __init__(
        self,
        repo: Repo,
        records: str | None,
        tip: str,
        *,
        root: str | None = None,
        now: datetime | None = None,
        walked: frozenset[str] = frozenset(),
    ) -> None:
        """`root`, `now`: the trust root and the pass's clock, for renewals (None: renewals are
        not looked for); `walked`: the commits this pass judges for the first time (dated
        `now`)."""
        self.repo, self.records, self.tip = repo, records, tip
        self.root, self.now, self.walked = root, now, walked
        self._read: tuple[list[Record], dict[str, int], dating.Appenders] | None = None
        self._signer = Assessor(repo)
        self._renewing: list[str] | None = None  # renewal commits on the line, newest first
        self._named: dict[str, list[Named]] = {}
        self._policy_at: Callable[[str], Policy] | None = None

    def approved(self, decision: Decision, before: Policy, now: Policy) -> datetime | None:
        """When a runner first judged `decision`'s commit (None: no record says so, or no limit
        applies). `before`: the policy that judged it, whose runners vouch; `now`: in force."""
        job = decision.job
        if self.records is None or job is None or now.approval_age_for(job) is None:
            return None
        return self._dated(decision.commit, before)

    def renewals(self, decision: Decision, now: Policy) -> list[RenewalVote]:
        """The dated votes of the renewal commits naming `decision`'s revision after its commit
        (none when no age limit applies, or nothing dates them)."""
        job = decision.job
        if self.records is None or job is None or now.approval_age_for(job) is None:
            return []
        if self.root is None or self.now is None:
            return []
        if self._renewing is None:
            # As loose as the trailer parser (any case, any spacing); the judge then decides.
            self._renewing = self.repo.out(
                "log",
                "--first-parent",
                "--regexp-ignore-case",
                f"--grep=^{RENEW_TRAILER}:",
                "--format=%H",
                self.tip,
            ).split()
        if not self._renewing:
            return []
        _, line, _ = self._reading()
        after = line.get(decision.commit)
        if after is None:
            return []
        return [
            vote
            for sha in self._renewing
            if line.get(sha, after) < after  # (line: 0 is the tip)
            for path, blob, vote in self._votes(sha)
            if (path, blob) == (decision.path, decision.blob)
        ]

    def _votes(self, sha: str) -> list[Named]:
        """What one renewal commit names, judged by the policy before it at its time."""
        if sha in self._named:
            return self._named[sha]
        assert self.root is not None and self.now is not None
        found: list[Named] = []
        commit = self.repo.commit(sha)
        if commit.parents:
            judge = Assessor(self.repo)
            if self._policy_at is None:
                self._policy_at = policy_lookup(
                    self.repo, lambda: judge, at=self.now, root=self.root, records=self.records
                )
            before = self._policy_at(commit.parents[0])
            when = self.now if sha in self.walked else self._dated(sha, before)
            if when is not None:
                for renewal in judge.veto(commit, before, at=when).renewals:
                    found.append(
                        (renewal.path, renewal.blob, RenewalVote(renewal.person, sha, when))
                    )
        self._named[sha] = found
        return found

    def _dated(self, sha: str, before: Policy) -> datetime | None:
        """The first runner-signed `scanned` record covering `sha` (runners of `before` vouch)."""
        if self.records is None or not before.runners:
            return None
        scanned, line, appenders = self._reading()
        keys = before.runner_keys()

        def vouched(commit: str, when: datetime) -> bool:
            return self._signer.signature(self.repo.commit(commit), keys, at=when).ok

        return dating.first_covering(scanned, sha, line, appenders, vouched)

    def _reading(self) -> tuple[list[Record], dict[str, int], dating.Appenders]:
        if self._read is None:
            assert self.records is not None
            scanned = sorted(
                (
                    r
                    for r in audit.grep(self.repo, self.records, '"event":"scanned"')
                    if r.event == "scanned"
                ),
                key=lambda r: r.seq,
            )
            line = {
                sha: place
                for place, sha in enumerate(
                    self.repo.out("rev-list", "--first-parent", self.tip).split()
                )
            }
            self._read = (scanned, line, dating.Appenders(self.repo, self.records))
        return self._read
