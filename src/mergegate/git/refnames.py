"""Branch names as a git user types them.

`approved`, `origin/approved`, `refs/heads/approved`, `refs/remotes/origin/approved` and
`remotes/origin/approved` all name the same base; commands take any of them and work with the bare
branch name, so no hint built from it can name a junk ref such as `origin/approved` on the remote.
"""

from __future__ import annotations


def branch_name(name: str, remote: str) -> str:
    """The bare branch name for every spelling of a local or `remote`-tracking branch."""
    for prefix in (
        f"refs/remotes/{remote}/",
        f"remotes/{remote}/",
        f"{remote}/",
        "refs/heads/",
        "heads/",
    ):
        if name.startswith(prefix) and len(name) > len(prefix):
            return name[len(prefix) :]
    return name
