"""The two branches of a gate: `approved` (people merge into it) and `mergegate/audit` (runners
append to it).

The runner reads `approved` and never writes it; it appends records to the audit branch. Both are
read from one fetch, both are covered by the seen refs, and the trust root anchors both.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass

from mergegate.errors import GitError, IntegrityError, StateError, UsageError
from mergegate.git.repo import Repo
from mergegate.text import shown

AUDIT_BRANCH = (
    "mergegate/audit"  # fixed: every runner, `status` and `verify` agree on it without a flag
)


@dataclass(frozen=True)
class Seen:
    """What this clone last saw of each branch (None: never, or no seen ref yet)."""

    approved: str | None
    records: str | None


@dataclass(frozen=True)
class Branch:
    """Where `approved` and the audit branch are read from, and how records are published."""

    repo: Repo
    ref: str  # approved: refs/remotes/<remote>/approved, or refs/heads/approved without a remote
    remote: str | None
    branch: str

    @property
    def audit_ref(self) -> str:
        return (
            f"refs/remotes/{self.remote}/{AUDIT_BRANCH}"
            if self.remote is not None
            else f"refs/heads/{AUDIT_BRANCH}"
        )

    @property
    def seen_ref(self) -> str:
        return f"refs/mergegate/seen/{self.remote or 'local'}/{self.branch}"

    @property
    def seen_audit_ref(self) -> str:
        return f"refs/mergegate/seen/{self.remote or 'local'}/{AUDIT_BRANCH}"

    def look(self) -> tuple[str, str | None, Seen]:
        """approved's tip, the audit branch's (None before the first pass) and what this clone last
        saw of both: the four refs a pass starts from, read with one git process."""
        refs = self.repo.revs([self.ref, self.audit_ref, self.seen_ref, self.seen_audit_ref])
        tip = refs[self.ref]
        if tip is None:
            tip = self.tip()  # (raises, naming the branch)
        return tip, refs[self.audit_ref], Seen(refs[self.seen_ref], refs[self.seen_audit_ref])

    def tips(self) -> tuple[str, str | None]:
        """approved's tip and the audit branch's, read with one git process (every look during a
        pass)."""
        refs = self.repo.revs([self.ref, self.audit_ref])
        tip = refs[self.ref]
        return tip if tip is not None else self.tip(), refs[self.audit_ref]

    def check_not_rewritten(
        self, tip: str, records: str | None, *, seen: Seen | None = None
    ) -> Seen:
        """IntegrityError when a branch does not descend from the tip this clone last saw of it
        (`seen`, as `look` read it; else read now)."""
        seen = seen or Seen(self.repo.rev(self.seen_ref), self.repo.rev(self.seen_audit_ref))
        if seen.approved is not None and not self.repo.is_ancestor(seen.approved, tip):
            raise IntegrityError(
                f"{self.ref} was rewritten: this clone last saw {seen.approved[:12]}, which is not "
                f"an ancestor of the new tip {tip[:12]} (force-push?)",
                hint="investigate before trusting it; to accept the new history: git update-ref "
                f"-d {self.seen_ref}",
            )
        if seen.records is not None and (
            records is None or not self.repo.is_ancestor(seen.records, records)
        ):
            now = (
                "was deleted"
                if records is None
                else f"is now at {records[:12]}, which does not descend from it"
            )
            raise IntegrityError(
                f"the audit branch {AUDIT_BRANCH} was rewritten: this clone last saw "
                f"{seen.records[:12]}, and {self.audit_ref} {now} (force-push?)",
                hint="records are never rewritten; investigate before trusting it; to accept the "
                f"new history: git update-ref -d {self.seen_audit_ref}",
            )
        return seen

    def remember(self, tip: str, records: str | None, seen: Seen) -> Seen:
        """Remember what was seen of both branches, so that a later rewrite of either
        (which may also erase the records that would have told) is noticed by this clone.

        These writes are what rewrite detection rests on: when one fails (a lock in
        the way, permissions, a full disk) the pass stops, naming the ref. Call it for
        the audit branch only once its new commits are checked: the seen ref is where
        the next pass starts checking.
        """
        self._remember(self.seen_ref, tip, seen.approved)
        if records is not None:
            self._remember(self.seen_audit_ref, records, seen.records)
        return Seen(tip, records if records is not None else seen.records)

    def _remember(self, ref: str, new: str, old: str | None) -> None:
        for _ in range(3):
            if new == old:
                return
            try:
                if self.repo.update_ref(ref, new, old):
                    return
            except GitError as exc:
                raise StateError(
                    f"cannot record the tip this clone has seen in {ref}: {exc.message}",
                    file=exc.file or str(self.repo.git_dir / ref),
                    hint=exc.hint
                    or "the runner detects a rewritten branch with it; fix the cause and run again",
                ) from None
            # Another process (a `verify`, a `status`) moved it meanwhile: fine if along the same
            # line.
            now = self.repo.rev(ref)
            if now is not None and self.repo.is_ancestor(new, now):
                return
            if now is not None and not self.repo.is_ancestor(now, new):
                raise IntegrityError(
                    f"{ref} moved to {now[:12]}, which is not an ancestor of {new[:12]}: a branch "
                    "was rewritten (force-push?)",
                    hint="investigate before trusting it; to accept the new history: git "
                    f"update-ref -d {ref}",
                )
            old = now
        raise StateError(
            f"{ref} keeps changing while this pass runs", hint="one pass at a time per clone"
        )

    def tip(self) -> str:
        sha = self.repo.rev(self.ref)
        if sha is None:
            raise GitError(
                f"branch {self.ref} does not exist",
                hint="run `mergegate init`, or pass --remote/--branch",
            )
        return sha

    def audit_tip(self) -> str | None:
        """The audit branch's tip; None before the first runner pass created it."""
        return self.repo.rev(self.audit_ref)

    def refresh(self) -> None:
        """One fetch of both branches (the audit branch may not exist yet)."""
        if self.remote is not None:
            self.repo.fetch(self.remote, self.branch, also=(AUDIT_BRANCH,))

    def publish(self, sha: str, old: str) -> bool:
        """Move `approved` (a person's veto; the runner never does this)."""
        if self.remote is not None:
            return self.repo.push(self.remote, sha, self.branch)
        return self.repo.update_ref(self.ref, sha, old)

    def publish_records(self, sha: str, old: str | None) -> bool:
        """Append an audit commit: a plain push (or compare-and-swap); None creates the branch,
        create-only."""
        if self.remote is not None:
            return self.repo.push(self.remote, sha, AUDIT_BRANCH)
        return self.repo.update_ref(self.audit_ref, sha, old)


