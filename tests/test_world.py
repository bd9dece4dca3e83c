"""The test helpers' fast paths leave what their reference paths leave (tests/helpers/repos.py)."""

from __future__ import annotations

from pathlib import Path

from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml


def _state(world: World) -> dict[str, object]:
    """Everything of a set-up gate a later step could read, but the commit's time."""
    admin = world.clone("admin")
    commit = world.git("admin", "cat-file", "commit", "HEAD").splitlines()
    return {
        "commit": [
            line.rsplit(" ", 2)[0] if line.startswith(("author ", "committer ")) else line
            for line in commit
        ],
        "admin refs": world.git(
            "admin", "for-each-ref", "--format=%(refname) %(objectname) %(upstream)"
        ).splitlines(),
        "remote refs": world.git(
            world.remote, "for-each-ref", "--format=%(refname) %(objectname)"
        ).splitlines(),
        "admin head": world.git("admin", "symbolic-ref", "HEAD"),
        "remote head": world.git(world.remote, "symbolic-ref", "HEAD"),
        "status": world.git(
            "admin", "status", "--porcelain=v1", "--untracked-files=all", "--ignored"
        ),
        "index": world.git("admin", "ls-files", "--stage"),
        "config": world.git("admin", "config", "--local", "--list").replace(
            str(world.tmp), "<tmp>"
        ),
        "files": sorted(
            str(p.relative_to(admin))
            for p in admin.rglob("*")
            if ".git" not in p.relative_to(admin).parts
        ),
    }


def test_setup_by_import_leaves_what_setup_by_push_leaves(tmp_path: Path) -> None:
    fast, slow = World(tmp_path / "fast"), World(tmp_path / "slow")
    policy = policy_yaml([fast.bob.approver_entry()], [ECHO_RULE])
    files = {
        "README": "readme\n",
        "jobs/x/stray.yaml": job_yaml("stray", ["echo"]),
        "empty": "",
        "bin/run.sh": "#!/bin/sh\n",
    }
    everything = {"policy/policy.yaml": policy, **files}
    fast_root = fast.setup(policy, files=files)
    slow_root = slow._setup_by_push(everything)
    assert len(fast_root) == 40 and fast.git("admin", "rev-parse", "HEAD") == fast_root
    fast_state, slow_state = _state(fast), _state(slow)
    # The trees are the same objects: the same files, modes and bytes.
    assert fast.git("admin", "rev-parse", "HEAD^{tree}") == slow.git(
        "admin", "rev-parse", "HEAD^{tree}"
    )
    shas = {fast_root: "ROOT", slow_root: "ROOT"}
    for state in (fast_state, slow_state):
        for key in ("admin refs", "remote refs"):
            state[key] = [
                " ".join(shas.get(part, part) for part in line.split(" ")) for line in state[key]
            ]  # type: ignore[attr-defined]
    assert fast_state == slow_state


def test_setup_goes_the_way_of_the_push_when_the_import_could_differ(tmp_path: Path) -> None:
    """An ignore file, a hook on the remote, or an admin clone already used: the reference path."""
    for n, (files, hook, used) in enumerate(
        [
            ({".gitignore": "x\n", "x": "ignored\n"}, False, False),
            ({}, True, False),
            ({}, False, True),
        ]
    ):
        world = World(tmp_path / str(n))
        if hook:
            pre = world.remote / "hooks" / "pre-receive"
            pre.write_text(f"#!/bin/sh\necho pushed > {world.tmp / 'hooked'}\n")
            pre.chmod(0o755)
        if used:
            world.write("admin", {"notes.txt": "written before setup\n"})
        world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]), files=files)
        assert world.git("admin", "log", "--format=%s", "origin/approved") == "initial policy"
        tracked = world.git("admin", "ls-files").splitlines()
        assert ("x" not in tracked) if files else True
        assert (world.tmp / "hooked").exists() == hook
        assert ("notes.txt" in tracked) == used


