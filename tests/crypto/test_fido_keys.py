"""FIDO (hardware) ssh keys, checked in-process and held to `ssh-keygen -Y verify`'s verdict.

No token is needed: OpenSSH's PROTOCOL.u2f documents what a token signs,

    SHA256(application) byte(flags) uint32(counter) SHA256(data)

and how the signature is framed (string format, string signature, byte flags, uint32
counter), so a software Ed25519 or P-256 key can sign exactly as a token would. Each case
states its verdict, so a reference that refuses everything cannot make the comparison pass.
The user-presence flag is where mergegate is stricter than OpenSSH 9.2, which accepts a
signature made without a touch: mergegate refuses it (docs/policy.md lists it).
"""

from __future__ import annotations

import base64
import hashlib
import subprocess
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature

from mergegate.crypto import sshsig
from mergegate.crypto.armor import armor, dearmor
from mergegate.crypto.signatures import parse_public_key, verify_signature
from mergegate.errors import ConfigError

PAYLOAD = b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor a <a@x> 1 +0000\n\napprove\n"
NOW = datetime.now(UTC)
APPLICATION = b"ssh:"
UP, UV = 0x01, 0x04  # user present (touched), user verified (PIN)
KINDS = ("sk-ed25519", "sk-ecdsa")


def _s(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def _mpint(n: int) -> bytes:
    return _s(n.to_bytes((n.bit_length() + 8) // 8, "big") if n else b"")


@dataclass(frozen=True)
class Token:
    """A software stand-in for a FIDO token: its key, application and public key blob."""

    private: ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey
    application: bytes = APPLICATION

    @property
    def type(self) -> bytes:
        if isinstance(self.private, ed25519.Ed25519PrivateKey):
            return sshsig.SK_ED25519
        return sshsig.SK_ECDSA

    @property
    def blob(self) -> bytes:
        public = self.private.public_key()
        if isinstance(public, ed25519.Ed25519PublicKey):
            raw = public.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
            return _s(self.type) + _s(raw) + _s(self.application)
        point = public.public_bytes(
            serialization.Encoding.X962, serialization.PublicFormat.UncompressedPoint
        )
        return _s(self.type) + _s(b"nistp256") + _s(point) + _s(self.application)

    @property
    def line(self) -> str:
        return f"{self.type.decode()} {base64.b64encode(self.blob).decode()} token@example.com"

    def sign(self, data: bytes) -> bytes:
        """The raw signature the token makes over `data` (ssh encoding for ECDSA)."""
        if isinstance(self.private, ed25519.Ed25519PrivateKey):
            return self.private.sign(data)
        r, s = decode_dss_signature(self.private.sign(data, ec.ECDSA(hashes.SHA256())))
        return _mpint(r) + _mpint(s)


def _token(kind: str, application: bytes = APPLICATION) -> Token:
    if kind == "sk-ed25519":
        return Token(ed25519.Ed25519PrivateKey.generate(), application)
    return Token(ec.generate_private_key(ec.SECP256R1()), application)


@pytest.fixture(scope="module")
def tokens() -> dict[str, Token]:
    return {kind: _token(kind) for kind in KINDS}


def fido_sign(
    token: Token,
    payload: bytes,
    *,
    flags: int = UP,
    counter: int = 7,
    namespace: bytes = b"git",
    hash_name: bytes = b"sha512",
    signed_flags: int | None = None,
    signed_counter: int | None = None,
    signed_application: bytes | None = None,
    message_hash: Callable[[bytes], bytes] = lambda d: hashlib.sha256(d).digest(),
    form: bytes | None = None,
    tail: bytes = b"",
    public: bytes | None = None,
) -> bytes:
    """An armoured SSHSIG as a token would make it; each knob breaks one rule."""
    digest = hashlib.new(hash_name.decode(), payload).digest()
    data = b"SSHSIG" + _s(namespace) + _s(b"") + _s(hash_name) + _s(digest)
    signed = hashlib.sha256(
        token.application if signed_application is None else signed_application
    ).digest()
    signed += bytes([flags if signed_flags is None else signed_flags])
    signed += (counter if signed_counter is None else signed_counter).to_bytes(4, "big")
    signed += message_hash(data)
    signature = _s(form or token.type) + _s(token.sign(signed))
    signature += bytes([flags]) + counter.to_bytes(4, "big") + tail
    blob = b"SSHSIG" + (1).to_bytes(4, "big") + _s(public or token.blob) + _s(namespace)
    blob += _s(b"") + _s(hash_name) + _s(signature)
    return armor(blob, "SSH SIGNATURE").encode()


def _ours(token: Token, payload: bytes, text: bytes) -> tuple[bool, str]:
    key = parse_public_key(token.line, owner="carol", source="policy/policy.yaml:3")
    check = verify_signature(payload, text, [key], at=NOW)
    return check.ok, check.reason


def _keygens(token: Token, payload: bytes, text: bytes, tmp: Path) -> bool:
    allowed, sig = tmp / "allowed", tmp / "sig"
    allowed.write_text(f'k0 namespaces="git" {" ".join(token.line.split()[:2])}\n')
    sig.write_bytes(text)
    argv = ["ssh-keygen", "-Y", "verify", "-f", str(allowed), "-I", "k0", "-n", "git"]
    done = subprocess.run(
        [*argv, "-s", str(sig)], input=payload, capture_output=True, check=False, timeout=60
    )
    return done.returncode == 0


# --- the corpus: (payload, signature, verdict) ---------------------------------------------

Case = Callable[[Token], tuple[bytes, bytes, bool]]

CASES: dict[str, Case] = {
    "good": lambda t: (PAYLOAD, fido_sign(t, PAYLOAD), True),
    "good_sha256": lambda t: (PAYLOAD, fido_sign(t, PAYLOAD, hash_name=b"sha256"), True),
    "good_verified_user": lambda t: (PAYLOAD, fido_sign(t, PAYLOAD, flags=UP | UV), True),
    "good_counter_zero": lambda t: (PAYLOAD, fido_sign(t, PAYLOAD, counter=0), True),
    "good_empty_payload": lambda t: (b"", fido_sign(t, b""), True),
    "other_payload": lambda t: (PAYLOAD + b"x", fido_sign(t, PAYLOAD), False),
    "wrong_namespace": lambda t: (PAYLOAD, fido_sign(t, PAYLOAD, namespace=b"file"), False),
    "flags_relabelled": lambda t: (
        PAYLOAD,
        fido_sign(t, PAYLOAD, flags=UP | UV, signed_flags=UP),
        False,
    ),
    "counter_relabelled": lambda t: (
        PAYLOAD,
        fido_sign(t, PAYLOAD, counter=8, signed_counter=7),
        False,
    ),
    "other_application": lambda t: (
        PAYLOAD,
        fido_sign(t, PAYLOAD, signed_application=b"ssh:other"),
        False,
    ),
    "message_hashed_with_sha512": lambda t: (
        PAYLOAD,
        fido_sign(t, PAYLOAD, message_hash=lambda d: hashlib.sha512(d).digest()[:32]),
        False,
    ),
    "message_not_hashed": lambda t: (
        PAYLOAD,
        fido_sign(t, PAYLOAD, message_hash=lambda d: d),
        False,
    ),
    "plain_signature_format": lambda t: (
        PAYLOAD,
        fido_sign(
            t,
            PAYLOAD,
            form=b"ssh-ed25519" if t.type == sshsig.SK_ED25519 else b"ecdsa-sha2-nistp256",
        ),
        False,
    ),
    "trailing_data": lambda t: (PAYLOAD, fido_sign(t, PAYLOAD, tail=b"\0"), False),
}


# Refused here, accepted by OpenSSH 9.2's ssh-keygen -Y verify (a later one may refuse it too).
NO_USER_PRESENCE = {"no_touch": 0x00, "verified_without_touch": UV}


@pytest.mark.parametrize("case", CASES)
@pytest.mark.parametrize("kind", KINDS)
def test_verdict_matches_ssh_keygen(
    kind: str, case: str, tokens: dict[str, Token], tmp_path: Path
) -> None:
    payload, text, expected = CASES[case](tokens[kind])

    ok, reason = _ours(tokens[kind], payload, text)

    assert (ok, _keygens(tokens[kind], payload, text, tmp_path)) == (expected, expected), reason


@pytest.mark.parametrize("flags", NO_USER_PRESENCE.values(), ids=NO_USER_PRESENCE)
@pytest.mark.parametrize("kind", KINDS)
def test_a_signature_without_user_presence_is_refused(
    kind: str, flags: int, tokens: dict[str, Token]
) -> None:
    text = fido_sign(tokens[kind], PAYLOAD, flags=flags)

    assert _ours(tokens[kind], PAYLOAD, text) == (
        False,
        f"bad signature by carol ({_fingerprint(tokens[kind])}): FIDO signature without user "
        "presence (the key was not touched)",
    )
    # The flag is all that is wrong: the same signature touched is good.
    assert _ours(tokens[kind], PAYLOAD, fido_sign(tokens[kind], PAYLOAD, flags=flags | UP))[0]


@pytest.mark.parametrize("kind", KINDS)
def test_flipped_bytes_match_ssh_keygen(
    kind: str, tokens: dict[str, Token], tmp_path: Path
) -> None:
    """One bit flipped at places spread over the whole blob, flags and counter included."""
    token = tokens[kind]
    blob = dearmor(fido_sign(token, PAYLOAD).decode(), "SSH SIGNATURE")
    assert blob is not None
    positions = sorted(
        {*range(0, len(blob), max(1, len(blob) // 24)), *range(len(blob) - 5, len(blob))}
    )
    for pos in positions:
        flipped = armor(blob[:pos] + bytes([blob[pos] ^ 0x02]) + blob[pos + 1 :], "SSH SIGNATURE")
        ok, reason = _ours(token, PAYLOAD, flipped.encode())
        assert not ok and not _keygens(token, PAYLOAD, flipped.encode(), tmp_path), (pos, reason)


@pytest.mark.parametrize("kind", KINDS)
def test_a_fido_key_is_a_policy_key(kind: str, tokens: dict[str, Token]) -> None:
    key = parse_public_key(tokens[kind].line, owner="carol", source="policy/policy.yaml:3")

    assert key.kind == "ssh" and key.fingerprint == _fingerprint(tokens[kind])


def test_a_fido_key_with_the_wrong_shape_is_refused(tokens: dict[str, Token]) -> None:
    token = tokens["sk-ecdsa"]
    fields = sshsig._strings(token.blob, 4)
    assert fields is not None
    for blob in (
        _s(sshsig.SK_ECDSA) + _s(b"nistp384") + _s(fields[2]) + _s(APPLICATION),
        _s(sshsig.SK_ECDSA) + _s(b"nistp256") + _s(fields[2]),  # no application
    ):
        line = f"{sshsig.SK_ECDSA.decode()} {base64.b64encode(blob).decode()}"
        with pytest.raises(ConfigError, match="malformed"):
            parse_public_key(line, owner="carol", source="policy/policy.yaml:3")


@pytest.mark.parametrize("kind", KINDS)
def test_an_application_with_a_nul_is_refused_as_openssh_does(
    kind: str, tokens: dict[str, Token], tmp_path: Path
) -> None:
    # OpenSSH reads the application as a C string: a NUL in it makes the key unreadable.
    token = Token(tokens[kind].private, b"ssh:\0x")
    text = fido_sign(token, PAYLOAD)
    blob = dearmor(text.decode(), "SSH SIGNATURE")
    assert blob is not None

    assert not _keygens(token, PAYLOAD, text, tmp_path)
    with pytest.raises(sshsig.SshsigError, match="malformed public key"):
        sshsig.verify(PAYLOAD, sshsig.parse(blob), namespace=b"git")
    with pytest.raises(ConfigError, match="malformed"):
        parse_public_key(token.line, owner="carol", source="policy/policy.yaml:3")
    # The same token with a plain application: both accept.
    good = Token(tokens[kind].private)
    assert _keygens(good, PAYLOAD, fido_sign(good, PAYLOAD), tmp_path)


def _fingerprint(token: Token) -> str:
    digest = base64.b64encode(hashlib.sha256(token.blob).digest()).decode().rstrip("=")
    return f"SHA256:{digest}"
