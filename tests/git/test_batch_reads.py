"""git.py's read-ahead for a walk (Repo.prefetch) answers exactly what git answers one commit at a
time."""

from __future__ import annotations

import itertools
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest

from mergegate.git.repo import Repo
from mergegate.git.values import path_bytes, path_text


def _git(repo: Path, *args: str, input: bytes | None = None) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@x",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@x",
    }
    return (
        subprocess.run(
            ["git", *args], cwd=repo, env=env, input=input, capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )


def _history(tmp_path: Path) -> Path:
    """A first-parent chain with adds, edits, deletes, a mode change, a symlink, a file becoming a
    folder, a name that is not UTF-8, an empty commit, a merge and an octopus merge."""
    repo = tmp_path / "r"
    _git(tmp_path, "init", "-q", str(repo))
    steps: list[list[str]] = [
        ["sh", "-c", "echo a > a && mkdir -p jobs && echo 'id: j' > jobs/j.yaml"],
        ["sh", "-c", "echo b >> a && chmod +x a && ln -s a link"],
        ["sh", "-c", "rm jobs/j.yaml && mkdir jobs/j.yaml && echo x > jobs/j.yaml/inner"],
        ["sh", "-c", "printf x > \"$(printf 'caf\\351')\""],
        ["true"],
    ]
    for number, step in enumerate(steps):
        subprocess.run(step, cwd=repo, check=True)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "--allow-empty", "-m", f"step {number}")
    base = _git(repo, "rev-parse", "HEAD")
    for side in ("s1", "s2", "s3"):
        _git(repo, "checkout", "-q", "-b", side, base)
        (repo / f"{side}.txt").write_text(side)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", side)
    _git(repo, "checkout", "-q", "-")
    _git(repo, "checkout", "-q", "-B", "main", base)
    _git(repo, "merge", "-q", "--no-ff", "-m", "merge", "s1")
    _git(repo, "merge", "-q", "--no-ff", "-m", "octopus", "s2", "s3")
    return repo


def test_prefetch_answers_diffs_and_parents_as_git_does_one_at_a_time(tmp_path: Path) -> None:
    path = _history(tmp_path)
    tip = _git(path, "rev-parse", "HEAD")
    chain = Repo(path).first_parent_chain(None, tip)
    fresh = Repo(path)
    expected = {
        sha: (
            fresh.git_parents(sha),
            fresh.diff(fresh.commit(sha).parents[0], sha) if fresh.commit(sha).parents else None,
        )
        for sha in chain
    }
    ahead = Repo(path)
    ahead.prefetch(chain)
    assert len(ahead._diffs) == len(chain) - 1 and len(ahead._parents) == len(
        chain
    )  # answered from memory
    for sha in chain:
        parents, changes = expected[sha]
        assert ahead.git_parents(sha) == parents
        if changes is not None:
            assert ahead.diff(parents[0], sha) == changes
    kinds = {c.status for changes in ahead._diffs.values() for c in changes}
    assert {"A", "M", "D"} <= kinds and any(len(p) == 3 for p in ahead._parents.values())
    assert any(
        c.path.startswith("\0") for changes in ahead._diffs.values() for c in changes
    )  # the non-UTF-8 name
    assert [] in ahead._diffs.values()  # the empty commit


def _files(root: Path) -> dict[str, tuple[bool, bytes]]:
    return {
        str(p.relative_to(root)): (
            p.is_symlink(),
            os.fsencode(os.readlink(p)) if p.is_symlink() else p.read_bytes(),
        )
        for p in sorted(root.rglob("*"))
        if p.is_symlink() or p.is_file()
    }


def test_exports_of_one_commit_share_an_index_and_each_writes_exactly_that_commits_files(
    tmp_path: Path,
) -> None:
    repo_dir = _history(tmp_path)
    first, last = (
        _git(repo_dir, "rev-list", "--max-parents=0", "HEAD"),
        _git(repo_dir, "rev-parse", "HEAD"),
    )

    def no_jobs(path: str) -> bool:
        return path.startswith("jobs/")

    repo = Repo(repo_dir)
    out = {}
    for name, commit, skip in (
        ("a", last, no_jobs),
        ("b", last, no_jobs),
        ("c", first, no_jobs),
        ("d", last, lambda p: False),
    ):
        (tmp_path / name).mkdir()
        repo.export(commit, tmp_path / name, skip=skip)
        out[name] = _files(tmp_path / name)
    # The reference: git's own listing of each commit, less what skip names.
    for name, commit, skip in (
        ("a", last, no_jobs),
        ("c", first, no_jobs),
        ("d", last, lambda p: False),
    ):
        raw = subprocess.run(
            ["git", "ls-tree", "-r", "--name-only", "-z", commit],
            cwd=repo_dir,
            capture_output=True,
            check=True,
        ).stdout
        listed = [os.fsdecode(p) for p in raw.split(b"\0") if p and not skip(os.fsdecode(p))]
        assert sorted(out[name]) == sorted(listed), name
    assert (
        out["a"] == out["b"]
        and out["a"] != out["c"]
        and "jobs/j.yaml/inner" in out["d"]
        and "jobs/j.yaml/inner" not in out["a"]
    )
    assert out["a"]["link"] == (True, b"a")
    assert len(repo._indexes) == 3  # a and b shared one
    repo.close()
    assert repo._indexes == {}


