"""A tree another uid can read, wherever the checkout is (issue 22, item 7).

Tests that drop to uid 65534 (as a hosted runner's job would run) import mergegate, and
sometimes its site-packages, from the checkout. As root in `/root/mergegate` (a 0700 home) that
uid cannot reach them, and those tests failed for where the checkout was, not for what they
test. Such a tree is hard-linked (copied where links cannot be made) into a private-free folder
under /tmp once per process, and removed when the process ends.
"""

from __future__ import annotations

import atexit
import os
import shutil
import stat
import tempfile
from pathlib import Path

_SHARED: dict[Path, Path] = {}


def reachable_by_others(path: Path) -> bool:
    """Whether a uid with no rights of its own can walk to `path` and read it."""
    path = path.resolve()
    for folder in [*reversed(path.parents), path]:
        mode = folder.stat().st_mode
        if not mode & stat.S_IXOTH or (folder == path and not mode & stat.S_IROTH):
            return False
    return True


def for_others(path: Path) -> Path:
    """`path` itself where others can read it, else a readable copy of its tree."""
    path = path.resolve()
    if reachable_by_others(path):
        return path
    if path not in _SHARED:
        top = Path(tempfile.mkdtemp(prefix="mergegate-shared-", dir="/tmp"))
        atexit.register(shutil.rmtree, top, True)
        top.chmod(0o755)
        _SHARED[path] = _link_tree(path, top / path.name)
    return _SHARED[path]


def _link_tree(source: Path, target: Path) -> Path:
    for folder, _dirs, files in os.walk(source):
        here = target / Path(folder).relative_to(source)
        here.mkdir(mode=0o755, exist_ok=True)
        here.chmod(0o755)
        for name in files:
            origin = Path(folder, name)
            if origin.is_symlink() or not origin.stat().st_mode & stat.S_IROTH:
                shutil.copy2(origin, here / name, follow_symlinks=True)
                (here / name).chmod(0o644 | (origin.stat().st_mode & 0o111))
                continue
            try:
                os.link(origin, here / name)
            except OSError:
                shutil.copy2(origin, here / name)
    return target
