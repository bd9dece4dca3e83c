"""DSSE envelopes signed with real ssh keys (files and a real ssh agent), held to securesystemslib's
verifier: what a reader with standard tools and the runner's public key accepts."""

from __future__ import annotations

import base64
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from securesystemslib.dsse import Envelope as SslibEnvelope
from securesystemslib.signer import SSlibKey

from mergegate.crypto import dsse
from mergegate.errors import UsageError
from tests.helpers.keys import make_ssh_key

PAYLOAD = b'{"_type":"https://in-toto.io/Statement/v1","subject":[]}'
KINDS = {"ed25519": [], "ecdsa": [], "ecdsa384": ["-b", "384"], "rsa": ["-b", "2048"]}


def _key(directory: Path, kind: str, *, passphrase: str = "") -> Path:
    path = directory / f"runner_{kind}{'_locked' if passphrase else ''}"
    algorithm = "ecdsa" if kind.startswith("ecdsa") else kind
    subprocess.run(
        ["ssh-keygen", "-q", "-t", algorithm, *KINDS[kind], "-N", passphrase, "-f", str(path)],
        check=True,
        stdin=subprocess.DEVNULL,
    )
    return path


def _sslib_accepts(envelope: dsse.Envelope, public_line: str, *, scheme: str | None) -> bool:
    """securesystemslib's verdict, from the envelope's bytes and the public key alone."""
    parsed = SslibEnvelope.from_dict(json.loads(envelope.to_bytes()))
    public = serialization.load_ssh_public_key(public_line.encode())
    key = SSlibKey.from_crypto(public, keyid=dsse.fingerprint(public_line), scheme=scheme)
    try:
        parsed.verify([key], 1)
    except Exception:
        return False
    return True


SCHEMES = {"ed25519": None, "ecdsa": None, "ecdsa384": None, "rsa": "rsa-pkcs1v15-sha256"}


def test_pae_is_the_spec_s_encoding() -> None:
    # The example of github.com/secure-systems-lab/dsse/blob/master/protocol.md.
    assert (
        dsse.pae("http://example.com/HelloWorld", b"hello world")
        == b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"
    )


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_a_key_file_signs_what_securesystemslib_verifies(tmp_path: Path, kind: str) -> None:
    path = _key(tmp_path, kind)
    public_line = Path(f"{path}.pub").read_text().strip()
    signer = dsse.load_signer(path)
    assert signer.keyid == dsse.fingerprint(public_line)
    assert (
        signer.keyid
        in subprocess.run(
            ["ssh-keygen", "-l", "-f", f"{path}.pub"], capture_output=True, text=True, check=True
        ).stdout
    )
    envelope = dsse.sign(dsse.INTOTO_PAYLOAD_TYPE, PAYLOAD, signer)
    again = dsse.Envelope.from_bytes(envelope.to_bytes())
    assert again == envelope
    assert dsse.verify(again, [public_line]) == public_line
    assert _sslib_accepts(again, public_line, scheme=SCHEMES[kind])
    # Another payload under the same signature, or another payload type, is refused by both.
    forged = dsse.Envelope(envelope.payload_type, PAYLOAD + b" ", envelope.signatures)
    assert dsse.verify(forged, [public_line]) is None
    assert not _sslib_accepts(forged, public_line, scheme=SCHEMES[kind])
    retyped = dsse.Envelope("application/json", envelope.payload, envelope.signatures)
    assert dsse.verify(retyped, [public_line]) is None


@pytest.mark.parametrize("kind", ["rsa", "ecdsa"])
def test_a_pem_key_file_signs_as_ssh_and_git_do(tmp_path: Path, kind: str) -> None:
    """`ssh-keygen -m PEM` writes the older PEM form, which ssh and git sign with: a runner
    set up with one signs its attestations too (not 'not an ssh private key')."""
    path = tmp_path / f"pem_{kind}"
    subprocess.run(
        ["ssh-keygen", "-q", "-t", kind, "-m", "PEM", "-N", "", "-f", str(path)], check=True
    )
    public_line = Path(f"{path}.pub").read_text().strip()
    envelope = dsse.sign(dsse.INTOTO_PAYLOAD_TYPE, PAYLOAD, dsse.load_signer(str(path)))
    assert dsse.verify(envelope, [public_line]) == public_line
    assert _sslib_accepts(envelope, public_line, scheme=SCHEMES[kind])


def test_another_key_or_another_keyid_does_not_verify(tmp_path: Path) -> None:
    runner = make_ssh_key(tmp_path, "runner")
    mallory = make_ssh_key(tmp_path, "mallory")
    envelope = dsse.sign(dsse.INTOTO_PAYLOAD_TYPE, PAYLOAD, dsse.load_signer(runner.private))
    assert dsse.verify(envelope, [mallory.public_line]) is None
    assert dsse.verify(envelope, [mallory.public_line, runner.public_line]) == runner.public_line
    relabelled = dsse.Envelope(
        envelope.payload_type,
        envelope.payload,
        (dsse.Signature(dsse.fingerprint(mallory.public_line), envelope.signatures[0].sig),),
    )
    assert dsse.verify(relabelled, [runner.public_line]) is None


