"""Policy and its decisions: is a job allowed, which rule said so, what approvals it needs."""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from mergegate.crypto.signatures import PublicKey, parse_public_key
from mergegate.errors import ConfigError
from mergegate.rules import config, schedule
from mergegate.rules.emergency import EmergencyPolicy, read_emergency
from mergegate.rules.job import Job, forbidden_env_name
from mergegate.rules.schedule import duration, no_lifetimes_without_runners
from mergegate.rules.windows import Window

POLICY_DIR = "policy/"
POLICY_FILE = "policy/policy.yaml"
DEFAULT_ENV_ALLOWLIST = ("PATH", "LANG", "HOME")
DEFAULT_POLICY_APPROVALS = 2


@dataclass(frozen=True)
class Person:
    name: str
    emails: tuple[str, ...]
    keys: tuple[PublicKey, ...]
    github_ids: tuple[int, ...] = ()  # numeric GitHub user ids (reviews count as this person)


@dataclass(frozen=True)
class GithubPolicy:
    """The top-level `github:` mapping (docs/github.md)."""

    merge_keys: tuple[PublicKey, ...] = ()
    allow_unmapped_authors: bool = False
    empty_lookup_minutes: int = 30


@dataclass(frozen=True)
class CommandRule:
    index: int
    program: str
    args_prefix: tuple[str, ...]
    network: bool
    line: int

    def describe(self) -> str:
        prefix = " ".join(self.args_prefix)
        return f"commands[{self.index}] ({self.program}{' ' + prefix if prefix else ''})"


@dataclass(frozen=True)
class Requirement:
    """Who must approve: `slots` of (group, count) filled by distinct people, and a total."""

    source: str  # "approvals_required", "approval_rules[0] (prod)", "policy_approvals_required"
    slots: tuple[tuple[str, int], ...]
    total: int

    def describe(self) -> str:
        parts = [f"{count} from {group}" for group, count in self.slots]
        if self.total > sum(c for _, c in self.slots):
            plural, in_all = "s" if self.total != 1 else "", " in all" if self.slots else ""
            parts.append(f"{self.total} approval{plural}{in_all}")
        return f"{' and '.join(parts) or 'nothing'} ({self.source})"


@dataclass(frozen=True)
class ApprovalRule:
    index: int
    name: str
    paths: tuple[str, ...]
    labels: tuple[str, ...]
    requirement: Requirement
    windows: tuple[str, ...] = ()  # in addition to the policy's run_windows
    max_approval_age: int | None = None  # seconds; None: the policy's own

    def matches(self, job: Job) -> bool:
        if self.paths and not any(fnmatch.fnmatchcase(job.path, glob) for glob in self.paths):
            return False
        return not self.labels or any(label in job.labels for label in self.labels)


@dataclass(frozen=True)
class Limits:
    max_timeout_seconds: int = 300
    max_output_bytes: int = 65536
    max_memory_mb: int | None = None
    max_cpu_seconds: int | None = None
    max_file_size_mb: int | None = None
    max_processes: int | None = None
    max_open_files: int | None = None
    kill_grace_seconds: float = 5.0


@dataclass(frozen=True)
class Retries:
    """How often a job may be retried, and how long to wait between attempts (docs/policy.md)."""

    max_retries: int = 0
    backoff_seconds: float = 30.0
    max_backoff_seconds: float = 3600.0

    def delay(self, attempt: int) -> float:
        """Seconds to wait after attempt `attempt` (1-based) ended before the next one starts:
        backoff_seconds * 2^(attempt-1), at most max_backoff_seconds."""
        return float(
            min(self.backoff_seconds * 2 ** min(max(attempt, 1) - 1, 32), self.max_backoff_seconds)
        )


@dataclass(frozen=True)
class CommandDecision:
    allowed: bool
    rule: CommandRule | None
    reason: str


@dataclass(frozen=True)
class Quorum:
    met: bool
    counted: tuple[str, ...]
    reason: str


