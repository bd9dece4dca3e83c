"""libyaml's reading (config._read_libyaml, PyYAML's CSafeLoader) against PyYAML's own (the
reference: what mergegate has always read and said), and values PyYAML tags but cannot construct
(from a differential review; notes/yamlrt.md).

* test_a_value_pyyaml_cannot_construct_is_a_config_error_*: a ValueError escaped parse_yaml (not a
  ConfigError naming file and line), so one such file stopped `lint` of the files after it.
* test_libyaml_reading_matches_reference_*: a guard that fails as soon as parse_yaml reads any of
  these inputs differently from PyYAML's own reading (tabs, `?` in flow scalars, `|#`, tags and
  empty flow values are where libyaml's language differs: see config's module doc).
* test_the_depth_guard_*, test_a_deep_flow_collection_*: which of the depth and a syntax error is
  reported first (the scanner's look-ahead decides), and the time a deep document costs.
* test_the_linear_scanner_*, test_an_unclosed_*: config._Loader, the scanner PyYAML's reading
  reads with, against PyYAML's own (quadratic in the depth of a flow collection: `[` * 3000 took it
  0.2 s to refuse).
* test_a_text_nesting_*: config._shallow keeps such texts from libyaml, whose scanner is quadratic
  in the depth too and composes a whole text before the depth is refused.
"""

from __future__ import annotations

import pytest
import yaml

from mergegate.errors import ConfigError
from mergegate.rules import config

# S1: the resolver tags these int/timestamp (or an explicit tag asks for one), SafeConstructor then
# raises ValueError (not yaml.YAMLError), which config._scalar does not catch.
_UNCONSTRUCTIBLE = [
    b"k: 0b_\n",  # libyaml: int regex [-+]?0b[0-1_]+, int('', 2)
    b"k: 0x_\n",  # libyaml: int('', 16)
    b"k: -0b_\n",  # libyaml
    b"k: [echo, 0x_]\n",  # libyaml, flow list
    b"k: 2001-02-30\n",  # libyaml: timestamp regex, date(2001, 2, 30)
    b"k: 0000-01-01\n",  # libyaml: year 0
    b"k:\n  - 0b_\n",  # libyaml (block list)
    b"k: !!int x\n",  # PyYAML (explicit tag)
]


@pytest.mark.parametrize("text", _UNCONSTRUCTIBLE)
def test_a_value_pyyaml_cannot_construct_is_a_config_error_naming_the_line(text: bytes) -> None:
    with pytest.raises(ConfigError) as info:
        config.parse_yaml(b"id: x\n" + text, file="jobs/x.yaml")
    assert (
        info.value.line == 2 + text.count(b"\n") - 1
    )  # the line of the value (line 3 for the block list)
    assert info.value.file == "jobs/x.yaml"


def test_a_value_pyyaml_cannot_construct_is_a_config_error_for_a_job_file() -> None:
    from mergegate.rules.job import parse_job  # the path lint, inbox and the runner take

    with pytest.raises(ConfigError):
        parse_job(
            b"id: x\ncommand: [echo, hi]\ntimeout_seconds: 0b_\n", path="jobs/x.yaml", blob="0" * 40
        )


