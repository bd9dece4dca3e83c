"""Pull-request reviews as votes: a pure function of stored evidence, git facts and the policy.

`judge(evidence, facts, policy)` is what the runner, `check` and `verify` call on the same inputs,
so an offline `verify` re-derives every review-based decision. It never asks GitHub or git:
`github.gather` asked, `merge_facts` read git.

The rules (docs/github.md):
1. The commit is the merge commit of a merged pull request into `approved` of this
   repository; a merge commit's parents are [previous tip, head]; a squash's tree is
   what git computes merging the head onto the previous tip; a rebase approves nothing.
2. Per reviewer (`user.id`) the latest APPROVED, CHANGES_REQUESTED or DISMISSED review
   decides; COMMENTED never does; a DISMISSED latest review counts as nothing.
3. An APPROVED review counts only on the merged head, submitted after the head last
   changed, by a `User` whose id is a policy approver.
4. A latest CHANGES_REQUESTED by an approver blocks the merge.
5. The pull request's author and its commits' authors and committers never count; a
   commit GitHub maps to no account fails closed unless the policy allows it. A commit
   that changes nothing (a signed approval commit) wrote no content: its author is not
   excluded for it (git says which commits those are).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

from mergegate.github.evidence import Ambiguous, Evidence, MergeFacts, pick_pull
from mergegate.github.http import ApiObject, Malformed
from mergegate.rules.model import Vote
from mergegate.rules.policy import Policy

Method = Literal["merge", "squash", "rebase", "none"]
DECIDING = ("APPROVED", "CHANGES_REQUESTED", "DISMISSED")


@dataclass(frozen=True)
class Verdict:
    """What the reviews say about one merge: votes to add to the quorum, or why none count."""

    pull: int | None
    method: Method
    head: str
    votes: tuple[Vote, ...] = ()
    excluded: tuple[
        tuple[str, str], ...
    ] = ()  # (policy person, why) who may not count for this merge
    refused: str = ""  # why this is no review approval at all ("" when it is one)
    waiting: str = ""  # why the evidence is not yet there ("" when it is)

    @property
    def counted(self) -> tuple[str, ...]:
        return tuple(sorted({v.person for v in self.votes if v.counted}))


def judge(evidence: Evidence, facts: MergeFacts, policy: Policy, *, now: datetime) -> Verdict:
    """Review votes for `facts.sha` from `evidence`, under `policy` (the one at its first
    parent)."""
    try:
        return _judge(evidence, facts, policy, now=now)
    except (Malformed, KeyError, TypeError, ValueError, AttributeError) as exc:
        reason = exc.message if isinstance(exc, Malformed) else f"{exc.__class__.__name__}: {exc}"
        return Verdict(
            evidence.pull,
            "none",
            "",
            waiting=f"GitHub's answers for {facts.sha[:7]} are incomplete or malformed ({reason})",
        )


def _judge(evidence: Evidence, facts: MergeFacts, policy: Policy, *, now: datetime) -> Verdict:
    short = facts.sha[:7]
    if evidence.commit != facts.sha:
        return Verdict(
            None, "none", "", refused=f"the evidence is for {evidence.commit[:7]}, not {short}"
        )
    if evidence.pull is None and evidence.truncated:
        return Verdict(
            None,
            "none",
            "",
            refused=f"GitHub's answers about {short} cannot be judged on reviews "
            f"({evidence.truncated}); approve it with a signed merge",
        )
    if evidence.pull is None:
        age = now.timestamp() - facts.committer_time
        if -300 <= age <= policy.github.empty_lookup_minutes * 60:
            return Verdict(
                None, "none", "", waiting=f"GitHub lists no merged pull request for {short} yet"
            )
        return Verdict(
            None,
            "none",
            "",
            refused=f"GitHub lists no merged pull request whose merge commit is {short}",
        )
    number = evidence.pull
    disagrees = _lookup_disagrees(evidence, facts)
    if disagrees:
        return Verdict(number, "none", "", refused=disagrees)
    if evidence.truncated and not evidence.holds(f"/pulls/{number}"):
        return Verdict(number, "none", "", refused=_past_bounds(evidence, number))
    pr = evidence.one(f"/pulls/{number}")
    head = _sha(pr["head"]["sha"])
    if pr.get("merged") is not True or pr.get("merge_commit_sha") != facts.sha:
        return Verdict(number, "none", head, refused=f"PR #{number} is not merged as {short}")
    if pr["base"]["ref"] != "approved" or pr["base"]["repo"]["full_name"] != evidence.repository:
        return Verdict(
            number,
            "none",
            head,
            refused=f"PR #{number} merged into "
            f"{pr['base']['repo']['full_name']}:{pr['base']['ref']}, not "
            f"{evidence.repository}:approved",
        )
    if evidence.truncated:
        return Verdict(number, "none", head, refused=_past_bounds(evidence, number))
    method = _method(facts, head, evidence.pages(f"/pulls/{number}/commits"))
    if method == "rebase":
        return Verdict(
            number,
            "rebase",
            head,
            refused=f"{short} is a rebase merge of PR #{number}: rebase merges approve nothing "
            "(their commits are not the reviewed ones); use a merge commit or squash",
        )
    if method == "none":
        why = (
            "its parents are not [previous tip, PR head]"
            if len(facts.parents) > 1
            else "its tree is not the PR head merged onto the previous tip"
            if facts.squash_tree is not None
            else f"git could not compute the squash of {head[:7]} (fetch refs/pull/{number}/head)"
        )
        return Verdict(
            number,
            "none",
            head,
            refused=f"{short} does not merge exactly the head {head[:7]} of PR #{number}: {why}",
        )
    if facts.merge_signature:
        return Verdict(
            number,
            method,
            head,
            refused=f"github.merge_keys is set and {short} is not signed by one: "
            f"{facts.merge_signature}",
        )
    verdict = on_head(evidence, number, head, policy, pr=pr, empty=facts.empty_commits)
    return Verdict(
        number,
        method,
        head,
        verdict.votes,
        verdict.excluded,
        refused=verdict.refused,
        waiting=verdict.waiting,
    )


def _lookup_disagrees(evidence: Evidence, facts: MergeFacts) -> str:
    """Why the pull request the evidence judges is not the one its lookup names ("" when it is).

    The lookup may list several merged pull requests for one merge commit; the one the merge's
    message names is it (`pick_pull`), re-derived here so that verify checks the runner's choice.
    """
    lookup = f"/commits/{facts.sha}/pulls"
    if not evidence.holds(lookup):
        return ""
    why = ""
    try:
        chosen = pick_pull(
            evidence.pages(lookup),
            commit=facts.sha,
            repository=evidence.repository,
            message=facts.message,
        )
    except Ambiguous as exc:
        chosen, why = None, exc.message
    if chosen == evidence.pull:
        return ""
    why = why or f"GitHub's lookup names {f'PR #{chosen}' if chosen else 'no merged pull request'}"
    return f"the evidence judges PR #{evidence.pull}, but {why}"


def _past_bounds(evidence: Evidence, number: int) -> str:
    return (
        f"GitHub's answers about PR #{number} pass mergegate's bounds ({evidence.truncated}): it "
        "cannot be judged on reviews; approve it with a signed merge"
    )


def on_head(
    evidence: Evidence,
    number: int,
    head: str,
    policy: Policy,
    *,
    pr: ApiObject | None = None,
    empty: frozenset[str] = frozenset(),
) -> Verdict:
    """Rules 2-5 for pull request `number` at `head`: also what `check` shows on an open pull
    request."""
    pr = pr if pr is not None else evidence.one(f"/pulls/{number}")
    commits = evidence.pages(f"/pulls/{number}/commits")
    if type(pr.get("commits")) is not int or pr["commits"] != len(commits) or not commits:
        return Verdict(
            number,
            "none",
            head,
            refused=f"PR #{number} has {pr.get('commits')} commits, GitHub listed {len(commits)} "
            "(it lists at most 250): authorship cannot be checked",
        )
    if commits and commits[-1]["sha"] != head:
        return Verdict(
            number,
            "none",
            head,
            refused=f"PR #{number}'s last listed commit is not its head {head[:7]}",
        )
    excluded, unmapped = _excluded(
        policy, number, pr, [c for c in commits if c["sha"] not in empty]
    )
    if unmapped and not policy.github.allow_unmapped_authors:
        return Verdict(
            number,
            "none",
            head,
            excluded=excluded,
            refused=f"{unmapped}: authorship cannot be checked (github.allow_unmapped_authors is "
            "false)",
        )
    changed = _head_changed(evidence, number, head)
    votes, blockers = _votes(
        policy, number, head, changed, evidence.pages(f"/pulls/{number}/reviews"), dict(excluded)
    )
    if blockers:
        return Verdict(
            number,
            "none",
            head,
            votes,
            excluded,
            refused="changes requested by " + ", ".join(blockers),
        )
    return Verdict(number, "none", head, votes, excluded)


def _method(facts: MergeFacts, head: str, commits: list[Any]) -> Method:
    if len(facts.parents) == 2:
        return "merge" if facts.parents[1] == head else "none"
    if len(facts.parents) != 1:
        return "none"
    # A rebased commit keeps its original author time and message; a squash gets new ones.
    for item in commits:
        commit = item["commit"]
        if (
            _epoch(commit["author"]["date"]) == facts.author_time
            and commit["message"].strip() == facts.message.strip()
        ):
            return "rebase"
    return "squash" if facts.squash_tree is not None and facts.squash_tree == facts.tree else "none"


def _excluded(
    policy: Policy, number: int, pr: ApiObject, commits: list[Any]
) -> tuple[tuple[tuple[str, str], ...], str]:
    excluded: dict[str, str] = {}
    unmapped = ""

    def exclude(account: Any, why: str) -> None:
        person = policy.github_person(_id(account["id"]))
        if person is not None:
            excluded.setdefault(person.name, why)

    exclude(pr["user"], f"author of PR #{number}")
    for item in commits:
        short = _sha(item["sha"])[:7]
        for role in ("author", "committer"):
            account = item.get(role)
            if account is None:
                unmapped = (
                    unmapped or f"the {role} of commit {short} in PR #{number} is no GitHub account"
                )
            else:
                exclude(account, f"{role} of commit {short} in PR #{number}")
    return tuple(sorted(excluded.items())), unmapped


# Timeline events after which earlier reviews saw another diff: a force-push re-points them at
# the new head; a base change (the PR retargeted, say from a decoy branch to approved) or a
# restored head branch shows the same head against other content.
_RESETS = ("head_ref_force_pushed", "base_ref_changed", "head_ref_restored")


def _head_changed(evidence: Evidence, number: int, head: str) -> float:
    """When what the reviewers saw last changed: the latest force-push or base change, or the
    head commit's committer date."""
    latest = 0.0
    for event in evidence.pages(f"/issues/{number}/timeline"):
        kind = event.get("event")
        if kind in _RESETS:
            latest = max(latest, _epoch(event["created_at"]))
        elif kind == "committed" and event.get("sha") == head:
            latest = max(latest, _epoch(event["committer"]["date"]))
    return latest


