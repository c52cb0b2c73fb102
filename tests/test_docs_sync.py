"""The README's tables are part of the contract: they must say exactly what the code does."""

from __future__ import annotations

import os
import re

import anyio
from support import REPO, connect, deployment_for, payload, write_skill

from skill_mcp.limits import (
    AMBIENT_SCRIPT_ALLOWLIST,
    MAX_ARG_BYTES,
    MAX_ARGS,
    MAX_DIRS_PER_SKILL,
    MAX_FILES_PER_SKILL,
    MAX_MESSAGE_CHARS,
    MAX_UNLISTED_ENTRIES,
    MAX_UNUSABLE_PATH_PROBLEMS,
)
from skill_mcp.model import PROBLEM_REASONS
from skill_mcp.run_tool import RunService
from skill_mcp.schemas import TOOLS

README = open(os.path.join(REPO, "README.md"), encoding="utf-8").read()


def table(marker: str) -> list[list[str]]:
    """Rows of the Markdown table between `<!-- marker:start -->` and `<!-- marker:end -->`."""
    block = README.split(f"<!-- {marker}:start -->")[1].split(f"<!-- {marker}:end -->")[0]
    rows = [line for line in block.strip().splitlines() if line.startswith("|")]
    return [[cell.strip() for cell in row.strip("|").split("|")] for row in rows[2:]]


def code_names(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def test_tool_table_matches_the_published_schemas() -> None:
    rows = table("tools-table")
    assert [code_names(row[0])[0] for row in rows] == [tool["name"] for tool in TOOLS]
    for row, tool in zip(rows, TOOLS, strict=True):
        assert code_names(row[1]) == list(tool["inputSchema"]["properties"]), tool["name"]


def test_reason_table_is_the_reason_set_and_says_reasons_are_additive() -> None:
    assert [code_names(row[0])[0] for row in table("reasons-table")] == list(PROBLEM_REASONS)
    assert "Reasons are additive" in README


def test_env_table_names_every_configuration_variable() -> None:
    documented = {code_names(row[0])[0] for row in table("env-table")}
    source = "".join(open(os.path.join(REPO, "skill_mcp", name)).read() for name in ("config.py", "limits.py"))
    read_by_code = set(re.findall(r'"((?:MCP|SKILLS)_[A-Z_]+)"', source)) - {"MCP_BLOB_SIGNING_KEY"}
    assert read_by_code <= documented | {"SKILLS_DIR"}, read_by_code - documented
    for ambient in ("PATH", "HOME", "LANG", "TZ", "TMPDIR", "MCP_DATA_DIR"):
        assert f"`{ambient}`" in README


def test_will_run_table_matches_a_real_preview(tmp_path) -> None:
    # Standalone, one declared variable present and one absent: every optional field appears.
    write_skill(
        tmp_path,
        "weather",
        "name: weather\ndescription: d\nmcp-host:\n  version: 1\n  run:\n"
        "    - script: run.py\n      interpreter: python3\n      env: [API_KEY, MISSING_KEY]\n",
        files={"run.py": "print(1)\n"},
    )
    deployment = deployment_for({"SKILLS_DIR": str(tmp_path), "PATH": os.environ["PATH"], "API_KEY": "x"})

    async def preview_keys() -> list[str]:
        async with connect(deployment, "legacy", RunService(deployment).call) as client:
            result = await client.call_tool("skill_run", {"name": "weather", "script": "run.py"})
            return list(payload(result)["preview"]["willRun"])

    assert [code_names(row[0])[0] for row in table("will-run-table")] == anyio.run(preview_keys)


def test_the_module_map_names_every_module() -> None:
    package = os.path.join(REPO, "skill_mcp")
    modules = sorted(name for name in os.listdir(package) if name.endswith(".py") and not name.startswith("__"))
    assert [name for name in modules if f"`{name}`" not in README] == []


def test_the_limits_the_readme_states_are_the_codes() -> None:
    # The README gives these as numbers; a constant changed alone would make it wrong without any other test failing.
    prose = " ".join(README.split())
    assert f"A line longer than {MAX_MESSAGE_CHARS} characters is refused unparsed" in prose
    assert (
        f"more than {MAX_FILES_PER_SKILL} files or {MAX_DIRS_PER_SKILL} directories, or more than "
        f"{MAX_UNLISTED_ENTRIES} entries that are not listed" in prose
    )
    assert f"arguments are capped at {MAX_ARGS} and {MAX_ARG_BYTES} bytes in total" in prose
    (unusable,) = [row[1] for row in table("reasons-table") if row[0] == "`unusable-path`"]
    assert f"The first {MAX_UNUSABLE_PATH_PROBLEMS} in a skill are reported one by one" in unusable
    assert f"ambient variables {' '.join(AMBIENT_SCRIPT_ALLOWLIST)} plus" in prose.replace("`", "").replace(",", "")
