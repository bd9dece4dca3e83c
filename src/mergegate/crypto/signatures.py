"""Verify a commit's signature against keys taken from the policy.

Trust never comes from the user's git config, ssh allowed-signers file or gpg keyring: an ssh
signature is checked in-process (sshsig.py) against the keys it is given; an OpenPGP one by gpg with
a temporary keyring built from them and thrown away afterwards.
"""

from __future__ import annotations

import base64
import hashlib
import os
import re
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from mergegate.crypto.armor import PGP_SIGNATURE, b64, dearmor, pgp_issuer, pgp_packets
from mergegate.errors import ConfigError, MergegateError

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
    subkeys: tuple[str, ...] = ()  # OpenPGP subkey fingerprints; their signatures are this key's
    expires: bool = False  # an OpenPGP key (or subkey) that carries its own expiry


@dataclass(frozen=True)
class SignatureCheck:
    """The outcome of one verification, with words for the audit."""

    ok: bool
    key: PublicKey | None  # the policy key that made the good signature
    signer: str  # what the signature says about its key (fingerprint / key id), "" if unsigned
    reason: str  # "good signature by alice (SHA256:...)" or why not


# The supported ssh key types, each with the number of ssh strings in its blob.
_SSH_TYPES = {
    "ssh-ed25519": 2,
    "ecdsa-sha2-nistp256": 3,
    "ecdsa-sha2-nistp384": 3,
    "ecdsa-sha2-nistp521": 3,
    "ssh-rsa": 3,
    # FIDO (hardware) keys: the plain key's strings, then the application (PROTOCOL.u2f).
    "sk-ssh-ed25519@openssh.com": 3,
    "sk-ecdsa-sha2-nistp256@openssh.com": 4,
}
_PGP_KEY = "PGP PUBLIC KEY BLOCK"
_SSH_SIG = "SSH SIGNATURE"
_PGP_SIG = PGP_SIGNATURE
_TIMEOUT_SECONDS = 30
_EXPECTED = "an ssh public key line ('ssh-ed25519 AAAA...') or an armoured OpenPGP public key"


def parse_public_key(
    text: str,
    *,
    owner: str,
    source: str,
    valid_after: datetime | None = None,
    valid_before: datetime | None = None,
) -> PublicKey:
    """Build a PublicKey from an ssh key line or an armoured OpenPGP key; ConfigError if neither.

    An OpenPGP key is read by gpg in a throw-away homedir; ssh keys are read in Python. The error
    never repeats more than the start of the text.
    """
    stripped = text.strip()
    first = stripped.split(maxsplit=1)[0] if stripped else ""
    subkeys: tuple[str, ...] = ()
    kind: KeyKind
    if stripped.startswith("-----BEGIN PGP"):
        kind = "openpgp"
        fingerprint, subkeys, expires = _parse_openpgp_key(stripped, owner, source)
    elif first in _SSH_TYPES:
        kind, fingerprint = "ssh", _parse_ssh_key(stripped, owner, source)
    elif first.startswith(("ssh-", "ecdsa-", "sk-")) or first.endswith("@openssh.com"):
        supported = ", ".join(_SSH_TYPES)
        message = f"ssh key type {first[:40]!r} is not supported; use one of {supported}"
        raise _config_error(owner, message, source)
    else:
        raise _config_error(owner, f"expected {_EXPECTED}, found {_prefix(stripped)}", source)
    return PublicKey(
        kind=kind,
        text=stripped,
        fingerprint=fingerprint,
        owner=owner,
        source=source,
        valid_after=valid_after,
        valid_before=valid_before,
        subkeys=subkeys,
        expires=kind == "openpgp" and expires,
    )


