"""The only module that talks to git.

Reads go through one persistent `git cat-file --batch-command` process
(`_Objects`) so that walking thousands of commits does not spawn thousands of
processes. Writes use plumbing with a temporary index, so the
runner never touches a person's working tree, index or checked-out branch.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import stat
import subprocess
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    import tempfile
# (hashlib, tempfile and zlib are imported where objects are written: an idle `run --once`
# asks `ls-remote` through this module and needs none of them, nor the modules they import.)

from mergegate.errors import GitError

ZERO = "0" * 40
_BATCH = 256  # pathspecs per git call: a merge may bring more files than one command line holds
_LOCKED = re.compile(r"Unable to create '([^']+\.lock)': File exists")
_DETAIL_BYTES = 4096
_COMMIT_CACHE = 4096
_FLAT_CACHE = 64  # directory listings (an audit/ listing may name thousands of files)
_ASK_GIT = object()  # file_blob: an answer only git gives exactly
_ABSENT = object()  # _subtree: no such folder
_TEMPLATE_FILES = 64  # an export of at most this many files copies one checkout-index's output
_MODES = (b"40000", b"100644", b"100755", b"120000", b"160000")  # the modes git writes
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
# How receive-pack says another push updated (or created) the ref first.
_IN_THE_WAY = re.compile(r"'(refs/[^']+)' exists; cannot create")
_LOST_RACE = re.compile(
    r"failed to update ref|cannot lock ref|reference already exists|but expected|is at [0-9a-f]+ "
    r"but"
)


def path_text(raw: bytes) -> str:
    """A path as text: UTF-8, or NUL + hex for a name that is not UTF-8.

    No git path contains NUL, so the two forms never collide, and two
    different raw names never share a text (as U+FFFD replacement would).
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "\0" + raw.hex()


def path_bytes(path: str) -> bytes:
    return bytes.fromhex(path[1:]) if path.startswith("\0") else path.encode("utf-8")


def path_arg(path: str) -> str:
    """A path as git's command line takes it (raw bytes survive as surrogates)."""
    return os.fsdecode(bytes.fromhex(path[1:])) if path.startswith("\0") else path


def literal(path: str) -> str:
    return ":(literal)" + path_arg(path)


def failure(what: str, stderr: bytes | str, fallback: object = "") -> GitError:
    """A GitError that says why: a lock in the way named with a hint, else every fatal/error line.

    git's last line alone is often advice ("and the repository exists.",
    "remove the file manually to continue."); the whole text is kept as `detail`.
    """
    text = stderr.decode("utf-8", "replace") if isinstance(stderr, bytes) else stderr
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    locked = _LOCKED.search(text)
    if locked:
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
    # stdout
    # before each signed commit of `git log --format=%H`: words read as commit ids.)
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


def _batches(items: list[str]) -> list[list[str]]:
    return [items[i : i + _BATCH] for i in range(0, len(items), _BATCH)] or [[]]


@dataclass(frozen=True)
class Commit:
    sha: str
    parents: tuple[str, ...]
    tree: str
    author_name: str
    author_email: str
    committer_name: str
    committer_email: str
    message: str
    raw: bytes  # the whole commit object, for signature checks
    malformed: str = ""  # why git could read this commit's header differently ("" when well-formed)

    @property
    def is_merge(self) -> bool:
        return len(self.parents) >= 2

    def trailers(self, key: str) -> tuple[str, ...]:
        """Values of `Key: value` lines in the message's last paragraph."""
        last = self.message.replace("\r\n", "\n").strip().split("\n\n")[-1]
        prefix = key.lower() + ":"
        return tuple(
            line.split(":", 1)[1].strip()
            for line in last.splitlines()
            if line.lower().startswith(prefix)
        )


@dataclass(frozen=True)
class Change:
    status: str  # A, M, D or T
    path: str
    old_blob: str
    new_blob: str
    old_mode: str = (
        ""  # "100644", "100755", "120000" (symlink), "160000" (gitlink); "000000" when absent
    )
    new_mode: str = ""


@dataclass(frozen=True)
class Signing:
    """How the runner signs its commits: an ssh private key path or an OpenPGP key id."""

    key: str

    def args(self) -> list[str]:
        if os.path.exists(self.key):
            # Absolute: git reads a user.signingkey that starts with `ssh-` or `key::` as a literal
            # key, not a
            # file, so a key file named `ssh-runner` passed the runner's check (`_can_sign`) and
            # then did not sign.
            return ["-c", "gpg.format=ssh", "-c", f"user.signingkey={os.path.abspath(self.key)}"]
        return ["-c", "gpg.format=openpgp", "-c", f"user.signingkey={self.key}"]