# Guard: inputs at the edge of where libyaml and PyYAML agree (quotes, escapes, YAML 1.1 words,
# comments, markers, tabs, empty values in flow collections).
_EDGE = [
    b'id: hello\ncommand: [echo, "hello from mergegate"]\ntimeout_seconds: 10\n',
    b"k: 'a''b'\n",
    b"k: ''''\n",
    b"k: ''\n",
    b'k: ""\n',
    b"k: 'a\\nb'\n",
    b"k: '#x'\n",
    b'k: "#x"\n',
    b"k: ['a, b', \"c, d\", e]\n",
    b"k: ['a'', b']\n",
    b"k: [ a ,b,  'c' ]\n",
    b"k: []\n",
    b"k: [ ]\n",
    b"k: yes\n",
    b"k: on\n",
    b"k: ~x\n",
    b"k: -~\n",
    b"k: 0x1F\n",
    b"k: 0o17\n",
    b"k: 017\n",
    b"k: 1_000\n",
    b"k: .inf\n",
    b"k: -.inf\n",
    b"k: .nan\n",
    b"k: null\n",
    b"k: 2001-12-14\n",
    b"k: ...\n",
    b"k: ---\n",
    b"k: --\n",
    b"k: -x\n",
    b"k: a=b\n",
    b"k: 50%\n",
    b"k: user@host\n",
    b"k: ._\n",
    b"k: 0_\n",
    b"on: 1\nyes: 2\nnull: 3\n",
    b"a: 1\na: 2\n",
    b"#c\n\nk: v\n#: x\n",
    b"k: v",
    b"k" * 128 + b": v\n",
    b"k: v\r\n",
    b"\xef\xbb\xbfk: v\n",
    b"k: v \n",
    b"k: v # c\n",
    b"k:\tv\n",
    b"k: [a,]\n",
    b"k: 'x\n  y'\n",
    b"k: [a?]\n",
    b"k: |#\n  x\n",
    b"k: {a: \n }\n",
    b"k: [a: \n ]\n",
    b"k: {a\n }\n",
    b"---\n",
    b"k: !!str\n",
    b"k: 1\n---\nj: 2\n",
    b"k: 1\r\nj: [a,\r\n b]\r\n",
    b"k: [x, \x00]\n",
    b"k: a\xc2\x85b\n",
    b"k: a\xe2\x80\xa8b: c\n",
    b"{k: &a [x], j: *a}\n",
    b"k: [1, 2]\nk: 3\n",
]


def _reference(text: str, file: str) -> config.Document:
    """PyYAML's own reading, as mergegate has always read: the depth first, then compose, with
    PyYAML's own SafeLoader (config._Loader is held to it below)."""
    return config._document(
        config._compose_pyyaml(text, file, yaml.SafeLoader), file, libyaml=False
    )


def _outcome(read: object, text: str) -> object:
    try:
        doc = read(text, "f")  # type: ignore[operator]
        return ("ok", repr(doc.data), sorted(doc.lines.items(), key=repr))
    except ConfigError as exc:
        return ("config", exc.message, exc.line)
    except Exception as exc:  # the two readings must fail the same way too
        return (type(exc).__name__, str(exc))


def _parse(text: str, file: str) -> config.Document:
    return config.parse_yaml(text, file=file)


@pytest.mark.parametrize("text", _EDGE)
def test_libyaml_reading_matches_reference_on_edge_inputs(text: bytes) -> None:
    decoded = text.decode("utf-8")
    assert _outcome(_parse, decoded) == _outcome(_reference, decoded)


