"""YAML loading and JSON Schema validation: the only place raw dicts exist.

Loading is safe (no Python tags), rejects duplicate keys and aliases (which would let one file
expand into millions of nodes), and keeps the line of every value so that an error can point at it.

Two readings of a text, one answer. libyaml (PyYAML's CSafeLoader, in PyYAML's wheel) reads the
texts it reads as PyYAML's own SafeLoader does, five to ten times faster; PyYAML's own reading (the
reference: what mergegate has always read and said) decides the rest and words every error. libyaml
reads a slightly larger language and words its errors its own way: it takes tabs as separators, `?`
inside flow scalars, a comment right after `|` or `>`, tags PyYAML refuses, and marks an empty value
in a flow collection at the next token, not after the `:`. So PyYAML reads a text with a character
that may differ (`_LIBYAML_DIFFERS`), one whose flow collection holds an empty or `?` plain value
(found in what libyaml composed), and one with any error but the depth (libyaml's marks do not hold
the text an error quotes). tests/rules/test_yaml_reading.py and test_job.py hold parse_yaml to
PyYAML's own reading, data, lines and errors, over generated files.

Validation is fastjsonschema's (compiled once per schema). It refuses more than jsonschema (floats
as integers, `$` before a final newline), never less (held to jsonschema over generated jobs and
policies in tests/rules/test_job.py), so a document it refuses goes to jsonschema, which decides
and says why. jsonschema costs about 0.2 s of CPU to import: only a document with an error loads
it.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from datetime import date, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeAlias

import yaml

from mergegate.errors import ConfigError

if TYPE_CHECKING:  # imported only for a document fastjsonschema rejects (see the module's doc)
    import jsonschema

Path_ = tuple[str | int, ...]

MAX_YAML_BYTES = 1024 * 1024
# Deeper documents are refused before they are composed: PyYAML's composer recurses once per level,
# and a few thousand levels raise RecursionError.
MAX_YAML_DEPTH = 64
_PLAIN_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")

# None where PyYAML was built without libyaml: then PyYAML's own reading reads everything.
_LIBYAML: Any = getattr(yaml, "CSafeLoader", None)
# What libyaml may read unlike PyYAML (see the module's doc): a character PyYAML refuses or reads
# as a line break, a byte order mark, a tab, `!` anywhere (a tag), `?` before a space (an explicit
# key), a document marker, and a comment right after a block scalar's header.
_LIBYAML_DIFFERS = re.compile(
    r"[^\n\r\x20-\x7e\xa0-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]"
    r"|[!\x85\u2028\u2029\ufeff]|\?(?=\s|$)|(?m:^(?:---|\.\.\.))|[|>][-+0-9]*#"
)

# The YAML (and JSON Schema) edge: a mapping as read, before the schema has validated it, and the
# validated document's own mappings, which the policy and job readers take apart member by member.
RawMapping: TypeAlias = dict[str, Any]


@dataclass(frozen=True)
class Document:
    """A validated YAML document, with the line of every value."""

    file: str
    data: Any
    lines: Mapping[Path_, int]

    def line_of(self, path: Path_) -> int:
        """The line of `path`, or of its nearest parent that has one."""
        for cut in range(len(path), -1, -1):
            line = self.lines.get(path[:cut])
            if line is not None:
                return line
        return 1

    def error(self, path: Path_, message: str, *, hint: str | None = None) -> ConfigError:
        return ConfigError(message, file=self.file, line=self.line_of(path), hint=hint)


def load(text: bytes | str, *, file: str, schema: str) -> Document:
    """Parse YAML text and validate it against a packaged schema; ConfigError on any problem."""
    doc = parse_yaml(text, file=file)
    validate(doc, schema=schema)
    return doc


def parse_yaml(text: bytes | str, *, file: str) -> Document:
    if isinstance(text, bytes):
        if len(text) > MAX_YAML_BYTES:
            raise ConfigError(
                f"file is {len(text)} bytes, more than the {MAX_YAML_BYTES} allowed", file=file
            )
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ConfigError(f"not valid UTF-8 (byte {exc.start})", file=file) from None
    if _LIBYAML is not None and not _LIBYAML_DIFFERS.search(text):
        doc = _read_libyaml(text, file)
        if doc is not None:
            return doc
    return _document(_compose_pyyaml(text, file), file, libyaml=False)


class _Unsure(Exception):
    """libyaml composed a node PyYAML's own reading may mark at another line: that reading
    decides."""


def _read_libyaml(text: str, file: str) -> Document | None:
    """The document libyaml reads, or its error; None when PyYAML's own reading must decide."""
    loader = _LIBYAML(text)
    try:
        node = loader.get_single_node()
    except yaml.YAMLError:
        return None  # (PyYAML's own reading words it, as it always has)
    finally:
        loader.dispose()
    if node is None:
        return None  # (an empty file: PyYAML's reading says so)
    try:
        return _document(node, file, libyaml=True)
    except _Unsure:
        return None
    except ConfigError:
        # PyYAML's reading refuses a deep document before any other problem in it, and words the
        # others (an invalid value's message quotes the text, which libyaml's marks do not hold).
        deeper = _depth_error(node, file)
        if deeper is None:
            return None
        raise deeper from None


