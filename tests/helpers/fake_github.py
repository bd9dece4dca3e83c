"""A loopback GitHub REST API (127.0.0.1, ephemeral port) for tests, with faults.

It serves the endpoints mergegate reads, with GitHub's documented field names and shapes (pull
request, simple user, review, pull request commit, timeline event), those `run --report` writes
(commit statuses: created, and read back combined; issue comments: created, listed, edited; the
request bodies held to GitHub's description too), and GitHub's pagination:
`per_page`/`page` query parameters and a `Link` header with `rel="next"` / `rel="last"`. Tests
describe pull requests with `PullRequest` and inject faults with `fail(...)`; every request is
logged (path and headers) so a test can assert what was asked and that no token leaked anywhere
else.
"""

from __future__ import annotations

import json
import ssl
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from email.utils import formatdate
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.helpers import openapi

REPOSITORY = "acme/gate"
REPOSITORY_ID = 7  # GitHub's Link headers name later pages /repositories/<id>/...


def iso(when: datetime) -> str:
    return when.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def ago(minutes: float) -> str:
    return iso(datetime.now(UTC) - timedelta(minutes=minutes))


API = "https://api.github.com"


def user(uid: int, login: str | None = None, *, kind: str = "User") -> dict[str, Any]:
    """A `simple-user`, as GitHub returns it inside other objects."""
    login = login or f"user{uid}"
    at = f"{API}/users/{login}"
    return {
        "login": login,
        "id": uid,
        "node_id": f"U_{uid}",
        "avatar_url": f"https://avatars.githubusercontent.com/u/{uid}?v=4",
        "gravatar_id": "",
        "url": at,
        "html_url": f"https://github.com/{login}",
        "followers_url": f"{at}/followers",
        "following_url": f"{at}/following{{/other_user}}",
        "gists_url": f"{at}/gists{{/gist_id}}",
        "starred_url": f"{at}/starred{{/owner}}{{/repo}}",
        "subscriptions_url": f"{at}/subscriptions",
        "organizations_url": f"{at}/orgs",
        "repos_url": f"{at}/repos",
        "events_url": f"{at}/events{{/privacy}}",
        "received_events_url": f"{at}/received_events",
        "type": kind,
        "site_admin": False,
    }


_REPO_URLS = {
    "archive_url": "/{archive_format}{/ref}",
    "assignees_url": "/assignees{/user}",
    "blobs_url": "/git/blobs{/sha}",
    "branches_url": "/branches{/branch}",
    "collaborators_url": "/collaborators{/collaborator}",
    "comments_url": "/comments{/number}",
    "commits_url": "/commits{/sha}",
    "compare_url": "/compare/{base}...{head}",
    "contents_url": "/contents/{+path}",
    "contributors_url": "/contributors",
    "deployments_url": "/deployments",
    "downloads_url": "/downloads",
    "events_url": "/events",
    "forks_url": "/forks",
    "git_commits_url": "/git/commits{/sha}",
    "git_refs_url": "/git/refs{/sha}",
    "git_tags_url": "/git/tags{/sha}",
    "hooks_url": "/hooks",
    "issue_comment_url": "/issues/comments{/number}",
    "issue_events_url": "/issues/events{/number}",
    "issues_url": "/issues{/number}",
    "keys_url": "/keys{/key_id}",
    "labels_url": "/labels{/name}",
    "languages_url": "/languages",
    "merges_url": "/merges",
    "milestones_url": "/milestones{/number}",
    "notifications_url": "/notifications{?since,all,participating}",
    "pulls_url": "/pulls{/number}",
    "releases_url": "/releases{/id}",
    "stargazers_url": "/stargazers",
    "statuses_url": "/statuses/{sha}",
    "subscribers_url": "/subscribers",
    "subscription_url": "/subscription",
    "tags_url": "/tags",
    "teams_url": "/teams",
    "trees_url": "/git/trees{/sha}",
}


