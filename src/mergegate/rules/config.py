"""YAML loading and JSON Schema validation: the only place raw dicts exist.

Loading is safe (no Python tags), rejects duplicate keys and aliases (which
would let one file expand into millions of nodes), and keeps the line of
every value so that an error can point at it.
"""

from __future__ import annotations

import json
import re
from collections import OrderedDict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import date, datetime
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from mergegate.errors import ConfigError

if (
    TYPE_CHECKING
):  # imported when a document is not provably valid (about 0.2 s of CPU a process saves)
    import jsonschema

Path_ = tuple[str | int, ...]

MAX_YAML_BYTES = 1024 * 1024
# Deeper documents are refused before they are composed: PyYAML's composer
# recurses once per level, and a few thousand levels raise RecursionError.
MAX_YAML_DEPTH = 64
_PLAIN_TAGS = ("tag:yaml.org,2002:map", "tag:yaml.org,2002:seq")


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
    try:
        node = _compose_checked(text, file)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else None
        what = exc.problem or exc.context or "invalid YAML"
        raise ConfigError(f"invalid YAML: {what}", file=file, line=line) from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"invalid YAML: {exc}", file=file) from None
    if node is None:
        raise ConfigError("file is empty; expected a YAML mapping", file=file, line=1)
    lines: dict[Path_, int] = {}
    data = _convert(node, (), lines, file, set())
    return Document(file=file, data=data, lines=lines)


class _Loader(yaml.SafeLoader):
    """SafeLoader whose scanner keeps its possible simple keys in linear time, not quadratic.

    PyYAML's scanner looks at every pending possible simple key (one per open flow level) on every
    token, and a key stays pending for up to 1,024 characters: `[` * 3000 cost about 0.4 s of CPU
    before the depth guard could refuse it (`_DepthLoader`), a second for the two-pass reading.
    Keys are saved in the order of the text (a later key has a later index, line and token number,
    and a key saved again at its level goes to the end), so a stale key is always among the first
    in that order and the nearest is the first: only the front need be looked at. The same tokens,
    the same errors at the same marks (tests/rules/test_job.py holds it to PyYAML's own scanner).
    """

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        # Ordered as a dict is, and its first key found without passing the deleted ones.
        self.possible_simple_keys: OrderedDict[int, Any] = OrderedDict()

    def next_possible_simple_key(self) -> int | None:
        for key in self.possible_simple_keys.values():
            return key.token_number  # type: ignore[no-any-return]
        return None

    def stale_possible_simple_keys(self) -> None:
        keys = self.possible_simple_keys
        while keys:
            level, key = next(iter(keys.items()))
            if key.line == self.line and self.index - key.index <= 1024:
                return  # a later key is later in the text: not stale either
            if key.required:
                raise yaml.scanner.ScannerError(
                    "while scanning a simple key",
                    key.mark,
                    "could not find expected ':'",
                    self.get_mark(),
                )
            del keys[level]


class _DepthLoader(_Loader):
    """SafeLoader refusing, as it composes, what `_check_depth` refuses before composing (one pass,
    not two)."""

    def __init__(self, stream: str, file: str) -> None:
        super().__init__(stream)
        self.file = file
        self.depth = 0

    def compose_node(self, parent: yaml.Node | None, index: int) -> yaml.Node | None:
        if not self.check_event(yaml.CollectionStartEvent):
            return super().compose_node(parent, index)
        event = self.peek_event()  # type: ignore[no-untyped-call]
        self.depth += 1
        if self.depth > MAX_YAML_DEPTH:
            line = event.start_mark.line + 1 if event.start_mark is not None else None
            raise ConfigError(
                f"YAML nests deeper than {MAX_YAML_DEPTH} levels", file=self.file, line=line
            )
        try:
            return super().compose_node(parent, index)
        finally:
            self.depth -= 1


