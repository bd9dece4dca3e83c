"""Histories where verify's fast reading (history.History) could answer unlike git (the runner's
reading):
trees git never writes, and a user's git config (from a differential fuzz; notes/histrt.md). Each
failed before its fix: History now declines a history whose diffs list a path twice (verify then
asks git, as the runner does), and git.py pins log.follow=false. Not covered: a tree entry whose
name holds a `/` (fsck's fullPathname), which diffs cannot show; see docs/threat-model.md.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path

from mergegate.facts.assessor import Assessor
from mergegate.facts.git_side import GitSide
from mergegate.facts.history import History
from mergegate.git.repo import Repo
from mergegate.rules.model import Entry
from mergegate.rules.policy import load_policy
from tests.helpers.keys import shared_ssh_key


def _git(repo: Path, *args: str, input: bytes | None = None, date: int = 1000) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "bob",
        "GIT_AUTHOR_EMAIL": "bob@example.com",
        "GIT_COMMITTER_NAME": "bob",
        "GIT_COMMITTER_EMAIL": "bob@example.com",
        "GIT_AUTHOR_DATE": f"@{date} +0000",
        "GIT_COMMITTER_DATE": f"@{date} +0000",
    }
    proc = subprocess.run(["git", *args], cwd=repo, input=input, capture_output=True, env=env)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.decode().strip()


def _blob(repo: Path, data: bytes) -> str:
    return _git(repo, "hash-object", "-w", "--stdin", input=data)


def _tree(repo: Path, entries: list[tuple[str, str, str]]) -> str:
    """A tree object with exactly these entries in this order (no sorting, no fsck: what a hostile
    push can hold)."""
    raw = b"".join(
        mode.encode() + b" " + name.encode() + b"\0" + bytes.fromhex(sha)
        for mode, name, sha in entries
    )
    return _git(repo, "hash-object", "-w", "-t", "tree", "--literally", "--stdin", input=raw)


def _commit(repo: Path, tree: str, parents: list[str], date: int, message: str) -> str:
    return _git(
        repo,
        "commit-tree",
        tree,
        *(a for p in parents for a in ("-p", p)),
        "-m",
        message,
        date=date,
    )


def _policy(tmp_path: Path) -> bytes:
    key = shared_ssh_key(tmp_path / "keys", "alice")
    return (
        "version: 1\napprovers:\n  - name: alice\n    email: alice@example.com\n    key: "
        f'"{key.public_line}"\n'
        "approvals_required: 1\ncommands:\n  - program: echo\n"
    ).encode()


def test_a_side_commit_with_an_unsorted_tree_has_the_entries_git_lists(tmp_path: Path) -> None:
    """Finding 1. A side commit whose tree lists `jobs` after `z.txt` (unsorted: git never writes
    it, but hash-object --literally does, and neither receive-pack nor fetch checks by default).
    git's diff-tree against its parent then reports jobs/j.yaml twice, deleted and then added;
    `ls-tree` (what GitSide reads) lists it with its new bytes. History.entry for a commit off the
    first-parent line returns the FIRST change of the path in the diff (history.py, `entry`: `for
    change in self.diffs[sha]: ... return`), the deletion: the side's entry is ABSENT for verify and
    the new job for the runner, so the judge decides who wrote the job (the side, or the merge
    itself) differently."""
    repo = tmp_path / "gate.git"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    policy_tree = _tree(repo, [("100644", "policy.yaml", _blob(repo, _policy(tmp_path)))])
    old, new, z = (
        _blob(repo, b"id: j\ncommand: [echo, j]\n"),
        _blob(repo, b"id: j\ncommand: [echo, k]\n"),
        _blob(repo, b"z"),
    )
    jobs_old, jobs_new = (
        _tree(repo, [("100644", "j.yaml", old)]),
        _tree(repo, [("100644", "j.yaml", new)]),
    )
    root = _commit(
        repo,
        _tree(
            repo,
            [("40000", "jobs", jobs_old), ("40000", "policy", policy_tree), ("100644", "z.txt", z)],
        ),
        [],
        1000,
        "R",
    )
    # The side's tree: the same entries, `jobs` (with the new job) listed last.
    side = _commit(
        repo,
        _tree(
            repo,
            [("40000", "policy", policy_tree), ("100644", "z.txt", z), ("40000", "jobs", jobs_new)],
        ),
        [root],
        1010,
        "s",
    )
    merged = _tree(
        repo,
        [("40000", "jobs", jobs_new), ("40000", "policy", policy_tree), ("100644", "z.txt", z)],
    )
    merge = _commit(repo, merged, [root, side], 1020, "M")
    _git(repo, "update-ref", "refs/heads/approved", merge)

    git_repo = Repo(repo)
    history = History.read(git_repo, root, [merge])
    slow = GitSide(Assessor(git_repo), root, side)
    fast = (
        history.side(merge, root, side) if history is not None else None
    ) or slow  # declined: git answers
    assert slow.entry(side, "jobs/j.yaml") == Entry("100644", new)
    assert fast.entry(side, "jobs/j.yaml") == slow.entry(side, "jobs/j.yaml"), "History says ABSENT"

    # And so the facts the judge is handed differ (FileFacts.side of jobs/j.yaml).
    policy = load_policy(lambda p: git_repo.read_file(root, p), commit=root)
    at = datetime.now(UTC)
    with_history = Assessor(git_repo, history=history).facts(merge, policy, {}, at=at)
    without = Assessor(Repo(repo)).facts(merge, policy, {}, at=at)
    assert [f.side for f in with_history.files] == [f.side for f in without.files]
    # The judge's "the merge itself wrote this content" (its signer then a writer, its approvals
    # refused).
    assert [f.merge_wrote for f in with_history.files] == [f.merge_wrote for f in without.files]
    assert with_history == without


def test_a_symlink_in_a_merge_whose_first_parent_has_an_unsorted_tree_is_seen(
    tmp_path: Path,
) -> None:
    """Finding 1, on the first-parent line: D1 (a direct push) lists `jobs` after `z.txt`; the merge
    M after it is canonical. diff-tree D1 M then reports jobs/evil.yaml added and then deleted, and
    History's entry on the line (the LAST change of the path, history.py `entry`/`__init__`'s
    `_changes`) says it is absent at M; ls-tree M lists it. So verify does not see the escaping
    symlink jobs/evil.yaml -> ../.. in M's tree (CommitFacts.symlinks, the judge's symlink check)
    while the runner does."""
    repo = tmp_path / "gate.git"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    policy_tree = _tree(repo, [("100644", "policy.yaml", _blob(repo, _policy(tmp_path)))])
    z, link, job = (
        _blob(repo, b"z"),
        _blob(repo, b"../.."),
        _blob(repo, b"id: new\ncommand: [echo, new]\n"),
    )
    root = _commit(
        repo, _tree(repo, [("40000", "policy", policy_tree), ("100644", "z.txt", z)]), [], 1000, "R"
    )
    jobs1 = _tree(repo, [("120000", "evil.yaml", link)])
    pushed = _commit(
        repo,
        _tree(
            repo,
            [("40000", "policy", policy_tree), ("100644", "z.txt", z), ("40000", "jobs", jobs1)],
        ),
        [root],
        1010,
        "D1",
    )
    jobs2 = _tree(repo, [("120000", "evil.yaml", link), ("100644", "new.yaml", job)])
    canonical = _tree(
        repo, [("40000", "jobs", jobs2), ("40000", "policy", policy_tree), ("100644", "z.txt", z)]
    )
    side = _commit(repo, canonical, [pushed], 1020, "s")
    merge = _commit(repo, canonical, [pushed, side], 1030, "M")
    _git(repo, "update-ref", "refs/heads/approved", merge)

    git_repo = Repo(repo)
    history = History.read(git_repo, root, [pushed, merge])
    slow = GitSide(Assessor(git_repo), pushed, side)
    fast = (
        history.side(merge, pushed, side) if history is not None else None
    ) or slow  # declined: git answers
    assert slow.symlinks(merge) == (("jobs/evil.yaml", link),)
    assert fast.symlinks(merge) == slow.symlinks(merge), "History sees no symlink"
    policy = load_policy(lambda p: git_repo.read_file(root, p), commit=root)
    at = datetime.now(UTC)
    with_history = Assessor(git_repo, history=history).facts(merge, policy, {}, at=at)
    without = Assessor(Repo(repo)).facts(merge, policy, {}, at=at)
    assert with_history.symlinks == without.symlinks


def _repo_with_side_tree(
    tmp_path: Path, build: Callable[[Path, str], list[tuple[str, str, str]]]
) -> tuple[Repo, str, str, str]:
    """R (canonical), a side commit s whose tree `build` writes, and the merge M of s (the same
    tree)."""
    repo = tmp_path / "gate.git"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    policy_tree = _tree(repo, [("100644", "policy.yaml", _blob(repo, _policy(tmp_path)))])
    root = _commit(
        repo,
        _tree(repo, [("100644", "a", _blob(repo, b"a")), ("40000", "policy", policy_tree)]),
        [],
        1000,
        "R",
    )
    entries = build(repo, policy_tree)
    side = _commit(repo, _tree(repo, entries), [root], 1010, "s")
    merge = _commit(repo, _tree(repo, entries), [root, side], 1020, "M")
    _git(repo, "update-ref", "refs/heads/approved", merge)
    return Repo(repo), root, side, merge


def test_a_tree_with_a_name_twice_has_the_entry_git_lists(tmp_path: Path) -> None:
    """Finding 1 (duplicate entries): the side's jobs/ lists j.yaml twice, a regular file and then a
    symlink. ls-tree lists both (the Assessor's dict keeps the last, the symlink); diff-tree reports
    both as added and History.entry off the line keeps the first (the regular file): FileFacts.side
    of jobs/j.yaml differs."""

    def build(repo: Path, policy_tree: str) -> list[tuple[str, str, str]]:
        jobs = _tree(
            repo,
            [
                ("100644", "j.yaml", _blob(repo, b"id: j\ncommand: [echo]\n")),
                ("120000", "j.yaml", _blob(repo, b"../..")),
            ],
        )
        return [
            ("100644", "a", _blob(repo, b"a")),
            ("40000", "jobs", jobs),
            ("40000", "policy", policy_tree),
        ]

    git_repo, root, side, merge = _repo_with_side_tree(tmp_path, build)
    history = History.read(git_repo, root, [merge])
    slow = GitSide(Assessor(git_repo), root, side)
    fast = (
        history.side(merge, root, side) if history is not None else None
    ) or slow  # declined: git answers
    assert slow.entry(side, "jobs/j.yaml").mode == "120000"
    assert fast.entry(side, "jobs/j.yaml") == slow.entry(side, "jobs/j.yaml")


def test_earlier_writers_are_gits_whatever_log_follow_says(tmp_path: Path) -> None:
    """Finding 2. `Repo.producers` (the runner's earlier writers, the git reference of
    Side.producers) runs porcelain `git log ... -- <one pathspec>`; with `log.follow=true` in the
    user's config and one path asked (a merge that brings one job file), git log follows renames and
    prints a rename as `R100 <old> <new>`: the parser takes <old> as the path (git.py producers:
    `path = path_text(fields[i + 1])`) and the writer of <new> is lost. History reads no config and
    keeps it: verify's and the runner's writers differ, and the runner's misses bob (who wrote these
    bytes in s1) for the self-approval check."""
    repo = tmp_path / "gate.git"
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    policy_tree = _tree(repo, [("100644", "policy.yaml", _blob(repo, _policy(tmp_path)))])
    job = _blob(repo, b"id: j\ncommand: [echo, j]\n")

    def tree(**jobs: str) -> str:
        entries = (
            [
                (
                    "40000",
                    "jobs",
                    _tree(repo, [("100644", name, blob) for name, blob in sorted(jobs.items())]),
                )
            ]
            if jobs
            else []
        )
        return _tree(repo, [*entries, ("40000", "policy", policy_tree)])

    root = _commit(repo, tree(**{"old.yaml": job}), [], 1000, "R")
    s1 = _commit(
        repo, tree(**{"j.yaml": job}), [root], 1010, "s1: rename old.yaml to j.yaml"
    )  # bob
    m1 = _commit(repo, tree(**{"j.yaml": job}), [root, s1], 1020, "M1")
    d2 = _commit(repo, tree(), [m1], 1030, "D2: delete j.yaml")
    s3 = _commit(repo, tree(**{"j.yaml": job}), [d2], 1040, "s3: j.yaml again, the same bytes")
    m3 = _commit(repo, tree(**{"j.yaml": job}), [d2, s3], 1050, "M3")
    _git(repo, "update-ref", "refs/heads/approved", m3)

    config = Path(os.environ["GIT_CONFIG_GLOBAL"])
    config.write_text(config.read_text() + "[log]\n\tfollow = true\n")
    git_repo = Repo(repo)
    history = History.read(git_repo, root, [m1, d2, m3])
    assert history is not None
    fast = history.side(m3, d2, s3)
    assert fast is not None
    files = {"jobs/j.yaml": job}
    assert fast.producers(files) == {"jobs/j.yaml": [s3, s1]}
    assert git_repo.producers(m3, files) == fast.producers(files), (
        "git log --follow lost s1 (R100 jobs/old.yaml jobs/j.yaml)"
    )