def split_signed_commit(raw_commit: bytes) -> tuple[bytes, bytes] | None:
    """Split a raw commit object into (signed payload, signature); None when unsigned.

    This mirrors git's parse_buffer_signed_by_header(): the signature is the header for the object's
    hash ("gpgsig" for SHA-1, "gpgsig-sha256" for SHA-256, told apart by the length of the tree id)
    with its continuation lines; the other hash's signature header is left out of the payload too,
    and nothing after the blank line that ends the headers is looked at.
    """
    header = b"gpgsig-sha256 " if re.match(rb"tree [0-9a-f]{64}\n", raw_commit) else b"gpgsig "
    payload, signature = bytearray(), bytearray()
    in_signature = other_signature = signed = False
    pos, end = 0, len(raw_commit)
    while pos < end:
        newline = raw_commit.find(b"\n", pos)
        nxt = end if newline < 0 else newline + 1
        line = raw_commit[pos:nxt]
        if (in_signature and line.startswith(b" ")) or line.startswith(header):
            signature += line[1:] if in_signature and line.startswith(b" ") else line[len(header) :]
            in_signature = signed = True
            other_signature = False
        else:
            other_signature = line.startswith(b"gpgsig") or (
                other_signature and line.startswith(b" ")
            )
            if line.startswith(b"\n"):  # end of the headers: the message goes in whole
                nxt, line = end, raw_commit[pos:]
            if not other_signature:
                payload += line
            in_signature = False
        pos = nxt
    return (bytes(payload), bytes(signature)) if signed else None


def verify_signature(
    payload: bytes, signature: bytes, keys: Sequence[PublicKey], *, at: datetime
) -> SignatureCheck:
    """Check `signature` over `payload` against `keys`, judging key lifetimes at `at`.

    A bad, foreign or hostile signature gives ok=False and the reason; only a broken environment
    (gpg missing or hanging, for OpenPGP) raises MergegateError. Naive datetimes, in `at` or in a
    key, are taken as UTC. `at` governs the policy's valid_after/valid_before only: gpg judges an
    OpenPGP key's own expiry and revocation at the current time.
    """
    if not signature.strip():
        return _refused("", "unsigned")
    text = signature.decode("ascii", errors="replace").strip()
    if text.startswith(f"-----BEGIN {_SSH_SIG}-----"):
        return _verify_ssh(payload, text, keys, at)
    if text.startswith(f"-----BEGIN {_PGP_SIG}-----"):
        return _verify_openpgp(payload, text, keys, at)
    return _refused("", "unknown signature format")


# --- ssh ---------------------------------------------------------------------


def _parse_ssh_key(line: str, owner: str, source: str) -> str:
    if "\n" in line:
        raise _config_error(owner, "an ssh public key must be a single line", source)
    parts = line.split()
    if len(parts) < 2:
        raise _config_error(owner, f"ssh key {_prefix(line)} has no key data", source)
    declared, blob = parts[0], b64(parts[1])
    if blob is None:
        raise _config_error(owner, f"ssh key data {_prefix(parts[1])} is not valid base64", source)
    fields = _ssh_strings(blob) or [b"(unreadable)"]
    embedded = fields[0][:40].decode("ascii", errors="replace")
    if embedded != declared:
        message = f"the line says {declared!r} but the key data is of type {embedded!r}"
        raise _config_error(owner, message, source)
    if (
        len(fields) != _SSH_TYPES[declared]
        or (declared.endswith(("ssh-ed25519", "ed25519@openssh.com")) and len(fields[1]) != 32)
        or (declared.startswith("ecdsa-") and fields[1] != declared.rsplit("-", 1)[1].encode())
        or (declared.startswith("sk-ecdsa-") and fields[1] != b"nistp256")
        or (declared.startswith("sk-") and b"\0" in fields[-1])  # OpenSSH's application: a C string
    ):
        raise _config_error(owner, f"the {declared} key data is malformed", source)
    return ssh_fingerprint(blob)