@dataclass(frozen=True)
class Policy:
    commit: str  # the commit whose policy/ this is
    approvers: tuple[Person, ...]
    proposers: tuple[Person, ...]
    runners: tuple[Person, ...]
    groups: tuple[tuple[str, tuple[str, ...]], ...]
    default_requirement: Requirement
    approval_rules: tuple[ApprovalRule, ...]
    policy_approvals_required: int
    allow_self_approval: bool
    require_signed_proposals: bool
    commands: tuple[CommandRule, ...]
    limits: Limits
    env_allowlist: tuple[str, ...]
    secret_env: tuple[str, ...]
    reserved_env: tuple[str, ...]
    path: str | None
    sandbox: str
    keep_output: bool
    github: GithubPolicy = GithubPolicy()
    retries: Retries = Retries()
    windows: tuple[Window, ...] = ()  # every window the policy defines
    run_windows: tuple[str, ...] = ()  # the windows every job starts in
    max_approval_age: int | None = None  # seconds; None: approvals do not expire
    emergency: EmergencyPolicy | None = None  # break-glass (rules/emergency.py); None: none

    @property
    def where(self) -> str:
        return f"{POLICY_FILE} at {self.commit[:7]}"

    def approver_keys(self) -> tuple[PublicKey, ...]:
        return tuple(k for p in self.approvers for k in p.keys)

    def proposal_keys(self) -> tuple[PublicKey, ...]:
        return tuple(k for p in (*self.approvers, *self.proposers) for k in p.keys)

    def runner_keys(self) -> tuple[PublicKey, ...]:
        return tuple(k for p in self.runners for k in p.keys)

    def github_person(self, uid: int) -> Person | None:
        """The approver or proposer a GitHub user id belongs to (ids are unique across people)."""
        for person in (*self.approvers, *self.proposers):
            if uid in person.github_ids:
                return person
        return None

    def person(self, name: str) -> Person | None:
        for person in (*self.approvers, *self.proposers, *self.runners):
            if person.name == name:
                return person
        return None

    def decide_command(self, job: Job) -> CommandDecision:
        """Deny by default: the first rule whose program and argument prefix fit allows."""
        if (
            job.timeout_seconds is not None
            and job.timeout_seconds > self.limits.max_timeout_seconds
        ):
            return CommandDecision(
                False,
                None,
                f"timeout_seconds {job.timeout_seconds} exceeds limits.max_timeout_seconds "
                f"{self.limits.max_timeout_seconds} in {self.where}",
            )
        if job.retries > self.retries.max_retries:
            return CommandDecision(
                False,
                None,
                f"retries {job.retries} exceeds max_retries {self.retries.max_retries} in "
                f"{self.where}",
            )
        for name, _ in job.env:
            if forbidden_env_name(name) or self._reserved(name):
                return CommandDecision(
                    False, None, f"env {name} is reserved and may not be set by a job"
                )
            if name not in self.env_allowlist:
                return CommandDecision(
                    False, None, f"env {name} is not in env_allowlist in {self.where}"
                )
        program, args = job.command[0], job.command[1:]
        for rule in self.commands:
            if rule.program == program and tuple(args[: len(rule.args_prefix)]) == rule.args_prefix:
                return CommandDecision(True, rule, f"allowed by {rule.describe()} in {self.where}")
        if not self.commands:
            return CommandDecision(
                False, None, f"no command rules in {self.where} (deny by default)"
            )
        return CommandDecision(
            False,
            None,
            f"no rule in {self.where} allows {program!r} with these arguments (deny by default)",
        )

    def _reserved(self, name: str) -> bool:
        return any(fnmatch.fnmatchcase(name, pattern) for pattern in self.reserved_env)

    def requirement_for(self, job: Job) -> Requirement:
        rule = self.rule_for(job)
        return rule.requirement if rule is not None else self.default_requirement

    def rule_for(self, job: Job) -> ApprovalRule | None:
        """The first approval rule that matches the job (the one its requirement comes from)."""
        return next((rule for rule in self.approval_rules if rule.matches(job)), None)

    def windows_for(self, job: Job) -> tuple[Window, ...]:
        """Every window a start of `job` must be inside: run_windows, then its rule's."""
        rule = self.rule_for(job)
        wanted = dict.fromkeys((*self.run_windows, *(rule.windows if rule else ())))
        by_name = {w.name: w for w in self.windows}
        return tuple(by_name[name] for name in wanted)

    def approval_age_for(self, job: Job) -> int | None:
        """The oldest an approval of `job` may be when it starts, in seconds (None: any age)."""
        rule = self.rule_for(job)
        if rule is not None and rule.max_approval_age is not None:
            return rule.max_approval_age
        return self.max_approval_age

    def content_requirement(self) -> Requirement:
        """Files a job may execute (scripts, data) need what the strictest job needs."""
        highest = max(
            [self.default_requirement.total, *(r.requirement.total for r in self.approval_rules)]
        )
        return Requirement(
            source="other files: the highest job requirement", slots=(), total=highest
        )

    def policy_requirement(self) -> Requirement:
        total = max(self.policy_approvals_required, self.content_requirement().total)
        return Requirement(source="policy_approvals_required", slots=(), total=total)

    def quorum(self, requirement: Requirement, approvers: Iterable[str]) -> Quorum:
        """Whether distinct `approvers` fill every slot of `requirement` and its total."""
        people = tuple(sorted(set(approvers)))
        members = dict(self.groups)
        if requirement.total < 1:
            return Quorum(False, people, f"requirement {requirement.source} is empty: deny")
        if len(people) < requirement.total:
            return Quorum(
                False,
                people,
                f"{len(people)} of {requirement.total} approvals: needs {requirement.describe()}",
            )
        slots = [group for group, count in requirement.slots for _ in range(count)]
        if not _assign(slots, people, members, set()):
            return Quorum(
                False,
                people,
                f"approvals by {', '.join(people) or 'nobody'} "
                f"do not fill {requirement.describe()}",
            )
        return Quorum(True, people, f"quorum met: {requirement.describe()} by {', '.join(people)}")


