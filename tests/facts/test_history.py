"""history.History answers what the Assessor asks git about each merge exactly as git does, one
question at a time.

Histories are built with `git fast-import` (committer dates set per commit), so each shape is cheap:
sides based on the chain, on an older chain commit and on another side's commit, an empty side, a
merge that writes files itself, a merge inside a side, an orphan side, an octopus, the same bytes
written twice (with distinct and with equal dates), a file becoming a folder, symlinks, a name that
is not UTF-8, and every edge of the content pathspec.
"""

from __future__ import annotations

import os
import subprocess
from datetime import UTC, datetime
from pathlib import Path

import pytest

from mergegate.facts.assessor import Assessor
from mergegate.facts.git_side import GitSide
from mergegate.facts.history import History
from mergegate.git.repo import Repo
from mergegate.git.values import path_bytes
from mergegate.rules.job import is_job_path, job_stem
from mergegate.rules.policy import load_policy
from mergegate.runner.plan import Walk
from tests.helpers.keys import shared_ssh_key

Op = tuple[str, ...]  # ("M", mode, path, data) or ("D", path)


def _quote(path: str | bytes) -> bytes:
    raw = path if isinstance(path, bytes) else path.encode()
    return (
        b'"'
        + b"".join(bytes([c]) if 32 < c < 127 and c not in b'"\\' else b"\\%03o" % c for c in raw)
        + b'"'
    )


def _build(
    repo: Path, commits: list[tuple[str, list[str], int, list[tuple[object, ...]]]], branch: str
) -> dict[str, str]:
    """Commits (name, parent names, committer date, ops) in one fast-import; `branch` points at the
    last.

    A commit starts from its first parent's files; a merge from its last parent's (what merging a
    side based on the first parent gives), or from the files of the commit an op ("TREE", name)
    names.
    """
    subprocess.run(["git", "init", "-q", "--bare", str(repo)], check=True)
    marks = {name: i for i, (name, *_) in enumerate(commits, start=1)}
    files: dict[str, dict[str | bytes, tuple[str, str]]] = {}
    out = []
    for name, parents, date, ops in commits:
        who = f"bob <bob@example.com> {date} +0000\n".encode()
        out += [
            f"commit refs/heads/c-{name}\nmark :{marks[name]}\n".encode(),
            b"author " + who,
            b"committer " + who,
        ]
        message = f"{name}\n".encode()
        out += [b"data %d\n" % len(message), message]
        out += [f"from :{marks[parents[0]]}\n".encode()] if parents else []
        out += [f"merge :{marks[p]}\n".encode() for p in parents[1:]]
        start = next(
            (str(op[1]) for op in ops if op[0] == "TREE"), parents[-1] if parents else None
        )
        state = dict(files[start]) if start else {}
        if start and start != (parents[0] if parents else None):
            out.append(b"deleteall\n")
            ops = [("M", mode, path, data) for path, (mode, data) in state.items()] + [
                op for op in ops if op[0] != "TREE"
            ]
        for op in ops:
            if op[0] == "D":
                state.pop(op[1], None)  # type: ignore[arg-type]
                out.append(b"D " + _quote(op[1]) + b"\n")  # type: ignore[arg-type]
            elif op[0] == "M":
                state[op[2]] = (str(op[1]), str(op[3]))  # type: ignore[index]
                data = str(op[3]).encode()
                out += [
                    f"M {op[1]} inline ".encode() + _quote(op[2]) + b"\n",
                    b"data %d\n" % len(data),
                    data,
                    b"\n",
                ]  # type: ignore[arg-type]
        files[name] = state
        out.append(b"\n")
    marks_file = repo / "marks"
    subprocess.run(
        ["git", "fast-import", "--quiet", f"--export-marks={marks_file}"],
        cwd=repo,
        input=b"".join(out),
        check=True,
    )
    by_mark = dict(line.split() for line in marks_file.read_text().splitlines())
    shas = {name: by_mark[f":{i}"] for name, i in marks.items()}
    subprocess.run(
        ["git", "update-ref", f"refs/heads/{branch}", shas[commits[-1][0]]], cwd=repo, check=True
    )
    return shas


def _policy(tmp_path: Path) -> str:
    key = shared_ssh_key(tmp_path / "keys", "alice")
    return (
        "version: 1\napprovers:\n  - name: alice\n    email: alice@example.com\n    key: "
        f'"{key.public_line}"\n'
        "approvals_required: 1\ncommands:\n  - program: echo\n"
    )