def _verify_ssh(
    payload: bytes, text: str, keys: Sequence[PublicKey], at: datetime
) -> SignatureCheck:
    # The SSHSIG blob carries the signer's public key: it is named and matched here, then sshsig
    # checks the cryptography in-process, as ssh-keygen -Y verify would (tests hold the two to the
    # same verdict). Imported here: cryptography's import costs ~50 ms, which a pass with nothing
    # new to check need not pay.
    from mergegate.crypto import sshsig

    try:
        sig = sshsig.parse(dearmor(text, _SSH_SIG) or b"")
    except sshsig.SshsigError:
        return _refused("", "malformed ssh signature")
    signer = ssh_fingerprint(sig.public_key)
    if sig.namespace != b"git":
        shown = sig.namespace[:40].decode("ascii", errors="replace")
        return _refused(signer, f"signature by {signer} is for namespace {shown!r}, not 'git'")
    key = next((k for k in keys if k.kind == "ssh" and _ssh_blob(k.text) == sig.public_key), None)
    if key is None:
        return _refused(signer, f"signature by {signer} is not a key in the policy")
    try:
        sshsig.verify(payload, sig, namespace=b"git")
    except sshsig.SshsigError as exc:
        why = "" if str(exc) == "bad signature" else f": {exc}"
        return _refused(signer, f"bad signature by {key.owner} ({signer}){why}")
    return _judge_lifetime(key, signer, at)


def _ssh_strings(data: bytes) -> list[bytes]:
    """Split a run of ssh wire-format strings (uint32 length, bytes); [] if malformed."""
    out, pos = [], 0
    while pos < len(data):
        length = int.from_bytes(data[pos : pos + 4], "big")
        if pos + 4 + length > len(data):
            return []
        out.append(data[pos + 4 : pos + 4 + length])
        pos += 4 + length
    return out


def _ssh_blob(line: str) -> bytes | None:
    parts = line.split()
    return b64(parts[1]) if len(parts) >= 2 else None


_OPENSSH_KEY = re.compile(
    r"-----BEGIN OPENSSH PRIVATE KEY-----(.*?)-----END OPENSSH PRIVATE KEY-----", re.S
)
_OPENSSH_MAGIC = b"openssh-key-v1\0"


def ssh_key_file_blob(path: str) -> bytes | None:
    """The public key blob of an ssh key file: a public key line, or an OpenSSH private key (whose
    public half is stored in the clear, behind a passphrase too); None where the file does not say
    (a PEM private key, anything unreadable). The runner compares it with the policy's runner keys
    before a pass, instead of finding out at its first audit commit."""
    try:
        with open(path, "rb") as handle:
            text = handle.read(1 << 16).decode("ascii")
    except (OSError, UnicodeDecodeError):
        return None
    if text.split(" ", 1)[0] in _SSH_TYPES:
        return _ssh_blob(text.strip().split("\n", 1)[0])
    found = _OPENSSH_KEY.search(text)
    data = b64("".join(found.group(1).split())) if found else None
    if data is None or not data.startswith(_OPENSSH_MAGIC):
        return None
    pos = len(_OPENSSH_MAGIC)
    for _ in range(3):  # cipher name, kdf name, kdf options
        pos += 4 + int.from_bytes(data[pos : pos + 4], "big")
    count = int.from_bytes(data[pos : pos + 4], "big")
    length = int.from_bytes(data[pos + 4 : pos + 8], "big")
    blob = data[pos + 8 : pos + 8 + length]
    return blob if count >= 1 and length and len(blob) == length else None


def ssh_blob(key: PublicKey) -> bytes | None:
    return _ssh_blob(key.text) if key.kind == "ssh" else None


def ssh_fingerprint(blob: bytes) -> str:
    return "SHA256:" + base64.b64encode(hashlib.sha256(blob).digest()).decode().rstrip("=")


# --- OpenPGP -----------------------------------------------------------------