def _votes(
    policy: Policy,
    number: int,
    head: str,
    changed: float,
    reviews: list[Any],
    excluded: dict[str, str],
) -> tuple[tuple[Vote, ...], list[str]]:
    latest: dict[int, ApiObject] = {}
    for review in sorted(
        reviews,
        key=lambda r: (_epoch(r["submitted_at"]) if r.get("submitted_at") else 0.0, _id(r["id"])),
    ):
        if review.get("user") is None or review.get("state") not in DECIDING:
            continue  # COMMENTED and PENDING never decide; a deleted account decides nothing
        latest[_id(review["user"]["id"])] = review
    votes: list[Vote] = []
    blockers: list[str] = []
    for uid, review in sorted(latest.items()):
        person = policy.github_person(uid)
        approver = person is not None and any(person.name == a.name for a in policy.approvers)
        name = (
            person.name
            if person is not None
            else f"GitHub user {uid} ({review['user'].get('login', '?')})"
        )
        via = f"review {review['id']} on PR #{number}"
        source = (("how", "review"), ("review", str(review["id"])), ("pull", str(number)))
        state = review["state"]
        if state == "CHANGES_REQUESTED":
            if approver:
                blockers.append(f"{name} ({via})")
            continue
        if state == "DISMISSED":
            votes.append(Vote(name, via, False, "dismissed", source=source))
            continue
        why = ""
        if review["user"].get("type") != "User":
            why = f"a {review['user'].get('type')} account, not a person"
        elif not approver:
            why = f"GitHub id {uid} is not an approver in {policy.where}"
        elif review.get("commit_id") != head:
            why = f"reviewed {str(review.get('commit_id'))[:7]}, not the merged head {head[:7]}"
        elif _epoch(review["submitted_at"]) <= changed:
            why = (
                "submitted before the pull request last changed (force-push, base change or new "
                f"head at {_iso(changed)})"
            )
        elif name in excluded:
            if policy.allow_self_approval:
                votes.append(
                    Vote(
                        name,
                        via + f", self-approved: {excluded[name]}",
                        True,
                        "",
                        self_approved=True,
                        source=source,
                    )
                )
                continue
            why = excluded[name]
        votes.append(Vote(name, via, not why, why, source=source))
    return tuple(votes), blockers


def _id(value: Any) -> int:
    """A GitHub id as GitHub sends it: a JSON integer (not `true`, not "101")."""
    if type(value) is not int:
        raise Malformed(f"{value!r} is not a GitHub id", url="")
    return value


def _sha(value: Any) -> str:
    if (
        not isinstance(value, str)
        or len(value) != 40
        or any(c not in "0123456789abcdef" for c in value)
    ):
        raise Malformed(f"{value!r} is not a commit id", url="")
    return value


def _epoch(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).astimezone(UTC).timestamp()


def _iso(epoch: float) -> str:
    return datetime.fromtimestamp(epoch, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