JOB = "id: {0}\ncommand: [echo, '{0}']\n"


def _shapes(policy: str) -> list[tuple[str, list[str], int, list[tuple[object, ...]]]]:
    """A chain R M1 D1 M2 ... M10 (first parents) and its sides; dates never decrease."""
    M = "100644"
    return [
        (
            "R",
            [],
            1000,
            [
                ("M", M, "policy/policy.yaml", policy),
                ("M", M, "a.txt", "a"),
                ("M", M, "jobs/j1.yaml", JOB.format("j1")),
                ("M", "120000", "link", "a.txt"),
            ],
        ),
        # M1: a side of two commits on the chain's tip (jobs, content, a policy file, a .yml deeper
        # down).
        ("s1a", ["R"], 1010, [("M", M, "jobs/j2.yaml", JOB.format("j2")), ("M", M, "a.txt", "a1")]),
        (
            "s1b",
            ["s1a"],
            1020,
            [
                ("M", M, "jobs/sub/x.yml", JOB.format("x")),
                ("M", M, "policyx.txt", "p"),
                ("M", M, "policy/k.txt", "k"),
            ],
        ),
        ("M1", ["R", "s1b"], 1030, []),
        # D1: a direct push.
        ("D1", ["M1"], 1040, [("M", M, "a.txt", "pushed")]),
        # M2: a side based on an older chain commit; a job file becomes a folder; the merge writes a
        # file itself.
        (
            "s2a",
            ["R"],
            1050,
            [
                ("D", "jobs/j1.yaml"),
                ("M", M, "jobs/j1.yaml/inner", "in"),
                ("M", M, "jobs/j3.yaml", JOB.format("j3")),
            ],
        ),
        ("M2", ["D1", "s2a"], 1060, [("M", M, "jobs/m2.yaml", JOB.format("m2"))]),
        # M3: stacked on another side's commit (s1b, off the first-parent line); an escaping
        # symlink.
        (
            "s3a",
            ["s1b"],
            1070,
            [
                ("M", "120000", "jobs/evil.yaml", "../.."),
                ("M", M, "jobs/j2.yaml", JOB.format("j2") + "# 2\n"),
                ("M", "100755", "a.txt", "a1"),
            ],
        ),
        ("M3", ["M2", "s3a"], 1080, []),
        # M4: a merge of an ancestor (nothing on its side) that writes a job itself.
        ("M4", ["M3", "s1a"], 1090, [("TREE", "M3"), ("M", M, "jobs/m4.yaml", JOB.format("m4"))]),
        # M5: a merge inside the side: git's answer.
        ("s5a", ["M4"], 1100, [("M", M, "jobs/j5.yaml", JOB.format("j5"))]),
        ("s5b", ["s5a", "s2a"], 1110, [("M", M, "b.txt", "b")]),
        ("M5", ["M4", "s5b"], 1120, []),
        # M6: bytes with an earlier life: jobs/j2.yaml back to what s1a wrote.
        ("s6a", ["M5"], 1130, [("M", M, "jobs/j2.yaml", JOB.format("j2"))]),
        ("M6", ["M5", "s6a"], 1140, []),
        # M7: an orphan side (a root inside it): git's answer.
        ("o1", [], 1150, [("M", M, "jobs/o.yaml", JOB.format("o"))]),
        ("M7", ["M6", "o1"], 1160, []),
        # M8: an octopus.
        ("o8a", ["M7"], 1170, [("M", M, "c.txt", "c")]),
        ("o8b", ["M7"], 1175, [("M", M, "d.txt", "d")]),
        ("M8", ["M7", "o8a", "o8b"], 1180, []),
        # M9: the same bytes written twice at one date: git's order between them.
        ("s9a", ["M8"], 1190, [("M", M, "jobs/j9.yaml", JOB.format("j9"))]),
        ("s9b", ["s9a"], 1190, [("M", M, "jobs/j9.yaml", JOB.format("j9") + "# b\n")]),
        ("s9c", ["s9b"], 1190, [("M", M, "jobs/j9.yaml", JOB.format("j9"))]),
        ("M9", ["M8", "s9c"], 1200, []),
        # M10: the content pathspec's edges: a .yaml deep in jobs/ (not content), other files in
        # jobs/ and a folder named like a job file (content), policy/ (not content), a name that is
        # not UTF-8.
        ("s10a", ["M9"], 1210, [("M", M, "jobs/deep/a/b.yaml", JOB.format("b"))]),
        (
            "s10b",
            ["s10a"],
            1220,
            [
                ("M", M, "jobs/readme.txt", "r"),
                ("M", M, "policy/x", "x"),
                ("M", M, b"caf\xe9.txt", "c"),
            ],
        ),
        ("s10c", ["s10b"], 1230, [("M", M, "jobs/x.yaml/inner", "i"), ("D", "link")]),
        ("s10d", ["s10c"], 1230, [("M", M, "policy/y", "y")]),
        ("M10", ["M9", "s10d"], 1240, [("M", M, "jobs/j10.yml", JOB.format("j10"))]),
    ]


