"""What the docs list is what the code has (issue 22, item 11): the runtime dependencies that
docs name are pyproject.toml's, and agents.md's MCP table names every argument of every tool."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _requirement_names() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {re.split(r"[<>=!~ \[;]", dep, maxsplit=1)[0].lower() for dep in project["dependencies"]}


def test_every_dependency_list_in_the_docs_is_pyprojects() -> None:
    """A sentence 'Its dependencies (A, B, ...)' anywhere in README.md or docs/ lists exactly the
    runtime dependencies of pyproject.toml (GitPython stayed listed long after it went)."""
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    found = 0
    for page in pages:
        text = " ".join(page.read_text().split())
        for listed in re.findall(r"[Dd]ependencies \(([^)]*)\)", text):
            names = {n.strip().lower() for n in listed.split(",") if n.strip()}
            assert names == _requirement_names(), f"{page.name}: ({listed})"
            found += 1
    assert found, "no dependency list found in the docs; this test guards nothing"


def test_the_dev_extra_the_docs_list_is_pyprojects() -> None:
    """A sentence 'The `dev` extra adds the development tools (A, B, ...)' lists exactly the
    `dev` extra of pyproject.toml (securesystemslib came with runner attestations, issue 25)."""
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    wanted = {re.split(r"[<>=!~ \[;]", dep, maxsplit=1)[0].lower() for dep in extra["dev"]}
    text = " ".join((ROOT / "README.md").read_text().split())
    listed = re.findall(r"`dev` extra adds the development tools \(([^)]*)\)", text)
    assert len(listed) == 1, "README.md no longer lists the dev extra; this test guards nothing"
    assert {n.strip().lower() for n in listed[0].split(",")} == wanted


def test_the_mcp_table_names_every_argument_of_every_tool(tmp_path: Path) -> None:
    import anyio

    from mergegate.mcp_server import ServedGate, build

    server = build(ServedGate(repo=tmp_path))

    async def schemas() -> dict[str, set[str]]:
        return {
            t.name: set(t.input_schema.get("properties", {})) for t in await server.list_tools()
        }

    tools = anyio.run(schemas)
    rows = {}
    for line in (ROOT / "docs" / "agents.md").read_text().splitlines():
        row = re.match(r"\| `(\w+)` \| (.*?) \| .* \|$", line)
        if row:
            rows[row.group(1)] = set(re.findall(r"`(\w+)`", row.group(2)))
    assert set(rows) == set(tools)
    for name, arguments in tools.items():
        assert rows[name] == arguments, name
