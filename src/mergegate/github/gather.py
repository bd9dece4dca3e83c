"""Gathering GitHub's evidence for a merge on `approved`, and keeping it.

For a commit GitHub made when a pull request was merged, the runner asks the REST API which pull
request it was, what its head was, who reviewed what, and who wrote its commits. Every answer is
kept verbatim (URL, status, `x-github-request-id`, time, SHA-256 and body) in an `Evidence` value,
stored on the audit branch as `audit/evidence/<sha256>.json`, so `verify` re-derives every
review-based decision offline from it and the git objects. `reviews.judge` turns evidence into
votes; this module only asks and stores. Any failure is a `NotYet`: the job waits.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from mergegate.audit import grep as loggrep
from mergegate.audit import log as audit
from mergegate.audit.records import Record, Scanned
from mergegate.crypto.signatures import split_signed_commit, verify_signature
from mergegate.errors import GitError, IntegrityError, NotYet, UsageError
from mergegate.git.repo import Repo
from mergegate.github.evidence import (
    EVIDENCE_DIR,
    Ambiguous,
    Evidence,
    Exchange,
    MergeFacts,
    is_listing_page,
    pick_pull,
)
from mergegate.github.http import AGAIN, Client, Malformed, TooLarge, redact_url, url_problem
from mergegate.rules.policy import Policy

if (
    TYPE_CHECKING
):  # reviews.py is imported when a merge's reviews are judged: most passes judge none
    from mergegate.github.reviews import Verdict

DEFAULT_API_URL = "https://api.github.com"
PER_PAGE = 100
# 5,000 reviews or commits (GitHub lists at most 250 commits): far beyond a real pull request
MAX_PAGES = 50
# The timeline also holds every comment, which anyone may add on a public repository.
MAX_TIMELINE_PAGES = 100
MAX_EVIDENCE_BYTES = (
    48 * 1024 * 1024
)  # all answers about one merge; evidence is stored on the audit branch


@dataclass(frozen=True)
class Settings:
    """Where the API is and which repository is the gate, from the Actions environment."""

    api_url: str
    repository: str  # "owner/name", GITHUB_REPOSITORY
    token: str | None  # GITHUB_TOKEN or GH_TOKEN; never printed, never stored

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Settings | None:
        """The settings, or None when GITHUB_REPOSITORY is unset (GitHub evidence is not in use)."""
        env = os.environ if env is None else env
        repository = env.get("GITHUB_REPOSITORY", "").strip()
        if not repository:
            return None
        if repository.count("/") != 1 or not all(repository.split("/")):
            raise UsageError(
                f"GITHUB_REPOSITORY={repository!r} is not owner/name",
                hint="GitHub Actions sets it; by hand, export GITHUB_REPOSITORY=owner/name",
            )
        token = env.get("GITHUB_TOKEN") or env.get("GH_TOKEN") or None
        api_url = (env.get("GITHUB_API_URL") or DEFAULT_API_URL).rstrip("/")
        problem = url_problem(api_url)
        if problem:
            raise UsageError(
                f"GITHUB_API_URL={redact_url(api_url)!r} {problem}",
                hint="GitHub Actions sets it (https://api.github.com, or https://<host>/api/v3 on "
                "GitHub Enterprise Server)",
            )
        return cls(api_url=api_url, repository=repository, token=token)

    def client(self, **options: Any) -> Client:
        return Client(self.api_url, token=self.token, **options)

    def __repr__(self) -> str:  # the token stays out of every repr, log and traceback
        return (
            f"Settings(api_url={self.api_url!r}, repository={self.repository!r}, "
            f"token={'***' if self.token else None})"
        )


def merge_facts(
    repo: Repo, sha: str, policy: Policy, *, head: str | None, at: datetime
) -> MergeFacts:
    """The git side of a GitHub merge: parents, tree, times, merge_keys signature, squash tree.

    `head` is the pull request's head (from the evidence); for a squash it must be in
    the repository (`fetch_pull_head`), else the squash tree stays unknown and the
    merge is refused for now.
    """
    commit = repo.commit(sha)
    author_time, committer_time = _times(commit.raw)
    signature = ""
    if policy.github.merge_keys:
        split = split_signed_commit(commit.raw)
        check = (
            verify_signature(split[0], split[1], policy.github.merge_keys, at=at) if split else None
        )
        signature = "unsigned" if check is None else ("" if check.ok else check.reason)
    squash_tree = None
    if len(commit.parents) == 1 and head is not None and repo.has_object(head):
        try:
            squash_tree = repo.merge_tree(commit.parents[0], head)
        except GitError:
            squash_tree = None
    side = (
        commit.parents[1]
        if len(commit.parents) == 2
        else head
        if head is not None and repo.has_object(head)
        else None
    )
    empty = frozenset(
        c
        for c in (repo.side_commits(commit.parents[0], side) if side and commit.parents else [])
        if len(repo.commit(c).parents) == 1
        and repo.commit(c).tree == repo.commit(repo.commit(c).parents[0]).tree
    )
    return MergeFacts(
        sha,
        commit.parents,
        commit.tree,
        author_time,
        committer_time,
        commit.message,
        signature,
        squash_tree,
        empty,
    )


def _times(raw: bytes) -> tuple[int, int]:
    times = {b"author": 0, b"committer": 0}
    for line in raw.partition(b"\n\n")[0].split(b"\n"):
        field, _, rest = line.partition(b" ")
        if field in times and not times[field]:
            try:
                times[field] = int(rest.rsplit(b" ", 2)[-2])
            except (ValueError, IndexError):
                times[field] = 0
    return times[b"author"], times[b"committer"]


def gather_open(settings: Settings, client: Client, number: int, *, now: str) -> Evidence:
    """What GitHub says about an open pull request (for `check`): the PR, reviews, commits,
    timeline."""
    exchanges: list[Exchange] = []
    _pull(client, settings.repository, number, exchanges)
    return Evidence(
        commit="",
        repository=settings.repository,
        api_url=settings.api_url,
        pull=number,
        exchanges=tuple(exchanges),
        gathered_at=now,
    )


def _pull(client: Client, repository: str, number: int, exchanges: list[Exchange]) -> None:
    response = client.get(f"/repos/{repository}/pulls/{number}")
    if not isinstance(response.json(), dict):
        raise Malformed(
            f"GET {response.url}: expected an object", url=response.url, status=response.status
        )
    exchanges.append(Exchange.of(response))
    _listing(client, repository, f"/pulls/{number}/reviews", exchanges)
    _listing(client, repository, f"/pulls/{number}/commits", exchanges)
    _listing(
        client, repository, f"/issues/{number}/timeline", exchanges, max_pages=MAX_TIMELINE_PAGES
    )


def gather(
    settings: Settings, client: Client, commit: str, *, now: str, message: str = ""
) -> Evidence:
    """Ask GitHub about `commit` (on approved): raises NotYet on any failure or incomplete
    answer. `message` is the commit's message: it names the pull request when GitHub lists
    two merged with this one merge commit (a copy opened with the same head)."""
    exchanges: list[Exchange] = []
    number: int | None = None
    truncated = ""
    try:
        lookup = _listing(client, settings.repository, f"/commits/{commit}/pulls", exchanges)
        number = pick_pull(lookup, commit=commit, repository=settings.repository, message=message)
        if number is not None:
            _pull(client, settings.repository, number, exchanges)
    except (TooLarge, Ambiguous) as exc:
        # Past a bound (one answer's size, a listing's pages, all answers' size), or two pull
        # requests for one merge: the merge is refused, with what was read and why, so that
        # comment spam or a huge commit message cannot hold every later commit waiting behind it.
        truncated = exc.message
    return Evidence(
        commit=commit,
        repository=settings.repository,
        api_url=settings.api_url,
        pull=number,
        exchanges=tuple(exchanges),
        gathered_at=now,
        truncated=truncated,
    )


def _listing(
    client: Client,
    repository: str,
    suffix: str,
    exchanges: list[Exchange],
    *,
    max_pages: int | None = None,
) -> list[Any]:
    """Every page of a listing, following `Link: rel="next"`; a broken chain is not yet evidence.

    GitHub names later pages `/repositories/<id><suffix>`; a next link to anything other than a
    page of this listing (in that form or as `/repos/<repository><suffix>`) is refused, so the
    pages followed are the pages `Evidence.pages` reads back.
    """
    path = f"/repos/{repository}{suffix}"
    items: list[Any] = []
    url: str | None = client.url(path) + f"?per_page={PER_PAGE}"
    seen: set[str] = set()
    limit = max_pages or MAX_PAGES
    while url is not None:
        if url in seen:
            raise Malformed(f"GET {path}: pagination loops back to {url}", url=url)
        if len(seen) >= limit:
            raise TooLarge(f"GET {path}: more than {limit} pages of {PER_PAGE}", url=url)
        if sum(len(e.body) for e in exchanges) > MAX_EVIDENCE_BYTES:
            raise TooLarge(
                f"GET {path}: GitHub's answers pass {MAX_EVIDENCE_BYTES // 2**20} MiB", url=url
            )
        seen.add(url)
        response = client.get(url)
        page = response.json()
        if not isinstance(page, list):
            raise Malformed(
                f"GET {url}: expected a list, got {type(page).__name__}",
                url=url,
                status=response.status,
            )
        exchanges.append(Exchange.of(response))
        items += page
        next_url = response.next_url()
        if next_url is not None and len(page) == 0:
            raise Malformed(f"GET {url}: an empty page that links to a next one", url=url)
        if next_url is not None and not is_listing_page(
            client.url(next_url), client.base_url, suffix, repository=repository
        ):
            raise Malformed(f"GET {url}: its next page {next_url} is not a page of {path}", url=url)
        url = next_url
    return items


class HeadMissing(NotYet):
    """The evidence is there but this clone lacks the PR head it is checked against (fetch it)."""


def not_yet(reason: str, *, advice: str | None = None) -> NotYet:
    """`advice`: the hint of the answer that was not evidence (SSL_CERT_FILE for a private CA, a
    token's permissions). It is part of the reason, which is all a runner's waiting line and
    `status` show; a hint that only says the next pass asks again is left out."""
    if advice and advice != AGAIN:
        reason = f"{reason}; hint: {advice}"
    return NotYet(
        f"waiting for evidence: {reason}",
        hint="the next pass asks GitHub again; nothing runs until then",
    )


@dataclass(frozen=True)
class ReviewOutcome:
    """The review verdict on one commit, and the evidence it was derived from."""

    evidence: Evidence
    verdict: Verdict


def review(
    repo: Repo,
    policy: Policy,
    sha: str,
    *,
    now: datetime,
    settings: Settings | None = None,
    stored: Evidence | None = None,
    remote: str | None = None,
    client: Client | None = None,
    keys_at: datetime | None = None,
) -> ReviewOutcome:
    """Review votes for `sha`: from `stored` evidence when there is some (verify, later passes),
    else asked of GitHub now. Raises NotYet when the evidence is not (yet) complete.

    `keys_at` is when `github.merge_keys`' lifetimes are judged (default `now`): the time the
    commit was first judged, as for approver keys, so that an adopted policy change is never
    undone because GitHub's key expired since."""
    if stored is None:
        if settings is None:
            raise not_yet("GitHub evidence is needed but GITHUB_REPOSITORY is not set")
        own = client is None
        client = client or settings.client()
        try:
            evidence = gather(
                settings,
                client,
                sha,
                now=now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                message=repo.commit(sha).message,
            )
        except NotYet as exc:
            raise not_yet(exc.message, advice=exc.hint) from None
        finally:
            if own:
                client.close()
    else:
        evidence = stored
    head = _head(evidence)
    if head is not None and not repo.has_object(head) and evidence.pull is not None:
        if remote is not None:
            repo.fetch_refspec(
                remote, f"+refs/pull/{evidence.pull}/head:refs/mergegate/pull/{evidence.pull}"
            )
        if not repo.has_object(head):
            # A squash is checked against the PR head merged onto the previous tip: without the
            # head this clone cannot tell, which is "not yet", never a verdict either way.
            raise HeadMissing(
                f"waiting for evidence: the head {head[:7]} of PR #{evidence.pull} is not in this "
                "clone",
                hint=f"git fetch {remote or 'origin'} "
                f"'+refs/pull/{evidence.pull}/head:refs/mergegate/pull/{evidence.pull}'",
            )
    from mergegate.github import reviews

    facts = merge_facts(repo, sha, policy, head=head, at=keys_at or now)
    verdict = reviews.judge(evidence, facts, policy, now=now)
    if verdict.waiting and stored is None:
        raise not_yet(verdict.waiting)
    return ReviewOutcome(evidence, verdict)


def _head(evidence: Evidence) -> str | None:
    if evidence.pull is None:
        return None
    try:
        head = evidence.one(f"/pulls/{evidence.pull}")["head"]["sha"]
    except (Malformed, KeyError, TypeError, ValueError):
        return None
    return head if isinstance(head, str) else None


def _named_evidence(record: Record) -> list[tuple[str, str]]:
    """(commit, digest) pairs a record names: `evidence` about its own commit, and a `scanned`
    record's `reviewed` map for walked commits no other record is about. Read as written (any
    record, any value): a reference that is not what a runner writes is checked too, and fails."""
    pairs: list[tuple[str, str]] = []
    digests, commit = record.written("evidence"), record.commit
    if isinstance(digests, list) and commit is not None:
        pairs += [(commit, str(d)) for d in digests]
    reviewed = record.written("reviewed")
    if isinstance(record, Scanned) and isinstance(reviewed, Mapping):
        pairs += [(str(c), str(d)) for c, d in reviewed.items()]
    return pairs


def _naming(repo: Repo, records_tip: str, *, remember: bool) -> list[Record]:
    """Records whose line says "evidence" or "reviewed" (audit.grep_any's reading), the closed log
    files' part remembered by the clone (loggrep.py)."""

    def more(seen: list[bytes], lines: list[bytes]) -> list[bytes]:
        return [*seen, *lines]

    def dump(seen: list[bytes]) -> list[str]:
        return [line.decode("utf-8", "surrogateescape") for line in seen]

    def load(value: list[str]) -> list[bytes]:
        return [str(line).encode("utf-8", "surrogateescape") for line in value]

    start: list[bytes] = []
    lines = loggrep.folded(
        repo,
        records_tip,
        "evidence",
        ["-a", "-F", "--no-color", "-e", '"evidence"', "-e", '"reviewed"'],
        more,
        start,
        dump=dump,
        load=load,
        remember=remember,
    )
    return audit.records_of(lines)


def stored_evidence(
    repo: Repo,
    records_tip: str | None,
    records: Iterable[Record] | None = None,
    *,
    remember: bool = True,
) -> dict[str, Evidence]:
    """The evidence each decision was recorded on, by the commit it is about.

    Only files a record names (`evidence: [<sha256>]`, with the record's `commit`) count:
    an extra file someone adds cannot replace what a decision was made on. A named file
    that is missing, not its hash, or about another commit is tampering.
    """
    found: dict[str, Evidence] = {}
    if records_tip is None:
        return found
    # `evidence: [...]` on decisions, and `reviewed: {commit: digest}` on scanned records (which
    # need not say "evidence" anywhere): one grep for both.
    named = _naming(repo, records_tip, remember=remember) if records is None else records
    for record in named:
        for commit, digest in _named_evidence(record):
            evidence = Evidence.from_bytes(
                audit.read_evidence(repo, records_tip, str(digest)), name=str(digest)
            )
            if evidence.commit != commit:
                raise IntegrityError(
                    f"seq {record.seq} names evidence {str(digest)[:12]}, which is about "
                    f"{evidence.commit[:12]}, not {commit[:12]}: tampering",
                    file=f"{EVIDENCE_DIR}{digest}.json",
                )
            found.setdefault(commit, evidence)
    return found


class ReviewSource:
    """Review verdicts for one pass (or one `verify`): stored evidence first, else GitHub.

    `offline` (verify) never asks: a commit without stored evidence is not yet derivable. Evidence
    gathered in this pass is kept in `gathered` for the runner to publish with its records.
    """

    def __init__(
        self,
        repo: Repo,
        *,
        now: datetime,
        settings: Settings | None,
        stored: Mapping[str, Evidence] | None = None,
        remote: str | None = None,
        offline: bool = False,
        client: Client | None = None,
    ) -> None:
        self.repo = repo
        self.now = now
        self.settings = settings
        self.stored = dict(stored or {})
        self.remote = remote
        self.offline = offline
        self.client = client
        self.gathered: dict[str, Evidence] = {}
        self._outcomes: dict[tuple[str, str, datetime], ReviewOutcome] = {}
        # A commit found waiting stays waiting for the whole pass: the walk and the
        # records check must not see two different answers to one question.
        self._waiting: dict[tuple[str, str], NotYet] = {}

    def enabled(self, policy: Policy) -> bool:
        """Reviews can count only when some approver has a GitHub id."""
        return any(person.github_ids for person in policy.approvers)

    def evidence_for(self, sha: str) -> Evidence | None:
        """The evidence a decision on `sha` was made on (stored, or gathered in this pass)."""
        return self.stored.get(sha) or self.gathered.get(sha)

    def outcome(self, sha: str, policy: Policy, *, at: datetime | None = None) -> ReviewOutcome:
        """The verdict on `sha`, GitHub's merge keys judged at `at` (when the commit was first
        judged; default this pass's clock)."""
        key = (sha, policy.commit)
        if key in self._waiting:
            raise self._waiting[key]
        keys_at = at or self.now
        if (*key, keys_at) not in self._outcomes:
            stored = self.stored.get(sha) or self.gathered.get(sha)
            if stored is None and self.offline:
                raise not_yet(f"no stored GitHub evidence for {sha[:7]}")
            if stored is None and self.client is None and self.settings is not None:
                # One client per pass: its rate-limit wait budget bounds the whole pass, not each
                # commit. One that cannot be made (SSL_CERT_FILE unreadable, HTTPS_PROXY
                # unusable) is waiting too, said as every other reason is, with its hint.
                try:
                    self.client = self.settings.client()
                except NotYet as exc:
                    self._waiting[key] = not_yet(exc.message, advice=exc.hint)
                    raise self._waiting[key] from None
            try:
                result = review(
                    self.repo,
                    policy,
                    sha,
                    now=self.now,
                    settings=self.settings,
                    stored=stored,
                    remote=self.remote,
                    client=self.client,
                    keys_at=keys_at,
                )
            except NotYet as exc:
                self._waiting[key] = exc
                raise
            if stored is None:
                self.gathered[sha] = result.evidence
            self._outcomes[(*key, keys_at)] = result
        return self._outcomes[(*key, keys_at)]


def recorded(repo: Repo, records_tip: str | None, *, now: datetime) -> ReviewSource:
    """Reviews as the records decided them, asking nobody: for `check`'s and `status`'s walks,
    so they reach the runner's policy in force (a commit without recorded evidence waits)."""
    return ReviewSource(
        repo, now=now, settings=None, stored=stored_evidence(repo, records_tip), offline=True
    )
