"""What `verify` re-checks of approvals' ages: no start of an approval older than the
`max_approval_age` of the policy in force when its runner judged it, renewals included.

The walk hands every judged commit over (`note`): its decisions, and the renewal votes it holds,
dated as the runner dates them (when a runner first judged the renewal commit, `_first_seen` in
verify.py). `expired_starts` then decides each `started` record by the same rules the runner
used (rules/renewal.py: the freshest approval; eligibility.expired: its age at the record's
`judged` time).
"""

from __future__ import annotations

import bisect
from datetime import datetime

from mergegate.audit import dating
from mergegate.audit.records import Record, Started
from mergegate.github.later import LaterReviews
from mergegate.rules import eligibility
from mergegate.rules import renewal as renewal_rules
from mergegate.rules.model import Assessment, Decision
from mergegate.rules.policy import Policy
from mergegate.rules.renewal import RenewalVote

Dates = tuple[list[tuple[int, str]], dict[str, tuple[datetime, int]]]


class ApprovalAges:
    """Decisions and renewals collected along verify's walk, and the starts they make expired."""

    def __init__(self, later: LaterReviews | None = None) -> None:
        self.decided: dict[tuple[str, str, str], Decision] = {}
        self.later = later  # approving reviews on GitHub after a merge, as the records hold them
        self.judged_by: dict[str, Policy] = {}  # commit -> the policy that judged it
        # (path, blob) -> (chain index, vote) of each renewal (rules/renewal.py)
        self.renewed: dict[tuple[str, str], list[tuple[int, RenewalVote]]] = {}

    def note(
        self,
        assessment: Assessment,
        first: tuple[datetime, int] | None,
        index: int,
        judging: Policy | None = None,
    ) -> None:
        """Keep a judged commit's decisions, and its renewal votes dated as the runner dates
        them: when a runner first judged the renewal commit (`first`; none: it renews nothing).
        `index`: its place on the chain (1 for the first commit after the trust root)."""
        self.decided.update(((d.path, d.blob, d.commit), d) for d in assessment.decisions)
        if judging is not None:
            self.judged_by[assessment.commit] = judging
        if first is None:
            return
        for renewal in assessment.renewals:
            vote = RenewalVote(renewal.person, assessment.commit, first[0])
            self.renewed.setdefault((renewal.path, renewal.blob), []).append((index, vote))

    def expired_starts(
        self,
        records: list[Record],
        policies: dict[str, Policy],
        dates: Dates,
        position: dict[str, int],
    ) -> list[str]:
        """A start of a revision whose freshest approval was older than the max_approval_age of
        the policy in force at the tip its runner had judged (eligibility.expired): the
        approval's time is when a runner first judged its commit, or that of the renewal commits
        on approved between it and that tip (rules/renewal.py), as the records say. `dates`: the
        tip each audit commit's runner judged (by the seq of its first record), and when a
        runner first judged each commit."""
        judged, seen = dates
        firsts = [seq for seq, _ in judged]
        problems = []
        for record in records:
            if not isinstance(record, Started):
                continue
            path, blob = str(record.path), str(record.blob)
            at = bisect.bisect_right(firsts, record.seq) - 1
            tip = judged[at][1] if at >= 0 else None
            decision = self.decided.get((path, blob, str(record.commit)))
            when = dating.judged_time(record)
            if tip is None or decision is None or decision.job is None or when is None:
                continue
            if tip not in policies:
                continue
            first = seen.get(str(record.commit))
            after, upto = position.get(str(record.commit), 0), position.get(tip, 0)
            votes = [v for i, v in self.renewed.get((path, blob), ()) if after < i <= upto]
            votes += self._reviewed(decision, when, policies[tip])
            fresh = renewal_rules.approval(
                decision,
                policies[tip],
                approved=first[0] if first is not None else None,
                votes=votes,
            )
            why = eligibility.expired(
                policies[tip], decision.job, approved=fresh.at, now=when, renewal=fresh.renewal
            )
            if why is not None:
                problems.append(f"seq {record.seq}: started {path} at {blob[:7]} although {why}")
        return problems

    def _reviewed(self, decision: Decision, when: datetime, now: Policy) -> list[RenewalVote]:
        """Approving reviews on GitHub after the merge that a runner had stored by `when`, each
        dated as the runner dated it (github/later.py)."""
        judging = self.judged_by.get(decision.commit)
        if self.later is None or judging is None:
            return []
        return [
            RenewalVote(v.person, v.key, v.when)
            for v in self.later.votes(decision.commit, judging, now=now)
            if v.when <= when
        ]
