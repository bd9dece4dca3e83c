"""The in-process SSH signature check, held to `ssh-keygen -Y verify`'s verdict.

For every key type a corpus of signatures (good ones made by ssh-keygen, damaged ones, and ones
crafted with the real private key so that only one rule is broken) goes to both: mergegate's
verify_signature with the policy key, and ssh-keygen -Y verify with an allowed-signers file holding
that key. Each case also states the verdict it must get, so a broken reference (ssh-keygen refusing
everything) cannot make the comparison pass.
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
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import decode_dss_signature
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_ssh_private_key,
)

from mergegate.crypto import sshsig
from mergegate.crypto.armor import armor, dearmor
from mergegate.crypto.signatures import PublicKey, parse_public_key, verify_signature
from tests.helpers.keys import SshKey

PAYLOAD = b"tree 4b825dc642cb6eb9a060e54bf8d69288fbee4904\nauthor a <a@x> 1 +0000\n\napprove\n"
NOW = datetime.now(UTC)
# name -> (ssh-keygen -t, -b)
KINDS = {
    "ed25519": ("ed25519", None),
    "nistp256": ("ecdsa", "256"),
    "nistp384": ("ecdsa", "384"),
    "nistp521": ("ecdsa", "521"),
    "rsa": ("rsa", "2048"),
}
ED25519_ORDER = 2**252 + 27742317777372353535851937790883648493


@dataclass(frozen=True)
class Signer:
    key: SshKey
    private: object  # the cryptography private key loaded from the same file
    policy: PublicKey
    allowed: Path  # an allowed-signers file holding just this key, for ssh-keygen

    @property
    def blob(self) -> bytes:
        return _b64(self.key.public_line.split()[1])


@pytest.fixture(scope="module")
def signers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Signer]:
    directory = tmp_path_factory.mktemp("sshsig-keys")
    out = {}
    for name, (kind, bits) in [*KINDS.items(), ("mallory", ("ed25519", None))]:
        private = directory / name
        argv = ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", name, "-f", str(private)]
        subprocess.run([*argv, *(["-b", bits] if bits else [])], check=True)
        line = Path(f"{private}.pub").read_text().strip()
        key = SshKey(name, f"{name}@example.com", private, line)
        allowed = directory / f"{name}.allowed"
        allowed.write_text(f'k0 namespaces="git" {" ".join(line.split()[:2])}\n')
        loaded = load_ssh_private_key(private.read_bytes(), None)
        policy = parse_public_key(line, owner=name, source="policy/policy.yaml:3")
        out[name] = Signer(key, loaded, policy, allowed)
    return out


# --- building signatures -----------------------------------------------------


def _s(data: bytes) -> bytes:
    return len(data).to_bytes(4, "big") + data


def _b64(text: str) -> bytes:
    return base64.b64decode(text)


def _keygen_sign(signer: Signer, payload: bytes, *extra: str) -> bytes:
    argv = ["ssh-keygen", "-q", "-Y", "sign", "-f", str(signer.key.private), *extra]
    return subprocess.run(argv, input=payload, capture_output=True, check=True).stdout


def _raw_sign(signer: Signer, data: bytes, rsa_form: bytes = b"rsa-sha2-512") -> bytes:
    """An ssh signature (string format, string bytes) of `data` by the real private key."""
    key = signer.private
    if isinstance(key, ed25519.Ed25519PrivateKey):
        return _s(b"ssh-ed25519") + _s(key.sign(data))
    if isinstance(key, ec.EllipticCurvePrivateKey):
        digest = {256: hashes.SHA256, 384: hashes.SHA384, 521: hashes.SHA512}[key.curve.key_size]
        r, s = decode_dss_signature(key.sign(data, ec.ECDSA(digest())))
        return _s(signer.key.public_line.split()[0].encode()) + _s(_mpint(r) + _mpint(s))
    assert isinstance(key, rsa.RSAPrivateKey)
    digest = {
        b"rsa-sha2-256": hashes.SHA256,
        b"rsa-sha2-512": hashes.SHA512,
        b"ssh-rsa": hashes.SHA1,
    }
    return _s(rsa_form) + _s(key.sign(data, padding.PKCS1v15(), digest[rsa_form]()))


def _mpint(n: int, pad: int = 0) -> bytes:
    body = n.to_bytes((n.bit_length() + 8) // 8, "big") if n else b""
    return _s(b"\0" * pad + body)


def _craft(
    signer: Signer,
    payload: bytes,
    *,
    version: int = 1,
    namespace: bytes = b"git",
    reserved: bytes = b"",
    hash_name: bytes = b"sha512",
    signed_namespace: bytes | None = None,
    signed_reserved: bytes = b"",
    signed_hash_name: bytes | None = None,
    digest: bytes | None = None,
    signature: Callable[[bytes], bytes] | None = None,
    public: bytes | None = None,
    tail: bytes = b"",
) -> bytes:
    """An armoured SSHSIG made with the real key; each knob breaks one rule."""
    if digest is None:
        digest = hashlib.new(hash_name.decode().lower(), payload).digest()
    data = b"SSHSIG" + _s(signed_namespace if signed_namespace is not None else namespace)
    data += _s(signed_reserved) + _s(signed_hash_name or hash_name) + _s(digest)
    sig = signature(data) if signature else _raw_sign(signer, data)
    blob = b"SSHSIG" + version.to_bytes(4, "big") + _s(public or signer.blob) + _s(namespace)
    blob += _s(reserved) + _s(hash_name) + _s(sig) + tail
    return armor(blob, "SSH SIGNATURE").encode()


def _reblob(text: bytes, change: Callable[[bytes], bytes]) -> bytes:
    blob = dearmor(text.decode(), "SSH SIGNATURE")
    assert blob is not None
    return armor(change(blob), "SSH SIGNATURE").encode()


def _fields(text: bytes) -> sshsig.Sshsig:
    blob = dearmor(text.decode(), "SSH SIGNATURE")
    assert blob is not None
    return sshsig.parse(blob)


def _with_signature(text: bytes, new_sig: bytes) -> bytes:
    f = _fields(text)
    blob = b"SSHSIG" + f.version.to_bytes(4, "big") + _s(f.public_key) + _s(f.namespace)
    blob += _s(f.reserved) + _s(f.hash_algorithm) + _s(new_sig)
    return armor(blob, "SSH SIGNATURE").encode()


# --- the two verdicts --------------------------------------------------------


def _ours(signer: Signer, payload: bytes, text: bytes) -> tuple[bool, str]:
    check = verify_signature(payload, text, [signer.policy], at=NOW)
    return check.ok, check.reason


def _keygens(signer: Signer, payload: bytes, text: bytes, tmp: Path) -> bool:
    sig = tmp / "sig"
    sig.write_bytes(text)
    argv = ["ssh-keygen", "-Y", "verify", "-f", str(signer.allowed), "-I", "k0", "-n", "git"]
    done = subprocess.run([*argv, "-s", str(sig)], input=payload, capture_output=True, check=False)
    return done.returncode == 0


def _same(
    signer: Signer,
    payload: bytes,
    text: bytes,
    tmp: Path,
    expected: bool,
    *,
    stricter: bool = False,
) -> str:
    """Both verdicts are `expected`; for a listed divergence ours must refuse, whatever ssh-keygen
    says."""
    ok, reason = _ours(signer, payload, text)
    reference = _keygens(signer, payload, text, tmp)
    if stricter:
        # OpenSSH 9.2 accepts it; a later OpenSSH may refuse it too.
        assert not ok and not expected, reason
    else:
        assert (ok, reference) == (expected, expected), reason
    return reason


# --- the corpus --------------------------------------------------------------

Case = Callable[[dict[str, Signer], str], tuple[bytes, bytes, bool]]


def _case_good(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, _keygen_sign(s[k], PAYLOAD, "-n", "git"), True


def _case_good_sha256(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, _keygen_sign(s[k], PAYLOAD, "-n", "git", "-O", "hashalg=sha256"), True


def _case_good_empty_payload(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return b"", _keygen_sign(s[k], b"", "-n", "git"), True


def _case_crafted_good(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    # The builder itself makes signatures ssh-keygen accepts: the knobs below mean something.
    return PAYLOAD, _craft(s[k], PAYLOAD), True


def _case_other_payload(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD + b"x", _keygen_sign(s[k], PAYLOAD, "-n", "git"), False


def _case_wrong_namespace(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, _keygen_sign(s[k], PAYLOAD, "-n", "file"), False


def _case_namespace_relabelled(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    # Signed for "file", the blob claims "git".
    return PAYLOAD, _craft(s[k], PAYLOAD, signed_namespace=b"file"), False


def _case_namespace_with_nul(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, _craft(s[k], PAYLOAD, namespace=b"git\0"), False


def _case_wrong_key(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, _keygen_sign(s["mallory"], PAYLOAD, "-n", "git"), False


def _case_key_swapped_in(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    # Mallory's signature with the policy key's blob put in its place.
    return PAYLOAD, _craft(s["mallory"], PAYLOAD, public=s[k].blob), False


def _case_wrong_hash_sha1(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, _craft(s[k], PAYLOAD, hash_name=b"sha1"), False


def _case_wrong_hash_sha384(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, _craft(s[k], PAYLOAD, hash_name=b"sha384"), False


def _case_wrong_hash_md5(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, _craft(s[k], PAYLOAD, hash_name=b"md5"), False


def _case_wrong_hash_upper(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, _craft(s[k], PAYLOAD, hash_name=b"SHA512"), False


def _case_hash_relabelled(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    # Signed as sha256, the blob claims sha512.
    digest = hashlib.sha256(PAYLOAD).digest()
    return PAYLOAD, _craft(s[k], PAYLOAD, signed_hash_name=b"sha256", digest=digest), False


def _case_digest_of_other_hash(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, _craft(s[k], PAYLOAD, digest=hashlib.sha256(PAYLOAD).digest()), False


def _case_hex_digest(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return (
        PAYLOAD,
        _craft(s[k], PAYLOAD, digest=hashlib.sha512(PAYLOAD).hexdigest().encode()),
        False,
    )


def _case_version_0(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    # ssh-keygen refuses only versions above 1; the version is not signed.
    return PAYLOAD, _craft(s[k], PAYLOAD, version=0), True


def _case_version_2(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, _craft(s[k], PAYLOAD, version=2), False


def _case_reserved_unsigned(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    # ssh-keygen signs and checks the reserved field as empty, whatever the blob holds.
    return PAYLOAD, _craft(s[k], PAYLOAD, reserved=b"anything"), True


def _case_reserved_signed(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, _craft(s[k], PAYLOAD, reserved=b"x", signed_reserved=b"x"), False


def _case_trailing_blob_data(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, _craft(s[k], PAYLOAD, tail=b"\0\0\0\0"), False


def _case_trailing_signature_data(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, _craft(s[k], PAYLOAD, signature=lambda d: _raw_sign(s[k], d) + b"\0"), False


def _case_signature_format_mismatch(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    def relabel(data: bytes) -> bytes:
        raw = sshsig._strings(_raw_sign(s[k], data), 2)
        assert raw is not None
        other = b"ecdsa-sha2-nistp256" if k == "ed25519" else b"ssh-ed25519"
        return _s(other) + _s(raw[1])

    return PAYLOAD, _craft(s[k], PAYLOAD, signature=relabel), False


def _case_bad_magic(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    text = _keygen_sign(s[k], PAYLOAD, "-n", "git")
    return PAYLOAD, _reblob(text, lambda b: b"SSHSIh" + b[6:]), False


def _case_empty_blob(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, b"-----BEGIN SSH SIGNATURE-----\n-----END SSH SIGNATURE-----\n", False


def _case_not_base64(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    text = _keygen_sign(s[k], PAYLOAD, "-n", "git")
    return PAYLOAD, text.replace(b"U1NIU0lH", b"U1NIU0l!", 1), False


def _case_armour_truncated(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    text = _keygen_sign(s[k], PAYLOAD, "-n", "git")
    return PAYLOAD, text[: len(text) // 2], False


def _case_footer_missing(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    text = _keygen_sign(s[k], PAYLOAD, "-n", "git")
    return PAYLOAD, text.replace(b"-----END SSH SIGNATURE-----", b""), False


def _case_stray_line_in_armour(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    text = _keygen_sign(s[k], PAYLOAD, "-n", "git")
    first, rest = text.split(b"\n", 1)
    return PAYLOAD, first + b"\nAAAA\n" + rest, False


CASES: dict[str, Case] = {
    name.removeprefix("_case_"): fn
    for name, fn in dict(globals()).items()
    if name.startswith("_case_")
}
# Cases that make sense only for one key family.


def _rsa_sha256(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return (
        PAYLOAD,
        _craft(s[k], PAYLOAD, signature=lambda d: _raw_sign(s[k], d, b"rsa-sha2-256")),
        True,
    )


def _rsa_sha1(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    # A genuine signature, but "ssh-rsa" means SHA-1: ssh-keygen refuses it for SSHSIG.
    return PAYLOAD, _craft(s[k], PAYLOAD, signature=lambda d: _raw_sign(s[k], d, b"ssh-rsa")), False


def _rsa_form_hash_swapped(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    def swapped(data: bytes) -> bytes:
        raw = sshsig._strings(_raw_sign(s[k], data, b"rsa-sha2-512"), 2)
        assert raw is not None
        return _s(b"rsa-sha2-256") + _s(raw[1])

    return PAYLOAD, _craft(s[k], PAYLOAD, signature=swapped), False


def _rsa_leading_zero_dropped(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    # PKCS#1 v1.5 is deterministic: find a payload whose signature starts with a zero byte.
    key = s[k].private
    assert isinstance(key, rsa.RSAPrivateKey)
    for n in range(20000):
        payload = PAYLOAD + str(n).encode()
        text = _craft(s[k], payload)
        raw = sshsig._strings(_fields(text).signature, 2)
        assert raw is not None
        if raw[1][0] == 0:
            return payload, _with_signature(text, _s(raw[0]) + _s(raw[1].lstrip(b"\0"))), True
    raise AssertionError("no signature with a leading zero byte")


def _rsa_extra_leading_zero(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    text = _craft(s[k], PAYLOAD)
    raw = sshsig._strings(_fields(text).signature, 2)
    assert raw is not None
    return PAYLOAD, _with_signature(text, _s(raw[0]) + _s(b"\0" + raw[1])), False


def _ecdsa_numbers(s: dict[str, Signer], k: str, change: Callable[[int, int, int], bytes]) -> bytes:
    key = s[k].private
    assert isinstance(key, ec.EllipticCurvePrivateKey)
    order = {
        256: ec_order(ec.SECP256R1()),
        384: ec_order(ec.SECP384R1()),
        521: ec_order(ec.SECP521R1()),
    }
    n = order[key.curve.key_size]

    def sign(data: bytes) -> bytes:
        form, numbers = sshsig._strings(_raw_sign(s[k], data), 2) or [b"", b""]
        r_bytes, s_bytes = sshsig._strings(numbers, 2) or [b"", b""]
        return _s(form) + _s(
            change(int.from_bytes(r_bytes, "big"), int.from_bytes(s_bytes, "big"), n)
        )

    return _craft(s[k], PAYLOAD, signature=sign)


def ec_order(curve: ec.EllipticCurve) -> int:
    return {
        "secp256r1": 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551,
        "secp384r1": int(
            "FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFC7634D81F4372DDF581A0DB248B0A77AECEC196ACCC52973",
            16,
        ),
        "secp521r1": int(
            "01FFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFFA51868783BF2F966B7FCC0148F709A5D03BB5C9B8899C47AEBB6FB71E91386409",
            16,
        ),
    }[curve.name]


def _ecdsa_high_s(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    # (r, n - s) is the same signature to ECDSA; neither side demands low s.
    return PAYLOAD, _ecdsa_numbers(s, k, lambda r, s_, n: _mpint(r) + _mpint(n - s_)), True


def _ecdsa_padded_mpint(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    # OpenSSH strips leading zero bytes of an mpint.
    return PAYLOAD, _ecdsa_numbers(s, k, lambda r, s_, n: _mpint(r, pad=2) + _mpint(s_)), True


def _ecdsa_negative_mpint(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    def negative(r: int, s_: int, n: int) -> bytes:
        body = r.to_bytes((r.bit_length() + 7) // 8, "big")
        return _s(b"\xff" + body) + _mpint(s_)

    return PAYLOAD, _ecdsa_numbers(s, k, negative), False


def _ecdsa_s_plus_order(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, _ecdsa_numbers(s, k, lambda r, s_, n: _mpint(r) + _mpint(s_ + n)), False


def _ecdsa_zero_r(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, _ecdsa_numbers(s, k, lambda r, s_, n: _mpint(0) + _mpint(s_)), False


def _ecdsa_trailing_number(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    return PAYLOAD, _ecdsa_numbers(s, k, lambda r, s_, n: _mpint(r) + _mpint(s_) + _mpint(1)), False


def _ed25519_s_plus_order(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    # A real signature re-encoded with S + L. OpenSSH 9.2's Ed25519 checks only the top bits of S
    # and accepts it; RFC 8032 (and OpenSSL) demand S < L. The one listed divergence, and a refusal:
    # it adds no signature the key did not make.
    def malleate(data: bytes) -> bytes:
        raw = (sshsig._strings(_raw_sign(s[k], data), 2) or [b"", b""])[1]
        big = int.from_bytes(raw[32:], "little") + ED25519_ORDER
        return _s(b"ssh-ed25519") + _s(raw[:32] + big.to_bytes(32, "little"))

    return PAYLOAD, _craft(s[k], PAYLOAD, signature=malleate), False


def _ed25519_short(s: dict[str, Signer], k: str) -> tuple[bytes, bytes, bool]:
    def short(data: bytes) -> bytes:
        raw = (sshsig._strings(_raw_sign(s[k], data), 2) or [b"", b""])[1]
        return _s(b"ssh-ed25519") + _s(raw[:63])

    return PAYLOAD, _craft(s[k], PAYLOAD, signature=short), False


# Where ssh-keygen accepts what the in-process check refuses (never the reverse).
STRICTER = {"ed25519_s_plus_order"}

FAMILY_CASES: dict[str, dict[str, Case]] = {
    "rsa": {
        "rsa_sha256": _rsa_sha256,
        "rsa_sha1": _rsa_sha1,
        "rsa_form_hash_swapped": _rsa_form_hash_swapped,
        "rsa_leading_zero_dropped": _rsa_leading_zero_dropped,
        "rsa_extra_leading_zero": _rsa_extra_leading_zero,
    },
    "ecdsa": {
        "ecdsa_high_s": _ecdsa_high_s,
        "ecdsa_padded_mpint": _ecdsa_padded_mpint,
        "ecdsa_negative_mpint": _ecdsa_negative_mpint,
        "ecdsa_s_plus_order": _ecdsa_s_plus_order,
        "ecdsa_zero_r": _ecdsa_zero_r,
        "ecdsa_trailing_number": _ecdsa_trailing_number,
    },
    "ed25519": {
        "ed25519_s_plus_order": _ed25519_s_plus_order,
        "ed25519_short": _ed25519_short,
    },
}


def _family(kind: str) -> str:
    return "ecdsa" if kind.startswith("nistp") else kind


ALL = [(kind, name) for kind in KINDS for name in CASES] + [
    (kind, name) for kind in KINDS for name in FAMILY_CASES.get(_family(kind), {})
]


@pytest.mark.parametrize(("kind", "case"), ALL)
def test_verdict_matches_ssh_keygen(
    kind: str, case: str, signers: dict[str, Signer], tmp_path: Path
) -> None:
    build = CASES.get(case) or FAMILY_CASES[_family(kind)][case]
    payload, text, expected = build(signers, kind)

    _same(signers[kind], payload, text, tmp_path, expected, stricter=case in STRICTER)


@pytest.mark.parametrize("kind", KINDS)
def test_flipped_bytes_match_ssh_keygen(
    kind: str, signers: dict[str, Signer], tmp_path: Path
) -> None:
    """One bit flipped at positions spread over every field of the blob: all refused, by both."""
    signer = signers[kind]
    text = _keygen_sign(signer, PAYLOAD, "-n", "git")
    blob = dearmor(text.decode(), "SSH SIGNATURE")
    assert blob is not None
    positions = sorted({*range(0, len(blob), max(1, len(blob) // 24)), len(blob) - 1})
    for pos in positions:
        flipped = blob[:pos] + bytes([blob[pos] ^ 0x01]) + blob[pos + 1 :]
        _same(signer, PAYLOAD, armor(flipped, "SSH SIGNATURE").encode(), tmp_path, False)


@pytest.mark.parametrize("kind", KINDS)
def test_truncated_blobs_match_ssh_keygen(
    kind: str, signers: dict[str, Signer], tmp_path: Path
) -> None:
    signer = signers[kind]
    blob = dearmor(_keygen_sign(signer, PAYLOAD, "-n", "git").decode(), "SSH SIGNATURE")
    assert blob is not None
    for length in sorted(
        {1, 6, 9, 10, 14, len(blob) // 3, len(blob) // 2, len(blob) - 4, len(blob) - 1}
    ):
        _same(signer, PAYLOAD, armor(blob[:length], "SSH SIGNATURE").encode(), tmp_path, False)


# --- each rule is reached, with its own reason --------------------------------


@pytest.mark.parametrize(
    ("case", "reason"),
    [
        ("wrong_hash_sha1", "unsupported hash algorithm"),
        ("wrong_hash_upper", "unsupported hash algorithm"),
        ("hash_relabelled", "bad signature"),
        ("namespace_with_nul", "namespace"),
        ("trailing_signature_data", "malformed signature"),
        ("signature_format_mismatch", "malformed Ed25519 signature"),
        ("version_2", "malformed ssh signature"),
        ("trailing_blob_data", "malformed ssh signature"),
        ("wrong_key", "is not a key in the policy"),
        ("key_swapped_in", "bad signature by ed25519"),
    ],
)
def test_refusals_name_their_rule(case: str, reason: str, signers: dict[str, Signer]) -> None:
    payload, text, _ = CASES[case](signers, "ed25519")

    ok, why = _ours(signers["ed25519"], payload, text)

    assert not ok and reason in why


def test_rsa_sha1_is_refused_by_the_algorithm_rule(signers: dict[str, Signer]) -> None:
    payload, text, _ = _rsa_sha1(signers, "rsa")

    assert _ours(signers["rsa"], payload, text) == (
        False,
        f"bad signature by rsa ({signers['rsa'].policy.fingerprint}): RSA signature algorithm not "
        "allowed",
    )


def test_small_rsa_keys_are_refused() -> None:
    # OpenSSH reads no RSA key under 1024 bits; neither does the in-process check.
    numbers = (
        rsa.generate_private_key(public_exponent=65537, key_size=1024).public_key().public_numbers()
    )
    small = (numbers.n >> 200) | 1  # 824 bits, odd

    with pytest.raises(sshsig.SshsigError, match="RSA key too small"):
        sshsig.load_public_key(_s(b"ssh-rsa") + _mpint(numbers.e) + _mpint(small))
    key = sshsig.load_public_key(_s(b"ssh-rsa") + _mpint(numbers.e) + _mpint(numbers.n))
    assert isinstance(key, rsa.RSAPublicKey) and key.key_size == 1024


def test_compressed_ecdsa_points_are_refused(signers: dict[str, Signer]) -> None:
    fields = sshsig._strings(signers["nistp256"].blob, 3)
    assert fields is not None
    key = sshsig.load_public_key(signers["nistp256"].blob)
    assert isinstance(key, ec.EllipticCurvePublicKey)
    compressed = key.public_bytes(Encoding.X962, PublicFormat.CompressedPoint)
    with pytest.raises(sshsig.SshsigError, match="malformed ECDSA key"):
        sshsig.load_public_key(_s(fields[0]) + _s(fields[1]) + _s(compressed))


def test_no_ssh_keygen_is_needed(
    signers: dict[str, Signer], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    text = _keygen_sign(signers["ed25519"], PAYLOAD, "-n", "git")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))

    assert _ours(signers["ed25519"], PAYLOAD, text)[0]
