"""`mergegate init`: turn an existing git repository into a gate repository."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from mergegate.crypto.signatures import parse_public_key
from mergegate.errors import ConfigError, GitError, UsageError
from mergegate.git.repo import Repo
from mergegate.github import workflows
from mergegate.rules.policy import POLICY_FILE, load_policy

POLICY_TEMPLATE = (
    "# mergegate policy: deny by default. Every key is explained below; "
    "`mergegate lint policy/policy.yaml` checks this file.\n"
    """\
version: 1

# Who may approve: a merge into `approved` signed by one of these keys.
approvers:
  - name: {name_json}
{email}    key: {key_json}

# Signed merges needed per job; the merge signer counts as one.
approvals_required: 1
# Changing anything under policy/ needs this many approvers, judged by the
# policy before the change. With one approver it must be 1; raise it to 2 in
# the same change that adds a second approver.
policy_approvals_required: 1
# A solo operator may approve their own jobs; the audit then says so.
allow_self_approval: {self_approval}

# What may run: command[0] must equal `program` and the arguments start with `args_prefix`.
# No rule, no run. Example:
#   - program: echo
#     args_prefix: []
commands: []

limits:
  max_timeout_seconds: 300
  max_output_bytes: 65536

# Runner environment variables a job may receive.
env_allowlist: [PATH, LANG, HOME]
"""
)

JOBS_README = """\
# jobs/

One job per file (`jobs/<id>.yaml`). Propose a job on a branch; it runs once a
signed merge into `approved` approves it under `policy/policy.yaml`.