@pytest.mark.parametrize(
    "data",
    [b"", b"[]", b'{"payload":"!!","payloadType":"x","signatures":[]}', b'{"payloadType":1}'],
)
def test_what_is_no_envelope_is_a_dsse_error(data: bytes) -> None:
    with pytest.raises(dsse.DsseError):
        dsse.Envelope.from_bytes(data)


@pytest.fixture()
def agent() -> Iterator[str]:
    directory = tempfile.mkdtemp(prefix="mg-agent-")  # a unix socket's path must stay short
    sock = os.path.join(directory, "s")
    proc = subprocess.Popen(
        ["ssh-agent", "-D", "-a", sock], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        for _ in range(200):
            if os.path.exists(sock):
                break
            time.sleep(0.01)
        yield sock
    finally:
        proc.terminate()
        proc.wait()


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa", "rsa"])
def test_a_passphrase_key_signs_through_the_ssh_agent(
    tmp_path: Path, agent: str, kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = _key(tmp_path, kind, passphrase="secret words")
    public_line = Path(f"{path}.pub").read_text().strip()
    monkeypatch.delenv("SSH_AUTH_SOCK", raising=False)
    with pytest.raises(UsageError, match="no ssh agent"):
        dsse.load_signer(path)
    monkeypatch.setenv("SSH_AUTH_SOCK", agent)
    signer = dsse.load_signer(path)
    with pytest.raises(UsageError, match="refused to sign"):  # the agent does not hold it yet
        dsse.sign(dsse.INTOTO_PAYLOAD_TYPE, PAYLOAD, signer)
    unlocked = tmp_path / "plain"
    unlocked.write_bytes(path.read_bytes())
    unlocked.chmod(0o600)
    subprocess.run(
        ["ssh-keygen", "-q", "-p", "-P", "secret words", "-N", "", "-f", str(unlocked)],
        check=True,
        stdout=subprocess.DEVNULL,
    )
    subprocess.run(
        ["ssh-add", "-q", str(unlocked)], check=True, env={**os.environ, "SSH_AUTH_SOCK": agent}
    )
    envelope = dsse.sign(dsse.INTOTO_PAYLOAD_TYPE, PAYLOAD, signer)
    assert dsse.verify(envelope, [public_line]) == public_line
    assert _sslib_accepts(envelope, public_line, scheme=SCHEMES[kind])
    # Its .pub file alone (git's user.signingkey may name it) signs through the agent too.
    by_public = dsse.load_signer(f"{path}.pub")
    assert dsse.verify(dsse.sign("t", b"x", by_public), [public_line]) == public_line


def _fake_sk_private_key() -> str:
    """An OpenSSH private key file of a FIDO key's shape (no token needed to be refused)."""

    def string(data: bytes) -> bytes:
        return len(data).to_bytes(4, "big") + data

    public = string(b"sk-ssh-ed25519@openssh.com") + string(b"\0" * 32) + string(b"ssh:")
    body = b"openssh-key-v1\0" + string(b"none") + string(b"none") + string(b"")
    body += (1).to_bytes(4, "big") + string(public) + string(b"\0" * 64)
    text = base64.b64encode(body).decode()
    return "-----BEGIN OPENSSH PRIVATE KEY-----\n" + text + "\n-----END OPENSSH PRIVATE KEY-----\n"


def test_fido_keys_are_refused_with_what_to_use(tmp_path: Path) -> None:
    private = tmp_path / "id_sk"
    private.write_text(_fake_sk_private_key())
    public = tmp_path / "id_sk.pub"
    public.write_text("sk-ssh-ed25519@openssh.com AAAAGnNrLXNzaC1lZDI1NTE5QG9wZW5zc2guY29t r\n")
    for path in (private, public):
        with pytest.raises(UsageError, match="FIDO") as caught:
            dsse.load_signer(path)
        assert caught.value.hint is not None and "Ed25519" in caught.value.hint


def test_key_kinds_that_sign_dsse() -> None:
    assert dsse.can_sign_dsse("ssh-ed25519 AAAA")
    assert dsse.can_sign_dsse("ecdsa-sha2-nistp256 AAAA")
    assert dsse.can_sign_dsse("ssh-rsa AAAA")
    assert not dsse.can_sign_dsse("sk-ssh-ed25519@openssh.com AAAA")
    assert not dsse.can_sign_dsse("-----BEGIN PGP PUBLIC KEY BLOCK-----")