def _tree_as_written(root: Path) -> dict[str, tuple[str, int, bytes]]:
    """Every entry under `root`: kind, permission bits and contents (or link target)."""
    found = {}
    for path in sorted(root.rglob("*")):
        mode = path.lstat().st_mode
        kind = "link" if path.is_symlink() else "dir" if path.is_dir() else "file"
        data = (
            os.fsencode(os.readlink(path))
            if kind == "link"
            else path.read_bytes()
            if kind == "file"
            else b""
        )
        found[str(path.relative_to(root))] = (kind, mode & 0o7777, data)
    return found


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o100])
def test_a_small_export_copies_checkout_indexs_own_output_exactly_as_checkout_index_writes_it(
    tmp_path: Path, umask: int, monkeypatch: Any
) -> None:
    """Up to _TEMPLATE_FILES files, each export copies one checkout-index's output (no git process
    per job):
    the same names, kinds, permission bits (executable or not, less the umask), contents and link
    targets."""
    from mergegate.git import exports as git_module

    repo_dir = tmp_path / "r"
    _git(tmp_path, "init", "-q", str(repo_dir))
    subprocess.run(
        [
            "sh",
            "-c",
            "mkdir -p a/b/c jobs && printf 'x\\r\\n' > a/b/c/deep && printf '#!/bin/sh\\n' > "
            "run.sh && chmod +x run.sh "
            "&& ln -s run.sh link && ln -s a/b dirlink && echo 'id: j' > jobs/j.yaml && : > empty",
        ],
        cwd=repo_dir,
        check=True,
    )
    _git(repo_dir, "add", "-A")
    _git(repo_dir, "commit", "-q", "-m", "tree")
    head = _git(repo_dir, "rev-parse", "HEAD")
    old = os.umask(umask)
    try:
        reference = tmp_path / "reference"
        reference.mkdir()
        index = tmp_path / "index"
        subprocess.run(
            ["git", "read-tree", head],
            cwd=repo_dir,
            env={**os.environ, "GIT_INDEX_FILE": str(index)},
            check=True,
        )
        subprocess.run(
            ["git", "--work-tree", str(reference), "checkout-index", "--all", "--force", "--quiet"],
            cwd=repo_dir,
            env={**os.environ, "GIT_INDEX_FILE": str(index)},
            check=True,
        )
        repo = Repo(repo_dir)
        calls: list[str] = []
        run = repo.run
        repo.run = lambda *args, **kw: (
            calls.append(args[2] if args[0] == "--work-tree" else args[0]) or run(*args, **kw)
        )  # type: ignore[method-assign]
        exports = []
        for name in ("one", "two", "three"):
            (tmp_path / name).mkdir()
            repo.export(head, tmp_path / name)
            exports.append(_tree_as_written(tmp_path / name))
    finally:
        os.umask(old)
    assert exports[0] == exports[1] == exports[2] == _tree_as_written(reference)
    assert exports[0]["run.sh"][1] == 0o777 & ~umask and exports[0]["empty"][1] == 0o666 & ~umask
    assert exports[0]["link"][0] == "link" and exports[0]["a/b/c"] == ("dir", 0o777 & ~umask, b"")
    # One checkout-index for the three (the tree is listed through the object process: no ls-tree).
    assert calls == ["update-index", "checkout-index"]
    # After a pass (the runner drops them), nothing of the exports is left in TMPDIR.
    made = repo._index_dir
    assert made is not None and Path(made.name).exists()
    repo.drop_exports()
    assert not Path(made.name).exists() and repo._indexes == {}
    # A larger tree is written by checkout-index for each export, as before.
    monkeypatch.setattr(git_module, "_TEMPLATE_FILES", 3)
    calls.clear()
    old = os.umask(umask)
    try:
        for name in ("four", "five"):
            (tmp_path / name).mkdir()
            repo.export(head, tmp_path / name)
            assert _tree_as_written(tmp_path / name) == exports[0]
    finally:
        os.umask(old)
    assert calls == ["update-index", "checkout-index", "checkout-index"]