def _parse_openpgp_key(text: str, owner: str, source: str) -> tuple[str, tuple[str, ...], bool]:
    if "PRIVATE KEY BLOCK" in text:
        problem = "this is a secret key block; the policy must carry only the public key"
        raise _config_error(owner, f"{problem} (gpg --armor --export)", source)
    if not text.startswith(f"-----BEGIN {_PGP_KEY}-----") or not text.endswith(f"{_PGP_KEY}-----"):
        raise _config_error(owner, f"expected {_EXPECTED}, found {_prefix(text)}", source)
    with tempfile.TemporaryDirectory(prefix="mergegate-gpg-") as home:
        argv = _gpg_argv(home, "--with-colons", "--import-options", "show-only", "--import")
        result = _run(argv, text.encode(), home)
    primaries: list[str] = []
    subkeys: list[str] = []
    fpr_goes_to: list[str] | None = None  # an "fpr" record belongs to the record before it
    expires = False
    for record in result.stdout.decode("utf-8", errors="replace").splitlines():
        fields = record.split(":")
        if fields[0] in ("sec", "ssb"):
            problem = "the block holds a secret key; the policy must carry only the public key"
            raise _config_error(owner, problem, source)
        if fields[0] == "fpr" and fpr_goes_to is not None and len(fields) > 9:
            fpr_goes_to.append(fields[9].upper())
        fpr_goes_to = {"pub": primaries, "sub": subkeys}.get(fields[0])
        # Field 7 of a pub/sub record is its expiry (empty when it never expires).
        expires = expires or (
            fields[0] in ("pub", "sub") and len(fields) > 6 and fields[6].strip() != ""
        )
    if len(primaries) != 1:
        found = f"{len(primaries)} primary keys" if primaries else "no OpenPGP public key"
        said = [ln for ln in result.stderr.decode(errors="replace").splitlines() if "gpg: " in ln]
        why = f" ({said[-1][:120]})" if said and not primaries else ""
        raise _config_error(owner, f"expected one OpenPGP public key, found {found}{why}", source)
    return primaries[0], tuple(subkeys), expires


def _verify_openpgp(
    payload: bytes, text: str, keys: Sequence[PublicKey], at: datetime
) -> SignatureCheck:
    # Only a lone detached signature will do: gpg --verify, handed a signed message, checks the data
    # inside it and ignores the payload file. gpg gets the very bytes checked here, so it cannot
    # read them differently.
    binary = dearmor(text, _PGP_SIG) or b""
    packets = pgp_packets(binary)
    if not packets:
        return _refused("", "malformed OpenPGP signature")
    issuer = pgp_issuer(packets[0][1]) if packets[0][0] == 2 else ""
    if len(packets) != 1 or packets[0][0] != 2:
        return _refused(issuer, "OpenPGP data is not a single detached signature")
    pgp_keys = [k for k in keys if k.kind == "openpgp"]
    if not pgp_keys:
        return _refused(issuer, f"signature by {issuer or 'a key'} is not a key in the policy")
    with tempfile.TemporaryDirectory(prefix="mergegate-gpg-") as home:
        _run(_gpg_argv(home, "--import"), "".join(k.text + "\n" for k in pgp_keys).encode(), home)
        Path(home, "signature").write_bytes(binary)
        Path(home, "payload").write_bytes(payload)
        argv = ["--status-fd", "1", "--trust-model", "always", "--verify"]
        result = _run(_gpg_argv(home, *argv, f"{home}/signature", f"{home}/payload"), b"", home)
    status: dict[str, list[str]] = {}
    signatures = 0
    for line in result.stdout.decode("utf-8", errors="replace").splitlines():
        if line.startswith("[GNUPG:] "):
            keyword, *args = line[9:].split(" ")
            signatures += 1 if keyword == "NEWSIG" else 0
            status.setdefault(keyword, args)
    if signatures != 1 or "PLAINTEXT" in status:
        return _refused(issuer, "OpenPGP data is not a single detached signature")
    # VALIDSIG <signing fpr> ... <primary fpr>, only for a cryptographically good signature.
    valid = status.get("VALIDSIG", [])
    named = [status[w][0] for w in ("BADSIG", "EXPSIG", "ERRSIG") if status.get(w)] + [""]
    signer = valid[0] if valid else (issuer or named[0])
    # The key gpg itself picked (its id) names a bad signature best.
    key = _pgp_key_for(pgp_keys, valid[-1] if valid else named[0]) or _pgp_key_for(pgp_keys, signer)
    who = f"{key.owner} ({key.fingerprint})" if key else signer
    if "ERRSIG" in status:
        args = status["ERRSIG"] + ["-"] * 7
        signer = args[6] if args[6] != "-" else signer
        if args[5] == "9":  # no public key
            return _refused(signer, f"signature by {signer} is not a key in the policy")
        return _refused(signer, f"signature by {signer} could not be checked (gpg error {args[5]})")
    if "BADSIG" in status:
        return _refused(signer, f"bad signature by {who}")
    unchecked = _refused(signer, f"OpenPGP signature by {signer or 'a key'} could not be checked")
    if key is None or not valid:
        return unchecked
    if "REVKEYSIG" in status:
        return _refused(signer, f"key {key.fingerprint} of {key.owner} is revoked")
    if "EXPKEYSIG" in status:
        # gpg judges expiry at its own clock; the runner judges at `at` (when it first saw the
        # commit), so a verifier re-checking an old approval after the key expired agrees with what
        # the runner decided then.
        expired = status.get("KEYEXPIRED", [""])[0]
        if not expired.isdigit() or int(expired) <= _utc(at).timestamp():
            return _refused(signer, f"key {key.fingerprint} of {key.owner} expired")
        return _judge_lifetime(key, signer, at)
    if "EXPSIG" in status:
        return _refused(signer, f"signature by {who} expired")
    return _judge_lifetime(key, signer, at) if "GOODSIG" in status else unchecked


