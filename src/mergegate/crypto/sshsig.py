"""SSH signatures (the SSHSIG format of `ssh-keygen -Y sign`), checked in Python.

The format is OpenSSH's PROTOCOL.sshsig. A blob is

    "SSHSIG" uint32(version) string(public key) string(namespace)
    string(reserved) string(hash algorithm) string(signature)

and the key signed

    "SSHSIG" string(namespace) string("") string(hash algorithm) string(H(message))

This module does what `ssh-keygen -Y verify` does with those bytes, step by step, each step refusing
with one reason; the tests hold it to ssh-keygen's verdict over a corpus of good, bad and hostile
signatures for every key type. FIDO keys (`sk-ssh-ed25519@openssh.com`,
`sk-ecdsa-sha2-nistp256@openssh.com`, a hardware key) are read as OpenSSH's PROTOCOL.u2f says: the
key blob ends with its application string, the signature carries a flags byte and a counter after
the signature proper, and what the token signed is

    SHA256(application) byte(flags) uint32(counter) SHA256(the data above)

The user-presence flag (0x01: someone touched the key) is required. Matching the signature's key to
a trusted key, and key lifetimes, stay with the caller (signatures.py): this module answers only
"did this key sign this message in this namespace". Where ssh-keygen is looser than this module, the
difference is listed (docs/policy.md, "People and keys") and always in the direction of refusing.
"""

from __future__ import annotations

import functools
import hashlib
from dataclasses import dataclass
from typing import Final

from cryptography.exceptions import InvalidSignature, UnsupportedAlgorithm
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

MAGIC: Final = b"SSHSIG"
VERSION: Final = 1
# ssh-keygen's HASHALG_ALLOWED: the message digest named in the blob.
_MESSAGE_HASHES: Final = {b"sha256": hashlib.sha256, b"sha512": hashlib.sha512}
# ssh-keygen's RSA_SIGN_ALLOWED: SHA-1 "ssh-rsa" signatures are refused.
_RSA_HASHES: Final = {b"rsa-sha2-256": hashes.SHA256, b"rsa-sha2-512": hashes.SHA512}
_CURVES: Final = {
    b"nistp256": (ec.SECP256R1, hashes.SHA256),
    b"nistp384": (ec.SECP384R1, hashes.SHA384),
    b"nistp521": (ec.SECP521R1, hashes.SHA512),
}
# FIDO keys (PROTOCOL.u2f): the type, and the number of ssh strings in its public key blob.
SK_ED25519: Final = b"sk-ssh-ed25519@openssh.com"
SK_ECDSA: Final = b"sk-ecdsa-sha2-nistp256@openssh.com"
USER_PRESENT: Final = 0x01  # the flag a FIDO token sets when it was touched
_RSA_MIN_BITS: Final = 1024  # OpenSSH's SSH_RSA_MINIMUM_MODULUS_SIZE
_MAX_MPINT: Final = 16384 // 8 + 1  # OpenSSH's SSHBUF_MAX_BIGNUM, plus a sign byte

PublicKeyObject = ed25519.Ed25519PublicKey | ec.EllipticCurvePublicKey | rsa.RSAPublicKey


class SshsigError(Exception):
    """A signature that does not verify; the message says which step refused it."""


@dataclass(frozen=True)
class Sshsig:
    """The fields of one SSHSIG blob, as read from it (nothing checked but framing)."""

    version: int
    public_key: bytes  # the signer's public key blob (ssh wire format)
    namespace: bytes
    reserved: bytes
    hash_algorithm: bytes
    signature: bytes  # an ssh signature: string(format) string(signature bytes)


def parse(blob: bytes) -> Sshsig:
    """Read an SSHSIG blob (already de-armoured); SshsigError if it is not one.

    As ssh-keygen: the magic, a version no larger than 1, exactly five strings and nothing after
    them.
    """
    if blob[: len(MAGIC)] != MAGIC or len(blob) < len(MAGIC) + 4:
        raise SshsigError("not an SSHSIG blob")
    version = int.from_bytes(blob[6:10], "big")
    if version > VERSION:
        raise SshsigError(f"SSHSIG version {version} is not supported")
    fields = _strings(blob[10:], 5)
    if fields is None:
        raise SshsigError("malformed SSHSIG blob")
    public_key, namespace, reserved, hash_algorithm, signature = fields
    return Sshsig(version, public_key, namespace, reserved, hash_algorithm, signature)


