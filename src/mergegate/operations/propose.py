"""`mergegate propose`: write a job file on a branch from approved, judged exactly as `check` judges
it.

Nothing is referenced until the judgement is in: the commit is built with plumbing (a private index,
no working tree touched), handed to `check` by its full id, and only then does a branch point at it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from mergegate.errors import ConfigError, GitError, JobFailed, UsageError
from mergegate.facts.branches import AUDIT_BRANCH, open_branch
from mergegate.git.refnames import branch_name
from mergegate.git.repo import Repo
from mergegate.operations.check import CheckReport, check
from mergegate.redaction import find_credential
from mergegate.rules.job import parse_job

ZERO = "0" * 40


@dataclass(frozen=True)
class Draft:
    """What an agent or a person asks for, before anything is written."""

    job: str
    command: tuple[str, ...]
    description: str | None = None
    timeout_seconds: int | None = None
    cwd: str | None = None
    env: tuple[tuple[str, str], ...] = ()
    retries: int | None = None
    idempotent: bool = False
    runs_on: tuple[str, ...] = ()

    @property
    def path(self) -> str:
        return f"jobs/{self.job}.yaml"

    def text(self) -> bytes:
        data: dict[str, object] = {"id": self.job, "command": list(self.command)}
        if self.description:
            data["description"] = self.description
        if self.timeout_seconds is not None:
            data["timeout_seconds"] = self.timeout_seconds
        if self.cwd is not None:
            data["cwd"] = self.cwd
        if self.env:
            data["env"] = dict(self.env)
        if self.retries is not None:
            data["retries"] = self.retries
        if self.idempotent:
            data["idempotent"] = True
        if self.runs_on:
            data["runs_on"] = list(self.runs_on)
        return yaml.safe_dump(data, sort_keys=False, allow_unicode=True, width=10_000).encode()


def parse_env(pairs: Sequence[str]) -> tuple[tuple[str, str], ...]:
    env: dict[str, str] = {}
    for index, pair in enumerate(pairs):
        name, sep, value = pair.partition("=")
        if not sep or not name:
            # Never echo the value: it may be the secret the person meant to pass.
            raise UsageError(
                f"--env number {index + 1} is not NAME=VALUE", hint="--env REGION=eu-west-1"
            )
        env[name] = value
    return tuple(env.items())


def validate(draft: Draft) -> bytes:
    """The job file's bytes, validated by the runner's own parser; errors never echo a
    credential."""
    if draft.description and find_credential(draft.description):
        raise ConfigError(
            f"--description looks like a {find_credential(draft.description)}; credentials do not "
            "belong in a job file",
            file=draft.path,
            hint="pass secrets through the runner's environment and the policy's secret_env",
        )
    text = draft.text()
    parse_job(text, path=draft.path, blob=ZERO)
    return text


@dataclass(frozen=True)
class Proposal:
    job: str
    path: str
    blob: str
    branch: str
    commit: str
    base: str  # approved's tip the branch starts from
    created: bool  # False: the same content was already proposed on this branch
    signed: bool
    pushed_to: str | None
    report: CheckReport
    pull: int | None = None
    pull_url: str | None = None
    pull_created: bool = False

    def as_json(self) -> dict[str, object]:
        return {
            "job": self.job,
            "path": self.path,
            "blob": self.blob,
            "branch": self.branch,
            "commit": self.commit,
            "base": self.base,
            "created": self.created,
            "signed": self.signed,
            "pushed_to": self.pushed_to,
            "exit_code": self.report.exit_code,
            "files": [f.as_json() for f in self.report.files],
            "pull": self.pull,
            "pull_url": self.pull_url,
            "pull_created": self.pull_created,
        }


def propose(
    draft: Draft,
    *,
    repo_path: Path,
    base: str,
    remote: str,
    branch: str | None,
    push: bool,
    fetch: bool,
    trust: str | None = None,
    open_pr: bool = False,
    even_if_denied: bool = False,
) -> Proposal:
    """Propose the draft; with `open_pr`, also open (or find) its pull request against base."""
    if open_pr and not os.environ.get("GITHUB_TOKEN"):
        # Before anything is written, not after the push.
        raise UsageError(
            "--open-pr needs a GitHub token",
            hint="export GITHUB_TOKEN with a token that may open pull requests",
        )
    made = _propose(
        draft,
        repo_path=repo_path,
        base=base,
        remote=remote,
        branch=branch,
        push=push or open_pr,
        fetch=fetch,
        trust=trust,
        even_if_denied=even_if_denied,
    )
    if not open_pr:
        return made
    from mergegate.github.pulls import open_pull, repository

    repo = Repo(repo_path)
    pull = open_pull(
        repo_name=repository(repo.config(f"remote.{remote}.url")),
        branch=made.branch,
        base=branch_name(base, remote),
        title=f"Propose job {draft.job}",
        body=pull_body(draft, made),
    )
    return replace(made, pull=pull.number, pull_url=pull.url, pull_created=pull.created)


def pull_body(draft: Draft, made: Proposal) -> str:
    """The pull request's description: what runs, and check's verdict as the proposer saw it."""
    lines = [
        f"Proposed with `mergegate propose`: `{draft.path}` runs `{' '.join(draft.command)}`.",
        "",
    ]
    if draft.description:
        lines += [draft.description, ""]
    lines += [f"`mergegate check` at {made.commit[:12]}, against approved at {made.base[:12]}:", ""]
    for f in made.report.files:
        lines.append(f"- **{f.state}** `{f.path}`: {f.reason}")
        if f.approvals:
            lines.append(f"  - approvals: {f.approvals}")
    lines += [
        "",
        "A person approves it with a signed merge (or reviews, if the policy uses them); nothing "
        "runs before.",
    ]
    return "\n".join(lines)


def _propose(
    draft: Draft,
    *,
    repo_path: Path,
    base: str,
    remote: str,
    branch: str | None,
    push: bool,
    fetch: bool,
    trust: str | None,
    even_if_denied: bool,
) -> Proposal:
    text = validate(draft)
    repo = Repo(repo_path)
    base = branch_name(base, remote)
    target = branch_name(branch or f"propose/{draft.job}", remote)
    if target == base or target == AUDIT_BRANCH or target.startswith("mergegate/"):
        # approved is where people merge; mergegate/audit is where runners append: a proposal
        # pushed to either would be tampering (or stop the runner), so neither is a proposal branch.
        raise UsageError(
            f"a proposal cannot be made on {target}", hint=f"--branch propose/{draft.job}"
        )
    if repo.run("check-ref-format", "--branch", target, check=False).returncode != 0:
        raise UsageError(
            f"--branch {target!r} is not a valid branch name", hint=f"--branch propose/{draft.job}"
        )
    source = open_branch(repo, remote=remote, branch=base, fetch=fetch)
    tip = source.tip()
    blob = repo.run("hash-object", "--stdin", input=text).stdout.decode().strip()
    if repo.file_blob(tip, draft.path) == blob:
        raise UsageError(
            f"{draft.path} is already on {base} with exactly this content",
            hint="mergegate status shows whether it ran; propose a change to run it again",
        )
    remote_ref = f"refs/remotes/{remote}/{target}" if source.remote is not None else None
    if remote_ref is not None and fetch:
        _fetch_if_present(repo, remote, target)
    existing = repo.rev(f"refs/heads/{target}")
    published = repo.rev(remote_ref) if remote_ref is not None else None
    for candidate in (c for c in (published, existing) if c is not None):
        if (
            repo.file_blob(candidate, draft.path) == blob
            and repo.merge_base(candidate, tip) is not None
        ):
            # Proposing the same content again returns the proposal there is.
            report = check(
                repo_path=repo_path,
                ref=candidate,
                base=base,
                remote=remote,
                fetch=False,
                trust=trust,
            )
            pushed = _publish(repo, source.remote, target, candidate, published, push)
            if existing is None or repo.is_ancestor(existing, candidate):
                repo.update_ref(f"refs/heads/{target}", candidate, existing)
            return Proposal(
                draft.job,
                draft.path,
                blob,
                target,
                candidate,
                tip,
                False,
                _is_signed(repo, candidate),
                pushed or (f"{remote}/{target}" if candidate == published else None),
                report,
            )
    # A changed proposal is a new commit on the proposal branch (its reviewers see the
    # change as one more commit; nothing is force-pushed); a new one starts at approved.
    parent = _newest(repo, target, existing, published) or tip
    if repo.merge_base(parent, tip) is None:
        raise UsageError(
            f"branch {target} shares no history with {base}",
            hint=f"pick another name: --branch propose/{draft.job}-2",
        )
    sign = _signs(repo)
    message = (
        f"propose job {draft.job}\n\n{draft.description}\n"
        if draft.description
        else f"propose job {draft.job}\n"
    )
    commit = repo.write_commit(
        parent=parent,
        files={draft.path: text},
        message=message,
        author=None,
        signing=None,
        sign=sign,
    )
    # Judge exactly as `check` does (the same function) before any branch points at it.
    report = check(
        repo_path=repo_path, ref=commit, base=base, remote=remote, fetch=False, trust=trust
    )
    _refuse(report, draft, even_if_denied=even_if_denied)
    if not repo.update_ref(f"refs/heads/{target}", commit, existing):
        raise GitError(f"branch {target} moved while proposing", hint="run the command again")
    pushed = _publish(repo, source.remote, target, commit, published, push)
    return Proposal(draft.job, draft.path, blob, target, commit, tip, True, sign, pushed, report)


def _newest(repo: Repo, target: str, local: str | None, published: str | None) -> str | None:
    """The proposal branch's tip: the one of the local and pushed tips that contains the other."""
    if local is None or published is None:
        return local or published
    if repo.is_ancestor(published, local):
        return local
    if repo.is_ancestor(local, published):
        return published
    raise UsageError(
        f"branch {target} and its pushed copy have diverged",
        hint=f"reconcile them (git pull on {target}), or pass another --branch",
    )


