"""Running git: the argv, the environment, the settings pinned, and what a failure says.

A Repo's git commands run through `GitProcesses.run`, its object readers with `batch_env`:
git config and environment variables that would change what git answers are pinned or
dropped, and credentials reach only the commands that talk to a remote.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path

from mergegate.errors import GitError

_LOCKED = re.compile(r"Unable to create '([^']+\.lock)': File exists")
# git's words for a write that failed because something filled up (issue 22, item 9), and a file
# it may name on that line.
_FULL = re.compile(
    r"^.*(No space left on device|Disk quota exceeded|File too large|Out of diskspace).*$",
    re.MULTILINE,
)
_QUOTED = re.compile(r"'([^']+)'")
_DETAIL_BYTES = 4096
# The runner's fetches and pushes create no lock they do not need: no commit-graph,
# no FETCH_HEAD, no auto gc or maintenance (each a lock a killed runner could leave).
QUIET_WRITES = (
    "-c",
    "fetch.writeCommitGraph=false",
    "-c",
    "gc.auto=0",
    "-c",
    "maintenance.auto=false",
    "-c",
    "fetch.recurseSubmodules=false",
)


def _filled(what: str, full: re.Match[str], where: Path | None) -> GitError:
    """A write of git's that failed because something filled up: which command, what filled up,
    the file if git named one, and how to make room (on the remote's side when the remote said
    it)."""
    line = full[0].strip()
    quoted = _QUOTED.search(line)
    if line.startswith("remote:"):
        return GitError(
            f"{what} failed: the remote has no room ({full[1]}): {line}",
            hint="free space on the server that holds the remote; the runner keeps what it has "
            "not pushed and pushes it on the next pass",
        )
    objects = any(word in line for word in ("object", "pack", "sha1 file"))
    if where is None:
        folder = "the repository's .git folder"
    else:
        folder = str(where / "objects") if objects else str(where)
    said = line.removeprefix("fatal: ").removeprefix("error: ")
    return GitError(
        f"{what} failed: {said}",
        file=quoted[1] if quoted else None,
        hint=f"make room where git writes ({folder}): free space (df -h), raise the disk "
        "quota, or raise the file size limit (ulimit -f); then run again, what was recorded "
        "is kept",
    )


def failure(
    what: str, stderr: bytes | str, fallback: object = "", *, where: Path | None = None
) -> GitError:
    """A GitError that says why: a write that filled something up, or a lock in the way, named
    with a hint; else every fatal/error line. (`where`: the repository's git folder.)

    git's last line alone is often advice ("and the repository exists.", "remove the file manually
    to continue."); the whole text is kept as `detail`.
    """
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    locked = _LOCKED.search(text)
    full = _FULL.search(text)
    if full:
        error = _filled(what, full, where)
    elif locked:
        lock = locked[1]
        error = GitError(
            f"{what} failed: a lock is in the way",
            file=lock,
            hint="another git process may be using the repository; if none is (one was killed), "
            f"remove it: rm '{lock}'",
        )
    else:
        said = [
            line for line in lines if line.startswith(("fatal:", "error:", "remote:", "!", "To "))
        ]
        said = [line for line in said if not line.startswith("To ")] or said
        summary = "; ".join(dict.fromkeys(said)) or (lines[-1] if lines else str(fallback))
        error = GitError(f"{what} failed: {summary}")
    error.detail = text[-_DETAIL_BYTES:] or None
    return error


def _verb(args: tuple[str, ...]) -> str:
    """The git command in `args`, past global options such as `-c k=v` and `--work-tree DIR`."""
    i = 0
    while i < len(args) and args[i].startswith("-"):
        i += 2 if args[i] in ("-c", "-C", "--work-tree", "--git-dir") else 1
    return args[i] if i < len(args) else args[0]


# What git answers the runner and verify must not depend on the user's git config or environment
# (invariant 1): the settings that change what a log, grep or pathspec says are pinned to git's
# defaults, and the pathspec variables are dropped.
_PINNED = (
    "-c",
    "log.showRoot=true",
    "-c",
    "log.follow=false",
    "-c",
    "diff.renames=true",
    "-c",
    "grep.patternType=basic",
    "-c",
    "grep.extendedRegexp=false",
    "-c",
    "core.quotePath=true",
    # (log.showSignature=true, a common setting, puts "No signature" or "Good ... signature" on
    # stdout before each signed commit of `git log --format=%H`: words read as commit ids.)
    "-c",
    "log.showSignature=false",
)
_PATHSPEC_ENV = (
    "GIT_LITERAL_PATHSPECS",
    "GIT_GLOB_PATHSPECS",
    "GIT_NOGLOB_PATHSPECS",
    "GIT_ICASE_PATHSPECS",
)

# git verbs that talk to a remote: only they get the push and API credentials of the environment.
_NETWORK_VERBS = frozenset({"fetch", "push", "ls-remote", "pull", "clone"})
_TOKENS = ("GITHUB_TOKEN", "GH_TOKEN")


def _without_credentials(env: dict[str, str]) -> dict[str, str]:
    """`env` less the tokens and the `http.*.extraheader` (auth) entries of GIT_CONFIG_*.

    Every other git process (cat-file, grep, commit-tree, ...) runs while a job may run:
    a job without a sandbox, as the same user, could read a process's environment in /proc.
    So credentials reach only the processes that need them; other GIT_CONFIG_* entries stay.
    """
    out = {
        k: v
        for k, v in env.items()
        if k not in _TOKENS and not k.startswith(("GIT_CONFIG_KEY_", "GIT_CONFIG_VALUE_"))
    }
    out.pop("GIT_CONFIG_COUNT", None)
    try:
        count = int(env.get("GIT_CONFIG_COUNT", "0"))
    except ValueError:
        count = 0
    kept = 0
    for i in range(count):
        key, value = env.get(f"GIT_CONFIG_KEY_{i}"), env.get(f"GIT_CONFIG_VALUE_{i}")
        if (
            key is None
            or value is None
            or re.fullmatch(r"http\..*\.?extraheader", key, flags=re.IGNORECASE)
        ):
            continue
        out[f"GIT_CONFIG_KEY_{kept}"], out[f"GIT_CONFIG_VALUE_{kept}"] = key, value
        kept += 1
    if kept:
        out["GIT_CONFIG_COUNT"] = str(kept)
    return out


def batch_env() -> dict[str, str]:
    """The environment of the wing's `cat-file` readers: no credentials, no prompt, no work tree."""
    env = _without_credentials({**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
    env.pop("GIT_WORK_TREE", None)
    return env


class GitProcesses:
    """The repository's paths, and git run on them (the base of every part of `Repo`)."""

    def __init__(self, path: Path, git_dir: Path, common_dir: Path) -> None:
        # common_dir differs from git_dir in a linked worktree
        self.path, self.git_dir, self.common_dir = path, git_dir, common_dir
        self.warnings: list[
            str
        ] = []  # things a command should tell the user, though they did not stop it

    def run(
        self,
        *args: str,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        worktree: bool = False,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run git on the repository itself, not its working tree (unless `worktree`).

        Without a working tree, a `.gitattributes` someone checked out there (say, `audit/** -diff`,
        which turns `git grep` matches into "Binary file matches") cannot change what git tells the
        runner.
        """
        full_env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", **(env or {})}
        if _verb(args) not in _NETWORK_VERBS:
            full_env = _without_credentials(full_env)
        for name in _PATHSPEC_ENV:
            full_env.pop(name, None)
        where = ["-C", str(self.path)] if worktree else ["--git-dir", str(self.git_dir)]
        if not worktree:
            full_env.pop("GIT_WORK_TREE", None)
        proc = subprocess.run(
            ["git", *_PINNED, *where, *args],
            input=input,
            capture_output=True,
            env=full_env,
            check=False,
        )
        if check and proc.returncode != 0:
            text = proc.stderr.decode("utf-8", "replace")
            known = self._explain(text)
            if known is not None:
                raise GitError(known[0], hint=known[1])
            raise failure(
                f"git {_verb(args)}", text, f"exit {proc.returncode}", where=self.common_dir
            )
        return proc

    def _explain(self, stderr: str) -> tuple[str, str] | None:
        """git's common signing failures as one line a person can act on, and a hint that leads
        somewhere."""
        missing = re.search(r"Couldn't load public key (.+?): No such file or directory", stderr)
        if missing and not os.path.basename(missing.group(1)).startswith(".git_signing_key_tmp"):
            return (
                f"git could not sign: the signing key file {missing.group(1)} does not exist",
                "point git at your key: git config user.signingkey ~/.ssh/id_ed25519.pub (ls "
                "~/.ssh/*.pub lists yours)",
            )
        if missing:  # a key line git could not use
            return (
                "git could not sign: user.signingkey holds a key line ssh-keygen cannot read",
                "git config user.signingkey ~/.ssh/id_ed25519.pub (a key file path is simplest)",
            )
        if "user.signingkey or gpg.ssh.defaultKeyCommand needs to be configured" in stderr:
            return (
                "git could not sign: gpg.format is ssh but no signing key is set",
                "git config user.signingkey ~/.ssh/id_ed25519.pub",
            )
        if "gpg failed to sign the data" in stderr:
            key = self.config("user.signingkey") or ""
            if self.config("gpg.format") is None and (
                key.startswith(("ssh-", "/", "~", "key::")) or key.endswith(".pub")
            ):
                return (
                    f"git could not sign: user.signingkey is an ssh key ({key[:40]}) but "
                    "gpg.format is unset, so git ran gpg",
                    "git config gpg.format ssh",
                )
            return (
                "git could not sign: gpg failed to sign the data",
                "check the key: gpg --list-secret-keys; for ssh signing: git config gpg.format ssh "
                "&& git config user.signingkey ~/.ssh/id_ed25519.pub",
            )
        return None

    def out(self, *args: str) -> str:
        return self.run(*args).stdout.decode("utf-8", "replace").strip()

    def config(self, key: str) -> str | None:
        proc = self.run("config", "--get", key, check=False)
        return proc.stdout.decode().strip() or None
