"""GitHub evidence as stored values: what the API answered, and what git says about a merge.

An `Evidence` file lives on the audit branch as `audit/evidence/<sha256>.json`, named by
the SHA-256 of its bytes, only ever added; records name it in `evidence: [...]`.
Each answer inside keeps its URL, status, `x-github-request-id`, time, SHA-256 and the
exact body, so anyone with a clone re-derives the decision offline (`reviews.judge`).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from mergegate.errors import IntegrityError
from mergegate.github.http import Malformed, Response, next_link

EVIDENCE_DIR = "audit/evidence/"
EVIDENCE_VERSION = 1


@dataclass(frozen=True)
class Exchange:
    """One API answer as it was received."""

    url: str
    status: int
    request_id: str
    at: str
    sha256: str
    body: str  # the exact body, UTF-8
    link: str = ""  # the Link header (pagination), "" when there was none

    @classmethod
    def of(cls, response: Response) -> Exchange:
        try:
            text = response.body.decode("utf-8")
        except UnicodeDecodeError:
            raise Malformed(
                f"GET {response.url}: the body is not UTF-8",
                url=response.url,
                status=response.status,
            ) from None
        return cls(
            response.url,
            response.status,
            response.request_id,
            response.at,
            response.sha256,
            text,
            response.link,
        )

    def json(self) -> Any:
        return json.loads(self.body)

    def as_json(self) -> dict[str, object]:
        data = {
            "url": self.url,
            "status": self.status,
            "request_id": self.request_id,
            "at": self.at,
            "sha256": self.sha256,
            "body": self.body,
        }
        if self.link:  # only then: evidence of answers without one keeps its bytes (and name)
            data["link"] = self.link
        return data


@dataclass(frozen=True)
class Evidence:
    """Everything GitHub said about one commit on `approved`, in the order it was asked."""

    commit: str  # the commit on approved
    repository: str
    api_url: str
    pull: int | None  # the pull request it merged, None when the lookup found none
    exchanges: tuple[Exchange, ...]
    gathered_at: str
    truncated: str = ""  # why gathering stopped at a bound ("" when complete): the merge is refused

    def to_bytes(self) -> bytes:
        data: dict[str, object] = {
            "kind": "github-evidence",
            "version": EVIDENCE_VERSION,
            "commit": self.commit,
            "repository": self.repository,
            "api_url": self.api_url,
            "pull": self.pull,
            "gathered_at": self.gathered_at,
            "exchanges": [e.as_json() for e in self.exchanges],
        }
        if (
            self.truncated
        ):  # only then: the bytes (and names) of complete evidence stay as they were
            data["truncated"] = self.truncated
        return (
            json.dumps(data, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n"
        ).encode()

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()

    @property
    def path(self) -> str:
        return f"{EVIDENCE_DIR}{self.sha256}.json"

    @classmethod
    def from_bytes(cls, data: bytes, *, name: str) -> Evidence:
        """Parse a stored evidence file; a name that is not its hash, or a body that is not its
        recorded hash, is tampering."""
        where = f"{EVIDENCE_DIR}{name}.json"
        if hashlib.sha256(data).hexdigest() != name:
            raise IntegrityError(
                f"evidence file {where} is not named by its SHA-256: tampering", file=where
            )
        try:
            doc = json.loads(data)
            exchanges = tuple(
                Exchange(
                    e["url"],
                    int(e["status"]),
                    e["request_id"],
                    e["at"],
                    e["sha256"],
                    e["body"],
                    str(e.get("link", "")),
                )
                for e in doc["exchanges"]
            )
            evidence = cls(
                doc["commit"],
                doc["repository"],
                doc["api_url"],
                doc["pull"],
                exchanges,
                doc["gathered_at"],
                str(doc.get("truncated", "")),
            )
        except (ValueError, KeyError, TypeError) as exc:
            raise IntegrityError(
                f"evidence file {where} is malformed ({exc.__class__.__name__}): tampering",
                file=where,
            ) from None
        if doc.get("kind") != "github-evidence" or doc.get("version") != EVIDENCE_VERSION:
            raise IntegrityError(
                f"evidence file {where} is not GitHub evidence version {EVIDENCE_VERSION}",
                file=where,
            )
        for exchange in exchanges:
            if hashlib.sha256(exchange.body.encode("utf-8")).hexdigest() != exchange.sha256:
                raise IntegrityError(
                    f"evidence file {where}: the body of {exchange.url} does not match its "
                    "SHA-256: tampering",
                    file=where,
                )
        return evidence

    def _is(self, url: str, suffix: str) -> bool:
        # Exactly this repository's resource: a page of /repos/other/x/pulls/1/reviews is not one of
        # ours.
        return _path(url) == _path(f"{self.api_url}/repos/{self.repository}{suffix}")

    def pages(self, suffix: str) -> list[Any]:
        """The items of every page of one listing (`/repos/<repository><suffix>`), in order.

        GitHub's Link headers name later pages as `/repositories/<id><suffix>` (its pagination
        docs show that form): such a page is one of ours when the page before it names it as
        next, which is how the runner came to ask for it.
        """
        items: list[Any] = []
        listing: list[Exchange] = []
        expected: str | None = None
        for exchange in self.exchanges:
            if self._is(exchange.url, suffix) or (
                exchange.url == expected and is_listing_page(exchange.url, self.api_url, suffix)
            ):
                listing.append(exchange)
                expected = next_link(exchange.link)
        for index, exchange in enumerate(listing):
            page = exchange.json()
            if not isinstance(page, list):
                raise Malformed(
                    f"{exchange.url}: expected a list", url=exchange.url, status=exchange.status
                )
            # Every page a stored Link header names as next is stored next: no page of it left out.
            following = next_link(exchange.link)
            if following is not None and (
                index + 1 >= len(listing) or listing[index + 1].url != following
            ):
                raise Malformed(
                    f"the evidence for {self.commit[:7]} stops before {following}, the page after "
                    f"{exchange.url}",
                    url=exchange.url,
                    status=exchange.status,
                )
            items += page
        return items

    def holds(self, suffix: str) -> bool:
        """Whether an answer for `/repos/<repository><suffix>` is stored."""
        return any(self._is(exchange.url, suffix) for exchange in self.exchanges)

    def one(self, suffix: str) -> Any:
        for exchange in self.exchanges:
            if self._is(exchange.url, suffix):
                return exchange.json()
        raise Malformed(
            f"the evidence for {self.commit[:7]} holds no answer for {suffix}", url=suffix
        )


class Ambiguous(Malformed):
    """GitHub lists several merged pull requests for one merge commit and the commit's message
    names none of them (or several): the merge is refused, never waited for."""


def pick_pull(lookup: list[Any], *, commit: str, repository: str, message: str = "") -> int | None:
    """The merged pull request whose merge commit `commit` is, from `commits/{sha}/pulls`.

    When GitHub lists several (a copy opened with the same head is marked merged too), the one
    the merge commit's message names is it: GitHub's button writes "Merge pull request #N from
    ..." (a merge) or "... (#N)" (a squash). Otherwise `Ambiguous`: a decision, never a wait.
    """
    found: set[int] = set()
    for item in lookup:
        if not isinstance(item, dict):
            raise Malformed(f"commits/{commit}/pulls: an item is not an object", url="")
        base = item.get("base") or {}
        repo = (base.get("repo") or {}).get("full_name")
        if (
            item.get("merge_commit_sha") == commit
            and item.get("merged_at")
            and repo == repository
            and type(item.get("number")) is int
        ):
            found.add(item["number"])
    if len(found) > 1:
        named = [n for n in sorted(found) if names_pull(message, n)]
        if len(named) == 1:
            return named[0]
        shown = ", ".join(f"#{n}" for n in sorted(found))
        raise Ambiguous(
            f"GitHub lists pull requests {shown} as merged with merge commit {commit[:7]}, and "
            f"its message names {'none' if not named else 'several'} of them",
            url="",
        )
    return found.pop() if found else None


def names_pull(message: str, number: int) -> bool:
    """Whether a merge commit's subject is the one GitHub's button writes for PR `number`."""
    subject = message.split("\n", 1)[0].strip()
    return subject.startswith(f"Merge pull request #{number} from ") or subject.endswith(
        f"(#{number})"
    )


@dataclass(frozen=True)
class MergeFacts:
    """What git says about the commit on approved (read by the caller, not here)."""

    sha: str
    parents: tuple[str, ...]
    tree: str
    author_time: int  # epoch seconds of the commit's author line
    committer_time: int
    message: str
    merge_signature: (
        str  # "" when policy.github.merge_keys is empty or the signature is good; else why not
    )
    squash_tree: str | None = (
        None  # tree of merging the PR head onto parents[0], when git could compute it
    )
    empty_commits: frozenset[str] = (
        frozenset()
    )  # merged commits that change nothing (approval commits): they wrote no content


def _path(url: str) -> str:
    return url.split("?", 1)[0].rstrip("/")


def is_listing_page(url: str, api_url: str, suffix: str, *, repository: str = "") -> bool:
    """Whether `url` is a page of the listing `<suffix>` of one repository, in either form GitHub
    uses: `/repos/<owner>/<name><suffix>` (`repository`, when given) or `/repositories/<id><suffix>`
    (what its Link headers name)."""
    path, api = _path(url), _path(api_url)
    if repository and path == f"{api}/repos/{repository}{suffix}".rstrip("/"):
        return True
    prefix, tail = f"{api}/repositories/", suffix.rstrip("/")
    if not (path.startswith(prefix) and path.endswith(tail)):
        return False
    repo_id = path[len(prefix) : len(path) - len(tail)]
    return repo_id.isascii() and repo_id.isdigit()
