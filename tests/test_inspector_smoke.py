"""Smoke test through an independent client: the MCP Inspector CLI (SPEC §16; issue 2 item 4).

Skipped, with the reason shown, only when Node's npx is absent or Node is older than 20. The first run
downloads the Inspector, hence the generous timeout.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from support import INSPECTOR, inspector_unavailable, write_skill

NPX = shutil.which("npx")
SERVER = (sys.executable, "-m", "skill_mcp")
SNAPSHOT = Path(__file__).parent / "snapshots" / "tools_list.json"
TIMEOUT_SECONDS = 300

UNAVAILABLE = inspector_unavailable()
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=UNAVAILABLE or "")


@pytest.fixture(scope="module")
def skills_root(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("inspector").resolve() / "root"
    root.mkdir()
    write_skill(
        root,
        "alpha",
        "name: alpha\ndescription: Alpha for the Inspector.\n",
        "# Alpha\n\nRead docs/read me.md.\n",
        {"docs/read me.md": "# Spaced\n", "blob.bin": b"\xff\xfeA"},
    )
    return root


def inspector(skills_root: Path, *arguments: str) -> dict:
    environ = {key: value for key, value in os.environ.items() if not key.startswith("MCP_") and key != "SKILLS_DIR"}
    completed = subprocess.run(
        [NPX, "--yes", INSPECTOR, "--cli", "-e", f"SKILLS_DIR={skills_root}", *SERVER, *arguments],
        capture_output=True,
        text=True,
        timeout=TIMEOUT_SECONDS,
        env=environ,
        cwd=str(skills_root.parent),
    )
    assert completed.returncode == 0, f"stdout:\n{completed.stdout}\nstderr:\n{completed.stderr}"
    return json.loads(completed.stdout)


def test_tools_list(skills_root):
    answer = inspector(skills_root, "--method", "tools/list")
    assert answer["tools"] == json.loads(SNAPSHOT.read_text(encoding="utf-8"))["tools"]


def test_tools_call_skill_list(skills_root):
    answer = inspector(skills_root, "--method", "tools/call", "--tool-name", "skill_list")
    assert answer.get("isError", False) is False
    (item,) = answer["content"]
    listed = json.loads(item["text"])
    assert listed["roots"] == [str(skills_root)]
    assert listed["rootsFrom"] == "SKILLS_DIR"
    assert [(skill["name"], skill["description"], skill["files"]) for skill in listed["skills"]] == [
        ("alpha", "Alpha for the Inspector.", 3)
    ]
    assert listed["problems"] == []


def test_tools_call_skill_file_with_arguments(skills_root):
    answer = inspector(
        skills_root,
        "--method", "tools/call",
        "--tool-name", "skill_file",
        "--tool-arg", "name=alpha", 'paths=["docs/read me.md", "blob.bin", "../x"]',
    )  # fmt: skip
    (item,) = answer["content"]
    assert json.loads(item["text"])["files"] == [
        {"path": "docs/read me.md", "size": 9, "mediaType": "text/markdown", "encoding": "utf-8", "truncated": False, "content": "# Spaced\n"},
        {"path": "blob.bin", "size": 3, "mediaType": "application/octet-stream", "encoding": "base64", "truncated": False, "content": "//5B"},
        {"path": "../x", "error": 'path "../x" is not usable: it has a ".." segment'},
    ]


def test_resources_read(skills_root):
    answer = inspector(skills_root, "--method", "resources/read", "--uri", "skill://alpha/docs/read%20me.md")
    assert answer["contents"] == [{"uri": "skill://alpha/docs/read%20me.md", "mimeType": "text/markdown", "text": "# Spaced\n"}]


def test_prompts_get(skills_root):
    answer = inspector(skills_root, "--method", "prompts/get", "--prompt-name", "alpha")
    assert answer["messages"] == [{"role": "user", "content": {"type": "text", "text": "# Alpha\n\nRead docs/read me.md.\n"}}]
    assert answer["description"] == "Alpha for the Inspector."
