"""Red team, session 8 (redteam8a): a job cannot keep its workspace past the runner's removal,
whatever it does to the permissions of what it made there. Real processes; as root, the removal
runs as `nobody`, as an unprivileged runner's would."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.helpers.readable import for_others


def _remove_as_a_user(folder: Path) -> None:
    """workspaces.remove_tree as a runner runs it: not as root (whose CAP_DAC_OVERRIDE ignores mode
    bits). As root, the removal runs in a process of its own as `nobody`, the owner of `folder`."""
    src = str(Path(__file__).resolve().parents[2] / "src")
    if os.geteuid() == 0:
        src = str(for_others(Path(src)))  # nobody must reach it, wherever the checkout is
    code = (
        f"import sys; sys.path.insert(0, {src!r}); from pathlib import Path; from "
        f"mergegate.execution.workspaces import remove_tree; remove_tree(Path({str(folder)!r}))"
    )
    if os.geteuid() != 0:
        subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
        return
    os.chown(folder.parent, 65534, 65534)  # (its TMPDIR: it removes the folder from there)
    for dirpath, dirnames, filenames in os.walk(folder):
        for name in [dirpath, *(os.path.join(dirpath, n) for n in dirnames + filenames)]:
            os.lchown(name, 65534, 65534)
    subprocess.run(
        [
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
            "--clear-groups",
            "/usr/bin/python3",
            "-I",
            "-c",
            code,
        ],
        check=True,
        timeout=60,
        cwd="/",
    )


def _closed_workspaces(cases: dict[str, tuple[str, int, int | None]]) -> list[str]:
    """Each case a workspace with folder `sub` (mode `inner`) holding a file, the workspace itself
    given mode `top`; removed as a runner removes it; the cases whose workspace is left."""
    scratch = Path(tempfile.mkdtemp(prefix="rt8a-", dir="/tmp"))
    left = []
    try:
        os.chmod(scratch, 0o755)
        for case, (sub_path, inner, top) in cases.items():
            workspace = scratch / f"mergegate-job-{case}"
            sub = workspace / sub_path
            sub.mkdir(parents=True)
            (sub / "secret").write_text("what the job wrote")
            (workspace / "file").write_text("x")
            sub.chmod(inner)
            if top is not None:
                workspace.chmod(top)
            _remove_as_a_user(workspace)
            if os.path.lexists(workspace):
                left.append(case)
    finally:
        subprocess.run(["rm", "-rf", str(scratch)], check=False)
    return left


def test_a_job_cannot_keep_its_workspace_by_taking_its_own_permissions_away() -> None:
    """A job owns its workspace and may chmod what it made in it (`chmod 000 d`, `chmod 500 d`, even
    `chmod 500 .`): the runner's, the watchdog's and the next pass's removal (and `rm -rf`, its
    fallback) then failed with EACCES and the workspace, with what the job wrote and the export of
    the approving commit, stayed for good. The runner owns every folder in it: it gives itself the
    rights back, on the folder it holds open, never through a path a job could swap."""
    cases = {
        "closed": ("d", 0o000, None),
        "read-only": ("a/b/d", 0o500, None),
        "itself": ("d", 0o755, 0o500),
        "unlistable": ("d", 0o300, None),
    }
    assert _closed_workspaces(cases) == []


def test_a_job_cannot_keep_its_workspace_with_a_closed_folder_deeper_than_the_descriptor_walk() -> (
    None
):
    assert _closed_workspaces({"deep": ("/".join(["d"] * 40), 0o000, None)}) == []
