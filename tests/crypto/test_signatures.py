"""Signature checks with real keys, real signatures and real git commits."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from mergegate.crypto.signatures import (
    PublicKey,
    SignatureCheck,
    parse_public_key,
    split_signed_commit,
    verify_signature,
)
from mergegate.errors import ConfigError, MergegateError
from tests.helpers.keys import (
    GpgKey,
    SshKey,
    git_signing_config_gpg,
    git_signing_config_ssh,
    make_expired_gpg_key,
    make_gpg_key,
    make_ssh_key,
    revoke_gpg_key,
    stop_gpg_agent,
)

SOURCE = "policy/policy.yaml:12"
NOW = datetime.now(UTC)


# --- fixtures and builders ---------------------------------------------------


@pytest.fixture(scope="module")
def ssh_keys(tmp_path_factory: pytest.TempPathFactory) -> dict[str, SshKey]:
    directory = tmp_path_factory.mktemp("ssh")
    return {
        "ed25519": make_ssh_key(directory, "alice"),
        "ecdsa": make_ssh_key(directory, "carol", kind="ecdsa"),
        "rsa": make_ssh_key(directory, "dave", kind="rsa"),
        "mallory": make_ssh_key(directory, "mallory"),
    }


def _short_gnupghome() -> Path:
    # gpg-agent's socket path must stay short; pytest's tmp_path can be deep.
    return Path(tempfile.mkdtemp(prefix="mg-gpg-"))


@pytest.fixture(scope="module")
def gpg_home() -> Iterator[Path]:
    home = _short_gnupghome()
    yield home
    stop_gpg_agent(home)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def own_gpg_home() -> Iterator[Path]:
    home = _short_gnupghome()
    yield home
    stop_gpg_agent(home)
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture(scope="module")
def gpg_keys(gpg_home: Path) -> dict[str, GpgKey]:
    return {
        "alice": make_gpg_key(gpg_home, "Alice Example", "alice@example.com"),
        "bob": make_gpg_key(gpg_home, "Bob Example", "bob@example.com", signing_subkey=True),
        "mallory": make_gpg_key(gpg_home, "Mallory", "mallory@example.com"),
    }


def _cmd(*argv: str, stdin: bytes | None = None, env: Mapping[str, str] | None = None) -> bytes:
    """Run a real tool (argv list, no shell) and return its stdout."""
    done = subprocess.run(argv, input=stdin, env=env, check=True, capture_output=True)
    return done.stdout


def _gpg(gnupghome: Path, *args: str, stdin: bytes | None = None) -> bytes:
    return _cmd("gpg", "--homedir", str(gnupghome), "--batch", "--armor", *args, stdin=stdin)


def _git(repo: Path, *args: str, env: Mapping[str, str] | None = None) -> bytes:
    identity = ["-c", "user.name=Alice", "-c", "user.email=alice@example.com"]
    return _cmd("git", "-C", str(repo), *identity, *args, env=env)


def _signed_commit(
    repo: Path,
    signing: list[str],
    *,
    env: Mapping[str, str] | None = None,
    message: str = "approve job 7",
) -> bytes:
    """Make a signed (empty) commit in `repo` and return its raw object."""
    if not (repo / ".git").exists():
        _cmd("git", "init", "-q", str(repo))
    _git(repo, *signing, "commit", "-q", "--allow-empty", "-S", "-m", message, env=env)
    return _git(repo, "cat-file", "commit", "HEAD")


def _ssh_commit(repo: Path, key: SshKey, message: str = "approve job 7") -> bytes:
    return _signed_commit(repo, git_signing_config_ssh(key), message=message)


def _gpg_commit(repo: Path, gnupghome: Path, key: GpgKey) -> bytes:
    args, env = git_signing_config_gpg(gnupghome, key)
    return _signed_commit(repo, args, env=env)


def _ssh_policy(key: SshKey, owner: str = "alice", **lifetime: datetime) -> PublicKey:
    return parse_public_key(key.public_line, owner=owner, source=SOURCE, **lifetime)


def _gpg_policy(key: GpgKey | str, owner: str = "alice", **lifetime: datetime) -> PublicKey:
    text = key if isinstance(key, str) else key.public_armored
    return parse_public_key(text, owner=owner, source=SOURCE, **lifetime)


def _check(raw_commit: bytes, keys: list[PublicKey], at: datetime = NOW) -> SignatureCheck:
    split = split_signed_commit(raw_commit)
    assert split is not None
    return verify_signature(*split, keys, at=at)


def _ssh_keygen_fingerprint(key: SshKey) -> str:
    return _cmd("ssh-keygen", "-l", "-E", "sha256", "-f", f"{key.private}.pub").decode().split()[1]


# --- ssh ---------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["ed25519", "ecdsa", "rsa"])
def test_good_ssh_signature(tmp_path: Path, ssh_keys: dict[str, SshKey], kind: str) -> None:
    key = ssh_keys[kind]
    policy = _ssh_policy(key, owner="Alice Example")  # spaces in names never reach allowed_signers
    assert policy.kind == "ssh"
    assert policy.fingerprint == _ssh_keygen_fingerprint(key)
    other = _ssh_policy(ssh_keys["mallory"], owner="mallory")

    check = _check(_ssh_commit(tmp_path / "repo", key), [other, policy])

    assert check == SignatureCheck(
        True, policy, policy.fingerprint, f"good signature by Alice Example ({policy.fingerprint})"
    )


def test_ssh_signature_by_key_not_in_policy_names_its_fingerprint(
    tmp_path: Path, ssh_keys: dict[str, SshKey]
) -> None:
    mallory = ssh_keys["mallory"]
    raw = _ssh_commit(tmp_path / "repo", mallory)
    fingerprint = _ssh_keygen_fingerprint(mallory)

    check = _check(raw, [_ssh_policy(ssh_keys["ed25519"])])

    assert not check.ok and check.key is None
    assert check.signer == fingerprint
    assert check.reason == f"signature by {fingerprint} is not a key in the policy"


def test_tampered_ssh_payload_is_a_bad_signature(
    tmp_path: Path, ssh_keys: dict[str, SshKey]
) -> None:
    policy = _ssh_policy(ssh_keys["ed25519"])
    split = split_signed_commit(_ssh_commit(tmp_path / "repo", ssh_keys["ed25519"]))
    assert split is not None
    payload, signature = split

    check = verify_signature(
        payload.replace(b"approve job 7", b"approve job 8"), signature, [policy], at=NOW
    )

    assert check == SignatureCheck(
        False, None, policy.fingerprint, f"bad signature by alice ({policy.fingerprint})"
    )


def test_ssh_signature_for_another_namespace_is_refused(
    tmp_path: Path, ssh_keys: dict[str, SshKey]
) -> None:
    key = ssh_keys["ed25519"]
    payload = tmp_path / "payload"
    payload.write_bytes(b"tree 0000\n\napprove\n")
    _cmd("ssh-keygen", "-q", "-Y", "sign", "-n", "file", "-f", str(key.private), str(payload))
    signature = Path(f"{payload}.sig").read_bytes()

    check = verify_signature(payload.read_bytes(), signature, [_ssh_policy(key)], at=NOW)

    assert not check.ok
    assert (
        check.reason
        == f"signature by {_ssh_keygen_fingerprint(key)} is for namespace 'file', not 'git'"
    )


def test_sha256_repository_signature_header(tmp_path: Path, ssh_keys: dict[str, SshKey]) -> None:
    repo = tmp_path / "repo"
    _cmd("git", "init", "-q", "--object-format=sha256", str(repo))
    raw = _ssh_commit(repo, ssh_keys["ed25519"])
    assert b"\ngpgsig-sha256 " in raw

    assert _check(raw, [_ssh_policy(ssh_keys["ed25519"])]).ok


# --- splitting commits -------------------------------------------------------


def test_unsigned_commit_has_no_signature(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    _cmd("git", "init", "-q", str(repo))
    message = "gpgsig in the message\n\ngpgsig -----BEGIN SSH SIGNATURE-----"
    _git(repo, "commit", "-q", "--allow-empty", "-m", message)

    assert split_signed_commit(_git(repo, "cat-file", "commit", "HEAD")) is None
    assert verify_signature(b"payload", b"", [], at=NOW) == SignatureCheck(
        False, None, "", "unsigned"
    )


def test_split_removes_only_the_signature_header_like_git(
    tmp_path: Path, ssh_keys: dict[str, SshKey]
) -> None:
    message = "approve\n\ngpgsig fake header in the body\n continued"
    raw = _ssh_commit(tmp_path / "repo", ssh_keys["ed25519"], message=message)
    split = split_signed_commit(raw)
    assert split is not None
    payload, signature = split

    assert signature.startswith(b"-----BEGIN SSH SIGNATURE-----\n")
    assert signature.endswith(b"-----END SSH SIGNATURE-----\n")
    assert b"gpgsig -----" not in payload
    assert payload.endswith(message.encode() + b"\n")  # the body is never scanned for headers
    unsigned_tree = raw.split(b"\n", 1)[0]
    assert payload.startswith(unsigned_tree)
    # A header for the other hash algorithm is no part of the payload either (as in git).
    other = raw.replace(
        b"\ncommitter ", b"\ngpgsig-sha256 -----BEGIN SSH SIGNATURE-----\n junk\ncommitter ", 1
    )
    assert split_signed_commit(other) == (payload, signature)


# --- OpenPGP -----------------------------------------------------------------


def test_good_openpgp_signature(
    tmp_path: Path, gpg_home: Path, gpg_keys: dict[str, GpgKey]
) -> None:
    alice = gpg_keys["alice"]
    policy = _gpg_policy(alice)
    assert (
        policy.kind == "openpgp"
        and policy.fingerprint == alice.fingerprint
        and len(policy.subkeys) == 0
    )

    check = _check(
        _gpg_commit(tmp_path / "repo", gpg_home, alice),
        [_gpg_policy(gpg_keys["mallory"], "mallory"), policy],
    )

    assert check == SignatureCheck(
        True, policy, alice.fingerprint, f"good signature by alice ({alice.fingerprint})"
    )


def test_openpgp_signing_subkey_maps_to_its_primary_key(
    tmp_path: Path, gpg_home: Path, gpg_keys: dict[str, GpgKey]
) -> None:
    bob = gpg_keys["bob"]
    policy = _gpg_policy(bob, "bob")
    assert policy.subkeys == (bob.signing_key,) and bob.signing_key != bob.fingerprint

    check = _check(
        _gpg_commit(tmp_path / "repo", gpg_home, bob), [_gpg_policy(gpg_keys["alice"]), policy]
    )

    assert check.ok and check.key == policy
    assert check.signer == bob.signing_key
    assert check.reason == f"good signature by bob ({bob.fingerprint})"


def test_tampered_openpgp_payload_is_a_bad_signature(
    tmp_path: Path, gpg_home: Path, gpg_keys: dict[str, GpgKey]
) -> None:
    alice = gpg_keys["alice"]
    split = split_signed_commit(_gpg_commit(tmp_path / "repo", gpg_home, alice))
    assert split is not None

    check = verify_signature(split[0] + b"x", split[1], [_gpg_policy(alice)], at=NOW)

    assert check == SignatureCheck(
        False, None, alice.fingerprint, f"bad signature by alice ({alice.fingerprint})"
    )


def test_openpgp_signature_by_key_not_in_policy(
    tmp_path: Path, gpg_home: Path, gpg_keys: dict[str, GpgKey]
) -> None:
    mallory = gpg_keys["mallory"]
    raw = _gpg_commit(tmp_path / "repo", gpg_home, mallory)
    expected = f"signature by {mallory.fingerprint} is not a key in the policy"

    with_gpg = _check(raw, [_gpg_policy(gpg_keys["alice"])])
    without_openpgp_keys = _check(raw, [])  # answered without running gpg

    assert with_gpg == SignatureCheck(False, None, mallory.fingerprint, expected)
    assert without_openpgp_keys == SignatureCheck(False, None, mallory.fingerprint, expected)


def test_expired_openpgp_key_does_not_verify(tmp_path: Path, own_gpg_home: Path) -> None:
    olga = make_expired_gpg_key(own_gpg_home, "Olga", "olga@example.com")
    raw = _gpg_commit(tmp_path / "repo", own_gpg_home, olga)

    check = _check(raw, [_gpg_policy(olga, "olga")])

    assert check == SignatureCheck(
        False, None, olga.fingerprint, f"key {olga.fingerprint} of olga expired"
    )


def test_revoked_openpgp_key_does_not_verify(tmp_path: Path, own_gpg_home: Path) -> None:
    rita = make_gpg_key(own_gpg_home, "Rita", "rita@example.com", signing_subkey=True)
    raw = _gpg_commit(tmp_path / "repo", own_gpg_home, rita)
    assert _check(raw, [_gpg_policy(rita, "rita")]).ok  # the same signature, before the revocation

    revoked = _gpg_policy(revoke_gpg_key(own_gpg_home, rita), "rita")
    check = _check(raw, [revoked])

    assert check == SignatureCheck(
        False, None, rita.signing_key, f"key {rita.fingerprint} of rita is revoked"
    )


def test_signed_message_posing_as_detached_signature_is_refused(
    gpg_home: Path, gpg_keys: dict[str, GpgKey]
) -> None:
    # gpg --verify would check the message inside and ignore the payload file.
    alice = gpg_keys["alice"]
    signed = _gpg(gpg_home, "-u", alice.fingerprint, "--sign", stdin=b"something alice once signed")
    posing = signed.replace(b"PGP MESSAGE", b"PGP SIGNATURE")

    check = verify_signature(b"tree 1234\n\nrun the job\n", posing, [_gpg_policy(alice)], at=NOW)

    assert not check.ok and check.reason == "OpenPGP data is not a single detached signature"


def test_two_signatures_in_one_block_are_refused(
    gpg_home: Path, gpg_keys: dict[str, GpgKey]
) -> None:
    alice, mallory = gpg_keys["alice"], gpg_keys["mallory"]
    payload = b"tree 1234\n\nrun the job\n"
    signers = ["-u", alice.fingerprint, "-u", mallory.fingerprint]
    both = _gpg(gpg_home, *signers, "--detach-sign", stdin=payload)

    check = verify_signature(
        payload, both, [_gpg_policy(alice), _gpg_policy(mallory, "mallory")], at=NOW
    )

    assert not check.ok and check.reason == "OpenPGP data is not a single detached signature"


def test_the_users_keyring_is_never_trusted(
    tmp_path: Path, own_gpg_home: Path, monkeypatch: pytest.MonkeyPatch, gpg_keys: dict[str, GpgKey]
) -> None:
    # The "user's" keyring is whatever GNUPGHOME names (a short path: the agent's socket is there).
    monkeypatch.setenv("GNUPGHOME", str(own_gpg_home))
    user_home = Path(os.environ["GNUPGHOME"])
    try:
        user_key = make_gpg_key(user_home, "User", "user@example.com")
        args = ["-c", "gpg.format=openpgp", "-c", f"user.signingkey={user_key.fingerprint}"]
        raw = _signed_commit(tmp_path / "repo", args)  # git finds the key through GNUPGHOME
        split = split_signed_commit(raw)
        assert split is not None

        check = verify_signature(*split, [_gpg_policy(gpg_keys["alice"])], at=NOW)
    finally:
        stop_gpg_agent(user_home)

    assert check == SignatureCheck(
        False,
        None,
        user_key.fingerprint,
        f"signature by {user_key.fingerprint} is not a key in the policy",
    )


# --- key lifetimes from the policy -------------------------------------------


def test_policy_lifetime_window(
    tmp_path: Path, ssh_keys: dict[str, SshKey], gpg_home: Path, gpg_keys: dict[str, GpgKey]
) -> None:
    ssh_raw = _ssh_commit(tmp_path / "ssh", ssh_keys["ed25519"])
    gpg_raw = _gpg_commit(tmp_path / "gpg", gpg_home, gpg_keys["alice"])
    start, end = datetime(2030, 1, 1, tzinfo=UTC), datetime(2030, 2, 1, tzinfo=UTC)
    for raw, policy in [
        (ssh_raw, _ssh_policy(ssh_keys["ed25519"], valid_after=start, valid_before=end)),
        (gpg_raw, _gpg_policy(gpg_keys["alice"], valid_after=start, valid_before=end)),
    ]:
        early = _check(raw, [policy], at=start - timedelta(seconds=1))
        late = _check(raw, [policy], at=end + timedelta(seconds=1))

        assert _check(raw, [policy], at=start).ok and _check(raw, [policy], at=end).ok
        assert early == SignatureCheck(
            False,
            None,
            early.signer,
            f"key {policy.fingerprint} of alice is not valid before 2030-01-01T00:00:00+00:00",
        )
        assert late == SignatureCheck(
            False,
            None,
            late.signer,
            f"key {policy.fingerprint} of alice is not valid after 2030-02-01T00:00:00+00:00",
        )
    # Naive times are taken as UTC.
    naive = _ssh_policy(ssh_keys["ed25519"], valid_after=datetime(2030, 1, 1))
    assert not _check(ssh_raw, [naive], at=start - timedelta(seconds=1)).ok
    assert _check(ssh_raw, [naive], at=start).ok


# --- odd signatures ----------------------------------------------------------


@pytest.mark.parametrize(
    ("signature", "reason"),
    [
        (
            b"-----BEGIN SIGNED MESSAGE-----\nMIIB\n-----END SIGNED MESSAGE-----\n",
            "unknown signature format",
        ),
        (b"\xff\xfe garbage", "unknown signature format"),
        (
            b"-----BEGIN SSH SIGNATURE-----\nnot base64!\n-----END SSH SIGNATURE-----\n",
            "malformed ssh signature",
        ),
        (
            b"-----BEGIN SSH SIGNATURE-----\nU1NIU0lH\n-----END SSH SIGNATURE-----\n",
            "malformed ssh signature",
        ),
        (
            b"-----BEGIN PGP SIGNATURE-----\n\nAAAA\n-----END PGP SIGNATURE-----\n",
            "malformed OpenPGP signature",
        ),
    ],
)
def test_hostile_signatures_are_refused_not_raised(
    signature: bytes, reason: str, ssh_keys: dict[str, SshKey]
) -> None:
    check = verify_signature(b"payload", signature, [_ssh_policy(ssh_keys["ed25519"])], at=NOW)

    assert not check.ok and check.key is None and check.reason == reason


def test_temporary_files_are_removed(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ssh_keys: dict[str, SshKey],
    gpg_home: Path,
    gpg_keys: dict[str, GpgKey],
) -> None:
    ssh_raw = _ssh_commit(tmp_path / "ssh", ssh_keys["ed25519"])
    gpg_raw = _gpg_commit(tmp_path / "gpg", gpg_home, gpg_keys["alice"])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))

    assert _check(ssh_raw, [_ssh_policy(ssh_keys["ed25519"])]).ok
    assert _check(gpg_raw, [_gpg_policy(gpg_keys["alice"])]).ok
    _gpg_policy(gpg_keys["bob"])

    assert list(scratch.iterdir()) == []


def test_missing_tools_raise(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    ssh_keys: dict[str, SshKey],
    gpg_keys: dict[str, GpgKey],
) -> None:
    ssh_split = split_signed_commit(_ssh_commit(tmp_path / "repo", ssh_keys["ed25519"]))
    assert ssh_split is not None
    ssh_policy = _ssh_policy(ssh_keys["ed25519"])
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))

    # ssh signatures are checked in-process: no tool needed.
    assert verify_signature(*ssh_split, [ssh_policy], at=NOW).ok
    with pytest.raises(MergegateError, match="gpg is not installed"):
        parse_public_key(gpg_keys["alice"].public_armored, owner="alice", source=SOURCE)


# --- parsing policy keys -----------------------------------------------------


@pytest.mark.parametrize("kind", ["ecdsa", "ed25519", "rsa"])
def test_parse_ssh_key_types(tmp_path: Path, kind: str) -> None:
    for bits in ["256", "384", "521"] if kind == "ecdsa" else [""]:
        private = tmp_path / f"{kind}{bits}"
        size = ["-b", bits] if bits else []
        _cmd("ssh-keygen", "-q", "-t", kind, *size, "-N", "", "-C", "a comment", "-f", str(private))
        line = Path(f"{private}.pub").read_text()
        key = SshKey("k", "k@example.com", private, line.strip())

        parsed = parse_public_key(line + "\n", owner="alice", source=SOURCE)

        assert parsed.kind == "ssh" and parsed.text == line.strip() and parsed.owner == "alice"
        assert parsed.fingerprint == _ssh_keygen_fingerprint(key)


def test_parse_openpgp_key_records_subkeys(gpg_keys: dict[str, GpgKey]) -> None:
    bob = gpg_keys["bob"]

    parsed = parse_public_key(
        "\n" + bob.public_armored, owner="bob", source=SOURCE, valid_before=NOW
    )

    assert (parsed.kind, parsed.fingerprint, parsed.subkeys, parsed.valid_before) == (
        "openpgp",
        bob.fingerprint,
        (bob.signing_key,),
        NOW,
    )


def _ed25519_blob_text(ssh_keys: dict[str, SshKey]) -> str:
    return ssh_keys["ed25519"].public_line.split()[1]


@pytest.mark.parametrize(
    ("make_text", "message"),
    [
        (lambda k, g: "ssh-dss AAAAB3NzaC1kc3MAAACBAP", "ssh key type 'ssh-dss' is not supported"),
        (lambda k, g: "ssh-ed25519 AAAA$$notbase64 alice", "is not valid base64"),
        (
            lambda k, g: f"ssh-rsa {_ed25519_blob_text(k)} alice",
            "the line says 'ssh-rsa' but the key data is of type 'ssh-ed25519'",
        ),
        (
            lambda k, g: "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAAQA=",
            "the ssh-ed25519 key data is malformed",
        ),
        (lambda k, g: "ssh-ed25519", "has no key data"),
        (
            lambda k, g: f"{k['ed25519'].public_line}\n{k['mallory'].public_line}",
            "must be a single line",
        ),
        (lambda k, g: "hello world, this is not a key at all", "expected an ssh public key line"),
        (lambda k, g: "", "found nothing"),
        (
            lambda k, g: g["alice"].public_armored.replace("PUBLIC KEY BLOCK", "PRIVATE KEY BLOCK"),
            "is a secret key block",
        ),
        (
            lambda k, g: (
                "-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nAAAA\n-----END PGP PUBLIC KEY BLOCK-----"
            ),
            "found no OpenPGP public key",
        ),
        (
            lambda k, g: g["alice"].public_armored.strip() + "\n" + g["bob"].public_armored.strip(),
            "found 2 primary keys",
        ),
        (
            lambda k, g: "-----BEGIN PGP SIGNATURE-----\n\nAAAA\n-----END PGP SIGNATURE-----",
            "expected an ssh public key line",
        ),
    ],
    ids=[
        "dss",
        "base64",
        "type-mismatch",
        "short-ed25519",
        "no-data",
        "two-lines",
        "garbage",
        "empty",
        "secret-label",
        "empty-block",
        "two-keys",
        "signature-block",
    ],
)
def test_bad_policy_keys_give_config_errors(
    make_text: Callable[[dict[str, SshKey], dict[str, GpgKey]], str],
    message: str,
    ssh_keys: dict[str, SshKey],
    gpg_keys: dict[str, GpgKey],
) -> None:
    text = make_text(ssh_keys, gpg_keys)

    with pytest.raises(ConfigError) as raised:
        parse_public_key(text, owner="alice", source=SOURCE)

    assert message in raised.value.message
    assert (raised.value.file, raised.value.line) == ("policy/policy.yaml", 12)
    assert "key of alice" in raised.value.message
    assert len(raised.value.message) < 300  # never the whole key


def test_real_secret_key_block_is_refused(gpg_home: Path, gpg_keys: dict[str, GpgKey]) -> None:
    secret = _gpg(gpg_home, "--export-secret-keys", gpg_keys["alice"].fingerprint).decode()

    with pytest.raises(ConfigError, match="secret key") as raised:
        parse_public_key(secret, owner="alice", source="policy/keys/alice.asc")
    assert (raised.value.file, raised.value.line) == ("policy/keys/alice.asc", None)
    # Relabelled as public, gpg still lists it as a secret key.
    relabelled = secret.replace("PRIVATE KEY BLOCK", "PUBLIC KEY BLOCK")
    with pytest.raises(ConfigError, match="holds a secret key"):
        parse_public_key(relabelled, owner="alice", source=SOURCE)


def test_the_public_half_of_a_key_file_is_what_ssh_keygen_says_or_nothing(tmp_path: Path) -> None:
    """ssh_key_file_blob (the runner's check of --signing-key before a pass): for OpenSSH private
    keys of every kind, behind a passphrase too, and public key files, the blob of the .pub
    ssh-keygen wrote; for what does not show it (PEM, garbage, a torn or lying file), None, never an
    exception."""
    import base64

    from mergegate.crypto.signatures import ssh_key_file_blob

    made = []
    for name, args in {
        "ed25519": ["-t", "ed25519"],
        "ecdsa": ["-t", "ecdsa"],
        "rsa": ["-t", "rsa", "-b", "2048"],
        "locked": ["-t", "ed25519", "-N", "secret"],
        "pem": ["-t", "rsa", "-b", "2048", "-m", "PEM"],
    }.items():
        subprocess.run(
            [
                "ssh-keygen",
                "-q",
                *args,
                *([] if "-N" in args else ["-N", ""]),
                "-f",
                str(tmp_path / name),
            ],
            check=True,
        )
        made.append(name)
    for name in made:
        public = base64.b64decode((tmp_path / f"{name}.pub").read_text().split()[1])
        assert ssh_key_file_blob(str(tmp_path / f"{name}.pub")) == public
        assert ssh_key_file_blob(str(tmp_path / name)) == (None if name == "pem" else public), name
    text = (tmp_path / "ed25519").read_text()
    body = "".join(text.splitlines()[1:-1])
    data = base64.b64decode(body)

    def armoured(raw: bytes) -> str:
        return (
            f"-----BEGIN OPENSSH PRIVATE KEY-----\n{base64.b64encode(raw).decode()}\n-----END "
            "OPENSSH PRIVATE KEY-----\n"
        )

    (tmp_path / "again").write_text(armoured(data))
    assert ssh_key_file_blob(str(tmp_path / "again")) == ssh_key_file_blob(
        str(tmp_path / "ed25519")
    )  # (the armour the cases use)
    for n, bad in enumerate(
        [
            text[: len(text) // 2],
            text.replace(body[:8], "!!!!!!!!"),
            "not a key",
            "",
            armoured(data[:60]),
            armoured(data[:15] + b"\xff" * 12 + data[27:]),
            armoured(b"x" + data[1:]),
        ]
    ):
        (tmp_path / f"bad{n}").write_text(bad)
        assert ssh_key_file_blob(str(tmp_path / f"bad{n}")) is None, n
    assert (
        ssh_key_file_blob(str(tmp_path / "missing")) is None
        and ssh_key_file_blob(str(tmp_path)) is None
    )
