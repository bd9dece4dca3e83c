"""`mergegate lint` and the pre-commit hook, on real files in a real working tree."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

import yaml

from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml

ROOT = Path(__file__).resolve().parents[2]


def lint(world: World, *args: str) -> tuple[int, str, str]:
    result = world.mg("lint", *args, where="admin")
    return result.code, result.out, result.err


def test_valid_files_lint_clean(world: World) -> None:
    world.write(
        "admin",
        {
            "policy/policy.yaml": policy_yaml([world.bob.approver_entry()], [ECHO_RULE]),
            "jobs/hello.yaml": job_yaml("hello", ["echo", "hi"]),
        },
    )
    code, out, err = lint(world, "jobs/hello.yaml", "policy/policy.yaml")
    assert code == 0, err
    assert "ok  jobs/hello.yaml: job hello: echo hi" in out
    assert "policy: 1 approver(s), 1 command rule(s)" in out


def test_each_problem_is_one_line_with_file_and_line(world: World) -> None:
    world.write(
        "admin",
        {
            "jobs/wrong-id.yaml": "id: other\ncommand: [echo]\n",
            "jobs/dup.yaml": "id: dup\ncommand: [echo]\ncommand: [rm]\n",
            "jobs/escape.yaml": "id: escape\ncommand: [echo]\ncwd: ../..\n",
            "jobs/secret.yaml": "id: secret\ncommand: [curl, -H, 'Authorization: Bearer "
            "ghp_0123456789abcdefghijABCDEFGHIJ012345']\n",
            "job/misplaced.yaml": job_yaml("misplaced", ["echo"]),
        },
    )
    code, out, err = lint(
        world,
        "jobs/wrong-id.yaml",
        "jobs/dup.yaml",
        "jobs/escape.yaml",
        "jobs/secret.yaml",
        "job/misplaced.yaml",
    )
    assert code == 2
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert (
        lines[0]
        == "error: field 'id': 'other' must equal the file name 'wrong-id' (jobs/wrong-id.yaml:1)"
    )
    assert "duplicate key" in lines[1] and lines[1].endswith("(jobs/dup.yaml:3)")
    assert "must be a path inside the repository (jobs/escape.yaml:3)" in lines[2]
    assert "looks like a" in lines[3] and "credentials do not belong in a job file" in lines[3]
    assert "neither a job file" in lines[4]
    # The credential itself is never echoed.
    assert "ghp_" not in out + err


def test_duplicate_ids_across_jobs_are_found(world: World) -> None:
    world.write(
        "admin",
        {"jobs/a/x.yaml": job_yaml("x", ["echo"]), "jobs/b/x.yaml": job_yaml("x", ["echo"])},
    )
    code, _, err = lint(world, "jobs/a/x.yaml")
    assert code == 2 and "job id 'x' is not unique: also jobs/b/x.yaml" in err


def test_invalid_policy_names_the_field(world: World) -> None:
    world.write(
        "admin",
        {
            "policy/policy.yaml": "version: 1\napprovers: []\ncommands:\n  - program: echo\n    "
            "args: [x]\n"
        },
    )
    code, out, err = lint(world, "policy/policy.yaml", "--json")
    assert code == 2
    (finding,) = __import__("json").loads(out)["files"]
    assert (
        finding["ok"] is False
        and finding["line"] == 5
        and "unknown key 'args'" in finding["message"]
    )
    assert "(policy/policy.yaml:5)" not in out  # --json keeps stdout pure JSON
    assert err == ""


def test_pre_commit_hook_definition_runs_lint_on_the_files_it_selects(world: World) -> None:
    (hook,) = yaml.safe_load((ROOT / ".pre-commit-hooks.yaml").read_text())
    assert hook["id"] == "mergegate-lint" and hook["language"] == "python"
    pattern = re.compile(hook["files"])
    tree = {
        "jobs/ok.yaml": job_yaml("ok", ["echo"]),
        "jobs/bad.yml": "id: bad\n",
        "README.md": "x\n",
        "jobs/README.md": "x\n",
        "policy/policy.yaml": policy_yaml([world.bob.approver_entry()], [ECHO_RULE]),
    }
    world.write("admin", tree)
    selected = sorted(p for p in tree if pattern.search(p))
    assert selected == ["jobs/bad.yml", "jobs/ok.yaml", "policy/policy.yaml"]
    # pre-commit runs `entry` with the selected files appended, from the repository root.
    entry = shlex.split(hook["entry"])
    assert entry[0] == "mergegate"
    proc = subprocess.run(
        [sys.executable, "-m", "mergegate", *entry[1:], *selected],
        cwd=world.clone("admin"),
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert proc.stdout == ""  # --quiet: only problems
    assert proc.stderr.splitlines() == [
        "error: 'command' is required (jobs/bad.yml:1)",
        "hint: every job key is in docs/policy.md#job-files",  # (job errors lead somewhere too)
    ]


def test_policy_errors_end_with_a_hint_that_leads_somewhere(world: World) -> None:
    cases = {
        "version: 1\napprovers:\n  - name: alice\n    github: octocat\n": (
            "found 'octocat' (policy/policy.yaml:4)",
            "hint: find an account's numeric id: gh api users/LOGIN --jq .id",
        ),
        "version: 1\napprovers:\n  - name: alice\n    github: 7\n  - name: bob\n    github: 7\n": (
            "GitHub id 7 belongs to both 'alice' and 'bob' (policy/policy.yaml:6)",
            "hint: one account is one person: keep it "
            "under one name (gh api user/7 --jq .login shows whose it is)",
        ),
        "version: 1\napprovers:\n  - name: alice\n    github: 7\ngithub:\n  merge_key: []\n": (
            "(did you mean 'merge_keys'?)",
            "hint: the github: keys are in docs/policy.md and docs/github.md",
        ),
        "version: 1\napprover: []\n": (
            "(did you mean 'approvers'?)",
            "hint: every policy key is in docs/policy.md",
        ),
    }
    for text, (error, hint) in cases.items():
        world.write("admin", {"policy/policy.yaml": text})
        code, _, err = lint(world, "policy/policy.yaml")
        assert code == 2
        lines = err.splitlines()
        assert lines[0].startswith("error: ") and error in lines[0], err
        assert lines[1].startswith(hint), err


def test_the_worked_example_policies_of_the_docs_are_valid(world: World) -> None:
    """A reader copies a worked example from docs/policy.md as their policy: each must lint
    clean."""
    section = (ROOT / "docs/policy.md").read_text().split("## Worked examples", 1)[1]
    examples = re.findall(r"```yaml\n(.*?)```", section, re.S)
    assert len(examples) == 3
    for text in examples:
        # The two-person example keeps dave's key in a file (`key: {file: keys/dave.pub}`).
        world.write(
            "admin",
            {"policy/policy.yaml": text, "policy/keys/dave.pub": world.bob.key.public_line + "\n"},
        )
        code, out, err = lint(world, "policy/policy.yaml")
        assert code == 0, f"{err}\n{text}"
        assert out.startswith("ok  policy/policy.yaml: policy: "), out


def test_this_repositorys_own_gate_files_lint_clean() -> None:
    """README: policy/policy.yaml is a real example policy and jobs/ holds example jobs."""
    files = [
        "policy/policy.yaml",
        *sorted(str(p.relative_to(ROOT)) for p in (ROOT / "jobs").rglob("*.yaml")),
    ]
    assert len(files) >= 4
    proc = subprocess.run(
        [sys.executable, "-m", "mergegate", "lint", *files],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stderr == ""
