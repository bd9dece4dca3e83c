"""`run --signing-key` refuses, before any work, what is neither a key file nor an OpenPGP key id
(issue 22, item 9): a mistyped path became a gpg key id, exit 0 while idle, then "gpg failed to
sign" at the first job."""

from __future__ import annotations

import pytest

from tests.helpers.repos import ECHO_RULE, World, policy_yaml


@pytest.mark.parametrize("given", ["~/nope_key", "/no/such/key", "runner_key", "keys/ci"])
def test_a_missing_key_file_is_refused_up_front_naming_it(world: World, given: str) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    for args in (("--once",), ("--once", "--dry-run")):
        result = world.mg("run", *args, "--signing-key", given)
        assert result.code == 2, result.out + result.err
        assert result.err.startswith(f"error: --signing-key '{given}': no such key file"), (
            result.err
        )
        assert "hint: pass the path of the runner's ssh private key" in result.err


@pytest.mark.parametrize(
    "given", ["0x1234ABCD", "1234567890ABCDEF", "A" * 40 + "!", "ci@example.com"]
)
def test_an_openpgp_key_id_or_email_is_still_taken(world: World, given: str) -> None:
    world.setup(policy_yaml([world.bob.approver_entry()], [ECHO_RULE]))
    result = world.mg("run", "--once", "--signing-key", given)
    assert result.code == 0, result.err  # idle: nothing to sign yet
