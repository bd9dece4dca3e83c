"""Text people read: how a name that git stores is shown.

A root module (like errors.py and redaction.py): every wing may use it, and it imports nothing
of mergegate, so the pure judge can show a path without importing git.
"""


def path_display(path: str) -> str:
    """A path as people read it; git/ keeps a name that is not UTF-8 as NUL + its hex."""
    return f"<name not UTF-8: {path[1:]}>" if path.startswith("\0") else path
