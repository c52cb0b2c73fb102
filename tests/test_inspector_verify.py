"""The Skills extension checked by an independent implementation: the MCP Inspector CLI (SPEC §12.5)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from support import INSPECTOR, inspector_unavailable, write_skill

# The first run downloads the Inspector through npx.
TIMEOUT_SECONDS = 180

UNAVAILABLE = inspector_unavailable()
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or "")


@pytest.fixture(scope="module")
def fixture_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two extension skills, one with a nested directory, one with a file over 1 MiB; two the extension excludes."""
    root = tmp_path_factory.mktemp("inspector").resolve()
    write_skill(
        root,
        "alpha",
        "name: alpha\ndescription: The alpha skill.\nmetadata:\n  created: 2024-01-02\n",
        files={"scripts/run.py": "print('alpha')\n", "scripts/lib/util.js": "export const x = 1;\n", "notes.txt": "notes\n"},
    )
    # resources/read serves 1 MiB of a file: a skill with a larger one is "dynamic", never a digest no read can match
    write_skill(root, "large", "name: large\ndescription: Bundles a large file.\n", files={"big.txt": "a" * 2_000_000})
    write_skill(root, "mismatch", "name: other\ndescription: Named otherwise.\n")
    write_skill(root, "silent", "name: silent\n")
    return root


def inspect(root: Path, *arguments: str) -> subprocess.CompletedProcess[str]:
    command = [
        "npx", "--yes", INSPECTOR, "--cli",
        "-e", f"SKILLS_DIR={root}", "-e", "MCP_LOG_LEVEL=error",
        sys.executable, "-m", "skill_mcp",
        "--protocol-era", "modern", *arguments,
    ]  # fmt: skip
    # The server sees only the fixture tree, never a root or setting from the caller's environment.
    environ = {key: value for key, value in os.environ.items() if not key.startswith("MCP_") and key != "SKILLS_DIR"}
    return subprocess.run(command, capture_output=True, text=True, timeout=TIMEOUT_SECONDS, env=environ)


def reports(stdout: str) -> list[dict[str, object]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_skills_list_passes_verify(fixture_tree: Path) -> None:
    run = inspect(fixture_tree, "--method", "skills/list", "--verify")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no conformance errors" in (run.stdout + run.stderr).lower()
    verified = reports(run.stdout)
    assert [(report["uri"], report["outcome"]) for report in verified] == [
        ("skill://alpha/SKILL.md", "verified"),
        ("skill://large/SKILL.md", "unverifiable"),
    ]
    assert [file["uri"] for file in verified[0]["files"]] == [  # type: ignore[union-attr]
        "skill://alpha/SKILL.md",
        "skill://alpha/notes.txt",
        "skill://alpha/scripts/lib/util.js",
        "skill://alpha/scripts/run.py",
    ]


def test_skills_get_passes_verify(fixture_tree: Path) -> None:
    run = inspect(fixture_tree, "--method", "skills/get", "--uri", "skill://alpha/SKILL.md", "--verify")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "no conformance errors" in (run.stdout + run.stderr).lower()
    assert [report["outcome"] for report in reports(run.stdout)] == ["verified"]


def test_the_inspector_accepts_a_nested_directory_read(fixture_tree: Path) -> None:
    run = inspect(fixture_tree, "--method", "resources/directory/read", "--uri", "skill://alpha/scripts")
    assert run.returncode == 0, run.stdout + run.stderr
    assert [child["uri"] for child in json.loads(run.stdout)["resources"]] == [
        "skill://alpha/scripts/lib",
        "skill://alpha/scripts/run.py",
    ]
