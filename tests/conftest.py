from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers.fake_github import FakeGitHub
from tests.helpers.github_world import GithubGate
from tests.helpers.repos import World


def pytest_configure(config: pytest.Config) -> None:
    """Once per run, in the controller, before any worker or runner starts: bytecode for
    mergegate, the helpers and the tests, and the temporary directories in memory.

    An editable install has no bytecode, and where PYTHONDONTWRITEBYTECODE is set (as in this
    session's shells) no process writes any: every `python -m mergegate` a test starts, and
    every worker, compiled the package again (0.47 s of CPU for the runner's imports, 0.29 s
    from bytecode). compileall writes it whatever that variable says; Python reads it either way.
    The same holds for pytest's assertion rewriting of the test modules (see _rewrite_tests).
    """
    if hasattr(config, "workerinput"):  # an xdist worker: the controller has done it
        return
    import compileall

    import mergegate

    for package in (Path(mergegate.__file__).parent, Path(__file__).parent / "helpers"):
        compileall.compile_dir(str(package), quiet=1)
    _rewrite_tests(config)
    _temporary_root_in_memory(config)


def _rewrite_tests(config: pytest.Config) -> None:
    """The test modules with their asserts rewritten, cached where pytest looks for them.

    Every xdist worker collects every module, and pytest rewrites the asserts of each (about 4 s
    of CPU a worker here: an AST walk of 13,000 lines); it caches the result only where bytecode
    may be written, and reads the cache either way. Writing it here, once, as pytest itself would
    (its own function, the same file name), saves the workers that work. A pytest whose internals
    moved, or `--assert=plain`, just leaves the rewriting to the workers, as before.
    """
    if config.getoption("assertmode", "rewrite") != "rewrite":
        return
    try:
        from _pytest.assertion import rewrite

        state = config.stash[rewrite.assertstate_key]
    except (ImportError, AttributeError, KeyError):
        return
    here = Path(__file__).parent
    for module in sorted([here / "conftest.py", *here.rglob("test_*.py")]):
        cached = rewrite.get_cache_dir(module) / (module.name[:-3] + rewrite.PYC_TAIL)
        if rewrite._read_pyc(module, cached, state.trace) is None and rewrite.try_makedirs(
            cached.parent
        ):
            source_hash, code = rewrite._rewrite_test(module, config)
            rewrite._write_pyc(state, code, source_hash, cached)


# Where the tests' temporary directories go when the run does not say (PYTEST_DEBUG_TEMPROOT,
# --basetemp): a memory file system, if the machine has one with room to spare.
_MEMORY_ROOT, _MEMORY_ROOM = Path("/dev/shm"), 4 << 30


def _temporary_root_in_memory(config: pytest.Config) -> None:
    """pytest's temporary directories (every gate, clone and key of every test) in /dev/shm.

    A test makes about a hundred git processes and each writes files (objects, refs, index, lock
    files, logs): on this machine's disk about a third of the suite's system time went to the file
    system's journal. The same work on tmpfs: tests/facts/test_bypasses.py 15.6 s of CPU instead of
    18.9 s (mean of 3 each, alternating, load 8 to 10). pytest's layout and retention are kept
    (`pytest-of-<user>/pytest-N`, the last 3 runs); only the root moves. Files the runner itself
    makes (job workspaces, export indexes) stay in TMPDIR. Set PYTEST_DEBUG_TEMPROOT (or pass
    --basetemp) to choose the place, e.g. PYTEST_DEBUG_TEMPROOT=/tmp for the disk.
    """
    if os.environ.get("PYTEST_DEBUG_TEMPROOT") or config.getoption("basetemp", None):
        return
    try:
        mounts = Path("/proc/self/mounts").read_text().splitlines()
        room = os.statvfs(_MEMORY_ROOT)
    except OSError:
        return
    in_memory = any(
        line.split()[1:3] == [str(_MEMORY_ROOT), "tmpfs"]
        for line in mounts
        if len(line.split()) > 2
    )
    if (
        in_memory
        and os.access(_MEMORY_ROOT, os.W_OK | os.X_OK)
        and room.f_bavail * room.f_frsize >= _MEMORY_ROOM
    ):
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(_MEMORY_ROOT)


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


@pytest.fixture(scope="session")
def _git_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """git's template for every repository a test inits or clones: one empty hooks/ folder.

    git's default copies 16 files (hook samples, a description, info/exclude of comments) into
    each; tests that add a hook write it into hooks/. Outside HOME: test_demo checks HOME holds
    nothing but the pinned config.
    """
    template = tmp_path_factory.mktemp("git-template")
    (template / "hooks").mkdir()
    return template


@pytest.fixture(autouse=True)
def _isolated_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, _git_template: Path) -> None:
    """Tests never read the machine's git config, keyring or identity."""
    home = tmp_path / "home"
    home.mkdir()
    gitconfig = home / ".gitconfig"
    # No automatic gc or maintenance: each is one more git process after every fetch, push and
    # commit (about a tenth of a test's processes), and packing is not what any test here checks.
    # The template (_git_template): no hook samples copied into every repository.
    # core.alternateRefsCommand: receive-pack checks a push's objects with `rev-list --not --all
    # --alternate-refs`, and in its quarantine the only alternate is the repository itself, whose
    # refs --all names already; git runs a `for-each-ref` there to list them again (one process
    # of the seven a push costs). `true` lists none: the same check, a far cheaper process. No
    # test uses real alternates.
    gitconfig.write_text(
        "[init]\n\tdefaultBranch = main\n\ttemplateDir = "
        f'"{_git_template}"\n[advice]\n\tdetachedHead = false\n'
        "[gc]\n\tauto = 0\n[maintenance]\n\tauto = false\n[receive]\n\tautogc = false\n"
        "[core]\n\talternateRefsCommand = true\n"
    )
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(gitconfig))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GNUPGHOME", str(home / ".gnupg"))
    for var in (
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
        "MERGEGATE_TRUST_ROOT",
        "SSH_AUTH_SOCK",
    ):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World(tmp_path)


@pytest.fixture
def fake() -> Iterator[FakeGitHub]:
    """A loopback GitHub API (127.0.0.1, an ephemeral port); tests feed it pull requests and
    faults."""
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def gate(world: World, fake: FakeGitHub) -> GithubGate:
    return GithubGate(world, fake)
