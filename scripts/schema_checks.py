"""Write src/mergegate/rules/schema_checks.py: the JSON Schema checks, compiled ahead of time.

fastjsonschema turns a schema into Python source; compiling that source in every process cost
about 50 ms of CPU for policy.schema.json (and 20 ms to import fastjsonschema itself), paid by
every `mergegate check`, `lint` and runner pass before it read one file. The source is written
once, here, into a module that Python keeps as bytecode like any other: importing it costs about
1 ms. Run this again whenever a schema changes (tests/rules/test_schema_checks.py says when):

    python scripts/schema_checks.py

What is changed in fastjsonschema's source, each change checked (the script stops if the source
is not as expected): the two schemas share one module (each its own regex table); an exception
is raised bare, without the message, value and schema it would carry (rules/config.py never
reads them: jsonschema decides and words every error, which also keeps 100 KB of repeated schema
out of the module); no import of fastjsonschema (its exception is defined here); and
`decimal.Decimal`, which the checks only test values against (YAML reads no Decimal), is a stand-in
class (importing decimal costs about 2 ms).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SCHEMAS = ROOT / "src" / "mergegate" / "schemas"
TARGET = ROOT / "src" / "mergegate" / "rules" / "schema_checks.py"
NAMES = ("job", "policy")

HEADER = '''\
"""JSON Schema checks of job and policy files, compiled ahead of time: GENERATED, do not edit.

Written by `python scripts/schema_checks.py` (fastjsonschema {version}'s compile_to_code, with the
changes that script's doc lists) from src/mergegate/schemas/job.schema.json and
policy.schema.json; tests/rules/test_schema_checks.py fails when a schema changed and this module
was not written again. rules/config.py calls check_job and check_policy: None for a document the
schema accepts, JsonSchemaValueException for one it refuses (jsonschema then says why).
"""

# mypy: ignore-errors
# (Generated code: ruff leaves it out (pyproject.toml), and so does the 600-line limit.)

import re

FASTJSONSCHEMA_VERSION = "{version}"
SCHEMA_SHA256 = {hashes}


class JsonSchemaValueException(ValueError):
    """The schema refuses the document (raised bare: jsonschema words the error)."""


# fastjsonschema's exception for collected errors: never raised here (the checks stop at the
# first), only named where a subschema's failure is caught.
JsonSchemaValuesException = JsonSchemaValueException


class Decimal:
    """Stands in for decimal.Decimal, which the checks only test a value against: YAML (and JSON
    as mergegate reads it) gives no Decimal, so no value is one, as before."""


NoneType = type(None)
'''

# Lines of fastjsonschema's source that this module's header replaces.
_REPLACED = {
    "from decimal import Decimal",
    "import re",
    "from fastjsonschema import JsonSchemaValueException, JsonSchemaValuesException",
    "NoneType = type(None)",
}
_RAISE = re.compile(r"^(\s*)raise JsonSchemaValueException\(.*\)$")


def schema_text(name: str) -> bytes:
    return (SCHEMAS / f"{name}.schema.json").read_bytes()


def _chunk(name: str, version: str) -> tuple[str, str]:
    """One schema's checks as source, and the name of its top function."""
    import fastjsonschema

    source = fastjsonschema.compile_to_code(
        json.loads(schema_text(name)), use_default=False, use_formats=False
    )
    lines = source.split("\n")
    if lines[0] != f'VERSION = "{version}"':
        raise SystemExit(f"fastjsonschema's source for {name} does not start as expected")
    kept = []
    for line in lines[1:]:
        if line in _REPLACED:
            continue
        if "errors.append(" in line or "JsonSchemaValueException(" in line:
            bare = _RAISE.match(line)
            if bare is None:
                raise SystemExit(f"an exception {name}'s checks make is not raised as expected")
            line = f"{bare[1]}raise JsonSchemaValueException"
        kept.append(line.rstrip())
    text = "\n".join(kept).replace("REGEX_PATTERNS", f"{name.upper()}_PATTERNS")
    text = re.sub(r"\n{3,}", "\n\n\n", text).strip("\n")
    top = re.search(r"^def (validate_\w+)\(", text, re.MULTILINE)
    if top is None:
        raise SystemExit(f"no check function in fastjsonschema's source for {name}")
    return text, top[1]


def source() -> str:
    """The module's text, as this version of fastjsonschema writes it from today's schemas."""
    import fastjsonschema

    version = fastjsonschema.VERSION
    hashes = {name: hashlib.sha256(schema_text(name)).hexdigest() for name in NAMES}
    shown = "{\n" + "".join(f'    "{n}": "{h}",\n' for n, h in hashes.items()) + "}"
    parts = [HEADER.format(version=version, hashes=shown)]
    tops = []
    defined: set[str] = set()
    for name in NAMES:
        text, top = _chunk(name, version)
        functions = set(re.findall(r"^def (\w+)\(", text, re.MULTILINE))
        if functions & defined:
            raise SystemExit(f"{name}'s check functions are named as another schema's")
        defined |= functions
        parts.append(f"\n# {name}.schema.json\n\n{text}\n")
        tops.append(f"check_{name} = {top}")
    parts.append("\n\n" + "\n".join(tops) + "\n")
    return "".join(parts)


def main() -> int:
    TARGET.write_text(source(), encoding="utf-8")
    print(f"wrote {TARGET.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