def _compose_pyyaml(text: str, file: str) -> yaml.Node | None:
    """PyYAML's own reading: the depth of the whole stream first, then compose."""
    try:
        _check_depth(text, file)
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        what = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"invalid YAML: {what}", file=file, line=line) from None
    except yaml.reader.ReaderError as exc:
        # A character YAML does not allow (a NUL, most controls): one line, with its line, not
        # PyYAML's two lines about "<unicode string>", position N.
        line = text.count("\n", 0, exc.position) + 1
        raise ConfigError(
            f"invalid YAML: character U+{exc.character:04X} is not allowed in YAML",
            file=file,
            line=line,
            hint="remove it (a NUL or control character; a file saved as UTF-16 shows as NULs)",
        ) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", file=file) from None


def _check_depth(text: str, file: str) -> None:
    """ConfigError when collections nest deeper than MAX_YAML_DEPTH (the parser itself does not
    recurse)."""
    depth = 0
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                raise _too_deep(file, event.start_mark)
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _too_deep(file: str, mark: Any) -> ConfigError:
    line = mark.line + 1 if mark is not None else None
    return ConfigError(f"YAML nests deeper than {MAX_YAML_DEPTH} levels", file=file, line=line)


def _depth_error(root: yaml.Node, file: str) -> ConfigError | None:
    """The error PyYAML's depth check gives a tree libyaml composed: its first collection (in the
    order of the text, an alias read once) deeper than MAX_YAML_DEPTH."""
    seen: set[int] = set()
    stack: list[tuple[yaml.Node, int]] = [(root, 1)]
    while stack:
        node, depth = stack.pop()
        if id(node) in seen or isinstance(node, yaml.ScalarNode):
            continue
        seen.add(id(node))
        if depth > MAX_YAML_DEPTH:
            return _too_deep(file, node.start_mark)
        children = _children(node)
        stack.extend((child, depth + 1) for child in reversed(children))
    return None


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.MappingNode):
        return [child for pair in node.value for child in pair]
    return list(node.value)


def _check_flow(node: yaml.Node) -> None:
    """_Unsure for a plain value in a flow collection that is empty (libyaml marks it at the next
    token) or holds a `?` (PyYAML refuses it there)."""
    if isinstance(node, yaml.CollectionNode) and node.flow_style:
        for child in _children(node):
            if isinstance(child, yaml.ScalarNode) and not child.style:
                if child.value == "" or "?" in child.value:
                    raise _Unsure


@dataclass
class _Reading:
    """One conversion of a composed tree into data."""

    file: str
    libyaml: bool
    lines: dict[Path_, int] = field(default_factory=dict)
    seen: set[int] = field(default_factory=set)


def _document(node: yaml.Node | None, file: str, *, libyaml: bool) -> Document:
    if node is None:
        raise ConfigError("file is empty; expected a YAML mapping", file=file, line=1)
    reading = _Reading(file, libyaml)
    data = _convert(node, (), reading, 1)
    return Document(file=file, data=data, lines=reading.lines)


def _convert(node: yaml.Node, path: Path_, reading: _Reading, depth: int) -> Any:
    line = reading.lines[path] = node.start_mark.line + 1
    # compose() hands back an alias as the very node it names: meeting a node twice means an alias,
    # which could expand one file into millions of values.
    if id(node) in reading.seen:
        raise ConfigError("YAML aliases (*name) are not allowed", file=reading.file, line=line)
    reading.seen.add(id(node))
    if isinstance(node, yaml.ScalarNode):
        return _scalar(node, reading.file)
    if node.tag not in _PLAIN_TAGS:
        raise ConfigError(f"YAML tag {node.tag} is not allowed", file=reading.file, line=line)
    if depth > MAX_YAML_DEPTH:  # (libyaml's reading only: PyYAML's refused it before composing)
        raise _too_deep(reading.file, node.start_mark)
    if reading.libyaml:
        _check_flow(node)
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, (*path, i), reading, depth + 1) for i, item in enumerate(node.value)]
    return _mapping(node, path, reading, depth)