def test_blobs_reads_ahead_in_order_and_fails_on_what_is_not_a_blob(tmp_path: Path) -> None:
    """Repo.blobs: every blob's bytes in the order asked (one larger than a default pipe), the same
    as Repo.blob gives one at a time; a missing object or a tree is an error, not empty bytes."""
    from mergegate.errors import GitError

    work = tmp_path / "r"
    subprocess.run(["git", "init", "-q", str(work)], check=True)
    repo = Repo(work)
    contents = [b"", b"one\n", bytes(range(256)) * 2000, b"last"]
    shas = [repo.write_object("blob", data) for data in contents]
    assert (
        list(repo.blobs(shas + shas[:1]))
        == [repo.blob(sha) for sha in shas + shas[:1]]
        == contents + contents[:1]
    )
    assert list(repo.blobs([])) == []
    tree = repo.write_tree({"a": ("100644", shas[1])})
    with pytest.raises(GitError, match="not a blob"):
        list(repo.blobs([shas[1], tree]))
    with pytest.raises(GitError, match="not found"):
        list(repo.blobs([shas[1], "0" * 40]))
    reading = repo.blobs(shas)
    assert next(reading) == b""
    reading.close()  # ends its process early


def test_only_git_processes_that_talk_to_a_remote_get_the_tokens_and_auth_header(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """A job without a sandbox may read the environment of the runner's git children in /proc
    (T1)."""
    repo_dir = _history(tmp_path)
    monkeypatch.setenv("GITHUB_TOKEN", "ghs_SECRET")
    monkeypatch.setenv("GIT_CONFIG_COUNT", "2")
    monkeypatch.setenv("GIT_CONFIG_KEY_0", "http.https://github.com/.extraheader")
    monkeypatch.setenv("GIT_CONFIG_VALUE_0", "AUTHORIZATION: basic SECRET")
    monkeypatch.setenv("GIT_CONFIG_KEY_1", "alias.showenv")
    monkeypatch.setenv("GIT_CONFIG_VALUE_1", "!env")
    repo = Repo(repo_dir)
    shown = repo.out("showenv")  # a local verb: git's own environment, as its children see it
    assert "SECRET" not in shown and "GITHUB_TOKEN" not in shown
    assert (
        repo.run("config", "--get", "http.https://github.com/.extraheader", check=False).returncode
        == 1
    )
    repo.commit(repo.out("rev-parse", "HEAD"))  # starts the long-lived object reader
    proc = repo._objects._proc
    assert proc is not None
    assert b"SECRET" not in Path(f"/proc/{proc.pid}/environ").read_bytes()
    # The verbs that talk to a remote keep both (the push needs them).
    assert repo.run("ls-remote", str(repo_dir), check=False).returncode == 0
    from mergegate.git.processes import _NETWORK_VERBS, _without_credentials

    assert "push" in _NETWORK_VERBS and "fetch" in _NETWORK_VERBS
    assert _without_credentials(
        {
            "GIT_CONFIG_COUNT": "2",
            "GIT_CONFIG_KEY_0": "http.extraHeader",
            "GIT_CONFIG_VALUE_0": "x",
            "GIT_CONFIG_KEY_1": "core.abbrev",
            "GIT_CONFIG_VALUE_1": "12",
            "GH_TOKEN": "t",
        }
    ) == {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "core.abbrev", "GIT_CONFIG_VALUE_0": "12"}
    repo.close()


def test_the_users_git_config_and_pathspec_variables_do_not_change_what_git_tells_mergegate(
    tmp_path: Path, monkeypatch: Any
) -> None:
    """Invariant 1: a veto found by --grep, a glob pathspec, a root commit's diff are git's
    defaults' answers."""
    repo_dir = tmp_path / "r"
    _git(tmp_path, "init", "-q", str(repo_dir))
    (repo_dir / "a.txt").write_text("a\n")
    _git(repo_dir, "add", "-A")
    _git(repo_dir, "commit", "-q", "-m", "first\n\nMergegate-Veto: jobs/x.yaml abc")
    for key, value in (("grep.patternType", "fixed"), ("log.showRoot", "false")):
        _git(repo_dir, "config", key, value)
    monkeypatch.setenv("GIT_LITERAL_PATHSPECS", "1")
    repo = Repo(repo_dir)
    head = repo.out("rev-parse", "HEAD")
    assert repo.out("log", "--regexp-ignore-case", "--grep=^mergegate-veto:", "--format=%H") == head
    assert repo.out("log", "--format=%H", "--", "*.txt") == head
    assert "a.txt" in repo.out(
        "log", "--raw", "--format=%H", head
    )  # the root commit's diff is shown
    repo.close()


def _rev_parse(path: Path, commit: str, name: str) -> str | None:
    arg = f"{commit}:".encode() + path_bytes(name)
    proc = subprocess.run(
        [b"git", b"rev-parse", b"--verify", b"--quiet", arg], cwd=path, capture_output=True
    )
    return proc.stdout.decode().strip() or None if proc.returncode == 0 else None


def _tree_object(path: Path, entries: list[tuple[str, bytes, str]]) -> str:
    """A tree written as given (order, duplicates and modes untouched), as a hostile push could
    carry."""
    raw = b"".join(
        mode.encode() + b" " + name + b"\0" + bytes.fromhex(sha) for mode, name, sha in entries
    )
    return _git(path, "hash-object", "-t", "tree", "-w", "--literally", "--stdin", input=raw)


def test_file_blob_reads_trees_itself_and_answers_as_rev_parse_does(tmp_path: Path) -> None:
    path = _history(tmp_path)
    blob = _git(path, "hash-object", "-w", "--stdin", input=b"x\n")
    other = _git(path, "hash-object", "-w", "--stdin", input=b"y\n")
    inner = _tree_object(path, [("100644", b"j.yaml", blob)])
    # Trees git would not write: out of order, a name twice, a zero-padded folder mode.
    odd = {
        "unsorted": [("100644", b"b", blob), ("100644", b"a", other), ("40000", b"jobs", inner)],
        "twice": [("100644", b"a", blob), ("100644", b"a", other), ("40000", b"jobs", inner)],
        "padded": [("100644", b"a", blob), ("040000", b"jobs", inner)],
        "folder-is-a-blob": [("100644", b"a", blob), ("40000", b"jobs", other)],
        "folder-missing": [("100644", b"a", blob), ("40000", b"jobs", "ab" * 20)],
        "name-with-slash": [("100644", b"a", blob), ("100644", b"jobs/j.yaml", other)],
        "tree-first": [
            ("100644", b"a", blob),
            ("40000", b"jobs", inner),
            ("100644", b"jobs.yaml", other),
        ],
        "plain": [
            ("100644", b"a", blob),
            ("100644", b"jobs.yaml", other),
            ("40000", b"jobs", inner),
        ],  # jobs.yaml sorts before jobs/
    }
    commits = [_git(path, "rev-parse", "HEAD"), _git(path, "rev-parse", "HEAD~1")]
    commits += [
        _git(path, "commit-tree", _tree_object(path, entries), "-m", name)
        for name, entries in odd.items()
    ]
    names = [
        "a",
        "b",
        "link",
        "jobs",
        "jobs/j.yaml",
        "jobs/j.yaml/inner",
        "jobs/nope",
        "a/b",
        path_text(b"caf\xe9"),
        "s1.txt",
        "jobs.yaml",
        "nope",
        "jobs//j.yaml",
        "./a",
        "jobs/../a",
        "jobs/",
        "a\nb",
    ]
    for commit in commits:
        repo = Repo(path)
        for name in names:
            assert repo.file_blob(commit, name) == _rev_parse(path, commit, name), (commit, name)
    # A tree of git's own order is read without a git process per question.
    repo = Repo(path)
    calls: list[tuple[str, ...]] = []
    run = repo.run
    repo.run = lambda *args, **kw: calls.append(args) or run(*args, **kw)  # type: ignore[method-assign]
    assert [repo.file_blob(commits[-1], n) for n in ("a", "jobs/j.yaml", "jobs.yaml", "nope")] == [
        blob,
        blob,
        other,
        None,
    ]
    assert calls == []


def test_the_runners_walk_lists_the_commits_touching_each_file_of_a_line_as_rev_list_does(
    tmp_path: Path,
) -> None:

    from mergegate.facts.assessor import Assessor
    from mergegate.facts.git_side import GitSide
    from mergegate.git.values import literal

    path = _history(tmp_path)
    first = _git(path, "rev-parse", "main")
    shapes: dict[str, str] = {}
    # A line: adds, an edit, a mode change, a file becoming a folder and back, a delete.
    _git(path, "checkout", "-q", "-b", "line", first)
    for step in [
        "mkdir -p jobs/d && echo 1 > jobs/a.yaml && echo 1 > jobs/d/x.yaml",
        "echo 2 >> jobs/a.yaml && chmod +x a",
        "rm jobs/a.yaml && mkdir jobs/a.yaml && echo 3 > jobs/a.yaml/in",
        "rm -r jobs/a.yaml && echo 4 > jobs/a.yaml",
        "rm -r jobs/d && echo 5 > jobs/b.yml",
        "true",
    ]:
        subprocess.run(["sh", "-c", step], cwd=path, check=True)
        _git(path, "add", "-A")
        _git(path, "commit", "-q", "--allow-empty", "-m", step)
    shapes["line"] = _git(path, "rev-parse", "HEAD")
    # A line from a root of its own (history unrelated to approved's).
    _git(path, "checkout", "-q", "--orphan", "orphan")
    _git(path, "rm", "-rq", "--cached", ".")
    (path / "jobs").mkdir(exist_ok=True)
    (path / "jobs" / "a.yaml").write_text("orphan\n")
    _git(path, "add", "jobs/a.yaml")
    _git(path, "commit", "-q", "-m", "root")
    (path / "jobs" / "c.yaml").write_text("c\n")
    _git(path, "add", "jobs/c.yaml")
    _git(path, "commit", "-q", "-m", "c")
    shapes["orphan"] = _git(path, "rev-parse", "HEAD")
    # A side with a merge in it: git answers each path (full-history rules for merges).
    _git(path, "checkout", "-q", "-f", "-b", "merged", shapes["line"])
    _git(
        path,
        "merge",
        "-q",
        "--no-ff",
        "--allow-unrelated-histories",
        "-X",
        "ours",
        "-m",
        "inner merge",
        "orphan",
    )
    shapes["merged"] = _git(path, "rev-parse", "HEAD")
    shapes["nothing"] = first  # an empty side
    names = [
        "jobs/a.yaml",
        "jobs/d",
        "jobs/d/x.yaml",
        "jobs/b.yml",
        "jobs/c.yaml",
        "a",
        "jobs",
        "nope",
        "jobs/a.yaml/in",
        "jobs/a",
    ]
    for shape, second in shapes.items():
        repo = Repo(path)
        side = GitSide(Assessor(repo), first, second)
        for name in names:
            assert side.touching(name) == repo.commits_touching(first, second, literal(name)), (
                shape,
                name,
            )
        assert side._touched is not None, (
            shape
        )  # every shape from the diffs, a merge on the side too
        # The side's commits, oldest first, from the same listing: what `rev-list --reverse`
        # answers.
        assert side.side_commits() == repo.side_commits(first, second), shape
    # The line is read once for every file, not a rev-list per file.
    expected = [Repo(path).commits_touching(first, shapes["line"], literal(name)) for name in names]
    repo = Repo(path)
    side = GitSide(Assessor(repo), first, shapes["line"])
    calls: list[str] = []
    run = repo.run
    repo.run = lambda *args, **kw: calls.append(args[0]) or run(*args, **kw)  # type: ignore[method-assign]
    assert [side.touching(name) for name in names] == expected and sum(map(len, expected)) >= 10
    assert side.side_commits() == Repo(path).side_commits(first, shapes["line"])
    assert calls == ["rev-list", "diff-tree"]  # the side's commits too, from the one rev-list


def _random_side(tmp_path: Path, seed: int) -> tuple[Path, str, str, list[str]]:
    """A history with merges on the merged side (some of approved merged in, some branches of the
    side), trees written by git, and dates sometimes out of order; (repo, first, second, the paths
    asked about)."""
    import random

    rnd = random.Random(seed)
    repo = tmp_path / f"s{seed}"
    _git(tmp_path, "init", "-q", str(repo))
    blobs = [_git(repo, "hash-object", "-w", "--stdin", input=f"v{i}\n".encode()) for i in range(3)]
    names = ["jobs/a.yaml", "jobs/b.yaml", "jobs/d/c.yaml", "x", "jobs"]

    def tree(files: dict[str, str]) -> str:
        index = tmp_path / f"index-{seed}"
        data = "".join(f"100644 {blob}\t{path}\0" for path, blob in files.items()).encode()
        env = {**os.environ, "GIT_INDEX_FILE": str(index)}
        subprocess.run(
            ["git", "update-index", "-z", "--index-info"], cwd=repo, input=data, env=env, check=True
        )
        written = (
            subprocess.run(
                ["git", "write-tree"], cwd=repo, env=env, capture_output=True, check=True
            )
            .stdout.decode()
            .strip()
        )
        index.unlink()
        return written

    def commit(files: dict[str, str], parents: list[str], when: int) -> str:
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": "t",
            "GIT_AUTHOR_EMAIL": "t@x",
            "GIT_COMMITTER_NAME": "t",
            "GIT_COMMITTER_EMAIL": "t@x",
            "GIT_AUTHOR_DATE": f"{when} +0000",
            "GIT_COMMITTER_DATE": f"{when} +0000",
        }
        args = ["commit-tree", tree(files), "-m", "c", *[x for p in parents for x in ("-p", p)]]
        return (
            subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, check=True)
            .stdout.decode()
            .strip()
        )

    def change(files: dict[str, str]) -> dict[str, str]:
        files = dict(files)
        path = rnd.choice(names[:4])
        if rnd.random() < 0.3:
            files.pop(path, None)
        else:
            files[path] = rnd.choice(blobs)
        return files

    t = 1_700_000_000
    files = {"jobs/a.yaml": blobs[0], "x": blobs[1]}
    approved = [commit(files, [], t)]
    approved_files = [files]
    for k in range(3):
        approved_files.append(change(approved_files[-1]))
        approved.append(commit(approved_files[-1], [approved[-1]], t + 10 * (k + 1)))
    heads = [(approved[1], approved_files[1])]  # the side starts from an older approved commit
    for k in range(rnd.randint(2, 7)):
        when = t + 100 + k * 10 + (rnd.randint(-500, 500) if rnd.random() < 0.3 else 0)
        head, head_files = rnd.choice(heads)
        if (
            rnd.random() < 0.35
        ):  # a merge: of approved (an irrelevant parent) or of two heads of the side
            other, other_files = rnd.choice(
                [*heads, (approved[rnd.randint(0, 3)], approved_files[rnd.randint(0, 3)])]
            )
            if other == head:
                continue
            merged = (
                {**other_files, **head_files}
                if rnd.random() < 0.5
                else change({**head_files, **other_files})
            )
            heads.append((commit(merged, [head, other], when), merged))
        else:
            changed = change(head_files) if rnd.random() < 0.85 else head_files
            heads.append((commit(changed, [head], when), changed))
    second = heads[-1][0]
    if rnd.random() < 0.5 and len(heads) > 2:  # end in a merge of two heads of the side
        second = commit({**heads[-2][1], **heads[-1][1]}, [heads[-1][0], heads[-2][0]], t + 1000)
    return repo, approved[-1], second, names