def open_branch(repo: Repo, *, remote: str, branch: str, fetch: bool) -> Branch:
    """origin/approved and origin/mergegate/audit after one fetch; the local branches without that
    remote."""
    if repo.has_remote(remote):
        result = Branch(repo, f"refs/remotes/{remote}/{branch}", remote, branch)
        if fetch:
            try:
                result.refresh()
            except GitError as exc:
                if "does not exist" in exc.message:
                    exc.hint = (
                        f"after `mergegate init`, publish it: git push {remote} HEAD {branch}"
                    )
                raise
        return result
    if repo.current_branch() == AUDIT_BRANCH:
        raise GitError(
            f"{AUDIT_BRANCH} is checked out here; the runner would move it under your working tree",
            hint="git switch to another branch first",
        )
    return Branch(repo, f"refs/heads/{branch}", None, branch)


def refuse_old_layout(repo: Repo, tip: str, records: str | None) -> None:
    """A 0.1 gate kept its records on approved: say where they live now, in one line.

    Only before the audit branch exists: afterwards a file under audit/ on approved is a file like
    any other, and no push to approved can stop the runner.
    """
    if records is not None:
        return
    old = [
        name
        for mode, _, name in repo.ls_tree_flat(tip, "audit/")
        if re.fullmatch(r"log-\d{6}\.jsonl", name)
    ]
    if old:
        raise UsageError(
            f"approved holds audit records: records now live on the branch {AUDIT_BRANCH}, not on "
            "approved",
            file=f"audit/{old[0]}",
            hint="a gate made by mergegate 0.1, which kept records on approved (git show "
            "approved:audit/log-000001.jsonl reads them); this version cannot run it",
        )