def repository(full_name: str = REPOSITORY, repo_id: int = REPOSITORY_ID) -> dict[str, Any]:
    """A `repository`, as a pull request's `head.repo` and `base.repo` hold it."""
    owner, name = full_name.split("/")
    at = f"{API}/repos/{full_name}"
    return {
        "id": repo_id,
        "node_id": f"R_{repo_id}",
        "name": name,
        "full_name": full_name,
        "owner": user(1, owner, kind="Organization"),
        "private": False,
        "html_url": f"https://github.com/{full_name}",
        "description": None,
        "fork": False,
        "url": at,
        **{key: at + tail for key, tail in _REPO_URLS.items()},
        "git_url": f"git://github.com/{full_name}.git",
        "ssh_url": f"git@github.com:{full_name}.git",
        "clone_url": f"https://github.com/{full_name}.git",
        "svn_url": f"https://github.com/{full_name}",
        "mirror_url": None,
        "homepage": None,
        "language": None,
        "forks_count": 0,
        "forks": 0,
        "stargazers_count": 0,
        "watchers_count": 0,
        "watchers": 0,
        "size": 1,
        "default_branch": "main",
        "open_issues_count": 0,
        "open_issues": 0,
        "has_issues": True,
        "has_projects": True,
        "has_wiki": True,
        "has_pages": False,
        "has_downloads": True,
        "archived": False,
        "disabled": False,
        "license": None,
        "pushed_at": ago(1),
        "created_at": ago(60 * 24),
        "updated_at": ago(1),
    }


def comment_event(comment_id: int, uid: int, body: str, *, when: str = "") -> dict[str, Any]:
    """A `timeline-comment-event`: what anyone may add to a public repository's pull request."""
    when = when or ago(5)
    return {
        "event": "commented",
        "id": comment_id,
        "node_id": f"IC_{comment_id}",
        "url": f"https://api.github.com/repos/{REPOSITORY}/issues/comments/{comment_id}",
        "html_url": f"https://github.com/{REPOSITORY}/pull/1#issuecomment-{comment_id}",
        "issue_url": f"https://api.github.com/repos/{REPOSITORY}/issues/1",
        "body": body,
        "user": user(uid),
        "actor": user(uid),
        "created_at": when,
        "updated_at": when,
        "author_association": "NONE",
    }


@dataclass
class Review:
    uid: int
    state: str  # APPROVED, CHANGES_REQUESTED, COMMENTED, DISMISSED, PENDING
    commit_id: str
    submitted_at: str
    kind: str = "User"
    id: int = 0

    def body(self, number: int) -> dict[str, Any]:
        html = f"https://github.com/{REPOSITORY}/pull/{number}#pullrequestreview-{self.id}"
        pull = f"{API}/repos/{REPOSITORY}/pulls/{number}"
        return {
            "id": self.id,
            "node_id": f"PRR_{self.id}",
            "user": user(self.uid, kind=self.kind),
            "body": "",
            "state": self.state,
            "commit_id": self.commit_id,
            "submitted_at": self.submitted_at,
            "html_url": html,
            "pull_request_url": pull,
            "author_association": "MEMBER",
            "_links": {"html": {"href": html}, "pull_request": {"href": pull}},
        }


@dataclass
class PrCommit:
    sha: str
    author_id: int | None  # None: GitHub could not map the git author to an account
    committer_id: int | None
    author_date: str = ""
    message: str = "change"
    tree: str = ""

    def body(self) -> dict[str, Any]:
        """A `commit`, as `GET /repos/{owner}/{repo}/pulls/{n}/commits` lists it."""
        person = {
            "name": "someone",
            "email": "someone@example.com",
            "date": self.author_date or ago(60),
        }
        tree = self.tree or "0" * 40
        at = f"{API}/repos/{REPOSITORY}"
        return {
            "sha": self.sha,
            "node_id": f"C_{self.sha[:8]}",
            "url": f"{at}/commits/{self.sha}",
            "html_url": f"https://github.com/{REPOSITORY}/commit/{self.sha}",
            "comments_url": f"{at}/commits/{self.sha}/comments",
            "commit": {
                "url": f"{at}/git/commits/{self.sha}",
                "author": person,
                "committer": person,
                "message": self.message,
                "tree": {"sha": tree, "url": f"{at}/git/trees/{tree}"},
                "comment_count": 0,
            },
            "author": user(self.author_id) if self.author_id is not None else None,
            "committer": user(self.committer_id) if self.committer_id is not None else None,
            "parents": [],
        }