@pytest.mark.parametrize("seed", range(30))
def test_the_walk_lists_the_commits_touching_each_file_of_any_side_as_rev_list_does(
    tmp_path: Path, seed: int
) -> None:
    """Sides with merges (approved merged in, branches of the side merged) and clock skew: the
    commits touching each path, from full diffs against each relevant parent, are git's own, in
    git's order."""

    from mergegate.facts.assessor import Assessor
    from mergegate.facts.git_side import GitSide
    from mergegate.git.values import literal

    path, first, second, names = _random_side(tmp_path, seed)
    repo = Repo(path)
    side = GitSide(Assessor(repo), first, second)
    for name in names:
        assert side.touching(name) == repo.commits_touching(first, second, literal(name)), (
            seed,
            name,
        )
    assert side._touched is not None  # answered from the diffs, not by git's walk
    # The side oldest first, from the listing the diffs came from: `rev-list --reverse`'s order,
    # skew and all.
    assert side.side_commits() == repo.side_commits(first, second), seed
    fresh = GitSide(Assessor(repo), first, second)
    assert fresh.side_commits() == repo.side_commits(first, second), (
        seed
    )  # asked first, before any path


def test_a_tree_not_in_gits_order_does_not_hide_who_wrote_a_job(tmp_path: Path) -> None:
    """git's path-limited walk stops at the first entry that sorts after the path: a root tree
    listing `jobs` after `x` (written with hash-object --literally; a plain bare remote takes it)
    hides the commit that changes jobs/a.yaml from `rev-list -- jobs/a.yaml` and `log --
    jobs/a.yaml`. Writers are found from full diffs, on a line and on a side with a merge, and as
    earlier writers of the same bytes."""

    from mergegate.facts.assessor import Assessor
    from mergegate.facts.git_side import GitSide
    from mergegate.git.values import literal

    repo_dir = tmp_path / "r"
    _git(tmp_path, "init", "-q", str(repo_dir))
    job, evil, other = (
        _git(repo_dir, "hash-object", "-w", "--stdin", input=b)
        for b in (b"id: a\n", b"id: a\nevil\n", b"x\n")
    )

    def commit(tree: str, *parents: str, who: str) -> str:
        env = {
            **os.environ,
            "GIT_AUTHOR_NAME": who,
            "GIT_AUTHOR_EMAIL": f"{who}@x",
            "GIT_COMMITTER_NAME": who,
            "GIT_COMMITTER_EMAIL": f"{who}@x",
        }
        args = ["commit-tree", tree, "-m", who, *[x for p in parents for x in ("-p", p)]]
        return (
            subprocess.run(["git", *args], cwd=repo_dir, env=env, capture_output=True, check=True)
            .stdout.decode()
            .strip()
        )

    jobs, jobs_evil = (
        _tree_object(repo_dir, [("100644", b"a.yaml", job)]),
        _tree_object(repo_dir, [("100644", b"a.yaml", evil)]),
    )
    base = commit(
        _tree_object(repo_dir, [("40000", b"jobs", jobs), ("100644", b"x", other)]), who="alice"
    )
    reordered = commit(
        _tree_object(repo_dir, [("100644", b"x", other), ("40000", b"jobs", jobs)]), base, who="bob"
    )
    hidden = commit(
        _tree_object(repo_dir, [("100644", b"x", other), ("40000", b"jobs", jobs_evil)]),
        reordered,
        who="mallory",
    )
    merge = commit(
        _tree_object(repo_dir, [("100644", b"x", other), ("40000", b"jobs", jobs_evil)]),
        hidden,
        base,
        who="bob",
    )
    repo = Repo(repo_dir)
    assert hidden not in repo.commits_touching(
        base, hidden, literal("jobs/a.yaml")
    )  # git's walk misses her
    for second in (hidden, merge):
        side = GitSide(Assessor(repo), base, second)
        assert hidden in side.touching("jobs/a.yaml"), second
    assert repo.producers(merge, {"jobs/a.yaml": evil}) == {"jobs/a.yaml": [hidden]}


