"""review redteam7b G2: unsigned "veto" commits must not make every pass search the audit branch.

A writer of approved pushes empty commits carrying a `Mergegate-Veto:` trailer, signed by nobody.
Such a commit can never be a veto, at any time, by any policy. Since ba928b9 the runner judges each
one again through `vetoes.WalkedView.vetoes` -> `dating.first_covering`: a `git grep` over every log
file for every `scanned` record, a new `Appenders` (a `rev-list` of the audit line, a binary search
of ls-tree + blob reads), two more greps and an ssh-keygen per veto commit, on every pass that
decides a job. The secure outcome: what a pass costs does not grow with the number of such commits.
Real git (a shim on PATH that logs each call and execs the real git), real keys.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from tests.helpers.repos import ECHO_RULE, World, job_yaml, policy_yaml

JUNK = 60


def _shim(tmp: Path) -> tuple[dict[str, str], Path]:
    real = shutil.which("git")
    assert real is not None
    bindir, log = tmp / "shim", tmp / "git-calls.log"
    bindir.mkdir()
    script = bindir / "git"
    script.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> {log}\nexec {real} "$@"\n')
    script.chmod(script.stat().st_mode | stat.S_IEXEC)
    return {"PATH": f"{bindir}{os.pathsep}{os.environ['PATH']}"}, log


def _calls(log: Path) -> list[str]:
    calls = log.read_text().splitlines() if log.exists() else []
    log.unlink(missing_ok=True)
    return calls


def _logged_pass(world: World, name: str, env: dict[str, str], log: Path) -> list[str]:
    """Merge job `name`, then one runner pass as a process: the git calls it made (it must
    succeed)."""
    world.propose(name, {f"jobs/{name}.yaml": job_yaml(name, ["echo", name])}, who=world.alice)
    world.signed_merge(name, world.bob)
    _calls(log)
    result = world.run_once(env=env, process=True)
    assert result.code == 0, result.err[-800:]
    (job,) = result.json()["jobs"]
    assert job["status"] == "succeeded", job
    return _calls(log)


def test_unsigned_veto_commits_do_not_make_each_pass_grep_the_audit(
    world: World, tmp_path: Path
) -> None:
    runners = world.signing_runner()
    world.setup(
        policy_yaml(
            [world.bob.approver_entry(), world.carol.approver_entry()], [ECHO_RULE], runners=runners
        )
    )
    env, log = _shim(tmp_path)
    world.propose("a", {"jobs/a.yaml": job_yaml("a", ["echo", "a"])}, who=world.alice)
    world.signed_merge("a", world.bob)
    assert world.run_once().code == 0
    baseline = _logged_pass(world, "b", env, log)
    # A writer pushes JUNK unsigned empty commits that look like vetoes of some blob.
    world.checkout_approved("approver")
    for n in range(JUNK):
        world.git(
            "approver",
            "commit",
            "-q",
            "--allow-empty",
            "-m",
            f"veto {n}",
            "-m",
            f"Mergegate-Veto: jobs/x.yaml {n:040x}",
        )
    world.git("approver", "push", "-q", "origin", "approved")
    after = _logged_pass(world, "c", env, log)
    # The next pass, once a `scanned` record covers the junk: each one now also costs an Appenders
    # search.
    later = _logged_pass(world, "d", env, log)
    print(
        f"git calls per pass: baseline {len(baseline)}, junk walked {len(after)}, junk covered "
        f"{len(later)}"
    )
    greps = [c for c in after + later if " grep " in f" {c} "]
    base_greps = [c for c in baseline if " grep " in f" {c} "]
    # Unsigned commits can never be vetoes: they must not each cost a search of the audit branch.
    assert len(greps) <= 2 * len(base_greps) + 10, (
        len(base_greps),
        len(greps),
        len(baseline),
        len(after),
    )
    # (2 calls per junk commit, `git show` + diff, are older than ba928b9; 9 since.)
    assert len(later) <= len(baseline) + 3 * JUNK, (len(baseline), len(after), len(later))
