"""Real keys for tests: ssh-keygen ed25519 (and OpenPGP via gpg)."""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SshKey:
    name: str
    email: str
    private: Path
    public_line: str  # "ssh-ed25519 AAAA... comment"


def make_ssh_key(directory: Path, name: str, *, email: str | None = None, kind: str = "ed25519") -> SshKey:
    directory.mkdir(parents=True, exist_ok=True)
    private = directory / f"{name}_{kind}"
    args = ["ssh-keygen", "-q", "-t", kind, "-N", "", "-C", name, "-f", str(private)]
    if kind == "rsa":
        args[4:4] = ["-b", "2048"]
    subprocess.run(args, check=True, stdin=subprocess.DEVNULL)
    public_line = private.with_name(private.name + ".pub").read_text().strip()
    return SshKey(name=name, email=email or f"{name}@example.com", private=private, public_line=public_line)