def _mapping(node: yaml.Node, path: Path_, reading: _Reading, depth: int) -> Any:
    result: RawMapping = {}
    for key_node, value_node in node.value:
        line = key_node.start_mark.line + 1
        if not isinstance(key_node, yaml.ScalarNode):
            raise ConfigError("mapping keys must be plain strings", file=reading.file, line=line)
        if key_node.tag == "tag:yaml.org,2002:merge":
            raise ConfigError("YAML merge keys (<<) are not allowed", file=reading.file, line=line)
        key = key_node.value
        if key in result:
            raise ConfigError(
                f"duplicate key '{key}' (first at line {reading.lines[(*path, key)]})",
                file=reading.file,
                line=line,
            )
        result[key] = _convert(value_node, (*path, key), reading, depth + 1)
    return result


def _scalar(node: yaml.Node, file: str) -> Any:
    # A SafeLoader with only its constructor's state: constructing a scalar reads nothing else (and
    # a whole loader's reader, scanner and parser, made for every value, cost more than the value).
    loader = yaml.SafeLoader.__new__(yaml.SafeLoader)
    yaml.constructor.SafeConstructor.__init__(loader)
    try:
        value = loader.construct_object(node, deep=True)
        # Unquoted times become datetime objects in YAML 1.1; keep them as the text the user wrote
        # so the schema and the error messages see that.
        return node.value if isinstance(value, (datetime, date)) else value
    except (yaml.YAMLError, ValueError) as exc:
        # ValueError: a value PyYAML tags by its shape alone but cannot build (0b_, 2001-02-30).
        raise ConfigError(
            f"invalid value: {exc}", file=file, line=node.start_mark.line + 1
        ) from None


@cache
def _schema(name: str) -> RawMapping:
    # Next to this module (importlib.resources would cost more to import than the read).
    text = (Path(__file__).parent.parent / "schemas" / f"{name}.schema.json").read_text("utf-8")
    schema: RawMapping = json.loads(text)
    return schema


# How to find an account's numeric id (a login can be renamed and re-registered, an id cannot).
GITHUB_ID_HINT = "find an account's numeric id: gh api users/LOGIN --jq .id (docs/github.md)"


@cache
def _fast_check(name: str) -> Callable[[Any], Any]:
    # Compiled on first use (about 10 ms to import and compile), once per schema. No defaults filled
    # in (the data stays as written) and no formats checked (as jsonschema, built without a format
    # checker, checks none).
    import fastjsonschema

    check: Callable[[Any], Any] = fastjsonschema.compile(
        _schema(name), use_default=False, use_formats=False
    )
    return check


@cache
def _validator(name: str) -> jsonschema.Draft202012Validator:
    # One per schema: a validator holds no state between documents, and building one per file costs
    # more than checking a small file against it.
    import jsonschema

    return jsonschema.Draft202012Validator(_schema(name))


def validate(doc: Document, *, schema: str) -> None:
    """ConfigError for the first problem (the one that explains most others), if any."""
    found = problems(doc, schema=schema, limit=1)
    if found:
        raise found[0]


# `lint` reports every problem of a file up to this many; more would bury the first.
MAX_PROBLEMS = 20


def problems(doc: Document, *, schema: str, limit: int = MAX_PROBLEMS) -> list[ConfigError]:
    """Every schema problem of `doc`, the one `validate` raises first, then the others by line."""
    from fastjsonschema import JsonSchemaValueException

    try:
        _fast_check(schema)(doc.data)
        return []  # valid to jsonschema too (fastjsonschema never accepts what jsonschema refuses)
    except JsonSchemaValueException:
        pass  # jsonschema decides (fastjsonschema refuses a little more) and words the error
    import jsonschema

    validator = _validator(schema)
    errors = sorted(
        validator.iter_errors(doc.data), key=lambda e: (list(map(str, e.absolute_path)), e.message)
    )
    if not errors:
        return []
    # An unknown key explains most other errors (a typo'd `comand` is why `command`
    # is missing), so it is reported first, at the line of the key itself.
    unknown = [e for e in errors if e.validator == "additionalProperties"]
    first = unknown[0] if unknown else jsonschema.exceptions.best_match(errors)
    found = [_problem(doc, schema, first)]
    seen = {found[0].message}
    rest = [_problem(doc, schema, e) for e in errors if e is not first]
    for problem in sorted(rest, key=lambda p: p.line or 0):
        if len(found) >= limit:
            break
        if problem.message not in seen:
            seen.add(problem.message)
            found.append(problem)
    return found


