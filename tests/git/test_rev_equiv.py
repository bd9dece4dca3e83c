"""Repo.rev and Repo.is_ancestor(x, x) answer without a git process where they can: held to git's
own answers (rev-parse ^{commit}, merge-base) over every shape a ref or an id can have (from the
session-6 review)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from mergegate.git.repo import Repo
from mergegate.git.trees import ls_tree_entries


def _git(repo: Path, *args: str, input: bytes | None = None, check: bool = True) -> str:
    env = {
        **os.environ,
        "GIT_CONFIG_GLOBAL": "/dev/null",
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_AUTHOR_NAME": "a",
        "GIT_AUTHOR_EMAIL": "a@x",
        "GIT_COMMITTER_NAME": "a",
        "GIT_COMMITTER_EMAIL": "a@x",
    }
    return (
        subprocess.run(
            ["git", "-C", str(repo), *args], input=input, capture_output=True, check=check, env=env
        )
        .stdout.decode()
        .strip()
    )


def _reference_rev(repo: Path, ref: str) -> str | None:
    if ref.startswith("refs/"):
        listed = _git(
            repo, "for-each-ref", "--format=%(refname) %(objectname)", "--", ref, check=False
        )
        exact = [
            line.split(" ", 1)[1] for line in listed.splitlines() if line.split(" ", 1)[0] == ref
        ]
        if not exact:
            return None
        ref = exact[0]
    out = subprocess.run(
        [
            "git",
            "-C",
            str(repo),
            "rev-parse",
            "--verify",
            "--quiet",
            "--end-of-options",
            ref + "^{commit}",
        ],
        capture_output=True,
        check=False,
    )
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
    return repo, {
        "c1": c1,
        "c2": c2,
        "tree": tree,
        "blob": blob,
        "tagc": tagc,
        "tagtag": tagtag,
        "tagtree": tagtree,
    }


def _assert_revs_as_git(repo: Path, names: list[str]) -> None:
    r = Repo(repo)
    try:
        got = {n: r.rev(n) for n in names}
    finally:
        r.close()
    assert got == {n: _reference_rev(repo, n) for n in names}


def test_rev_answers_what_rev_parse_answers(shapes: tuple[Path, dict[str, str]]) -> None:
    repo, ids = shapes
    names = [
        "refs/heads/main",
        "refs/remotes/o/to-tag",
        "refs/remotes/o/to-tagtag",
        "refs/remotes/o/to-tree",
        "refs/remotes/o/to-blob",
        "refs/remotes/o/to-tagtree",
        "refs/heads/sym",
        "refs/heads/packed",
        "refs/heads/absent",
        "refs/tags/tagc",
        *ids.values(),
        *(v.upper() for v in ids.values()),
        "0" * 40,
        "f" * 40,
        ids["c1"][:12],
    ]
    _assert_revs_as_git(repo, names)


def test_rev_with_a_replace_object_answers_as_rev_parse(
    shapes: tuple[Path, dict[str, str]],
) -> None:
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
    ref_anc = {
        n: subprocess.run(
            ["git", "-C", str(repo), "merge-base", "--is-ancestor", n, n], capture_output=True
        ).returncode
        == 0
        for n in anc
    }
    assert anc == ref_anc


def test_is_ancestor_of_itself_answers_what_merge_base_answers(
    shapes: tuple[Path, dict[str, str]],
) -> None:
    repo, ids = shapes
    r = Repo(repo)
    try:
        got = {k: r.is_ancestor(v, v) for k, v in ids.items()}
    finally:
        r.close()
    want = {
        k: subprocess.run(
            ["git", "-C", str(repo), "merge-base", "--is-ancestor", v, v], capture_output=True
        ).returncode
        == 0
        for k, v in ids.items()
    }
    assert got == want


def test_rev_of_a_ref_to_a_missing_object_or_a_pattern_answers_as_rev_parse(
    shapes: tuple[Path, dict[str, str]],
) -> None:
    repo, ids = shapes
    (repo / ".git" / "refs" / "remotes" / "o").mkdir(parents=True, exist_ok=True)
    (repo / ".git" / "refs" / "remotes" / "o" / "broken").write_text("1" * 40 + "\n")
    _git(repo, "update-ref", "refs/remotes/o/[a]pproved", ids["c1"], check=False)
    _git(repo, "update-ref", "refs/remotes/o/approved", ids["c2"])
    names = [
        "refs/remotes/o/broken",
        "refs/remotes/o/[a]pproved",
        "refs/remotes/o/approved",
        "refs/remotes/o/appr*",
        "refs/remotes/o",
    ]
    _assert_revs_as_git(repo, names)


def test_a_64_hex_name_in_a_sha1_repository_is_a_ref_name_not_an_id(
    shapes: tuple[Path, dict[str, str]],
) -> None:
    """cat-file --batch-command resolves any name: in a SHA-1 clone 64 hex digits are no object id
    but may be a tag."""
    repo, ids = shapes
    name = "ab" * 32
    _git(repo, "tag", name, ids["c1"])  # anyone who may push tags can make one; clones fetch tags
    r = Repo(repo)
    try:
        got = r.rev(name)
    finally:
        r.close()
    assert got == _reference_rev(repo, name) == ids["c1"], got


def test_a_checker_moved_to_a_later_tip_knows_the_same_first_parent_line_as_one_that_reads_it_whole(
    tmp_path: Path,
) -> None:
    """Checker.moved_to reads only the new first-parent commits when the later tip continues the
    line it read (approved moved during a pass: merges landed); held to a checker that reads the
    later tip's whole line, also where it must not take the shortcut (a line that joins through a
    second parent; a rewind)."""
    from mergegate.facts.audit_commits import Checker

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
    # A tip whose first parent is the root and whose second parent is the old tip: its line skips
    # `first`.
    joined = _git(repo, "commit-tree", "-p", root, "-p", first, "-m", "joins", f"{root}^{{tree}}")
    moved = checker.moved_to(joined)
    assert not moved._line and moved._first_parent_line() == fresh(joined) == {joined: 0, root: 1}
    moved = checker.moved_to(root)  # a rewind
    assert not moved._line and moved._first_parent_line() == fresh(root) == {root: 0}


@pytest.mark.parametrize("replaced", [False, True], ids=["plain", "replace-objects"])
def test_revs_of_many_refs_in_one_process_answer_what_rev_parse_answers(
    shapes: tuple[Path, dict[str, str]], replaced: bool
) -> None:
    """Repo.revs (the four refs a pass starts from, one for-each-ref) is held to rev-parse as
    Repo.rev is, also for names that are a prefix of another ref (for-each-ref matches those as
    patterns)."""
    repo, ids = shapes
    if replaced:
        _git(repo, "replace", "-f", ids["tree"], ids["c1"])
        _git(repo, "replace", "-f", ids["c2"], ids["blob"])
    _git(
        repo, "update-ref", "refs/remotes/o/main/under", ids["c1"]
    )  # refs/remotes/o/main is a prefix of it, and absent
    names = [
        "refs/heads/main",
        "refs/remotes/o/to-tag",
        "refs/remotes/o/to-tagtag",
        "refs/remotes/o/to-tree",
        "refs/remotes/o/to-blob",
        "refs/remotes/o/to-tagtree",
        "refs/heads/sym",
        "refs/heads/packed",
        "refs/heads/absent",
        "refs/tags/tagc",
        "refs/remotes/o/main",
        "refs/remotes/o",
    ]
    r = Repo(repo)
    try:
        got = r.revs(names)
    finally:
        r.close()
    assert got == {n: _reference_rev(repo, n) for n in names}


def test_rev_of_a_full_ref_name_read_from_the_ref_files_answers_as_for_each_ref(
    shapes: tuple[Path, dict[str, str]],
) -> None:
    """Repo.rev reads a `refs/...` name from its loose file or its packed-refs line (no for-each-ref
    process) where the files say what git says; every shape a ref's files can have, against
    for-each-ref + rev-parse."""
    from mergegate.git.values import _ASK_GIT

    repo, ids = shapes
    git_dir = repo / ".git"
    for name, sha in [
        ("refs/heads/only-packed", ids["c2"]),
        ("refs/heads/both", ids["c1"]),
        ("refs/heads/a", ids["c1"]),
        ("refs/heads/ab", ids["c2"]),
        ("refs/remotes/o/refs/heads/x", ids["c1"]),
        ("refs/heads/x@y+z=w-v", ids["c2"]),
        ("refs/tags/packed-tag", ids["tagc"]),
        ("refs/heads/d/e", ids["c1"]),
    ]:
        _git(repo, "update-ref", name, sha)
    _git(repo, "pack-refs", "--all")
    _git(
        repo, "update-ref", "refs/heads/both", ids["c2"]
    )  # loose now c2, packed still c1: the loose one wins
    _git(repo, "update-ref", "refs/heads/loose-only", ids["c1"])
    loose = git_dir / "refs" / "heads"
    for name, text in [
        ("crlf", ids["c1"] + "\r\n"),
        ("no-newline", ids["c1"]),
        ("upper", ids["c1"].upper() + "\n"),
        ("empty", ""),
        ("trailing", ids["c1"] + " x\n"),
        ("two-lines", ids["c1"] + "\n" + ids["c2"] + "\n"),
        ("to-sym", "ref: refs/heads/main\n"),
        ("short", ids["c1"][:39] + "\n"),
    ]:
        (loose / name).write_text(text)
    (loose / "link").symlink_to(loose / "main")
    (loose / "dir" / "inner").mkdir(parents=True)
    plain = [
        "refs/heads/main",
        "refs/heads/only-packed",
        "refs/heads/both",
        "refs/heads/a",
        "refs/heads/ab",
        "refs/remotes/o/refs/heads/x",
        "refs/heads/x@y+z=w-v",
        "refs/tags/packed-tag",
        "refs/heads/d/e",
        "refs/heads/loose-only",
        "refs/heads/packed",
        "refs/tags/tagc",
        "refs/heads/absent",
        "refs/heads/x",
        "refs/heads/d",
        "refs/remotes/o/to-tree",
        "refs/remotes/o/to-blob",
    ]
    odd = [
        "refs/heads/crlf",
        "refs/heads/no-newline",
        "refs/heads/upper",
        "refs/heads/empty",
        "refs/heads/trailing",
        "refs/heads/two-lines",
        "refs/heads/to-sym",
        "refs/heads/short",
        "refs/heads/link",
        "refs/heads/dir",
        "refs/heads/dir/inner",
        "refs/heads/main/below",
        "refs/heads/sym",
        "refs/heads/a..b",
        "refs/heads/x.lock",
        "refs/heads/.hidden",
        "refs/heads/end.",
        "refs/heads/",
        "refs/heads//main",
        "refs/heads/ma*",
        "refs/heads/m i",
    ]
    _assert_revs_as_git(repo, plain + odd)
    r = Repo(repo)
    try:
        assert all(
            r._ref_from_files(name) is not _ASK_GIT for name in plain
        )  # the files answered these
        assert r.revs(plain) == {
            n: _reference_rev(repo, n) for n in plain
        }  # revs too, without for-each-ref
        assert all(
            r._ref_from_files(name) is _ASK_GIT for name in odd if name != "refs/heads/main/below"
        )
    finally:
        r.close()


def test_rev_from_the_ref_files_of_a_packed_refs_file_git_did_not_write_or_a_worktree_asks_git(
    tmp_path: Path,
) -> None:
    from mergegate.git.values import _ASK_GIT

    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "one")
    c1 = _git(repo, "rev-parse", "HEAD")
    _git(repo, "commit", "-q", "--allow-empty", "-m", "two")
    c2 = _git(repo, "rev-parse", "HEAD")
    _git(repo, "update-ref", "refs/heads/p", c1)
    _git(repo, "update-ref", "refs/heads/q", c2)
    _git(repo, "pack-refs", "--all")
    packed = repo / ".git" / "packed-refs"
    text = packed.read_text()
    header, *lines = text.splitlines(keepends=True)
    assert header.startswith("# pack-refs with:") and len(lines) == 3, text
    r = Repo(repo)
    try:
        assert (
            r._ref_from_files("refs/heads/p") == c1 and r._ref_from_files("refs/heads/nope") is None
        )  # as git wrote it
    finally:
        r.close()
    names = ["refs/heads/p", "refs/heads/q", "refs/heads/main", "refs/heads/nope"]
    for variant in [
        text.rstrip("\n"),
        text + f"{c2} refs/heads/p\n",
        header + lines[2] + lines[1] + lines[0],
        "".join(lines),
        "# pack-refs with: peeled\n" + "".join(lines),
        header + f"^{c1}\n" + "".join(lines),
        text + f"^{c1}\n^{c2}\n",
        header + "# a comment\n" + "".join(lines),
        text.replace("\n", "\r\n"),
        text.replace(f"{c1} refs/heads/p", f"{c1}  refs/heads/p"),
        text + f"{c2} refs/heads/has space\n",
        "",
    ]:
        packed.write_text(
            variant
        )  # what git would not write (or would, without sorting it): git's answers either way
        _assert_revs_as_git(repo, names)
    packed.write_text(text)
    _git(repo, "worktree", "add", "-q", str(tmp_path / "wt"), c1)
    _git(
        tmp_path / "wt", "update-ref", "refs/bisect/bad", c2
    )  # a per-worktree ref: in the worktree's git dir
    for where in (repo, tmp_path / "wt"):
        _assert_revs_as_git(
            where, ["refs/heads/p", "refs/heads/q", "refs/bisect/bad", "refs/heads/main"]
        )
    r = Repo(tmp_path / "wt")
    try:
        assert r._ref_from_files("refs/heads/p") is _ASK_GIT
    finally:
        r.close()


def _reference_ls_tree(repo: Path, commit: str, prefix: str) -> object:
    """What Repo.ls_tree answered before it read trees itself: `git ls-tree -r -z --full-tree`."""
    args = ["ls-tree", "-r", "-z", "--full-tree", commit] + (["--", prefix] if prefix else [])
    proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)
    return "error" if proc.returncode != 0 else ls_tree_entries(proc.stdout)


def test_ls_tree_read_through_the_object_process_lists_what_ls_tree_lists(tmp_path: Path) -> None:
    """Repo.ls_tree walks the trees through cat-file (no ls-tree process) where it can: every shape
    of tree and prefix against `git ls-tree -r`, and git asked where the walk could differ."""
    from mergegate.errors import GitError

    repo = tmp_path / "r"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    files = {
        "a": "1",
        "b.txt": "2",
        "jobs/x.yaml": "3",
        "jobs/sub/y.yaml": "4",
        "jobs/sub/deeper/z": "5",
        "jobs-x/w": "6",
        "jobs.d/v": "7",
        "policy/policy.yaml": "8",
        "policy/keys/k": "9",
        "sp ace/f": "10",
        "file": "11",
        "é/ü": "12",
        "nl\nname": "13",
        "jobs/sub.x": "14",
        "jobs/sub-": "15",
    }
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    (repo / "run.sh").write_text("#!/bin/sh\n")
    (repo / "run.sh").chmod(0o755)
    (repo / "link").symlink_to("a")
    _git(repo, "add", "-A")
    blob = _git(repo, "hash-object", "-w", "--stdin", input=b"raw\n")
    _git(
        repo, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},jobs/module"
    )  # a gitlink
    not_utf8 = b"\xff-not-utf8".decode("utf-8", "surrogateescape")  # passed to git as the raw byte
    _git(repo, "update-index", "--add", "--cacheinfo", f"100644,{blob},{not_utf8}")
    _git(repo, "commit", "-q", "-m", "one")
    commit = _git(repo, "rev-parse", "HEAD")
    tree = _git(repo, "rev-parse", "HEAD^{tree}")
    jobs_tree = _git(repo, "rev-parse", "HEAD:jobs")
    _git(repo, "tag", "-a", "-m", "t", "t1", commit)
    tag = _git(repo, "rev-parse", "t1")
    # A tree git would not write (entries out of order): listed by git, not by the walk.
    raw = bytes.fromhex(_git(repo, "rev-parse", "HEAD:a"))
    unordered = _git(
        repo,
        "hash-object",
        "-w",
        "-t",
        "tree",
        "--literally",
        "--stdin",
        input=b"100644 b\0" + raw + b"100644 a\0" + raw,
    )
    prefixes = [
        "",
        "jobs/",
        "jobs/sub/",
        "jobs/sub/deeper/",
        "policy/",
        "missing/",
        "file/",
        "a/",
        "sp ace/",
        "jobs",
        "jobs/x.yaml",
        "jobs/*",
        "./jobs/",
        "jobs//",
        ":(icase)JOBS/",
    ]
    r = Repo(repo)
    try:
        for name in (
            commit,
            tree,
            jobs_tree,
            tag,
            blob,
            unordered,
            "HEAD",
            "main",
            "0" * 40,
            commit.upper(),
        ):
            for prefix in prefixes:
                try:
                    got: object = r.ls_tree(name, prefix)
                except GitError:
                    got = "error"
                assert got == _reference_ls_tree(repo, name, prefix), (name, prefix)
        assert (
            r._ls_tree_objects(commit, "")
            and r._ls_tree_objects(tree, "jobs/")
            and r._ls_tree_objects(commit, "missing/") == []
        )
        assert r._ls_tree_objects(unordered, "") is None and r._ls_tree_objects(tag, "") is None
    finally:
        r.close()
    # ls_tree_flat: one folder's entries (trees too, their mode as ls-tree prints it), against
    # `ls-tree <commit>:<dir>`.
    for name in (commit, tree, jobs_tree, tag, blob, unordered, "HEAD", "0" * 40):
        for directory in [
            "",
            "jobs/",
            "jobs/sub/",
            "policy/",
            "missing/",
            "file/",
            "a/",
            "sp ace/",
            "jobs",
            "jobs/x.yaml",
            "./jobs/",
            "jobs//",
            "jobs/sub/deeper/",
        ]:
            r = Repo(repo)  # a fresh one each time: ls_tree_flat keeps what it listed
            try:
                assert r.ls_tree_flat(name, directory) == _reference_ls_flat(
                    repo, name, directory
                ), (name, directory)
            finally:
                r.close()
    r = Repo(repo)
    try:
        assert ("040000", jobs_tree, "jobs") in r._ls_flat_objects(commit, "")  # type: ignore[operator]
        assert (
            r._ls_flat_objects(commit, "jobs/sub/") and r._ls_flat_objects(commit, "missing/") == []
        )
        assert (
            r._ls_flat_objects(unordered, "") is None
            and r._ls_flat_objects(commit, "file/") is None
        )
    finally:
        r.close()


def _reference_ls_flat(repo: Path, commit: str, directory: str) -> list[tuple[str, str, str]]:
    """What Repo.ls_tree_flat answered before it read trees itself: `git ls-tree -z
    <commit>:<directory>`."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "-z", f"{commit}:{directory}" if directory else commit],
        capture_output=True,
        check=False,
    )
    return ls_tree_entries(proc.stdout) if proc.returncode == 0 else []
