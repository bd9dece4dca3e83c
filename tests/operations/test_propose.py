"""`mergegate propose`: a job on a branch from approved, judged exactly as `check` judges it."""

from __future__ import annotations

from tests.helpers.repos import ECHO_RULE, Person, World, policy_yaml


def agent(world: World, who: Person | None = None, *, sign: bool = False) -> None:
    """The proposer's clone with a git identity (and, with `sign`, ssh signing on)."""
    person = who or world.alice
    world.clone("proposer")
    world.git("proposer", "config", "user.name", person.name)
    world.git("proposer", "config", "user.email", person.email)
    if sign:
        world.git("proposer", "config", "gpg.format", "ssh")
        world.git("proposer", "config", "user.signingkey", str(person.key.private))
        world.git("proposer", "config", "commit.gpgsign", "true")


def test_propose_push_approve_run(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    agent(world)
    result = world.mg(
        "propose",
        "hello",
        "--description",
        "say hello",
        "--push",
        "--",
        "echo",
        "hello world",
        where="proposer",
    )
    assert result.code == 0, result.err
    assert "allowed  jobs/hello.yaml: allowed by commands[0] (echo)" in result.out
    assert (
        "proposed jobs/hello.yaml on branch propose/hello" in result.out
        and "unsigned" in result.out
    )
    assert "pushed to origin/propose/hello" in result.out
    assert "mergegate approve origin/propose/hello --merge" in result.out
    # The branch starts at approved and holds exactly the job file.
    world.fetch("admin")
    assert world.git("admin", "rev-parse", "origin/propose/hello~1") == world.git(
        "admin", "rev-parse", "origin/approved"
    )
    assert (
        world.git("admin", "diff", "--name-only", "origin/approved", "origin/propose/hello")
        == "jobs/hello.yaml"
    )
    text = world.git("admin", "show", "origin/propose/hello:jobs/hello.yaml")
    assert text == "id: hello\ncommand:\n- echo\n- hello world\ndescription: say hello"
    # The proposer's working tree and checked-out branch are untouched.
    assert world.git("proposer", "status", "--porcelain") == ""
    assert world.git("proposer", "symbolic-ref", "--short", "HEAD") == "main"
    # `check` on the pushed branch says what propose said.
    check = world.mg("check", "origin/propose/hello", "--json").json()
    assert [(f["path"], f["state"]) for f in check["files"]] == [("jobs/hello.yaml", "allowed")]
    world.signed_merge("propose/hello", world.bob)
    (job,) = world.run_once().json()["jobs"]
    assert job["job"] == "hello" and job["status"] == "succeeded"


def test_propose_again_returns_the_existing_branch(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    agent(world)
    first = world.mg(
        "propose", "hello", "--push", "--json", "--", "echo", "hi", where="proposer"
    ).json()
    again = world.mg(
        "propose", "hello", "--push", "--json", "--", "echo", "hi", where="proposer"
    ).json()
    assert first["created"] is True and again["created"] is False
    assert again["commit"] == first["commit"] and again["branch"] == "propose/hello"
    assert again["pushed_to"] == "origin/propose/hello"
    # From another clone too (the branch is found on the remote).
    elsewhere = world.clone("agent-2")
    world.git(elsewhere, "config", "user.name", "alice")
    world.git(elsewhere, "config", "user.email", "alice@example.com")
    third = world.mg("propose", "hello", "--json", "--", "echo", "hi", where="agent-2").json()
    assert third["created"] is False and third["commit"] == first["commit"]
    # A changed proposal is one more commit on the same branch: no force-push.
    changed = world.mg(
        "propose", "hello", "--push", "--json", "--", "echo", "bye", where="proposer"
    ).json()
    assert changed["created"] is True
    world.fetch("admin")
    assert world.git("admin", "rev-parse", "origin/propose/hello~1") == first["commit"]
    # The same content as approved already has is not a proposal.
    world.signed_merge("propose/hello", world.bob)
    done = world.mg("propose", "hello", "--", "echo", "bye", where="proposer")
    assert done.code == 2 and "already on approved with exactly this content" in done.err


def test_propose_signs_when_git_is_configured_to_sign(world: World) -> None:
    world.setup(
        policy_yaml(
            [world.bob.approver_entry()],
            [ECHO_RULE],
            proposers=[world.alice.approver_entry()],
            require_signed_proposals=True,
        )
    )
    agent(world, sign=True)
    result = world.mg("propose", "hello", "--push", "--json", "--", "echo", "hi", where="proposer")
    assert result.code == 0, result.err
    data = result.json()
    assert data["signed"] is True
    world.fetch("admin")
    assert "gpgsig" in world.git("admin", "cat-file", "commit", "origin/propose/hello")
    world.signed_merge("propose/hello", world.bob)
    (job,) = world.run_once().json()["jobs"]
    assert job["status"] == "succeeded", job


def test_invalid_or_denied_proposals_write_nothing(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    agent(world)
    refs_before = world.git("proposer", "for-each-ref")
    denied = world.mg("propose", "wipe", "--push", "--", "rm", "-rf", "/", where="proposer")
    assert denied.code == 1
    assert denied.err.startswith(
        "error: the policy in force would deny jobs/wipe.yaml: no rule in policy/policy.yaml"
    )
    assert (
        "hint: propose what the policy allows, or a policy change that allows it (--even-if-denied"
        in denied.err
    )
    bad_id = world.mg("propose", "Bad_ID", "--", "echo", where="proposer")
    assert bad_id.code == 2 and "field 'id'" in bad_id.err
    escape = world.mg("propose", "esc", "--cwd", "../..", "--", "echo", where="proposer")
    assert escape.code == 2 and "must be a path inside the repository" in escape.err
    forbidden = world.mg(
        "propose", "env", "--env", "LD_PRELOAD=/x.so", "--", "echo", where="proposer"
    )
    assert forbidden.code == 2 and "a job may not set LD_PRELOAD" in forbidden.err
    assert world.git("proposer", "for-each-ref") == refs_before
    assert "propose/" not in world.git("admin", "ls-remote", "origin")


def test_credential_shaped_arguments_are_refused_without_echoing_them(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [{"program": "curl"}]))
    agent(world)
    token = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"
    for args in (
        ["--", "curl", "-H", f"Authorization: token {token}", "https://api.example"],
        ["--env", f"GITHUB_TOKEN={token}", "--", "curl", "https://api.example"],
        ["--description", f"uses {token}", "--", "curl", "https://api.example"],
        ["--json", "--", "curl", "-u", f"me:{token}", "https://api.example"],
    ):
        result = world.mg("propose", "call", *args, where="proposer")
        assert result.code == 2, (args, result.err)
        assert "credentials do not belong in a job file" in result.err + result.out
        assert token not in result.out + result.err
    assert "propose/" not in world.git("proposer", "for-each-ref")
    bad_env = world.mg("propose", "call", "--env", token, "--", "curl", where="proposer")
    assert (
        bad_env.code == 2
        and "--env number 1 is not NAME=VALUE" in bad_env.err
        and token not in bad_env.err
    )


def test_propose_accepts_every_spelling_of_the_base(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    agent(world)
    for i, base in enumerate(
        ("approved", "origin/approved", "refs/remotes/origin/approved", "refs/heads/approved")
    ):
        result = world.mg(
            "propose", f"j{i}", "--base", base, "--json", "--", "echo", str(i), where="proposer"
        )
        assert result.code == 0, (base, result.err)
        assert result.json()["base"] == world.git("admin", "rev-parse", "origin/approved")


def test_push_rejected_is_one_line_with_a_hint(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    agent(world)
    world.git("proposer", "fetch", "-q", "origin")  # the proposer's view of the remote, then...
    # ...someone else pushes a commit to the proposal branch name.
    other = world.clone("other")
    world.git(other, "checkout", "-q", "-b", "propose/hello", "origin/approved")
    world.git(other, "commit", "-q", "--allow-empty", "-m", "mine", who=world.carol)
    world.git(other, "push", "-q", "origin", "propose/hello")
    result = world.mg(
        "propose", "hello", "--push", "--no-fetch", "--", "echo", "hi", where="proposer"
    )
    assert result.code == 2
    assert (
        result.err.splitlines()[0]
        == "error: push rejected: origin/propose/hello moved since it was fetched (someone else "
        "pushed to it)"
    )
    assert result.err.splitlines()[1].startswith("hint: git fetch origin propose/hello")


def test_signing_failures_are_one_line_with_a_hint(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    agent(world)
    world.git("proposer", "config", "commit.gpgsign", "true")
    world.git("proposer", "config", "gpg.format", "ssh")
    world.git("proposer", "config", "user.signingkey", str(world.tmp / "no-such-key"))
    missing = world.mg("propose", "hello", "--", "echo", "hi", where="proposer")
    assert missing.code == 2
    assert missing.err.splitlines() == [
        f"error: git could not sign: the signing key file {world.tmp / 'no-such-key'} does not "
        "exist",
        "hint: point git at your key: git config user.signingkey ~/.ssh/id_ed25519.pub (ls "
        "~/.ssh/*.pub lists yours)",
    ]
    world.git("proposer", "config", "--unset", "gpg.format")
    world.git("proposer", "config", "user.signingkey", str(world.alice.key.private) + ".pub")
    unset = world.mg("propose", "hello", "--", "echo", "hi", where="proposer")
    assert unset.code == 2
    assert "but gpg.format is unset, so git ran gpg" in unset.err.splitlines()[0]
    assert unset.err.splitlines()[1] == "hint: git config gpg.format ssh"


def test_open_pr_opens_one_pull_request_with_the_verdict(world: World) -> None:
    from tests.helpers.fake_github import FakeGitHub

    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    agent(world)
    no_token = world.mg(
        "propose",
        "hello",
        "--open-pr",
        "--",
        "echo",
        "hi",
        where="proposer",
        env={"GITHUB_TOKEN": ""},
    )
    assert no_token.code == 2 and "needs a GitHub token" in no_token.err
    assert "propose/" not in world.git(
        "admin", "ls-remote", "origin"
    )  # refused before anything was pushed
    with FakeGitHub() as github:
        env = github.env()
        first = world.mg(
            "propose", "hello", "--open-pr", "--json", "--", "echo", "hi", where="proposer", env=env
        )
        assert first.code == 0, first.err
        data = first.json()
        assert (
            data["pull"] == 1
            and data["pull_created"] is True
            and data["pushed_to"] == "origin/propose/hello"
        )
        (created,) = github.created
        assert created["head"] == "propose/hello" and created["base"] == "approved"
        assert (
            "**allowed** `jobs/hello.yaml`" in created["body"]
            and "runs `echo hi`" in created["body"]
        )
        again = world.mg(
            "propose", "hello", "--open-pr", "--", "echo", "hi", where="proposer", env=env
        )
        assert again.code == 0, again.err
        assert "already open: pull request #1" in again.out
        lines = (
            again.out.splitlines()
        )  # said in the order it happened: the push, then the pull request
        assert lines.index("pushed to origin/propose/hello") < next(
            i for i, line in enumerate(lines) if "pull request #1" in line
        )
        assert len(github.created) == 1  # no duplicate
        assert env["GITHUB_TOKEN"] not in first.out + first.err + again.out + again.err


def test_propose_never_targets_approved_or_the_audit_branch(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    agent(world)
    for branch in (
        "approved",
        "origin/approved",
        "mergegate/audit",
        "refs/heads/mergegate/audit",
        "mergegate/x",
    ):
        result = world.mg(
            "propose", "hello", "--branch", branch, "--push", "--", "echo", "hi", where="proposer"
        )
        assert result.code == 2, branch
        assert result.err.startswith("error: a proposal cannot be made on "), result.err
    bad = world.mg("propose", "hello", "--branch", "a..b", "--", "echo", "hi", where="proposer")
    assert bad.code == 2 and "is not a valid branch name" in bad.err
    refs = world.git("admin", "ls-remote", "origin")
    assert "mergegate/" not in refs and "propose/" not in refs


def test_even_if_denied_proposes_a_denied_job_for_a_policy_change(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    agent(world)
    result = world.mg(
        "propose",
        "backup",
        "--even-if-denied",
        "--json",
        "--",
        "tar",
        "czf",
        "b.tgz",
        ".",
        where="proposer",
    )
    assert result.code == 0, result.err
    data = result.json()
    assert (
        data["created"] is True and data["exit_code"] == 1 and data["files"][0]["state"] == "denied"
    )
    # Invalid is refused whatever the flag.
    invalid = world.mg(
        "propose", "bad", "--even-if-denied", "--cwd", "/etc", "--", "tar", where="proposer"
    )
    assert invalid.code == 2


def test_propose_writes_retries_labels_and_idempotent(world: World) -> None:
    world.setup(
        policy_yaml(
            [world.bob.approver_entry()], [ECHO_RULE], max_retries=2, runners=world.signing_runner()
        )
    )
    agent(world)
    result = world.mg(
        "propose",
        "sync",
        "--retries",
        "2",
        "--idempotent",
        "--runs-on",
        "linux",
        "--runs-on",
        "gpu",
        "--json",
        "--",
        "echo",
        "sync",
        where="proposer",
    )
    assert result.code == 0, result.err
    text = world.git("proposer", "show", f"{result.json()['commit']}:jobs/sync.yaml")
    assert (
        "retries: 2" in text and "idempotent: true" in text and "runs_on:\n- linux\n- gpu" in text
    )
    too_many = world.mg("propose", "again", "--retries", "3", "--", "echo", "x", where="proposer")
    assert too_many.code == 1 and "retries 3 exceeds max_retries 2" in too_many.out + too_many.err