# Which comes first, the depth or a syntax error, is the scanner's look-ahead's to decide (a simple
# key may stay pending for 1,024 characters): libyaml's reading must report what PyYAML's own does,
# the same error at the same line.
_LOOKAHEAD = [
    *(f"a: {'[' * n}@\n" for n in (63, 64, 70, 200)),
    *(f"a: {'[' * n}{']' * n}\n" for n in (64, 65, 200)),
    # 70 keys pending (at indexes 3 to 72), and `b` then a bad character: none, some or all of the
    # keys stale when `b` is read, so the guard refuses the depth before the scanner reaches `@`, or
    # not. (PyYAML's own scanner costs time quadratic in the keys pending, not in the spaces between
    # tokens.)
    *(
        f"a: {'[' * 70}{' ' * n}b, @\n"
        for n in (900, 954, 955, 956, 990, 1022, 1023, 1024, 1025, 1100)
    ),
    "a: " + "[" * 70 + "\nb, @",
    "a: " + "[" * 70 + " " * 1100 + "@",
    "k" * 1020 + ": 1\n",
    "k" * 1030 + ": 1\n",
    "[" + "k" * 1030 + ": 1]\n",
    "{" + "k" * 1020 + ": 1}\n",
    "a: 1\nb\nc: 2\n",
    "a:\n  b\n  c: d\n",
    "- a\n- b\nc: d\n",
    "[a\n: 1]\n",
    "{a: [b: c, d]}\n",
    "? a\n: b\n",
    "a: [\n" + "[\n" * 70 + "]\n" * 71,
    "a: " + "[b: " * 80 + "c" + "]" * 80 + "\n",
    "a: " + "{b: " * 70 + "1" + "}" * 70,
    "&a [*a, " * 20 + "]" * 20,
    "a: !!str [" * 10 + "]" * 10,
    "'a': 1\n\"b\"\n: 2\n",
    "a: 'x\n" + "[" * 100,
    # More brackets than levels allowed (config._shallow asks libyaml's events), shallow or not,
    # brackets in quotes and comments, and many lines nested too deep (each alone costs libyaml
    # time quadratic in its depth).
    "a: [" + ", ".join(["[x]"] * 70) + "]\n",
    "a: [" + ", ".join(["{k: 'v]'}"] * 70) + "]\n",
    "a: '" + "[" * 70 + "'\nb: [x] # " + "{" * 70 + "\n",
    "".join(f"k{i}: " + "[b: " * 100 + "]" * 100 + "\n" for i in range(3)),
    "a: " + "[\n" * 70 + "b, \n" * 5 + "]" * 70 + "\n",
    "a: " + "[" * 70 + "]" * 69 + "\n",
    "[" * 1100,
    "{" * 1100 + "@",
]
_ALPHABET = "[]{},:?-#&*!|>'\"% \n\tab1"


def test_the_depth_guard_and_the_scanner_report_what_pyyamls_own_reading_does() -> None:
    import random

    rng = random.Random(7)
    texts = [*_LOOKAHEAD, *(t.decode() for t in _EDGE)]
    texts += [
        "".join(rng.choice(_ALPHABET) for _ in range(rng.randrange(1, 40))) for _ in range(1500)
    ]
    kinds, messages = set(), set()
    for text in texts:
        ours = _outcome(_parse, text)
        assert ours == _outcome(_reference, text), text[:80]
        kinds.add(ours[0])
        messages.add(str(ours[1]) if ours[0] == "config" else "")
    assert kinds == {"ok", "config"}
    # The corpus reaches the depth refused, a required key gone stale, and an error found first by
    # the look-ahead.
    assert any("nests deeper than 64 levels" in m for m in messages)
    assert any("could not find expected ':'" in m for m in messages)
    assert any("cannot start any token" in m for m in messages)


def test_a_deep_flow_collection_costs_time_linear_in_its_depth() -> None:
    """Lines of Python run (counted, not timed) to refuse `[` * n: twice the depth, at most about
    twice the lines (libyaml composes it; PyYAML's own scanner would take about four times, in time
    quadratic in the depth)."""
    import sys

    def lines(depth: int) -> int:
        count = 0

        def trace(frame: object, event: str, arg: object) -> object:
            nonlocal count
            count += event == "line"
            return trace

        text = "a: " + "[" * depth + "]" * depth + "\n"
        sys.settrace(trace)
        try:
            with pytest.raises(ConfigError, match="nests deeper than 64 levels"):
                config.parse_yaml(text, file="f")
        finally:
            sys.settrace(None)
        return count

    small, large = lines(300), lines(600)
    assert large < 2.5 * small, (small, large)


# config._Loader: PyYAML's SafeLoader with its scanner's possible simple keys kept in linear time.
# Held to PyYAML's own SafeLoader: after every event, the same event, the scanner at the same place
# with the same tokens read ahead (what decides whether a later error or the depth is reported
# first), or the same error at the same mark.
def _steps(loader: type[yaml.SafeLoader], text: str) -> list[object]:
    try:
        reader = loader(text)
    except yaml.YAMLError as exc:  # (a character YAML does not allow: the reader refuses it)
        return [("error", str(exc))]
    steps: list[object] = []
    try:
        while reader.check_event():
            event = reader.get_event()
            steps.append(
                (
                    type(event).__name__,
                    getattr(event, "value", None),
                    getattr(event, "anchor", None),
                    event.start_mark.index,
                    event.end_mark.index,
                    reader.index,
                    len(reader.tokens),
                    reader.tokens_taken,
                )
            )
    except yaml.YAMLError as exc:
        steps.append(("error", str(exc)))
    finally:
        reader.dispose()
    return steps


