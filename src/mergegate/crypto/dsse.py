"""DSSE envelopes (github.com/secure-systems-lab/dsse, v1.0): build, parse, sign and verify.

What mergegate signs for readers with standard tools (an in-toto Statement per run; a SLSA
verification summary) is a DSSE envelope signed by a runner's ssh key, so that securesystemslib,
cosign or in-toto can check it with that key and nothing of mergegate:

- the signature is over PAE(payloadType, payload), the DSSE pre-authentication encoding;
- Ed25519 signs it as it is (a 64-byte signature); ECDSA signs its SHA-256 (P-256), SHA-384
  (P-384) or SHA-512 (P-521), the hash ssh pairs with the curve, as a DER signature (what
  securesystemslib's `ecdsa-sha2-nistp256` scheme and cosign verify); RSA signs with PKCS #1 v1.5
  and SHA-256 (securesystemslib's `rsa-pkcs1v15-sha256`);
- the signature's `keyid` is the key's ssh fingerprint, `SHA256:` and unpadded base64, as
  `ssh-keygen -l` prints it (and as the policy names keys): a verifier matches it to the key it
  was given.

A private key file is read with `cryptography`. A key this process cannot read itself (protected by
a passphrase, or given as its `.pub` file, as git's `user.signingkey` allows) is asked of the ssh
agent at `SSH_AUTH_SOCK`, which must hold it. FIDO keys (`sk-...`) are refused: their signatures
cover the token's flags and counter, not the data, and no DSSE verifier checks those.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import socket
import struct
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from mergegate.errors import MergegateError, UsageError

INTOTO_PAYLOAD_TYPE = "application/vnd.in-toto+json"
MAX_ENVELOPE_BYTES = 4 * 1024 * 1024  # an envelope is read whole: bounded
_AGENT_TIMEOUT_SECONDS = 30.0
_AGENT_SIGN_REQUEST, _AGENT_SIGN_RESPONSE = 13, 14
_AGENT_RSA_SHA2_256 = 2
_CURVE_HASH: dict[str, type[hashes.HashAlgorithm]] = {
    "secp256r1": hashes.SHA256,
    "secp384r1": hashes.SHA384,
    "secp521r1": hashes.SHA512,
}
_HINT = (
    "sign with an Ed25519, ECDSA or RSA ssh key (a file this process can read, or one the ssh "
    "agent at SSH_AUTH_SOCK holds)"
)

PublicKeyType = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey | rsa.RSAPublicKey
PrivateKeyType = ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


class DsseError(MergegateError):
    """An envelope that is not one (bad JSON, a member missing or of the wrong type)."""


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE's pre-authentication encoding: what a signature covers."""
    kind = payload_type.encode("utf-8")
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


@dataclass(frozen=True)
class Signature:
    keyid: str
    sig: bytes


@dataclass(frozen=True)
class Envelope:
    payload_type: str
    payload: bytes
    signatures: tuple[Signature, ...]

    def as_json(self) -> dict[str, object]:
        return {
            "payload": base64.b64encode(self.payload).decode("ascii"),
            "payloadType": self.payload_type,
            "signatures": [
                {"keyid": s.keyid, "sig": base64.b64encode(s.sig).decode("ascii")}
                for s in self.signatures
            ],
        }

    def to_bytes(self) -> bytes:
        """The envelope as a file holds it: sorted keys, no whitespace, then a newline."""
        return json.dumps(self.as_json(), sort_keys=True, separators=(",", ":")).encode() + b"\n"

    @classmethod
    def from_bytes(cls, data: bytes) -> Envelope:
        """The envelope `data` holds (DsseError if it is none)."""
        if len(data) > MAX_ENVELOPE_BYTES:
            raise DsseError(f"a DSSE envelope of {len(data)} bytes (at most {MAX_ENVELOPE_BYTES})")
        try:
            value = json.loads(data)
            signatures = tuple(
                Signature(_text(s["keyid"]), _b64(s["sig"])) for s in _list(value["signatures"])
            )
            return cls(_text(value["payloadType"]), _b64(value["payload"]), signatures)
        except (ValueError, KeyError, TypeError) as exc:
            raise DsseError(f"not a DSSE envelope ({type(exc).__name__}: {exc})") from None


def _text(value: object) -> str:
    if type(value) is not str:
        raise TypeError("expected a string")
    return value


def _list(value: object) -> list[dict[str, object]]:
    if type(value) is not list or not all(type(item) is dict for item in value):
        raise TypeError("expected a list of objects")
    return value


def _b64(value: object) -> bytes:
    return base64.b64decode(_text(value), validate=True)


