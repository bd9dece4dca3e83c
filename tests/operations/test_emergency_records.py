"""What `verify` says of the records of break-glass runs (operations/emergencies.record_problems),
on records and decisions built by hand: a start that claims an emergency the judge does not
find, an emergency run whose start hides it, and a second emergency started while one of its
signer's reviews was overdue. The walk that hands these over is tests/runner/test_emergency.py's."""

from __future__ import annotations

from dataclasses import replace
from datetime import timedelta

from mergegate.audit.records import EmergencyUse, Started
from mergegate.operations.emergencies import record_problems
from mergegate.rules.break_glass import review_state
from tests.rules.test_emergency_table import POLICY, REASON, USED, _emergency_decision

FIX = _emergency_decision()
KEY = (FIX.path, FIX.blob, FIX.commit)


def _start(seq: int, *, path: str = FIX.path, blob: str = FIX.blob, by: tuple[str, ...] | None,
           hours: int = 0) -> Started:  # fmt: skip
    when = (USED + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%S.000000Z")
    return Started(
        seq=seq,
        time=when,
        judged=when,
        path=path,
        blob=blob,
        commit=FIX.commit,
        run_id=f"{seq:032x}",
        emergency=EmergencyUse(by, REASON) if by is not None else None,
    )


def test_an_emergency_start_the_judge_confirms_is_no_problem() -> None:
    record = _start(1, by=("alice",))
    owed = [review_state(FIX, POLICY, (), used=USED, seq=1)]
    assert record_problems([record], {KEY: (FIX, POLICY)}, owed) == []


def test_a_forged_or_hidden_emergency_is_a_violation() -> None:
    forged = record_problems([_start(1, by=("alice",))], {}, [])
    assert len(forged) == 1 and "which the judge does not find" in forged[0]
    hidden = record_problems([_start(1, by=None)], {KEY: (FIX, POLICY)}, [])
    assert len(hidden) == 1 and "but its record says nothing of it" in hidden[0]
    other = record_problems([_start(1, by=("bob",))], {KEY: (FIX, POLICY)}, [])
    assert len(other) == 1 and "its record says by bob" in other[0]


def test_a_second_emergency_started_while_the_first_review_was_overdue_is_a_violation() -> None:
    second = replace(FIX, path="jobs/next.yaml", blob="9" * 40)
    decisions = {KEY: (FIX, POLICY), ("jobs/next.yaml", "9" * 40, FIX.commit): (second, POLICY)}
    owed = [review_state(FIX, POLICY, (), used=USED, seq=1)]
    first = _start(1, by=("alice",))
    late = _start(2, path="jobs/next.yaml", blob="9" * 40, by=("alice",), hours=73)
    (problem,) = record_problems([first, late], decisions, owed)
    assert "seq 2: started jobs/next.yaml" in problem
    assert "emergency refused: alice owes an overdue review" in problem
    early = replace(late, time=first.time, judged=first.judged)
    assert record_problems([first, early], decisions, owed) == []
    given = [review_state(FIX, POLICY, ("bob", "carol"), used=USED, seq=1)]
    assert record_problems([first, late], decisions, given) == []
