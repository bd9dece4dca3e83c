from __future__ import annotations

from mergegate.cli import entry

entry()
