"""The fast reading of simple YAML (config._compose_checked) against the reference reading, and values
PyYAML tags but cannot construct (from a differential review; notes/yamlrt.md).

* test_a_value_pyyaml_cannot_construct_is_a_config_error_*: a ValueError escaped parse_yaml (not a
  ConfigError naming file and line), so one such file stopped `lint` of the files after it.
* test_fast_reading_matches_reference_*: a guard that fails as soon as the fast reading reads any of these
  inputs differently from PyYAML (none found by 80,000 fuzzed files).
"""
from __future__ import annotations

import pytest
import yaml

from mergegate import config
from mergegate.errors import ConfigError

# S1: the resolver tags these int/timestamp (or an explicit tag asks for one), SafeConstructor then raises
# ValueError (not yaml.YAMLError), which config._scalar does not catch.
_UNCONSTRUCTIBLE = [
    b"k: 0b_\n",             # fast path: int regex [-+]?0b[0-1_]+, int('', 2)
    b"k: 0x_\n",             # fast path: int('', 16)
    b"k: -0b_\n",            # fast path
    b"k: [echo, 0x_]\n",     # fast path, flow list
    b"k: 2001-02-30\n",      # fast path: timestamp regex, date(2001, 2, 30)
    b"k: 0000-01-01\n",      # fast path: year 0
    b"k:\n  - 0b_\n",        # PyYAML path (block list)
    b"k: !!int x\n",         # PyYAML path (explicit tag)
]


@pytest.mark.parametrize("text", _UNCONSTRUCTIBLE)
def test_a_value_pyyaml_cannot_construct_is_a_config_error_naming_the_line(text: bytes) -> None:
    with pytest.raises(ConfigError) as info:
        config.parse_yaml(b"id: x\n" + text, file="jobs/x.yaml")
    assert info.value.line == 2 + text.count(b"\n") - 1  # the line of the value (line 3 for the block list)
    assert info.value.file == "jobs/x.yaml"


def test_a_value_pyyaml_cannot_construct_is_a_config_error_for_a_job_file() -> None:
    from mergegate.job import parse_job  # the path lint, inbox and the runner take

    with pytest.raises(ConfigError):
        parse_job(b"id: x\ncommand: [echo, hi]\ntimeout_seconds: 0b_\n", path="jobs/x.yaml", blob="0" * 40)


# Guard: inputs at the edge of the fast grammar (quotes, escapes, YAML 1.1 words, comments, markers).
_EDGE = [
    b"id: hello\ncommand: [echo, \"hello from mergegate\"]\ntimeout_seconds: 10\n",
    b"k: 'a''b'\n", b"k: ''''\n", b"k: ''\n", b"k: \"\"\n", b"k: 'a\\nb'\n", b"k: '#x'\n", b"k: \"#x\"\n",
    b"k: ['a, b', \"c, d\", e]\n", b"k: ['a'', b']\n", b"k: [ a ,b,  'c' ]\n", b"k: []\n", b"k: [ ]\n",
    b"k: yes\n", b"k: on\n", b"k: ~x\n", b"k: -~\n", b"k: 0x1F\n", b"k: 0o17\n", b"k: 017\n", b"k: 1_000\n",
    b"k: .inf\n", b"k: -.inf\n", b"k: .nan\n", b"k: null\n", b"k: 2001-12-14\n", b"k: ...\n", b"k: ---\n",
    b"k: --\n", b"k: -x\n", b"k: a=b\n", b"k: 50%\n", b"k: user@host\n", b"k: ._\n", b"k: 0_\n",
    b"on: 1\nyes: 2\nnull: 3\n", b"a: 1\na: 2\n", b"#c\n\nk: v\n#: x\n", b"k: v", b"k" * 128 + b": v\n",
    b"k: v\r\n", b"\xef\xbb\xbfk: v\n", b"k: v \n", b"k: v # c\n", b"k:\tv\n", b"k: [a,]\n", b"k: 'x\n  y'\n",
]


def _outcome(read: object, text: str) -> object:
    try:
        node = read(text, "f")  # type: ignore[operator]
        if node is None:
            return ("empty",)
        lines: dict[object, object] = {}
        data = config._convert(node, (), lines, "f", set())
        return ("ok", repr(data), sorted(lines.items(), key=repr))
    except ConfigError as exc:
        return ("config", exc.message, exc.line)
    except yaml.YAMLError as exc:
        return ("yaml", str(exc))
    except Exception as exc:  # the two readings must fail the same way too
        return (type(exc).__name__, str(exc))


@pytest.mark.parametrize("text", _EDGE)
def test_fast_reading_matches_reference_on_edge_inputs(text: bytes) -> None:
    decoded = text.decode("utf-8")
    assert _outcome(config._compose_checked, decoded) == _outcome(config._compose_two_pass, decoded)
