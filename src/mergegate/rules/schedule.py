"""The policy's keys about time, read and checked: `windows`, `run_windows`, `max_approval_age`
and the lifetimes of keys.

`policy.load_policy` calls these; every error names the file, line and field. What the
windows mean is `windows.py`'s; when an approval is too old is the eligibility rules'.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from mergegate.crypto.signatures import PublicKey
from mergegate.errors import ConfigError
from mergegate.rules import config
from mergegate.rules.windows import SpecError, Window, load_zone, parse_spec

POLICY_FILE = "policy/policy.yaml"


class Keyed(Protocol):
    """A person of the policy, as far as key lifetimes care."""

    @property
    def name(self) -> str: ...
    @property
    def keys(self) -> tuple[PublicKey, ...]: ...


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str | None) -> int | None:
    """`72h` in seconds (the schema admits only a whole number and one of s, m, h, d)."""
    if text is None:
        return None
    return int(text[:-1]) * _UNITS[text[-1]]


def read_windows(doc: config.Document, data: config.RawMapping) -> tuple[Window, ...]:
    """Every window the policy defines; a zone or span that cannot be read names its field."""
    found = []
    for name, spec in data.items():
        try:
            zone = load_zone(spec.get("timezone", "UTC"))
        except SpecError as exc:
            raise doc.error(
                ("windows", name, "timezone"), f"field 'windows.{name}.timezone': {exc}"
            ) from None
        lists: dict[str, list[Any]] = {"open": [], "closed": []}
        for kind, specs in lists.items():
            for index, text in enumerate(spec.get(kind, ())):
                try:
                    specs.append(parse_spec(text, zone))
                except SpecError as exc:
                    raise doc.error(
                        ("windows", name, kind, index), f"field 'windows.{name}.{kind}': {exc}"
                    ) from None
        found.append(
            Window(
                name,
                spec.get("timezone", "UTC"),
                tuple(lists["open"]),
                tuple(lists["closed"]),
            )
        )
    return tuple(found)


def known_windows(doc: config.Document, data: config.RawMapping, known: set[str]) -> None:
    """A window a job must start in that the policy does not define is an error, not a window
    that is always open (or never)."""
    places: list[tuple[tuple[str | int, ...], str, list[str]]] = [
        (("run_windows",), "run_windows", data.get("run_windows", []))
    ]
    for index, rule in enumerate(data.get("approval_rules", [])):
        places.append(
            (
                ("approval_rules", index, "windows"),
                f"approval_rules.{index}.windows",
                rule.get("windows", []),
            )
        )
    for path, field, wanted in places:
        for index, name in enumerate(wanted):
            if name not in known:
                defined = ", ".join(sorted(known)) or "none"
                raise doc.error(
                    (*path, index),
                    f"field '{field}': unknown window '{name}' (the policy defines: {defined})",
                    hint='define it under `windows:` (docs/policy.md, "Change windows")',
                )


def no_expiry_without_runners(doc: config.Document, data: config.RawMapping) -> None:
    """Approval expiry needs an authenticated clock: the time a runner first judged the approval.

    Only runner-signed audit records say when an approving commit was first judged; without
    `runners` a record (or a commit date) anyone can write would set an approval's age, and a
    forged one could keep an old approval fresh for ever.
    """
    places: list[tuple[tuple[str | int, ...], str]] = []
    if "max_approval_age" in data:
        places.append((("max_approval_age",), "max_approval_age"))
    for index, rule in enumerate(data.get("approval_rules", [])):
        if "max_approval_age" in rule:
            where: tuple[str | int, ...] = ("approval_rules", index, "max_approval_age")
            places.append((where, f"approval_rules.{index}.max_approval_age"))
    for path, field in places[:1]:
        raise doc.error(
            path,
            f"field '{field}': approval expiry needs runner-signed audit records (the time a "
            "runner first judged the approval), but the policy lists no runners: as key "
            "lifetimes, an approval's age must come from a time nobody else can write",
            hint="list the runner's public key under `runners` and run with --signing-key, or "
            "drop max_approval_age",
        )


def no_lifetimes_without_runners(people: Sequence[Keyed]) -> None:
    """Key lifetimes need an authenticated clock: the time a change was first judged.

    Only runner-signed audit records say when a policy change was judged. Without `runners`, every
    fresh clone (every CI run) would judge past policy changes at today's time, so once the keys
    that adopted a change expired, the older policy, and the keys it removed, would come back. A
    policy that lists no runners may therefore not use lifetimes at all (valid_after, valid_before,
    or an OpenPGP key's own expiry): remove a key by a policy change instead.
    """
    for person in people:
        for key in person.keys:
            what = (
                "valid_after"
                if key.valid_after
                else "valid_before"
                if key.valid_before
                else "an OpenPGP expiry"
                if key.expires
                else ""
            )
            if what:
                message = (
                    f"key of {person.name} has a lifetime ({what}) but the policy lists no "
                    "runners: without runner-signed audit records a fresh clone would judge "
                    "adopted policy changes at today's time"
                )
                file, _, line = key.source.rpartition(":")
                raise ConfigError(
                    message,
                    file=file or POLICY_FILE,
                    line=int(line) if line.isdigit() else None,
                    hint="list `runners` and run with --signing-key, or drop the lifetime and "
                    "remove the key with a policy change when it must stop counting "
                    "(docs/policy.md)",
                )
