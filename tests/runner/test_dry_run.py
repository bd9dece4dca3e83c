"""`mergegate run --dry-run`: what a pass would claim, run and record; nothing written or pushed."""

from __future__ import annotations

from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml


def refs(world: World, where: str) -> str:
    return world.git(where, "for-each-ref", "--format=%(refname) %(objectname)")


def test_dry_run_says_what_would_happen_and_changes_nothing(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    world.propose(
        "a",
        {
            "jobs/ok.yaml": job_yaml("ok", ["echo", "x"]),
            "jobs/no.yaml": job_yaml("no", ["rm", "x"]),
        },
        who=world.alice,
    )
    world.signed_merge("a", world.bob)
    world.mg("status")  # the runner clone exists and has fetched once
    remote_before = world.git("admin", "ls-remote", str(world.remote))
    local_before = refs(world, "runner")
    git_dir = world.clone("runner") / ".git"
    files_before = sorted(
        p.relative_to(git_dir).as_posix() for p in git_dir.rglob("*") if "mergegate" in p.as_posix()
    )
    result = world.mg("run", "--dry-run", "--json")
    assert result.code == 0, result.err
    data = result.json()
    assert data["dry_run"] is True
    plan = {j["job"]: j for j in data["jobs"]}
    assert plan["ok"]["status"] == "would run" and plan["ok"]["command"] == ["echo", "x"]
    assert plan["no"]["status"] == "would reject" and "deny by default" in plan["no"]["reason"]
    assert [r["event"] for r in data["records"]] == ["rejected", "started", "finished", "scanned"]
    human = world.mg("run", "--dry-run")
    assert "would run" in human.out and "nothing was written or pushed" in human.out
    # Nothing written or pushed: remote refs, local refs (seen refs too), runner state.
    assert world.git("admin", "ls-remote", str(world.remote)) == remote_before
    after = refs(world, "runner")
    assert after == local_before
    assert (
        sorted(
            p.relative_to(git_dir).as_posix()
            for p in git_dir.rglob("*")
            if "mergegate" in p.as_posix()
        )
        == files_before
    )
    assert world.events("started") == []
    # A real pass then does what the dry run said.
    real = world.run_once().json()
    assert {j["job"]: j["status"] for j in real["jobs"]} == {"ok": "succeeded", "no": "rejected"}
    idle = world.mg("run", "--dry-run", "--json").json()
    assert idle["jobs"] == [] and idle["records"] == []
