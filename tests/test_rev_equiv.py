"""Repo.rev and Repo.is_ancestor(x, x) answer without a git process where they can: held to git's own answers
(rev-parse ^{commit}, merge-base) over every shape a ref or an id can have (from the session-6 review)."""
from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from mergegate.git import Repo


def _git(repo: Path, *args: str, input: bytes | None = None, check: bool = True) -> str:
    env = {**os.environ, "GIT_CONFIG_GLOBAL": "/dev/null", "GIT_CONFIG_NOSYSTEM": "1", "GIT_AUTHOR_NAME": "a",
           "GIT_AUTHOR_EMAIL": "a@x", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@x"}
    return subprocess.run(["git", "-C", str(repo), *args], input=input, capture_output=True, check=check, env=env).stdout.decode().strip()


def _reference_rev(repo: Path, ref: str) -> str | None:
    if ref.startswith("refs/"):
        listed = _git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "--", ref, check=False)
        exact = [line.split(" ", 1)[1] for line in listed.splitlines() if line.split(" ", 1)[0] == ref]
        if not exact:
            return None
        ref = exact[0]
    out = subprocess.run(["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", "--end-of-options", ref + "^{commit}"],
                         capture_output=True, check=False)
    return out.stdout.decode().strip() or None if out.returncode == 0 else None


@pytest.fixture()
def shapes(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    (repo / "f").write_text("x\n")
    _git(repo, "add", "f")
    _git(repo, "commit", "-q", "-m", "one")
    c1 = _git(repo, "rev-parse", "HEAD")
    (repo / "f").write_text("y\n")
    _git(repo, "commit", "-q", "-am", "two")
    c2 = _git(repo, "rev-parse", "HEAD")
    tree = _git(repo, "rev-parse", "HEAD^{tree}")
    blob = _git(repo, "rev-parse", "HEAD:f")
    _git(repo, "tag", "-a", "-m", "t", "tagc", c1)
    tagc = _git(repo, "rev-parse", "tagc")
    _git(repo, "tag", "-a", "-m", "tt", "tagtag", "tagc")
    tagtag = _git(repo, "rev-parse", "tagtag")
    _git(repo, "tag", "-a", "-m", "tt", "tagtree", tree)
    tagtree = _git(repo, "rev-parse", "tagtree")
    _git(repo, "update-ref", "refs/remotes/o/to-tag", tagc)
    _git(repo, "update-ref", "refs/remotes/o/to-tagtag", tagtag)
    _git(repo, "update-ref", "refs/remotes/o/to-tree", tree)
    _git(repo, "update-ref", "refs/remotes/o/to-blob", blob)
    _git(repo, "update-ref", "refs/remotes/o/to-tagtree", tagtree)
    _git(repo, "symbolic-ref", "refs/heads/sym", "refs/heads/main")
    _git(repo, "update-ref", "refs/heads/packed", c1)
    _git(repo, "pack-refs", "--all")
    return repo, {"c1": c1, "c2": c2, "tree": tree, "blob": blob, "tagc": tagc, "tagtag": tagtag, "tagtree": tagtree}


def _assert_revs_as_git(repo: Path, names: list[str]) -> None:
    r = Repo(repo)
    try:
        got = {n: r.rev(n) for n in names}
    finally:
        r.close()
    assert got == {n: _reference_rev(repo, n) for n in names}


def test_rev_answers_what_rev_parse_answers(shapes: tuple[Path, dict[str, str]]) -> None:
    repo, ids = shapes
    names = ["refs/heads/main", "refs/remotes/o/to-tag", "refs/remotes/o/to-tagtag", "refs/remotes/o/to-tree", "refs/remotes/o/to-blob",
             "refs/remotes/o/to-tagtree", "refs/heads/sym", "refs/heads/packed", "refs/heads/absent", "refs/tags/tagc",
             *ids.values(), *(v.upper() for v in ids.values()), "0" * 40, "f" * 40, ids["c1"][:12]]
    _assert_revs_as_git(repo, names)


def test_rev_with_a_replace_object_answers_as_rev_parse(shapes: tuple[Path, dict[str, str]]) -> None:
    repo, ids = shapes
    _git(repo, "replace", "-f", ids["tree"], ids["c1"])  # a tree that reads as a commit
    _git(repo, "replace", "-f", ids["c2"], ids["blob"])  # a commit that reads as a blob
    names = ["refs/heads/main", "refs/remotes/o/to-tree", ids["tree"], ids["c2"], ids["c1"]]
    r = Repo(repo)
    try:
        got = {n: r.rev(n) for n in names}
        anc = {n: r.is_ancestor(n, n) for n in (ids["tree"], ids["c2"], ids["c1"])}
    finally:
        r.close()
    assert got == {n: _reference_rev(repo, n) for n in names}
    ref_anc = {n: subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", n, n], capture_output=True).returncode == 0
               for n in anc}
    assert anc == ref_anc


def test_is_ancestor_of_itself_answers_what_merge_base_answers(shapes: tuple[Path, dict[str, str]]) -> None:
    repo, ids = shapes
    r = Repo(repo)
    try:
        got = {k: r.is_ancestor(v, v) for k, v in ids.items()}
    finally:
        r.close()
    want = {k: subprocess.run(["git", "-C", str(repo), "merge-base", "--is-ancestor", v, v], capture_output=True).returncode == 0
            for k, v in ids.items()}
    assert got == want


def test_rev_of_a_ref_to_a_missing_object_or_a_pattern_answers_as_rev_parse(shapes: tuple[Path, dict[str, str]]) -> None:
    repo, ids = shapes
    (repo / ".git" / "refs" / "remotes" / "o").mkdir(parents=True, exist_ok=True)
    (repo / ".git" / "refs" / "remotes" / "o" / "broken").write_text("1" * 40 + "\n")
    _git(repo, "update-ref", "refs/remotes/o/[a]pproved", ids["c1"], check=False)
    _git(repo, "update-ref", "refs/remotes/o/approved", ids["c2"])
    names = ["refs/remotes/o/broken", "refs/remotes/o/[a]pproved", "refs/remotes/o/approved", "refs/remotes/o/appr*", "refs/remotes/o"]
    _assert_revs_as_git(repo, names)


def test_a_64_hex_name_in_a_sha1_repository_is_a_ref_name_not_an_id(shapes: tuple[Path, dict[str, str]]) -> None:
    """cat-file --batch-command resolves any name: in a SHA-1 clone 64 hex digits are no object id but may be a tag."""
    repo, ids = shapes
    name = "ab" * 32
    _git(repo, "tag", name, ids["c1"])  # anyone who may push tags can make one; clones fetch tags
    r = Repo(repo)
    try:
        got = r.rev(name)
    finally:
        r.close()
    assert got == _reference_rev(repo, name) == ids["c1"], got


def test_a_checker_moved_to_a_later_tip_knows_the_same_first_parent_line_as_one_that_reads_it_whole(tmp_path: Path) -> None:
    """Checker.moved_to reads only the new first-parent commits when the later tip continues the line it
    read (approved moved during a pass: merges landed); held to a checker that reads the later tip's whole
    line, also where it must not take the shortcut (a line that joins through a second parent; a rewind)."""
    from mergegate.audit_branch import Checker

    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "root")

    def merge_side(name: str) -> str:
        _git(repo, "checkout", "-q", "-b", name)
        _git(repo, "commit", "-q", "--allow-empty", "-m", f"{name} side")
        _git(repo, "checkout", "-q", "main")
        _git(repo, "merge", "-q", "--no-ff", "-m", f"merge {name}", name)
        return _git(repo, "rev-parse", "HEAD")

    root = _git(repo, "rev-parse", "HEAD")
    first = merge_side("a")
    merge_side("b")
    read = Repo(repo)
    checker = Checker(read, None, first, lambda sha: None)  # type: ignore[arg-type, return-value]
    checker._first_parent_line()

    def fresh(tip: str) -> dict[str, int]:
        return Checker(Repo(repo), None, tip, lambda sha: None)._first_parent_line()  # type: ignore[arg-type, return-value]

    later = merge_side("c")
    moved = checker.moved_to(later)
    assert moved._line  # the shortcut was taken: the line is known before anyone asks for it
    assert moved._first_parent_line() == fresh(later) and len(fresh(later)) == 4
    # A tip whose first parent is the root and whose second parent is the old tip: its line skips `first`.
    joined = _git(repo, "commit-tree", "-p", root, "-p", first, "-m", "joins", f"{root}^{{tree}}")
    moved = checker.moved_to(joined)
    assert not moved._line and moved._first_parent_line() == fresh(joined) == {joined: 0, root: 1}
    moved = checker.moved_to(root)  # a rewind
    assert not moved._line and moved._first_parent_line() == fresh(root) == {root: 0}


