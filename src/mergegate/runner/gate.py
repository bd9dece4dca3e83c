"""Both branches as one command reads them: one fetch, the seen refs checked, the audit's tail,
and the audit commits new since the last complete pass checked before anything is read from them.

`run`, `status` and `check` start here; runner/plan.py then walks what is new.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING

from mergegate.audit import log as audit
from mergegate.errors import IntegrityError, NotYet
from mergegate.facts.assessor import Assessor
from mergegate.facts.audit_commits import Checker, explain, unchecked
from mergegate.facts.branches import Branch, Seen, open_branch, refuse_old_layout, trust_root
from mergegate.facts.policy_log import policy_lookup
from mergegate.git.repo import Repo
from mergegate.runner.plan import Plan

if TYPE_CHECKING:
    from mergegate.github.gather import ReviewSource


@dataclass(frozen=True)
class Gate:
    """Both branches as one command reads them: one fetch, the seen refs checked."""

    branch: Branch
    tip: str  # approved
    records: str | None  # the audit branch (None before the first pass)
    seen: Seen
    root: str
    warnings: tuple[str, ...]
    tail: audit.Tail
    new_records: tuple[
        str, ...
    ]  # audit commits new since the last complete pass, their shapes checked


def read_gate(
    repo: Repo, *, remote: str, branch: str, fetch: bool, trust: str | None, remember: bool = False
) -> Gate:
    """Fetch both branches once, refuse rewrites and a 0.1 layout, and read the audit's tail."""
    source = open_branch(repo, remote=remote, branch=branch, fetch=fetch)
    tip, records, last = source.look()
    seen = source.check_not_rewritten(tip, records, seen=last)
    refuse_old_layout(repo, tip, records)
    root, warnings = trust_root(repo, tip, trust, remember=remember)
    tail = read_tail(repo, records, seen=seen.records)
    # Shapes first (linear, only appends): nothing is read from a record a bad commit wrote.
    new = unchecked(repo, records, seen=seen.records, tail=tail)
    for sha in new:
        Checker.check_shape(repo, sha)
    return Gate(source, tip, records, seen, root, tuple(warnings), tail, tuple(new))


def read_tail(repo: Repo, records: str | None, *, seen: str | None = None) -> audit.Tail:
    """The audit's tail; if it is broken, the error names the audit commit that broke it."""
    try:
        return audit.read_tail(repo, records)
    except IntegrityError as exc:
        assert records is not None
        raise explain(repo, records, seen, exc) from None


def check_new_records(
    repo: Repo, gate: Gate, work: Plan, *, at: datetime, reviews: ReviewSource | None = None
) -> None:
    """Check the signatures and trailers of the audit commits new since the last complete pass
    (or since this clone last saw the branch); `read_gate` checked their shapes.

    The runner keys are those of the policy in force at each commit's trailer, derived
    with the walk's own review source (`reviews`, the one `work` was planned with): a
    policy change approved by reviews may have removed a key. Where that policy cannot
    be derived yet (its evidence is missing), the check is not yet either (NotYet), never a pass.
    """
    if not gate.new_records:
        return
    known = {work.start: work.start_policy, **{a.commit: a.policy for a in work.assessments}}
    assessor = Assessor(repo, reviews=reviews)
    policy_at = policy_lookup(
        repo, lambda: assessor, at=at, root=gate.root, records=gate.records, known=known
    )
    try:
        Checker(repo, assessor.signer(at=at), gate.tip, policy_at).check(
            gate.new_records, shapes=False
        )
    except NotYet as exc:
        raise NotYet(
            f"the audit commits new since the last pass cannot be checked yet: {exc.message}",
            hint=exc.hint,
        ) from None