# A file as most job files are written: `key: value` lines at the margin (and whole-line comments,
# blank lines), each value a plain word, a quoted string on one line, or a one-line flow list of
# those; printable ASCII only. PyYAML's scanner costs about 0.5 ms for such a file; this reading,
# 0.02 ms. It builds the nodes PyYAML composes (tags from PyYAML's own resolver, start marks as its
# reader makes them: end marks are not read by anything here) or returns None, and PyYAML reads the
# file. tests/rules/test_job.py holds the two to the same nodes over a generated corpus.
_WORD = r"(?:[A-Za-z0-9_./]|-(?=[A-Za-z0-9_./+=@%~-]))[A-Za-z0-9_./+=@%~-]*"
_SINGLE = r"'(?:[ -&(-~]|'')*'"
_DOUBLE = r'"[ !#-\[\]-~]*"'
_ITEM = f"{_WORD}|{_SINGLE}|{_DOUBLE}"
_LINE = re.compile(
    f"([A-Za-z_][A-Za-z0-9_-]{{0,127}}):( +)(?:({_ITEM})|\\[( *)((?:{_ITEM})(?: *, "
    f"*(?:{_ITEM}))*)? *\\])"
)
_TOKEN = re.compile(f"{_ITEM}")
_PRINTABLE = re.compile(r"[ -~\n]*")
_RESOLVER = yaml.resolver.Resolver()
_SIMPLE_TAGS = frozenset(
    f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "timestamp")
)


def _compose_simple(text: str) -> yaml.Node | None:
    if not _PRINTABLE.fullmatch(text):
        return None
    buffer = text + "\0"
    pairs: list[tuple[yaml.Node, yaml.Node]] = []
    index = 0
    for number, line in enumerate(text.split("\n")):
        if line and not line.startswith("#"):
            match = _LINE.fullmatch(line)
            if match is None:
                return None
            key = _scalar_node(match[1], index, number, 0, buffer)
            value: yaml.Node | None
            if match[3] is not None:
                value = _scalar_node(
                    match[3], index + match.start(3), number, match.start(3), buffer
                )
            else:
                start = yaml.Mark(
                    "<unicode string>",
                    index + match.end(2),
                    number,
                    match.end(2),
                    buffer,
                    index + match.end(2),
                )
                items = [
                    _scalar_node(m[0], index + m.start(), number, m.start(), buffer)
                    for m in _TOKEN.finditer(line, match.start(5))
                    if match[5] is not None and m.end() <= match.end(5)
                ]
                if any(item is None for item in items):
                    return None
                value = yaml.SequenceNode(
                    "tag:yaml.org,2002:seq", items, start, start, flow_style=True
                )
            if key is None or value is None:
                return None
            pairs.append((key, value))
        index += len(line) + 1
    if not pairs:
        return None
    return yaml.MappingNode(
        "tag:yaml.org,2002:map",
        pairs,
        pairs[0][0].start_mark,
        pairs[-1][1].end_mark,
        flow_style=False,
    )


def _scalar_node(
    token: str, index: int, line: int, column: int, buffer: str
) -> yaml.ScalarNode | None:
    if token[0] == "'":
        value, style, implicit = token[1:-1].replace("''", "'"), "'", (False, True)
    elif token[0] == '"':
        value, style, implicit = token[1:-1], '"', (False, True)
    else:
        value, style, implicit = token, None, (True, False)
    tag = _RESOLVER.resolve(yaml.ScalarNode, value, implicit)  # type: ignore[no-untyped-call]
    if tag not in _SIMPLE_TAGS:
        return None
    start = yaml.Mark("<unicode string>", index, line, column, buffer, index)
    end = yaml.Mark(
        "<unicode string>",
        index + len(token),
        line,
        column + len(token),
        buffer,
        index + len(token),
    )
    return yaml.ScalarNode(tag, value, start, end, style=style)


def _compose(text: str, file: str) -> yaml.Node | None:
    """`_compose_two_pass` in one pass: the same events in the same order, and the depth refused at
    the
    same event; only a composer error (alias, anchor, a second document) could come before a depth
    error that the two-pass reading would report first, so the caller asks that reading then."""
    loader = _DepthLoader(text, file)
    try:
        return loader.get_single_node()
    finally:
        loader.dispose()


