"""The audit branch's add rule for attestations (issue 25): a commit may add
audit/attestations/<run id>.intoto.json as a plain file, and nothing else there; never change or
remove one. Each tamper below is signed with the runner's own key, so that only this rule is
broken."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.helpers.keys import SshKey, make_ssh_key
from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml


def _ran(world: World) -> tuple[SshKey, Path, str]:
    """A gate with a runner key that ran one job: (the key, mallory's audit checkout, the
    attestation's path)."""
    key = make_ssh_key(world.tmp / "runner-keys", "runner")
    world.runner_args = ["--signing-key", str(key.private)]
    root = world.setup(
        policy_yaml(
            [world.bob.approver_entry()],
            [ECHO_RULE],
            runners=[{"name": "ci", "key": key.public_line}],
        )
    )
    world.propose("hello", {"jobs/hello.yaml": job_yaml("hello", ["echo", "hi"])}, who=world.alice)
    world.signed_merge("hello")
    assert world.run_once("--trust-root", root).code == 0
    checkout = world.checkout_audit()
    (name,) = [p.name for p in (checkout / "audit" / "attestations").iterdir()]
    return key, checkout, f"audit/attestations/{name}"


def _change(checkout: Path, path: str) -> None:
    (checkout / path).write_bytes((checkout / path).read_bytes().replace(b"}", b"} ", 1))


def _remove(checkout: Path, path: str) -> None:
    (checkout / path).unlink()


def _stray(checkout: Path, path: str) -> None:
    (checkout / "audit" / "attestations" / "note.json").write_text("{}\n")


def _made_executable(checkout: Path, path: str) -> None:
    (checkout / path).chmod(0o755)


@pytest.mark.parametrize(
    ("tamper", "says"),
    [
        (_change, "changes attestation file"),
        (_remove, "removes attestation file"),
        (_stray, "touches audit/attestations/note.json: audit commits may only"),
        (_made_executable, "changes attestation file"),
    ],
)
def test_an_attestation_is_only_ever_added(
    tmp_path: Path, tamper: Callable[[Path, str], None], says: str
) -> None:
    world = World(tmp_path)
    key, checkout, path = _ran(world)
    tamper(checkout, path)
    world.commit_audit(sign=key)
    result = world.mg("audit", "verify", where="admin")
    assert result.code == 3, result.out + result.err
    assert says in result.err and "tampering" in result.err, result.err
