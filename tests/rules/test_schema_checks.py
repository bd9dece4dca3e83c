"""rules/schema_checks.py: the JSON Schema checks compiled ahead of time (scripts/schema_checks.py)
are today's schemas' and decide as fastjsonschema's own compilation of them does.

Compiling the policy schema in every process cost a lone `mergegate check` or `lint` about 65 ms
of CPU (issue 21); the checked-in module costs about 1 ms to import. These tests keep it from
going stale: a schema changed without running the script fails here.
"""

from __future__ import annotations

import hashlib
import importlib.util
import random
from pathlib import Path
from types import ModuleType

import pytest

from mergegate.rules import schema_checks
from tests.rules.test_job import _job_data, _policy_data

ROOT = Path(__file__).resolve().parents[2]
REGENERATE = "run `python scripts/schema_checks.py` and commit src/mergegate/rules/schema_checks.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "schema_checks_script", ROOT / "scripts" / "schema_checks.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["job", "policy"])
def test_the_checks_were_compiled_from_todays_schema(name: str) -> None:
    text = (ROOT / "src" / "mergegate" / "schemas" / f"{name}.schema.json").read_bytes()
    assert schema_checks.SCHEMA_SHA256[name] == hashlib.sha256(text).hexdigest(), (
        f"{name}.schema.json changed since its checks were compiled: {REGENERATE}"
    )


def test_compiling_the_schemas_again_writes_the_checked_in_module() -> None:
    import fastjsonschema

    if fastjsonschema.VERSION != schema_checks.FASTJSONSCHEMA_VERSION:
        # Another release may write other source for the same checks; the test below still holds
        # the checked-in ones to this release's, and the one above to today's schemas.
        pytest.skip(f"fastjsonschema {fastjsonschema.VERSION} is not the one that wrote the module")
    written = (ROOT / "src" / "mergegate" / "rules" / "schema_checks.py").read_text("utf-8")
    assert _script().source() == written, (
        f"schema_checks.py is not what the script writes: {REGENERATE}"
    )


@pytest.mark.parametrize("name", ["job", "policy"])
def test_the_checks_decide_every_document_as_fastjsonschemas_own_compilation(name: str) -> None:
    """The bare exceptions, the shared module and the Decimal stand-in change no verdict: over
    generated documents of every key's edge values, the checked-in check accepts exactly what
    fastjsonschema.compile of the same schema accepts."""
    import fastjsonschema

    from mergegate.rules import config

    theirs = fastjsonschema.compile(config._schema(name), use_default=False, use_formats=False)
    ours = getattr(schema_checks, f"check_{name}")
    make = _job_data if name == "job" else _policy_data
    rng = random.Random(21)
    verdicts = {True: 0, False: 0}
    for _ in range(3000):
        data = make(rng)
        try:
            theirs(data)
            expected = True
        except fastjsonschema.JsonSchemaValueException:
            expected = False
        try:
            ours(data)
            got = True
        except schema_checks.JsonSchemaValueException:
            got = False
        assert got == expected, data
        verdicts[got] += 1
    assert verdicts[True] > 300 and verdicts[False] > 300, verdicts
