"""The values the git wing hands out: object ids, paths as text, commits, changes, signing keys.

Plain data and pure functions, no git process: every other module of the wing builds on them.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

from mergegate.errors import UsageError

ZERO = "0" * 40
_ASK_GIT = object()  # file_blob, _ref_from_files: an answer only git gives exactly
_HEX = re.compile(rb"[0-9a-f]{40}|[0-9a-f]{64}")
_FULL_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def path_text(raw: bytes) -> str:
    """A path as text: UTF-8, or NUL + hex for a name that is not UTF-8.

    No git path contains NUL, so the two forms never collide, and two different raw names never
    share a text (as U+FFFD replacement would).
    """
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return "\0" + raw.hex()


def path_bytes(path: str) -> bytes:
    return bytes.fromhex(path[1:]) if path.startswith("\0") else path.encode("utf-8")


def path_arg(path: str) -> str:
    """A path as git's command line takes it (raw bytes survive as surrogates)."""
    return os.fsdecode(bytes.fromhex(path[1:])) if path.startswith("\0") else path


def literal(path: str) -> str:
    return ":(literal)" + path_arg(path)


@dataclass(frozen=True)
class Commit:
    sha: str
    parents: tuple[str, ...]
    tree: str
    author_name: str
    author_email: str
    committer_name: str
    committer_email: str
    message: str
    raw: bytes  # the whole commit object, for signature checks
    malformed: str = ""  # why git could read this commit's header differently ("" when well-formed)

    @property
    def is_merge(self) -> bool:
        return len(self.parents) >= 2

    def trailers(self, key: str) -> tuple[str, ...]:
        """Values of `Key: value` lines in the message's last paragraph."""
        last = self.message.replace("\r\n", "\n").strip().split("\n\n")[-1]
        prefix = key.lower() + ":"
        return tuple(
            line.split(":", 1)[1].strip()
            for line in last.splitlines()
            if line.lower().startswith(prefix)
        )


@dataclass(frozen=True)
class Change:
    status: str  # A, M, D or T
    path: str
    old_blob: str
    new_blob: str
    old_mode: str = (
        ""  # "100644", "100755", "120000" (symlink), "160000" (gitlink); "000000" when absent
    )
    new_mode: str = ""


# An OpenPGP key as gpg takes it here: a key id or fingerprint (8, 16 or 40 hex digits), or a user
# id naming an email address.
_OPENPGP_KEY = re.compile(r"(0x)?([0-9A-Fa-f]{8}|[0-9A-Fa-f]{16}|[0-9A-Fa-f]{40})!?|.*@.*")


def check_signing_key(value: str) -> None:
    """Refuse, before any work, a --signing-key that is neither an existing key file nor an
    OpenPGP key id: a mistyped path used to become a gpg key id silently (exit 0 while idle,
    then "gpg failed to sign" at the first job) (issue 22, item 9)."""
    if os.path.isfile(value):
        return
    if _OPENPGP_KEY.fullmatch(value) and os.sep not in value:
        return
    raise UsageError(
        f"--signing-key {value!r}: no such key file, and not an OpenPGP key id",
        hint="pass the path of the runner's ssh private key (a literal ~ is not expanded: use "
        "$HOME), or an OpenPGP key id or fingerprint (8, 16 or 40 hex digits) or email",
    )


@dataclass(frozen=True)
class Signing:
    """How the runner signs its commits: an ssh private key path or an OpenPGP key id."""

    key: str

    def args(self) -> list[str]:
        if os.path.exists(self.key):
            # Absolute: git reads a user.signingkey that starts with `ssh-` or `key::` as a literal
            # key, not a file, so a key file named `ssh-runner` passed the runner's check
            # (`_can_sign`) and then did not sign.
            return ["-c", "gpg.format=ssh", "-c", f"user.signingkey={os.path.abspath(self.key)}"]
        return ["-c", "gpg.format=openpgp", "-c", f"user.signingkey={self.key}"]