def _depth_verdict(loader: type[yaml.SafeLoader], text: str) -> tuple[str, object]:
    try:
        config._check_depth(text, "f.yaml", loader)
        return ("ok", None)
    except ConfigError as exc:
        return ("config", (exc.message, exc.line))
    except yaml.YAMLError as exc:
        return ("yaml", str(exc))


def test_the_linear_scanner_reads_every_text_as_pyyamls_own_does() -> None:
    import random

    rng = random.Random(7)
    texts = [*_LOOKAHEAD, *(t.decode() for t in _EDGE)]
    texts += [
        "".join(rng.choice(_ALPHABET) for _ in range(rng.randrange(1, 40))) for _ in range(1500)
    ]
    errors, verdicts = [], set()
    for text in texts:
        ours = _steps(config._Loader, text)
        assert ours == _steps(yaml.SafeLoader, text), text[:80]
        errors += [step[1] for step in ours if step[0] == "error"]
        verdict = _depth_verdict(config._Loader, text)
        assert verdict == _depth_verdict(yaml.SafeLoader, text), text[:80]
        verdicts.add(verdict[0])
    assert verdicts == {"ok", "config", "yaml"}
    # The corpus reaches both of the scanner's rules it keeps differently: a required key gone
    # stale, and keys pending up to 1,024 characters (the depth refused, or an error found first,
    # by the same look-ahead).
    assert any("could not find expected ':'" in str(e) for e in errors)
    assert any("cannot start any token" in str(e) for e in errors)


def _lines_run(text: str) -> int:
    """Lines of Python run (counted, not timed) to refuse `text` as too deep."""
    import sys

    count = 0

    def trace(frame: object, event: str, arg: object) -> object:
        nonlocal count
        count += event == "line"
        return trace

    sys.settrace(trace)
    try:
        with pytest.raises(ConfigError, match="nests deeper than 64 levels"):
            config.parse_yaml(text, file="f")
    finally:
        sys.settrace(None)
    return count


def test_an_unclosed_deep_flow_collection_costs_time_linear_in_its_depth() -> None:
    """A hostile `[` * n that libyaml cannot read (never closed) is PyYAML's reading's to refuse:
    twice the depth, at most about twice the lines (PyYAML's own scanner: about four times)."""
    small, large = _lines_run("[" * 300), _lines_run("[" * 600)
    assert large < 2.5 * small, (small, large)


def test_a_text_nesting_too_deep_on_many_lines_is_not_composed_by_libyaml(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """libyaml composes a whole text before its depth can be refused, at a cost quadratic in the
    depth of each line: 50 lines of `[b: ` * 999 took 4.5 s of CPU. config._shallow stops at the
    first level too deep, and PyYAML's reading refuses it there (at its line, as always)."""
    composed: list[str] = []
    read = config._read_libyaml
    monkeypatch.setattr(config, "_read_libyaml", lambda t, f: composed.append(f) or read(t, f))
    deep = "".join(f"k{i}: " + "[b: " * 999 + "]" * 999 + "\n" for i in range(5))
    with pytest.raises(ConfigError, match="nests deeper than 64 levels") as info:
        config.parse_yaml(deep, file="f")
    assert info.value.line == 1 and composed == []
    # Many brackets, none too deep: libyaml reads it, as every text it reads as PyYAML does.
    wide = "a: [" + ", ".join(["[x]"] * 100) + "]\n"
    assert config.parse_yaml(wide, file="g").data == {"a": [["x"]] * 100} and composed == ["g"]
