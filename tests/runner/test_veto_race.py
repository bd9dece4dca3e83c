"""A veto racing the start (issue 23, item 8): the claim goes to the audit branch, so a veto that
lands on approved meanwhile does not make its push fail. The runner looks again once the claim
has landed, before the process starts. Real remote, a hook that lands the veto at that moment."""

from __future__ import annotations

from tests.helpers.repos import World
from tests.runner.test_reliability import _gate, _merge_jobs

HOOK = """#!/bin/sh
# When the runner's claim lands on the audit branch, land the staged veto on approved (once).
while read old new ref; do
  if [ "$ref" = refs/heads/mergegate/audit ] && [ -e {armed} ]; then
    rm -f {armed}
    git update-ref refs/heads/approved "$(git rev-parse refs/heads/veto-staging)"
  fi
done
exit 0
"""


def test_a_veto_landing_while_the_claim_is_pushed_stops_the_start(world: World) -> None:
    _gate(world)
    marker = world.tmp / "ran"
    _merge_jobs(world, "p", {"j": ["sh", "-c", f"touch {marker}"]})
    blob = world.blob("approved", "jobs/j.yaml")
    # bob's signed veto of the job, on top of approved, staged on another branch of the remote.
    world.checkout_approved("approver")
    world.git(
        "approver",
        "commit",
        "-q",
        "--allow-empty",
        "-S",
        "-m",
        "veto",
        "-m",
        f"Mergegate-Veto: jobs/j.yaml {blob}",
        who=world.bob,
        sign=world.bob.key,
    )
    veto = world.git("approver", "rev-parse", "HEAD")
    world.git("approver", "push", "-q", "origin", "HEAD:refs/heads/veto-staging")
    armed = world.tmp / "armed"
    armed.touch()
    hook = world.remote / "hooks" / "post-receive"
    hook.write_text(HOOK.format(armed=armed))
    hook.chmod(0o755)
    result = world.run_once()
    assert not armed.exists(), "the hook did not fire: no claim was pushed"
    assert not marker.exists(), "the job started although a veto landed before its start"
    [job] = result.json()["jobs"]
    assert job["status"] == "interrupted" and f"commit {veto[:7]}" in job["reason"], job
    assert [r["status"] for r in world.events("finished")] == ["interrupted"]
