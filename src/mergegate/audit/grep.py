"""`git grep` of the audit log at a pass's start, in proportion to what is new (issue 12).

A pass asks two questions of every record: which runs are open (leases.py) and which records name
GitHub evidence (github.stored_evidence). Each is one `git grep` of the log files, whose cost grew
with the history. The log is append-only and rotates: every file but the last is closed, and a
closed file never changes (if it did, its blob id would). So the answer folded over the closed files
is kept in `<git dir>/mergegate/grep.json`, with the (name, blob id) of each, and the next pass
greps only the files after them: the same grep, the same pattern, the same order (path order is
chain order), only split at a file boundary with the fold's state carried across. When the log's
first files are not exactly those (another branch, a rewrite, a memory this version cannot read), it
greps them all, as before.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from mergegate.audit.log import AUDIT_DIR
from mergegate.git.repo import Repo

_LOG = re.compile(r"log-\d{6}\.jsonl")

State = TypeVar("State")


def _path(repo: Repo) -> Path:
    return repo.git_dir / "mergegate" / "grep.json"


def log_files(repo: Repo, commit: str) -> list[tuple[str, str]]:
    """(name, blob id) of the log files at `commit`, in path order, read through the batch
    process."""
    root = repo.tree_entries(repo.commit(commit).tree)
    if "audit" not in root:
        return []
    return sorted(
        (name, blob)
        for name, (_, blob) in repo.tree_entries(root["audit"][1]).items()
        if _LOG.fullmatch(name)
    )


def folded(
    repo: Repo,
    commit: str,
    kind: str,
    args: Sequence[str],
    fold: Callable[[State, list[bytes]], State],
    start: State,
    *,
    dump: Callable[[State], Any],
    load: Callable[[Any], State],
    input: bytes | None = None,
    remember: bool = True,
) -> State:
    """`fold(state, lines)` over the output of `git grep ARGS <commit> -- <log file>`, one log file
    at a time in path order, from `start`; the closed files' part from this clone's memory when it
    is of exactly those files.

    `args` must print each match on a line of its own without the file name (the name is added here
    to split the output); `dump`/`load` turn a state into JSON and back.
    """
    files = log_files(repo, commit)
    closed = [list(f) for f in files[:-1]]
    memory = _recall(repo).get(kind)
    state, done = start, 0
    if (
        isinstance(memory, dict)
        and isinstance(memory.get("files"), list)
        and memory["files"] == closed[: len(memory["files"])]
    ):
        try:
            state, done = load(memory["state"]), len(memory["files"])
        except (KeyError, TypeError, ValueError):
            state, done = start, 0
    snapshot: Any = (
        None  # the state after the closed files, as JSON (a fold may change its state in place)
    )
    rest = files[done:]
    if rest:
        proc = repo.run(
            "grep",
            *args,
            commit,
            "--",
            *[AUDIT_DIR + name for name, _ in rest],
            input=input,
            check=False,
        )
        found: dict[str, list[bytes]] = {}
        prefix = f"{commit}:{AUDIT_DIR}".encode()
        for line in proc.stdout.splitlines():
            if line.startswith(prefix):
                file, _, text = line[len(prefix) :].partition(b":")
                found.setdefault(file.decode(), []).append(text)
        for index, (name, _) in enumerate(rest, start=done):
            state = fold(state, found.get(name, []))
            if index + 1 == len(closed):
                snapshot = dump(state)
    if remember and snapshot is not None:
        _remember(repo, kind, {"files": closed, "state": snapshot})
    return state


def _recall(repo: Repo) -> dict[str, object]:
    try:
        value = json.loads(_path(repo).read_text("utf-8"))
    except (OSError, ValueError):
        return {}
    return value if isinstance(value, dict) else {}


def _remember(repo: Repo, kind: str, value: dict[str, object]) -> None:
    """Best effort (a cache): a clone that cannot write it greps the whole log next time."""
    target = _path(repo)
    scratch = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch.write_text(json.dumps({**_recall(repo), kind: value}, sort_keys=True), "utf-8")
        os.replace(scratch, target)
    except OSError:
        scratch.unlink(missing_ok=True)