CHAIN = ["M1", "D1", "M2", "M3", "M4", "M5", "M6", "M7", "M8", "M9", "M10"]
# Merges the history answers itself (the others are git's: a merge inside the side, an orphan, an
# octopus).
ANSWERED = {"M1", "M2", "M3", "M4", "M6", "M9", "M10"}


@pytest.fixture(scope="module")
def shapes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Repo, dict[str, str]]:
    tmp = tmp_path_factory.mktemp("history")
    shas = _build(tmp / "gate.git", _shapes(_policy(tmp)), "approved")
    return Repo(tmp / "gate.git"), shas


def _all_paths(repo: Repo, shas: dict[str, str]) -> set[str]:
    paths = {p for sha in shas.values() for _, _, p in repo.ls_tree(sha)}
    folders = {p.rsplit("/", 1)[0] for p in paths if "/" in p}
    return paths | folders | {"missing", "jobs/j1.yaml"}


def _agree(repo: Repo, shas: dict[str, str], chain_names: list[str], root: str = "R") -> set[str]:
    """Every answer of the history about every merge of the chain, against git's: the merges it
    answered."""
    chain = repo.first_parent_chain(shas[root], shas[chain_names[-1]])
    assert chain == [shas[n] for n in chain_names]
    history = History.read(repo, shas[root], chain)
    assert history is not None
    assessor = Assessor(repo)
    paths = _all_paths(repo, shas)
    blobs = {(p, b) for sha in shas.values() for _, b, p in repo.ls_tree(sha)}
    answered = set()
    for name in chain_names:
        sha = shas[name]
        parents = repo.commit(sha).parents
        if len(parents) != 2:
            assert len(parents) == 1 or history.side(sha, parents[0], parents[1]) is None
            continue
        side, git = history.side(sha, *parents), GitSide(assessor, *parents)
        if side is None:
            continue
        answered.add(name)
        assert side.base == git.base
        assert side.side_commits() == git.side_commits()
        assert side.touching_content() == git.touching_content(), name
        for path in sorted(paths):
            assert side.touching(path) == git.touching(path), (name, path)
        for commit in [side.base, parents[1], *side.commits]:
            for path in sorted(paths):
                assert side.entry(commit, path) == git.entry(commit, path), (name, commit, path)
        stems = {job_stem(p) for p in paths if is_job_path(p)}
        assert side.job_paths(sha, stems) == git.job_paths(sha, stems)
        assert side.symlinks(sha) == git.symlinks(sha)
        by_path: dict[str, list[str]] = {}
        for path, blob in sorted(blobs):
            by_path.setdefault(path, []).append(blob)
        # One round per blob a path had (git's producers takes one blob per path): a git call each.
        for round_ in range(max(len(b) for b in by_path.values())):
            files = {path: bs[round_] for path, bs in by_path.items() if round_ < len(bs)}
            fast, slow = side.producers(files), repo.producers(sha, files)
            if fast is None:  # some path's writers share a date: each path alone, to see which
                singles = {path: side.producers({path: blob}) for path, blob in files.items()}
                fast = {
                    path: answer[path] for path, answer in singles.items() if answer is not None
                }
                ties = {path for path, answer in singles.items() if answer is None}
                # s9a and s9c wrote one job's bytes at one date (merged at M9): git's walk decides
                # their order.
                assert ties == {"jobs/j9.yaml"} and CHAIN.index(name) >= CHAIN.index("M9"), (
                    name,
                    ties,
                )
                slow = {p: v for p, v in slow.items() if p not in ties}
            assert fast == slow, name
            if name == "M6" and files.get("jobs/j2.yaml") == repo.file_blob(
                shas["s1a"], "jobs/j2.yaml"
            ):
                assert len(slow["jobs/j2.yaml"]) == (
                    3 if "P0" in shas else 2
                )  # s6a, s1a (and P0), newest first
    return answered


