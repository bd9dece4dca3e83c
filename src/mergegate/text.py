"""Text people read: how a name that git stores is shown, and what may reach a reader raw.

A root module (like errors.py and redaction.py): every wing may use it, and it imports nothing
of mergegate, so the pure judge can show a path without importing git.
"""

from __future__ import annotations

import re


def path_display(path: str) -> str:
    """A path as people read it; git/ keeps a name that is not UTF-8 as NUL + its hex."""
    return f"<name not UTF-8: {path[1:]}>" if path.startswith("\0") else path


# Characters that make text say something other than what it holds: C0 and C1 controls, DEL,
# and the Unicode format characters that reorder or hide text (bidi embeddings, overrides and
# isolates, marks, zero-width characters, line and paragraph separators, the BOM). A file name
# with U+202E shows reversed; one with a newline and `::` starts a GitHub workflow command.
_HIDDEN = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"
)
_HIDDEN_OR_LINES = re.compile(
    "[\x00-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff]"
)
# The colour codes mergegate itself writes (click.style): SGR sequences only.
_OUR_COLOUR = re.compile("\x1b\\[[0-9;]*m")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(match: re.Match[str]) -> str:
    char = match.group()
    return _NAMED.get(char) or (
        f"\\x{ord(char):02x}" if ord(char) < 0x100 else f"\\u{ord(char):04x}"
    )


def shown(value: str) -> str:
    """One value (a path, an argument, a name) as a reviewer must read it: every control and
    format character, newlines and tabs included, escaped visibly (`\\n`, `\\u202e`)."""
    return _HIDDEN_OR_LINES.sub(_escape, value)


def for_reader(text: str) -> str:
    """Lines for a terminal or a CI log: newlines and tabs kept, every other control and format
    character escaped, except mergegate's own colour codes; and no line may start a GitHub
    workflow command (`::name ...`), whatever value it shows."""
    kept: list[str] = []
    last = 0
    for colour in _OUR_COLOUR.finditer(text):
        kept.append(_HIDDEN.sub(_escape, text[last : colour.start()]))
        kept.append(colour.group())
        last = colour.end()
    kept.append(_HIDDEN.sub(_escape, text[last:]))
    return "\n".join(_no_command(line) for line in "".join(kept).split("\n"))


def _no_command(line: str) -> str:
    start = len(line) - len(line.lstrip())
    if line.startswith("::", start):
        return line[:start] + "\\x3a" + line[start + 1 :]
    return line