# -- keys --------------------------------------------------------------------------------------
def ssh_public_line(key: PublicKeyType) -> str:
    """The key as an ssh public key line, without a comment."""
    return key.public_bytes(
        serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH
    ).decode("ascii")


def fingerprint(public_line: str) -> str:
    """`SHA256:<unpadded base64>` of an ssh public key line's blob (as `ssh-keygen -l` prints)."""
    blob = base64.b64decode(public_line.split()[1])
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


def load_public_key(public_line: str) -> PublicKeyType:
    """An ssh public key line as a key DSSE can verify with (UsageError for other kinds)."""
    try:
        key = serialization.load_ssh_public_key(public_line.strip().encode("ascii"))
    except (ValueError, UnsupportedAlgorithm, UnicodeEncodeError) as exc:
        raise UsageError(f"not an ssh public key DSSE can use: {exc}", hint=_HINT) from None
    if not isinstance(key, ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey | rsa.RSAPublicKey):
        kind = public_line.split()[0] if public_line.split() else "?"
        raise UsageError(f"{kind} keys cannot sign DSSE envelopes", hint=_HINT)
    return key


def can_sign_dsse(public_line: str) -> bool:
    """Whether a key of this kind signs DSSE (Ed25519, ECDSA, RSA; not FIDO, not OpenPGP)."""
    kind = public_line.split()[0] if public_line.split() else ""
    return kind == "ssh-ed25519" or kind == "ssh-rsa" or kind.startswith("ecdsa-sha2-nistp")


class DsseSigner:
    """Signs PAE bytes with one ssh key: in-process, or through the ssh agent."""

    def __init__(
        self, public_line: str, *, key: PrivateKeyType | None = None, agent: str | None = None
    ) -> None:
        self.public_line = public_line
        self.public_key = load_public_key(public_line)
        self.keyid = fingerprint(public_line)
        self._key = key
        self._agent = agent

    def sign(self, data: bytes) -> bytes:
        if self._key is not None:
            return _sign_in_process(self._key, data)
        assert self._agent is not None
        return _agent_sign(self._agent, self.public_line, self.public_key, data)


def load_signer(path: str | os.PathLike[str]) -> DsseSigner:
    """A signer for the ssh key file at `path` (a private key; or a `.pub` whose private key the
    ssh agent holds; a passphrase-protected private key likewise): UsageError when it cannot
    sign."""
    where = Path(path)
    try:
        data = where.read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read signing key {where}: {exc.strerror}", hint=_HINT) from None
    text = data.decode("ascii", "replace").strip()
    if _is_fido(text):
        raise UsageError(
            f"{where} is a FIDO (sk-) key: its signatures cover the token's flags and counter, "
            "which DSSE verifiers do not check",
            hint=_HINT,
        )
    if not text.startswith("-----BEGIN"):
        # A public key line: its private key is the agent's.
        return _agent_signer(where, text)
    try:
        key = _private_key(data)
    except TypeError:  # protected by a passphrase: the agent holds it, or nothing can sign
        public = Path(f"{where}.pub")
        if not public.is_file():
            raise UsageError(
                f"{where} is protected by a passphrase and {public} is missing",
                hint="put the public key next to it and add the key to the ssh agent (ssh-add)",
            ) from None
        return _agent_signer(where, public.read_text().strip())
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise UsageError(
            f"{where} is not an ssh private key DSSE can use: {exc}", hint=_HINT
        ) from None
    if not isinstance(
        key, ed25519.Ed25519PrivateKey | ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey
    ):
        raise UsageError(f"{where}: this kind of key cannot sign DSSE envelopes", hint=_HINT)
    return DsseSigner(ssh_public_line(key.public_key()), key=key)


def _private_key(data: bytes) -> object:
    """An OpenSSH private key file, or the PEM form `ssh-keygen -m PEM` writes (which ssh and git
    sign with as well). TypeError: protected by a passphrase."""
    if data.lstrip().startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----"):
        return serialization.load_ssh_private_key(data, password=None)
    return serialization.load_pem_private_key(data, password=None)


def _is_fido(text: str) -> bool:
    """Whether a key file (public line or OpenSSH private key) holds a FIDO key."""
    if text.startswith("sk-"):
        return True
    if not text.startswith("-----BEGIN OPENSSH PRIVATE KEY-----"):
        return False
    body = "".join(line for line in text.splitlines() if not line.startswith("-----"))
    try:
        head = base64.b64decode(body, validate=False)[:512]
    except ValueError:
        return False
    return b"sk-ssh-ed25519@openssh.com" in head or b"sk-ecdsa-sha2-nistp256@openssh.com" in head


