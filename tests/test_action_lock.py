"""The action installs a hash-pinned lock, isolated, outside the checkout (issue 22, item 10).

action.yml used to install about 20 unpinned packages into the job that holds the write token
and the runner key, with the checkout as the working directory (a `pip/` or `venv/` folder in
the tree would run first)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements" / "action.txt"


def _install_step() -> dict[str, object]:
    steps = yaml.safe_load((ROOT / "action.yml").read_text())["runs"]["steps"]
    return next(s for s in steps if s["name"].startswith("Install mergegate"))


def _direct_dependencies() -> set[str]:
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    return {re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].lower() for d in deps}


def _locked() -> dict[str, tuple[str, list[str], str]]:
    """name -> (version, hashes, the lock's `via` lines)."""
    entries: dict[str, tuple[str, list[str], str]] = {}
    for block in re.split(r"\n(?=[A-Za-z0-9])", LOCK.read_text()):
        head = re.match(r"([A-Za-z0-9._-]+)==([^ ;\\\n]+)", block)
        if head:
            name = head.group(1).lower().replace("_", "-")
            entries[name] = (
                head.group(2),
                re.findall(r"--hash=sha256:([0-9a-f]{64})", block),
                block,
            )
    return entries


def test_the_lock_pins_every_runtime_dependency_with_hashes_and_is_current() -> None:
    locked = _locked()
    for name in _direct_dependencies():
        assert name.replace("_", "-") in locked, (
            f"{name} is a dependency but not in {LOCK.name}: run python scripts/lock_action.py"
        )
    for name, (_version, hashes, _block) in locked.items():
        assert hashes, f"{name} has no hash"
    # Nothing is locked as a direct dependency that pyproject.toml no longer has.
    direct = {n for n, (_, _, block) in locked.items() if "mergegate (pyproject.toml)" in block}
    assert direct == {d.replace("_", "-") for d in _direct_dependencies()}


def test_the_action_installs_by_hash_with_isolated_interpreters_outside_the_checkout() -> None:
    step = _install_step()
    script = str(step["run"])
    lines = [
        line.strip()
        for line in script.splitlines()
        if line.strip() and not line.strip().startswith("#")
    ]
    first_python = next(i for i, line in enumerate(lines) if "python" in line)
    assert 'cd "$RUNNER_TEMP"' in lines[:first_python]
    for line in lines:
        if re.search(r"python3? ", line) and "printf" not in line:
            assert " -I " in line, line
    assert "--require-hashes" in script and "--no-deps" in script
    assert "$GITHUB_ACTION_PATH/$MG_LOCK" in script
    assert step["env"]["MG_LOCK"] == "requirements/action.txt"  # type: ignore[index]
    assert "pip install" not in script.replace("-m pip install", "")
    assert '"$GITHUB_ACTION_PATH"' not in script  # nothing resolved from the checkout by pip
