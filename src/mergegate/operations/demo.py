"""`mergegate demo`: a throwaway gate that shows the whole flow with real git and real keys.

Every command runs as its own process with HOME and GIT_CONFIG_GLOBAL pointed into the demo
directory, so the person's git config, keys and agent are never read or changed. Only `git` and
`ssh-keygen` are needed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from mergegate.errors import MergegateError, UsageError

DEMO_POLICY = """\
# The demo gate's policy: bob approves; echo may run, nothing else.
version: 1
approvers:
  - name: bob
    email: bob@example.com
    key: {bob_key}
proposers:
  - name: alice
    email: alice@example.com
    key: {alice_key}
approvals_required: 1
policy_approvals_required: 1
commands:
  - program: echo
    args_prefix: []
limits:
  max_timeout_seconds: 60
  max_output_bytes: 65536
"""

# What a step shows: its title, then each command and what it printed.
Say = Callable[[str], None]
Show = Callable[[str, str, str], None]  # (who, command line, output)


class DemoFailed(MergegateError):
    exit_code = 1


@dataclass(frozen=True)
class Demo:
    root: Path
    say: Say
    show: Show

    @property
    def env(self) -> dict[str, str]:
        home = self.root / "home"
        keep = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("GIT_", "MERGEGATE_")) and k not in ("SSH_AUTH_SOCK", "GNUPGHOME")
        }
        return {
            **keep,
            "HOME": str(home),
            "GIT_CONFIG_GLOBAL": str(home / ".gitconfig"),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GNUPGHOME": str(home / ".gnupg"),
            "GIT_TERMINAL_PROMPT": "0",
        }

    def run(
        self,
        who: str,
        where: Path,
        *argv: str,
        shown: str | None = None,
        ok: tuple[int, ...] = (0,),
    ) -> str:
        line = shown or " ".join(_quote(a) for a in argv)
        program = (
            [sys.executable, "-m", "mergegate", *argv[1:]] if argv[0] == "mergegate" else list(argv)
        )
        proc = subprocess.run(
            program,
            cwd=where,
            env=self.env,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
        )
        said = (proc.stdout + proc.stderr).rstrip()
        self.show(who, line, said)
        if proc.returncode not in ok:
            raise DemoFailed(
                f"demo step failed: `{line}` exited {proc.returncode}",
                hint="the gate is left as it is in " + str(self.root),
            )
        return proc.stdout.strip()


def _quote(arg: str) -> str:
    return (
        arg
        if arg and all(c.isalnum() or c in "-_./:=@~" for c in arg)
        else "'" + arg.replace("'", "'\\''") + "'"
    )


def check_tools() -> None:
    missing = [tool for tool in ("git", "ssh-keygen") if shutil.which(tool) is None]
    if missing:
        raise UsageError(
            f"the demo needs {' and '.join(missing)} on PATH",
            hint="sudo apt-get install git openssh-client",
        )


def prepare(target: Path | None) -> Path:
    if target is None:
        return Path(tempfile.mkdtemp(prefix="mergegate-demo-"))
    if target.exists() and any(target.iterdir()):
        raise UsageError(
            f"{target} is not empty: the demo builds its gate in a new or empty directory",
            hint="pass a new directory, or leave DIR out for a temporary one",
        )
    target.mkdir(parents=True, exist_ok=True)
    return target.resolve()


def run_demo(target: Path | None, *, say: Say, show: Show) -> Path:
    check_tools()
    root = prepare(target)
    demo = Demo(root, say, show)
    home = root / "home"
    home.mkdir()
    (home / ".gitconfig").write_text(
        "[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n"
    )
    keys = root / "keys"
    keys.mkdir()
    remote = root / "remote.git"

    say(
        f"1. A gate in {root}: a bare remote (standing in for GitHub), and ssh keys for alice "
        "(proposes) and bob (approves)"
    )
    for name in ("alice", "bob"):
        demo.run(
            "setup",
            root,
            "ssh-keygen",
            "-q",
            "-t",
            "ed25519",
            "-N",
            "",
            "-C",
            name,
            "-f",
            str(keys / name),
        )
    demo.run("setup", root, "git", "init", "-q", "--bare", str(remote))
    people = {"alice": root / "alice", "bob": root / "bob", "runner": root / "runner"}

    def clone(name: str) -> None:
        demo.run(name, root, "git", "clone", "-q", str(remote), str(people[name]))
        if name != "runner":
            for key, value in (
                ("user.name", name),
                ("user.email", f"{name}@example.com"),
                ("gpg.format", "ssh"),
                ("user.signingkey", str(keys / f"{name}.pub")),
            ):
                demo.run(name, people[name], "git", "config", key, value)

    say(
        "2. bob writes the policy (who approves, what may run) and creates the approved branch "
        "with `mergegate init`"
    )
    demo.run("bob", root, "git", "init", "-q", str(people["bob"]))
    demo.run("bob", people["bob"], "git", "remote", "add", "origin", str(remote))
    for key, value in (
        ("user.name", "bob"),
        ("user.email", "bob@example.com"),
        ("gpg.format", "ssh"),
        ("user.signingkey", str(keys / "bob.pub")),
    ):
        demo.run("bob", people["bob"], "git", "config", key, value)
    policy = people["bob"] / "policy" / "policy.yaml"
    policy.parent.mkdir()
    policy.write_text(
        DEMO_POLICY.format(bob_key=_key(keys / "bob.pub"), alice_key=_key(keys / "alice.pub"))
    )
    show("bob", f"write {policy.relative_to(root)}", "")
    demo.run("bob", people["bob"], "mergegate", "init")
    demo.run("bob", people["bob"], "git", "push", "-q", "origin", "HEAD", "approved")
    trust = demo.run("bob", people["bob"], "git", "rev-parse", "approved")
    clone("alice")
    clone("runner")

    say(
        "3. alice (or her AI agent) proposes a job: validated and judged by the policy before "
        "anything is pushed"
    )
    demo.run(
        "alice",
        people["alice"],
        "mergegate",
        "propose",
        "hello",
        "--description",
        "greet the world",
        "--push",
        "--",
        "echo",
        "hello from mergegate",
    )

    say("4. bob reviews it and approves it with a signed merge into approved")
    demo.run("bob", people["bob"], "mergegate", "check", "origin/propose/hello")
    demo.run("bob", people["bob"], "mergegate", "approve", "origin/propose/hello", "--merge")

    say("5. The runner runs what was approved, once, and pushes hash-chained records")
    pin = ["--trust-root", trust]
    demo.run("runner", people["runner"], "mergegate", "run", "--once", *pin)

    say("6. Anyone with a clone can see and check what happened, offline")
    demo.run("runner", people["runner"], "mergegate", "status", *pin)
    demo.run("runner", people["runner"], "mergegate", "audit", "verify")
    demo.run("runner", people["runner"], "mergegate", "verify", *pin)
    return root


def _key(path: Path) -> str:
    return '"' + path.read_text().strip() + '"'
