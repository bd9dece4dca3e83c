"""`audit verify` and `verify` hold every run's attestation to the records it names (issue 25).

Real runner, real keys. Each tamper rewrites the last audit commit as a holder of the runner key
could (signed with that key, so that every other rule holds) and is read by a fresh clone, which
has no memory of the branch it replaced: only the attestation check can tell.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from mergegate.audit import records as audit_records
from mergegate.crypto import dsse
from tests.helpers.keys import SshKey, make_ssh_key
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml


def _two_runs(world: World) -> SshKey:
    """A gate whose runner ran two jobs in two passes (each with its attestation)."""
    key = make_ssh_key(world.tmp / "runner-keys", "runner")
    world.runner_args = ["--signing-key", str(key.private)]
    root = world.setup(
        policy_yaml(
            [world.bob.approver_entry()],
            [ECHO_RULE],
            runners=[{"name": "ci", "key": key.public_line}],
        )
    )
    for name in ("one", "two"):
        world.propose(name, {f"jobs/{name}.yaml": job_yaml(name, ["echo", name])}, who=world.alice)
        world.signed_merge(name)
        assert world.run_once("--trust-root", root).code == 0
    return key


def _last_run(checkout: Path) -> tuple[Path, Path]:
    """(the log file, the attestation file of the last run)."""
    log = checkout / "audit" / "log-000001.jsonl"
    records = [json.loads(line) for line in log.read_text().splitlines()]
    run_id = [r for r in records if r["event"] == "finished"][-1]["run_id"]
    return log, checkout / "audit" / "attestations" / f"{run_id}.intoto.json"


def _resign(path: Path, key: Path, edit: Callable[[dict[str, object]], None] | None = None) -> None:
    envelope = dsse.Envelope.from_bytes(path.read_bytes())
    statement = json.loads(envelope.payload)
    if edit is not None:
        edit(statement)
    payload = audit_records.canonical(statement)
    signed = dsse.sign(envelope.payload_type, payload, dsse.load_signer(key))
    path.write_bytes(signed.to_bytes())


def _other_key(world: World, runner: SshKey, checkout: Path) -> None:
    _resign(_last_run(checkout)[1], world.mallory.key.private)


def _changed_statement(world: World, runner: SshKey, checkout: Path) -> None:
    def succeeded_is_failed(statement: dict[str, object]) -> None:
        statement["predicate"]["result"]["exitCode"] = 1  # type: ignore[index]

    _resign(_last_run(checkout)[1], runner.private, succeeded_is_failed)


def _changed_record(world: World, runner: SshKey, checkout: Path) -> None:
    """The finished record edited and the chain re-hashed after it: a valid chain, but not the
    record the attestation names."""
    log, _ = _last_run(checkout)
    records = [json.loads(line) for line in log.read_text().splitlines()]
    prev = "0" * 64
    for record in records:
        if record["event"] == "finished" and record is records[-2]:
            record["stdout_tail"] = "forged\n"
        record["prev"] = prev
        record["hash"] = audit_records.body_hash(record)
        prev = record["hash"]
    log.write_bytes(b"".join(audit_records.canonical(r) + b"\n" for r in records))


def _missing(world: World, runner: SshKey, checkout: Path) -> None:
    _last_run(checkout)[1].unlink()


@pytest.mark.parametrize(
    ("tamper", "says"),
    [
        (_other_key, "is not signed by a runner key of policy/policy.yaml"),
        (_changed_statement, "does not match the records it names"),
        (_changed_record, "does not match the records it names"),
        (_missing, "has no attestation"),
    ],
)
def test_a_tampered_attestation_or_its_records_is_tampering(
    tmp_path: Path, tamper: Callable[[World, SshKey, Path], None], says: str
) -> None:
    world = World(tmp_path)
    runner = _two_runs(world)
    assert world.mg("audit", "verify", where="admin").code == 0
    checkout = world.checkout_audit()
    world.git("mallory", "reset", "-q", "--soft", "HEAD~1")
    tamper(world, runner, checkout)
    world.commit_audit(message="rewritten", sign=runner, push=False)
    world.git("mallory", "push", "-q", "-f", "origin", "HEAD:refs/heads/mergegate/audit")

    result = world.mg("audit", "verify", where="fresh")
    assert result.code == 3, result.out + result.err
    assert says in result.err and "tampering" in result.err, result.err
    verified = world.mg("verify", "--json", where="fresh2")
    assert verified.code == 3, verified.out + verified.err
    assert any(says in v for v in verified.json()["violations"]), verified.out


def test_an_untampered_gate_verifies(tmp_path: Path) -> None:
    world = World(tmp_path)
    _two_runs(world)
    assert world.mg("audit", "verify", where="fresh").code == 0
    assert world.mg("verify", where="fresh").code == 0