@pytest.mark.parametrize("replaced", [False, True], ids=["plain", "replace-objects"])
def test_revs_of_many_refs_in_one_process_answer_what_rev_parse_answers(shapes: tuple[Path, dict[str, str]], replaced: bool) -> None:
    """Repo.revs (the four refs a pass starts from, one for-each-ref) is held to rev-parse as Repo.rev is,
    also for names that are a prefix of another ref (for-each-ref matches those as patterns)."""
    repo, ids = shapes
    if replaced:
        _git(repo, "replace", "-f", ids["tree"], ids["c1"])
        _git(repo, "replace", "-f", ids["c2"], ids["blob"])
    _git(repo, "update-ref", "refs/remotes/o/main/under", ids["c1"])  # refs/remotes/o/main is a prefix of it, and absent
    names = ["refs/heads/main", "refs/remotes/o/to-tag", "refs/remotes/o/to-tagtag", "refs/remotes/o/to-tree", "refs/remotes/o/to-blob",
             "refs/remotes/o/to-tagtree", "refs/heads/sym", "refs/heads/packed", "refs/heads/absent", "refs/tags/tagc",
             "refs/remotes/o/main", "refs/remotes/o"]
    r = Repo(repo)
    try:
        got = r.revs(names)
    finally:
        r.close()
    assert got == {n: _reference_rev(repo, n) for n in names}
