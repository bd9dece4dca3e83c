"""The policy's `emergency` key, and the reason an emergency gives (docs/policy.md, "Break-glass").

```yaml
emergency:
  approvers: [alice, sre]   # approver names or group names
  count: 1                  # distinct emergency approvers whose signed emergency runs a job now
  review_within: 72h        # the review it owes afterwards is due this long after its start
```

`policy.load_policy` calls `read_emergency`; every error names the file, line and field. Which job
revisions an emergency lets run is the judge's (step 9, `break_glass.py`); when its review is owed
and overdue is `break_glass.review_state`'s.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from mergegate.rules import config
from mergegate.rules.schedule import duration

TRAILER = "Mergegate-Emergency"
MIN_REASON = 10  # characters: "fix" says nothing a reviewer can check afterwards
MAX_REASON = 200  # what a record, a log line and a terminal line keep of it


@dataclass(frozen=True)
class EmergencyPolicy:
    """Who may break the glass, how many of them must, and when the owed review is due."""

    approvers: tuple[str, ...]  # approver names, groups resolved, in the policy's order
    count: int
    review_within: int  # seconds
    within_text: str  # as the policy writes it (72h), for messages

    def allows(self, person: str) -> bool:
        return person in self.approvers


def read_emergency(
    doc: config.Document,
    policy: config.RawMapping,
    approvers: Sequence[str],
    groups: Mapping[str, Sequence[str]],
    runners: bool,
) -> EmergencyPolicy | None:
    """The policy's `emergency` mapping (the schema has checked its shape), or None."""
    data = policy.get("emergency")
    if data is None:
        return None
    if not runners:
        raise doc.error(
            ("emergency",),
            "field 'emergency': an emergency's owed review is due `review_within` after its "
            "start, a time only runner-signed audit records can say, but the policy lists no "
            "runners: as approval expiry, the deadline must come from a time nobody else can write",
            hint="list the runner's public key under `runners` and run with --signing-key, or "
            "drop emergency",
        )
    people: list[str] = []
    for index, name in enumerate(data["approvers"]):
        if name in groups:
            people.extend(groups[name])
        elif name in approvers:
            people.append(name)
        else:
            known = ", ".join([*approvers, *groups]) or "none"
            raise doc.error(
                ("emergency", "approvers", index),
                f"field 'emergency.approvers': '{name}' is neither an approver nor a group "
                f"(the policy defines: {known})",
            )
    unique = tuple(dict.fromkeys(people))
    count = data.get("count", 1)
    if count > len(unique):
        raise doc.error(
            ("emergency", "count"),
            f"field 'emergency.count': {count} emergency approvers can never be met: "
            f"emergency.approvers names {len(unique)} ({', '.join(unique)})",
        )
    within = duration(data["review_within"])
    assert within is not None
    return EmergencyPolicy(unique, count, within, data["review_within"])


def reason_problem(values: Sequence[str]) -> str:
    """Why the Mergegate-Emergency trailers of one commit give no usable reason ("" when they do).

    One trailer, one line (git's trailer reading keeps only the line of its key), at least
    MIN_REASON characters once its spaces are trimmed.
    """
    if len(values) > 1:
        return f"it carries {len(values)} {TRAILER} trailers: give one reason"
    text = values[0].strip() if values else ""
    if len(text) < MIN_REASON:
        return (
            f"its {TRAILER} reason {shown_reason(text)!r} is shorter than {MIN_REASON} "
            "characters: say what broke and why it cannot wait for the quorum"
        )
    return ""


def kept_reason(text: str) -> str:
    """The reason as records keep it: redacted, on one line, at most MAX_REASON characters.

    The reason is text anyone who can push a branch writes: a token pasted into it must not reach
    the audit, and a long one must not fill a record. Escaping for readers (text.shown) is the
    reader's business, at the edge.
    """
    # (Imported here: every policy load imports this module, and the redactor's patterns cost a
    # lone `check` or `lint` ~5 ms; config.py imports it lazily for the same reason.)
    from mergegate.redaction import redact_text

    one = " ".join(redact_text(text.strip()).split())
    return one if len(one) <= MAX_REASON else one[: MAX_REASON - 1] + "…"


def shown_reason(text: str) -> str:
    """A reason cut short enough for an error message (before it is redacted and recorded)."""
    kept = kept_reason(text)
    return kept if len(kept) <= 60 else kept[:59] + "…"
