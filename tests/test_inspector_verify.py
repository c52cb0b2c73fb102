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


ODD_NAMES = {"café.md": "nfc\n", "cafe\u0301.md": "nfd\n", "q?x.txt": "q\n", "h#x.txt": "h\n", "sp ace/~a+b=c.txt": "deep\n"}


@pytest.fixture(scope="module")
def odd_tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One extension skill whose file names URIs must escape, with normalization twins and a link loop."""
    root = tmp_path_factory.mktemp("odd").resolve()
    skill = write_skill(root, "odd", "name: odd\ndescription: Odd names.\n", files=ODD_NAMES)
    os.symlink("loop-b", skill / "loop-a")
    os.symlink("loop-a", skill / "loop-b")
    return root


def test_odd_names_pass_verify_with_the_uris_the_server_lists(odd_tree: Path) -> None:
    # An independent client fetches each URI the server lists and hashes what it reads: encoding and digests agree.
    run = inspect(odd_tree, "--method", "skills/list", "--verify")
    assert run.returncode == 0, run.stdout + run.stderr
    (report,) = reports(run.stdout)
    assert report["outcome"] == "verified"
    assert sorted(file["uri"] for file in report["files"]) == sorted(  # type: ignore[union-attr]
        [
            "skill://odd/SKILL.md",
            "skill://odd/caf%C3%A9.md",
            "skill://odd/cafe%CC%81.md",
            "skill://odd/h%23x.txt",
            "skill://odd/q%3Fx.txt",
            "skill://odd/sp%20ace/~a%2Bb%3Dc.txt",
        ]
    )


@pytest.mark.parametrize("era", ["legacy", "modern"])
def test_the_inspector_reads_a_normalization_twin_and_is_refused_a_loop_in_both_eras(odd_tree: Path, era: str) -> None:
    def run(*arguments: str) -> subprocess.CompletedProcess[str]:
        # inspect() asks for the modern era; a later --protocol-era wins
        return inspect(odd_tree, *arguments, "--protocol-era", era)

    read = run("--method", "resources/read", "--uri", "skill://odd/cafe%CC%81.md")
    assert read.returncode == 0, read.stdout + read.stderr
    answer = json.loads(read.stdout)
    assert answer["contents"] == [{"uri": "skill://odd/cafe%CC%81.md", "mimeType": "text/markdown", "text": "nfd\n"}]
    assert ("_meta" in answer) is (era == "modern")  # the era asked for is the one negotiated
    called = run("--method", "tools/call", "--tool-name", "skill_file", "--tool-arg", "name=odd",
                 'paths=["café.md", "loop-a", "q?x.txt"]')  # fmt: skip
    assert called.returncode == 0, called.stdout + called.stderr
    (item,) = json.loads(called.stdout)["content"]
    files = json.loads(item["text"])["files"]
    assert [entry.get("content", entry.get("error")) for entry in files] == [
        "nfc\n", '"loop-a" is not a file in this skill', "q\n"
    ]  # fmt: skip
