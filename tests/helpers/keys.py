"""Real keys for tests: ssh-keygen ed25519 (and OpenPGP via gpg).

The OpenPGP helpers always pass an explicit `gnupghome`; gpg starts an agent there, so call
`stop_gpg_agent` when done with it. gpg-agent's socket lives in the homedir and its path must stay
under ~100 characters: prefer a short directory (tempfile.mkdtemp()) to a deep pytest tmp_path.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path


@dataclass(frozen=True)
class SshKey:
    name: str
    email: str
    private: Path
    public_line: str  # "ssh-ed25519 AAAA... comment"


def make_ssh_key(
    directory: Path, name: str, *, email: str | None = None, kind: str = "ed25519"
) -> SshKey:
    directory.mkdir(parents=True, exist_ok=True)
    private = directory / f"{name}_{kind}"
    args = ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", name, "-f", str(private)]
    if kind == "rsa":
        args[4:4] = ["-b", "2048"]
    subprocess.run(args, check=True, stdin=subprocess.DEVNULL)
    public_line = private.with_name(private.name + ".pub").read_text().strip()
    return SshKey(
        name=name, email=email or f"{name}@example.com", private=private, public_line=public_line
    )


_CACHE: dict[tuple[str, str], SshKey] = {}


def shared_ssh_key(directory: Path, name: str, *, email: str | None = None) -> SshKey:
    """An ed25519 key for `name`, made once per test process and copied into `directory`.

    Every World has the same four people; ssh-keygen for each of them in every test is time the
    suite need not spend. The copy keeps each test's key files its own (a test may delete or chmod
    them).
    """
    if (name, "ed25519") not in _CACHE:
        made = tempfile.mkdtemp(prefix="mg-keys-")
        atexit.register(shutil.rmtree, made, ignore_errors=True)
        _CACHE[(name, "ed25519")] = make_ssh_key(Path(made), name)
    cached = _CACHE[(name, "ed25519")]
    directory.mkdir(parents=True, exist_ok=True)
    private = directory / cached.private.name
    shutil.copy2(cached.private, private)
    shutil.copy2(f"{cached.private}.pub", f"{private}.pub")
    return SshKey(
        name=name,
        email=email or f"{name}@example.com",
        private=private,
        public_line=cached.public_line,
    )


@dataclass(frozen=True)
class GpgKey:
    name: str
    email: str
    fingerprint: str  # primary key, 40 upper-case hex digits
    signing_key: str  # fingerprint of the key that signs: the subkey when there is one
    public_armored: str  # `gpg --armor --export` at creation (without any later revocation)


def make_gpg_key(
    gnupghome: Path, name: str, email: str, *, expire: str = "0", signing_subkey: bool = False
) -> GpgKey:
    """Generate an ed25519 OpenPGP key, without passphrase, in `gnupghome`.

    `expire` is gpg's expiry ("0" never, "1d", an ISO date...). With `signing_subkey` the primary
    key may only certify and an ed25519 subkey signs, so signatures name the subkey.
    """
    uid = f"{name} <{email}>"
    usage = "cert" if signing_subkey else "sign,cert"
    made = _gpg(gnupghome, *_UNATTENDED, "--quick-gen-key", uid, "ed25519", usage, expire)
    fingerprint = signing_key = _created(made)
    if signing_subkey:
        added = _gpg(
            gnupghome, *_UNATTENDED, "--quick-add-key", fingerprint, "ed25519", "sign", expire
        )
        signing_key = _created(added)
    armored = _gpg(gnupghome, "--armor", "--export", fingerprint)
    return GpgKey(name, email, fingerprint, signing_key, armored)


def make_expired_gpg_key(gnupghome: Path, name: str, email: str) -> GpgKey:
    """An OpenPGP key made two days ago that expired one day ago.

    `gnupghome` must be a homedir of its own: its gpg.conf pins gpg's clock two days back
    (faked-system-time), so gpg there still signs with the key, also when git runs it; those
    signatures are dated two days ago, and any other gpg sees the key as expired.
    """
    gnupghome.mkdir(mode=0o700, parents=True, exist_ok=True)
    past = datetime.now(UTC) - timedelta(days=2)
    (gnupghome / "gpg.conf").write_text(f"faked-system-time {past:%Y%m%dT%H%M%S}!\n")
    return make_gpg_key(gnupghome, name, email, expire="1d")


def revoke_gpg_key(gnupghome: Path, key: GpgKey) -> str:
    """Revoke `key` with the certificate gpg stored when it made the key.

    Returns the armoured public key, now carrying the revocation. gpg refuses to sign with a revoked
    key: make the signatures first.
    """
    stored = (gnupghome / "openpgp-revocs.d" / f"{key.fingerprint}.rev").read_text()
    # gpg guards the stored certificate with a ":" so that it is not imported by accident.
    begin = "-----BEGIN PGP PUBLIC KEY BLOCK-----"
    _gpg(gnupghome, "--import", stdin=stored.replace(f":{begin}", begin))
    return _gpg(gnupghome, "--armor", "--export", key.fingerprint)


def stop_gpg_agent(gnupghome: Path) -> None:
    """Stop the gpg-agent (and any dirmngr) that gpg started for `gnupghome`."""
    argv = ["gpgconf", "--homedir", str(gnupghome), "--kill", "all"]
    subprocess.run(argv, check=False, capture_output=True)


def git_signing_config_ssh(key: SshKey) -> list[str]:
    """`git -c` arguments that make `git commit -S` sign with `key` (ssh format)."""
    return ["-c", "gpg.format=ssh", "-c", f"user.signingkey={key.private}"]


def git_signing_config_gpg(gnupghome: Path, key: GpgKey) -> tuple[list[str], dict[str, str]]:
    """`git -c` arguments, and the environment, that make `git commit -S` sign with `key`.

    git runs gpg itself, so the homedir travels as GNUPGHOME in the returned environment (a copy of
    os.environ): run git with it. The trailing "!" makes gpg sign with exactly that (sub)key.
    """
    args = ["-c", "gpg.format=openpgp", "-c", f"user.signingkey={key.signing_key}!"]
    return args, {**os.environ, "GNUPGHOME": str(gnupghome)}


_UNATTENDED = ("--passphrase", "", "--pinentry-mode", "loopback", "--status-fd", "1")


def _gpg(gnupghome: Path, *args: str, stdin: str | None = None) -> str:
    gnupghome.mkdir(mode=0o700, parents=True, exist_ok=True)
    argv = ["gpg", "--homedir", str(gnupghome), "--batch", "--no-tty", *args]
    done = subprocess.run(argv, check=True, capture_output=True, text=True, input=stdin)
    return done.stdout


def _created(status: str) -> str:
    """The fingerprint in gpg's "[GNUPG:] KEY_CREATED P|S|B <fingerprint>" status line."""
    for line in status.splitlines():
        if line.startswith("[GNUPG:] KEY_CREATED "):
            return line.split()[-1]
    raise AssertionError(f"gpg reported no KEY_CREATED line:\n{status}")
