"""Two clones whose runners share a name (the default, `runner`) must not close each other's live
runs (issue 23, item 11): each clone has a random id (`.git/mergegate/clone-id`) its claims carry,
a runner closes as orphans only its own clone's claims (and those made before clones had ids),
and a live run another clone holds under this name is reported. Real processes."""

from __future__ import annotations

import json

from tests.helpers.repos import World
from tests.runner.test_reliability import (
    _gate,
    _merge_jobs,
    _spooled_process,
    _start_runner,
    _until,
)


def test_a_second_clone_with_the_same_name_leaves_the_live_run_to_its_clone_and_says_so(
    world: World,
) -> None:
    _gate(world)
    go = world.tmp / "go"
    _merge_jobs(world, "p", {"j": ["sh", "-c", f"while [ ! -e {go} ]; do sleep 0.05; done"]})
    first = _start_runner(world, "--once", "--json")  # clone "runner", named "runner"
    try:
        _until(lambda: _spooled_process(world))  # claimed, and its process runs
        second = world.run_once(where="elsewhere")  # another clone, the same (default) name
    finally:
        go.touch()
        out, err = first.communicate(timeout=60)
    assert [r["status"] for r in world.events("finished")] == ["succeeded"], (
        "the second clone closed the first clone's live run",
        second.out,
        second.err,
    )
    assert first.returncode == 0, out + err
    assert [j["status"] for j in json.loads(out)["jobs"]] == ["succeeded"]
    assert second.code == 0, second.out + second.err
    assert "another runner named 'runner'" in second.err and "two live runners" in second.err, (
        second.err
    )
    [started] = world.events("started")
    clone = (world.clone("runner") / ".git/mergegate/clone-id").read_text().strip()
    assert started["clone"] == clone and len(clone) == 16
    # The first clone goes on as before.
    again = world.run_once()
    assert again.code == 0 and [r["status"] for r in world.events("finished")] == ["succeeded"]