def _assign(
    slots: Sequence[str], people: Sequence[str], members: dict[str, tuple[str, ...]], used: set[str]
) -> bool:
    # Each slot needs its own person: one engineer in two groups fills one slot.
    if not slots:
        return True
    group, rest = slots[0], slots[1:]
    for person in people:
        if person not in used and person in members.get(group, ()):
            if _assign(rest, people, members, used | {person}):
                return True
    return False


Reader = Callable[[str], bytes | None]


def load_policy(read: Reader, *, commit: str) -> Policy:
    """Load policy/policy.yaml (and key files under policy/keys/) as of `commit`."""
    text = read(POLICY_FILE)
    if text is None:
        raise ConfigError(
            f"no {POLICY_FILE} at {commit[:7]}",
            file=POLICY_FILE,
            hint="if approved has no policy yet: git switch approved && mergegate init, then git "
            "push origin approved",
        )
    doc = config.load(text, file=POLICY_FILE, schema="policy")
    data: config.RawMapping = doc.data
    approvers, proposers, runners = (
        tuple(_person(doc, read, (field, i), p) for i, p in enumerate(data.get(field, [])))
        for field in ("approvers", "proposers", "runners")
    )
    _unique_names(doc, "approvers", approvers)
    if not runners:
        no_lifetimes_without_runners((*approvers, *proposers))
    _unique_github_ids(doc, data, (("approvers", approvers), ("proposers", proposers)))
    if not runners:
        _no_reviews_without_runners(doc, approvers)
        _no_retries_without_runners(doc, data)
        schedule.no_expiry_without_runners(doc, data)
    windows = schedule.read_windows(doc, data.get("windows", {}))
    names = {p.name for p in approvers}
    groups = {}
    for group, people in data.get("groups", {}).items():
        for index, person in enumerate(people):
            if person not in names:
                raise doc.error(
                    ("groups", group, index),
                    f"field 'groups.{group}': '{person}' is not an approver",
                )
        groups[group] = tuple(people)
    default = Requirement("approvals_required", (), data.get("approvals_required", 1))
    rules = tuple(
        _approval_rule(doc, i, r, groups) for i, r in enumerate(data.get("approval_rules", []))
    )
    schedule.known_windows(doc, data, {w.name for w in windows})
    limits_data = data.get("limits", {})
    commands = tuple(
        CommandRule(
            i,
            r["program"],
            tuple(r.get("args_prefix", ())),
            bool(r.get("network", False)),
            doc.line_of(("commands", i)),
        )
        for i, r in enumerate(data.get("commands", []))
    )
    policy_approvals = data.get(
        "policy_approvals_required", max(1, min(DEFAULT_POLICY_APPROVALS, len(approvers)))
    )
    _meetable(
        doc, data, approvers, groups, (default, *(r.requirement for r in rules)), policy_approvals
    )
    allowlist = tuple(data.get("env_allowlist", DEFAULT_ENV_ALLOWLIST))
    for index, name in enumerate(data.get("secret_env", [])):
        if name not in allowlist:
            raise doc.error(
                ("secret_env", index), f"field 'secret_env': {name} must also be in env_allowlist"
            )
    return Policy(
        commit=commit,
        approvers=approvers,
        proposers=proposers,
        runners=runners,
        groups=tuple(sorted(groups.items())),
        default_requirement=default,
        approval_rules=rules,
        policy_approvals_required=policy_approvals,
        allow_self_approval=data.get("allow_self_approval", False),
        require_signed_proposals=data.get("require_signed_proposals", False),
        commands=commands,
        limits=Limits(**limits_data),
        env_allowlist=allowlist,
        secret_env=tuple(data.get("secret_env", ())),
        reserved_env=tuple(data.get("reserved_env", ())),
        path=data.get("path"),
        sandbox=data.get("sandbox", "none"),
        keep_output=data.get("keep_output", False),
        github=_github(doc, data.get("github")),
        retries=Retries(
            max_retries=data.get("max_retries", 0),
            backoff_seconds=float(data.get("retry_backoff_seconds", 30.0)),
            max_backoff_seconds=float(data.get("max_retry_backoff_seconds", 3600.0)),
        ),
        windows=windows,
        run_windows=tuple(data.get("run_windows", ())),
        max_approval_age=duration(data.get("max_approval_age")),
        emergency=read_emergency(doc, data, [p.name for p in approvers], groups, bool(runners)),
    )