def _refuse(report: CheckReport, draft: Draft, *, even_if_denied: bool) -> None:
    # An invalid file is always refused; a denied one only proposed when asked (to go with a policy
    # change).
    bad = [
        f
        for f in report.files
        if f.state == "invalid" or (f.state == "denied" and not even_if_denied)
    ]
    if not bad:
        return
    first = bad[0]
    if first.state == "invalid":
        raise ConfigError(
            f"{first.path} would be invalid on approved: {first.reason}", file=first.path
        )
    raise JobFailed(
        f"the policy in force would deny {draft.path}: {first.reason}",
        hint="propose what the policy allows, or a policy change that allows it (--even-if-denied "
        "proposes this job anyway)",
    )


def _fetch_if_present(repo: Repo, remote: str, target: str) -> None:
    try:
        repo.fetch(remote, target)
    except GitError as exc:
        if "does not exist" not in exc.message:
            raise


def _publish(
    repo: Repo, remote: str | None, target: str, commit: str, published: str | None, push: bool
) -> str | None:
    if not push:
        return None
    if remote is None:
        raise UsageError(
            "--push needs a remote", hint="git remote add origin URL, or leave out --push"
        )
    if published == commit:
        return f"{remote}/{target}"
    if not repo.push(remote, commit, target):
        raise GitError(
            f"push rejected: {remote}/{target} moved since it was fetched (someone else pushed to "
            "it)",
            hint=f"git fetch {remote} {target}, look at what changed, then propose again",
        )
    return f"{remote}/{target}"


def _signs(repo: Repo) -> bool:
    proc = repo.run("config", "--type=bool", "--get", "commit.gpgsign", check=False)
    return proc.stdout.decode().strip() == "true"


def _is_signed(repo: Repo, sha: str) -> bool:
    raw = repo.commit(sha).raw
    return b"\ngpgsig " in raw.split(b"\n\n", 1)[0] or raw.startswith(b"gpgsig ")