def test_records_are_read_again_exactly_when_a_fetch_could_change_them(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    world.propose("p", {"jobs/a.yaml": job_yaml("a", ["echo", "a"])}, who=world.alice)
    world.signed_merge("p")
    assert world.run_once().code == 0
    first = world.records()
    fetched = world.clone("admin") / ".git" / "FETCH_HEAD"
    stamp = fetched.stat().st_mtime_ns
    assert (
        world.records() == first and fetched.stat().st_mtime_ns == stamp
    )  # nothing moved: no fetch
    # The remote moved (a branch that is not the audit's): fetched, and admin sees the branch.
    world.git("proposer", "push", "-q", "origin", "HEAD:refs/heads/elsewhere")
    assert world.records() == first and fetched.stat().st_mtime_ns != stamp
    assert world.git("admin", "rev-parse", "origin/elsewhere") == world.git(
        "proposer", "rev-parse", "HEAD"
    )
    # Only admin's refs moved: fetched again, which puts its tracking ref back.
    world.git("admin", "update-ref", "-d", "refs/remotes/origin/mergegate/audit")
    assert world.records() == first
    assert world.git(
        "admin", "rev-parse", "--verify", "--quiet", "origin/mergegate/audit", check=False
    )
    # New records: read.
    world.propose("q", {"jobs/b.yaml": job_yaml("b", ["echo", "b"])}, who=world.alice)
    world.signed_merge("q")
    assert world.run_once().code == 0
    assert [r["job"] for r in world.events("started")] == ["a", "b"]
    assert world.records()[: len(first)] == first and len(world.records()) > len(first)


def test_head_is_what_rev_parse_says(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    head = world.propose("p", {"jobs/a.yaml": job_yaml("a", ["echo", "a"])}, who=world.alice)
    merge = world.signed_merge("p")
    assert head == world.git("proposer", "rev-parse", "HEAD") and merge == world.git(
        "approver", "rev-parse", "HEAD"
    )
    world.git("approver", "checkout", "-q", "--detach", "HEAD~1")  # no branch: git is asked
    assert world.head("approver") == world.git("approver", "rev-parse", "HEAD") != merge
    world.git("proposer", "pack-refs", "--all")  # a packed ref only: git is asked
    assert world.head("proposer") == head


def test_fetch_is_left_out_exactly_when_gits_fetch_would_change_no_ref(world: World) -> None:
    """World.fetch against `git fetch -q origin` in a twin clone, step by step: the same refs after
    each, and a fetch made (FETCH_HEAD written) exactly when git's moved a ref, or where it cannot
    judge (a lock, a config changed since the clone)."""
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))

    def refs(where: str) -> list[str]:
        return world.git(where, "for-each-ref", "--format=%(refname) %(objectname)").splitlines()

    def step(*, judged: bool = True) -> bool:
        before = refs("twin")
        world.fetch("twin")
        changed = refs("twin") != before
        fetched = world.clone("a") / ".git" / "FETCH_HEAD"
        fetched.unlink(missing_ok=True)
        world.fetch("a")
        assert refs("a") == refs("twin")
        assert fetched.exists() == (changed or not judged), (changed, judged)
        return changed

    world.clone("a"), world.clone("twin")
    assert not step()  # fresh clones: nothing to fetch
    world.propose("p", {"jobs/a.yaml": job_yaml("a", ["echo", "a"])}, who=world.alice)
    assert step()  # a new branch
    assert not step()
    world.git("proposer", "tag", "v1")
    world.git("proposer", "push", "-q", "origin", "v1")
    assert step()  # a tag on a commit both clones have: git follows it
    world.git("proposer", "push", "-q", "origin", "HEAD:refs/mergegate/elsewhere")
    assert not step()  # a ref the default refspec does not fetch
    for where in ("a", "twin"):
        world.git(where, "update-ref", "-d", "refs/remotes/origin/p")
    assert step()  # a tracking ref gone: fetched back
    world.git("proposer", "commit", "-q", "--allow-empty", "-m", "more")
    world.git("proposer", "push", "-q", "origin", "p")
    assert step()  # a branch moved
    world.git("proposer", "pack-refs", "--all")
    lock = world.clone("a") / ".git" / "refs" / "heads" / "main.lock"
    lock.write_text("")
    assert not step(judged=False)  # a ref being written: fetched
    lock.unlink()
    assert not step()
    for where in ("a", "twin"):
        world.git(where, "config", "remote.origin.tagOpt", "--no-tags")
    assert not step(judged=False)  # the config changed since the clone: always fetched
    world.git("proposer", "push", "-q", "origin", "HEAD:refs/heads/q")
    assert step(judged=False)
