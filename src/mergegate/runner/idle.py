"""A clone's memory of its last settled pass, so that an idle `run --once` costs an `ls-remote`
(issue 12).

A pass that ended settled leaves `<git dir>/mergegate/quiet/<runner>.json`:
the tips of `approved` and `mergegate/audit` as it fetched and pushed them, the options it ran with,
and when its next time-based work falls due (a retry's backoff ending, another runner's lease
running out, a key of an open commit's policy starting or ending its lifetime). Settled is the
runner's to say (`one_pass.Runner._remember_quiet`): a pass that found nothing to do, or one that
ran jobs, pushed every record and saw nobody else's records come in, with nothing waiting for
evidence and no retry of its own to come. The next `run --once` with the same options asks the
remote first (`git ls-remote`: no fetch, no local write); when both refs are still there, in the
remote and in this clone's remote-tracking refs, the spool is empty, there is no pending commit and
nothing is due, it reports the same nothing a full pass would, without fetching, reading records or
planning. Every pass removes the memory before it starts, and writes it again only if it ends
settled.

Skipping is safe because the pass it stands for would decide nothing: its input is those two commits
(already checked), the options and the time, and the time only matters at the due times kept here.
It never runs or records anything, so it cannot break at-most-once; it can only delay, and only
until a ref moves or something falls due. This module imports nothing heavy: an idle poll does not
load the planning stack.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from mergegate import __version__, clock
from mergegate.errors import GitError
from mergegate.git.repo import Repo

_SAFE = re.compile(r"[^A-Za-z0-9._-]")


@dataclass(frozen=True)
class Quiet:
    key: str  # the options (and version) of the pass: another set of options plans differently
    refs: dict[str, str]  # refs/heads/<branch> -> commit, as the remote had them after the pass
    tip: str  # the tip of approved the pass judged (what `run --json` reports as "tip")
    wake: str | None  # UTC time (ISO 8601) when time-based work falls due; None: never

    def due(self, now: datetime) -> bool:
        return self.wake is not None and now >= datetime.fromisoformat(self.wake)


def key(
    *,
    remote: str,
    branch: str,
    trust_root: str | None,
    runner_name: str,
    labels: Sequence[str] | None,
    signing_key: str | None,
) -> str:
    """What a pass decides by besides the two refs and the time. `run --once` computes it from
    its command line (labels as given: a set of valid labels is what the runner keeps)."""
    return json.dumps(
        {
            "version": __version__,
            "trust_env": os.environ.get("MERGEGATE_TRUST_ROOT"),
            "remote": remote,
            "branch": branch,
            "trust_root": trust_root,
            "runner": runner_name,
            "labels": None if labels is None else sorted(set(labels)),
            "signing": signing_key is not None,
        },
        sort_keys=True,
    )


def path(git_dir: Path, runner_name: str) -> Path:
    return git_dir / "mergegate" / "quiet" / f"{_SAFE.sub('_', runner_name)}.json"


def forget(git_dir: Path, runner_name: str) -> None:
    try:
        path(git_dir, runner_name).unlink()
    except FileNotFoundError:
        pass


def remember(git_dir: Path, runner_name: str, quiet: Quiet) -> None:
    """Write the memory atomically (a reader sees the old one or the new one, never half)."""
    target = path(git_dir, runner_name)
    scratch = target.with_name(f"{target.name}.{os.getpid()}.tmp")
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        scratch.write_text(
            json.dumps(
                {"key": quiet.key, "refs": quiet.refs, "tip": quiet.tip, "wake": quiet.wake},
                sort_keys=True,
            )
        )
        os.replace(scratch, target)
    except OSError:  # best effort (a full disk): without it, the next `run --once` does a full pass
        scratch.unlink(missing_ok=True)


def recall(git_dir: Path, runner_name: str) -> Quiet | None:
    try:
        value = json.loads(path(git_dir, runner_name).read_text())
        quiet = Quiet(
            str(value["key"]),
            {str(k): str(v) for k, v in value["refs"].items()},
            str(value["tip"]),
            None if value["wake"] is None else str(value["wake"]),
        )
        if quiet.wake is not None:
            datetime.fromisoformat(quiet.wake)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # no memory, or one this version cannot read: a full pass
    return quiet


def still_quiet(
    repo: Repo, *, runner_name: str, remote: str, key: str, now: datetime | None = None
) -> Quiet | None:
    """The last quiet pass's memory, if a pass now would find the same nothing; else None.

    Checks, cheapest first: the memory is for these options and nothing is due; no spooled results
    and no pending commit of this runner; this clone's remote-tracking refs and then the remote
    itself (one `ls-remote`) still where the pass left them.
    """
    quiet = recall(repo.git_dir, runner_name)
    if quiet is None or quiet.key != key or quiet.due(now or clock.now()):
        return None
    name = _SAFE.sub("_", runner_name)
    if (repo.git_dir / "mergegate" / "spool" / f"{name}.jsonl").exists():
        return None
    # This clone's refs, in one for-each-ref: the remote-tracking refs where the pass left them, no
    # pending commit.
    tracking = {
        f"refs/remotes/{remote}/{ref.removeprefix('refs/heads/')}": ref for ref in quiet.refs
    }
    pending = f"refs/mergegate/pending/{name}"
    listed = repo.run(
        "for-each-ref", "--format=%(refname)%00%(objectname)", "--", *tracking, pending, check=False
    )
    local = {
        name: sha
        for name, _, sha in (
            line.partition("\0") for line in listed.stdout.decode("utf-8", "replace").splitlines()
        )
    }
    if (
        pending in local
        or {ref: local.get(name, "") for name, ref in tracking.items()} != quiet.refs
    ):
        return None
    try:
        found = repo.ls_remote(
            remote, sorted(quiet.refs)
        )  # "" for a ref the remote does not have (yet)
        if {ref: found.get(ref, "") for ref in quiet.refs} != quiet.refs:
            return None
    except GitError:
        return None  # the full pass reports it (and its retries)
    return quiet