@pytest.mark.parametrize(
    "refspec", ["+refs/heads/*:refs/remotes/origin/*", "+refs/heads/main:refs/remotes/origin/main"]
)
def test_a_push_leaves_the_tracking_ref_at_what_it_pushed_with_update_ref_only_where_push_did_not(
    tmp_path: Path, refspec: str
) -> None:
    """Repo.push: the remote-tracking ref is the pushed commit after it, as `update-ref` left it
    before; `git push` moves it itself where the remote's fetch refspec maps the branch there, and
    then no update-ref runs."""
    remote, clone = tmp_path / "remote.git", tmp_path / "clone"
    _git(tmp_path, "init", "-q", "--bare", str(remote))
    _git(tmp_path, "clone", "-q", str(remote), str(clone))
    _git(clone, "config", "remote.origin.fetch", refspec)
    _git(clone, "commit", "-q", "--allow-empty", "-m", "one")
    first = _git(clone, "rev-parse", "HEAD")
    _git(clone, "commit", "-q", "--allow-empty", "-m", "two")
    second = _git(clone, "rev-parse", "HEAD")
    repo = Repo(clone)
    calls: list[str] = []
    run = repo.run
    repo.run = lambda *args, **kw: (
        calls.append(next(a for a in args if not a.startswith("-") and "=" not in a))
        or run(*args, **kw)
    )  # type: ignore[method-assign]
    try:
        for sha in (first, second):
            assert repo.push("origin", sha, "audit")
            assert (
                _git(clone, "rev-parse", "refs/remotes/origin/audit")
                == sha
                == _git(remote, "rev-parse", "refs/heads/audit")
            )
    finally:
        repo.close()
    mapped = refspec.startswith("+refs/heads/*")
    assert calls == ["push", "push"] if mapped else ["push", "update-ref", "push", "update-ref"]


