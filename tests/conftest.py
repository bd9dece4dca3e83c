from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.fake_github import FakeGitHub
from tests.helpers.github_world import GithubGate
from tests.helpers.repos import World


def pytest_configure(config: pytest.Config) -> None:
    """Byte-compile mergegate and the helpers once, before any worker or runner starts.

    An editable install has no bytecode, and where PYTHONDONTWRITEBYTECODE is set (as in this
    session's shells) no process writes any: every `python -m mergegate` a test starts, and
    every worker, compiled the package again (0.47 s of CPU for the runner's imports, 0.29 s
    from bytecode). compileall writes it whatever that variable says; Python reads it either way.
    """
    if hasattr(config, "workerinput"):  # an xdist worker: the controller has done it
        return
    import compileall

    import mergegate

    for package in (Path(mergegate.__file__).parent, Path(__file__).parent / "helpers"):
        compileall.compile_dir(str(package), quiet=1)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """`-n auto` (README's command): three workers for every two cores, not one a core.

    Many tests here wait on purpose (a lease, a backoff, a runner polling, a job that sleeps):
    with one worker a core, a core idles while its worker waits. A third worker uses that
    time; the tests hold under far heavier load than it adds (they pass on this 2-core machine
    with 4 agents' suites running at once, load 10 to 15). PYTEST_XDIST_AUTO_NUM_WORKERS
    still decides when set.
    """
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None
    cores = len(os.sched_getaffinity(0))
    return cores + (cores + 1) // 2


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never read the machine's git config, keyring or identity."""
    home = tmp_path / "home"
    home.mkdir()
    gitconfig = home / ".gitconfig"
    # No automatic gc or maintenance: each is one more git process after every fetch, push and commit
    # (about a tenth of a test's processes), and packing is not what any test here checks.
    gitconfig.write_text("[init]\n\tdefaultBranch = main\n[advice]\n\tdetachedHead = false\n"
                         "[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n[receive]\n\tautogc = false\n")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GNUPGHOME", str(home / ".gnupg"))
    for var in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "GIT_COMMITTER_EMAIL",
                "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "MERGEGATE_TRUST_ROOT", "SSH_AUTH_SOCK"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    """A loopback GitHub API (127.0.0.1, an ephemeral port); tests feed it pull requests and faults."""
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def gate(world: World, fake: FakeGitHub) -> GithubGate:
    return GithubGate(world, fake)
