"""Verify a commit's signature against keys taken from the policy.

Trust never comes from the user's git config, ssh allowed-signers file or gpg
keyring: every check builds a temporary allowed-signers file or keyring from
the keys it is given, and throws it away afterwards.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Literal

KeyKind = Literal["ssh", "openpgp"]


@dataclass(frozen=True)
class PublicKey:
    """A key the policy trusts, and whose it is."""

    kind: KeyKind
    text: str  # the ssh public key line, or the ASCII-armoured OpenPGP key
    fingerprint: str  # "SHA256:..." for ssh; 40 hex digits (primary key) for OpenPGP
    owner: str  # the approver's or runner's name in the policy
    source: str  # where the key was declared, e.g. "policy/policy.yaml:12"
    valid_after: datetime | None = None
    valid_before: datetime | None = None


@dataclass(frozen=True)
class SignatureCheck:
    """The outcome of one verification, with words for the audit."""

    ok: bool
    key: PublicKey | None  # the policy key that made the good signature
    signer: str  # what the signature says about its key (fingerprint / key id), "" if unsigned
    reason: str  # "good signature by alice (SHA256:...)" or why not


def parse_public_key(
    text: str,
    *,
    owner: str,
    source: str,
    valid_after: datetime | None = None,
    valid_before: datetime | None = None,
) -> PublicKey:
    """Build a PublicKey from an ssh key line or an armoured OpenPGP key; ConfigError if neither."""
    raise NotImplementedError


def split_signed_commit(raw_commit: bytes) -> tuple[bytes, bytes] | None:
    """Split a raw commit object into (signed payload, signature); None when unsigned."""
    raise NotImplementedError


def verify_signature(
    payload: bytes, signature: bytes, keys: Sequence[PublicKey], *, at: datetime
) -> SignatureCheck:
    """Check `signature` over `payload` against `keys`, judging key lifetimes at `at`."""
    raise NotImplementedError
