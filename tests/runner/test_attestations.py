"""A run's attestation (issue 25): a real runner signs, in the commit that records each run's end,
an in-toto statement that standard tools verify with the runner's public key alone."""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from cryptography.hazmat.primitives import serialization
from securesystemslib.dsse import Envelope
from securesystemslib.signer import SSlibKey

from tests.helpers.keys import make_ssh_key
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((ROOT / "docs" / "attestation-run-v1.schema.json").read_text())


@pytest.fixture()
def world(tmp_path: Path) -> World:
    return World(tmp_path)


def _runner_key(world: World, kind: str) -> str:
    """A runner key of `kind` for every run_once; its public key line."""
    key = make_ssh_key(world.tmp / "runner-keys", "runner", kind=kind)
    world.runner_args = ["--signing-key", str(key.private)]
    return key.public_line


def _attestations(world: World) -> dict[str, bytes]:
    """run id -> the bytes of its attestation file on the remote's audit branch."""
    world.fetch("admin")
    names = world.git(
        "admin", "ls-tree", "--name-only", "origin/mergegate/audit:audit/attestations/"
    ).split()
    found = {}
    for name in names:
        blob = world.git("admin", "rev-parse", f"origin/mergegate/audit:audit/attestations/{name}")
        found[name.removesuffix(".intoto.json")] = _bytes(world, blob)
    return found


def _bytes(world: World, blob: str) -> bytes:
    return subprocess.run(
        ["git", "cat-file", "blob", blob], cwd=world.clone("admin"), capture_output=True, check=True
    ).stdout


def _verified_statement(data: bytes, public_line: str) -> dict[str, Any]:
    """The statement, as securesystemslib's DSSE verifier accepts it with the runner's public key:
    no mergegate code (the keyid is the key's ssh fingerprint, as `ssh-keygen -l` prints it)."""
    envelope = Envelope.from_dict(json.loads(data))
    public = serialization.load_ssh_public_key(public_line.encode())
    blob = base64.b64decode(public_line.split()[1])
    keyid = "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")
    envelope.verify([SSlibKey.from_crypto(public, keyid=keyid)], 1)
    assert envelope.payload_type == "application/vnd.in-toto+json"
    statement: dict[str, Any] = json.loads(envelope.payload)
    return statement


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa"])
def test_each_run_end_has_an_attestation_securesystemslib_verifies(world: World, kind: str) -> None:
    public_line = _runner_key(world, kind)
    root = world.setup(
        policy_yaml(
            [world.bob.approver_entry()],
            [ECHO_RULE, {"program": "sh", "args_prefix": ["-c"]}],
            runners=[{"name": "ci", "key": public_line}],
        )
    )
    jobs = {
        "jobs/hello.yaml": job_yaml("hello", ["echo", "héllo"]),
        "jobs/fails.yaml": job_yaml("fails", ["sh", "-c", "echo no >&2; exit 3"]),
    }
    world.propose("jobs", jobs, who=world.alice)
    merge = world.signed_merge("jobs")
    assert world.run_once("--trust-root", root).code == 1  # (one job failed)

    records = world.records()
    started = {r["run_id"]: r for r in records if r["event"] == "started"}
    finished = {r["run_id"]: r for r in records if r["event"] == "finished"}
    found = _attestations(world)
    assert set(found) == set(finished) and len(found) == 2
    for run_id, data in found.items():
        statement = _verified_statement(data, public_line)
        start, end = started[run_id], finished[run_id]
        job_bytes = jobs[start["path"]].encode()
        assert statement["_type"] == "https://in-toto.io/Statement/v1"
        assert statement["subject"] == [
            {
                "name": start["path"],
                "digest": {
                    "sha256": hashlib.sha256(job_bytes).hexdigest(),
                    "gitBlob": world.blob("approved", start["path"]),
                },
            },
            {"name": "approved", "digest": {"gitCommit": merge}},
        ]
        assert statement["predicateType"] == "https://mergegate.dev/attestation/run/v1"
        predicate = statement["predicate"]
        jsonschema.validate(predicate, SCHEMA)
        assert predicate["records"] == {
            "started": {"seq": start["seq"], "hash": start["hash"]},
            "finished": {"seq": end["seq"], "hash": end["hash"]},
        }
        assert predicate["approval"]["votes"] == [
            {"who": "bob", "how": "merge signature", "commit": merge}
        ]
        assert predicate["invocation"]["argv"] == start["command"]
        assert predicate["result"]["status"] == end["status"]
        assert predicate["result"]["exitCode"] == end["exit_code"]
        assert (
            predicate["output"]["stderr"]["tailSha256"]
            == hashlib.sha256(end["stderr_tail"].encode()).hexdigest()
        )
        assert predicate["policy"]["commit"] == start["policy_commit"] == root
        assert predicate["policy"]["blob"] == world.git(
            "admin", "rev-parse", f"{root}:policy/policy.yaml"
        )
    # Added in the very commit that records the run's end.
    for run_id in found:
        added = world.git(
            "admin",
            "log",
            "--format=%H",
            "--diff-filter=A",
            "origin/mergegate/audit",
            "--",
            f"audit/attestations/{run_id}.intoto.json",
        ).split()
        holds = world.git("admin", "show", f"{added[0]}", "--", "audit/log-000001.jsonl")
        assert '"event":"finished"' in holds and run_id in holds
    assert world.mg("audit", "verify", where="admin").code == 0


def test_without_runners_none_is_written_and_the_runner_says_so_once(world: World) -> None:
    root = world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    world.propose(
        "jobs",
        {f"jobs/j{n}.yaml": job_yaml(f"j{n}", ["echo", str(n)]) for n in range(2)},
        who=world.alice,
    )
    world.signed_merge("jobs")
    result = world.run_once("--trust-root", root)
    assert result.code == 0, result.err
    assert result.err.count("lists no runners: no key is trusted to sign") == 1, result.err
    world.fetch("admin")
    tree = world.git("admin", "ls-tree", "-r", "--name-only", "origin/mergegate/audit")
    assert "attestations" not in tree
    assert world.mg("audit", "verify", where="admin").code == 0


def test_a_runner_key_that_cannot_sign_stops_the_pass_before_its_job_but_not_an_idle_one(
    world: World,
) -> None:
    """A listed runner key behind a passphrase, with no ssh agent: an idle pass asks nothing of
    it (exit 0), while a pass with a job to run stops before the job starts (exit 2, naming the
    key and the way out), so no run goes unattested."""
    key = make_ssh_key(world.tmp / "runner-keys", "runner")
    world.runner_args = ["--signing-key", str(key.private)]
    root = world.setup(
        policy_yaml(
            [world.bob.approver_entry()],
            [ECHO_RULE],
            runners=[{"name": "ci", "key": key.public_line}],
        )
    )
    subprocess.run(
        ["ssh-keygen", "-q", "-p", "-P", "", "-N", "now locked", "-f", str(key.private)],
        check=True,
    )
    assert world.run_once("--trust-root", root).code == 0
    world.propose("j", {"jobs/j.yaml": job_yaml("j", ["echo", "j"])}, who=world.alice)
    world.signed_merge("j")
    result = world.run_once("--trust-root", root)
    assert result.code == 2, (result.out, result.err)
    assert f"cannot sign with {key.private}" in result.err, result.err
    assert "hint: add the key to an ssh agent" in result.err
    assert not any(r.get("event") == "started" for r in world.records())
