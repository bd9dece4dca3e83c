"""`mergegate lint`: validate job and policy files in a working tree, offline.

The same parsers the runner uses (`parse_job`, `load_policy`), so a file that lints clean is one the
runner can read; whether the policy in force allows the command is `check`'s question, which needs
the gate's history.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path

from mergegate.errors import MergegateError
from mergegate.rules import config
from mergegate.rules.job import JOBS_DIR, check_unique_ids, is_job_path, parse_job
from mergegate.rules.policy import POLICY_DIR, POLICY_FILE, load_policy

ZERO = "0" * 40


@dataclass(frozen=True)
class Finding:
    path: str  # as given on the command line
    ok: bool
    message: str
    line: int | None = None
    hint: str | None = None

    def as_json(self) -> dict[str, object]:
        return {
            "path": self.path,
            "ok": self.ok,
            "message": self.message,
            "line": self.line,
            "hint": self.hint,
        }


def lint(paths: list[Path], *, root: Path) -> list[Finding]:
    """One finding per path; a policy/ path lints policy/policy.yaml with the key files it reads."""
    findings: list[Finding] = []
    policy_done = False
    unique: dict[str, str] | None = None
    for given in paths:
        rel = _relative(given, root)
        shown = str(given)
        if rel is None:
            findings.append(Finding(shown, False, f"not inside the repository at {root}"))
        elif rel.startswith(POLICY_DIR):
            if policy_done:
                continue  # one verdict for the policy, however many of its files changed
            policy_done = True
            findings.append(_lint_policy(root, shown if rel == POLICY_FILE else POLICY_FILE))
        elif is_job_path(rel):
            if unique is None:
                unique = check_unique_ids(sorted(_job_paths(root)))
            findings.extend(_lint_job(root, rel, shown, unique.get(rel)))
        elif rel.startswith(JOBS_DIR):
            findings.append(
                Finding(shown, True, "not a job file (jobs end in .yaml or .yml); ignored")
            )
        else:
            findings.append(
                Finding(
                    shown,
                    False,
                    "neither a job file (jobs/ID.yaml) nor under policy/",
                    hint="jobs live under jobs/ at the repository root",
                )
            )
    return findings


def _relative(given: Path, root: Path) -> str | None:
    try:
        return Path(os.path.abspath(given)).relative_to(root).as_posix()
    except ValueError:
        return None


def _job_paths(root: Path) -> list[str]:
    jobs = root / JOBS_DIR
    if not jobs.is_dir():
        return []
    return [
        p.relative_to(root).as_posix()
        for p in jobs.rglob("*")
        if p.is_file() and is_job_path(p.relative_to(root).as_posix())
    ]


class _Symlink(Exception):
    def __init__(self, rel: str) -> None:
        super().__init__(rel)
        self.rel = rel


def _read_regular(root: Path, rel: str) -> bytes | None:
    """The bytes of `rel` under `root`, or None where there is no such file.

    A symlink, at the file or at any folder on the way to it, raises _Symlink before anything is
    read: `check` and the runner refuse a symlinked job or policy file, and lint must neither
    pass one nor print what it points at (jobs/x.yaml -> ~/.git-credentials, issue 22 item 3).
    """
    here = root
    for part in Path(rel).parts:
        here = here / part
        try:
            if stat.S_ISLNK(os.lstat(here).st_mode):
                raise _Symlink(here.relative_to(root).as_posix())
        except FileNotFoundError:
            return None
    if not here.is_file():
        return None
    fd = os.open(here, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    with os.fdopen(fd, "rb") as file:
        return file.read()


_SYMLINK_HINT = "job and policy files must be regular files in git; the runner refuses a symlink"


def _lint_job(root: Path, rel: str, shown: str, not_unique: str | None) -> list[Finding]:
    try:
        text = _read_regular(root, rel)
    except _Symlink as link:
        return [Finding(shown, False, f"{link.rel} is a symlink; not read", hint=_SYMLINK_HINT)]
    except OSError as exc:
        return [Finding(shown, False, f"cannot read: {exc.strerror}")]
    if text is None:
        return [Finding(shown, False, "cannot read: No such file or directory")]
    try:
        job = parse_job(text, path=rel, blob=ZERO)
    except MergegateError as exc:
        return [
            Finding(shown, False, p.message, p.line, p.hint) for p in _every_problem(text, rel, exc)
        ]
    if not_unique is not None:
        return [
            Finding(
                shown,
                False,
                not_unique,
                hint="every job id (its file name) must be unique under jobs/",
            )
        ]
    return [Finding(shown, True, f"job {job.id}: {' '.join(job.command)[:80]}")]


def _every_problem(text: bytes, rel: str, first: MergegateError) -> list[MergegateError]:
    """The schema's every problem (capped at config.MAX_PROBLEMS) when the first was one of them,
    so a file is fixed in one round, not one error per run; else the one error."""
    try:
        found = config.problems(config.parse_yaml(text, file=rel), schema="job")
    except MergegateError:
        return [first]
    return list(found) if found and found[0].message == first.message else [first]


def _lint_policy(root: Path, shown: str) -> Finding:
    def read(path: str) -> bytes | None:
        return _read_regular(root, path)

    try:
        policy = load_policy(read, commit=ZERO)
    except _Symlink as link:
        return Finding(shown, False, f"{link.rel} is a symlink; not read", hint=_SYMLINK_HINT)
    except MergegateError as exc:
        hint = (
            exc.hint
            if exc.message != f"no {POLICY_FILE} at {ZERO[:7]}"
            else "write policy/policy.yaml (mergegate init writes one)"
        )
        return Finding(
            shown if exc.file in (None, POLICY_FILE) else exc.file or shown,
            False,
            exc.message.replace(f" at {ZERO[:7]}", ""),
            exc.line,
            hint,
        )
    return Finding(
        shown,
        True,
        f"policy: {len(policy.approvers)} approver(s), {len(policy.commands)} command rule(s)",
    )