def trust_root(
    repo: Repo, tip: str, given: str | None, *, remember: bool = False
) -> tuple[str, list[str]]:
    """The pinned trust root (checked to be an ancestor of tip), or the root commit with a warning.
    (`remember`: a runner's pass; the clone keeps the yes of that walk through all history.)"""
    given = given or os.environ.get("MERGEGATE_TRUST_ROOT") or None
    if given is None:
        # Imported here: policy.py brings the schemas, which `audit verify` imports only after its
        # workers start.
        from mergegate.rules.policy import POLICY_FILE

        root = repo.root_commit(tip)
        # In a repository that had history before `mergegate init`, the root commit has no policy;
        # the first commit that brought one is the anchor.
        if repo.file_blob(root, POLICY_FILE) is None:
            introduced = repo.first_parent_adding(tip, POLICY_FILE)
            root = introduced or root
        return root, [
            f"no trust root pinned; trusting {root[:12]}, the first commit of approved with a "
            f"policy (pin it: --trust-root {root} or MERGEGATE_TRUST_ROOT={root})"
        ]
    if not _FULL.fullmatch(given.lower()):
        # A prefix, a branch or `approved~3` would let what the name resolves to decide the
        # trust: the docs ask for the full id of the reviewed commit, and nothing else is taken.
        raise UsageError(
            f"trust root {shown(given)!r} does not name a commit by its full id",
            hint="pin the full 40-character id `mergegate init` printed "
            "(git rev-parse COMMIT gives it)",
        )
    sha = repo.rev(given.lower())
    if sha is None:
        raise UsageError(
            f"trust root {given!r} does not name a commit in this repository",
            hint="pass the full id of the commit whose policy you reviewed (fetch it first)",
        )
    if not repo.is_ancestor(sha, tip, remember=remember):
        raise IntegrityError(
            f"trust root {sha[:12]} is not an ancestor of approved at {tip[:12]}: history was "
            "rewritten or the wrong root is pinned",
            hint="pin the commit `mergegate init` printed as the trust root; if that is the one "
            "pinned, "
            "approved was rewritten (force-push?): investigate before trusting it",
        )
    return sha, []


def policy_changes(repo: Repo, root: str, upto: str, *, remember: bool = False) -> list[str]:
    """The first-parent commits after `root` up to `upto` that change policy/, oldest first.

    A walk of all history with a path limit; between two commit ids the answer never changes, so
    with `remember` (a pass's start) the clone keeps the latest few (`<git
    dir>/mergegate/policy-changes.json`): every runner's pass starts at the same last scanned commit
    until a new one is walked.
    """
    # (Imported here: policy.py brings in YAML and the schemas, which audit verify imports after its
    # workers start.)
    from mergegate.rules.policy import POLICY_DIR

    key = f"{root}..{upto}"
    remember = remember and bool(_FULL.fullmatch(root) and _FULL.fullmatch(upto))
    memo = _policy_memory(repo) if remember else {}
    known = memo.get(key)
    if isinstance(known, list) and all(
        isinstance(sha, str) and _FULL.fullmatch(sha) for sha in known
    ):
        return list(known)
    found = repo.out(
        "log", "--first-parent", "--reverse", "--format=%H", key, "--", POLICY_DIR
    ).split()
    if remember:
        kept = {k: v for k, v in memo.items() if k != key}
        kept = dict(list(kept.items())[-15:])
        path = repo.git_dir / "mergegate" / "policy-changes.json"
        scratch = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:  # best effort (a cache)
            path.parent.mkdir(parents=True, exist_ok=True)
            scratch.write_text(json.dumps({**kept, key: found}), "utf-8")
            os.replace(scratch, path)
        except OSError:
            scratch.unlink(missing_ok=True)
    return found


def _policy_memory(repo: Repo) -> dict[str, object]:
    try:
        value = json.loads((repo.git_dir / "mergegate" / "policy-changes.json").read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


_FULL = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
