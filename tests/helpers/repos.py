"""A real gate: a bare remote and clones for admin, proposer, approver and runner."""

from __future__ import annotations

import io
import json
import os
import re
import subprocess
import sys
import time
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import yaml

from tests.helpers.keys import SshKey, shared_ssh_key

T = TypeVar("T")


@dataclass(frozen=True)
class Person:
    name: str
    email: str
    key: SshKey

    def approver_entry(self, **extra: Any) -> dict[str, Any]:
        return {"name": self.name, "email": self.email, "key": self.key.public_line, **extra}


@dataclass(frozen=True)
class Result:
    code: int
    out: str
    err: str

    def json(self) -> Any:
        return json.loads(self.out)


def policy_yaml(
    approvers: list[dict[str, Any]], commands: list[dict[str, Any]] | None = None, **extra: Any
) -> str:
    data: dict[str, Any] = {
        "version": 1,
        "approvers": approvers,
        "commands": commands if commands is not None else [],
        **extra,
    }
    return yaml.safe_dump(data, sort_keys=False)


ECHO_RULE = {"program": "echo", "args_prefix": []}

# Paths `fast-import` takes as they are and `git add -A` stores as they are: no part starts with a
# dot (so no .gitignore or .gitattributes that `add` would obey), no space, quote or non-ASCII byte.
_SHA = re.compile(r"[0-9a-f]{40}")
_PLAIN_PATH = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]*(/[A-Za-z0-9_][A-Za-z0-9._-]*)*")


