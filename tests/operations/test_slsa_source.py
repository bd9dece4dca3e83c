"""`audit export --format slsa-source`: a signed SLSA source summary of each commit of approved,
only from what `verify` proves, two-party review only where the judge counted two people other
than the writers (issue 25, section 3)."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path
from typing import Any

from cryptography.hazmat.primitives import serialization
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.signer import SSlibKey

from mergegate.audit.records import body_hash, canonical
from mergegate.crypto import dsse
from mergegate.git.repo import Repo
from mergegate.operations.slsa_source import repository
from tests.helpers.keys import shared_ssh_key
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml


def _gate(world: World) -> tuple[str, str]:
    """A gate whose policy lists a runner: `one` approved by bob alone, `two` by bob and carol.
    The two merges."""
    runners = world.signing_runner()
    people = [world.bob.approver_entry(), world.carol.approver_entry()]
    world.setup(policy_yaml(people, [ECHO_RULE], runners=runners))
    world.propose("one", {"jobs/one.yaml": job_yaml("one", ["echo", "1"])}, who=world.alice)
    alone = world.signed_merge("one")
    world.propose("two", {"jobs/two.yaml": job_yaml("two", ["echo", "2"])}, who=world.alice)
    world.approval_commit(
        "two",
        [("jobs/two.yaml", world.blob("two", "jobs/two.yaml"))],
        who=world.carol,
        sign=world.carol.key,
    )
    both = world.signed_merge("two")
    assert world.run_once().code == 0
    return alone, both


def _runner_key(world: World) -> tuple[str, str]:
    key = shared_ssh_key(world.tmp / "keys", "runner")
    return str(key.private), key.public_line


def _statement(envelope: dict[str, Any]) -> dict[str, Any]:
    assert envelope["payloadType"] == "application/vnd.in-toto+json"
    return json.loads(base64.b64decode(envelope["payload"]))  # type: ignore[no-any-return]


def test_each_commit_gets_a_signed_summary_and_two_party_review_only_with_two_people(
    world: World,
) -> None:
    alone, both = _gate(world)
    private, public = _runner_key(world)
    result = world.mg(
        *("audit", "export", "--format", "slsa-source", "--ref", "approved"),
        *("--signing-key", private),
        where="auditor",
    )
    assert result.code == 0, result.err
    envelopes = [json.loads(line) for line in result.out.splitlines()]
    statements = [_statement(e) for e in envelopes]
    by_commit = {s["subject"][0]["digest"]["gitCommit"]: s for s in statements}
    assert list(by_commit) == [alone, both]  # first-parent commits after the trust root, in order
    for envelope in envelopes:
        # securesystemslib, with the runner's public key alone, accepts each envelope.
        parsed = SslibEnvelope.from_dict(envelope)
        key = SSlibKey.from_crypto(
            serialization.load_ssh_public_key(public.encode()), keyid=dsse.fingerprint(public)
        )
        parsed.verify([key], 1)
    root = world.git("admin", "rev-list", "--max-parents=0", "origin/approved").strip()
    for s in statements:
        assert s["_type"] == "https://in-toto.io/Statement/v1"
        assert s["predicateType"] == "https://slsa.dev/verification_summary/v1"
        assert s["subject"][0]["annotations"] == {"sourceRefs": ["refs/heads/approved"]}
        predicate = s["predicate"]
        assert predicate["verificationResult"] == "PASSED"
        assert predicate["resourceUri"] == f"git+file://{world.remote}"
        assert predicate["policy"]["digest"] == {"gitCommit": root}
        assert predicate["slsaVersion"] == "1.2"
    assert by_commit[alone]["predicate"]["verifiedLevels"] == ["SLSA_SOURCE_LEVEL_1"]
    assert by_commit[both]["predicate"]["verifiedLevels"] == [
        "SLSA_SOURCE_LEVEL_1",
        "SLSA_SOURCE_TWO_PARTY_REVIEWED",
    ]


def test_no_summary_without_a_runner_key_of_the_policy_or_of_a_history_verify_rejects(
    world: World,
) -> None:
    _gate(world)
    private, _ = _runner_key(world)
    base = ("audit", "export", "--format", "slsa-source")
    unsigned = world.mg(*base, where="auditor")
    assert unsigned.code == 2 and "needs --signing-key" in unsigned.err
    stranger = world.mg(*base, "--signing-key", str(world.alice.key.private), where="auditor")
    assert stranger.code == 2 and "is not a runner key of the policy" in stranger.err
    assert stranger.out == ""
    followed = world.mg(*base, "--signing-key", private, "--follow", where="auditor")
    assert followed.code == 2 and "do not apply" in followed.err
    # A well-chained record in an audit commit no runner signed: verify finds a violation, and
    # no summary is issued.
    last = world.records()[-1]
    forged = {**last, "seq": last["seq"] + 1, "prev": last["hash"]}
    forged["hash"] = body_hash(forged)
    log = world.checkout_audit() / "audit/log-000001.jsonl"
    log.write_bytes(log.read_bytes() + canonical(forged) + b"\n")
    world.commit_audit()
    tampered = world.mg(*base, "--signing-key", private, where="auditor")
    assert tampered.code == 3 and tampered.out == "" and "violation" in tampered.err


def test_a_gate_without_runners_has_no_key_to_sign_with(world: World) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    private, _ = _runner_key(world)
    result = world.mg(
        "audit", "export", "--format", "slsa-source", "--signing-key", private, where="auditor"
    )
    assert result.code == 2 and "lists no runners" in result.err and result.out == ""


def test_the_resource_uri_never_carries_credentials(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    repo = Repo(tmp_path)
    for url, uri in [
        ("https://bot:ghp_secret@github.com/o/gate.git", "git+https://github.com/o/gate.git"),
        ("https://token@git.example.com:8443/gate", "git+https://git.example.com:8443/gate"),
        ("ssh://git@git.example.com/ops/gate.git", "git+ssh://git.example.com/ops/gate.git"),
        ("git@github.com:o/gate.git", "git+ssh://github.com/o/gate.git"),
    ]:
        subprocess.run(["git", "-C", str(tmp_path), "remote", "remove", "origin"], check=False)
        subprocess.run(["git", "-C", str(tmp_path), "remote", "add", "origin", url], check=True)
        assert repository(repo, "origin") == uri
    assert repository(repo, "nowhere") == f"git+file://{tmp_path.resolve()}"