@dataclass
class PullRequest:
    number: int
    author: int
    head_sha: str
    merge_commit_sha: str
    base_ref: str = "approved"
    base_repo: str = REPOSITORY
    head_ref: str = "feature"
    merged: bool = True
    reviews: list[Review] = field(default_factory=list)
    commits: list[PrCommit] = field(default_factory=list)
    force_pushes: list[str] = field(
        default_factory=list
    )  # created_at of head_ref_force_pushed events
    merged_at: str = ""
    title: str = "Add a job"
    body_text: str = ""

    def simple(self) -> dict[str, Any]:
        """A `pull-request-simple`, as listings of pull requests hold it."""
        at = f"{API}/repos/{REPOSITORY}"
        html = f"https://github.com/{REPOSITORY}/pull/{self.number}"
        pull = f"{at}/pulls/{self.number}"
        issue = f"{at}/issues/{self.number}"
        return {
            "url": pull,
            "id": 1000 + self.number,
            "node_id": f"PR_{self.number}",
            "html_url": html,
            "diff_url": f"{html}.diff",
            "patch_url": f"{html}.patch",
            "issue_url": issue,
            "commits_url": f"{pull}/commits",
            "review_comments_url": f"{pull}/comments",
            "review_comment_url": f"{at}/pulls/comments{{/number}}",
            "comments_url": f"{issue}/comments",
            "statuses_url": f"{at}/statuses/{self.head_sha}",
            "number": self.number,
            "state": "closed" if self.merged else "open",
            "locked": False,
            "title": self.title,
            "user": user(self.author),
            "body": self.body_text,
            "labels": [],
            "milestone": None,
            "active_lock_reason": None,
            "created_at": ago(120),
            "updated_at": ago(1),
            "closed_at": (self.merged_at or ago(1)) if self.merged else None,
            "merged_at": (self.merged_at or ago(1)) if self.merged else None,
            "merge_commit_sha": self.merge_commit_sha or None,
            "assignee": None,
            "assignees": [],
            "requested_reviewers": [],
            "requested_teams": [],
            "head": {
                "label": f"acme:{self.head_ref}",
                "ref": self.head_ref,
                "sha": self.head_sha,
                "user": user(self.author),
                "repo": repository(),
            },
            "base": {
                "label": f"acme:{self.base_ref}",
                "ref": self.base_ref,
                "sha": "0" * 40,
                "user": user(1),
                "repo": repository(self.base_repo),
            },
            "_links": {
                name: {"href": href}
                for name, href in (
                    ("self", pull),
                    ("html", html),
                    ("issue", issue),
                    ("comments", f"{issue}/comments"),
                    ("review_comments", f"{pull}/comments"),
                    ("review_comment", f"{at}/pulls/comments{{/number}}"),
                    ("commits", f"{pull}/commits"),
                    ("statuses", f"{at}/statuses/{self.head_sha}"),
                )
            },
            "author_association": "MEMBER",
            "auto_merge": None,
            "draft": False,
        }

    def full(self) -> dict[str, Any]:
        """A `pull-request`, as `GET /repos/{owner}/{repo}/pulls/{n}` answers."""
        return {
            **self.simple(),
            "merged": self.merged,
            "mergeable": None,
            "rebaseable": None,
            "mergeable_state": "unknown",
            "merged_by": user(1) if self.merged else None,
            "comments": 0,
            "review_comments": 0,
            "maintainer_can_modify": False,
            "commits": len(self.commits),
            "additions": 1,
            "deletions": 0,
            "changed_files": 1,
        }

    def timeline(self) -> list[dict[str, Any]]:
        events: list[dict[str, Any]] = []
        for commit in self.commits:
            events.append(
                {
                    "event": "committed",
                    "sha": commit.sha,
                    "node_id": f"C_{commit.sha[:8]}",
                    "author": {
                        "name": "someone",
                        "email": "someone@example.com",
                        "date": commit.author_date or ago(60),
                    },
                    "committer": {
                        "name": "someone",
                        "email": "someone@example.com",
                        "date": commit.author_date or ago(60),
                    },
                    "message": commit.message,
                    "tree": {"sha": commit.tree or "0" * 40},
                    "parents": [],
                }
            )
        for index, when in enumerate(self.force_pushes):
            events.append(
                {
                    "id": 9000 + index,
                    "node_id": f"HRFPE_{index}",
                    "event": "head_ref_force_pushed",
                    "actor": user(self.author),
                    "commit_id": None,
                    "commit_url": None,
                    "created_at": when,
                }
            )
        for review in self.reviews:
            events.append(
                {
                    "id": review.id,
                    "event": "reviewed",
                    "user": user(review.uid, kind=review.kind),
                    "state": review.state.lower(),
                    "commit_id": review.commit_id,
                    "submitted_at": review.submitted_at,
                }
            )
        return events


