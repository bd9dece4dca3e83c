"""Job files: every invalid or hostile file is a one-line error naming file, line and field."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from mergegate.errors import ConfigError
from mergegate.rules.job import check_unique_ids, parse_job

BLOB = "0" * 40


def _error(text: str, path: str = "jobs/x.yaml") -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse_job(text.encode(), path=path, blob=BLOB)
    return info.value


def test_valid_job_is_a_frozen_value() -> None:
    job = parse_job(
        b"id: x\ncommand: [echo, hi]\ncwd: sub/dir\nenv: {LANG: C}\nlabels: [prod]\n",
        path="jobs/x.yaml",
        blob=BLOB,
    )
    assert job.command == ("echo", "hi")
    assert job.cwd == "sub/dir"
    assert job.env == (("LANG", "C"),)
    assert job.labels == ("prod",)
    with pytest.raises(AttributeError):
        job.id = "y"  # type: ignore[misc]


def test_invalid_yaml_names_file_and_line() -> None:
    err = _error("id: x\ncommand: [echo\n")
    assert err.file == "jobs/x.yaml"
    assert err.line == 3
    assert "invalid YAML" in err.message


def test_duplicate_key_is_an_error_with_both_lines() -> None:
    err = _error("id: x\ncommand: [echo, a]\ncommand: [rm, -rf, /]\n")
    assert err.line == 3
    assert err.message == "duplicate key 'command' (first at line 2)"


def test_unknown_key_is_rejected() -> None:
    err = _error("id: x\ncommand: [echo]\nshell: true\n")
    assert err.line == 3
    assert "unknown key 'shell'" in err.message


def test_misspelt_key_is_named_with_a_suggestion_at_its_line() -> None:
    err = _error("id: x\ncomand: [echo]\n")
    assert err.line == 2
    assert err.message.startswith("field 'comand': unknown key 'comand' (did you mean 'command'?)")


def test_command_must_be_a_list_not_a_shell_string() -> None:
    err = _error("id: x\ncommand: echo hi; rm -rf /\n")
    assert err.line == 2
    assert "field 'command'" in err.message


def test_empty_command_is_rejected() -> None:
    err = _error("id: x\ncommand: []\n")
    assert "field 'command'" in err.message


def test_id_must_equal_file_name() -> None:
    err = _error("id: other\ncommand: [echo]\n")
    assert err.line == 1
    assert "must equal the file name 'x'" in err.message


def test_id_pattern() -> None:
    err = _error("id: Bad_ID\ncommand: [echo]\n", path="jobs/Bad_ID.yaml")
    assert "does not match" in err.message


def test_cwd_outside_repository() -> None:
    assert "inside the repository" in _error("id: x\ncommand: [echo]\ncwd: ../..\n").message
    assert "inside the repository" in _error("id: x\ncommand: [echo]\ncwd: /etc\n").message


@pytest.mark.parametrize(
    "name",
    [
        "PATH",
        "LD_PRELOAD",
        "DYLD_INSERT_LIBRARIES",
        "PYTHONPATH",
        "GIT_DIR",
        "SSH_AUTH_SOCK",
        "MERGEGATE_JOB_ID",
    ],
)
def test_forbidden_env_names(name: str) -> None:
    err = _error(f"id: x\ncommand: [echo]\nenv:\n  {name}: /tmp/evil\n")
    assert err.line == 4
    assert f"may not set {name}" in err.message


def test_yaml_alias_bomb_is_refused() -> None:
    text = "a: &a [x, x, x]\nb: &b [*a, *a, *a]\nid: x\ncommand: [echo]\n"
    assert "aliases" in _error(text).message


def test_python_tags_are_refused() -> None:
    err = _error("id: x\ncommand: !!python/object/apply:os.system [echo]\n")
    assert err.file == "jobs/x.yaml"


def test_not_a_mapping() -> None:
    assert "expected object" in _error("- a\n- b\n").message


def test_empty_file() -> None:
    assert "empty" in _error("").message


def test_non_utf8_file() -> None:
    with pytest.raises(ConfigError) as info:
        parse_job(b"id: x\ncommand: [\xff]\n", path="jobs/x.yaml", blob=BLOB)
    assert "UTF-8" in info.value.message


def test_credential_argument_is_rejected_without_echoing_it() -> None:
    err = _error("id: x\ncommand: [curl, --password=hunter2]\n")
    assert "argument 1" in err.message
    assert "hunter2" not in str(err)
    token = "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8"
    err = _error(f"id: x\ncommand: [gh, api, {token}]\n")
    assert "argument 2" in err.message and "GitHub" in err.message
    assert token not in str(err)


def test_unique_ids_across_directories() -> None:
    problems = check_unique_ids(["jobs/a/x.yaml", "jobs/b/x.yml", "jobs/y.yaml"])
    assert set(problems) == {"jobs/a/x.yaml", "jobs/b/x.yml"}
    assert "not unique" in problems["jobs/a/x.yaml"]


_DEEP = "a: " + "[" * 65 + "]" * 65 + "\n"
_DEEP_BLOCK = "".join("  " * i + "- \n" for i in range(64)) + "  " * 64 + "- [x]\n"
# Each has more than one problem, or one near another: the one-pass reading must report what the
# two-pass one does.
_READINGS = [
    "id: x\ncommand: [echo, '1']\n",
    "a: &x 1\nb: *x\n",
    "a: *nope\n" + _DEEP,
    "a: &x 1\nb: &x 2\n" + _DEEP,
    _DEEP,
    _DEEP_BLOCK,
    _DEEP + "b: [\n",
    "b: [\n" + _DEEP,
    "a: 1\n---\nb: 2\n",
    "a: 1\n---\nb: [\n",
    "a: 1\n---\n" + _DEEP,
    "a:\n\t- 1\n",
    "a: 1\n b: 2\n",
    "",
    "# only a comment\n",
    "[" * 64 + "]" * 64,
    "a: *nope\nb: [\n",
    "- *a\n- &a 1\n",
    "{a: 1, a: 2}",
    "a: !!python/object:os.system x\n",
    "\ufeffa: 1\n",
    "a: 'unterminated\n",
    "? [a]\n: 1\n",
    # The scanner's look-ahead decides which comes first, a bad character or the depth (see
    # test_yaml_reading.py):
    *(f"a: {'[' * 70}{' ' * n}b, @\n" for n in (990, 1100)),
]


@pytest.mark.parametrize("text", _READINGS)
def test_yaml_depth_checked_while_composing_reports_what_the_two_pass_reading_does(
    text: str,
) -> None:
    """config.parse_yaml (libyaml where it reads as PyYAML does) against PyYAML's own reading (the
    reference, as mergegate has always read): the same data and lines, or the same error at the same
    line."""
    from mergegate.rules import config

    def outcome(read: object) -> object:
        try:
            doc = read(text, "f.yaml")  # type: ignore[operator]
            return (repr(doc.data), sorted(doc.lines.items(), key=repr))
        except ConfigError as exc:
            return ("config", exc.message, exc.line)

    assert outcome(lambda t, f: config.parse_yaml(t, file=f)) == outcome(
        lambda t, f: config._document(
            config._compose_pyyaml(t, f, yaml.SafeLoader), f, libyaml=False
        )
    )


_KEYS = [
    "id",
    "command",
    "cwd",
    "env",
    "on",
    "yes",
    "null",
    "true",
    "a-b",
    "_x",
    "k" * 128,
    "k" * 129,
    "1a",
    "-a",
    "<<",
    "a b",
]
_WORDS = [
    "echo",
    "-c",
    "-",
    "--x",
    "a-",
    "5",
    "0x1F",
    "0o7",
    "017",
    "1_000",
    "1.5",
    ".5",
    "1e5",
    ".inf",
    "-.inf",
    ".NaN",
    "~",
    "null",
    "Null",
    "yes",
    "no",
    "on",
    "Off",
    "y",
    "n",
    "2001-12-14",
    "2001-12-14t21:59:43.10-05:00",
    "2001-13-45",
    "=",
    "<<",
    "a=b",
    "50%",
    "user@host",
    "/bin/sh",
    "./x",
    "a~b",
    "a#b",
    "a:b",
    "a b",
    "@x",
    "%x",
    "`x",
    "!x",
    "&a",
    "*a",
    "?x",
    ":x",
    "-5",
    "+5",
    "0b101",
    "0b_",
    "1:20",
    "190:20:30",
    "TRUE",
    "tRue",
    "...",
    "---",
    "a.b-c",
    "0",
    "-0",
    "'x'",
    "''",
    "'it''s'",
    "'a b'",
    "'it's'",
    '"x"',
    '""',
    '"a b"',
    '"a\\"',
    '"a\\nb"',
    "'#'",
    '"#"',
    "' lead'",
    "'é'",
]
_SEPARATORS = [",", ", ", " , ", " ,", ",  "]


def _word(rng: random.Random) -> str:
    return rng.choice(_WORDS[:20] if rng.random() < 0.6 else _WORDS)


def _value(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.55:
        return _word(rng)
    if roll < 0.9:
        items = [_word(rng) for _ in range(rng.randrange(0, 4))]
        inner = "".join(
            item + (rng.choice(_SEPARATORS) if i < len(items) - 1 else "")
            for i, item in enumerate(items)
        )
        return rng.choice(["[", "[ "]) + inner + rng.choice(["]", "]", " ]", ",]"])
    return rng.choice(["[[x]]", "{a: 1}", "", "|", ">", "x # c", "x ", "'x' "])


def _line(rng: random.Random) -> str:
    roll = rng.random()
    if roll < 0.9:
        key = rng.choice(_KEYS[:6] if rng.random() < 0.8 else _KEYS)
        return key + rng.choice([": ", ": ", ": ", ":  ", ":", " : "]) + _value(rng)
    return rng.choice(
        [
            "# a comment",
            "#",
            "",
            "   ",
            "\tid: x",
            "---",
            "...",
            "- x",
            " indented: 1",
            "key:",
            "%YAML 1.1",
        ]
    )


def test_the_reading_of_job_files_gives_what_pyyamls_own_reading_gives() -> None:
    """config.parse_yaml against PyYAML's own reading over generated files (and the real job files
    of the examples): the same data and line of every value, or the same error at the same line;
    libyaml read many of them, PyYAML many others (a tab, a `?`, a tag: see config's module doc)."""
    from mergegate.rules import config

    def outcome(read: object, text: str) -> object:
        try:
            doc = read(text, "f")  # type: ignore[operator]
            return (repr(doc.data), sorted(doc.lines.items(), key=repr))
        except ConfigError as exc:
            return ("config", exc.message, exc.line)

    def reference(text: str, file: str) -> config.Document:
        return config._document(
            config._compose_pyyaml(text, file, yaml.SafeLoader), file, libyaml=False
        )

    rng = random.Random(12)
    texts = [
        "id: x\ncommand: [echo, '1']\n",
        "# job\nid: x\n\ncommand: [sh, -c, 'echo hi']\ntimeout_seconds: 5\n",
        "id: x",
    ]
    texts += [
        "\n".join(_line(rng) for _ in range(rng.randrange(1, 4))) + rng.choice(["", "\n"])
        for _ in range(3000)
    ]
    libyaml = 0
    for text in texts:
        ours = outcome(lambda t, f: config.parse_yaml(t, file=f), text)
        assert ours == outcome(reference, text), text
        try:
            libyaml += config._read_libyaml(text, "f") is not None
        except ConfigError:
            libyaml += 1
    assert 300 < libyaml < len(texts) - 300  # both readings were taken, often


def test_a_scalar_is_constructed_as_a_whole_safe_loader_constructs_it() -> None:
    """config._scalar builds only the constructor of a SafeLoader: every value (and every error) as
    before."""
    import yaml

    from mergegate.rules import config

    def whole(node: yaml.Node) -> object:
        loader = yaml.SafeLoader("")
        try:
            return repr(loader.construct_object(node, deep=True))
        except Exception as exc:
            return (type(exc).__name__, str(exc))
        finally:
            loader.dispose()

    def ours(node: yaml.Node) -> object:
        try:
            loader = yaml.SafeLoader.__new__(yaml.SafeLoader)
            yaml.constructor.SafeConstructor.__init__(loader)
            return repr(loader.construct_object(node, deep=True))
        except Exception as exc:
            return (type(exc).__name__, str(exc))

    for word in [
        *_WORDS,
        "=",
        "!!binary aGk=",
        "!!int x",
        "!!python/name:os.system ''",
        "2001-02-30",
        "0b_",
        "12:61",
    ]:
        try:
            node = yaml.compose(
                f"[{word}]" if not word.startswith("!!") else word, Loader=yaml.SafeLoader
            )
        except yaml.YAMLError:
            continue
        for scalar in (
            (node.value if isinstance(node, yaml.SequenceNode) else [node])
            if node is not None
            else []
        ):
            assert ours(scalar) == whole(scalar), word
    assert config._scalar(yaml.compose("1", Loader=yaml.SafeLoader), "f") == 1


def _job_data(rng: random.Random) -> dict[str, object]:
    def pick(options: list[object]) -> object:  # mostly a valid value (the first two are), else any
        return rng.choice(options[:2] if rng.random() < 0.8 else options)

    values: dict[str, list[object]] = {
        "id": ["x", "job-1", "a.b_c-d", "A", "-x", "x\n", "", "x" * 128, "x" * 129, 5, None],
        "command": [["echo"], ["echo", "1"], [], ["a" * 65537], [1], "echo", [True], [["x"]]],
        "description": ["d", "", "x" * 4097, 1],
        "timeout_seconds": [1, 300, 0, -1, True, 1.0, 1.5, "5"],
        "cwd": [".", "a/b", "", "x" * 4097, 1],
        "env": [
            {"A": "1"},
            {},
            {"a_1": "x"},
            {"1A": "x"},
            {"A": 1},
            {"A-B": "x"},
            {"A": "x" * 65537},
            [],
            {"A\n": "x"},
        ],
        "labels": [
            ["a", "b"],
            ["a"],
            [],
            ["a", "a"],
            ["-a"],
            ["a/b"],
            ["x" * 65],
            [1],
            [1, True],
            "a",
        ],
        "runs_on": [["a"], ["a.b", "c"], [], ["a/b"], ["a", "a"], ["a." + "x" * 62]],
        "retries": [0, 100, 3, 101, -1, True],
        "idempotent": [True, False, 0, "yes"],
        "extra": ["x"],
    }
    keys = [
        k for k in values if (k in ("id", "command") and rng.random() < 0.9) or rng.random() < 0.3
    ]
    return {k: pick(values[k]) for k in keys}


def _verdict_of_validate(schema: str, data: object) -> bool:
    from mergegate.rules import config

    try:
        config.validate(config.Document(file="f", data=data, lines={}), schema=schema)
        return True
    except ConfigError:
        return False


def test_a_job_valid_to_fastjsonschema_is_valid_to_jsonschema() -> None:
    """fastjsonschema is one-sided: whatever it accepts, jsonschema (the reference) finds no error
    in; whatever it refuses, jsonschema decides. So validate says what jsonschema says, both ways,
    over generated jobs of every field's edge values."""
    import jsonschema

    from mergegate.rules import config
    from mergegate.rules.schema_checks import JsonSchemaValueException

    schema = config._schema("job")
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(7)
    accepted = 0
    for _ in range(4000):
        data = _job_data(rng)
        valid = not list(validator.iter_errors(data))
        try:
            config._fast_check("job")(data)
            accepted += 1
            assert valid, data
        except JsonSchemaValueException:
            pass
        assert _verdict_of_validate("job", data) == valid, data
    assert accepted > 400


def _policy_data(rng: random.Random) -> dict[str, object]:
    """A policy of every key's edge values: mostly valid values (the first two of each), else
    any."""

    def pick(options: list[object]) -> object:
        return rng.choice(options[:2] if rng.random() < 0.8 else options)

    ssh = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA alice"
    key = [
        ssh,
        {"key": ssh, "valid_after": "2024-01-01T00:00:00Z"},
        {"file": "keys/a.pub"},
        {"key": ssh, "file": "keys/a"},
        {},
        {"key": ssh, "valid_before": "2024-01-01"},
        {"file": "../x"},
        "",
        5,
        {"key": ssh, "extra": 1},
        {"key": ""},
        {"key": ssh, "valid_after": "2024-01-01T00:00:00.5+02:00"},
        None,
    ]

    def person() -> dict[str, object]:
        fields: dict[str, list[object]] = {
            "name": ["alice", "Bob Smith", "-x", "", "a" * 129, 5, None],
            "email": ["a@example.com", "b@x", "x" * 255, 3],
            "emails": [["a@x"], [], ["x" * 255], "a@x", [1]],
            "key": key,
            "keys": [[ssh], [ssh, {"file": "keys/b"}], [], ssh, [""], [{}]],
            "github": [1, [1, 2], [1, 1], [], 0, -1, "alice", [True], True, [0], 2**40],
            "login": ["x"],
        }
        names = [
            k
            for k in fields
            if (k == "name" and rng.random() < 0.9)
            or (k in ("key", "keys", "github") and rng.random() < 0.5)
            or rng.random() < 0.15
        ]
        return {k: pick(fields[k]) for k in names}

    people = [[person() for _ in range(rng.randint(1, 3))], [], "alice", [None]]
    values: dict[str, list[object]] = {
        "version": [1, 1, 2, True, "1", 1.0, None],
        "approvers": people,
        "proposers": people,
        "runners": people,
        "groups": [{"ops": ["alice"]}, {}, {"-x": ["a"]}, {"ops": "alice"}, {"ops": [5]}, []],
        "approvals_required": [1, 2, 0, True, "1", 1.5],
        "policy_approvals_required": [2, 1, -1, None],
        "allow_self_approval": [False, True, 0, "no"],
        "approval_rules": [
            [{"paths": ["a/**"], "approvals_required": 2}],
            [{"name": "r", "require": [{"group": "ops", "count": 1}]}],
            [{"paths": []}],
            [{"require": []}],
            [{"require": [{"group": "ops"}]}],
            [{"other": 1}],
            {},
        ],
        "commands": [
            [{"program": "echo"}],
            [{"program": "sh", "args_prefix": ["-c"], "network": True}],
            [{}],
            [{"program": ""}],
            [{"program": "x", "args_prefix": "-c"}],
            [{"program": "x", "extra": 1}],
            "echo",
        ],
        "limits": [
            {"max_timeout_seconds": 60},
            {},
            {"max_timeout_seconds": 0},
            {"nope": 1},
            {"max_output_bytes": True},
        ],
        "env_allowlist": [["HOME", "A_1"], [], ["1X"], ["A-B"], "HOME"],
        "reserved_env": [["AWS_*"], [], ["*X"], [""]],
        "path": ["/usr/bin", "/bin", "", 3],
        "sandbox": ["none", "bwrap", "docker", None, True],
        "max_retries": [0, 3, 100, 101, -1, 2.0],
        "retry_backoff_seconds": [30, 0, 0.5, -1, 86401, "30"],
        "github": [
            {"merge_keys": [ssh]},
            {},
            {"merge_keys": []},
            {"allow_unmapped_authors": "yes"},
            {"other": 1},
        ],
        "unknown_key": [1],
    }
    keys = [
        k
        for k in values
        if (k in ("version", "approvers") and rng.random() < 0.9) or rng.random() < 0.25
    ]
    return {k: pick(values[k]) for k in keys}


def test_a_policy_valid_to_fastjsonschema_is_valid_to_jsonschema() -> None:
    """policy.schema.json's keywords too ($ref, oneOf, anyOf, not, const, enum): every policy
    fastjsonschema accepts is valid to jsonschema (the reference), and validate says what jsonschema
    says both ways, over generated policies of every key's edge values."""
    import jsonschema

    from mergegate.rules import config
    from mergegate.rules.schema_checks import JsonSchemaValueException

    schema = config._schema("policy")
    validator = jsonschema.Draft202012Validator(schema)
    rng = random.Random(11)
    decided = {True: 0, False: 0}
    for _ in range(4000):
        data = _policy_data(rng)
        valid = not list(validator.iter_errors(data))
        try:
            config._fast_check("policy")(data)
            fast = True
        except JsonSchemaValueException:
            fast = False
        assert valid or not fast, data
        assert _verdict_of_validate("policy", data) == valid, data
        decided[fast] += 1
    assert decided[True] > 400 and decided[False] > 400, decided


def test_a_pass_over_a_plain_policy_and_jobs_does_not_import_jsonschema(tmp_path: Path) -> None:
    """The reason for fastjsonschema: jsonschema costs about 0.2 s of CPU to import, in every
    runner."""
    from tests.helpers.repos import ECHO_RULE, policy_yaml

    policy = policy_yaml(
        [
            {
                "name": "alice",
                "email": "a@example.com",
                "key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIA a",
                "github": [5],
            }
        ],
        [ECHO_RULE, {"program": "sh", "args_prefix": ["-c"], "network": False}],
        approvals_required=1,
        max_retries=2,
        retry_backoff_seconds=10,
        limits={"max_timeout_seconds": 60},
        groups={"ops": ["alice"]},
        env_allowlist=["HOME"],
        sandbox="none",
    )
    (tmp_path / "policy.yaml").write_text(policy)
    (tmp_path / "job.yaml").write_text(
        "id: hello\ncommand: [echo, hi]\nretries: 1\nruns_on: [linux]\n"
    )
    code = (
        "import sys; from pathlib import Path; from mergegate.rules import config\n"
        "for name in ('policy', 'job'):\n"
        "    config.validate(config.load(Path(sys.argv[1], name + '.yaml').read_bytes(), "
        "file=name, schema=name), schema=name)\n"
        "assert 'jsonschema' not in sys.modules, 'imported'\n"
        # (nor fastjsonschema: its checks are compiled ahead of time, rules/schema_checks.py)
        "assert 'fastjsonschema' not in sys.modules, 'fastjsonschema imported'\n"
        "config.validate(config.load(b'id: x\\ncommand: [1]\\n', file='bad', schema='job'), "
        "schema='job')\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 1 and "ConfigError" in done.stderr and "command" in done.stderr, (
        done.stderr
    )


def test_loading_a_valid_policy_does_not_import_the_redactor(tmp_path: Path) -> None:
    """The redactor's patterns cost a lone `check` or `lint` ~5 ms: a valid policy (with an
    emergency, whose reasons are redacted only when one is used) loads without them."""
    from tests.helpers.keys import make_ssh_key
    from tests.helpers.repos import ECHO_RULE, policy_yaml

    alice = make_ssh_key(tmp_path / "keys", "alice")
    runner = make_ssh_key(tmp_path / "keys", "runner")
    policy = policy_yaml(
        [{"name": "alice", "email": "a@example.com", "key": alice.public_line}],
        [ECHO_RULE],
        runners=[{"name": "ci", "key": runner.public_line}],
        emergency={"approvers": ["alice"], "review_within": "72h"},
    )
    (tmp_path / "policy.yaml").write_text(policy)
    code = (
        "import sys; from pathlib import Path\n"
        "from mergegate.rules.policy import load_policy\n"
        "text = Path(sys.argv[1], 'policy.yaml').read_bytes()\n"
        "read = lambda name: text if name == 'policy/policy.yaml' else None\n"
        "assert load_policy(read, commit='0' * 40).emergency is not None\n"
        "assert 'mergegate.redaction' not in sys.modules, 'redaction imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(tmp_path)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