def _no_reviews_without_runners(doc: config.Document, approvers: Sequence[Person]) -> None:
    """Review approvals need authenticated stored evidence: runner-signed audit commits.

    The runner and `verify` judge a GitHub merge on the evidence stored on the audit branch; without
    `runners` anyone who can push that branch could store forged evidence (an APPROVED review nobody
    gave) and approve any job.
    """
    for index, person in enumerate(approvers):
        if person.github_ids:
            raise doc.error(
                ("approvers", index, "github"),
                f"field 'approvers': {person.name} has a GitHub id (review approvals) but the "
                "policy lists no runners: without runner-signed audit commits stored review "
                "evidence could be forged",
                hint="list the runner's public key under `runners` and run with --signing-key "
                "(docs/github.md)",
            )


def _no_retries_without_runners(doc: config.Document, data: config.RawMapping) -> None:
    """Retries need authenticated records: runner-signed audit commits.

    Whether a revision may run again is decided from its `finished` records. Without
    `runners`, anyone who can push the audit branch could append a forged `failed`
    result (of a run still going, or of one that succeeded) and make an approved job
    run again, which a run at most once never allows.
    """
    if data.get("max_retries", 0):
        raise doc.error(
            ("max_retries",),
            "field 'max_retries': retries need runner-signed audit records, but the policy "
            "lists no runners: a forged failed result could make a job run again",
            hint="list the runner's public key under `runners` and run with --signing-key, or set "
            "max_retries: 0",
        )


def _meetable(
    doc: config.Document,
    data: config.RawMapping,
    approvers: tuple[Person, ...],
    groups: dict[str, tuple[str, ...]],
    requirements: tuple[Requirement, ...],
    policy_approvals: int,
) -> None:
    """A requirement the listed people can never fill is a configuration error, not a gate
    that can never approve (or never change) again."""
    count = len(approvers)
    people = f"the policy lists {count} approver{'s' if count != 1 else ''}"
    if "policy_approvals_required" in data and policy_approvals > count:
        raise doc.error(
            ("policy_approvals_required",),
            f"field 'policy_approvals_required': {policy_approvals} approvals "
            f"can never be met: {people}, so the policy could never change again",
        )
    for requirement in requirements:
        where: tuple[str | int, ...] = ("approvals_required",)
        if requirement.source.startswith("approval_rules["):
            where = (
                "approval_rules",
                int(requirement.source[len("approval_rules[") :].split("]")[0]),
            )
        elif "approvals_required" not in data:
            continue  # the default of 1 with no approvers: a deny-all policy, as written
        field = ".".join(map(str, where))
        if requirement.total > count:
            raise doc.error(
                where, f"field '{field}': {requirement.total} approvals can never be met: {people}"
            )
        for group, needed in requirement.slots:
            if needed > len(groups.get(group, ())):
                raise doc.error(
                    where,
                    f"field '{field}': {needed} from group '{group}' can never be met: "
                    f"the group has {len(groups.get(group, ()))} member(s)",
                )
        slots = [group for group, needed in requirement.slots for _ in range(needed)]
        if not _assign(slots, [p.name for p in approvers], groups, set()):
            raise doc.error(
                where,
                f"field '{field}': {requirement.describe()} can never be met: "
                f"the groups do not have {len(slots)} distinct people for it",
            )