def _reference_diff(repo: Path, parent: str | None, sha: str) -> object:
    """What Repo.diff answered before it compared trees itself: `git diff-tree -r -z
    --no-renames`."""
    args = [
        "diff-tree",
        "-r",
        "-z",
        "--no-renames",
        "--no-commit-id",
        *(["--root", sha] if parent is None else [parent, sha]),
    ]
    proc = subprocess.run(["git", *args], cwd=repo, capture_output=True, check=False)
    if proc.returncode != 0:
        return "error"
    fields = proc.stdout.split(b"\0")
    return [
        (meta[4][0], path_text(fields[i + 1]), meta[2], meta[3], meta[0], meta[1])
        for i in range(0, len(fields) - 1, 2)
        for meta in [fields[i].decode().lstrip(":").split()]
    ]


def test_a_diff_of_two_commits_compared_through_the_object_process_is_what_diff_tree_says(
    tmp_path: Path,
) -> None:
    """Repo.diff without pathspecs compares the trees itself (no diff-tree process) where it can:
    every pair of commits and trees of a history with every kind of change (added, deleted, edited,
    a mode, a type, a file and a folder of one name, names sorting around a folder's), against
    diff-tree; git answers for gitlinks and trees not in git's order."""
    from mergegate.errors import GitError

    repo = _history(tmp_path)
    steps = [
        "ln -sf jobs link2 && echo t > a.txt && mkdir -p a.d && echo 1 > a.d/x && echo 2 > a-b",
        "rm link2 && echo now-a-file > link2 && chmod -x a && rm -r jobs/j.yaml && echo back > "
        "jobs/j.yaml",
        "rm link && ln -s a.txt link && mkdir -p deep/er/est && echo d > deep/er/est/f && echo e > "
        "deep/er/g",
        "rm -r deep/er && echo gone > deep/er && echo 3 > a.d/x && chmod +x a.d/x",
    ]
    for number, step in enumerate(steps):
        subprocess.run(["sh", "-c", step], cwd=repo, check=True)
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"more {number}")
    # The first-parent line in order (each pair a step: --all's order of commits made in one second
    # varies), then the sides.
    line = _git(repo, "rev-list", "--reverse", "--first-parent", "HEAD").split()
    commits = line + [
        c for c in _git(repo, "rev-list", "--reverse", "--all").split() if c not in line
    ]
    trees = [_git(repo, "rev-parse", f"{c}^{{tree}}") for c in commits[-4:]]
    _git(repo, "update-index", "--add", "--cacheinfo", f"160000,{'1' * 40},sub")
    _git(repo, "commit", "-q", "-m", "gitlink")
    _git(repo, "update-index", "--add", "--cacheinfo", f"160000,{'2' * 40},sub")
    _git(repo, "commit", "-q", "-m", "gitlink moved")
    linked = _git(repo, "rev-list", "-2", "HEAD").split()
    blob = _git(repo, "rev-parse", "HEAD:a")
    raw = bytes.fromhex(blob)
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
    # Each step both ways, each from nothing, across the history, between trees and commits, and
    # git's cases.
    pairs: list[tuple[str | None, str]] = [(None, c) for c in commits] + list(
        itertools.pairwise(commits)
    )
    pairs += [(b, a) for a, b in itertools.pairwise(commits)] + [
        (commits[0], commits[-1]),
        (commits[-1], commits[0]),
    ]
    pairs += [
        (trees[0], trees[-1]),
        (commits[-4], trees[-1]),
        (trees[1], commits[-1]),
        (None, trees[2]),
    ]
    pairs += [
        (linked[1], linked[0]),
        (commits[-1], linked[0]),
        (None, unordered),
        (unordered, trees[0]),
        (blob, commits[0]),
        (commits[0], "HEAD"),
        ("0" * 40, commits[0]),
    ]
    r = Repo(repo)
    fast = 0
    try:
        for parent, sha in pairs:
            try:
                got: object = [
                    (c.status, c.path, c.old_blob, c.new_blob, c.old_mode, c.new_mode)
                    for c in r.diff(parent, sha)
                ]
            except GitError:
                got = "error"
            assert got == _reference_diff(repo, parent, sha), (parent, sha)
            fast += r._tree_diff(parent, sha) is not None
        statuses = {c.status for p, s in pairs for c in r._tree_diff(p, s) or []}
        assert statuses == {"A", "D", "M", "T"} and fast >= 2 * len(
            commits
        )  # the walk answered most of them
        assert (
            r._tree_diff(linked[1], linked[0]) is None and r._tree_diff(None, unordered) is None
        )  # git's to say
    finally:
        r.close()