class World:
    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        keys = tmp / "keys"
        self.alice = Person("alice", "alice@example.com", shared_ssh_key(keys, "alice"))
        self.bob = Person("bob", "bob@example.com", shared_ssh_key(keys, "bob"))
        self.carol = Person("carol", "carol@example.com", shared_ssh_key(keys, "carol"))
        self.mallory = Person("mallory", "mallory@example.com", shared_ssh_key(keys, "mallory"))
        self.remote = tmp / "remote.git"
        subprocess.run(["git", "init", "--quiet", "--bare", str(self.remote)], check=True)
        self._clones: dict[str, Path] = {}
        self._cloned_config: dict[
            str, bytes
        ] = {}  # each clone's config as `clone` left it: see fetch
        self._read: tuple[object, object, list[str]] | None = (
            None  # what records() last read: see _ref_files
        )
        self.runner_args: list[
            str
        ] = []  # added to every run_once (a gate that lists runners: the signing key)

    # -- git --------------------------------------------------------------------
    def clone(self, name: str) -> Path:
        if name not in self._clones:
            path = self.tmp / name
            subprocess.run(
                ["git", "clone", "--quiet", str(self.remote), str(path)],
                check=True,
                capture_output=True,
            )
            self._clones[name] = path
            self._cloned_config[name] = self._fetch_config(path)
        return self._clones[name]

    def fetch(self, where: str) -> None:
        """`git fetch -q origin` in the clone `where`, but none when it could change nothing.

        A fetch with the clone's default refspec changes nothing (but FETCH_HEAD) when every branch
        of the remote is already the clone's remote-tracking ref of the same name at the same sha,
        it has no others, and every tag of the remote is the clone's: then it is not made (three
        processes saved, six with objects to check; the helpers fetch before every step, and a
        fresh clone has just fetched everything). Refs are read from their files; anything else
        (a symbolic or locked ref, a config changed since the clone, a clone not made by `clone`)
        fetches. tests/test_world.py holds it to git's own fetch.
        """
        clone = self.clone(where)
        if self._cloned_config.get(where) != self._fetch_config(clone) or not self._up_to_date(
            clone
        ):
            self.git(where, "fetch", "-q", "origin")

    def _up_to_date(self, clone: Path) -> bool:
        remote, local = _ref_values(self.remote), _ref_values(clone / ".git")
        if remote is None or local is None:
            return False
        heads = {
            name[len("refs/heads/") :]: sha
            for name, sha in remote.items()
            if name.startswith("refs/heads/")
        }
        tracking = {
            name[len("refs/remotes/origin/") :]: sha
            for name, sha in local.items()
            if name.startswith("refs/remotes/origin/")
        }
        tags = all(
            local.get(name) == sha for name, sha in remote.items() if name.startswith("refs/tags/")
        )
        return bool(heads) and heads == tracking and tags

    @staticmethod
    def _fetch_config(clone: Path) -> bytes:
        """What could change a fetch's refspec, remote or behaviour: the clone's config and the
        global one."""
        parts = [clone / ".git" / "config", Path(os.environ.get("GIT_CONFIG_GLOBAL", os.devnull))]
        return b"\0".join(p.read_bytes() if p.is_file() else b"-" for p in parts)

    def git(
        self,
        where: str | Path,
        *args: str,
        who: Person | None = None,
        sign: SshKey | None = None,
        check: bool = True,
        env: dict[str, str] | None = None,
        config: list[str] | None = None,
    ) -> str:
        cwd = self.clone(where) if isinstance(where, str) else where
        person = who or self.alice
        full_env = {
            **os.environ,
            "GIT_AUTHOR_NAME": person.name,
            "GIT_AUTHOR_EMAIL": person.email,
            "GIT_COMMITTER_NAME": person.name,
            "GIT_COMMITTER_EMAIL": person.email,
            **(env or {}),
        }
        prefix = ["-c", "gpg.format=ssh", "-c", f"user.signingkey={sign.private}"] if sign else []
        prefix += config or []
        proc = subprocess.run(
            ["git", *prefix, *args], cwd=cwd, env=full_env, capture_output=True, text=True
        )
        if check and proc.returncode != 0:
            raise AssertionError(f"git {' '.join(args)} failed: {proc.stderr}")
        return proc.stdout.strip()

    def commit_tree(
        self, where: str, base: str, files: dict[str, str], *, who: Person, message: str
    ) -> str:
        """A commit on `base` adding or replacing `files`, made with `git fast-import`: no work
        tree.

        Thousands of files cost one process and no file on disk; the commit is the one `git add` +
        `git commit` would make (mode 100644, author and committer `who`, now). No ref is moved:
        push the returned sha.
        """
        stamp = f"{who.name} <{who.email}> {int(time.time())} +0000"
        parts = [
            f"commit refs/mergegate-test/scratch\nauthor {stamp}\ncommitter {stamp}\n",
            f"data {len(message.encode())}\n{message}\n",
            f"from {self.git(where, 'rev-parse', base)}\n",
        ]
        for path, text in files.items():
            data = text.encode()
            parts.append(f"M 100644 inline {path}\ndata {len(data)}\n{text}\n")
        subprocess.run(
            ["git", "fast-import", "--quiet", "--force"],
            cwd=self.clone(where),
            input="".join(parts).encode(),
            check=True,
            capture_output=True,
        )
        sha = self.git(where, "rev-parse", "refs/mergegate-test/scratch")
        self.git(where, "update-ref", "-d", "refs/mergegate-test/scratch")
        return sha

    def write(self, where: str, files: dict[str, str]) -> None:
        root = self.clone(where)
        for path, text in files.items():
            target = root / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)

    def setup(self, policy: str, *, files: dict[str, str] | None = None) -> str:
        """Initial commit with the policy on main and approved, pushed: the trust root."""
        everything = {"policy/policy.yaml": policy, **(files or {})}
        if (
            "admin" in self._clones
            or self._remote_hooks()
            or not all(map(_PLAIN_PATH.fullmatch, everything))
        ):
            return self._setup_by_push(everything)
        self.write("admin", everything)
        return self._setup_by_import(everything)

    def _setup_by_push(self, files: dict[str, str]) -> str:
        self.write("admin", files)
        self.git("admin", "add", "-A")
        self.git("admin", "commit", "-q", "-m", "initial policy")
        self.git("admin", "branch", "approved")
        self.git("admin", "push", "-q", "origin", "main", "approved")
        return self.git("admin", "rev-parse", "HEAD")

    def _setup_by_import(self, files: dict[str, str]) -> str:
        """What `_setup_by_push` leaves, in 4 git processes instead of 12 (every test pays it).

        The same commit (alice, now, "initial policy", the files as `git add` stores them) is
        written by one `fast-import` into the admin clone, with the refs the commit, branch and
        push would have moved (main, approved, origin/main, origin/approved), and by another
        into the remote (main, approved); `reset` fills admin's index. Only for a fresh admin
        clone, a remote without hooks, and `_PLAIN_PATH`s; anything else goes the way of the
        push. tests/test_world.py holds the two to the same result.
        """
        admin = self.clone("admin")
        now = int(time.time())
        stamp = (
            f"{self.alice.name} <{self.alice.email}> {now} "
            f"{time.strftime('%z', time.localtime(now))}"
        )
        body = [
            f"commit refs/heads/main\nmark :1\nauthor {stamp}\ncommitter {stamp}\ndata 15\ninitial "
            "policy\n".encode()
        ]
        for path in files:
            data = (admin / path).read_bytes()  # what `add` would read
            body.append(f"M 100644 inline {path}\ndata {len(data)}\n".encode() + data + b"\n")
        shas = []
        for where, refs in (
            (
                admin,
                ["refs/heads/approved", "refs/remotes/origin/main", "refs/remotes/origin/approved"],
            ),
            (self.remote, ["refs/heads/approved"]),
        ):
            stream = (
                b"".join(body)
                + "".join(f"reset {ref}\nfrom :1\n" for ref in refs).encode()
                + b"get-mark :1\n"
            )
            proc = subprocess.run(
                ["git", "fast-import", "--quiet"],
                cwd=where,
                input=stream,
                capture_output=True,
                check=True,
            )
            shas.append(proc.stdout.decode().strip())
        assert shas[0] == shas[1] and len(shas[0]) == 40, shas
        self.git("admin", "reset", "-q")
        return shas[0]

    def _remote_hooks(self) -> bool:
        hooks = self.remote / "hooks"
        return hooks.is_dir() and any(not p.name.endswith(".sample") for p in hooks.iterdir())

    def propose(
        self,
        branch: str,
        files: dict[str, str],
        *,
        who: Person | None = None,
        sign: SshKey | None = None,
        base: str = "origin/approved",
        message: str = "propose",
    ) -> str:
        where = "proposer"
        self.fetch(where)
        self.git(where, "checkout", "-q", "-B", branch, base)
        self.write(where, files)
        self.git(where, "add", "-A")
        args = ["commit", "-q", "-m", message] + (["-S"] if sign else [])
        self.git(where, *args, who=who, sign=sign)
        self.git(where, "push", "-q", "-f", "origin", branch)
        return self.head(where)

    def approval_commit(
        self,
        branch: str,
        trailers: list[tuple[str, str]],
        *,
        who: Person,
        sign: SshKey | None,
        config: list[str] | None = None,
        env: dict[str, str] | None = None,
    ) -> str:
        """An empty commit on the proposal carrying Mergegate-Approve trailers (signed by `sign` or
        `config`)."""
        where = "reviewer"
        self.fetch(where)
        self.git(where, "checkout", "-q", "-B", branch, f"origin/{branch}")
        body = "\n".join(f"Mergegate-Approve: {p} {b}" for p, b in trailers)
        args = ["commit", "-q", "--allow-empty", "-m", "approve", "-m", body] + (
            ["-S"] if sign or config else []
        )
        self.git(where, *args, who=who, sign=sign, config=config, env=env)
        self.git(where, "push", "-q", "origin", branch)
        return self.head(where)

    def merge(
        self,
        branch: str,
        *,
        who: Person | None = None,
        sign: SshKey | None = None,
        ff: bool = False,
    ) -> str:
        """Merge origin/BRANCH into approved (signed with `sign`) and push."""
        where = "approver"
        person = who or self.bob
        self.fetch(where)
        self.git(where, "checkout", "-q", "-B", "approved", "origin/approved")
        args = [
            "merge",
            "-q",
            "--ff-only" if ff else "--no-ff",
            "-m",
            f"merge {branch}",
            f"origin/{branch}",
        ]
        if sign is not None:
            args.insert(1, "-S")
        self.git(where, *args, who=person, sign=sign)
        self.git(where, "push", "-q", "origin", "approved")
        return self.head(where)

    def head(self, where: str) -> str:
        """`git rev-parse HEAD` in `where`, read from the files a commit or merge just wrote (HEAD
        names a branch, whose loose ref git writes on every update and prefers to packed-refs);
        anything else is asked of git."""
        git_dir = self.clone(where) / ".git"
        try:
            head = (git_dir / "HEAD").read_text().strip()
            sha = (
                (git_dir / head[5:]).read_text().strip()
                if head.startswith("ref: refs/heads/")
                else ""
            )
        except OSError:
            sha = ""
        return sha if _SHA.fullmatch(sha) else self.git(where, "rev-parse", "HEAD")

    def checkout_approved(self, where: str) -> Path:
        """`where` on a fresh local approved, to commit to it directly (as an attacker would)."""
        self.fetch(where)
        self.git(where, "checkout", "-q", "-B", "approved", "origin/approved")
        return self.clone(where)

    def veto_commit(self, path: str, blob: str, who: Person, *, where: str = "approver") -> str:
        """`who`'s veto of `path` at `blob`: an empty commit signed with their key on a fresh local
        approved in `where`, not pushed (callers push it where their test needs it); its id."""
        self.checkout_approved(where)
        self.git(
            where,
            "commit",
            "-q",
            "--allow-empty",
            "-S",
            "-m",
            "veto",
            "-m",
            f"Mergegate-Veto: {path} {blob}",
            who=who,
            sign=who.key,
        )
        return self.git(where, "rev-parse", "HEAD")

    def checkout_audit(self, where: str = "mallory") -> Path:
        """`where` on the remote's audit branch, to commit to it directly (as anyone with push
        access could)."""
        self.fetch(where)
        self.git(where, "checkout", "-q", "-B", "audit", "origin/mergegate/audit")
        return self.clone(where)

    def commit_audit(
        self,
        where: str = "mallory",
        message: str = "audit",
        *,
        sign: SshKey | None = None,
        push: bool = True,
        parents: list[str] | None = None,
    ) -> str:
        """Commit what changed in `where`'s audit checkout, carrying the tip's Mergegate-Approved
        trailer (so that only the rule a test aims at is broken), and push it without force."""
        approved = self.git(
            where, "log", "-1", "--format=%(trailers:key=Mergegate-Approved,valueonly)", "HEAD"
        ).strip()
        self.git(where, "add", "-A")
        args = [
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            message,
            "-m",
            f"Mergegate-Approved: {approved}",
        ] + (["-S"] if sign else [])
        self.git(where, *args, sign=sign)
        if push:
            self.git(where, "push", "-q", "origin", "HEAD:refs/heads/mergegate/audit")
        return self.git(where, "rev-parse", "HEAD")

    def audit_tip(self) -> str:
        self.fetch("admin")
        return self.git("admin", "rev-parse", "origin/mergegate/audit")

    def signed_merge(self, branch: str, approver: Person | None = None) -> str:
        person = approver or self.bob
        return self.merge(branch, who=person, sign=person.key)

    def blob(self, branch: str, path: str) -> str:
        self.fetch("admin")
        return self.git("admin", "rev-parse", f"origin/{branch}:{path}")

    # -- mergegate --------------------------------------------------------------
    def mg(
        self,
        *args: str,
        where: str = "runner",
        env: dict[str, str] | None = None,
        process: bool = False,
    ) -> Result:
        """`mergegate ARGS` in the clone `where`: in this process (see `mergegate_in_process`), or
        with `process` (or MERGEGATE_TEST_PROCESSES=1) as `python -m mergegate`, for what is about
        processes."""
        cwd = self.clone(where)
        if not process and not os.environ.get("MERGEGATE_TEST_PROCESSES"):
            return mergegate_in_process(list(args), cwd=cwd, env=env or {})
        proc = subprocess.run(
            [sys.executable, "-m", "mergegate", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
        )
        return Result(proc.returncode, proc.stdout, proc.stderr)

    def run_once(self, *args: str, **kw: Any) -> Result:
        return self.mg("run", "--once", "--json", *self.runner_args, *args, **kw)

    def signing_clone(self, name: str, person: Person) -> Path:
        """A clone whose git signs as `person` with their ssh key (for `mergegate approve`)."""
        clone = self.clone(name)
        for args in (
            ["user.name", person.name],
            ["user.email", person.email],
            ["gpg.format", "ssh"],
            ["user.signingkey", str(person.key.private)],
        ):
            self.git(clone, "config", *args)
        return clone

    def signing_runner(self) -> list[dict[str, str]]:
        """A runner key for this world: every run_once signs with it; the `runners` entry for the
        policy."""
        key = shared_ssh_key(self.tmp / "keys", "runner")
        self.runner_args = ["--signing-key", str(key.private)]
        return [{"name": "ci", "key": key.public_line}]

    def records(self) -> list[dict[str, Any]]:
        """Every audit record on the remote's audit branch, in order (admin fetches first)."""
        remote = self._ref_files(self.remote)
        if (
            remote is None
            or self._read is None
            or self._read[:2] != (remote, self._admin_ref_files())
        ):
            lines = self._read_records()
            # The remote's refs as they were before the fetch (a push during it makes the next
            # call read again), admin's as the fetch left them.
            self._read = (remote, self._admin_ref_files(), lines)
        return [json.loads(line) for line in self._read[2]]

    def _read_records(self) -> list[str]:
        self.fetch("admin")
        try:
            names = self.git(
                "admin", "ls-tree", "-r", "--name-only", "origin/mergegate/audit", "audit/"
            ).split()
        except (
            AssertionError
        ):  # no audit branch yet (asked only then: one process less for every read)
            if not self.git(
                "admin", "rev-parse", "--verify", "--quiet", "origin/mergegate/audit", check=False
            ):
                return []
            raise
        lines = []
        for name in sorted(n for n in names if n.endswith(".jsonl")):
            lines.extend(
                line
                for line in self.git("admin", "show", f"origin/mergegate/audit:{name}").splitlines()
                if line
            )
        return lines

    def _admin_ref_files(self) -> tuple[tuple[str, bytes], ...] | None:
        return self._ref_files(self._clones["admin"] / ".git") if "admin" in self._clones else None

    @staticmethod
    def _ref_files(git_dir: Path) -> tuple[tuple[str, bytes], ...] | None:
        """Every ref file, packed-refs and the config of a repository, read without git.

        `records` keeps what it read with the remote's before its fetch and admin's after it:
        while neither has changed, another fetch would change nothing and read the same records,
        so the records are not read again (an assertion that reads them twice costs no git
        process the second time). None, never equal, when a file changed while being read.
        """
        try:
            parts = [
                (str(p.relative_to(git_dir)), p.read_bytes())
                for p in sorted((git_dir / "refs").rglob("*"))
                if p.is_file()
            ]
            parts += [
                (name, (git_dir / name).read_bytes() if (git_dir / name).exists() else b"")
                for name in ("packed-refs", "config")
            ]
        except OSError:
            return None
        return tuple(parts)

    def events(self, event: str) -> list[dict[str, Any]]:
        return [r for r in self.records() if r.get("event") == event]

    def audit_ref(self) -> str:
        """The remote's audit branch tip ("" before there is one), read in the bare remote: no
        fetch."""
        return self.git(
            self.remote,
            "rev-parse",
            "--verify",
            "--quiet",
            "refs/heads/mergegate/audit",
            check=False,
        )

    def until_records(self, what: Callable[[], T], *, timeout: float = 30.0) -> T:
        """Wait until `what()`, a question about the records (`events`, `records`), is truthy;
        return it.

        It is asked again only when the remote's audit branch has moved, since the records cannot
        have changed otherwise: a poll costs one rev-parse, not a fetch and a read of the whole log.
        """
        deadline = time.monotonic() + timeout
        seen: str | None = None
        while True:
            tip = self.audit_ref()
            if tip != seen:
                seen = tip
                if answer := what():
                    return answer
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}")
            time.sleep(0.05)


