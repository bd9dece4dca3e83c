"""Red team, session 8 (redteam8a): the in-process audit-chain walk, the publisher's backoff, and the
removal of a dead runner's workspaces. Real git, real runners, real processes."""

from __future__ import annotations

import json
import os
from pathlib import Path

from tests.helpers.repos import World
from tests.test_reliability import _gate, _merge_jobs


def _spool(world: World, name: str = "ci") -> Path:
    folder = world.clone("runner") / ".git" / "mergegate" / "spool"
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"{name}.jsonl"


def test_a_spool_entry_naming_a_folder_with_a_nul_byte_does_not_stop_every_pass(world: World) -> None:
    """A spool line that parses (a dead runner's run, `folders` a path holding U+0000) must not fail
    every later pass: os.lstat raises ValueError there, not OSError, and `_spool_load` runs first thing
    in each pass. The spool sets unreadable lines aside; a readable one must not be a standing stop."""
    _gate(world)
    _merge_jobs(world, "p", {"hi": ["echo", "hi"]})
    first = world.run_once("--runner-name", "ci")
    assert first.code == 0, first.err
    spool = _spool(world)
    dead = {"pid": 1, "start": 1, "boot": "not-this-boot"}  # never alive: another boot
    entry = {"record": {"event": "finished", "run_id": "rt8a-run", "status": "lost"}, "job": None, "runner": dead,
             "done": False, "folders": [["/tmp/rt8a\u0000x", 12345]]}
    spool.write_text(json.dumps(entry) + "\n")
    later = world.run_once("--runner-name", "ci")
    assert later.code == 0, later.err
    again = world.run_once("--runner-name", "ci")
    assert again.code == 0, again.err


def test_a_crafted_spool_entry_cannot_make_a_pass_remove_a_folder_the_runner_never_made(world: World) -> None:
    """Whoever can write the spool (the runner's user, a job without a sandbox) names any folder of the
    runner's user with its inode (`stat` gives it): the next pass removed it, whatever it was. The runner
    only ever names its own `mergegate-job-*` and `mergegate-index-*` folders: nothing else is removed."""
    _gate(world)
    _merge_jobs(world, "p", {"hi": ["echo", "hi"]})
    assert world.run_once("--runner-name", "ci").code == 0
    precious = world.tmp / "home-of-the-runner"
    (precious / ".ssh").mkdir(parents=True)
    (precious / ".ssh" / "id_ed25519").write_text("key")
    dead = {"pid": 1, "start": 1, "boot": "not-this-boot"}
    entry = {"record": {"event": "finished", "run_id": "rt8a-run", "status": "lost"}, "job": None, "runner": dead,
             "done": False, "folders": [[str(precious), os.lstat(precious).st_ino]]}
    _spool(world).write_text(json.dumps(entry) + "\n")
    assert world.run_once("--runner-name", "ci").code == 0
    assert (precious / ".ssh" / "id_ed25519").read_text() == "key"