def _compose_checked(text: str, file: str) -> yaml.Node | None:
    node = _compose_simple(text)
    if node is not None:
        return node
    try:
        return _compose(text, file)
    except yaml.composer.ComposerError:
        # An alias or anchor problem: which of a file's problems is reported is the two-pass
        # reading's.
        return _compose_two_pass(text, file)


def _compose_two_pass(
    text: str, file: str, loader: type[yaml.SafeLoader] = _Loader
) -> yaml.Node | None:
    """The reference reading: the depth of the whole stream first, then compose (tests pass
    PyYAML's own SafeLoader as `loader`, the reference for `_Loader`)."""
    _check_depth(text, file, loader)
    return yaml.compose(text, Loader=loader)


def _check_depth(text: str, file: str, loader: type[yaml.SafeLoader] = _Loader) -> None:
    """ConfigError when collections nest deeper than MAX_YAML_DEPTH (the parser itself does not
    recurse)."""
    depth = 0
    for event in yaml.parse(text, Loader=loader):
        if isinstance(event, yaml.CollectionStartEvent):
            depth += 1
            if depth > MAX_YAML_DEPTH:
                line = event.start_mark.line + 1 if event.start_mark is not None else None
                raise ConfigError(
                    f"YAML nests deeper than {MAX_YAML_DEPTH} levels", file=file, line=line
                )
        elif isinstance(event, yaml.CollectionEndEvent):
            depth -= 1


def _convert(
    node: yaml.Node, path: Path_, lines: dict[Path_, int], file: str, seen: set[int]
) -> Any:
    lines[path] = node.start_mark.line + 1
    # compose() hands back an alias as the very node it names: meeting a node
    # twice means an alias, which could expand one file into millions of values.
    if id(node) in seen:
        raise ConfigError("YAML aliases (*name) are not allowed", file=file, line=lines[path])
    seen.add(id(node))
    if not isinstance(node, yaml.ScalarNode) and node.tag not in _PLAIN_TAGS:
        raise ConfigError(f"YAML tag {node.tag} is not allowed", file=file, line=lines[path])
    if isinstance(node, yaml.MappingNode):
        result: dict[str, Any] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode):
                raise ConfigError(
                    "mapping keys must be plain strings",
                    file=file,
                    line=key_node.start_mark.line + 1,
                )
            if key_node.tag == "tag:yaml.org,2002:merge":
                raise ConfigError(
                    "YAML merge keys (<<) are not allowed",
                    file=file,
                    line=key_node.start_mark.line + 1,
                )
            key = key_node.value
            if key in result:
                raise ConfigError(
                    f"duplicate key '{key}' (first at line {lines[(*path, key)]})",
                    file=file,
                    line=key_node.start_mark.line + 1,
                )
            result[key] = _convert(value_node, (*path, key), lines, file, seen)
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, (*path, i), lines, file, seen) for i, item in enumerate(node.value)]
    return _scalar(node, file)


def _scalar(node: yaml.Node, file: str) -> Any:
    # A SafeLoader with only its constructor's state: constructing a scalar reads nothing else (and
    # a
    # whole loader's reader, scanner and parser, made for every value, cost more than the value).
    loader = yaml.SafeLoader.__new__(yaml.SafeLoader)
    yaml.constructor.SafeConstructor.__init__(loader)
    try:
        value = loader.construct_object(node, deep=True)
        # Unquoted times become datetime objects in YAML 1.1; keep them as the
        # text the user wrote so the schema and the error messages see that.
        return node.value if isinstance(value, (datetime, date)) else value
    except (yaml.YAMLError, ValueError) as exc:
        # ValueError: a value PyYAML tags by its shape alone but cannot build (0b_, 2001-02-30).
        raise ConfigError(
            f"invalid value: {exc}", file=file, line=node.start_mark.line + 1
        ) from None


@cache
def _schema(name: str) -> dict[str, Any]:
    # Next to this module (importlib.resources would cost more to import than the read).
    text = (Path(__file__).parent.parent / "schemas" / f"{name}.schema.json").read_text("utf-8")
    schema: dict[str, Any] = json.loads(text)
    return schema


