"""`mergegate init` with a person's real name (issue 22, item 1): init writes YAML with a
serializer, loads it back with the runner's own loader before committing, and refuses up front
what no policy can hold; a name it accepts gives a gate that runs a job."""

from __future__ import annotations

import pytest
import yaml

from tests.helpers.repos import ECHO_RULE, World, job_yaml


def _identity(world: World, name: str) -> None:
    admin = world.clone("admin")
    world.git(admin, "config", "user.name", name)
    world.git(admin, "config", "user.email", "jose@example.com")


def test_init_as_a_person_with_a_non_ascii_name_gives_a_gate_that_runs_a_job(world: World) -> None:
    _identity(world, "José García")
    admin = world.clone("admin")
    made = world.mg("init", "--key", world.bob.key.public_line, "--solo", where="admin")
    assert made.code == 0, made.err
    policy = yaml.safe_load((admin / "policy/policy.yaml").read_text("utf-8"))
    assert policy["approvers"][0]["name"] == "José García"
    # Allow echo: a policy change approved by the one approver (bob's key is José's here).
    policy["commands"] = [ECHO_RULE]
    (admin / "policy/policy.yaml").write_text(yaml.safe_dump(policy, allow_unicode=True), "utf-8")
    world.git(admin, "commit", "-q", "-am", "allow echo")
    world.git(admin, "push", "-q", "origin", "main", "approved")
    world.propose("allow", {"policy/policy.yaml": yaml.safe_dump(policy, allow_unicode=True)})
    world.signed_merge("allow", world.bob)
    world.propose("hello", {"jobs/hello.yaml": job_yaml("hello", ["echo", "hola"])})
    # --solo: your own signed merge counts, and check says so (it said "who did not write it").
    checked = world.mg("check", "origin/hello", where="admin")
    assert checked.code == 0, checked.err
    assert "by an approver counts as one more" in checked.out, checked.out
    world.signed_merge("hello", world.bob)
    ran = world.run_once()
    assert ran.code == 0, ran.err
    assert [j["status"] for j in ran.json()["jobs"]] == ["succeeded"], ran.out
    assert world.mg("verify").code == 0


@pytest.mark.parametrize(
    "name", ["Bob: Smith", "#ops", "*admin", 'O\'Brien "Ops"', "ali\u202ece", "- x", "&a"]
)
def test_init_refuses_up_front_a_name_no_policy_can_hold_and_writes_nothing(
    world: World, name: str
) -> None:
    _identity(world, name)
    admin = world.clone("admin")
    made = world.mg("init", "--key", world.bob.key.public_line, where="admin")
    assert made.code == 2, made.err
    assert made.err.startswith("error: approver name "), made.err
    assert "hint: pass --approver" in made.err
    assert "\u202e" not in made.err  # shown escaped, never raw
    assert not (admin / "policy/policy.yaml").exists()
    assert world.git(admin, "branch", "--list", "approved") == ""
    # The same person passes a name the policy can hold, and init works.
    again = world.mg(
        "init", "--approver", "Bob Smith", "--key", world.bob.key.public_line, where="admin"
    )
    assert again.code == 0, again.err


@pytest.mark.parametrize("name", ["O'Brien", "Zoë Ødegård", "李小龙", "anne-marie.o_neil@ops"])
def test_init_accepts_names_of_any_script_and_writes_them_as_given(world: World, name: str) -> None:
    _identity(world, "someone")
    admin = world.clone("admin")
    made = world.mg("init", "--approver", name, "--key", world.bob.key.public_line, where="admin")
    assert made.code == 0, made.err
    policy = yaml.safe_load((admin / "policy/policy.yaml").read_text("utf-8"))
    assert policy["approvers"][0]["name"] == name
    assert world.mg("lint", "policy/policy.yaml", where="admin").code == 0


def test_init_writes_an_email_with_yaml_special_characters_as_given(world: World) -> None:
    _identity(world, "bob")
    admin = world.clone("admin")
    made = world.mg(
        "init", "--email", "bob: x #y", "--key", world.bob.key.public_line, where="admin"
    )
    assert made.code == 0, made.err
    policy = yaml.safe_load((admin / "policy/policy.yaml").read_text("utf-8"))
    assert policy["approvers"][0]["email"] == "bob: x #y"