def _ref_values(git_dir: Path) -> dict[str, str] | None:
    """Every ref of a repository and its sha, read from packed-refs and the loose ref files (which
    win), without git; None for anything `fetch` should not judge by: a symbolic ref (but a
    clone's refs/remotes/origin/HEAD), a lock (an update under way), an unreadable file."""
    refs: dict[str, str] = {}
    try:
        packed = git_dir / "packed-refs"
        for line in packed.read_text().splitlines() if packed.exists() else []:
            if not line.startswith(("#", "^")):
                sha, name = line.split(" ", 1)
                refs[name] = sha
        for path in (git_dir / "refs").rglob("*"):
            if path.is_file():
                name, text = path.relative_to(git_dir).as_posix(), path.read_text().strip()
                if _SHA.fullmatch(text):
                    refs[name] = text
                elif name != "refs/remotes/origin/HEAD" or not text.startswith("ref: "):
                    return None
    except (OSError, ValueError):
        return None
    return refs


def mergegate_in_process(argv: list[str], *, cwd: Path, env: Mapping[str, str]) -> Result:
    """What `python -m mergegate ARGV` would print and exit with, run by `cli.main` in this process.

    The same parse, command and error handler as the process; what it saves is the interpreter start
    and the imports (about 0.4 s of CPU a call, most of the suite's time). cwd, the environment and
    stdio are the process's for the call (stdin empty, stdout/stderr pipes, not terminals) and
    restored after.
    """
    from mergegate import cli

    out, err = io.BytesIO(), io.BytesIO()
    streams = (sys.stdin, sys.stdout, sys.stderr)
    saved_env, saved_cwd = dict(os.environ), os.getcwd()
    encoding, errors = sys.__stdout__.encoding if sys.__stdout__ else "utf-8", "surrogateescape"
    stdout = io.TextIOWrapper(out, encoding=encoding, errors=errors, write_through=True)
    stderr = io.TextIOWrapper(err, encoding=encoding, errors="backslashreplace", write_through=True)
    try:
        os.environ.update(env)
        os.chdir(cwd)
        sys.stdin, sys.stdout, sys.stderr = io.StringIO(""), stdout, stderr
        try:
            code = cli.main(argv)
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except BaseException:  # what the interpreter does with an uncaught exception (--debug)
            traceback.print_exc(file=stderr)
            code = 1
    finally:
        sys.stdin, sys.stdout, sys.stderr = streams
        os.chdir(saved_cwd)
        os.environ.clear()
        os.environ.update(saved_env)
    return Result(
        code, out.getvalue().decode(encoding, "replace"), err.getvalue().decode(encoding, "replace")
    )


def job_yaml(job_id: str, command: list[str], **extra: Any) -> str:
    return yaml.safe_dump({"id": job_id, "command": command, **extra}, sort_keys=False)