def test_every_answer_about_every_merge_is_gits(shapes: tuple[Repo, dict[str, str]]) -> None:
    repo, shas = shapes
    assert _agree(repo, shas, CHAIN) == ANSWERED


def test_history_before_the_trust_root_counts_for_earlier_writers_and_a_base_there_is_gits(
    tmp_path: Path,
) -> None:
    """The trust root has a past: bytes written there count as written before (producers), and a
    side based before the root (its base off the chain, reached from the root only) is left to git.
    """
    M = "100644"
    before = [
        ("P0", [], 900, [("M", M, "jobs/j2.yaml", JOB.format("j2")), ("M", M, "old.txt", "o")]),
        ("Q1", ["P0"], 960, [("M", M, "q.txt", "q")]),
        ("P1", ["P0"], 950, [("D", "jobs/j2.yaml")]),
    ]
    shapes = _shapes(_policy(tmp_path))
    shapes = [
        *before,
        *((n, ["P1"] if n == "R" else p, d, ops) for n, p, d, ops in shapes),
        ("M11", ["M10", "Q1"], 1250, []),
    ]
    shas = _build(tmp_path / "past.git", shapes, "approved")
    assert _agree(Repo(tmp_path / "past.git"), shas, [*CHAIN, "M11"]) == ANSWERED


def test_an_assessor_reading_the_history_gathers_the_facts_git_gives_it(
    shapes: tuple[Repo, dict[str, str]],
) -> None:
    repo, shas = shapes
    root = shas["R"]
    chain = repo.first_parent_chain(root, shas["M10"])
    policy = load_policy(lambda p: repo.read_file(root, p), commit=root)
    at = datetime.now(UTC)
    fast = Assessor(repo, history=History.read(repo, root, chain))
    slow = Assessor(repo)
    unapproved = {"a.txt": shas["D1"]}
    for sha in chain:
        assert fast.facts(sha, policy, unapproved, at=at) == slow.facts(
            sha, policy, unapproved, at=at
        )
    # And the whole walk (its own `known`, what stays unapproved, every verdict and reason) is the
    # same.
    walks = [
        Walk(
            Assessor(repo, history=h),
            policy,
            at=at,
            records=None,
            mentioned=lambda path, blob: True,
        )
        for h in (History.read(repo, root, chain), None)
    ]
    for sha in chain:
        one, other = (w.step(sha) for w in walks)
        assert one == other


def test_clock_skew_anywhere_leaves_every_merge_to_git(tmp_path: Path) -> None:
    commits = _shapes(_policy(tmp_path))
    # s3a is older than its parent s1b: git's date-ordered walks need not list what reachability
    # says.
    commits = [(n, p, 1015 if n == "s3a" else d, ops) for n, p, d, ops in commits]
    shas = _build(tmp_path / "skew.git", commits, "approved")
    repo = Repo(tmp_path / "skew.git")
    assert History.read(repo, shas["R"], repo.first_parent_chain(shas["R"], shas["M10"])) is None


def test_verify_reads_the_history_in_a_few_processes_and_reports_what_git_would(
    tmp_path: Path,
) -> None:
    from mergegate.operations.verify import verify_history

    shas = _build(tmp_path / "gate.git", _shapes(_policy(tmp_path)), "approved")
    trace = tmp_path / "trace"
    env = {"GIT_TRACE": str(trace)}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        report = verify_history(
            repo_path=tmp_path / "gate.git",
            remote="origin",
            branch="approved",
            fetch=False,
            trust=shas["R"],
        )
    finally:
        for k, v in old.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)
    verbs = [
        line.split(" git ")[-1]
        for line in trace.read_text().splitlines()
        if "trace: built-in: git" in line
    ]
    # Only the two merges the history cannot answer (a merge inside the side, an orphan) ask git, as
    # before.
    bases = [
        v.split()[1:] for v in verbs if v.startswith("merge-base ") and "--is-ancestor" not in v
    ]
    assert bases == [[shas["M4"], shas["s5b"]], [shas["M6"], shas["o1"]]]
    ranges = {
        v.split()[2]
        for v in verbs
        if v.startswith(("rev-list --full-history", "rev-list --reverse"))
    }
    assert ranges == {f"{shas['M4']}..{shas['s5b']}", f"{shas['M6']}..{shas['o1']}"}
    assert (
        len(report.commits) == 1 + len(CHAIN)
        and not report.violations
        and report.incomplete is None
    )


