"""When a runner first judged an approving commit: the time `max_approval_age` counts from.

An approval's time must be one nobody can choose: not a commit date (its author writes it), but
the `judged` time of the first `scanned` record whose range holds the approving commit
(dating.first_covering, as `verify` dates commits), appended by an audit commit that a runner of
the policy before that commit signed. That is why `max_approval_age` requires `runners`.
"""

from __future__ import annotations

from datetime import datetime

from mergegate.audit import dating
from mergegate.audit import log as audit
from mergegate.audit.records import Record
from mergegate.facts.assessor import Assessor
from mergegate.git.repo import Repo
from mergegate.rules.model import Decision
from mergegate.rules.policy import Policy


class ApprovalDates:
    """Read once a pass, and only when an age limit applies to a job of it."""

    def __init__(self, repo: Repo, records: str | None, tip: str) -> None:
        self.repo, self.records, self.tip = repo, records, tip
        self._read: tuple[list[Record], dict[str, int], dating.Appenders] | None = None
        self._signer = Assessor(repo)

    def approved(self, decision: Decision, before: Policy, now: Policy) -> datetime | None:
        """When a runner first judged `decision`'s commit (None: no record says so, or no limit
        applies). `before`: the policy that judged it, whose runners vouch; `now`: in force."""
        job = decision.job
        if self.records is None or job is None or now.approval_age_for(job) is None:
            return None
        if not before.runners:
            return None
        if self._read is None:
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
        scanned, line, appenders = self._read
        keys = before.runner_keys()

        def vouched(commit: str, when: datetime) -> bool:
            return self._signer.signature(self.repo.commit(commit), keys, at=when).ok

        return dating.first_covering(scanned, decision.commit, line, appenders, vouched)
