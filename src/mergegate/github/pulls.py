"""Opening a pull request for a proposal (`propose --open-pr`), through the one HTTP client.

Idempotent: an open pull request from the same branch is returned, not duplicated. The token comes
from GITHUB_TOKEN and goes only to the API's origin, in one header (http.py).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from typing import Any

from mergegate.errors import UsageError
from mergegate.github.http import ApiObject, Client, Malformed

DEFAULT_API = "https://api.github.com"
_REMOTE = re.compile(r"(?:github\.com[:/]|^)([A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+?)(?:\.git)?/?$")


@dataclass(frozen=True)
class Pull:
    number: int
    url: str
    created: bool


def repository(remote_url: str | None) -> str:
    """owner/name: GITHUB_REPOSITORY (set in Actions), else from the remote's URL."""
    named = os.environ.get("GITHUB_REPOSITORY")
    if named:
        return named
    match = _REMOTE.search(remote_url or "")
    if remote_url and "github" in remote_url and match:
        return match.group(1)
    raise UsageError(
        f"cannot tell the GitHub repository from the remote URL {remote_url!r}",
        hint="set GITHUB_REPOSITORY=owner/name",
    )


def open_pull(*, repo_name: str, branch: str, base: str, title: str, body: str) -> Pull:
    token = os.environ.get("GITHUB_TOKEN")
    if not token:
        raise UsageError(
            "--open-pr needs a GitHub token",
            hint="export GITHUB_TOKEN with a token that may open pull requests",
        )
    owner = repo_name.split("/", 1)[0]
    with Client(os.environ.get("GITHUB_API_URL") or DEFAULT_API, token=token) as api:
        existing = api.get(
            f"/repos/{repo_name}/pulls",
            params={"head": f"{owner}:{branch}", "base": base, "state": "open", "per_page": 100},
        )
        for item in _list(existing.json(), existing.url):
            if (item.get("head") or {}).get("ref") == branch:
                return Pull(
                    int(item["number"]), str(item.get("html_url") or item.get("url")), False
                )
        made = api.post(
            f"/repos/{repo_name}/pulls",
            body={"title": title, "head": branch, "base": base, "body": body},
        )
        data = made.json()
        if not isinstance(data, dict) or not isinstance(data.get("number"), int):
            raise Malformed("the pull request GitHub created has no number", url=made.url)
        return Pull(data["number"], str(data.get("html_url") or data.get("url")), True)


def _list(data: Any, url: str) -> list[ApiObject]:
    if not isinstance(data, list) or not all(isinstance(item, dict) for item in data):
        raise Malformed("GitHub's list of pull requests is not a list of objects", url=url)
    return data
