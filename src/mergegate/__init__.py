"""mergegate: a job runs only after a signed, policy-checked merge into `approved`."""

from __future__ import annotations

__version__ = "0.1.0"