def _pgp_key_for(keys: Sequence[PublicKey], ident: str) -> PublicKey | None:
    """The key with a primary or subkey fingerprint that is, or ends in the key id, `ident`."""
    ident = ident.upper()
    if len(ident) not in (16, 40):
        return None
    return next((k for k in keys for f in (k.fingerprint, *k.subkeys) if f.endswith(ident)), None)


def _gpg_argv(home: str, *args: str) -> list[str]:
    # --no-autostart: reading public keys and signatures needs no agent or dirmngr.
    return ["gpg", "--homedir", home, "--batch", "--no-tty", "--no-autostart", *args]


# --- shared ------------------------------------------------------------------


def _judge_lifetime(key: PublicKey, signer: str, at: datetime) -> SignatureCheck:
    when, shown = _utc(at), f"key {key.fingerprint} of {key.owner}"
    if key.valid_after is not None and when < _utc(key.valid_after):
        return _refused(signer, f"{shown} is not valid before {key.valid_after.isoformat()}")
    if key.valid_before is not None and when > _utc(key.valid_before):
        return _refused(signer, f"{shown} is not valid after {key.valid_before.isoformat()}")
    return SignatureCheck(True, key, signer, f"good signature by {key.owner} ({key.fingerprint})")


def _refused(signer: str, reason: str) -> SignatureCheck:
    return SignatureCheck(ok=False, key=None, signer=signer, reason=reason)


def _utc(moment: datetime) -> datetime:
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def _run(argv: list[str], stdin: bytes, home: str) -> subprocess.CompletedProcess[bytes]:
    # An explicit environment: no SSH_AUTH_SOCK, GNUPGHOME or user locale gets in.
    env = {"PATH": os.environ.get("PATH", os.defpath), "HOME": home, "LC_ALL": "C"}
    try:
        return subprocess.run(
            argv, input=stdin, capture_output=True, env=env, timeout=_TIMEOUT_SECONDS, check=False
        )
    except FileNotFoundError as exc:
        message = f"{argv[0]} is not installed or not on PATH; it is needed to check signatures"
        raise MergegateError(message) from exc
    except subprocess.TimeoutExpired as exc:
        raise MergegateError(f"{argv[0]} did not finish within {_TIMEOUT_SECONDS} s") from exc
    except OSError as exc:
        raise MergegateError(f"cannot run {argv[0]}: {exc}") from exc


def _config_error(owner: str, problem: str, source: str) -> ConfigError:
    message = f"key of {owner}: {problem}"
    file, _, line = source.rpartition(":")
    if file and line.isdigit():
        return ConfigError(message, file=file, line=int(line))
    return ConfigError(message, file=source or None)


def _prefix(text: str) -> str:
    return repr(text[:20] + ("..." if len(text) > 20 else "")) if text else "nothing"
