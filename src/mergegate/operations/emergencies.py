"""Break-glass as `verify`, `status` and `inbox` see it: the reviews emergency runs owe, and
whether the records of emergency starts say what the judge says.

`verify` re-judges every commit, so it hands over its own decisions (`status`, `inbox` and a
runner's pass judge each emergency's commit again: facts.owed_reviews.gate_owed). An emergency's
use is the runner-signed time of its start; whether its review is overdue is asked at the
caller's clock.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime

from mergegate.audit import log as audit
from mergegate.audit.dating import judged_time
from mergegate.audit.records import Record, Started
from mergegate.facts.assessor import Assessor
from mergegate.facts.owed_reviews import gate_owed, owed_reviews
from mergegate.facts.policy_log import policy_lookup
from mergegate.git.repo import Repo
from mergegate.github.later import Reviewers
from mergegate.rules.break_glass import Owed, overdue_by, second_refusal
from mergegate.rules.model import Assessment, Decision
from mergegate.rules.policy import Policy

Key = tuple[str, str, str]  # (path, blob, commit)


class Tally:
    """Verify's emergencies: every revision the judge runs on a signed emergency, with the policy
    that judged it, gathered as the walk goes."""

    def __init__(self) -> None:
        self.decisions: dict[Key, tuple[Decision, Policy]] = {}

    def add(self, assessment: Assessment, policy: Policy) -> None:
        for d in assessment.decisions:
            if d.runnable and d.emergency is not None:
                self.decisions[(d.path, d.blob, d.commit)] = (d, policy)

    def ordinary(self, records: Sequence[Record]) -> list[Record]:
        """The records but the starts of emergency runs: a signed emergency starts in any change
        window, so the windows' check skips them."""
        return [
            r
            for r in records
            if not (isinstance(r, Started) and (str(r.path), str(r.blob), str(r.commit)) in self)
        ]

    def __contains__(self, key: object) -> bool:
        return key in self.decisions

    def check(
        self,
        repo: Repo,
        tip: str,
        records: Sequence[Record],
        policy: Policy,
        *,
        at: datetime,
        reviewed: Reviewers | None = None,
    ) -> tuple[list[Owed], list[str]]:
        """(the review each use owes, what is wrong with the records of emergency starts);
        `reviewed`: who approved by a review on GitHub after the merge, from stored answers."""
        owed = verified_owed(repo, tip, records, self.decisions, policy, at=at, reviewed=reviewed)
        return owed, record_problems(records, self.decisions, owed)


def verified_owed(
    repo: Repo,
    tip: str,
    records: Sequence[Record],
    decisions: Mapping[Key, tuple[Decision, Policy]],
    policy: Policy,
    *,
    at: datetime,
    reviewed: Reviewers | None = None,
) -> list[Owed]:
    """The reviews owed, by verify's own judgements (`decisions`: every runnable emergency)."""

    def judged(
        path: str, blob: str, commit: str, _: datetime | None
    ) -> tuple[Decision, Policy] | None:
        return decisions.get((path, blob, commit))

    return owed_reviews(repo, tip, records, judged, policy, at=at, reviewed=reviewed)


def owed_now(
    repo: Repo, tip: str, root: str, records_tip: str | None, *, at: datetime
) -> list[Owed]:
    """The reviews owed at approved's `tip` (for `inbox`, which reads no pass of its own)."""
    records = audit.grep(repo, records_tip, '"emergency":{')
    if not records:
        return []
    judge = Assessor(repo)
    policy = policy_lookup(repo, lambda: judge, at=at, root=root, records=records_tip)(tip)
    return gate_owed(repo, tip, root, records, records_tip, policy, at=at)


def record_problems(
    records: Sequence[Record],
    decisions: Mapping[Key, tuple[Decision, Policy]],
    owed: Sequence[Owed],
) -> list[str]:
    """Starts whose `emergency` the judge does not confirm, emergency runs whose starts do not
    say so, and a second emergency started while one of its signers owed an overdue review.

    `owed` is as of now: a review not given now was not given at any earlier start either (an
    approval on approved stays there), so a use overdue then, and still owed, is one the runner
    had to see.
    """
    problems = []
    for record in records:
        if not isinstance(record, Started):
            continue
        key = (str(record.path), str(record.blob), str(record.commit))
        found = decisions.get(key)
        said = record.emergency
        where = f"seq {record.seq}: started {key[0]} at {key[1][:7]}"
        if found is None:
            if said is not None:
                problems.append(
                    f"{where} on an emergency by {', '.join(said.by)}, which the judge does not "
                    "find: no signed emergency of an emergency approver runs this revision"
                )
            continue
        emergency = found[0].emergency
        assert emergency is not None
        if said is None or tuple(said.by) != emergency.by:
            problems.append(
                f"{where} on the emergency of {', '.join(emergency.by)}, but its record says "
                f"{'nothing of it' if said is None else 'by ' + ', '.join(said.by)}"
            )
            continue
        when = judged_time(record)
        before = [o for o in owed if o.seq < record.seq]
        why = second_refusal(found[0], overdue_by(before, when)) if when is not None else None
        if why is not None:
            problems.append(f"{where} although {why}")
    return problems
