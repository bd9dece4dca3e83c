"""The pure judge, table-driven: `judge_commit` on hand-built facts, no git and no subprocess.

Every rule of rules/judge.py has its table here: a malformed commit, vetoes, octopus merges,
unsigned merges and unknown keys, what a vote covers (stale blob or mode, a path the proposal did
not change, what the merge itself wrote), self-approval, quorums (groups, totals, policy changes),
symlinks and non-regular files, removed jobs, unapproved and tainting files, the `commands` rules,
signed proposals, GitHub review evidence and proposals. The expected reasons are the judge's exact
words where they are the contract (the audit records them, `verify` compares them).
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable
from dataclasses import dataclass, replace

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, PublicFormat

from mergegate.crypto.signatures import SignatureCheck
from mergegate.rules.judge import judge_commit
from mergegate.rules.model import (
    ABSENT,
    ApprovalFacts,
    Assessment,
    CommitFacts,
    Entry,
    FileFacts,
    Review,
    Vote,
    Writer,
    describe_votes,
)
from mergegate.rules.policy import Policy, load_policy
from mergegate.rules.revisions import escaping_symlink

PEOPLE = ("alice", "bob", "carol", "dave")  # approvers; erin proposes
ROOT = "c0" * 20
MERGE = "aa" * 20
FIRST, SECOND = "f1" * 20, "5e" * 20


def _key(name: str) -> str:
    seed = hashlib.sha256(name.encode()).digest()
    raw = Ed25519PrivateKey.from_private_bytes(seed).public_key()
    return raw.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode() + f" {name}"


def _policy_yaml(extra: str = "", *, approvals: int = 1, policy_approvals: int = 2) -> bytes:
    people = "".join(
        f"  - name: {p}\n    email: {p}@example.com\n    key: {_key(p)!r}\n" for p in PEOPLE
    )
    return (
        "version: 1\n"
        f"approvers:\n{people}"
        "proposers:\n"
        f"  - name: erin\n    email: erin@example.com\n    key: {_key('erin')!r}\n"
        "groups:\n  sre: [alice, bob]\n  security: [carol]\n"
        f"approvals_required: {approvals}\n"
        "approval_rules:\n"
        "  - name: production\n    paths: ['jobs/prod/*']\n"
        "    require:\n      - {group: sre, count: 1}\n      - {group: security, count: 1}\n"
        f"policy_approvals_required: {policy_approvals}\n"
        "commands:\n"
        "  - program: echo\n    args_prefix: []\n"
        "  - program: df\n    args_prefix: ['-h']\n"
        "limits:\n  max_timeout_seconds: 300\n"
        "env_allowlist: [PATH, LANG, HOME]\n" + extra
    ).encode()


def _load(text: bytes, commit: str = ROOT) -> Policy:
    return load_policy(lambda p: text if p == "policy/policy.yaml" else None, commit=commit)


POLICY = _load(_policy_yaml())
SELF = replace(POLICY, allow_self_approval=True)
SIGNED = replace(POLICY, require_signed_proposals=True)
TWO = _load(_policy_yaml(approvals=2))
WHERE = POLICY.where  # "policy/policy.yaml at c0c0c0c"


def blob(text: str | bytes) -> str:
    data = text.encode() if isinstance(text, str) else text
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def job_text(stem: str, command: str = "[echo, hi]", extra: str = "") -> bytes:
    return f"id: {stem}\ncommand: {command}\ntimeout_seconds: 10\n{extra}".encode()


def good(person: str) -> SignatureCheck:
    key = next(k for p in POLICY.approvers if p.name == person for k in p.keys)
    return SignatureCheck(True, key, key.fingerprint, f"good signature by {person}")


def bad(reason: str = "signed by SHA256:nobody, a key no approver holds") -> SignatureCheck:
    return SignatureCheck(False, None, "SHA256:nobody", reason)


def writer(
    commit: str, author: str = "erin", signer: str | None = None, signature: str = "unsigned"
) -> Writer:
    return Writer(commit, author.capitalize(), f"{author}@example.com", signer, signature)


def job(
    path: str,
    text: bytes | None = None,
    *,
    mode: str = "100644",
    before: Entry = ABSENT,
    writers: tuple[Writer, ...] = (writer("e1" * 20),),
    merge_wrote: bool = False,
) -> FileFacts:
    """A job file the merge brings: the side wrote it (or, `merge_wrote`, the merge itself)."""
    stem = path.rsplit("/", 1)[-1].rsplit(".", 1)[0]
    content = job_text(stem) if text is None else text
    after = Entry(mode, blob(content))
    side = before if merge_wrote else after
    readable = content if mode in ("100644", "100755") else None
    return FileFacts(path, before, after, before, side, writers, readable)


def other_file(path: str, text: str = "data", **kwargs: object) -> FileFacts:
    after = Entry("100644", blob(text))
    return FileFacts(path, ABSENT, after, ABSENT, after, **kwargs)  # type: ignore[arg-type]


def approval(
    person: str,
    files: tuple[FileFacts, ...],
    *,
    commit: str = "ab" * 20,
    check: SignatureCheck | None = None,
    named: dict[str, str] | None = None,
    changed: frozenset[str] | None = None,
) -> ApprovalFacts:
    """An approval commit by `person` naming each file's merged mode and blob."""
    return ApprovalFacts(
        commit,
        check or good(person),
        named if named is not None else {f.path: f"{f.after.mode} {f.after.blob}" for f in files},
        None,
        False,
        changed if changed is not None else frozenset(f.path for f in files),
    )