class _Objects:
    """One `git cat-file --batch-command` process: object headers and contents, one round trip each.

    Started on first use and ended by `close` (or when the Repo is collected);
    the process also ends by itself when this one dies (its stdin closes). A
    lock keeps the request/response pairs of threads sharing a Repo apart.
    """

    def __init__(self, git_dir: Path) -> None:
        self.git_dir = git_dir
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def _start(self) -> tuple[IO[bytes], IO[bytes]]:
        if self._proc is None or self._proc.poll() is not None:
            env = _without_credentials({**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
            env.pop("GIT_WORK_TREE", None)
            self._proc = subprocess.Popen(
                ["git", "--git-dir", str(self.git_dir), "cat-file", "--batch-command"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
                env=env,
            )
        assert self._proc.stdin is not None and self._proc.stdout is not None
        return self._proc.stdin, self._proc.stdout

    def _ask(self, command: str, sha: str, *, body: bool) -> tuple[str, bytes | int] | None:
        """(type, contents or size) of object `sha`, or None if the repository has no such
        object."""
        if not re.fullmatch(r"[0-9a-fA-F]{40}|[0-9a-fA-F]{64}", sha):
            return None
        sha = sha.lower()
        with self._lock:
            stdin, stdout = self._start()
            try:
                stdin.write(f"{command} {sha}\n".encode())
                stdin.flush()
                header = stdout.readline().split()
                if len(header) != 3:
                    if header[-1:] == [b"missing"]:
                        return None
                    raise GitError(f"git cat-file stopped answering for {self.git_dir}")
                size = int(header[2])
                if header[0].decode().lower() != sha:
                    # The batch process resolves any name: in a SHA-1 clone 64 hex digits are no id
                    # but may be a tag's name. Only the object of that id is the answer.
                    if body:
                        stdout.read(size + 1)
                    return None
                if not body:
                    return header[1].decode(), size
                data = stdout.read(size + 1)
            except (OSError, ValueError):
                self.close()
                raise GitError(f"git cat-file stopped answering for {self.git_dir}") from None
            if len(data) != size + 1:
                self.close()
                raise GitError(f"git cat-file stopped answering for {self.git_dir}")
            return header[1].decode(), data[:size]

    def read(self, sha: str) -> tuple[str, bytes] | None:
        found = self._ask("contents", sha, body=True)
        return None if found is None else (found[0], found[1])  # type: ignore[return-value]

    def size(self, sha: str) -> int | None:
        found = self._ask("info", sha, body=False)
        return None if found is None else int(found[1])

    def kind(self, sha: str) -> str | None:
        found = self._ask("info", sha, body=False)
        return None if found is None else found[0]

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            _end(proc)

    def __del__(self) -> None:
        try:
            self.close()
        except Exception:  # at interpreter exit anything may already be gone
            pass


def _copy_checkout(source: Path, dest: Path, prefix: bytes, executable: frozenset[bytes]) -> None:
    """Write into `dest` what checkout-index wrote into `source`, as it writes it: folders with
    mode 0777 and files with 0666, or 0777 when the tree says 100755 (`executable`: paths from
    the root), both less the umask; symlinks as symlinks; contents byte for byte, a chunk at a
    time."""
    with os.scandir(source) as entries:
        for entry in entries:
            target = os.path.join(dest, entry.name)
            path = prefix + os.fsencode(entry.name)
            if entry.is_symlink():
                os.symlink(os.readlink(entry.path), target)
            elif entry.is_dir(follow_symlinks=False):
                os.mkdir(target)
                _copy_checkout(Path(entry.path), Path(target), path + b"/", executable)
            else:
                _copy_file(entry.path, target, 0o777 if path in executable else 0o666)


def _copy_file(source: str, target: str, mode: int) -> None:
    """`source`'s bytes into a new file `target` (mode less the umask), a chunk at a time, with
    plain
    descriptors: once per file of every job's export, where file objects cost twice the system
    calls."""
    src = os.open(source, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        out = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)
        try:
            while chunk := os.read(src, 1 << 20):
                view = memoryview(chunk)
                while view:
                    view = view[os.write(out, view) :]
        finally:
            os.close(out)
    finally:
        os.close(src)


class BlobFeed:
    """A `git cat-file --batch` read by several forked processes in turn (audit_chain's workers).

    Whoever holds the turn (the workers pass a token) asks for a blob (`request`) and reads
    the next answer (`read`) straight from the pipes' file descriptors, never a byte past
    it, so the next reader finds the next answer. In a pack, a log file is usually stored as
    a delta of the one before: one git for all of them inflates each once, where one git
    per worker would rebuild the others' files too (about 0.2 s of CPU at 100 files).
    `read` raises the GitError `Repo.blobs` raises, in the same words.
    """

    def __init__(self, repo: Repo, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdin is not None and proc.stdout is not None
        self.path, self.git_dir, self.proc = repo.path, repo.git_dir, proc
        self.requests, self.answers = proc.stdin.fileno(), proc.stdout.fileno()

    def request(self, sha: str) -> None:
        """Ask for blob `sha` (its answer comes after those asked for before)."""
        try:
            os.write(self.requests, f"{sha}\n".encode())
        except OSError:
            raise GitError(f"git cat-file stopped answering for {self.git_dir}") from None

    def read(self, sha: str) -> bytes:
        """The next answer, which must be blob `sha`'s contents (as `Repo.blobs` judges it)."""
        try:
            line = self._exactly(
                len(sha) + len(" blob ")
            )  # as much as any answer's first line holds, never more
            while not line.endswith(b"\n"):
                line += self._exactly(1)
            header = line.split()
            if len(header) != 3 or header[1] != b"blob":
                raise GitError(
                    f"object {sha[:12]} is not a blob in {self.path}"
                    if len(header) == 3
                    else f"object {sha[:12]} not found in {self.path}"
                )
            size = int(header[2])
            data = self._exactly(size)
            self._exactly(1)  # its newline
            return data
        except (OSError, ValueError):
            raise GitError(f"git cat-file stopped answering for {self.git_dir}") from None

    def _exactly(self, size: int) -> bytes:
        data = os.read(
            self.answers, size
        )  # one read, usually all of it (the pipe holds a log file)
        if len(data) == size:
            return data
        chunks = [data]
        while data and (size := size - len(data)):
            data = os.read(self.answers, size)
            chunks.append(data)
        if not data:
            raise OSError("end of git's answers")
        return b"".join(chunks)

    def close_ends(self) -> None:
        """Close this process's ends of the pipes (the readers hold theirs; git ends when the last
        is closed)."""
        for stream in (self.proc.stdin, self.proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()

    def end(self) -> None:
        self.close_ends()
        with contextlib.suppress(OSError):
            self.proc.kill()
        self.proc.wait()


def _end(proc: subprocess.Popen[bytes]) -> None:
    """End a batch process: close its pipes (it exits on end of input), killed if it does not within
    5 s."""
    for stream in (proc.stdin, proc.stdout):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def _locate(path: Path) -> tuple[Path, Path, Path]:
    """(working tree or git dir, git dir, common dir) of the repository at or above `path`: one
    rev-parse."""
    proc = subprocess.run(
        [
            "git",
            "-C",
            str(path),
            "rev-parse",
            "--path-format=absolute",
            "--git-dir",
            "--git-common-dir",
            "--is-inside-work-tree",
            "--show-toplevel",
        ],
        capture_output=True,
        env={**os.environ, "LC_ALL": "C"},
        check=False,
    )
    lines = proc.stdout.decode("utf-8", "surrogateescape").splitlines()
    # Outside a work tree (a bare repository, or inside .git) rev-parse stops at --show-toplevel.
    if len(lines) < 3 or (proc.returncode != 0 and (len(lines) != 3 or lines[2] != "false")):
        raise GitError(
            f"{path} is not a git repository",
            hint="run inside a clone of the gate repository, or point --repo at one",
        )
    git_dir, common_dir = Path(lines[0]), Path(lines[1])
    if len(lines) >= 4 and lines[2] == "true":
        return Path(lines[3]), git_dir, common_dir
    if git_dir.name == ".git":  # inside a clone's .git: the clone is the repository
        return git_dir.parent, git_dir, common_dir
    return git_dir, git_dir, common_dir


class Repo:
    def __init__(self, path: Path) -> None:
        self.path, self.git_dir, self.common_dir = _locate(
            path
        )  # common_dir differs from git_dir in a linked worktree
        self.warnings: list[
            str
        ] = []  # things a command should tell the user, though they did not stop it
        self._objects = _Objects(self.git_dir)
        # A plain dict, not lru_cache on a bound method: that would be a cycle keeping the Repo
        # (and its cat-file process) alive until the cyclic collector runs.
        self._commits: dict[str, Commit] = {}
        self._diffs: dict[tuple[str, str], list[Change]] = {}  # read ahead by prefetch
        self._parents: dict[str, tuple[str, ...]] = {}
        self._ancestors: set[tuple[str, str]] = (
            set()
        )  # is_ancestor's yes answers between full commit ids
        # export(): one private index per (commit, skip), built once and read by every export of it.
        self._indexes: dict[
            tuple[str, Callable[[str], bool]], tuple[Path, frozenset[bytes] | None]
        ] = {}
        self._exports_made = 0  # names each index apart, also after drop_exports
        self._index_dir: tempfile.TemporaryDirectory[str] | None = None
        # Told of that folder as soon as it exists (the runner tells its watchdog, which removes it
        # if the runner dies).
        self.on_export_dir: Callable[[Path], None] | None = None
        self._index_lock = threading.Lock()
        self._loaded: dict[str, tuple[str, bytes]] = {}  # objects read ahead by preload
        self._trees: dict[
            str, dict[bytes, tuple[bytes, str]] | None
        ] = {}  # file_blob's tree listings
        self._flat: dict[
            tuple[str, str], tuple[tuple[str, str, str], ...]
        ] = {}  # ls_tree_flat's, of full ids
        self._plain_refs: bool | None = (
            None  # whether _ref_from_files may read refs from their files
        )

    def close(self) -> None:
        """End the object-reading process (it is restarted if the Repo is used again); drop export
        indexes."""
        self._objects.close()
        self.drop_exports()

    # -- running git ------------------------------------------------------
    def run(
        self,
        *args: str,
        input: bytes | None = None,
        env: Mapping[str, str] | None = None,
        check: bool = True,
        worktree: bool = False,
    ) -> subprocess.CompletedProcess[bytes]:
        """Run git on the repository itself, not its working tree (unless `worktree`).

        Without a working tree, a `.gitattributes` someone checked out there (say,
        `audit/** -diff`, which turns `git grep` matches into "Binary file
        matches") cannot change what git tells the runner.
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
            raise failure(f"git {_verb(args)}", text, f"exit {proc.returncode}")
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

    # -- refs -----------------------------------------------------------------
    def rev(self, ref: str) -> str | None:
        """The commit `ref` names. A full ref name (`refs/...`) is looked up exactly.

        `rev-parse refs/heads/x` is not exact: when that branch is absent, git's
        DWIM rules try `refs/tags/refs/heads/x` next, a tag anyone can push. So a
        full name is first resolved with for-each-ref, which matches names only.
        """
        if ref.startswith("refs/"):
            found = self._ref_from_files(ref)
            if found is None:
                return None
            if isinstance(found, str):
                # what for-each-ref would have said; its type is the batch process's to say
                ref = found
            else:
                listed = self.run(
                    "for-each-ref",
                    "--format=%(refname)%00%(objectname)%00%(objecttype)",
                    "--",
                    ref,
                    check=False,
                )
                exact = [
                    line.split("\0")[1:]
                    for line in listed.stdout.decode("utf-8", "replace").splitlines()
                    if line.split("\0", 1)[0] == ref
                ]
                if not exact:
                    return None
                ref, kind = exact[0][0], exact[0][1] if len(exact[0]) > 1 else ""
                if kind == "commit":
                    # a branch names a commit: nothing to peel (a rev-parse a ref read, on every
                    # push)
                    return ref
        if _FULL_ID.fullmatch(ref) and self._objects.kind(ref) == "commit":
            return (
                ref  # the batch process answers: no rev-parse for an id this clone has as a commit
            )
        proc = self.run(
            "rev-parse", "--verify", "--quiet", "--end-of-options", ref + "^{commit}", check=False
        )
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    def revs(self, refs: Sequence[str]) -> dict[str, str | None]:
        """`rev(ref)` of each full ref name in `refs`, read with one for-each-ref (a pass reads four
        at
        its start). Exact names only, as `rev`; a ref naming anything but a commit is peeled by
        `rev`."""
        assert all(ref.startswith("refs/") for ref in refs)
        if all(self._ref_from_files(ref) is not _ASK_GIT for ref in refs):
            return {
                ref: self.rev(ref) for ref in refs
            }  # each read from its files: no process at all
        listed = self.run(
            "for-each-ref",
            "--format=%(refname)%00%(objectname)%00%(objecttype)",
            "--",
            *refs,
            check=False,
        )
        found: dict[str, list[str]] = {}
        for line in listed.stdout.decode("utf-8", "replace").splitlines():
            name, _, rest = line.partition("\0")
            if name in refs and name not in found:
                found[name] = rest.split("\0")
        answers: dict[str, str | None] = {}
        for ref in refs:
            if ref not in found:
                answers[ref] = None
            elif len(found[ref]) > 1 and found[ref][1] == "commit":
                answers[ref] = found[ref][0]
            else:
                answers[ref] = self.rev(ref)
        return answers

    def _ref_from_files(self, ref: str) -> str | object | None:
        """The object id ref `ref` holds, read as git's files backend reads it (the loose file, else
        its
        line in packed-refs), None if it has none; _ASK_GIT wherever the files alone might not say
        what
        for-each-ref says: a name with anything but plain parts, a linked worktree (per-worktree
        refs), a
        reftable or case-insensitive repository, a symbolic, broken or unreadable ref, a packed-refs
        file
        not as git writes it. A runner pass asked for-each-ref this about 6 times (a process each,
        5,000
        in the test suite); tests/git/test_rev_equiv.py holds the two to the same answers."""
        if (
            not _PLAIN_REF.fullmatch(ref)
            or ".." in ref
            or ref.endswith(".")
            or ".lock/" in ref + "/"
        ):
            return _ASK_GIT
        if self._plain_refs is None:
            common = self.common_dir
            self._plain_refs = (
                self.git_dir == common
                and not (common / "reftable").exists()
                and (common / "HEAD").exists()
                and not (common / "hEAD").exists()
            )
        if not self._plain_refs:
            return _ASK_GIT
        try:
            if stat.S_ISREG(os.lstat(self.common_dir / ref).st_mode):
                data = (self.common_dir / ref).read_bytes()
                return data[:-1].decode() if _HEX_LINE.fullmatch(data) else _ASK_GIT
            return _ASK_GIT  # a folder, a symbolic link: git's rules, not these
        except FileNotFoundError:
            pass
        except (
            OSError
        ):  # not a folder on the way (refs/heads/a is a file, refs/heads/a/b asked), unreadable
            return _ASK_GIT
        try:
            packed = (self.common_dir / "packed-refs").read_bytes()
        except FileNotFoundError:
            return None
        except OSError:
            return _ASK_GIT
        return self._packed_ref(packed, ref.encode())

    @staticmethod
    def _packed_ref(packed: bytes, name: bytes) -> str | object | None:
        """`name`'s id in a packed-refs file as git writes it (its header, then `<id> <name>` lines
        in
        strictly increasing order, each followed by at most one `^<id>` peeled line); _ASK_GIT for
        anything
        else (git trusts the order it wrote: an unsorted file can hide other refs from it) or a big
        one."""
        if len(packed) > _PACKED_REFS_BYTES or (packed and not packed.endswith(b"\n")):
            return _ASK_GIT
        lines = packed.split(b"\n")[:-1]
        found, last, peelable = None, b"", False
        for line in lines[1:] if lines and lines[0].startswith(b"# pack-refs with:") else lines:
            if line.startswith(b"^"):
                if not peelable or not _HEX.fullmatch(line, 1):
                    return _ASK_GIT
                peelable = False
                continue
            sha, space, ref = line.partition(b" ")
            if not space or not _HEX.fullmatch(sha) or not ref or b" " in ref or ref <= last:
                return _ASK_GIT
            last, peelable = ref, True
            if ref == name:
                found = sha.decode()
        return found

    def has_remote(self, name: str) -> bool:
        return name in self.out("remote").split()

    def ls_remote(self, remote: str, refs: list[str]) -> dict[str, str]:
        """ref -> sha on the remote for each of `refs` it has: one round trip, no local write."""
        proc = self.run("ls-remote", "--refs", remote, *refs, check=False)
        if proc.returncode != 0:
            raise failure(f"git ls-remote {remote}", proc.stderr, proc.returncode)
        found = {}
        for line in proc.stdout.decode("utf-8", "replace").splitlines():
            sha, _, ref = line.partition("\t")
            if ref in refs:
                found[ref] = sha
        return found

    def fetch(self, remote: str, branch: str, *, also: tuple[str, ...] = ()) -> None:
        """Fetch `branch` into refs/remotes/<remote>/<branch>, and the branches in `also` if they
        exist.

        One fetch for all of them, so what is read is one moment of the remote.
        Each of `also` is fetched with a glob refspec (a branch that does not exist
        yet is no error) and pruned (a branch deleted on the remote disappears here
        too, so the seen ref notices that it is gone).
        """
        specs = [f"+refs/heads/{branch}:refs/remotes/{remote}/{branch}"]
        specs += [f"+refs/heads/{name}*:refs/remotes/{remote}/{name}*" for name in also]
        # No commit-graph write here (it would take commit-graph-chain.lock, which a
        # killed fetch leaves behind); operators who want one run `git maintenance`.
        proc = self.run(
            *QUIET_WRITES,
            "fetch",
            "--quiet",
            "--no-tags",
            "--no-write-fetch-head",
            *(["--prune"] if also else []),
            remote,
            *specs,
            check=False,
        )
        if proc.returncode != 0:
            text = proc.stderr.decode("utf-8", "replace")
            if "couldn't find remote ref" in text:
                raise GitError(
                    f"branch {branch} does not exist on {remote}",
                    hint=f"`git ls-remote --heads {remote}` lists the branches it has",
                )
            error = failure(f"git fetch {remote}", text, proc.returncode)
            if error.hint is None:
                error.hint = (
                    f"check that {remote} is reachable (`git ls-remote {remote}`); "
                    "--no-fetch reads what this clone already has, with no network"
                )
            raise error

    def fetch_refspec(self, remote: str, refspec: str) -> bool:
        """Fetch one refspec (a pull request's head); False when the remote has no such ref."""
        return (
            self.run("fetch", "--quiet", "--no-tags", remote, refspec, check=False).returncode == 0
        )

    def has_object(self, sha: str) -> bool:
        return (
            len(sha) == 40
            and self.run("cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode == 0
        )

    def update_ref(self, ref: str, new: str, old: str | None) -> bool:
        """Move `ref` to `new` only if it still points at `old` (compare and swap).

        False when it no longer points at `old`; any other failure (a lock in the
        way, permissions, a full disk) raises, naming the file.
        """
        proc = self.run("update-ref", ref, new, old or ZERO, check=False)
        if proc.returncode == 0:
            return True
        text = proc.stderr.decode("utf-8", "replace")
        if _LOCKED.search(text) or not (
            "but expected" in text
            or "reference already exists" in text
            or "unable to resolve" in text
        ):
            raise failure(f"updating {ref}", text, proc.returncode)
        return False

    def set_ref(self, ref: str, new: str) -> None:
        """Point `ref` at `new` whatever it held (for this clone's own bookkeeping refs only)."""
        proc = self.run("update-ref", ref, new, check=False)
        if proc.returncode != 0:
            raise failure(f"updating {ref}", proc.stderr, proc.returncode)

    def delete_ref(self, ref: str) -> None:
        self.run("update-ref", "-d", ref, check=False)

    def discard(self, sha: str) -> int:
        """Delete the loose objects that only `sha` (a commit no push landed) holds: those reachable
        from it and from no ref, reflog or index (move or delete the refs to it first).

        A refused push must not leave a full copy of the log file behind each time. Objects
        anything else can reach (its parent's, an equal evidence file) are kept, and so is
        everything once `sha` is reachable from any other ref (the push landed after all
        and was fetched). Packed objects are left to `git gc`. Returns how many were removed.
        """
        proc = self.run(
            "rev-list",
            "--objects",
            sha,
            "--not",
            "--all",
            "--reflog",
            "--indexed-objects",
            check=False,
        )
        if proc.returncode != 0:
            return 0
        objects = self.common_dir / "objects"
        removed = 0
        for line in proc.stdout.decode().splitlines():
            name = line.split(" ", 1)[0]
            if len(name) == 40:
                try:
                    (objects / name[:2] / name[2:]).unlink()
                    removed += 1
                except OSError:
                    continue
        return removed

    def current_branch(self) -> str | None:
        proc = self.run("symbolic-ref", "--quiet", "--short", "HEAD", check=False)
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    def push(self, remote: str, sha: str, branch: str) -> bool:
        """Push without force; False when the remote moved (fetch, rebase, retry).

        A branch that does not exist on the remote yet is created; if another
        process created it first, a new root is not a fast-forward of theirs and
        is refused like any other stale push (create-only, without force).
        """
        proc = self.run(
            *QUIET_WRITES, "push", "--porcelain", remote, f"{sha}:refs/heads/{branch}", check=False
        )
        if proc.returncode == 0:
            # The remote accepted it: that is what counts (a claim is a claim). A local
            # tracking ref that cannot follow (a stale lock) is said, not fatal; the
            # next fetch names the lock if it is still there.
            tracking = f"refs/remotes/{remote}/{branch}"
            if self._ref_from_files(tracking) == sha:
                return (
                    True  # push moved it already (the remote's fetch refspec maps the branch there)
                )
            moved = self.run("update-ref", tracking, sha, check=False)
            if moved.returncode != 0:
                why = failure(f"updating {tracking}", moved.stderr, moved.returncode)
                self.warnings.append(
                    f"pushed {sha[:12]} to {remote}/{branch}, but {why.message}"
                    f"{' (' + why.file + ')' if why.file else ''}; "
                    f"{why.hint or 'the next fetch updates it'}"
                )
            return True
        text = (proc.stdout + proc.stderr).decode("utf-8", "replace")
        blocker = _IN_THE_WAY.search(text)
        if blocker:
            # A ref named like a directory of this one (mergegate/audit/x) makes every push of it
            # fail:
            # not a lost race, and retrying cannot help.
            name = blocker[1].removeprefix("refs/heads/")
            raise GitError(
                f"git push to {remote} failed: the branch {name} is in the way of {branch} (git "
                "cannot have both)",
                hint=f"delete it on the remote if it is not needed: git push {remote} --delete "
                f"{name}",
            )
        if (
            "[rejected]" in text
            or "non-fast-forward" in text
            or "fetch first" in text
            or ("[remote rejected]" in text and _LOST_RACE.search(text))
        ):
            return False
        raise failure(f"git push to {remote}", text, proc.returncode)

    def config(self, key: str) -> str | None:
        proc = self.run("config", "--get", key, check=False)
        return proc.stdout.decode().strip() or None

    # -- history --------------------------------------------------------------
    def is_ancestor(self, ancestor: str, descendant: str, *, remember: bool = False) -> bool:
        """Whether `ancestor` is an ancestor of (or is) `descendant`.

        Between two commit ids the answer never changes: asked twice in a pass (the trust root
        against the tip, then against the last scanned commit, the same one when nothing is new),
        the second is not another walk through all of history. With `remember`, a yes is also kept
        in the clone (`<git dir>/mergegate/ancestors`, the latest 64), for the walks back to the
        trust root that every pass makes. (Only a yes is kept: a no may be a commit not fetched
        yet.)
        """
        key = (ancestor, descendant)
        full = bool(_FULL_ID.fullmatch(ancestor) and _FULL_ID.fullmatch(descendant))
        if key in self._ancestors or (
            remember and full and f"{ancestor} {descendant}" in self._remembered_ancestors()
        ):
            return True
        if full and ancestor == descendant and self._objects.kind(ancestor) == "commit":
            # (each look at the branches asks it of approved's unchanged tip: no merge-base for
            # that)
            return True
        answer = (
            self.run("merge-base", "--is-ancestor", ancestor, descendant, check=False).returncode
            == 0
        )
        if answer and full:
            self._ancestors.add(key)
            if remember:
                self._remember_ancestor(f"{ancestor} {descendant}")
        return answer

    def _remembered_ancestors(self) -> list[str]:
        try:
            return (self.git_dir / "mergegate" / "ancestors").read_text("ascii").split("\n")
        except (OSError, UnicodeDecodeError):
            return []

    def _remember_ancestor(self, pair: str) -> None:
        """Best effort (a cache): a clone that cannot write it walks again next time."""
        target = self.git_dir / "mergegate" / "ancestors"
        kept = [
            p for p in self._remembered_ancestors() if _ANCESTOR_PAIR.fullmatch(p) and p != pair
        ][-63:]
        scratch = target.with_name(f"ancestors.{os.getpid()}.tmp")
        try:
            target.parent.mkdir(parents=True, exist_ok=True)
            scratch.write_text("\n".join([*kept, pair]), "ascii")
            os.replace(scratch, target)
        except OSError:
            scratch.unlink(missing_ok=True)

    def root_commit(self, tip: str) -> str:
        roots = self.out("rev-list", "--first-parent", "--max-parents=0", tip).split()
        return roots[-1]

    def chain(self, old: str, new: str, *, limit: int = 256) -> list[str] | None:
        """The commits after `old` up to `new`, oldest first, when `new` reaches `old` through at
        most `limit`
        well-formed single-parent commits; None where git must say (a merge, a root, a malformed
        commit, grafts
        or a shallow clone, which rev-list honours and the object reader does not, or further back
        than `limit`).

        What `rev-list --reverse --topo-order old..new` lists, and the proof `merge-base
        --is-ancestor old new`
        gives, without their two processes: an audit branch only grows by single-parent commits, and
        every
        look at it after another runner's push walks the few it added (held to git in
        tests/git/test_batch_reads.py)."""
        if not (_FULL_ID.fullmatch(old) and _FULL_ID.fullmatch(new)):
            return None
        if (self.common_dir / "info" / "grafts").exists() or (self.common_dir / "shallow").exists():
            return None
        found: list[str] = []
        sha = new
        try:
            while sha != old:
                if len(found) >= limit:
                    return None
                commit = self.commit(sha)  # (a GitError where `sha` is no commit here)
                if commit.malformed or len(commit.parents) != 1:
                    return None
                found.append(sha)
                sha = commit.parents[0]
        except GitError:
            return None
        found.reverse()
        if not found and self._objects.kind(old) != "commit":
            return None  # (is_ancestor(x, x) holds only for a commit)
        self._ancestors.add((old, new))
        return found

    def first_parent_chain(self, start: str | None, tip: str) -> list[str]:
        """First-parent commits after `start` up to `tip`, oldest first."""
        spec = [tip] if start is None else [f"{start}..{tip}"]
        return self.out("rev-list", "--first-parent", "--reverse", *spec).split()

    def side_commits(self, base: str, tip: str) -> list[str]:
        """Commits reachable from `tip` but not from `base` (a merged branch), oldest first."""
        return self.out("rev-list", "--reverse", f"{base}..{tip}").split()

    def commits_touching(self, base: str, tip: str, *pathspecs: str) -> list[str]:
        found: dict[str, None] = {}
        for batch in _batches(list(pathspecs)):
            found.update(
                dict.fromkeys(
                    self.out("rev-list", "--full-history", f"{base}..{tip}", "--", *batch).split()
                )
            )
        return list(found)

    def tree_blobs(self, commit: str) -> dict[str, str]:
        """path -> blob of every file at `commit`."""
        return {path: blob for _, blob, path in self.ls_tree(commit)}

    def producers(self, tip: str, files: Mapping[str, str]) -> dict[str, list[str]]:
        """For each path, every non-merge commit up to `tip` that set it to exactly its blob in
        `files`."""
        wanted = {(path, blob) for path, blob in files.items() if blob != ZERO}
        found: dict[str, list[str]] = {path: [] for path, _ in wanted}
        if not wanted:
            return found
        # Every commit's whole diff, not a walk limited to the paths: git's path-limited tree walk
        # stops at the first entry that sorts after the path, so a tree not in git's order (written
        # with `hash-object --literally`; a plain bare remote takes it) hid its writer from that
        # walk.
        # For the trees git writes, the non-merge commits that set a path to a blob are the same.
        proc = self.run(
            "log",
            "--full-history",
            "--no-renames",
            "--raw",
            "--no-abbrev",
            "-z",
            "--format=%x00C%H",
            tip,
        )
        fields = proc.stdout.split(b"\0")
        commit = ""
        i = 0
        while i < len(fields):
            item = fields[i].strip(b"\n")
            if item.startswith(b"C") and len(item) == 41:
                commit = item[1:].decode()
            elif item.startswith(b":") and i + 1 < len(fields):
                blob = item.decode().split()[3]
                path = path_text(fields[i + 1])
                if (path, blob) in wanted:
                    found[path].append(commit)
                i += 1
            i += 1
        return found

    def first_parent_adding(self, tip: str, path: str) -> str | None:
        """The oldest first-parent commit up to `tip` that added `path`."""
        shas = self.out(
            "log", "--first-parent", "--reverse", "--diff-filter=A", "--format=%H", tip, "--", path
        ).split()
        return shas[0] if shas else None

    def merge_base(self, a: str, b: str) -> str | None:
        proc = self.run("merge-base", a, b, check=False)
        return proc.stdout.decode().strip() or None

    # -- objects --------------------------------------------------------------
    def commit(self, sha: str) -> Commit:
        found = self._commits.get(sha)
        if found is None:
            if len(self._commits) >= _COMMIT_CACHE:
                del self._commits[next(iter(self._commits))]  # the oldest: walks go forward
            found = self._commits[sha] = self._read_commit(sha)
        return found

    def _read_commit(self, sha: str) -> Commit:
        raw = self._object(sha, "commit")
        header, _, body = raw.partition(b"\n\n")
        tree, parents, author, committer, malformed = parse_commit_header(header)
        return Commit(
            sha,
            parents,
            tree,
            *author,
            *committer,
            body.decode("utf-8", "replace"),
            raw,
            malformed=malformed,
        )

    def git_parents(self, sha: str) -> tuple[str, ...]:
        """The parents as git itself reads them (to cross-check the parser on commits that
        approve)."""
        known = self._parents.get(sha)
        if known is not None:
            return known
        return tuple(self.out("rev-list", "--no-walk", "--parents", "-n", "1", sha).split()[1:])

    def prefetch(self, chain: Sequence[str]) -> None:
        """Read ahead, for a walk over `chain` (first-parent commits, oldest first), what it asks
        of each commit: its diff from its first parent and its parents as git reads them.

        Two processes for the whole chain instead of two per commit; `diff` and
        `git_parents` then answer from memory exactly what they would have run git for.
        """
        self._diffs.clear()
        self._parents.clear()
        if not chain:
            return
        lines = "".join(f"{sha}\n" for sha in chain).encode()
        listed = self.run(
            "rev-list", "--no-walk=unsorted", "--parents", "--stdin", input=lines
        ).stdout.decode()
        for line in listed.splitlines():
            sha, *parents = line.split()
            self._parents[sha] = tuple(parents)
        pairs = [(self._parents[sha][0], sha) for sha in chain if self._parents.get(sha)]
        answers = self.diffs(pairs)
        if answers is None:  # not what was asked: answer nothing from memory
            return
        for pair, changes in zip(pairs, answers, strict=True):
            self._diffs[pair] = changes

    def diffs(
        self, pairs: Sequence[tuple[str | None, str]], *pathspecs: str
    ) -> list[list[Change]] | None:
        """`diff(parent, sha, *pathspecs)` for every (parent, sha) pair (parent None: a root,
        against
        the empty tree), in one `diff-tree --stdin`; None if git answered something else than
        asked."""
        if not pairs:
            return []
        # --always: an empty diff still prints its commit line, so every answer is told apart.
        fed = "".join(
            f"{sha} {parent}\n" if parent else f"{sha}\n" for parent, sha in pairs
        ).encode()
        args = ["diff-tree", "--stdin", "--always", "--root", "-r", "-z", "--no-renames"]
        fields = self.run(
            *args, *(["--", *pathspecs] if pathspecs else []), input=fed
        ).stdout.split(b"\0")
        answers: list[list[Change]] = []
        i = 0
        while i < len(fields) - 1:
            if fields[i].startswith(b":"):
                meta = fields[i].decode().lstrip(":").split()
                answers[-1].append(
                    Change(meta[4][0], path_text(fields[i + 1]), meta[2], meta[3], meta[0], meta[1])
                )
                i += 2
            else:
                answers.append([])
                i += 1
        return answers if len(answers) == len(pairs) else None

    def graph(self, tip: str) -> list[tuple[str, int, tuple[str, ...], str]]:
        """(commit, committer date as git's walks order by it, parents and tree as git reads them)
        of
        every commit reachable from `tip`, in one `rev-list`."""
        found = []
        lines = self.out("rev-list", "--timestamp", "--parents", "--format=%T", tip).splitlines()
        for header, tree in zip(lines[::2], lines[1::2], strict=True):
            date, _, sha, *parents = header.split()
            found.append((sha, int(date), tuple(parents), tree))
        return found

    def remember(
        self, parents: Mapping[str, tuple[str, ...]], diffs: Mapping[tuple[str, str], list[Change]]
    ) -> None:
        """What `prefetch` reads, read by the caller (history.History): `git_parents` and `diff`
        answer from it."""
        self._parents.update(parents)
        self._diffs.update(diffs)

    def preload(self, shas: Sequence[str]) -> None:
        """Read the objects `shas` ahead in one `cat-file --batch` (a walk over a long history asks
        for each of them once: one process streaming them all, not a round trip each)."""
        wanted = [
            sha
            for sha in dict.fromkeys(shas)
            if re.fullmatch(r"[0-9a-f]{40}", sha) and sha not in self._loaded
        ]
        if not wanted:
            return
        out = self.run(
            "cat-file", "--batch", input="".join(f"{sha}\n" for sha in wanted).encode()
        ).stdout
        at = 0
        for sha in wanted:
            end = out.index(b"\n", at)
            header = out[at:end].split()
            if (
                len(header) != 3 or header[0].decode() != sha
            ):  # missing (or not what was asked): read it when asked
                at = end + 1
                continue
            size = int(header[2])
            self._loaded[sha] = (header[1].decode(), out[end + 1 : end + 1 + size])
            at = end + 1 + size + 1

    def _object(self, sha: str, kind: str) -> bytes:
        found = self._loaded.get(sha) or (self._objects.read(sha) if len(sha) == 40 else None)
        if found is None:
            raise GitError(f"object {sha[:12]} not found in {self.path}")
        if found[0] != kind:
            raise GitError(f"object {sha[:12]} is a {found[0]}, expected a {kind}")
        return found[1]

    def tree_of(self, sha: str) -> str:
        """The tree of commit `sha`, or `sha` itself when it names a tree (or nothing this reader
        knows)."""
        found = self._commits.get(sha)
        if found is not None:
            return found.tree
        return (
            self.commit(sha).tree if len(sha) == 40 and self._objects.kind(sha) == "commit" else sha
        )

    def blob(self, sha: str) -> bytes:
        return self._object(sha, "blob")

    def blobs(self, shas: Sequence[str]) -> Generator[bytes, None, None]:
        """The contents of blobs `shas`, in order, from one `git cat-file --batch` of their own that
        runs one blob ahead of the caller: its output pipe is widened to hold a log file, so git
        inflates the next blob while the caller works on this one (audit verify, issue 12).
        GitError if one is missing or not a blob. Close the iterator to end the process early."""
        for sha in shas:
            if not re.fullmatch(r"[0-9a-f]{40}|[0-9a-f]{64}", sha):
                raise GitError(f"object {sha[:12]} not found in {self.path}")
        if not shas:
            return
        proc = self._blob_batch()
        stdin, stdout = proc.stdin, proc.stdout
        assert stdin is not None and stdout is not None
        try:
            stdin.write(f"{shas[0]}\n".encode())
            stdin.flush()
            for index, sha in enumerate(shas):
                if index + 1 < len(shas):
                    stdin.write(f"{shas[index + 1]}\n".encode())
                    stdin.flush()
                header = stdout.readline().split()
                if len(header) != 3 or header[1] != b"blob":
                    raise GitError(
                        f"object {sha[:12]} is not a blob in {self.path}"
                        if len(header) == 3
                        else f"object {sha[:12]} not found in {self.path}"
                    )
                size = int(header[2])
                data = stdout.read(size)  # and then its newline: not a copy of the blob less it
                if len(data) != size or len(stdout.read(1)) != 1:
                    raise GitError(f"git cat-file stopped answering for {self.git_dir}")
                yield data
        except (OSError, ValueError):
            raise GitError(f"git cat-file stopped answering for {self.git_dir}") from None
        finally:
            _end(proc)

    def _blob_batch(self) -> subprocess.Popen[bytes]:
        """A `git cat-file --batch` for `blobs` and `blob_feed`, its output pipe widened to hold a
        log file."""
        env = _without_credentials({**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C"})
        env.pop("GIT_WORK_TREE", None)
        # Log files are read in chain order, and in a pack each is often a delta of the one before:
        # git keeps
        # every base it rebuilt (96 MiB by default, for the pack's life), which here only costs
        # fresh pages
        # (memory and the kernel's time to clear them, about a fifth of git's CPU at 100 files); the
        # few
        # bases the next reads need fit in 16 MiB.
        proc = subprocess.Popen(
            [
                "git",
                "-c",
                "core.deltaBaseCacheLimit=16m",
                "--git-dir",
                str(self.git_dir),
                "cat-file",
                "--batch",
            ],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
        )
        assert proc.stdout is not None
        with contextlib.suppress(
            OSError, AttributeError
        ):  # Linux only; elsewhere git runs a pipe's worth ahead
            import fcntl

            fcntl.fcntl(proc.stdout.fileno(), fcntl.F_SETPIPE_SZ, 1 << 20)
        return proc

    def blob_feed(self) -> BlobFeed:
        """One `git cat-file --batch` whose two pipes forked processes share (audit verify's
        workers, issue 12):
        each blob is inflated once, by one git, however many processes check them. See BlobFeed."""
        return BlobFeed(self, self._blob_batch())

    def diff(self, parent: str | None, sha: str, *pathspecs: str) -> list[Change]:
        if not pathspecs and parent is not None and (parent, sha) in self._diffs:
            return list(self._diffs[(parent, sha)])
        if not pathspecs:
            compared = self._tree_diff(parent, sha)
            if compared is not None:
                return compared
        args = ["diff-tree", "-r", "-z", "--no-renames", "--no-commit-id"]
        args += ["--root", sha] if parent is None else [parent, sha]
        args += ["--", *pathspecs] if pathspecs else []
        fields = self.run(*args).stdout.split(b"\0")
        changes = []
        for i in range(0, len(fields) - 1, 2):
            meta = fields[i].decode().lstrip(":").split()
            changes.append(
                Change(meta[4][0], path_text(fields[i + 1]), meta[2], meta[3], meta[0], meta[1])
            )
        return changes

    def _tree_diff(self, parent: str | None, sha: str) -> list[Change] | None:
        """What `diff-tree -r --no-renames` says between two commits or trees (or `--root`), read
        through the
        object process (a pass diffed a commit or three, a process each); None where git must say:
        not full
        SHA-1 ids of commits or trees, a tree not in git's own order, deeper than _DIFF_DEPTH, or a
        gitlink
        that changed (git may ignore it, as a submodule's config says). Held to diff-tree in
        tests/git/test_batch_reads.py."""
        try:
            old = self._root_tree(parent) if parent is not None else ""
            new = self._root_tree(sha)
            if old is None or new is None:
                return None
            if parent is None and (
                new == sha
                or self.commit(sha).parents
                or (self.common_dir / "info" / "grafts").exists()
            ):
                # --root compares a commit with its parents (none for a root commit; grafts may add
                # some)
                return None
            changes: list[Change] = []
            return changes if self._diff_trees(old, new, b"", changes, 0) else None
        except GitError:
            return None

    def _root_tree(self, sha: str) -> str | None:
        if not re.fullmatch(r"[0-9a-f]{40}", sha):
            return None
        kind = self._objects.kind(sha) if sha not in self._commits else "commit"
        tree = self.commit(sha).tree if kind == "commit" else sha if kind == "tree" else ""
        return tree if re.fullmatch(r"[0-9a-f]{40}", tree) else None

    def _diff_trees(
        self, old: str, new: str, base: bytes, changes: list[Change], depth: int
    ) -> bool:
        """Append to `changes` what differs between trees `old` and `new` ("" for none) under
        `base`, in
        diff-tree's order (both trees' entries merged in tree order: a folder sorts as its name and
        "/",
        so a file and a folder of one name are two entries); False where git must say."""
        if old == new or depth > _DIFF_DEPTH:
            return old == new
        before = self._tree_listing(old) if old else {}
        after = self._tree_listing(new) if new else {}
        if before is None or after is None:
            return False
        olds = {(n + b"/" if m == b"40000" else n): (n, m, s) for n, (m, s) in before.items()}
        news = {(n + b"/" if m == b"40000" else n): (n, m, s) for n, (m, s) in after.items()}
        for k in sorted(olds.keys() | news.keys()):
            a, b = olds.get(k), news.get(k)
            name = a[0] if a is not None else b[0]  # type: ignore[index]
            if k.endswith(b"/"):
                if not self._diff_trees(
                    a[2] if a else "", b[2] if b else "", base + name + b"/", changes, depth + 1
                ):
                    return False
                continue
            if a is not None and b is not None and a[1:] == b[1:]:
                continue
            if b"160000" in (a[1] if a else b"", b[1] if b else b""):
                return (
                    False  # a gitlink: whether git reports it can depend on the submodule's config
                )
            path = path_text(base + name)
            if a is None:
                changes.append(Change("A", path, ZERO, b[2], "000000", b[1].decode()))  # type: ignore[index]
            elif b is None:
                changes.append(Change("D", path, a[2], ZERO, a[1].decode(), "000000"))
            else:
                kind = (
                    "M"
                    if (a[1] in _REGULAR) == (b[1] in _REGULAR)
                    and (a[1] in _REGULAR or a[1] == b[1])
                    else "T"
                )
                changes.append(Change(kind, path, a[2], b[2], a[1].decode(), b[1].decode()))
        return True

    def patch(self, old: str, new: str, path: str) -> str:
        """The diff of one path between two commits, as text (for a reader, never parsed)."""
        proc = self.run(
            "diff",
            "--no-color",
            "--no-ext-diff",
            "--no-textconv",
            old,
            new,
            "--",
            literal(path),
            check=False,
        )
        return proc.stdout.decode("utf-8", "replace")

    def ls_tree(self, commit: str, prefix: str = "") -> list[tuple[str, str, str]]:
        """(mode, blob, path) of every file under `prefix` at `commit`."""
        listed = self._ls_tree_objects(commit, prefix)
        if listed is not None:
            return listed
        args = ["ls-tree", "-r", "-z", "--full-tree", commit]
        if prefix:
            args += ["--", prefix]
        return ls_tree_entries(self.run(*args).stdout)

    def _ls_tree_objects(self, commit: str, prefix: str) -> list[tuple[str, str, str]] | None:
        """What `ls-tree -r` lists, read through the object process (a runner pass listed a tree or
        two,
        a process each); None where git must say: not a full SHA-1 id of a commit or a tree, a
        prefix that
        is not plain folders, a file on the way, a tree not in git's own order. Held to ls-tree in
        tests/git/test_rev_equiv.py."""
        try:
            found = self._subtree(commit, prefix)
            if not isinstance(found, tuple):
                return [] if found is _ABSENT else None
            base, tree = found
            top = self._tree_listing(tree)
            if top is None:
                return None
            entries: list[tuple[str, str, str]] = []
            stack = [(base, iter(top.items()))]
            while stack:  # depth first, each tree in its own order: ls-tree -r's order
                base, items = stack[-1]
                for name, (mode, sha) in items:
                    if mode == b"40000":
                        below = self._tree_listing(sha)
                        if below is None:
                            return None
                        stack.append((base + name + b"/", iter(below.items())))
                        break
                    entries.append((mode.decode(), sha, path_text(base + name)))
                else:
                    stack.pop()
            return entries
        except GitError:
            return None

    def _subtree(self, commit: str, prefix: str) -> tuple[bytes, str] | object | None:
        """(prefix as bytes, its tree) at commit-or-tree `commit`, read through the object process;
        _ABSENT if
        no such folder; None where git must say (see _ls_tree_objects)."""
        if not re.fullmatch(r"[0-9a-f]{40}", commit) or (
            prefix and not _PLAIN_PREFIX.fullmatch(prefix)
        ):
            return None
        kind = self._objects.kind(commit) if commit not in self._commits else "commit"
        tree = self.commit(commit).tree if kind == "commit" else commit if kind == "tree" else ""
        if not re.fullmatch(r"[0-9a-f]{40}", tree):
            return None
        base = b""
        for part in path_bytes(prefix).split(b"/")[:-1]:
            listing = self._tree_listing(tree)
            if listing is None:
                return None
            if part not in listing:
                return _ABSENT
            mode, tree = listing[part]
            if mode != b"40000":
                return None
            base += part + b"/"
        return base, tree

    def _ls_flat_objects(self, commit: str, directory: str) -> list[tuple[str, str, str]] | None:
        """What `ls-tree <commit>:<directory>` lists, read through the object process (a look at the
        audit
        branch listed two or three trees, a process each); None where git must say."""
        try:
            found = self._subtree(commit, directory)
            if not isinstance(found, tuple):
                return [] if found is _ABSENT else None
            listing = self._tree_listing(found[1])
        except GitError:
            return None
        if listing is None:
            return None
        # ls-tree prints a mode in six digits: a tree's 40000 as 040000.
        return [
            ("040000" if mode == b"40000" else mode.decode(), sha, path_text(name))
            for name, (mode, sha) in listing.items()
        ]

    def ls_tree_flat(self, commit: str, directory: str = "") -> list[tuple[str, str, str]]:
        """(mode, object, name) of the entries directly in `directory` (e.g. "audit/") at `commit`;
        [] if absent."""
        key = (commit, directory)
        if key in self._flat:
            return list(self._flat[key])
        listed = self._ls_flat_objects(commit, directory)
        if listed is not None:
            return listed
        proc = self.run(
            "ls-tree", "-z", f"{commit}:{directory}" if directory else commit, check=False
        )
        entries = ls_tree_entries(proc.stdout) if proc.returncode == 0 else []
        if proc.returncode == 0 and _FULL_ID.fullmatch(commit):
            # A commit's tree never changes: a look at the audit branch read the same one up to
            # three times.
            if len(self._flat) >= _FLAT_CACHE:
                del self._flat[next(iter(self._flat))]
            self._flat[key] = tuple(entries)
        return entries

    def file_blob(self, commit: str, path: str) -> str | None:
        """The object `path` names at `commit` (what `rev-parse <commit>:<path>` says), or None if
        absent.

        Read through the object process (a planning pass asks this of every job: a
        process each cost more than the rest of its planning); git answers where the
        walk could differ from its own: a commit not named by its full id, a path with an
        empty, `.` or `..` part, or a tree on the way that is not in git's own order."""
        found = self._tree_entry(commit, path)
        if found is None or isinstance(found, str):
            return found
        proc = self.run(
            "rev-parse", "--verify", "--quiet", f"{commit}:{path_arg(path)}", check=False
        )
        return proc.stdout.decode().strip() or None if proc.returncode == 0 else None

    def _tree_entry(self, commit: str, path: str) -> str | object | None:
        if not re.fullmatch(r"[0-9a-f]{40}", commit) or "\n" in path:
            return _ASK_GIT
        parts = path_bytes(path).split(b"/")
        if any(part in (b"", b".", b"..") for part in parts):
            return _ASK_GIT
        try:
            if commit not in self._commits and self._objects.kind(commit) != "commit":
                return _ASK_GIT
            sha = self.commit(commit).tree
            if not re.fullmatch(r"[0-9a-f]{40}", sha):
                # not a SHA-1 repository (the 40 digits were an abbreviation), or a bad tree line
                return _ASK_GIT
            return self._walk_tree(sha, parts)
        except GitError:
            return (
                _ASK_GIT  # an object missing or not what its entry says: git says what that means
            )

    def _walk_tree(self, sha: str, parts: list[bytes]) -> str | object | None:
        for k, part in enumerate(parts):
            entries = self._tree_listing(sha)
            if entries is None:
                return _ASK_GIT
            entry = entries.get(part)
            if entry is None:
                return None
            mode, sha = entry
            if k + 1 < len(parts) and mode != b"40000":
                return None  # a file where the path goes on: git finds nothing there either
        return sha

    def _tree_listing(self, tree: str) -> dict[bytes, tuple[bytes, str]] | None:
        """name -> (mode, object) of tree `tree`; None unless its entries are in git's order, each
        name once."""
        found = self._trees.get(tree)
        if found is not None or tree in self._trees:
            return found
        raw = self._object(tree, "tree")
        entries: dict[bytes, tuple[bytes, str]] = {}
        at, last = 0, b""
        ordered = True
        while at < len(raw) and ordered:
            space, nul = raw.find(b" ", at), raw.find(b"\0", at)
            if not 0 <= space < nul or nul + 21 > len(raw):
                ordered = False  # not a tree git wrote: let git read it
                break
            mode, name = raw[at:space], raw[space + 1 : nul]
            key = name + b"/" if mode == b"40000" else name
            ordered = mode in _MODES and key > last and name not in entries and b"/" not in name
            last = key
            entries[name] = (mode, raw[nul + 1 : nul + 21].hex())
            at = nul + 21
        if len(self._trees) >= _COMMIT_CACHE:
            del self._trees[next(iter(self._trees))]
        self._trees[tree] = entries if ordered else None
        return self._trees[tree]

    def blob_size(self, commit: str, path: str) -> int | None:
        """The size of `path` at `commit` without reading it; None if absent."""
        blob = self.file_blob(commit, path)
        return None if blob is None else self.object_size(blob)

    def object_size(self, sha: str) -> int | None:
        """An object's size from its header (the batch process), without reading it."""
        return self._objects.size(sha) if len(sha) == 40 else None

    def read_file(self, commit: str, path: str) -> bytes | None:
        blob = self.file_blob(commit, path)
        return None if blob is None else self.blob(blob)

    def export(
        self, commit: str, dest: Path, *, skip: Callable[[str], bool] = lambda path: False
    ) -> None:
        """Write the files of `commit` (less those `skip` names) into `dest`: no .git, no hooks.

        A private index and checkout-index do it in C; unlike `git archive`, this
        applies no export-subst (which would put commit subjects, written by
        whoever named a branch, into files) and no export-ignore.
        """
        # checkout-index without -u only reads the index, so a merge of many jobs builds it once.
        index, executable = self._export_index(commit, skip)
        if executable is None:
            self.run(
                "--work-tree",
                str(dest),
                "checkout-index",
                "--all",
                "--force",
                "--quiet",
                env={"GIT_INDEX_FILE": str(index)},
            )
            return
        # A small tree: checkout-index writes it once, and each export copies what it wrote
        # as it would have written it (a git process per job cost more than the rest of the
        # export: issue 12's throughput). The copy is of checkout-index's own output, so
        # attributes, filters and core.symlinks apply exactly as they do to a large tree.
        # Under the lock: drop_exports never removes a template while a copy reads it.
        with self._index_lock:
            template = index.with_name(index.name + ".files")
            try:
                if not template.exists():
                    building = index.with_name(index.name + ".building")
                    shutil.rmtree(building, ignore_errors=True)
                    building.mkdir()
                    self.run(
                        "--work-tree",
                        str(building),
                        "checkout-index",
                        "--all",
                        "--force",
                        "--quiet",
                        env={"GIT_INDEX_FILE": str(index)},
                    )
                    building.rename(template)
                _copy_checkout(template, dest, b"", executable)
            except OSError as exc:  # as checkout-index failing would: a GitError naming the folder
                raise GitError(
                    f"could not write the job's files into {dest}: {exc.strerror or exc}",
                    hint="free disk space in TMPDIR or fix its permissions",
                ) from None

    def _export_index(
        self, commit: str, skip: Callable[[str], bool]
    ) -> tuple[Path, frozenset[bytes] | None]:
        """The private index of `commit` less what `skip` names, and (for a tree of at most
        _TEMPLATE_FILES files, which exports copy) the paths of its executable files."""
        with self._index_lock:
            found = self._indexes.get((commit, skip))
            if found is not None and found[0].exists():
                return found
            if self._index_dir is None:
                import tempfile

                self._index_dir = tempfile.TemporaryDirectory(prefix="mergegate-index-")
                if self.on_export_dir is not None:
                    self.on_export_dir(Path(self._index_dir.name))
            index = Path(self._index_dir.name) / f"{commit}-{self._exports_made}"
            self._exports_made += 1
            entries = [
                (mode, obj, path)
                for mode, obj, path in self.ls_tree(commit)
                if mode != "160000" and not skip(path)
            ]
            data = b"".join(
                f"{mode} {obj}\t".encode() + path_bytes(path) + b"\0" for mode, obj, path in entries
            )
            self.run(
                "update-index", "-z", "--index-info", input=data, env={"GIT_INDEX_FILE": str(index)}
            )
            # The executable bit comes from the tree, not from the file checkout-index wrote (a
            # umask
            # can take the owner's x away from it, and the copy would then drop the others' too).
            small = len(entries) <= _TEMPLATE_FILES
            executable = (
                frozenset(path_bytes(p) for mode, _, p in entries if mode == "100755")
                if small
                else None
            )
            self._indexes[(commit, skip)] = (index, executable)
            return index, executable

    @property
    def export_dir(self) -> Path | None:
        """The folder of the export indexes and small trees' copies ($TMPDIR/mergegate-index-*),
        while there is one."""
        return None if self._index_dir is None else Path(self._index_dir.name)

    def drop_exports(self) -> None:
        """Remove the export indexes and the small trees' copies (the runner does it after each
        pass:
        a daemon would otherwise keep every exported commit's files until it exits)."""
        with self._index_lock:
            if self._index_dir is not None:
                self._index_dir.cleanup()
            self._index_dir, self._indexes = None, {}

    # -- writing --------------------------------------------------------------
    def write_commit(
        self,
        *,
        parent: str | None,
        files: Mapping[str, bytes],
        message: str,
        author: tuple[str, str] | None,
        signing: Signing | None,
        sign: bool = False,
    ) -> str:
        """A commit on `parent` (a root commit if None) that sets `files`, built with a private
        index
        (author None: the person's own)."""
        import tempfile

        with tempfile.TemporaryDirectory(prefix="mergegate-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
            self.run("read-tree", *([parent] if parent else ["--empty"]), env=env)
            lines = []
            for path, data in sorted(files.items()):
                blob = self.run("hash-object", "-w", "--stdin", input=data).stdout.decode().strip()
                lines.append(f"100644 {blob}\t{path}\n")
            self.run("update-index", "--index-info", input="".join(lines).encode(), env=env)
            tree = self.run("write-tree", env=env).stdout.decode().strip()
        return self.commit_tree(
            tree=tree,
            parents=(parent,) if parent else (),
            message=message,
            author=author,
            signing=signing,
            sign=sign,
        )

    def commit_tree(
        self,
        *,
        tree: str,
        parents: tuple[str, ...],
        message: str,
        author: tuple[str, str] | None,
        signing: Signing | None = None,
        sign: bool = False,
    ) -> str:
        """A commit object; `author` None and `sign` use the person's own git identity and key."""
        ident = (
            {}
            if author is None
            else {
                "GIT_AUTHOR_NAME": author[0],
                "GIT_AUTHOR_EMAIL": author[1],
                "GIT_COMMITTER_NAME": author[0],
                "GIT_COMMITTER_EMAIL": author[1],
            }
        )
        args = [*(signing.args() if signing else []), "commit-tree", tree]
        for parent in parents:
            args += ["-p", parent]
        if signing is not None or sign:
            args.append("-S")
        return self.run(*args, input=message.encode(), env=ident).stdout.decode().strip()

    # -- objects written in-process (the runner's audit commits: no git process per record)
    # ----------
    def write_object(self, kind: str, data: bytes) -> str:
        """Store a loose object, as `git hash-object -w` would, without a process: its id.

        The object is zlib-compressed `<kind> <size>\\0<data>` at objects/xx/yyyy..., written
        to a temporary file in that directory and renamed into place (so a reader never
        sees half of it); an object that exists already is left as it is.
        """
        import hashlib
        import tempfile
        import zlib

        body = f"{kind} {len(data)}".encode() + b"\0" + data
        sha = hashlib.sha1(body, usedforsecurity=False).hexdigest()
        folder = self.common_dir / "objects" / sha[:2]
        target = folder / sha[2:]
        if target.exists():
            return sha
        folder.mkdir(exist_ok=True)
        fd, temporary = tempfile.mkstemp(dir=folder, prefix="tmp_obj_")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(zlib.compress(body, 1))
            os.chmod(temporary, 0o444)
            os.replace(temporary, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(temporary)
            raise
        return sha

    def write_tree(self, entries: Mapping[str, tuple[str, str]]) -> str:
        """A tree of `name -> (mode, id)` (modes as ls-tree prints them: 100644, 040000)."""

        def key(item: tuple[str, tuple[str, str]]) -> bytes:
            name, (mode, _) = item
            return name.encode() + (b"/" if mode == "040000" else b"")

        data = b"".join(
            f"{mode.lstrip('0')} {name}".encode() + b"\0" + bytes.fromhex(sha)
            for name, (mode, sha) in sorted(entries.items(), key=key)
        )
        return self.write_object("tree", data)

    def tree_entries(self, sha: str) -> dict[str, tuple[str, str]]:
        """`name -> (mode, id)` of one tree, read through the batch process."""
        data = self._object(sha, "tree")
        entries, i = {}, 0
        while i < len(data):
            space = data.index(b" ", i)
            nul = data.index(b"\0", space)
            mode = data[i:space].decode().rjust(6, "0")
            entries[path_text(data[space + 1 : nul])] = (mode, data[nul + 1 : nul + 21].hex())
            i = nul + 21
        return entries

    def write_commit_object(
        self,
        *,
        tree: str,
        parent: str | None,
        message: str,
        author: tuple[str, str],
        signing: Signing | None,
    ) -> str:
        """A commit of `tree` on `parent` by `author` (as committer too); signed through git when
        `signing`."""
        if signing is not None:
            return self.commit_tree(
                tree=tree,
                parents=(parent,) if parent else (),
                message=message,
                author=author,
                signing=signing,
            )
        stamp = f"{author[0]} <{author[1]}> {int(time.time())} +0000"
        header = (
            f"tree {tree}\n"
            + (f"parent {parent}\n" if parent else "")
            + f"author {stamp}\ncommitter {stamp}\n\n"
        )
        return self.write_object("commit", (header + message).encode())

    def merge_tree(self, ours: str, theirs: str) -> str:
        proc = self.run("merge-tree", "--write-tree", "--no-messages", ours, theirs, check=False)
        if proc.returncode != 0:
            raise GitError(
                f"merging {theirs[:7]} into {ours[:7]} has conflicts",
                hint="rebase the proposal on approved first",
            )
        return proc.stdout.decode().split()[0]


_HEX = re.compile(rb"[0-9a-f]{40}|[0-9a-f]{64}")
_FULL_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_PLAIN_PREFIX = re.compile(r"(?:[A-Za-z0-9_][A-Za-z0-9_.-]*/)+")  # folders ls_tree walks to itself
_DIFF_DEPTH = 64  # folders deeper than this are diff-tree's to compare
_REGULAR = (b"100644", b"100755")  # one type, two modes: a change between them is an M, not a T
_PACKED_REFS_BYTES = 65536  # a bigger packed-refs (thousands of tags) is for-each-ref's to search
_HEX_LINE = re.compile(rb"(?:[0-9a-f]{40}|[0-9a-f]{64})\n")
# Ref names _ref_from_files reads from the files: parts of these characters, none starting with a
# dot.
_PLAIN_REF = re.compile(
    r"refs/(?:[A-Za-z0-9_+=@-][A-Za-z0-9_.+=@-]*/)*[A-Za-z0-9_+=@-][A-Za-z0-9_.+=@-]*"
)
_ANCESTOR_PAIR = re.compile(r"(?:[0-9a-f]{40}|[0-9a-f]{64}) (?:[0-9a-f]{40}|[0-9a-f]{64})")
# Headers git itself reads (and only at their one place): anywhere else they are
# ambiguous, because git and a looser reader would disagree on what the commit says.
_FIXED = (b"tree", b"parent", b"author", b"committer")
_ONCE = (b"encoding", b"gpgsig", b"gpgsig-sha256")


def ls_tree_entries(output: bytes) -> list[tuple[str, str, str]]:
    """(mode, object, path) of each entry of `git ls-tree -z` output."""
    entries = []
    for item in output.split(b"\0"):
        if item:
            meta, path = item.split(b"\t", 1)
            mode, _, obj = meta.decode().split()
            entries.append((mode, obj, path_text(path)))
    return entries


def parse_commit_header(
    header: bytes,
) -> tuple[str, tuple[str, ...], tuple[str, str], tuple[str, str], str]:
    """(tree, parents, author, committer, malformed) as git's parse_commit_buffer() reads them.

    git takes the tree from the first line and parents only from the lines right
    after it; author and committer follow. A `parent` line anywhere else is
    ignored by git but not by a looser reader, so any misplaced or repeated
    header makes the commit malformed (`malformed` says why): it approves nothing.
    """
    lines = header.split(b"\n")
    names = [line.split(b" ", 1)[0] for line in lines if not line.startswith(b" ")]
    tree = lines[0][5:].decode("ascii", "replace") if lines[0].startswith(b"tree ") else ""
    index, parents = 1, []
    while index < len(lines) and lines[index].startswith(b"parent "):
        parents.append(lines[index][7:].decode("ascii", "replace"))
        index += 1
    author = (
        _ident(lines[index][7:])
        if index < len(lines) and lines[index].startswith(b"author ")
        else ("", "")
    )
    committer = ("", "")
    if index + 1 < len(lines) and lines[index + 1].startswith(b"committer "):
        committer = _ident(lines[index + 1][10:])
    return tree, tuple(parents), author, committer, _malformed(lines, names, index, len(tree))


def _malformed(lines: list[bytes], names: list[bytes], index: int, id_length: int) -> str:
    if not lines[0].startswith(b"tree ") or not _HEX.fullmatch(lines[0][5:]):
        return "its first header is not `tree <id>`"
    for number, line in enumerate(lines[1:index], start=2):
        if not _HEX.fullmatch(line[7:]) or len(line) - 7 != id_length:
            return f"header line {number} is not `parent <id>`"
    if index >= len(lines) or not lines[index].startswith(b"author "):
        return (
            f"header line {index + 1} is not `author`, which git expects right after tree and "
            "parents"
        )
    if index + 1 >= len(lines) or not lines[index + 1].startswith(b"committer "):
        return f"header line {index + 2} is not `committer`, which git expects right after author"
    for name in _FIXED:
        if names.count(name) != (index - 1 if name == b"parent" else 1):
            return (
                f"header `{name.decode()}` appears where git does not read it (misplaced or "
                "repeated)"
            )
    for name in _ONCE:
        if names.count(name) > 1:
            return f"header `{name.decode()}` appears more than once"
    if index + 2 < len(lines) and lines[index + 2].startswith(b" "):
        return "its committer header has a continuation line"
    return ""


def _ident(value: bytes) -> tuple[str, str]:
    text = value.decode("utf-8", "replace")
    name, _, rest = text.partition(" <")
    return name.strip(), rest.split(">", 1)[0].strip().lower()
