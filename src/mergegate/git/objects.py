"""Reading git objects: commits, trees and blobs, through batch `cat-file` processes.

Reads go through one persistent `git cat-file --batch-command` process (`_Objects`) so that walking
thousands of commits does not spawn thousands of processes; `blobs` and `BlobFeed` stream many blobs
through a `cat-file --batch` of their own. A commit's header is read as git reads it
(`parse_commit_header`).
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
import threading
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import IO

from mergegate.errors import GitError
from mergegate.git.processes import GitProcesses, batch_env
from mergegate.git.values import _HEX, Commit

_COMMIT_CACHE = 4096

# Headers git itself reads (and only at their one place): anywhere else they are ambiguous, because
# git and a looser reader would disagree on what the commit says.
_FIXED = (b"tree", b"parent", b"author", b"committer")
_ONCE = (b"encoding", b"gpgsig", b"gpgsig-sha256")


class _Objects:
    """One `git cat-file --batch-command` process: object headers and contents, one round trip each.

    Started on first use and ended by `close` (or when the Repo is collected); the process also ends
    by itself when this one dies (its stdin closes). A lock keeps the request/response pairs of
    threads sharing a Repo apart.
    """

    def __init__(self, git_dir: Path) -> None:
        self.git_dir = git_dir
        self._proc: subprocess.Popen[bytes] | None = None
        self._lock = threading.Lock()

    def _start(self) -> tuple[IO[bytes], IO[bytes]]:
        if self._proc is None or self._proc.poll() is not None:
            env = batch_env()
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


class BlobFeed:
    """A `git cat-file --batch` read by several forked processes in turn (audit_chain's workers).

    Whoever holds the turn (the workers pass a token) asks for a blob (`request`) and reads
    the next answer (`read`) straight from the pipes' file descriptors, never a byte past
    it, so the next reader finds the next answer. In a pack, a log file is usually stored as
    a delta of the one before: one git for all of them inflates each once, where one git
    per worker would rebuild the others' files too (about 0.2 s of CPU at 100 files).
    `read` raises the GitError `Repo.blobs` raises, in the same words.
    """

    def __init__(self, repo: Objects, proc: subprocess.Popen[bytes]) -> None:
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


class Objects(GitProcesses):
    """Commits, trees and blobs by id, read through the object process and cached."""

    def __init__(self, path: Path, git_dir: Path, common_dir: Path) -> None:
        super().__init__(path, git_dir, common_dir)
        self._objects = _Objects(self.git_dir)
        # A plain dict, not lru_cache on a bound method: that would be a cycle keeping the Repo
        # (and its cat-file process) alive until the cyclic collector runs.
        self._commits: dict[str, Commit] = {}
        self._loaded: dict[str, tuple[str, bytes]] = {}  # objects read ahead by preload

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

    def has_object(self, sha: str) -> bool:
        return (
            len(sha) == 40
            and self.run("cat-file", "-e", f"{sha}^{{commit}}", check=False).returncode == 0
        )

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
        env = batch_env()
        # Log files are read in chain order, and in a pack each is often a delta of the one before:
        # git keeps every base it rebuilt (96 MiB by default, for the pack's life), which here only
        # costs fresh pages (memory and the kernel's time to clear them, about a fifth of git's CPU
        # at 100 files); the few bases the next reads need fit in 16 MiB.
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

    def object_size(self, sha: str) -> int | None:
        """An object's size from its header (the batch process), without reading it."""
        return self._objects.size(sha) if len(sha) == 40 else None


def parse_commit_header(
    header: bytes,
) -> tuple[str, tuple[str, ...], tuple[str, str], tuple[str, str], str]:
    """(tree, parents, author, committer, malformed) as git's parse_commit_buffer() reads them.

    git takes the tree from the first line and parents only from the lines right after it; author
    and committer follow. A `parent` line anywhere else is ignored by git but not by a looser
    reader, so any misplaced or repeated header makes the commit malformed (`malformed` says why):
    it approves nothing.
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
