"""Write a benchmark's generated section of docs/performance.md, keeping the notes below it."""

from __future__ import annotations

from pathlib import Path


def write_section(path: Path, section: str, end_marker: str, generated: list[str]) -> None:
    """Replace the generated part of `section` (or add the section at the end), keeping notes.

    Text after `end_marker`, up to the next `## ` heading, is written by people and kept.
    """
    text = path.read_text() if path.exists() else "# Performance\n"
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if line.strip() == section), None)
    if start is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text.rstrip("\n") + "\n\n" + "\n".join([section, "", *generated, end_marker]) + "\n")
        return
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    marker = next((i for i in range(start + 1, end) if lines[i].strip() == end_marker), None)
    kept = lines[marker + 1:end] if marker is not None else ([""] if end < len(lines) else [])
    new = [*lines[:start], section, "", *generated, end_marker, *kept, *lines[end:]]
    path.write_text("\n".join(new).rstrip("\n") + "\n")
