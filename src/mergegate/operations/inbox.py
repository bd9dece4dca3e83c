"""`mergegate inbox`: the proposals waiting for a person's decision.

Every branch on the remote (and, with GITHUB_TOKEN, every open pull request against approved) that
adds or changes a job or policy file relative to approved, with `check`'s verdict (the same
function), the approvals each file still needs, and which approvers may give them (the judge's own
separation-of-duties exclusions).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from mergegate import clock
from mergegate.audit.log import AUDIT_DIR
from mergegate.errors import MergegateError
from mergegate.facts.assessor import Assessor
from mergegate.facts.branches import open_branch, trust_root
from mergegate.git.repo import Repo
from mergegate.operations.check import CheckReport, FileCheck, check
from mergegate.operations.emergencies import owed_now
from mergegate.rules.break_glass import Owed
from mergegate.rules.job import is_job_path
from mergegate.rules.policy import POLICY_DIR

SKIP = ("HEAD", "mergegate/audit")


@dataclass(frozen=True)
class Item:
    ref: str
    head: str
    pull: int | None
    pull_url: str | None
    exit_code: int
    files: tuple[FileCheck, ...]
    may_approve: tuple[str, ...]
    error: str | None = None

    @property
    def verdict(self) -> str:
        if self.error is not None:
            return "invalid"
        return {0: "allowed", 1: "denied"}.get(self.exit_code, "invalid")

    def as_json(self) -> dict[str, object]:
        return {
            "ref": self.ref,
            "head": self.head,
            "pull": self.pull,
            "pull_url": self.pull_url,
            "verdict": self.verdict,
            "exit_code": self.exit_code,
            "files": [f.as_json() for f in self.files],
            "may_approve": list(self.may_approve),
            "error": self.error,
        }


@dataclass(frozen=True)
class Inbox:
    base: str
    items: tuple[Item, ...]
    warnings: tuple[str, ...] = ()
    owed: tuple[Owed, ...] = ()  # reviews break-glass runs still owe: decisions waiting too
    now: datetime | None = None


def inbox(*, repo_path: Path, remote: str, base: str, fetch: bool, trust: str | None) -> Inbox:
    repo = Repo(repo_path)
    source = open_branch(repo, remote=remote, branch=base, fetch=fetch)
    tip = source.tip()
    warnings: list[str] = []
    if source.remote is None:
        candidates = {
            name: f"refs/heads/{name}" for name in _refs(repo, "refs/heads/") if name != base
        }
    else:
        if fetch:
            repo.run(
                "fetch",
                "--quiet",
                "--no-tags",
                "--prune",
                remote,
                f"+refs/heads/*:refs/remotes/{remote}/*",
            )
        candidates = {
            f"{remote}/{name}": f"refs/remotes/{remote}/{name}"
            for name in _refs(repo, f"refs/remotes/{remote}/")
            if name != base and name not in SKIP
        }
    pulls: dict[str, tuple[int, str]] = {}
    if source.remote is not None and os.environ.get("GITHUB_TOKEN"):
        try:
            pulls = _open_pulls(repo, remote, base, fetch)
        except MergegateError as exc:
            from mergegate.github.http import AGAIN  # (a private CA's SSL_CERT_FILE, say)

            advice = f"; hint: {exc.hint}" if exc.hint and exc.hint != AGAIN else ""
            warnings.append(f"open pull requests not listed: {exc.message}{advice}")
    for ref in {r for r in pulls if r not in candidates}:
        candidates[ref] = ref
    items = []
    for name, ref in sorted(candidates.items()):
        head = repo.rev(ref)
        if head is None or repo.is_ancestor(head, tip):
            continue  # merged already, or nothing new
        fork = repo.merge_base(tip, head)
        if fork is None:
            continue
        changed = [
            c.path
            for c in repo.diff(fork, head)
            if is_job_path(c.path) or c.path.startswith((POLICY_DIR, AUDIT_DIR))
        ]
        if all(repo.file_blob(tip, path) == repo.file_blob(head, path) for path in changed):
            continue  # nothing, or nothing approved lacks (a squash merge of it, say)
        pull = pulls.get(name)
        try:
            report = check(
                repo_path=repo_path, ref=head, base=base, remote=remote, fetch=False, trust=trust
            )
        except MergegateError as exc:
            items.append(
                Item(
                    name,
                    head,
                    pull[0] if pull else None,
                    pull[1] if pull else None,
                    exc.exit_code,
                    (),
                    (),
                    str(exc),
                )
            )
            continue
        items.append(
            Item(
                name,
                head,
                pull[0] if pull else None,
                pull[1] if pull else None,
                report.exit_code,
                tuple(report.files),
                _may_approve(repo, report),
            )
        )
    now = clock.now()
    root, _ = trust_root(repo, tip, trust)
    owed = owed_now(repo, tip, root, source.audit_tip(), at=now)
    return Inbox(base, tuple(items), tuple(warnings), tuple(o for o in owed if not o.given), now)


def _refs(repo: Repo, prefix: str) -> list[str]:
    names = repo.out("for-each-ref", "--format=%(refname)", prefix).split()
    return [n[len(prefix) :] for n in names]


def _may_approve(repo: Repo, report: CheckReport) -> tuple[str, ...]:
    """Approvers of the policy in force whose vote would count for every file (not an author or
    signer)."""
    policy = report.policy_in_force
    if policy is None:
        return ()
    if policy.allow_self_approval:
        return tuple(p.name for p in policy.approvers)
    if report.facts is None:
        return ()
    assessor = Assessor(repo)
    excluded: set[str] = set()
    for f in report.files:
        excluded |= set(assessor.excluded(policy, report.facts, f.path))
    return tuple(p.name for p in policy.approvers if p.name not in excluded)


def _open_pulls(repo: Repo, remote: str, base: str, fetch: bool) -> dict[str, tuple[int, str]]:
    """Open pull requests against base: "<remote>/<branch>" for same-repository heads, a fetched ref
    for forks."""
    from mergegate.github.http import Client
    from mergegate.github.pulls import DEFAULT_API, repository

    name = repository(repo.config(f"remote.{remote}.url"))
    found: dict[str, tuple[int, str]] = {}
    with Client(
        os.environ.get("GITHUB_API_URL") or DEFAULT_API, token=os.environ.get("GITHUB_TOKEN")
    ) as api:
        page = api.get(
            f"/repos/{name}/pulls", params={"state": "open", "base": base, "per_page": 100}
        )
        for _ in range(50):  # at most 5,000 open pull requests
            data = page.json()
            for item in data if isinstance(data, list) else []:
                head = item.get("head") or {}
                number, url = int(item["number"]), str(item.get("html_url") or item.get("url"))
                if (head.get("repo") or {}).get("full_name") == name:
                    found[f"{remote}/{head.get('ref')}"] = (number, url)
                else:
                    ref = f"refs/mergegate/pull/{number}"
                    if fetch:
                        repo.run(
                            "fetch",
                            "--quiet",
                            "--no-tags",
                            remote,
                            f"+refs/pull/{number}/head:{ref}",
                            check=False,
                        )
                    found[ref] = (number, url)
            following = page.next_url()
            if following is None:
                break
            page = api.get(following)
    return found