def verify(message: bytes, sig: Sshsig, *, namespace: bytes) -> None:
    """Check that `sig` is its own key's signature of `message` in `namespace`.

    Returns None when it is; raises SshsigError naming the refused step. The caller decides whether
    `sig.public_key` is a key it trusts.
    """
    # 1. The namespace must be exactly the one expected ("git\0" is not "git").
    if sig.namespace != namespace:
        raise SshsigError("namespace mismatch")
    # 2. The message digest must be one ssh-keygen allows.
    digest = _MESSAGE_HASHES.get(sig.hash_algorithm)
    if digest is None:
        raise SshsigError("unsupported hash algorithm")
    # 3. The key must be one we can read (and ssh-keygen would).
    key = load_public_key(sig.public_key)
    # 4. The signed data: the reserved field is signed as empty, whatever the blob says.
    signed = MAGIC + _string(namespace) + _string(b"") + _string(sig.hash_algorithm)
    signed += _string(digest(message).digest())
    # 5. The signature, by the key's own algorithm.
    if (_strings(sig.public_key, None) or [b""])[0] in (SK_ED25519, SK_ECDSA):
        _verify_sk(key, sig.public_key, sig.signature, signed)
        return
    parts = _strings(sig.signature, 2)
    if parts is None:
        raise SshsigError("malformed signature")
    form, raw = parts
    try:
        if isinstance(key, ed25519.Ed25519PublicKey):
            _verify_ed25519(key, form, raw, signed)
        elif isinstance(key, ec.EllipticCurvePublicKey):
            _verify_ecdsa(key, sig.public_key, form, raw, signed)
        else:
            _verify_rsa(key, form, raw, signed)
    except InvalidSignature as exc:
        raise SshsigError("bad signature") from exc


@functools.lru_cache(maxsize=256)
def load_public_key(blob: bytes) -> PublicKeyObject:
    """The key in an ssh public key blob (Ed25519, ECDSA nistp256/384/521, RSA, and the two FIDO
    types, whose blob ends with the application string).

    Cached: a history is signed by a handful of keys, thousands of times.
    """
    fields = _strings(blob, None) or [b""]
    kind = fields[0]
    if kind in (SK_ED25519, SK_ECDSA):
        # PROTOCOL.u2f: the plain type's fields, then the application (a C string to OpenSSH, so
        # no NUL in it); nistp256 is the only curve, which the plain ECDSA check below demands.
        plain = b"ssh-ed25519" if kind == SK_ED25519 else b"ecdsa-sha2-nistp256"
        usable = len(fields) > 2 and b"\0" not in fields[-1]
        kind, fields = (plain, [plain, *fields[1:-1]]) if usable else (b"", [])
    try:
        if kind == b"ssh-ed25519" and len(fields) == 2 and len(fields[1]) == 32:
            return ed25519.Ed25519PublicKey.from_public_bytes(fields[1])
        if kind.startswith(b"ecdsa-sha2-") and len(fields) == 3:
            curve = _CURVES.get(fields[1])
            point = fields[2]
            # OpenSSH reads only uncompressed points, on the curve the type names.
            if curve is None or kind != b"ecdsa-sha2-" + fields[1] or point[:1] != b"\x04":
                raise SshsigError("malformed ECDSA key")
            return ec.EllipticCurvePublicKey.from_encoded_point(curve[0](), point)
        if kind == b"ssh-rsa" and len(fields) == 3:
            e, n = _mpint(fields[1]), _mpint(fields[2])
            if n.bit_length() < _RSA_MIN_BITS:
                raise SshsigError("RSA key too small")
            return rsa.RSAPublicNumbers(e, n).public_key()
    except (ValueError, UnsupportedAlgorithm) as exc:
        raise SshsigError("unreadable public key") from exc
    raise SshsigError("unsupported or malformed public key")