BOT = 41898282  # github-actions[bot], who writes what a workflow's GITHUB_TOKEN posts


@dataclass
class Comment:
    """An issue comment (on a pull request: its conversation)."""

    id: int
    issue: int
    body: str
    uid: int = BOT
    created_at: str = ""
    updated_at: str = ""

    def body_json(self) -> dict[str, Any]:
        at = f"{API}/repos/{REPOSITORY}"
        return {
            "id": self.id,
            "node_id": f"IC_{self.id}",
            "url": f"{at}/issues/comments/{self.id}",
            "html_url": f"https://github.com/{REPOSITORY}/pull/{self.issue}#issuecomment-{self.id}",
            "body": self.body,
            "user": user(
                self.uid,
                "github-actions[bot]" if self.uid == BOT else None,
                kind="Bot" if self.uid == BOT else "User",
            ),
            "created_at": self.created_at,
            "updated_at": self.updated_at,
            "issue_url": f"{at}/issues/{self.issue}",
            "author_association": "NONE",
            "performed_via_github_app": None,
        }


@dataclass
class Fault:
    """Answer the next `times` requests whose path contains `path` with this fault."""

    path: str
    kind: str  # "status", "rate", "timeout", "malformed", "bad-next", "empty", "truncated"
    status: int = 500
    times: int = 1
    reset_in: float = 0.0  # seconds until x-ratelimit-reset / retry-after
    header: str = (
        "x-ratelimit-reset"  # or "retry-after" (seconds), or "retry-after-date" (an HTTP date)
    )


class _Server(ThreadingHTTPServer):
    """The loopback server; each connection wrapped in TLS in its own thread when given a
    context."""

    daemon_threads = True

    def __init__(self, handler: type[BaseHTTPRequestHandler], tls: ssl.SSLContext | None) -> None:
        super().__init__(("127.0.0.1", 0), handler)
        self.tls = tls

    def finish_request(self, request: Any, client_address: Any) -> None:
        if self.tls is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(10.0)
        try:
            conn = self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return  # the client refused the certificate: nothing was asked
        try:
            super().finish_request(conn, client_address)
        finally:
            conn.close()