def _github(doc: config.Document, data: config.RawMapping | None) -> GithubPolicy:
    if data is None:
        return GithubPolicy()
    keys = tuple(
        parse_public_key(
            entry,
            owner="GitHub merge key",
            source=f"{doc.file}:{doc.line_of(('github', 'merge_keys', i))}",
        )
        for i, entry in enumerate(data.get("merge_keys", []))
    )
    return GithubPolicy(
        merge_keys=keys,
        allow_unmapped_authors=data.get("allow_unmapped_authors", False),
        empty_lookup_minutes=data.get("empty_lookup_minutes", 30),
    )


def _unique_github_ids(
    doc: config.Document, data: config.RawMapping, lists: tuple[tuple[str, tuple[Person, ...]], ...]
) -> None:
    # One account is one person: an id listed twice would let one review count for two.
    owner: dict[int, str] = {}
    for field, people in lists:
        for index, person in enumerate(people):
            for uid in person.github_ids:
                if uid in owner and owner[uid] != person.name:
                    raise doc.error(
                        (field, index, "github"),
                        f"field '{field}': GitHub id {uid} belongs to both '{owner[uid]}' and "
                        f"'{person.name}'",
                        hint="one account is one person: keep it under one name (gh api "
                        f"user/{uid} --jq .login shows whose it is)",
                    )
                owner[uid] = person.name


def _unique_names(doc: config.Document, field: str, people: tuple[Person, ...]) -> None:
    seen: set[str] = set()
    for index, person in enumerate(people):
        if person.name in seen:
            raise doc.error(
                (field, index, "name"),
                f"field '{field}': name '{person.name}' appears twice; give one person all their "
                "keys",
            )
        seen.add(person.name)


def _approval_rule(
    doc: config.Document, index: int, data: config.RawMapping, groups: dict[str, tuple[str, ...]]
) -> ApprovalRule:
    name = data.get("name", f"#{index}")
    slots = []
    for slot_index, slot in enumerate(data.get("require", [])):
        if slot["group"] not in groups:
            raise doc.error(
                ("approval_rules", index, "require", slot_index, "group"),
                f"field 'approval_rules.{index}.require': unknown group '{slot['group']}'",
            )
        slots.append((slot["group"], slot["count"]))
    total = max(data.get("approvals_required", 0), sum(c for _, c in slots))
    requirement = Requirement(f"approval_rules[{index}] ({name})", tuple(slots), total)
    return ApprovalRule(
        index,
        name,
        tuple(data.get("paths", ())),
        tuple(data.get("labels", ())),
        requirement,
        windows=tuple(data.get("windows", ())),
        max_approval_age=duration(data.get("max_approval_age")),
    )


def _person(
    doc: config.Document, read: Reader, path: tuple[str | int, ...], data: config.RawMapping
) -> Person:
    emails = tuple(
        e.lower() for e in ([data["email"]] if "email" in data else []) + data.get("emails", [])
    )
    entries = [data["key"]] if "key" in data else data.get("keys", [])
    keys = []
    for index, entry in enumerate(entries):
        where = (*path, "key") if "key" in data else (*path, "keys", index)
        source = f"{doc.file}:{doc.line_of(where)}"
        if isinstance(entry, str):
            keys.append(parse_public_key(entry, owner=data["name"], source=source))
            continue
        text: str | bytes | None = entry.get("key")
        if text is None:
            text = read(POLICY_DIR + entry["file"])
            if text is None:
                raise doc.error(where, f"key file {POLICY_DIR + entry['file']} does not exist")
            text = text.decode("utf-8", errors="replace")
        keys.append(
            parse_public_key(
                str(text),
                owner=data["name"],
                source=source,
                valid_after=_time(doc, (*where, "valid_after"), entry.get("valid_after")),
                valid_before=_time(doc, (*where, "valid_before"), entry.get("valid_before")),
            )
        )
    github = data.get("github", ())
    # The schema's integer admits 1.0: ids are ints from here on.
    github_ids = (
        (int(github),) if isinstance(github, int | float) else tuple(int(g) for g in github)
    )
    return Person(name=data["name"], emails=emails, keys=tuple(keys), github_ids=github_ids)


def _time(doc: config.Document, path: tuple[str | int, ...], value: str | None) -> datetime | None:
    if value is None:
        return None
    try:
        return datetime.fromisoformat(value)
    except ValueError:
        raise doc.error(path, f"field '{path[-1]}': {value!r} is not an RFC 3339 time") from None