def merge(
    *files: FileFacts,
    signer: str | None = "alice",
    approvers: tuple[str, ...] = (),
    **kwargs: object,
) -> CommitFacts:
    """A two-parent merge into approved, signed by `signer`, with approval commits by
    `approvers`; the merge commit is authored by its signer."""
    author = signer or "mallory"
    fields: dict[str, object] = {
        "sha": MERGE,
        "parents": (FIRST, SECOND),
        "malformed": "",
        "author_name": author.capitalize(),
        "author_email": f"{author}@example.com",
        "files": files,
        "signature": good(signer) if signer else None,
        "approvals": tuple(
            approval(p, files, commit=f"{i + 1:02d}" * 20) for i, p in enumerate(approvers)
        ),
    }
    fields.update(kwargs)
    return CommitFacts(**fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class Case:
    facts: CommitFacts
    policy: Policy = POLICY
    unapproved: dict[str, str] | None = None
    kind: str = "approval"
    # Per job path: (runnable, refusal, reason); the reason exact, or a part after "~".
    decisions: dict[str, tuple[bool, str, str]] | None = None
    summary: str | None = None  # exact, or a part after "~"
    check: Callable[[Assessment], object] | None = None


def _matches(expected: str, actual: str) -> bool:
    return expected[1:] in actual if expected.startswith("~") else expected == actual


def _judge(case: Case) -> Assessment:
    result = judge_commit(case.facts, case.policy, case.unapproved)
    assert result.kind == case.kind, result
    if case.decisions is not None:
        found = {d.path: (d.runnable, d.refusal, d.reason) for d in result.decisions}
        assert found.keys() == case.decisions.keys(), found
        for path, (runnable, refusal, reason) in case.decisions.items():
            assert found[path][:2] == (runnable, refusal), (path, found[path])
            assert _matches(reason, found[path][2]), (path, reason, found[path][2])
    if case.summary is not None:
        assert _matches(case.summary, result.summary), result.summary
    if case.check is not None:
        assert case.check(result) is not False, result
    return result


CASES: dict[str, Case] = {}


def case(name: str, c: Case) -> None:
    assert name not in CASES, name
    CASES[name] = c


HELLO = job("jobs/hello.yaml")
PROD = job("jobs/prod/deploy.yaml")
JOBSETS = {
    "one-job": (HELLO,),
    "two-jobs": (HELLO, job("jobs/other.yaml")),
    "prod-job": (PROD,),
}

# -- 1. a malformed commit approves nothing --------------------------------------------------- ---
for (set_name, files), signer in itertools.product(JOBSETS.items(), ("alice", "bob", None)):
    why = "commit aaaaaaa is malformed (git reads other parents than its header lists); it "
    why += "approves nothing"
    case(
        f"malformed-{set_name}-signed-by-{signer}-approves-nothing",
        Case(
            merge(
                *files,
                signer=signer,
                approvers=("carol",),
                malformed="git reads other parents than its header lists",
            ),
            kind="unapproved",
            decisions={f.path: (False, "unapproved", why) for f in files},
            summary=why,
        ),
    )

# -- 2. vetoes -------------------------------------------------------------------------------- ---
for person, trailers in itertools.product(PEOPLE, (1, 2, 3)):
    names = tuple(f"jobs/j{i}.yaml {blob(str(i))}" for i in range(trailers))

    def _vetoes(result: Assessment, person: str = person, names: tuple[str, ...] = names) -> bool:
        return [(v.path, v.blob, v.person) for v in result.vetoes] == [
            (*n.rsplit(" ", 1), person) for n in names
        ]

    case(
        f"veto-by-{person}-of-{trailers}-revisions-is-a-veto",
        Case(
            merge(signer=person, veto_trailers=names),
            kind="veto",
            summary=f"veto by {person}",
            check=_vetoes,
        ),
    )
for label, check, words in (
    ("unsigned", None, f"unsigned (judged by {WHERE})"),
    ("unknown-key", bad(), f"signed by SHA256:nobody, a key no approver holds (judged by {WHERE})"),
    ("expired-key", bad("key of alice expired"), f"key of alice expired (judged by {WHERE})"),
    ("policy-words", bad("no key in the policy"), "no key in the policy"),
):
    case(
        f"veto-{label}-is-ignored",
        Case(
            merge(signer=None, signature=check, veto_trailers=(f"jobs/a.yaml {blob('a')}",)),
            kind="other",
            summary=f"veto ignored: {words}",
            check=lambda r: r.vetoes == (),
        ),
    )
case(
    "veto-trailer-in-a-proposal-is-no-veto",
    Case(
        merge(signer=None, proposal=True, veto_trailers=(f"jobs/a.yaml {blob('a')}",)),
        kind="other",
        summary="changes no job or policy; not a signed approval",
    ),
)
case(
    "veto-trailer-on-a-commit-that-changes-files-is-no-veto",
    Case(
        merge(HELLO, veto_trailers=(f"jobs/a.yaml {blob('a')}",)),
        decisions={HELLO.path: (True, "", "~quorum met")},
    ),
)

# -- 2. renewals (rules/renewal.py counts them) ------------------------------------------------
for person in PEOPLE:
    named = (f"jobs/prod/deploy.yaml {blob('d')}", f"jobs/a.yaml {blob('a')}")

    def _renewals(result: Assessment, person: str = person, named: tuple[str, ...] = named) -> bool:
        return [(r.path, r.blob, r.person, r.commit) for r in result.renewals] == [
            (*n.rsplit(" ", 1), person, MERGE) for n in named
        ] and result.vetoes == ()

    case(
        f"renewal-by-{person}-is-a-renewal",
        Case(
            merge(signer=person, parents=(FIRST,), renew_trailers=named),
            kind="renewal",
            summary=f"renewal by {person}",
            check=_renewals,
        ),
    )
for label, check, words in (
    ("unsigned", None, f"unsigned (judged by {WHERE})"),
    ("unknown-key", bad(), f"signed by SHA256:nobody, a key no approver holds (judged by {WHERE})"),
):
    case(
        f"renewal-{label}-is-ignored",
        Case(
            merge(signer=None, signature=check, renew_trailers=(f"jobs/a.yaml {blob('a')}",)),
            kind="other",
            summary=f"renewal ignored: {words}",
            check=lambda r: r.renewals == (),
        ),
    )
case(
    "renewal-trailer-on-a-commit-that-changes-files-is-no-renewal",
    Case(
        merge(HELLO, renew_trailers=(f"jobs/a.yaml {blob('a')}",)),
        decisions={HELLO.path: (True, "", "~quorum met")},
        check=lambda r: r.renewals == (),
    ),
)
case(
    "a-veto-and-a-renewal-in-one-commit-is-a-veto",
    Case(
        merge(
            signer="bob",
            veto_trailers=(f"jobs/a.yaml {blob('a')}",),
            renew_trailers=(f"jobs/a.yaml {blob('a')}",),
        ),
        kind="veto",
        check=lambda r: r.renewals == (),
    ),
)
case(
    "a-decision-names-who-may-not-count-for-it-and-so-for-its-renewal",
    Case(
        merge(job("jobs/j.yaml", writers=(writer("e1" * 20, "erin"), writer("e2" * 20, "dave")))),
        decisions={"jobs/j.yaml": (True, "", "~quorum met")},
        check=lambda r: (
            r.decisions[0].excluded
            == (("dave", f"author of {'e2' * 3}e"), ("erin", f"author of {'e1' * 3}e"))
        ),
    ),
)


# -- 3. only a signed merge of two parents approves --------------------------------------------- -
for (set_name, files), parents in itertools.product(JOBSETS.items(), (3, 4, 8)):
    why = f"merge aaaaaaa has {parents} parents: octopus merges are not approvals"
    case(
        f"octopus-of-{parents}-with-{set_name}-approves-nothing",
        Case(
            merge(*files, parents=tuple(f"{i:02d}" * 20 for i in range(parents))),
            kind="unapproved",
            decisions={f.path: (False, "unapproved", why) for f in files},
            summary=why,
        ),
    )
for set_name, files in JOBSETS.items():
    why = "commit aaaaaaa is not a merge: approvals are signed merges into approved"
    case(
        f"single-parent-commit-with-{set_name}-approves-nothing",
        Case(
            merge(*files, parents=(FIRST,)),
            kind="unapproved",
            decisions={f.path: (False, "unapproved", why) for f in files},
        ),
    )
    for label, check, words in (
        ("unsigned", None, f"unsigned (judged by {WHERE})"),
        (
            "unknown-key",
            bad(),
            f"signed by SHA256:nobody, a key no approver holds (judged by {WHERE})",
        ),
        ("bad-signature", bad("BAD signature"), f"BAD signature (judged by {WHERE})"),
        ("expired", bad("key expired (policy says until 2020)"), "key expired (policy says until"),
    ):
        why = f"merge aaaaaaa is not a valid approval: {words}"
        case(
            f"{label}-merge-with-{set_name}-approves-nothing",
            Case(
                merge(*files, signer=None, signature=check, approvers=("bob", "carol")),
                kind="unapproved",
                decisions={f.path: (False, "unapproved", f"~{why}") for f in files},
            ),
        )
case(
    "unsigned-merge-of-other-files-only-is-other-and-leaves-them-unapproved",
    Case(
        merge(other_file("scripts/x.sh"), signer=None),
        kind="other",
        summary="changes no job or policy; not a signed approval",
        check=lambda r: dict(r.unapproved) == {"scripts/x.sh": MERGE} and not r.content_approved,
    ),
)

# -- 4. what a vote covers: path, mode and blob, what the proposal changed ------------------------
for person in ("bob", "carol", "dave"):
    votes = (approval(person, (HELLO,), named={HELLO.path: blob("older")}),)
    case(
        f"stale-blob-vote-of-{person}-is-named-stale",
        Case(
            merge(HELLO, approvals=votes),
            policy=TWO,
            decisions={
                HELLO.path: (
                    False,
                    "unapproved",
                    f"not approved: 1 of 2 approvals: needs 2 approvals (approvals_required); "
                    f"counted: alice (merge signature of aaaaaaa); not counted: {person} "
                    f"(approval commit abababa: stale: approves blob {blob('older')[:7]}, merged "
                    f"blob is {HELLO.after.blob[:7]})",
                )
            },
        ),
    )
    mode = (approval(person, (HELLO,), named={HELLO.path: f"100755 {HELLO.after.blob}"}),)
    case(
        f"stale-mode-vote-of-{person}-is-named-stale",
        Case(
            merge(HELLO, approvals=mode),
            policy=TWO,
            decisions={
                HELLO.path: (
                    False,
                    "unapproved",
                    "~stale: approves mode 100755, merged mode is 100644 (a vote binds path, "
                    "mode and blob)",
                )
            },
        ),
    )
    unchanged = (approval(person, (HELLO,), changed=frozenset()),)
    case(
        f"vote-of-{person}-on-a-path-the-proposal-did-not-change-does-not-cover-it",
        Case(
            merge(HELLO, approvals=unchanged),
            policy=TWO,
            decisions={
                HELLO.path: (
                    False,
                    "unapproved",
                    "~the proposal did not change this file relative to its merge base with "
                    "approved, so the vote does not cover it",
                )
            },
        ),
    )
    wrote = job("jobs/hello.yaml", merge_wrote=True, writers=())
    case(
        f"vote-of-{person}-does-not-cover-what-the-merge-itself-wrote",
        Case(
            merge(wrote, signer="dave" if person != "dave" else "bob", approvers=(person,)),
            policy=TWO,
            decisions={
                wrote.path: (
                    False,
                    "unapproved",
                    "~the merge itself wrote this content (not the reviewed proposal)",
                )
            },
        ),
    )
    for value, words in (
        ("abc", "names blob 'abc', not a full 40-hex id"),
        ("Z" * 40, f"names blob {'Z' * 40!r}, not a full 40-hex id"),
        (f"100600 {HELLO.after.blob}", "names mode '100600', not 100644, 100755 or 120000"),
    ):
        named = (approval(person, (HELLO,), named={HELLO.path: value}),)
        case(
            f"vote-of-{person}-naming-{value[:6]}-is-refused-for-its-words",
            Case(
                merge(HELLO, approvals=named),
                policy=TWO,
                decisions={HELLO.path: (False, "unapproved", f"~{words}")},
            ),
        )
    forged = (approval(person, (HELLO,), check=bad()),)
    case(
        f"approval-commit-claiming-{person}-with-an-unknown-key-does-not-count",
        Case(
            merge(HELLO, approvals=forged),
            policy=TWO,
            decisions={
                HELLO.path: (
                    False,
                    "unapproved",
                    "~not counted: SHA256:nobody (approval commit abababa: signed by "
                    f"SHA256:nobody, a key no approver holds (judged by {WHERE}))",
                )
            },
        ),
    )
    tree = ApprovalFacts(
        "ab" * 20, good(person), {}, {HELLO.path: HELLO.after}, False, frozenset({HELLO.path})
    )
    case(
        f"tree-approval-of-{person}-covers-the-file-as-in-its-tree",
        Case(
            merge(HELLO, approvals=(tree,)),
            policy=TWO,
            decisions={HELLO.path: (True, "", f"~by alice, {person}")},
        ),
    )
    mismatch = replace(tree, tree_mismatch=True)
    case(
        f"tree-approval-of-{person}-not-naming-its-own-tree-is-refused",
        Case(
            merge(HELLO, approvals=(mismatch,)),
            policy=TWO,
            decisions={HELLO.path: (True, "", f"~by alice, {person}")},
            check=lambda r: (
                "its Mergegate-Approve-Tree does not name its own tree"
                in describe_votes(r.decisions[0].votes)
            ),
        ),
    )
    absent = replace(tree, tree={})
    case(
        f"tree-approval-of-{person}-without-the-file-approves-its-deletion-only",
        Case(
            merge(HELLO, approvals=(absent,)),
            policy=TWO,
            decisions={HELLO.path: (False, "unapproved", "~stale: approves blob 0000000")},
        ),
    )

# -- 5. writers and signers never count for what they wrote ------------------------------------ --
for person in PEOPLE:
    authored = job("jobs/hello.yaml", writers=(writer("e1" * 20, author=person),))
    others = [p for p in PEOPLE if p != person]
    case(
        f"author-{person}-signing-the-merge-of-her-job-is-not-counted",
        Case(
            merge(authored, signer=person),
            decisions={
                authored.path: (
                    False,
                    "unapproved",
                    "not approved: 0 of 1 approvals: needs 1 approval (approvals_required); "
                    f"counted: none; not counted: {person} (merge signature of aaaaaaa: author "
                    "of e1e1e1e)",
                )
            },
        ),
    )
    case(
        f"author-{person}-approving-her-job-counts-when-self-approval-is-allowed",
        Case(
            merge(authored, signer=person),
            policy=SELF,
            decisions={authored.path: (True, "", "~quorum met")},
            check=lambda r: r.decisions[0].self_approved,
        ),
    )
    case(
        f"author-{person}-needs-another-approver-{others[0]}",
        Case(
            merge(authored, signer=others[0]),
            decisions={authored.path: (True, "", f"~by {others[0]}")},
        ),
    )
    signed = job("jobs/hello.yaml", writers=(writer("e2" * 20, author="erin", signer=person),))
    case(
        f"signer-{person}-of-a-commit-writing-the-job-is-not-counted",
        Case(
            merge(signed, signer=person),
            decisions={
                signed.path: (False, "unapproved", "~signed e2e2e2e, which changes the file")
            },
        ),
    )
    by_email = job(
        "jobs/hello.yaml",
        writers=(Writer("e3" * 20, "Someone Else", f"{person.upper()}@example.com", None, ""),),
    )
    case(
        f"author-{person}-is-known-by-email-in-any-case",
        Case(
            merge(by_email, signer=person),
            decisions={by_email.path: (False, "unapproved", "~author of e3e3e3e")},
        ),
    )
    single = merge(HELLO, signer=person, parents=(FIRST,), review=Review("reviews on PR #3", ""))
    case(
        f"squash-author-{person}-is-a-writer-of-what-it-merged",
        Case(
            replace(
                single,
                extra_votes=((HELLO.path, Vote(person, "review 1 on PR #3", True, "")),),
            ),
            decisions={HELLO.path: (False, "unapproved", f"~{person} (review 1 on PR #3: ")},
        ),
    )


# -- quorums: totals and groups (a production job needs sre and security) ----------------------- -
def _prod_met(people: set[str]) -> bool:
    return bool(people & {"alice", "bob"}) and "carol" in people


for size in range(0, 4):
    for voters in itertools.combinations(PEOPLE, size):
        signer, approvers = (voters[0], voters[1:]) if voters else (None, ())
        facts = merge(PROD, signer=signer, approvers=approvers)
        if signer is None:
            facts = replace(facts, proposal=True)
        met = _prod_met(set(voters))
        who = "-".join(voters) or "nobody"
        case(
            f"prod-job-approved-by-{who}-{'runs' if met else 'waits'}",
            Case(
                facts,
                decisions={
                    PROD.path: (met, "" if met else "unapproved", "~" if met else "~not approved")
                },
            ),
        )
        two_met = len(voters) >= 2
        case(
            f"two-person-rule-with-{who}-{'runs' if two_met else 'waits'}",
            Case(
                merge(HELLO, signer=signer, approvers=approvers, proposal=signer is None),
                policy=TWO,
                decisions={
                    HELLO.path: (
                        two_met,
                        "" if two_met else "unapproved",
                        "~quorum met" if two_met else f"~{len(voters)} of 2 approvals",
                    )
                },
            ),
        )
# -- 6. other files: their quorum, and what stays unapproved --------------------------------------
for person in PEOPLE:
    script = other_file("scripts/run.sh")
    second = next(p for p in PEOPLE if p != person)
    case(
        f"script-merged-by-{person}-and-approved-by-{second}-is-approved-with-its-job",
        Case(
            merge(HELLO, script, signer=person, approvers=(second,)),
            decisions={HELLO.path: (True, "", "~quorum met")},
            summary=f"approval by {person}; other files: quorum met: 2 approvals (other files: "
            f"the highest job requirement) by {', '.join(sorted((person, second)))}",
            check=lambda r: (
                r.content_approved
                and "scripts/run.sh" not in r.unapproved
                and len(r.content_reviewers) == 2
            ),
        ),
    )
    case(
        f"script-merged-by-{person}-alone-needs-the-strictest-job-requirement-and-taints",
        Case(
            merge(HELLO, script, signer=person),
            decisions={HELLO.path: (False, "denied", "~scripts/run.sh (changed by aaaaaaa)")},
            check=lambda r: (
                not r.content_approved and dict(r.unapproved) == {"scripts/run.sh": MERGE}
            ),
        ),
    )
    own = replace(merge(HELLO, script, signer=person), content_writers=(writer("e4" * 20, person),))
    case(
        f"script-written-by-{person}-and-merged-by-her-stays-unapproved-and-taints",
        Case(
            own,
            decisions={
                HELLO.path: (
                    False,
                    "denied",
                    "the tree at aaaaaaa holds changes that no signed approval covers: "
                    "scripts/run.sh (changed by aaaaaaa); put them back to their last approved "
                    "version (or remove them), then propose the change again",
                )
            },
            # Who counted for the script, its writer not among them (a source summary's review).
            check=lambda r: (
                dict(r.unapproved) == {"scripts/run.sh": MERGE} and r.content_reviewers == ()
            ),
        ),
    )
    case(
        f"unapproved-file-from-before-taints-a-job-merged-by-{person}",
        Case(
            merge(HELLO, signer=person),
            unapproved={"scripts/old.sh": "bb" * 20},
            decisions={
                HELLO.path: (False, "denied", "~scripts/old.sh (changed by bbbbbbb)"),
            },
        ),
    )
    back = FileFacts(
        "scripts/old.sh",
        Entry("100644", blob("bad")),
        Entry("100644", blob("good")),
        Entry("100644", blob("bad")),
        Entry("100644", blob("good")),
        last_approved=Entry("100644", blob("good")),
    )
    case(
        f"unapproved-file-put-back-by-{person}-no-longer-taints",
        Case(
            replace(
                merge(HELLO, back, signer=person), content_writers=(writer("e5" * 20, person),)
            ),
            unapproved={"scripts/old.sh": "bb" * 20},
            decisions={HELLO.path: (True, "", "~quorum met")},
            check=lambda r: dict(r.unapproved) == {},
        ),
    )
case(
    "a-job-file-that-reaches-no-quorum-holds-no-id-and-stays-unapproved",
    Case(
        merge(HELLO, signer="alice"),
        policy=TWO,
        decisions={HELLO.path: (False, "unapproved", "~1 of 2 approvals")},
        check=lambda r: dict(r.unapproved) == {HELLO.path: MERGE},
    ),
)
case(
    "signed-proposals-rule-refuses-other-files-from-an-unsigned-commit",
    Case(
        replace(
            merge(HELLO, other_file("a.txt"), signer="alice"),
            content_writers=(writer("e6" * 20, "erin"),),
        ),
        policy=SIGNED,
        summary="~other files: require_signed_proposals: commit e6e6e6e that changes other files "
        f"is not signed by a key in {WHERE}",
    ),
)

# -- removed jobs ---------------------------------------------------------------------------------
for person in (*PEOPLE, None):
    gone = FileFacts("jobs/old.yaml", Entry("100644", blob("x")), ABSENT, ABSENT, ABSENT)
    by = f"merge signed by {person}" if person else "not a signed approval"
    case(
        f"removing-a-job-merged-by-{person}-is-other-and-says-so",
        Case(
            merge(gone, signer=person),
            kind="other",
            summary=f"removes jobs/old.yaml; {by}",
            check=lambda r: r.decisions == (),
        ),
    )
    case(
        f"removing-an-unapproved-job-in-an-approval-by-{person}-forgets-it",
        Case(
            merge(gone, HELLO, signer=person),
            unapproved={"jobs/old.yaml": "cc" * 20},
            kind="approval" if person else "unapproved",
            check=lambda r: (
                dict(r.unapproved) == ({} if r.kind == "approval" else {HELLO.path: MERGE})
            ),
        ),
    )

# -- 8. each job revision: valid, unique, allowed, signed, no escaping symlink ---------------------
for mode, what in (
    ("120000", "a symlink"),
    ("160000", "a gitlink (submodule)"),
    ("040000", "a directory"),
    ("100600", "mode 100600"),
):
    for person in PEOPLE:
        odd = job("jobs/hello.yaml", mode=mode)
        case(
            f"job-path-holding-{what.replace(' ', '-')}-merged-by-{person}-is-invalid",
            Case(
                merge(odd, signer=person),
                decisions={
                    odd.path: (
                        False,
                        "invalid",
                        f"invalid job file: jobs/hello.yaml is {what}, not a regular file "
                        "(jobs/hello.yaml)",
                    )
                },
            ),
        )
for label, text, words in (
    ("id-mismatch", job_text("other"), "'other' must equal the file name 'hello'"),
    ("not-yaml", b"id: hello\ncommand: [echo\n", "~"),
    ("no-command", b"id: hello\n", "~command"),
    ("not-a-mapping", b"- just\n- a list\n", "~"),
    ("binary", b"\xff\xfe\x00\x01", "~"),
):
    for person in ("alice", "bob"):
        bad_job = job("jobs/hello.yaml", text)
        case(
            f"job-file-{label}-merged-by-{person}-is-invalid",
            Case(
                merge(bad_job, signer=person),
                decisions={
                    bad_job.path: (
                        False,
                        "invalid",
                        f"~{words}" if not words.startswith("~") else "~invalid job file: ",
                    )
                },
            ),
        )
for command, words in (
    ("[rm, -rf, /]", "no rule in policy/policy.yaml at c0c0c0c allows 'rm' with these arguments"),
    ("[df, /]", "no rule in policy/policy.yaml at c0c0c0c allows 'df' with these arguments"),
    ("[df, -h, /]", ""),
    ("[echo, anything]", ""),
):
    for person in PEOPLE:
        text = job_text("hello", command)
        j = job("jobs/hello.yaml", text)
        allowed = not words
        case(
            f"command-{command.strip('[]').replace(', ', '-').replace('/', 'root')}-by-"
            f"{person}-{'is-allowed' if allowed else 'is-denied'}",
            Case(
                merge(j, signer=person),
                decisions={
                    j.path: (
                        allowed,
                        "" if allowed else "denied",
                        "~allowed by commands["
                        if allowed
                        else f"denied by policy: {words} (deny by default)",
                    )
                },
            ),
        )
for extra, words in (
    ("env: {EDITOR: vim}\n", f"denied by policy: env EDITOR is not in env_allowlist in {WHERE}"),
    ("retries: 2\n", f"denied by policy: retries 2 exceeds max_retries 0 in {WHERE}"),
):
    j = job("jobs/hello.yaml", job_text("hello", extra=extra))
    case(
        f"job-with-{extra.split(':')[0]}-beyond-the-policy-is-denied",
        Case(merge(j), decisions={j.path: (False, "denied", words)}),
    )
slow = job("jobs/hello.yaml", b"id: hello\ncommand: [echo]\ntimeout_seconds: 301\n")
case(
    "job-timeout-beyond-the-limit-is-denied",
    Case(
        merge(slow),
        decisions={
            slow.path: (
                False,
                "denied",
                "denied by policy: timeout_seconds 301 exceeds limits.max_timeout_seconds 300 in "
                f"{WHERE}",
            )
        },
    ),
)
for other_path, unapproved, unique in (
    ("jobs/sub/hello.yaml", None, False),
    ("jobs/sub/hello.yml", None, False),
    ("jobs/sub/hello.yaml", {"jobs/sub/hello.yaml": "dd" * 20}, True),
    ("jobs/sub/other.yaml", None, True),
):
    ids = tuple(sorted({"jobs/hello.yaml", other_path}))
    case(
        f"job-id-also-at-{other_path}-{'unapproved' if unapproved else 'approved'}-"
        f"{'is-unique' if unique else 'is-not-unique'}",
        Case(
            merge(HELLO, job_ids=ids),
            unapproved=unapproved,
            decisions={
                HELLO.path: (True, "", "~quorum met")
                if unique
                else (False, "invalid", f"job id 'hello' is not unique: also {other_path}")
            },
        ),
    )
both = job("jobs/sub/hello.yaml")
case(
    "two-jobs-with-one-id-in-one-merge-are-both-invalid",
    Case(
        merge(HELLO, both, job_ids=("jobs/hello.yaml", "jobs/sub/hello.yaml")),
        unapproved={"jobs/sub/hello.yaml": "dd" * 20},
        decisions={
            HELLO.path: (False, "invalid", "~also jobs/sub/hello.yaml"),
            both.path: (False, "invalid", "~also jobs/hello.yaml"),
        },
    ),
)
for link, target, escapes in (
    ("data/up", b"../..", True),
    ("data/abs", b"/etc/passwd", True),
    ("up", b"..", True),
    ("a/b/c", b"../../../x", True),
    ("nul", b"ok\0", True),
    ("data/in", b"../scripts/x.sh", False),
    ("data/here", b"x", False),
    ("a/b/c", b"../../x", False),
):
    for person in ("alice", "carol"):
        case(
            f"symlink-{link.replace('/', '-')}-to-{target.decode(errors='replace')[:12]}-"
            f"merged-by-{person}-{'denies-every-job' if escapes else 'is-fine'}",
            Case(
                merge(HELLO, signer=person, symlinks=((link, target),)),
                decisions={
                    HELLO.path: (False, "denied", "~points outside the workspace")
                    if escapes
                    else (True, "", "~quorum met")
                },
            ),
        )
for person in PEOPLE:
    unsigned_job = job("jobs/hello.yaml", writers=(writer("e7" * 20, "erin"),))
    case(
        f"signed-proposals-rule-denies-a-job-from-an-unsigned-commit-merged-by-{person}",
        Case(
            merge(unsigned_job, signer=person),
            policy=SIGNED,
            decisions={
                unsigned_job.path: (
                    False,
                    "denied",
                    "require_signed_proposals: commit e7e7e7e that changes jobs/hello.yaml is not "
                    f"signed by a key in {WHERE} (unsigned)",
                )
            },
        ),
    )
    signed_job = job("jobs/hello.yaml", writers=(writer("e8" * 20, "erin", signer="erin"),))
    case(
        f"signed-proposals-rule-accepts-a-signed-job-merged-by-{person}",
        Case(
            merge(signed_job, signer=person),
            policy=SIGNED,
            decisions={signed_job.path: (True, "", "~quorum met")},
        ),
    )

# -- 7. policy changes -------------------------------------------------------------------------- -
NEW_POLICY = _policy_yaml("keep_output: true\n")


def policy_change(text: bytes = NEW_POLICY, mode: str = "100644", **kwargs: object) -> FileFacts:
    old = Entry("100644", blob(_policy_yaml()))
    new = Entry(mode, blob(text))
    return FileFacts("policy/policy.yaml", old, new, old, new, (writer("e9" * 20, "erin"),), text)


def _tree(text: bytes = NEW_POLICY, mode: str = "100644") -> dict[str, tuple[str, bytes]]:
    return {"policy/policy.yaml": (mode, text)}


for size in range(0, 5):
    for voters in itertools.combinations(PEOPLE, size):
        signer, approvers = (voters[0], voters[1:]) if voters else ("erin", ())
        change = policy_change()
        facts = merge(change, signer=None, approvers=approvers, policy_tree=_tree())
        if voters:
            facts = replace(facts, signature=good(signer))
        adopted = len(voters) >= 2
        who = "-".join(voters) or "nobody"
        expected = (
            "~quorum met: 2 approvals (policy_approvals_required)"
            if adopted
            else f"~merge aaaaaaa changes policy/ without approval ({len(voters)} of 2 approvals"
        )
        if not voters:
            expected = "~is not a valid approval: unsigned"
        case(
            f"policy-change-approved-by-{who}-is-{'adopted' if adopted else 'refused'}",
            Case(
                facts,
                kind="approval" if adopted else "unapproved",
                summary=expected,
                check=lambda r, adopted=adopted: (
                    r.policy_changed
                    and r.policy_adopted == adopted
                    and (r.policy.keep_output if adopted else not r.policy.keep_output)
                ),
            ),
        )
        with_job = merge(change, HELLO, signer=None, approvers=approvers, policy_tree=_tree())
        if voters:
            with_job = replace(with_job, signature=good(signer))
        case(
            f"job-merged-with-a-policy-change-approved-by-{who}-"
            f"{'runs' if adopted else 'is-refused-with-it'}",
            Case(
                with_job,
                kind="approval" if adopted else "unapproved",
                decisions={
                    HELLO.path: (True, "", "~quorum met") if adopted else (False, "unapproved", "~")
                },
            ),
        )
for label, tree, words in (
    (
        "symlink",
        _tree(mode="120000"),
        "the new policy is invalid: policy/policy.yaml (a symlink) under policy/ is not a regular "
        "file",
    ),
    ("not-yaml", _tree(b"version: [1\n"), "~the new policy is invalid: "),
    ("unknown-field", _tree(b"version: 1\nbogus: 1\n"), "~the new policy is invalid: "),
    ("deleted", {}, "~the new policy is invalid: no policy/policy.yaml at aaaaaaa"),
):
    for voters in (("alice", "bob"), ("alice", "bob", "carol")):
        facts = merge(policy_change(), signer=voters[0], approvers=voters[1:], policy_tree=tree)

        def _invalid(result: Assessment, words: str = words) -> bool:
            verdict = result.policy_verdict
            return (
                verdict is not None
                and verdict.refusal == "invalid"
                and _matches(words, verdict.reason)
            )

        case(
            f"invalid-policy-{label}-is-refused-whoever-approves-{len(voters)}",
            Case(facts, kind="unapproved", check=_invalid),
        )
case(
    "policy-drift-the-merge-does-not-change-is-refused",
    Case(
        merge(
            policy_change(),
            signer="alice",
            approvers=("bob",),
            policy_tree=_tree(),
            policy_drift=("policy/keys/x.pub",),
        ),
        kind="unapproved",
        summary="merge aaaaaaa changes policy/ without approval (policy/keys/x.pub differ from the "
        f"policy in force ({WHERE}) but this merge does not change them, so nobody approved them);"
        " nothing in it is approved",
    ),
)
case(
    "policy-change-under-signed-proposals-from-an-unsigned-commit-is-denied",
    Case(
        merge(policy_change(), signer="alice", approvers=("bob",), policy_tree=_tree()),
        policy=SIGNED,
        kind="unapproved",
        check=lambda r: r.policy_verdict is not None and r.policy_verdict.refusal == "denied",
    ),
)
case(
    "proposal-with-a-policy-change-waiting-for-its-merge-still-judges-its-jobs",
    Case(
        merge(policy_change(), HELLO, signer=None, proposal=True, policy_tree=_tree()),
        decisions={HELLO.path: (False, "unapproved", "~not approved: 0 of 1 approvals")},
        summary="~proposal; policy change pending: 0 of 2 approvals",
    ),
)

# -- GitHub review evidence --------------------------------------------------------------------- -
for person in PEOPLE:
    reviewed = merge(
        HELLO,
        signer=None,
        review=Review("reviews on PR #3 (merge)", ""),
        extra_votes=((HELLO.path, Vote(person, "review 7 on PR #3", True, "")),),
    )
    case(
        f"review-approval-by-{person}-approves-a-merge-github-made",
        Case(
            reviewed,
            decisions={
                HELLO.path: (True, "", f"~quorum met: 1 approval (approvals_required) by {person}")
            },
            summary="approval by reviews on PR #3 (merge)",
        ),
    )
    excluded = replace(
        reviewed, review=Review("reviews on PR #3 (merge)", "", ((person, "author of PR #3"),))
    )
    case(
        f"review-by-{person}-who-authored-the-pull-request-is-not-counted",
        Case(
            excluded,
            decisions={HELLO.path: (False, "unapproved", "~author of PR #3")},
        ),
    )
    refused = replace(
        reviewed, review=Review("reviews on PR #3 (rebase)", "a rebase approves nothing")
    )
    case(
        f"refused-review-evidence-with-{person}-approves-nothing",
        Case(
            refused,
            kind="unapproved",
            summary="aaaaaaa is not a review approval: a rebase approves nothing",
        ),
    )
    merge_wrote = job("jobs/hello.yaml", merge_wrote=True, writers=())
    wrote = replace(
        reviewed,
        files=(merge_wrote,),
        extra_votes=((merge_wrote.path, Vote(person, "review 7 on PR #3", True, "")),),
    )
    case(
        f"review-by-{person}-does-not-cover-what-a-github-merge-wrote-itself",
        Case(
            wrote,
            decisions={
                merge_wrote.path: (
                    False,
                    "unapproved",
                    "~the merge itself wrote this content (not the reviewed pull request)",
                )
            },
        ),
    )

# -- proposals (check, approve --merge) -----------------------------------------------------------
for person in (*PEOPLE, None):
    facts = merge(HELLO, signer=None, proposal=True, merger=person)
    runs = person is not None
    case(
        f"proposal-merged-by-{person}-{'would-run' if runs else 'waits-for-its-merge'}",
        Case(
            facts,
            decisions={
                HELLO.path: (runs, "" if runs else "unapproved", "~quorum met" if runs else "~0 of")
            },
            summary=f"approval by {person}" if person else "proposal",
        ),
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_the_judge_decides(name: str) -> None:
    _judge(CASES[name])


def test_the_tables_cover_hundreds_of_cases() -> None:
    """The tables are the fast tier for the judge: a rule without its table would show here."""
    assert len(CASES) >= 300, len(CASES)


def test_prod_quorum_reason_names_the_unfilled_groups() -> None:
    result = judge_commit(merge(PROD, signer="alice", approvers=("bob",)), POLICY)
    assert result.decisions[0].reason == (
        "not approved: approvals by alice, bob do not fill 1 from sre and 1 from security "
        "(approval_rules[0] (production)); counted: alice (merge signature of aaaaaaa), bob "
        "(approval commit 0101010)"
    )


def test_escaping_symlink_names_the_first_link_that_leaves_the_tree() -> None:
    links = (("ok", b"x"), ("data/up", b"../../etc"), ("abs", b"/etc"))
    assert escaping_symlink(links) == "a symlink data/up -> ../../etc"
    assert escaping_symlink(links[:1]) == ""


def test_a_malformed_commit_refuses_its_valid_jobs_by_their_id() -> None:
    """A refused job's record names its id when the file is valid, even when nothing approves."""
    result = judge_commit(merge(HELLO, malformed="x"), POLICY)
    assert result.decisions[0].job is not None and result.decisions[0].job.id == "hello"


def test_reviewed_by_counts_the_fewest_people_other_than_writers_for_any_change() -> None:
    """What a SLSA source summary's SLSA_SOURCE_TWO_PARTY_REVIEWED rests on (issue 25): the
    people the judge counted, none of them a writer of what they approved, for every change."""
    script = other_file("scripts/run.sh")
    assert judge_commit(merge(HELLO, signer="alice"), POLICY).reviewed_by == 1
    assert judge_commit(merge(HELLO, signer="alice", approvers=("bob",)), POLICY).reviewed_by == 2
    # The fewest over every change: bob's approval names one job of the two.
    other = job("jobs/other.yaml")
    partly = merge(HELLO, other, signer="alice", approvals=(approval("bob", (HELLO,)),))
    assert judge_commit(partly, POLICY).reviewed_by == 1
    both = judge_commit(merge(HELLO, script, signer="alice", approvers=("bob",)), POLICY)
    assert both.content_approved and both.reviewed_by == 2
    # A writer whose vote counts under allow_self_approval is no second party.
    authored = job("jobs/hello.yaml", writers=(writer("e1" * 20, author="alice"),))
    mine = judge_commit(merge(authored, signer="alice", approvers=("bob",)), SELF)
    assert mine.decisions[0].approved and mine.reviewed_by == 1
    # Nothing approved, nothing reviewed.
    assert judge_commit(merge(HELLO, signer=None), POLICY).reviewed_by == 0
    assert judge_commit(merge(PROD, signer="alice", approvers=("bob",)), POLICY).reviewed_by == 0