def _verify_ed25519(key: ed25519.Ed25519PublicKey, form: bytes, raw: bytes, signed: bytes) -> None:
    if form != b"ssh-ed25519" or len(raw) != 64:
        raise SshsigError("malformed Ed25519 signature")
    key.verify(raw, signed)


def _verify_ecdsa(
    key: ec.EllipticCurvePublicKey, blob: bytes, form: bytes, raw: bytes, signed: bytes
) -> None:
    kind, curve = (_strings(blob, 3) or [b"", b""])[:2]
    if form != kind:
        raise SshsigError("ECDSA signature of another type")
    _check_ecdsa(key, raw, signed, _CURVES[curve][1]())


def _check_ecdsa(
    key: ec.EllipticCurvePublicKey, raw: bytes, signed: bytes, digest: hashes.HashAlgorithm
) -> None:
    """An ssh ECDSA signature (mpint r, mpint s) of `signed`, hashed with `digest`."""
    numbers = _strings(raw, 2)
    if numbers is None:
        raise SshsigError("malformed ECDSA signature")
    r, s = _mpint(numbers[0]), _mpint(numbers[1])
    key.verify(encode_dss_signature(r, s), signed, ec.ECDSA(digest))


def _verify_sk(key: PublicKeyObject, blob: bytes, signature: bytes, signed: bytes) -> None:
    """A FIDO key's signature: string(format) string(signature) byte(flags) uint32(counter)."""
    fields = _strings(blob, None) or [b""]
    kind, application = fields[0], fields[-1]
    parts = _strings(signature[:-5], 2) if len(signature) >= 5 else None
    if parts is None:
        raise SshsigError("malformed signature")
    form, raw = parts
    if form != kind:
        raise SshsigError("FIDO signature of another type")
    flags, counter = signature[-5], signature[-4:]
    if not flags & USER_PRESENT:
        raise SshsigError("FIDO signature without user presence (the key was not touched)")
    data = hashlib.sha256(application).digest() + bytes([flags]) + counter
    data += hashlib.sha256(signed).digest()
    try:
        if isinstance(key, ed25519.Ed25519PublicKey):
            _verify_ed25519(key, b"ssh-ed25519", raw, data)
        elif isinstance(key, ec.EllipticCurvePublicKey):
            _check_ecdsa(key, raw, data, hashes.SHA256())  # nistp256, the only FIDO curve
        else:
            raise SshsigError("unsupported FIDO key")
    except InvalidSignature as exc:
        raise SshsigError("bad signature") from exc


def _verify_rsa(key: rsa.RSAPublicKey, form: bytes, raw: bytes, signed: bytes) -> None:
    algorithm = _RSA_HASHES.get(form)
    if algorithm is None:
        raise SshsigError("RSA signature algorithm not allowed")
    size = (key.key_size + 7) // 8
    if len(raw) > size:
        raise SshsigError("RSA signature longer than the key")
    # OpenSSH accepts a signature with its leading zero bytes left off.
    key.verify(raw.rjust(size, b"\0"), signed, padding.PKCS1v15(), algorithm())


def _mpint(data: bytes) -> int:
    """An ssh mpint that OpenSSH's sshbuf_get_bignum2 accepts: not negative, not oversized."""
    if data[:1] and data[0] & 0x80:
        raise SshsigError("negative number")
    if len(data) > _MAX_MPINT or (len(data) == _MAX_MPINT and data[0] != 0):
        raise SshsigError("number too large")
    return int.from_bytes(data, "big")


def _strings(data: bytes, count: int | None) -> list[bytes] | None:
    """Exactly `count` (or any number of) ssh strings filling `data`; None if not so."""
    out, pos = [], 0
    while pos < len(data):
        if pos + 4 > len(data):
            return None
        length = int.from_bytes(data[pos : pos + 4], "big")
        if pos + 4 + length > len(data):
            return None
        out.append(data[pos + 4 : pos + 4 + length])
        pos += 4 + length
    return out if count is None or len(out) == count else None


def _string(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data