# How to find an account's numeric id (a login can be renamed and re-registered, an id cannot).
GITHUB_ID_HINT = "find an account's numeric id: gh api users/LOGIN --jq .id (docs/github.md)"


@cache
def _validator(name: str) -> jsonschema.Draft202012Validator:
    # One per schema: a validator holds no state between documents, and building one per file costs
    # more than checking a small file against it.
    import jsonschema

    return jsonschema.Draft202012Validator(_schema(name))


def validate(doc: Document, *, schema: str) -> None:
    if _surely_valid(_schema(schema), doc.data):
        # what jsonschema would say too (no error), at a tenth of its cost, without importing it
        return
    import jsonschema

    validator = _validator(schema)
    errors = sorted(
        validator.iter_errors(doc.data), key=lambda e: (list(map(str, e.absolute_path)), e.message)
    )
    if not errors:
        return
    # An unknown key explains most other errors (a typo'd `comand` is why `command`
    # is missing), so it is reported first, at the line of the key itself.
    unknown = [e for e in errors if e.validator == "additionalProperties"]
    error = unknown[0] if unknown else jsonschema.exceptions.best_match(errors)
    path: Path_ = tuple(error.absolute_path)
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = error.schema.get("properties", {}) if isinstance(error.schema, dict) else {}
        extra = sorted(set(error.instance) - set(known))
        if extra:
            path = (*path, extra[0])
    field = ".".join(str(p) for p in path)
    prefix = f"field '{field}': " if field else ""
    raise doc.error(path, prefix + _describe(error), hint=_hint(schema, path))


# Keywords that assert nothing (`format` too: the validator is built without a format checker).
_ANNOTATIONS = frozenset({"$schema", "$id", "$defs", "title", "description", "format"})
_TYPES: dict[str, Any] = {"string": str, "array": list, "object": dict, "boolean": bool}


def _surely_valid(schema: Any, instance: Any) -> bool:
    """True only when `instance` satisfies `schema` as jsonschema reads it; False also whenever
    unsure
    (then jsonschema decides, and says why not). Held to jsonschema over generated jobs and
    policies."""
    return _verdict(schema, instance, schema) is True


def _verdict(schema: Any, instance: Any, root: Any) -> bool | None:
    """Whether `instance` satisfies `schema` (a part of `root`, for `$ref`): True or False only
    where
    that is what jsonschema (Draft 2020-12, no format checker) says too; None when unsure.

    The keywords of job.schema.json and policy.schema.json, each as jsonschema's own check of it
    (`pattern` is re.search); anything else is None. Floats are always None (an integral float is
    an integer to jsonschema), and so are keywords on instances of a type they do not apply to.
    False is exact too, because `oneOf` and `not` decide by it.
    """
    if not isinstance(schema, dict) or type(instance) not in _EXACT:
        return None
    return _all(
        _keyword(keyword, value, schema, instance, root)
        for keyword, value in schema.items()
        if keyword not in _ANNOTATIONS
    )


# The types YAML reading gives (subclasses, floats, bytes and dates: unsure).
_EXACT = frozenset({str, int, bool, list, dict, type(None)})


