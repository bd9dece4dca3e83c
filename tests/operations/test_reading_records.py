"""Reading records as a person: `audit log`, `status --state`, `show`."""

from __future__ import annotations

from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml


def gate_with_history(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE, {"program": "false"}]))
    world.propose(
        "a",
        {
            "jobs/ok.yaml": job_yaml("ok", ["echo", "hello"]),
            "jobs/bad.yaml": job_yaml("bad", ["false"]),
            "jobs/no.yaml": job_yaml("no", ["rm", "x"]),
        },
        who=world.alice,
    )
    world.signed_merge("a", world.bob)
    assert world.run_once().code == 1
    world.propose("b", {"jobs/later.yaml": job_yaml("later", ["echo", "y"])}, who=world.alice)
    world.signed_merge("b", world.bob)


def test_audit_log_prints_and_filters_the_records(world: World) -> None:
    gate_with_history(world)
    everything = world.mg("audit", "log", "--json")
    assert everything.code == 0, everything.err
    data = everything.json()
    assert data["total"] == len(data["records"]) == len(world.records())
    assert [r["seq"] for r in data["records"]] == list(range(1, data["total"] + 1))
    ok = world.mg("audit", "log", "--job", "ok", "--json").json()["records"]
    assert [r["event"] for r in ok] == ["started", "finished"] and {r["job"] for r in ok} == {"ok"}
    human = world.mg("audit", "log", "--job", "ok").out.splitlines()
    assert len(human) == 2 and "succeeded" in human[1] and "ok" in human[1]
    finished = world.mg("audit", "log", "--event", "finished", "--json").json()["records"]
    assert sorted(r["job"] for r in finished) == ["bad", "ok"]
    rejected = world.mg("audit", "log", "--event", "rejected").out
    assert "no" in rejected and "deny by default" in rejected
    future = world.mg("audit", "log", "--since", "2999-01-01")
    assert future.code == 0 and future.out.strip() == "no records match"
    past = world.mg("audit", "log", "--since", "2000-01-01T00:00Z", "--json").json()
    assert len(past["records"]) == data["total"]
    bad = world.mg("audit", "log", "--since", "yesterday")
    assert (
        bad.code == 2
        and bad.err.startswith("error: --since 'yesterday' is not a date")
        and "hint: use YYYY-MM-DD" in bad.err
    )


def test_audit_log_on_a_tampered_log_is_an_integrity_error(world: World) -> None:
    gate_with_history(world)
    log = world.checkout_audit("admin") / "audit/log-000001.jsonl"
    log.write_text(log.read_text().replace("hello", "HELLO"))
    world.commit_audit("admin", "edit")
    result = world.mg("audit", "log", where="auditor")
    assert result.code == 3 and "hash does not match" in result.err


def test_status_state_filters(world: World) -> None:
    gate_with_history(world)
    queued = world.mg("status", "--state", "queued", "--json").json()["jobs"]
    assert [j["job"] for j in queued] == ["later"]
    two = world.mg("status", "--state", "failed", "--state", "rejected", "--json").json()["jobs"]
    assert sorted((j["job"], j["state"]) for j in two) == [("bad", "failed"), ("no", "rejected")]
    none = world.mg("status", "--state", "vetoed")
    assert none.code == 0 and none.out.strip() == "no job is vetoed (4 on approved)"
    wrong = world.mg("status", "--state", "done")
    assert wrong.code == 2 and "'done' is not one of" in wrong.err


def test_show_one_job_on_one_screen(world: World) -> None:
    gate_with_history(world)
    ok = world.mg("show", "ok", "--json")
    assert ok.code == 0, ok.err
    data = ok.json()
    assert data["path"] == "jobs/ok.yaml" and data["state"] == "succeeded"
    assert data["text"] == job_yaml("ok", ["echo", "hello"])
    (revision,) = data["revisions"]
    assert revision["approved"] is True
    assert [(v["person"], v["counted"]) for v in revision["votes"]] == [("bob", True)]
    (attempt,) = data["attempts"]
    assert (
        attempt["status"] == "succeeded"
        and attempt["stdout_tail"] == "hello"
        and attempt["duration_ms"] >= 0
    )
    assert data["next"].startswith("nothing: it ran")
    human = world.mg("show", "ok").out
    assert (
        "vote bob via merge signature" in human
        and "out| hello" in human
        and "next: nothing: it ran" in human
    )
    # A job the policy denies: the verdict says why; a queued one says what happens next.
    denied = world.mg("show", "no", "--json").json()
    assert denied["state"] == "rejected" and "deny by default" in denied["revisions"][0]["reason"]
    assert denied["attempts"][0]["status"] == "rejected"
    later = world.mg("show", "later", "--json").json()
    assert (
        later["state"] == "queued"
        and later["attempts"] == []
        and later["next"].startswith("the next runner pass runs it")
    )
    missing = world.mg("show", "nope")
    assert missing.code == 2 and missing.err.startswith("error: no job nope on approved")
    assert "hint: mergegate status lists the jobs" in missing.err


def test_show_explains_a_vote_that_did_not_count(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    world.propose("p", {"jobs/self.yaml": job_yaml("self", ["echo", "x"])}, who=world.bob)
    world.signed_merge("p", world.bob)  # bob approves his own job: separation of duties
    data = world.mg("show", "self", "--json").json()
    (revision,) = data["revisions"]
    assert revision["approved"] is False
    (vote,) = revision["votes"]
    assert vote["person"] == "bob" and vote["counted"] is False and "author" in vote["why"]
