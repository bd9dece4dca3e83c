"""The policy log: which policy is in force at a commit of `approved`, from its history.

The trust root's policy holds until a policy change is adopted; each adopted change is judged by
the policy before it (facts/branches.policy_changes lists them: one `git log` of `policy/`). Never
from a claim in the audit, which anyone who can push might append to: the audit only dates when a
change was first judged, and only a record a runner of the policy before the change vouched for
(signed) dates it. This clone's own memory of those times lives in `.git/mergegate/judged.json`
(when it first judged each change) and `dated.json` (the first vouched record's date, found once).

Both the walk (runner/plan.py) and the audit branch's signature rule (facts/audit_commits.py) ask
here: `policy_lookup` is the one lookup, `policy_in_force` what it asks when a change is there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING

from mergegate.audit import dating
from mergegate.audit import log as audit
from mergegate.errors import cannot_write
from mergegate.facts.branches import policy_changes
from mergegate.git.repo import Repo
from mergegate.rules.policy import Policy, load_policy

if TYPE_CHECKING:  # (the judge's modules: `audit verify` imports them only if a check needs them)
    from mergegate.facts.assessor import Assessor

JUDGED = "judged.json"  # when this clone first judged each policy change
DATED = "dated.json"  # the first vouched record's date of each (dating.first_vouched), found once


def policy_lookup(
    repo: Repo,
    assessor: Callable[[], Assessor],
    *,
    at: datetime,
    root: str,
    records: str | None,
    known: dict[str, Policy] | None = None,
) -> Callable[[str], Policy]:
    """`policy_at(sha)`: the policy in force at an approved commit (after judging it), for the
    runner-signature rule of the audit branch and the dating of old vetoes.

    `known` holds what a walk already computed; anything else costs one judgement per policy
    change, by `assessor()` at the clock `at`, asked for (and the judge imported) only when there
    is one: at or before the trust root, or with no commit changing policy/ since, the trust
    root's own policy is in force (what `policy_in_force` finds then).
    """
    cache = dict(known or {})

    def policy_at(sha: str) -> Policy:
        if sha not in cache:
            changes = [] if repo.is_ancestor(sha, root) else policy_changes(repo, root, sha)
            if not changes:
                cache[sha] = load_policy(lambda p: repo.read_file(root, p), commit=root)
            else:
                cache[sha] = policy_in_force(
                    repo, assessor(), at=at, root=root, upto=sha, records=records, changes=changes
                )
        return cache[sha]

    return policy_at


def policy_in_force(
    repo: Repo,
    assessor: Assessor,
    *,
    at: datetime,
    root: str,
    upto: str,
    records: str | None,
    remember: bool = False,
    changes: list[str] | None = None,
) -> Policy:
    """The trust root's policy, updated by each policy change adopted up to `upto` (`changes`, when
    the caller has read them: `policy_changes`).

    Costs one judgement per policy change, not per commit. Key lifetimes are judged at the time the
    change was first judged: the audit's first record of it that a runner of the policy before the
    change vouched for (its audit commit signed by one of them: keys the change itself adds never
    date it), only when that policy lists runners; else this clone's own memory of it; else the
    clock now (`at`). A forged record time must not bring an expired key back to life.
    """
    policy = load_policy(lambda p: repo.read_file(root, p), commit=root)
    if upto == root:
        return policy
    from mergegate.facts.assessor import Assessor  # (the judge: only when a change is judged)

    now = at
    judged = judged_times(repo)

    # As the walk that first judged them: full authorship search only for bytes the audit has seen.
    def known(path: str, blob: str) -> bool:
        return audit.mentions(repo, records, path, blob)

    signer = Assessor(repo)
    dated = judged_times(repo, DATED)
    for sha in policy_changes(repo, root, upto, remember=remember) if changes is None else changes:
        when = dated.get(sha) if policy.runners else None
        if when is None and policy.runners:
            # Only a record a runner of the policy before the change appended dates it
            # (dating.first_vouched); the first such record, once there, is every clone's date
            # (the audit only grows): before this clone's own memory, so a runner whose record of
            # the change landed second judges as the rest.
            when = dating.first_vouched(repo, records, sha, _vouched_by(repo, signer, policy))
            if when is not None and remember:
                remember_judged(repo, [sha], when, DATED)
        policy = assessor.assess(sha, policy, at=when or judged.get(sha) or now, known=known).policy
    return policy


def _vouched_by(repo: Repo, signer: Assessor, policy: Policy) -> Callable[[str, datetime], bool]:
    """Whether an audit commit is signed by a runner of `policy`, the key judged at `when` (its
    record's time)."""
    keys = policy.runner_keys()

    def vouched(commit: str, when: datetime) -> bool:
        return signer.signature(repo.commit(commit), keys, at=when).ok

    return vouched


def _judged_path(repo: Repo, name: str = JUDGED) -> Path:
    return repo.git_dir / "mergegate" / name


def judged_times(repo: Repo, name: str = JUDGED) -> dict[str, datetime]:
    """When this clone first judged each policy change, or (`DATED`) when the audit's first vouched
    record says it was judged (local state nobody else can push)."""
    try:
        data = json.loads(_judged_path(repo, name).read_text("utf-8"))
        return {sha: datetime.fromisoformat(when) for sha, when in data.items()}
    except (OSError, ValueError, AttributeError, TypeError):
        return {}


def remember_judged(repo: Repo, shas: list[str], at: datetime, name: str = JUDGED) -> None:
    judged = judged_times(repo, name)
    new = {sha: at for sha in shas if sha not in judged}
    if not new:
        return
    path = _judged_path(repo, name)
    temporary = path.with_suffix(".tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary.write_text(
            json.dumps(
                {sha: when.isoformat() for sha, when in {**judged, **new}.items()}, sort_keys=True
            ),
            "utf-8",
        )
        os.replace(temporary, path)
    except OSError as exc:  # (a full disk: the file as it was is kept)
        temporary.unlink(missing_ok=True)
        raise cannot_write("this clone's memory of policy changes", path, exc) from None