def _keyword(
    keyword: str, value: Any, schema: dict[str, Any], instance: Any, root: Any
) -> bool | None:
    kind = type(instance)
    if keyword == "type":
        if value in ("integer", "number"):  # (floats are unsure: see above)
            return kind is int
        if value == "null":
            return instance is None
        return kind is _TYPES[value] if isinstance(value, str) and value in _TYPES else None
    if keyword == "$ref":
        if (
            not isinstance(value, str)
            or not value.startswith("#/$defs/")
            or "/" in value[8:]
            or "~" in value
        ):
            return None
        target = root.get("$defs", {}).get(value[8:]) if isinstance(root, dict) else None
        return None if target is None else _verdict(target, instance, root)
    if keyword == "const":
        # jsonschema's equality: a bool equals only a bool (True is not 1); strings and ints by
        # value.
        return (
            (kind is type(value) and instance == value)
            if kind in (str, int, bool) and type(value) in (str, int, bool)
            else None
        )
    if keyword == "enum":
        return (
            (kind is str and instance in value)
            if kind is str or all(type(v) is str for v in value)
            else None
        )
    if keyword in ("oneOf", "anyOf"):
        found = [_verdict(part, instance, root) for part in value]
        if keyword == "anyOf":
            return True if True in found else (None if None in found else False)
        return None if None in found else found.count(True) == 1
    if keyword == "not":
        inner = _verdict(value, instance, root)
        return None if inner is None else not inner
    if keyword in ("pattern", "maxLength", "minLength"):
        if kind is not str:
            return None
        if keyword == "pattern":
            return re.search(value, instance) is not None
        return bool(len(instance) <= value if keyword == "maxLength" else len(instance) >= value)
    if keyword in ("minimum", "maximum"):
        if kind is not int or type(value) is not int:
            return None
        return bool(instance >= value if keyword == "minimum" else instance <= value)
    if keyword in ("items", "minItems", "maxItems", "uniqueItems"):
        if (
            kind is not list or "prefixItems" in schema
        ):  # (items then reads only what prefixItems does not)
            return None
        if keyword == "items":
            return _all(_verdict(value, item, root) for item in instance)
        if keyword in ("minItems", "maxItems"):
            return bool(len(instance) >= value if keyword == "minItems" else len(instance) <= value)
        if value is False:
            return True
        if value is not True or not all(type(item) in (str, int) for item in instance):
            return None  # (a bool is no int to jsonschema, but is one in a Python set)
        return len(set(instance)) == len(instance)
    if keyword in (
        "properties",
        "required",
        "additionalProperties",
        "maxProperties",
        "propertyNames",
    ):
        if kind is not dict:
            return None
        if keyword == "properties":
            return _all(
                _verdict(value[key], item, root) for key, item in instance.items() if key in value
            )
        if keyword == "required":
            return all(key in instance for key in value)
        if keyword == "additionalProperties":
            if "patternProperties" in schema:  # (additional means matched by neither)
                return None
            known = schema.get("properties", {})
            extra = [item for key, item in instance.items() if key not in known]
            if value is False:
                return not extra
            return _all(_verdict(value, item, root) for item in extra)
        if keyword == "maxProperties":
            return bool(len(instance) <= value)
        return _all(_verdict(value, key, root) for key in instance)
    return None


def _all(verdicts: Iterable[bool | None]) -> bool | None:
    """All true: True; any false: False (one failing keyword or item makes it invalid); else None
    (unsure)."""
    unsure = False
    for verdict in verdicts:
        if verdict is False:
            return False
        unsure = unsure or verdict is None
    return None if unsure else True


def _hint(schema: str, path: Path_) -> str | None:
    """Where to look next: the page that documents the field (job errors explain themselves)."""
    if schema != "policy":
        return None
    if len(path) >= 3 and path[0] in ("approvers", "proposers", "runners") and path[2] == "github":
        return GITHUB_ID_HINT
    if path[:1] == ("github",):
        return "the github: keys are in docs/policy.md and docs/github.md"
    return "every policy key is in docs/policy.md"


def _describe(error: jsonschema.ValidationError) -> str:
    schema: dict[str, Any] = error.schema if isinstance(error.schema, dict) else {}
    instance: Any = error.instance
    if error.validator == "additionalProperties":
        known = schema.get("properties", {})
        extra = sorted(set(instance) - set(known))
        import difflib  # (an error's hint only)

        guess = difflib.get_close_matches(extra[0], list(known), n=1) if extra else []
        hint = f" (did you mean '{guess[0]}'?)" if guess else ""
        return (
            f"unknown key {', '.join(map(repr, extra))}{hint}; allowed keys: "
            f"{', '.join(sorted(known))}"
        )
    if error.validator == "required":
        return str(error.message).replace("is a required property", "is required")
    if error.validator == "pattern":
        return f"{_short(instance)} does not match {schema['pattern']}"
    if error.validator == "type":
        return f"expected {schema['type']}, found {type(instance).__name__} {_short(instance)}"
    if error.validator in ("oneOf", "anyOf") and "description" in schema:
        return f"expected {schema['description']}, found {_short(instance)}"
    return str(error.message)


def _short(value: Any) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."