```yaml
id: hello            # must equal the file name
command: [echo, hello]
timeout_seconds: 30  # optional
```
"""


@dataclass(frozen=True)
class InitResult:
    commit: str
    branch: str
    written: tuple[str, ...]
    warnings: tuple[str, ...] = ()


def is_gate(repo_path: Path, branch: str) -> bool:
    """Whether `branch` exists here with a policy: init has nothing to create, only workflows to
    add."""
    repo = Repo(repo_path)
    tip = repo.rev(f"refs/heads/{branch}") or repo.rev(f"refs/remotes/origin/{branch}")
    return tip is not None and repo.file_blob(tip, POLICY_FILE) is not None


def add_workflows(
    *, repo_path: Path, action: str, fan_out: bool = False
) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """Write the GitHub workflows into the working tree of an existing gate; committing and
    approving them is a change like any other (they are files the policy's quorum covers).
    Returns (written, removed): the other kind of runner workflow goes, since a gate runs one
    (both would race for every job on every push)."""
    repo = Repo(repo_path)
    written = []
    removed = []
    other, template = (
        (workflows.RUN_PATH, workflows.RUN)
        if fan_out
        else (workflows.FAN_OUT_PATH, workflows.FAN_OUT)
    )
    if (repo.path / other).exists():
        if not (repo.path / other).read_text().startswith(template.splitlines()[0]):
            raise UsageError(
                f"{other} exists and was not written by mergegate; a gate runs one runner workflow",
                file=other,
                hint="remove it (or move it aside) and run again",
            )
        (repo.path / other).unlink()
        removed.append(other)
    for path, text in workflows.files(action=action, fan_out=fan_out).items():
        target = repo.path / path
        if target.exists() and target.read_text() != text:
            raise UsageError(
                f"{path} exists with other content; not overwritten",
                file=path,
                hint="move it aside and run again, or compare: mergegate init --github --action "
                f"{action} in a scratch clone",
            )
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        written.append(path)
    return tuple(written), tuple(removed)


def init(
    *,
    repo_path: Path,
    approver: str | None,
    key: str | None,
    email: str | None,
    solo: bool,
    branch: str,
    github_action: str | None = None,
    fan_out: bool = False,
) -> InitResult:
    repo = Repo(repo_path)
    existing_tip = repo.rev(f"refs/heads/{branch}")
    # approved exists without a policy and is checked out: init commits the policy onto it
    onto_branch = False
    if existing_tip is not None:
        if repo.file_blob(existing_tip, POLICY_FILE) is not None:
            raise UsageError(
                f"branch {branch} already exists with a policy: this repository is already a gate",
                hint="mergegate status lists its jobs; mergegate inbox what waits for approval",
            )
        if repo.current_branch() != branch:
            raise UsageError(
                f"branch {branch} exists but has no {POLICY_FILE} yet",
                hint=f"git switch {branch} && mergegate init: the policy is committed onto it "
                "(that commit is the trust root)",
            )
        onto_branch = True
    if repo.config("user.email") is None or repo.config("user.name") is None:
        raise UsageError(
            "git does not know who you are: init commits the policy as you",
            hint='git config user.name "Your Name" && git config user.email you@example.com',
        )
    # No audit/ here: records live on the branch mergegate/audit, which the first runner pass
    # creates.
    files = {"jobs/README.md": JOBS_README}
    if github_action is not None:  # init --github: the pull-request check and runner workflows
        files.update(workflows.files(action=github_action, fan_out=fan_out))
    warnings: list[str] = []
    existing = repo.path / POLICY_FILE
    if existing.exists():
        # The person wrote their own policy: check it, and say which flags it makes moot.
        load_policy(
            lambda p: (repo.path / p).read_bytes() if (repo.path / p).is_file() else None,
            commit="0" * 40,
        )
        ignored = [
            flag
            for flag, value in (
                ("--approver", approver),
                ("--key", key),
                ("--email", email),
                ("--solo", solo),
            )
            if value
        ]
        if ignored:
            warnings.append(
                f"{POLICY_FILE} exists and is used as it is; ignored {', '.join(ignored)}"
            )
    else:
        if github_action is not None and key is None and repo.config("user.signingkey") is None:
            # On GitHub the approvers are their accounts (github: ids) and the runner's key: a
            # policy to write first.
            raise UsageError(
                f"no {POLICY_FILE} here and no approver key given",
                hint=f"on GitHub, write {POLICY_FILE} first with your approvers' github: ids and "
                "the runner's key "
                "under runners (docs/github.md §1), then run init again; or pass --key for a "
                "key-signed gate",
            )
        key_line = _key_line(repo, key)
        name = approver or repo.config("user.name") or "approver"
        _check_name(name, flag="--approver" if approver else "git config user.name")
        parse_public_key(key_line, owner=name, source="--key")
        files[POLICY_FILE] = _written_policy(name=name, email=email, key_line=key_line, solo=solo)
    written = []
    for path, text in files.items():
        target = repo.path / path
        if target.exists():
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
        written.append(path)
    paths = [*files, POLICY_FILE] if POLICY_FILE not in files else list(files)
    repo.run("add", "--", *paths, worktree=True)
    repo.run(
        "commit",
        "--no-verify",
        "--quiet",
        "-m",
        "mergegate: initial policy (trust anchor)",
        "--",
        *paths,
        worktree=True,
    )
    head = repo.rev("HEAD")
    assert head is not None
    if not onto_branch:
        repo.run("branch", branch, head)
    return InitResult(head, branch, tuple(written), tuple(warnings))


# The approver name rule of policy.schema.json ($defs/name), said once more here so that init can
# refuse a name up front, naming the flag, instead of writing a policy that no command can load.
_NAME = re.compile(r"[^\W_][\w .'@-]{0,127}")


def _check_name(name: str, *, flag: str) -> None:
    if _NAME.fullmatch(name) is None:
        raise UsageError(
            f"approver name {json.dumps(name, ensure_ascii=True)} (from {flag}) is not a policy "
            "name: letters and digits of any script, then also spaces and . _ ' @ -",
            hint='pass --approver with the name to write, e.g. --approver "Bob Smith" '
            "(the name is shown in records; the key decides who approves)",
        )


def _written_policy(*, name: str, email: str | None, key_line: str, solo: bool) -> str:
    """The policy init writes, loaded back with the runner's own loader before anything is
    committed: a value YAML reads otherwise (`Bob: Smith`, `#ops`, `*admin`) must never pin a
    trust root that every later command refuses.

    Values go in as JSON strings, which YAML reads as double-quoted scalars (JSON is YAML).
    """
    text = POLICY_TEMPLATE.format(
        name_json=json.dumps(name, ensure_ascii=False),
        key_json=json.dumps(key_line),
        email=f"    email: {json.dumps(email, ensure_ascii=False)}\n" if email else "",
        self_approval="true" if solo else "false",
    )
    data = text.encode()
    try:
        policy = load_policy(lambda p: data if p == POLICY_FILE else None, commit="0" * 40)
    except ConfigError as exc:
        raise UsageError(
            f"the policy init would write does not load: {exc.message}",
            hint="check --approver and --email (or git config user.name); "
            "or write policy/policy.yaml yourself and run init again",
        ) from exc
    if [p.name for p in policy.approvers] != [name]:
        raise UsageError(
            "the policy init would write does not name the approver as given",
            hint="write policy/policy.yaml yourself and run init again",
        )
    return text


def _key_line(repo: Repo, key: str | None) -> str:
    """The approver's public key: a line, a .pub file, or the git signing key configured here."""
    if key is None:
        key = repo.config("user.signingkey")
        if key is None:
            raise UsageError(
                "no approver key given",
                hint="pass --key ~/.ssh/id_ed25519.pub (the key you sign merges with)",
            )
    if key.startswith(("ssh-", "ecdsa-", "sk-")):
        return key.strip()
    path = Path(key).expanduser()
    if path.suffix != ".pub" and path.with_name(path.name + ".pub").exists():
        path = path.with_name(path.name + ".pub")
    if not path.exists():
        raise GitError(
            f"key file {path} does not exist", hint="pass --key with an ssh public key file or line"
        )
    return path.read_text().strip().splitlines()[0]