class FakeGitHub:
    """State plus a server thread; use as a context manager or via the `fake_github` fixture."""

    def __init__(self, *, tls: ssl.SSLContext | None = None) -> None:
        """`tls`: a server context (a private CA's certificate) to answer over https."""
        self.pulls: dict[int, PullRequest] = {}
        self.faults: list[Fault] = []
        self.requests: list[tuple[str, str, dict[str, str]]] = []  # (method, path+query, headers)
        self.created: list[dict[str, Any]] = []  # POST /pulls bodies
        # POST /statuses/{sha} bodies, each with its "sha", in the order they came
        self.statuses: list[dict[str, Any]] = []
        self.comments: dict[int, Comment] = {}  # issue comments by id
        self.edits: list[int] = []  # ids of the comments a PATCH changed, in order
        self._next_comment = 9001
        self.hang_seconds = 3.0
        self.trickle_seconds = 0.2  # between two bytes of a "trickle" answer
        # Every answer served is held to GitHub's OpenAPI description (when .ci/run installed
        # it): what the fake says GitHub says must be what GitHub documents. (Faults, hostile
        # answers on purpose, are not held to it.)
        self.description = openapi.description()
        self.shape_errors: list[str] = []
        self.stopped = threading.Event()
        # GitHub's Link headers name pages by repository id ("repositories"); "repos" keeps the
        # /repos/<owner>/<name> form the first page was asked with.
        self.link_form = "repositories"
        self._lock = threading.Lock()
        self._next_review = 1
        self._server = _Server(_handler(self), tls)
        self._thread = threading.Thread(
            target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
        )

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        scheme = "http" if self._server.tls is None else "https"
        return f"{scheme}://{host!s}:{port}"

    def start(self) -> FakeGitHub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self.stopped.set()
        self._server.shutdown()
        self._server.server_close()

    def check_shapes(self, method: str, path: str, status: int, data: Any) -> None:
        if self.description is None or not 200 <= status < 300:
            return
        problems = self.description.problems(method, path, status, data)
        with self._lock:
            self.shape_errors += problems[:5]

    def check_request(self, method: str, path: str, body: bytes) -> None:
        """A request body the client sends is held to GitHub's description too."""
        if self.description is None or method not in ("POST", "PATCH"):
            return
        try:
            data = json.loads(body) if body else None
        except ValueError:
            data = body
        problems = self.description.request_problems(method, path, data)
        with self._lock:
            self.shape_errors += problems[:5]

    def status_of(self, sha: str, context: str) -> dict[str, Any] | None:
        """The latest status of `context` on `sha` (what GitHub shows), or None."""
        found = [s for s in self.statuses if s["sha"] == sha and s.get("context") == context]
        return found[-1] if found else None

    def comments_on(self, number: int) -> list[Comment]:
        return [c for c in self.comments.values() if c.issue == number]

    def __enter__(self) -> FakeGitHub:
        return self.start()

    def __exit__(self, kind: object, *exc: object) -> None:
        self.stop()
        if kind is None and self.shape_errors:
            shown = "\n".join(self.shape_errors[:10])
            raise AssertionError(
                f"the fake served {len(self.shape_errors)} answer(s) GitHub's OpenAPI "
                f"description does not allow:\n{shown}"
            )

    # -- describing the world -----------------------------------------------------
    def add_pull(self, pr: PullRequest) -> PullRequest:
        for review in pr.reviews:
            self._number(review)
        self.pulls[pr.number] = pr
        return pr

    def review(
        self,
        number: int,
        uid: int,
        state: str,
        commit_id: str,
        *,
        minutes_ago: float = -0.1,
        kind: str = "User",
    ) -> Review:
        # By default a review is submitted just after the head commit the test made this second.
        review = self._number(Review(uid, state, commit_id, ago(minutes_ago), kind))
        self.pulls[number].reviews.append(review)
        return review

    def _number(self, review: Review) -> Review:
        if not review.id:
            review.id = self._next_review
            self._next_review += 1
        return review

    def fail(self, path: str, kind: str = "status", **options: Any) -> Fault:
        fault = Fault(path, kind, **options)
        self.faults.append(fault)
        return fault

    def env(self, token: str = "ghs_test_token_0123456789abcdef") -> dict[str, str]:
        return {"GITHUB_API_URL": self.url, "GITHUB_REPOSITORY": REPOSITORY, "GITHUB_TOKEN": token}

    def paths(self) -> list[str]:
        return [path for _, path, _ in self.requests]

    # -- answering ----------------------------------------------------------------
    def _fault_for(self, path: str) -> Fault | None:
        with self._lock:
            for fault in self.faults:
                if fault.times > 0 and fault.path in path:
                    fault.times -= 1
                    return fault
        return None

    def route(
        self, method: str, path: str, query: dict[str, list[str]], body: bytes
    ) -> tuple[int, Any, dict[str, str]]:
        prefix = f"/repos/{REPOSITORY}/"
        by_id = f"/repositories/{REPOSITORY_ID}/"
        if path.startswith(by_id):
            path = prefix + path[len(by_id) :]
        if not path.startswith(prefix):
            return 404, {"message": "Not Found"}, {}
        rest = path[len(prefix) :].strip("/").split("/")
        answer = self._writes(method, rest, query, body)
        if answer is not None:
            return answer
        if method == "GET" and rest == ["pulls"]:
            # GET /repos/{owner}/{repo}/pulls: state (default open), base, head ("owner:branch").
            state = query.get("state", ["open"])[0]
            listed = [
                pr
                for pr in sorted(self.pulls.values(), key=lambda p: -p.number)
                if state == "all"
                or (pr.merged and state == "closed")
                or (not pr.merged and state == "open")
            ]
            if "base" in query:
                listed = [pr for pr in listed if pr.base_ref == query["base"][0]]
            if "head" in query:
                listed = [
                    pr
                    for pr in listed
                    if f"{REPOSITORY.split('/')[0]}:{pr.head_ref}" == query["head"][0]
                ]
            return self._page(path, query, [pr.simple() for pr in listed])
        if method == "GET" and len(rest) == 3 and rest[0] == "commits" and rest[2] == "pulls":
            sha = rest[1]
            found = [
                pr.simple()
                for pr in self.pulls.values()
                if sha in (pr.merge_commit_sha, pr.head_sha)
                or any(c.sha == sha for c in pr.commits)
            ]
            return self._page(path, query, found)
        if method == "GET" and rest[0] == "pulls" and len(rest) >= 2 and rest[1].isdigit():
            pr = self.pulls.get(int(rest[1]))
            if pr is None:
                return 404, {"message": "Not Found"}, {}
            if len(rest) == 2:
                return 200, pr.full(), {}
            if rest[2:] == ["reviews"]:
                return self._page(path, query, [r.body(pr.number) for r in pr.reviews])
            if rest[2:] == ["commits"]:
                return self._page(path, query, [c.body() for c in pr.commits])
        if method == "GET" and rest[0] == "issues" and len(rest) == 3 and rest[2] == "timeline":
            pr = self.pulls.get(int(rest[1])) if rest[1].isdigit() else None
            if pr is None:
                return 404, {"message": "Not Found"}, {}
            return self._page(path, query, pr.timeline())
        return (
            404,
            {"message": "Not Found", "documentation_url": "https://docs.github.com/rest"},
            {},
        )

    def _combined(self, sha: str, query: dict[str, list[str]]) -> dict[str, Any]:
        """GET /repos/{owner}/{repo}/commits/{ref}/status: each context's latest status, the
        latest first, and the combined state (failure, pending, or success)."""
        now = iso(datetime.now(UTC))
        with self._lock:
            numbered = [(n, s) for n, s in enumerate(self.statuses, start=1) if s["sha"] == sha]
        latest: dict[str, tuple[int, dict[str, Any]]] = {}
        for number, status in reversed(numbered):
            latest.setdefault(status.get("context", "default"), (number, status))
        states = [s.get("state") for _, s in latest.values()]
        state = (
            "failure"
            if {"error", "failure"} & set(states)
            else "pending"
            if not states or "pending" in states
            else "success"
        )
        per_page = int(query.get("per_page", ["30"])[0])
        statuses = [_status(n, s, now) for n, s in latest.values()][:per_page]
        for status in statuses:
            del status["creator"]  # (a simple-commit-status has none)
        return {
            "state": state,
            "statuses": statuses,
            "sha": sha,
            "total_count": len(latest),
            "repository": repository(),
            "commit_url": f"{API}/repos/{REPOSITORY}/commits/{sha}",
            "url": f"{API}/repos/{REPOSITORY}/commits/{sha}/status",
        }

    def _writes(
        self, method: str, rest: list[str], query: dict[str, list[str]], body: bytes
    ) -> tuple[int, Any, dict[str, str]] | None:
        """What a client writes: pull requests (`propose`), commit statuses and issue comments
        (`run --report`, which also lists comments and reads a commit's combined status); None
        for anything else."""
        now = iso(datetime.now(UTC))
        if method == "POST" and rest == ["pulls"]:
            data = json.loads(body)
            self.created.append(data)
            number = max(self.pulls, default=0) + 1
            pr = PullRequest(
                number=number,
                author=1,
                head_sha=data.get("head", ""),
                merge_commit_sha="",
                merged=False,
                head_ref=data.get("head", ""),
                base_ref=data.get("base", ""),
                title=data.get("title", ""),
                body_text=data.get("body", ""),
            )
            self.pulls[number] = pr
            return 201, pr.full(), {}
        if method == "POST" and len(rest) == 2 and rest[0] == "statuses":
            data = json.loads(body)
            with self._lock:
                self.statuses.append({**data, "sha": rest[1]})
                number = len(self.statuses)
            return 201, _status(number, data, now), {}
        if method == "GET" and len(rest) == 3 and rest[0] == "commits" and rest[2] == "status":
            return 200, self._combined(rest[1], query), {}
        issue = int(rest[1]) if len(rest) == 3 and rest[1].isdigit() else None
        if issue is not None and rest[2] == "comments" and method == "POST":
            if issue not in self.pulls:
                return 404, {"message": "Not Found"}, {}
            with self._lock:
                comment = Comment(
                    self._next_comment, issue, json.loads(body)["body"], BOT, now, now
                )
                self._next_comment += 1
                self.comments[comment.id] = comment
            return 201, comment.body_json(), {}
        if issue is not None and rest[2] == "comments" and method == "GET":
            since = query.get("since", [""])[0]
            listed = [
                c.body_json()
                for c in sorted(self.comments.values(), key=lambda c: c.id)
                if c.issue == issue and c.updated_at >= since
            ]
            return self._page(f"/repos/{REPOSITORY}/issues/{issue}/comments", query, listed)
        if method == "PATCH" and len(rest) == 3 and rest[1] == "comments" and rest[2].isdigit():
            found = self.comments.get(int(rest[2]))
            if found is None:
                return 404, {"message": "Not Found"}, {}
            if found.uid != BOT:
                return 403, {"message": "Resource not accessible by integration"}, {}
            with self._lock:
                found.body, found.updated_at = json.loads(body)["body"], now
                self.edits.append(found.id)
            return 200, found.body_json(), {}
        return None

    def _page(
        self, path: str, query: dict[str, list[str]], items: list[Any]
    ) -> tuple[int, Any, dict[str, str]]:
        per_page = min(100, int(query.get("per_page", ["30"])[0]))
        page = int(query.get("page", ["1"])[0])
        last = max(1, -(-len(items) // per_page))
        chunk = items[(page - 1) * per_page : page * per_page]
        if self.link_form == "repositories":
            path = path.replace(f"/repos/{REPOSITORY}/", f"/repositories/{REPOSITORY_ID}/", 1)
        links = []
        if page > 1:
            links.append(f'<{self.url}{path}?per_page={per_page}&page={page - 1}>; rel="prev"')
        if page < last:
            links.append(f'<{self.url}{path}?per_page={per_page}&page={page + 1}>; rel="next"')
            links.append(f'<{self.url}{path}?per_page={per_page}&page={last}>; rel="last"')
        if page > 1:
            links.append(f'<{self.url}{path}?per_page={per_page}&page=1>; rel="first"')
        return 200, chunk, ({"link": ", ".join(links)} if links else {})


def _handler(fake: FakeGitHub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self._serve(self.command)

        do_POST = do_PATCH = do_GET

        def _serve(self, method: str) -> None:
            parts = urlsplit(self.path)
            length = int(self.headers.get("content-length") or 0)
            body = self.rfile.read(length) if length else b""
            fake.requests.append(
                (method, self.path, {k.lower(): v for k, v in self.headers.items()})
            )
            fault = fake._fault_for(
                parts.path.replace(f"/repositories/{REPOSITORY_ID}/", f"/repos/{REPOSITORY}/", 1)
            )
            if fault is not None and fault.kind == "rate" and method != "GET":
                # A rate-limited write does nothing; a write answered 5xx (a "status" fault) or
                # too late ("timeout") was made, as GitHub may have made it.
                status, data, headers = 403, {}, {}
            else:
                status, data, headers = fake.route(method, parts.path, parse_qs(parts.query), body)
            if fault is None:
                fake.check_request(method, parts.path, body)
                fake.check_shapes(method, parts.path, status, data)
            raw = json.dumps(data).encode()
            if fault is not None:
                status, raw, headers = _faulted(fake, fault, self.path, status, raw, headers)
            if fault is not None and fault.kind in ("trickle", "trickle-headers"):
                self._trickle(raw, headers=fault.kind == "trickle-headers")
                return
            self.send_response(status)
            self.send_header("content-type", "application/json; charset=utf-8")
            self.send_header("x-github-request-id", f"FAKE:{len(fake.requests):04d}")
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("content-length", str(len(raw)))
            self.end_headers()
            try:
                self.wfile.write(raw)
            except (BrokenPipeError, ConnectionResetError):
                pass

        def _trickle(self, raw: bytes, *, headers: bool) -> None:
            """One byte every `trickle_seconds`: of a long header, or of the body."""
            head = (
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                f"content-length: {len(raw)}\r\n"
            ).encode()
            if headers:
                slow, rest = b"x-padding: " + b"x" * 1000 + b"\r\n\r\n", raw
            else:
                head, slow, rest = head + b"\r\n", raw, b""
            self.close_connection = True
            try:
                self.wfile.write(head)
                for byte in slow:
                    if fake.stopped.is_set():
                        return
                    self.wfile.write(bytes([byte]))
                    self.wfile.flush()
                    time.sleep(fake.trickle_seconds)
                self.wfile.write(rest)
                self.wfile.flush()
            except OSError:  # the client hung up (BrokenPipe, ConnectionReset)
                pass

    return Handler


def _status(number: int, data: dict[str, Any], now: str) -> dict[str, Any]:
    """A `status`, as POST /repos/{owner}/{repo}/statuses/{sha} answers."""
    return {
        "url": f"{API}/repos/{REPOSITORY}/statuses/{number}",
        "avatar_url": None,
        "id": number,
        "node_id": f"SC_{number}",
        "state": data.get("state"),
        "description": data.get("description"),
        "target_url": data.get("target_url"),
        "context": data.get("context", "default"),
        "created_at": now,
        "updated_at": now,
        "creator": user(BOT, "github-actions[bot]", kind="Bot"),
    }


def _faulted(
    fake: FakeGitHub,
    fault: Any,
    path: str,
    status: int,
    raw: bytes,
    headers: dict[str, str],
) -> tuple[int, bytes, dict[str, str]]:
    """The answer a fault makes of the one the route gave."""
    if fault.kind == "timeout":
        time.sleep(fake.hang_seconds)
    elif fault.kind == "status":
        status, raw, headers = fault.status, b'{"message": "Server Error"}', {}
    elif fault.kind == "rate":
        status = fault.status if fault.status in (403, 429) else 403
        raw = b'{"message": "API rate limit exceeded"}'
        if fault.header == "retry-after":
            headers = {"retry-after": str(int(fault.reset_in))}
        elif fault.header == "retry-after-date":
            headers = {"retry-after": formatdate(time.time() + fault.reset_in, usegmt=True)}
        else:
            headers = {
                "x-ratelimit-remaining": "0",
                "x-ratelimit-limit": "5000",
                "x-ratelimit-reset": str(int(time.time() + fault.reset_in)),
            }
    elif fault.kind == "malformed":
        raw = b'{"truncated": '
    elif fault.kind == "empty":
        raw = b"[]"
    elif fault.kind == "bad-next":
        # A next link that points back at this very page: pagination that never ends.
        headers = {"link": f'<{fake.url}{path}>; rel="next"'}
    elif fault.kind == "other-next":
        # On the API's origin, but a page of another listing.
        headers = {"link": f'<{fake.url}/repositories/8/issues/1/comments?page=2>; rel="next"'}
    elif fault.kind == "foreign-next":
        headers = {"link": '<https://evil.example/steal?page=2>; rel="next"'}
    return status, raw, headers


def serve() -> Iterator[FakeGitHub]:
    with FakeGitHub() as fake:
        yield fake