NAMES = [
    "policy",
    "policy/x",
    "policy/a/b",
    "policyx",
    "policy.yaml",
    "xpolicy/a",
    "a/policy",
    "a/policy/b",
    "Policy/x",
    "jobs/a.yaml",
    "jobs/a.yml",
    "jobs/a.yaml.txt",
    "jobs/a/b.yaml",
    "jobs/a/b/c.yml",
    "jobs/.yaml",
    "jobs/.yml",
    "jobs/x.yaml/inner",
    "jobs/x.yaml/y.yaml",
    "jobs/a.YAML",
    "Jobs/a.yaml",
    "jobs.yaml",
    "a/jobs/b.yaml",
    "jobs/a",
    "jobs/a b.yaml",
    "jobs/-.yml",
    "jobs/a.yamlx",
    "jobs/yaml",
    "jobs/ayaml",
    "jobs/a/.yml",
    "x.yaml",
    "README",
    b"jobs/\xff.yaml",
    b"jobs/\xff/x.txt",
    b"policy\xff",
    b"\xffpolicy/x",
]


def test_the_content_pathspec_matches_a_name_here_as_git_matches_it(tmp_path: Path) -> None:
    """Every name in one tree, and git's diff-tree of it with CONTENT_PATHSPEC: the names git lists
    are exactly those history._content says are content."""
    from mergegate.facts.history import CONTENT_PATHSPEC, _content

    # One root commit per name (a file and a folder of one name cannot share a tree).
    shas = _build(
        tmp_path / "names.git",
        [(f"n{i}", [], 1000, [("M", "100644", name, "x")]) for i, name in enumerate(NAMES)],
        "approved",
    )
    repo = Repo(tmp_path / "names.git")
    listed = repo.diffs([(None, shas[f"n{i}"]) for i in range(len(NAMES))], *CONTENT_PATHSPEC)
    assert listed is not None
    by_git = sorted(path_bytes(c.path) for changes in listed for c in changes)
    names = [n if isinstance(n, bytes) else n.encode() for n in NAMES]
    assert by_git == sorted(n for n in names if _content(n))
    assert 0 < len(by_git) < len(names)


def test_a_side_with_a_glob_character_in_a_name_is_left_to_git(tmp_path: Path) -> None:
    M = "100644"
    commits = [
        ("R", [], 1000, [("M", M, "policy/policy.yaml", _policy(tmp_path))]),
        ("s", ["R"], 1010, [("M", M, "jobs/[ab].yaml", JOB.format("[ab]"))]),
        ("M1", ["R", "s"], 1020, []),
        ("t", ["M1"], 1030, [("M", M, "jobs/t.yaml", JOB.format("t"))]),
        ("M2", ["M1", "t"], 1040, []),
    ]
    shas = _build(tmp_path / "glob.git", commits, "approved")
    repo = Repo(tmp_path / "glob.git")
    history = History.read(repo, shas["R"], [shas["M1"], shas["M2"]])
    assert history is not None
    assert history.side(shas["M1"], shas["R"], shas["s"]) is None
    assert history.side(shas["M2"], shas["M1"], shas["t"]) is not None


@pytest.mark.parametrize(
    "name",
    ["GIT_LITERAL_PATHSPECS", "GIT_GLOB_PATHSPECS", "GIT_NOGLOB_PATHSPECS", "GIT_ICASE_PATHSPECS"],
)
def test_a_pathspec_variable_in_the_environment_leaves_every_merge_to_git(
    shapes: tuple[Repo, dict[str, str]], monkeypatch: pytest.MonkeyPatch, name: str
) -> None:
    """git reads them for every pathspec it matches (the content pathspec, each literal path): its
    answers then are the environment's, and only git knows them."""
    repo, shas = shapes
    chain = repo.first_parent_chain(shas["R"], shas["M10"])
    assert History.read(repo, shas["R"], chain) is not None
    monkeypatch.setenv(name, "1")
    assert History.read(repo, shas["R"], chain) is None
