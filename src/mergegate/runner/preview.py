"""A dry run (`run --dry-run`, `plan`): what a pass would claim, run and record.

The same reading, planning, bookkeeping and refusals as a pass (one_pass.Runner.preview); it
stops where the pass would start claiming. The drafts are those the pass would record, less what
only a run can say (its result, its lease); nothing is written, pushed or remembered.
"""

from __future__ import annotations

from mergegate.audit.records import Record
from mergegate.rules.model import Decision
from mergegate.runner.drafting import Drafts, job_id, policy_changes
from mergegate.runner.plan import Plan
from mergegate.runner.results import Outcome, Planned, Preview
from mergegate.runner.vetoes import Vetoes

# What a refusal found before the claim would be recorded as, said as what the pass would do.
_WOULD = {"rejected": "would reject", "vetoed": "would veto"}


def dry_run(
    work: Plan, drafts: Drafts, vetoes: Vetoes, *, tip: str, warnings: list[str]
) -> Preview:
    """The jobs of `work` and the drafts a pass would push for them (evidence files go nowhere)."""
    outcomes: list[Outcome] = []
    pending = drafts.bookkeeping(work, outcomes)
    jobs = [Planned(o.job, o.path, o.commit, "would close", o.reason, ()) for o in outcomes]
    for refused in work.refused:
        decision = refused.decision
        command = decision.job.command if decision.job is not None else ()
        pending.append(drafts.refusal("rejected", decision, refused.reason, expiry=refused.expiry))
        jobs.append(
            Planned(
                job_id(decision),
                decision.path,
                decision.commit,
                "would reject",
                refused.reason,
                command,
            )
        )
    for item in work.runnable:
        decision = item.decision
        refusal = vetoes.refusal(decision, work)
        command = decision.job.command if decision.job is not None else ()
        if refusal is not None:
            event, reason = refusal
            pending.append(drafts.refusal(event, decision, reason))
            would = _WOULD.get(event, f"would record {event}")
            jobs.append(
                Planned(job_id(decision), decision.path, decision.commit, would, reason, command)
            )
            continue
        pending += _would_run(drafts, item.decision, command, item.attempt)
        jobs.append(
            Planned(
                job_id(decision),
                decision.path,
                decision.commit,
                "would run",
                None,
                command,
                decision.blob,
                item.attempt,
                item.runs_on,
            )
        )
    if work.new_commits:
        pending.append(drafts.scanned(work))
    return Preview(
        tip, tuple(jobs), tuple(pending), tuple(warnings), policy_changes(work), work.waiting
    )


def _would_run(
    drafts: Drafts, decision: Decision, command: tuple[str, ...], attempt: int
) -> list[Record]:
    """The claim and the result a run would record (the result's fields unknown yet)."""
    return [
        drafts.claim(decision, command=command, attempt=attempt),
        drafts.would_finish(decision),
    ]