def test_the_chain_walk_answers_as_rev_list_and_merge_base_do_or_leaves_it_to_git(
    tmp_path: Path,
) -> None:
    """Repo.chain (an audit branch walked in-process after another runner's push) lists exactly what
    `rev-list --reverse --topo-order old..new` lists wherever it answers, and answers only where
    `merge-base --is-ancestor old new` says yes; a merge, a root, a malformed commit, a bound,
    grafts and a shallow clone are git's to say (None)."""
    repo = _history(tmp_path)
    for number in range(4):
        _git(repo, "commit", "-q", "--allow-empty", "-m", f"linear {number}")
    tree = _git(repo, "rev-parse", "HEAD^{tree}")
    head = _git(repo, "rev-parse", "HEAD")
    # A second `parent` line after the author: git reads one parent, a loose reader two.
    odd = (
        f"tree {tree}\nparent {head}\nauthor t <t@x> 1 +0000\ncommitter t <t@x> 1 +0000\nparent "
        f"{head}\n\nodd\n"
    )
    malformed = _git(
        repo, "hash-object", "-w", "-t", "commit", "--literally", "--stdin", input=odd.encode()
    )
    after = _git(repo, "commit-tree", tree, "-p", malformed, "-m", "after the odd one")
    commits = [*_git(repo, "rev-list", "--reverse", "--all").split(), malformed, after]
    r = Repo(repo)
    answered = 0
    try:
        for old, new in itertools.product(commits, repeat=2):
            got = r.chain(old, new)
            ancestor = (
                subprocess.run(
                    ["git", "merge-base", "--is-ancestor", old, new], cwd=repo
                ).returncode
                == 0
            )
            if got is not None:
                answered += 1
                assert ancestor, (old, new)
                assert (
                    got
                    == _git(repo, "rev-list", "--reverse", "--topo-order", f"{old}..{new}").split()
                ), (old, new)
        assert answered >= 40  # (the walk answered the linear pairs, not only x..x)
        assert r.chain(head, after) is None and r.chain(malformed, after) == [
            after
        ]  # through the odd one: git's to say
        first = commits[0]
        assert r.chain(first, head) is None  # a merge on the way
        line = _git(repo, "rev-list", "--first-parent", "--reverse", "HEAD").split()
        assert r.chain(line[-5], head) == line[-4:] and r.chain(line[-5], head, limit=3) is None
        assert r.chain("0" * 40, head) is None and r.chain("HEAD~1", head) is None
        for marker in ("info/grafts", "shallow"):  # git now sees HEAD~1 as a root
            (repo / ".git" / marker).parent.mkdir(exist_ok=True)
            (repo / ".git" / marker).write_text(f"{line[-2]}\n")
            fresh = Repo(repo)
            try:
                assert fresh.chain(line[-5], head) is None
                assert (
                    subprocess.run(
                        ["git", "merge-base", "--is-ancestor", line[-5], head], cwd=repo
                    ).returncode
                    != 0
                )
            finally:
                fresh.close()
            (repo / ".git" / marker).unlink()
    finally:
        r.close()