def _agent_signer(where: Path, public_line: str) -> DsseSigner:
    agent = os.environ.get("SSH_AUTH_SOCK")
    if not agent:
        raise UsageError(
            f"cannot sign with {where}: its private key is not readable here (a passphrase, or a "
            "public key file) and no ssh agent is running (SSH_AUTH_SOCK is not set)",
            hint="add the key to an ssh agent (ssh-add) and export SSH_AUTH_SOCK, or pass an "
            "unprotected private key file",
        )
    if not can_sign_dsse(public_line):
        raise UsageError(f"{where}: this kind of key cannot sign DSSE envelopes", hint=_HINT)
    return DsseSigner(public_line, agent=agent)


def _sign_in_process(key: PrivateKeyType, data: bytes) -> bytes:
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return key.sign(data)
    if isinstance(key, ec.EllipticCurvePrivateKey):
        return key.sign(data, ec.ECDSA(_CURVE_HASH[key.curve.name]()))
    return key.sign(data, padding.PKCS1v15(), hashes.SHA256())


# -- the ssh agent (draft-miller-ssh-agent): one sign request -----------------------------------
def _string(data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + data


def _read_string(data: bytes, at: int) -> tuple[bytes, int]:
    (size,) = struct.unpack_from(">I", data, at)
    end = at + 4 + size
    if end > len(data):
        raise ValueError("truncated")
    return data[at + 4 : end], end


def _agent_sign(socket_path: str, public_line: str, key: PublicKeyType, data: bytes) -> bytes:
    blob = base64.b64decode(public_line.split()[1])
    flags = _AGENT_RSA_SHA2_256 if isinstance(key, rsa.RSAPublicKey) else 0
    body = bytes([_AGENT_SIGN_REQUEST]) + _string(blob) + _string(data) + struct.pack(">I", flags)
    try:
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
            conn.settimeout(_AGENT_TIMEOUT_SECONDS)
            conn.connect(socket_path)
            conn.sendall(_string(body))
            answer = _receive(conn)
    except OSError as exc:
        raise UsageError(
            f"the ssh agent at {socket_path} did not sign: {exc}",
            hint="check that the agent runs and holds the runner's key (ssh-add -l)",
        ) from None
    if not answer or answer[0] != _AGENT_SIGN_RESPONSE:
        raise UsageError(
            f"the ssh agent refused to sign with {fingerprint(public_line)}",
            hint="add the runner's key to the agent (ssh-add), or pass an unprotected key file",
        )
    try:
        framed, _ = _read_string(answer, 1)
        _, at = _read_string(framed, 0)
        raw, _ = _read_string(framed, at)
    except (ValueError, struct.error):
        raise UsageError("the ssh agent's signature is malformed") from None
    if isinstance(key, ec.EllipticCurvePublicKey):
        r_bytes, at = _read_string(raw, 0)
        s_bytes, _ = _read_string(raw, at)
        return encode_dss_signature(int.from_bytes(r_bytes, "big"), int.from_bytes(s_bytes, "big"))
    return raw


def _receive(conn: socket.socket) -> bytes:
    head = _exactly(conn, 4)
    (size,) = struct.unpack(">I", head)
    if size > 256 * 1024:
        raise OSError("answer too long")
    return _exactly(conn, size)


def _exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise OSError("the agent closed the connection")
        data += chunk
    return data


# -- envelopes ---------------------------------------------------------------------------------
def sign(payload_type: str, payload: bytes, signer: DsseSigner) -> Envelope:
    """`payload` in an envelope signed by `signer`."""
    return Envelope(
        payload_type, payload, (Signature(signer.keyid, signer.sign(pae(payload_type, payload))),)
    )


def verify_with(envelope: Envelope, public_line: str) -> bool:
    """Whether a signature of `envelope` whose keyid is this key's fingerprint verifies with it."""
    keyid = fingerprint(public_line)
    try:
        key = load_public_key(public_line)
    except UsageError:
        return False
    data = pae(envelope.payload_type, envelope.payload)
    return any(s.keyid == keyid and _verifies(key, s.sig, data) for s in envelope.signatures)


def verify(envelope: Envelope, public_lines: Sequence[str]) -> str | None:
    """The first of `public_lines` that made a signature of `envelope` (None: none did)."""
    return next((line for line in public_lines if verify_with(envelope, line)), None)


def _verifies(key: PublicKeyType, sig: bytes, data: bytes) -> bool:
    try:
        if isinstance(key, ed25519.Ed25519PublicKey):
            key.verify(sig, data)
        elif isinstance(key, ec.EllipticCurvePublicKey):
            key.verify(sig, data, ec.ECDSA(_CURVE_HASH[key.curve.name]()))
        else:
            key.verify(sig, data, padding.PKCS1v15(), hashes.SHA256())
    except (InvalidSignature, ValueError, KeyError):
        return False
    return True