def _problem(doc: Document, schema: str, error: jsonschema.ValidationError) -> ConfigError:
    path: Path_ = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        extra = sorted(set(error.instance) - set(known))
        if extra:
            path = (*path, extra[0])
    field = ".".join(_shape(p) if _secret_inside(p) else str(p) for p in path)
    prefix = f"field '{field}': " if field else ""
    return doc.error(path, prefix + _describe(error), hint=_hint(schema, path, error))


# YAML 1.1 reads these unquoted words as booleans, and digits as numbers: a job's argument or
# label written so is not the string its author meant.
_QUOTE_IT = (
    'quote it: YAML reads yes/no, on/off, true/false as booleans and digits as numbers ("yes")'
)


def _hint(schema: str, path: Path_, error: jsonschema.ValidationError | None = None) -> str | None:
    """Where to look next: how to fix the value, or the page that documents the field."""
    if error is not None and error.validator == "type" and _wants_string(error.schema):
        if isinstance(error.instance, bool | int | float):
            return _QUOTE_IT
    if schema == "job":
        return "every job key is in docs/policy.md#job-files"
    if schema != "policy":
        return None
    if len(path) >= 3 and path[0] in ("approvers", "proposers", "runners") and path[2] == "github":
        return GITHUB_ID_HINT
    if path[:1] == ("github",):
        return "the github: keys are in docs/policy.md and docs/github.md"
    return "every policy key is in docs/policy.md"


def _wants_string(schema: object) -> bool:
    wanted = schema.get("type") if isinstance(schema, dict) else None
    return wanted == "string" or (isinstance(wanted, list) and "string" in wanted)


def _describe(error: jsonschema.ValidationError) -> str:
    schema: RawMapping = error.schema if isinstance(error.schema, dict) else {}
    instance: Any = error.instance
    if error.validator == "additionalProperties":
        known = schema.get("properties", {})
        extra = sorted(set(instance) - set(known))
        import difflib  # (an error's hint only)

        guess = difflib.get_close_matches(extra[0], list(known), n=1) if extra else []
        hint = f" (did you mean '{guess[0]}'?)" if guess else ""
        return (
            f"unknown key {', '.join(map(_short, extra))}{hint}; allowed keys: "
            f"{', '.join(sorted(known))}"
        )
    if error.validator == "required":
        return str(error.message).replace("is a required property", "is required")
    if error.validator == "pattern":
        return f"{_short(instance)} does not match {schema['pattern']}"
    if error.validator == "type":
        if _secret_inside(instance):
            return f"expected {schema['type']}, found {_shape(instance)}"
        return f"expected {schema['type']}, found {type(instance).__name__} {_short(instance)}"
    if error.validator in ("oneOf", "anyOf") and "description" in schema:
        return f"expected {schema['description']}, found {_short(instance)}"
    if _secret_inside(instance):
        # jsonschema's own wording quotes the value; this one would be masked, so its shape only.
        return f"{_short(instance)} is not valid here ({error.validator})"
    return str(error.message)


def _short(value: Any) -> str:
    """A value as an error may show it: quoted and cut, unless the redactor would mask some of it.

    Errors reach the terminal, an Actions annotation and the step summary, and a job file's error
    becomes the permanent `rejected` record on mergegate/audit: a token pasted into the wrong
    field is named by its shape ("str (looks like a GitHub token)"), never quoted (issue 22).
    """
    if _secret_inside(value):
        return _shape(value)
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _secret_inside(value: Any) -> bool:
    from mergegate.redaction import find_credential, redact_text

    if isinstance(value, str):
        return find_credential(value) is not None or redact_text(value) != value
    if isinstance(value, dict):
        return any(_secret_inside(k) or _secret_inside(v) for k, v in value.items())
    if isinstance(value, list | tuple):
        return any(_secret_inside(v) for v in value)
    return False


def _shape(value: Any) -> str:
    from mergegate.redaction import find_credential

    if isinstance(value, str):
        kind = find_credential(value) or "secret"
        article = "an" if kind[0] in "aeiouAEIOU" else "a"
        return f"str (looks like {article} {kind})"
    if isinstance(value, dict):
        return f"mapping of {len(value)} key(s), one of which looks like a secret"
    return f"list of {len(value)} item(s), one of which looks like a secret"
