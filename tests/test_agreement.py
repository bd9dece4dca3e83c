"""One judge: over a table of proposals, `check`'s verdict is the runner's.

Each proposal (one per rule and per bypass of issue 8 that a pull request can carry) is first
checked as the merge bob would sign (`check(..., merger="bob")`), then bob makes that signed merge
and the runner judges it. Per job file, the verdict (runs or not, and the reason, with the merge's
id written as "the merge") and the policy change's verdict must be identical.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from mergegate.operations.check import check
from tests.helpers.repos import Person, World, job_yaml, policy_yaml


@dataclass(frozen=True)
class Case:
    name: str
    files: dict[str, str] = field(default_factory=dict)
    author: str = "alice"
    sign: bool = False  # the proposal commit signed by its author
    approve_with: str | None = None  # carol's approval commit: "current", "stale" or "mallory"
    build: Callable[[World, Path], None] | None = (
        None  # extra work in the proposer's clone before the commit
    )
    expect: dict[str, bool] = field(
        default_factory=dict
    )  # path -> runs (a guard that the table means what it says)
    policy: str | None = None  # expected policy verdict: "adopted" or "rejected"


def _policy(
    world: World, *, signed: bool = False, commands: list[dict[str, object]] | None = None
) -> str:
    extra: dict[str, object] = (
        {"require_signed_proposals": True, "proposers": [world.alice.approver_entry()]}
        if signed
        else {}
    )
    approvers = [
        world.bob.approver_entry(),
        world.carol.approver_entry(),
        world.alice.approver_entry(),
    ]
    rules = [{"name": "prod", "labels": ["prod"], "approvals_required": 2}]
    return policy_yaml(
        approvers,
        commands or [{"program": "echo"}, {"program": "cat"}],
        approval_rules=rules,
        policy_approvals_required=2,
        **extra,
    )


def _gitlink(world: World, clone: Path) -> None:
    world.git(
        clone,
        "update-index",
        "--add",
        "--cacheinfo",
        f"160000,{world.git(clone, 'rev-parse', 'HEAD')},jobs/sub.yaml",
    )


def _symlink_job(world: World, clone: Path) -> None:
    (clone / "jobs").mkdir(exist_ok=True)
    (clone / "jobs/link.yaml").symlink_to("../README")
    world.git(clone, "add", "jobs/link.yaml")


def _escape(world: World, clone: Path) -> None:
    (clone / "data").symlink_to("/etc/hostname")
    world.git(clone, "add", "data")


def _cases(world: World) -> list[Case]:
    prod = job_yaml("deploy", ["echo", "deploy"], labels=["prod"])
    return [
        Case("ok", {"jobs/ok.yaml": job_yaml("ok", ["echo", "ok"])}, expect={"jobs/ok.yaml": True}),
        Case(
            "denied",
            {"jobs/rm.yaml": job_yaml("rm", ["rm", "-rf", "/tmp/x"])},
            expect={"jobs/rm.yaml": False},
        ),
        Case("no-command", {"jobs/bad.yaml": "id: bad\n"}, expect={"jobs/bad.yaml": False}),
        Case(
            "wrong-id",
            {"jobs/name.yaml": job_yaml("other", ["echo"])},
            expect={"jobs/name.yaml": False},
        ),
        Case(
            "self-approval",
            {"jobs/mine.yaml": job_yaml("mine", ["echo"])},
            author="bob",
            expect={"jobs/mine.yaml": False},
        ),
        Case("prod-one", {"jobs/p1/deploy.yaml": prod}, expect={"jobs/p1/deploy.yaml": False}),
        Case(
            "prod-two",
            {"jobs/p2/deploy2.yaml": job_yaml("deploy2", ["echo"], labels=["prod"])},
            approve_with="current",
            expect={"jobs/p2/deploy2.yaml": True},
        ),
        Case(
            "stale",
            {"jobs/p3/deploy3.yaml": job_yaml("deploy3", ["echo"], labels=["prod"])},
            approve_with="stale",
            expect={"jobs/p3/deploy3.yaml": False},
        ),
        Case(
            "unknown-key",
            {"jobs/p4/deploy4.yaml": job_yaml("deploy4", ["echo"], labels=["prod"])},
            approve_with="mallory",
            expect={"jobs/p4/deploy4.yaml": False},
        ),
        Case(
            "deep-yaml",
            {
                "jobs/deep.yaml": "id: deep\ncommand: [echo]\ndescription: "
                + "[" * 3000
                + "]" * 3000
                + "\n"
            },
            expect={"jobs/deep.yaml": False},
        ),
        Case("gitlink", build=_gitlink, expect={"jobs/sub.yaml": False}),
        Case("symlink-job", build=_symlink_job, expect={"jobs/link.yaml": False}),
        Case(
            "forbidden-env",
            {"jobs/env.yaml": job_yaml("env", ["echo"], env={"LD_PRELOAD": "x"})},
            expect={"jobs/env.yaml": False},
        ),
        Case(
            "timeout",
            {"jobs/slow.yaml": job_yaml("slow", ["echo"], timeout_seconds=100000)},
            expect={"jobs/slow.yaml": False},
        ),
        Case(
            "duplicate-id",
            {
                "jobs/a/dup.yaml": job_yaml("dup", ["echo"]),
                "jobs/b/dup.yaml": job_yaml("dup", ["echo"]),
            },
            expect={"jobs/a/dup.yaml": False, "jobs/b/dup.yaml": False},
        ),
        Case(
            "policy-invalid", {"policy/policy.yaml": "version: 1\ncomands: []\n"}, policy="rejected"
        ),
        Case(
            "policy-no-quorum",
            {
                "policy/policy.yaml": _policy(
                    world, commands=[{"program": "echo"}, {"program": "sh"}]
                ),
                "jobs/with-policy.yaml": job_yaml("with-policy", ["echo"]),
            },
            policy="rejected",
            expect={"jobs/with-policy.yaml": False},
        ),
        Case(
            "policy-adopted",
            {
                "policy/policy.yaml": _policy(world, signed=True),
                "jobs/after.yaml": job_yaml("after", ["echo"]),
            },
            approve_with="current",
            policy="adopted",
            expect={"jobs/after.yaml": True},
        ),
        Case(
            "unsigned-proposal",
            {"jobs/unsigned.yaml": job_yaml("unsigned", ["echo"])},
            expect={"jobs/unsigned.yaml": False},
        ),
        Case(
            "signed-proposal",
            {"jobs/signed.yaml": job_yaml("signed", ["echo"])},
            sign=True,
            expect={"jobs/signed.yaml": True},
        ),
        Case(
            "stray-id",
            {"jobs/stray.yaml": job_yaml("stray", ["echo"])},
            sign=True,
            expect={"jobs/stray.yaml": True},
        ),
        # Last: the symlink stays in the tree and refuses every later job.
        Case(
            "symlink-escape",
            {"jobs/cat.yaml": job_yaml("cat", ["cat", "data"])},
            sign=True,
            build=_escape,
            expect={"jobs/cat.yaml": False},
        ),
    ]


def _propose(world: World, case: Case) -> str:
    person: Person = getattr(world, case.author)
    where = "proposer"
    world.fetch(where)
    world.git(where, "checkout", "-q", "-B", case.name, "origin/approved")
    world.write(where, case.files)
    world.git(where, "add", "-A")
    if case.build is not None:
        case.build(world, world.clone(where))
    world.git(
        where,
        "commit",
        "-q",
        "-m",
        case.name,
        *(["-S"] if case.sign else []),
        who=person,
        sign=person.key if case.sign else None,
    )
    world.git(where, "push", "-q", "-f", "origin", case.name)
    if case.approve_with is not None:
        trailers = [(p, world.blob(case.name, p)) for p in case.files]
        if case.approve_with == "stale":
            trailers = [(p, "0" * 39 + "1") for p in case.files]
        signer = world.mallory.key if case.approve_with == "mallory" else world.carol.key
        world.approval_commit(case.name, trailers, who=world.carol, sign=signer)
    return world.git(where, "rev-parse", "HEAD")


def test_check_and_the_runner_reach_the_same_verdict(world: World) -> None:
    world.setup(_policy(world), files={"README": "readme\n"})
    checker = world.clone("checker")
    cases = _cases(world)
    # A stray job pushed without approval, sharing an id with a later approved one.
    world.checkout_approved("approver")
    world.write("approver", {"jobs/x/stray.yaml": job_yaml("stray", ["echo", "stray"])})
    world.git("approver", "add", "-A")
    world.git("approver", "commit", "-qm", "stray", who=world.mallory)
    world.git("approver", "push", "-q", "origin", "approved")
    world.run_once()
    assert len(cases) >= 20
    for case in cases:
        head = _propose(world, case)
        report = check(
            repo_path=checker,
            ref=f"origin/{case.name}",
            base="approved",
            remote="origin",
            fetch=True,
            merger="bob",
        )
        assert report.assessment is not None
        predicted = {d.path: (d.runnable, d.reason) for d in report.assessment.decisions}
        assert head
        verdict = report.assessment.policy_verdict
        merge = world.signed_merge(case.name, world.bob)
        result = world.run_once()
        ran = {
            str(j["path"]): (j["status"] in ("succeeded", "failed"), str(j["reason"] or ""))
            for j in result.json()["jobs"]
        }
        for path, (runnable, reason) in predicted.items():
            runner_runs, runner_reason = ran[path]
            assert runnable == runner_runs, (case.name, path, reason, runner_reason)
            if not runnable:
                assert reason == runner_reason.replace(merge[:7], "the merge"), case.name
        assert set(predicted) == {p for p, j in ran.items()}, case.name
        assert {p: r for p, (r, _) in predicted.items()} == case.expect, (case.name, predicted)
        changes = result.json()["policy_changes"]
        if case.policy is not None:
            assert verdict is not None and [c["status"] for c in changes] == [case.policy], (
                case.name
            )
            assert ("adopted" if verdict.adopted else "rejected") == case.policy, (
                case.name,
                verdict.reason,
            )
        else:
            assert changes == [] and verdict is None, case.name


def test_check_the_runner_status_and_verify_agree_on_change_windows(world: World) -> None:
    """Windows (issue 24): at each clock, `check` says a proposal's job would wait exactly when the
    runner, handed the same time, does not start it, and `status` gives the runner's reason;
    `verify` then accepts every start the runner made."""
    from tests.runner.test_windows import FREEZE, MONDAY, SUNDAY, _gate

    _gate(world)
    clocks = [SUNDAY, MONDAY, FREEZE, "2026-12-08T16:59:00+01:00", "2026-12-08T17:00:00+01:00"]
    for index, when in enumerate(clocks):
        env = {"MERGEGATE_CLOCK": when}
        path = f"jobs/prod/j{index}.yaml"
        world.propose(
            f"w{index}", {path: job_yaml(f"j{index}", ["echo", str(index)])}, who=world.alice
        )
        checked = world.mg("check", f"origin/w{index}", "--json", env=env, where="checker")
        assert checked.code == 0, checked.err
        (file,) = [f for f in checked.json()["files"] if f["path"] == path]
        _, _, wait = file["reason"].partition("; once merged it is ")
        world.signed_merge(f"w{index}", world.bob)
        assert world.run_once(env=env).code == 0
        started = {r["path"] for r in world.events("started")}
        assert (path in started) == (not wait), (when, wait)
        status = world.mg("status", "--json", env=env)
        (job,) = [j for j in status.json()["jobs"] if j["path"] == path]
        if wait:
            assert (job["state"], job["reason"]) == ("waiting", wait), when
    verified = world.mg("verify")
    assert verified.code == 0, verified.err


def test_status_the_runner_and_verify_agree_on_approval_expiry(world: World) -> None:
    """Expiry (issue 24): what `status` says the next pass will record about an approval too old
    is what the runner records, word for word; a start within the limit is one `verify` accepts,
    and the refusal is one it agrees with."""
    from tests.runner.test_approval_expiry import FRIDAY, MONDAY, PROD, _gate, _merge

    _gate(world, rule="48h")
    _merge(world, "deploy", job_yaml("deploy", ["echo", "v1"]))
    world.propose("other", {"jobs/other.yaml": job_yaml("other", ["echo", "o"])}, who=world.alice)
    world.signed_merge("other", world.bob)
    assert world.run_once(env={"MERGEGATE_CLOCK": FRIDAY}).code == 0
    status = world.mg("status", "--json", env={"MERGEGATE_CLOCK": MONDAY})
    predicted = {j["path"]: (j["state"], j["reason"]) for j in status.json()["jobs"]}
    world.run_once(env={"MERGEGATE_CLOCK": MONDAY})
    (rejected,) = world.events("rejected")
    assert predicted[PROD] == ("expired", f"(not yet recorded) {rejected['reason']}")
    assert [r["path"] for r in world.events("started")] == ["jobs/other.yaml"]
    verified = world.mg("verify")
    assert verified.code == 0, verified.err


def test_check_plan_the_runner_and_verify_agree_on_an_emergency(world: World) -> None:
    """Break-glass (issue 24): an approval commit carrying Mergegate-Emergency by an emergency
    approver, on a proposal short of its quorum, in a freeze. `check` says it runs on the
    emergency, `plan` lists it, the runner starts it with the same words in its record, and
    `verify` accepts the start and lists the review it owes."""
    from tests.runner.test_emergency import _at
    from tests.runner.test_windows import FREEZE, WINDOWS

    approvers = [p.approver_entry() for p in (world.alice, world.bob, world.carol)]
    world.setup(
        policy_yaml(
            approvers,
            [{"program": "echo"}],
            runners=world.signing_runner(),
            approvals_required=3,
            windows=WINDOWS,
            run_windows=["year-end-freeze"],
            emergency={"approvers": ["carol"], "review_within": "72h"},
        )
    )
    for branch, reason in (("ok", "payments down, INC-9"), ("go", "payments down, INC-10")):
        path = f"jobs/{branch}.yaml"
        world.propose(branch, {path: job_yaml(branch, ["echo", branch])}, who=world.mallory)
        blob = world.blob(branch, path)
        reviewer = world.clone("reviewer")
        world.fetch("reviewer")
        world.git(reviewer, "checkout", "-q", "-B", branch, f"origin/{branch}")
        world.git(
            reviewer, "commit", "-q", "-S", "--allow-empty", "-m", "break glass",
            "-m", f"Mergegate-Approve: {path} {blob}\nMergegate-Emergency: {reason}",
            who=world.carol, sign=world.carol.key,
        )  # fmt: skip
        world.git(reviewer, "push", "-q", "origin", branch)
        checked = world.mg("check", f"origin/{branch}", "--json", env=_at(FREEZE), where="checker")
        assert checked.code == 0, checked.err
        (file,) = [f for f in checked.json()["files"] if f["path"] == path]
        assert file["state"] == "allowed", file
        assert file["reason"].startswith(f"emergency by carol: '{reason}'"), file["reason"]
        assert "once merged it is waiting" not in file["reason"]
        world.signed_merge(branch, world.bob)
        planned = world.mg("plan", "--json", env=_at(FREEZE))
        assert [e["path"] for e in planned.json()["include"]] == [path]
        assert world.run_once(env=_at(FREEZE)).code == 0
        started = [r for r in world.events("started") if r["path"] == path]
        assert [s["emergency"] for s in started] == [{"by": ["carol"], "reason": reason}]
    verified = world.mg("verify", env=_at(FREEZE))
    assert verified.code == 0, verified.err
    assert verified.out.count("owed review: jobs/") == 2


def test_status_plan_the_runner_and_verify_agree_on_a_renewal(world: World) -> None:
    """Renewal (issue 24): an expired approval renewed by its quorum is what `status` calls
    queued, `plan` lists and the runner starts, naming the renewal; `verify` accepts the start
    by the same rule (rules/renewal.py) from the records' times."""
    from tests.runner.test_approval_renewal import MONDAY_NOON, PROD, _expire, _gate, _renew

    _gate(world, required=1)
    world.propose("deploy", {PROD: job_yaml("deploy", ["echo", "v1"])}, who=world.alice)
    world.signed_merge("deploy", world.bob)
    _expire(world)
    env = {"MERGEGATE_CLOCK": MONDAY_NOON}
    planned = world.mg("plan", "--json", env=env)
    assert planned.code == 0 and planned.json()["include"] == [], planned.out
    world.signing_clone("bob-clone", world.bob)
    renewed = _renew(world, "bob", MONDAY_NOON, "--json")
    assert renewed.code == 0, renewed.err
    status = world.mg("status", "--json", env=env)
    (job,) = [j for j in status.json()["jobs"] if j["path"] == PROD]
    assert job["state"] == "queued", job
    planned = world.mg("plan", "--json", env=env)
    assert [e["path"] for e in planned.json()["include"]] == [PROD]
    assert world.run_once(env=env).code == 0
    (started,) = world.events("started")
    assert started["renewal"] == renewed.json()["commit"]
    verified = world.mg("verify", env=env)
    assert verified.code == 0, verified.err
