"""One version everywhere; the wheel carries the demo skill; the console script works from anywhere."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata

from support import REPO

from skill_mcp.version import VERSION

BIN = os.path.dirname(sys.executable)


def test_one_version_everywhere(tmp_path) -> None:
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as handle:
        declared = tomllib.load(handle)
    assert "version" not in declared["project"] and declared["project"]["dynamic"] == ["version"]
    assert declared["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "skill_mcp.version.VERSION"}
    version = VERSION
    assert metadata.version("skill-mcp") == version
    for command in ([os.path.join(BIN, "skill-mcp"), "--version"], [sys.executable, "-m", "skill_mcp", "--version"]):
        shown = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=60, check=True)
        assert shown.stdout.strip() == f"skill-mcp {version}"


def test_runtime_dependencies_are_exactly_the_four() -> None:
    with open(os.path.join(REPO, "pyproject.toml"), "rb") as handle:
        dependencies = tomllib.load(handle)["project"]["dependencies"]
    assert dependencies == ["mcp>=2.3,<3", "pydantic>=2", "ruamel.yaml", "structlog"]


def test_every_install_takes_the_constraints_and_they_pin_what_the_server_imports() -> None:
    pinned = {}
    with open(os.path.join(REPO, "constraints.txt")) as handle:
        for line in handle:
            if line.strip() and not line.startswith("#"):
                name, version = line.strip().split("==")
                pinned[name.lower().replace("_", "-")] = version
    for package in ("mcp", "mcp-types", "pydantic", "pydantic-core", "anyio", "ruamel.yaml", "structlog"):
        assert package in pinned, f"constraints.txt does not pin {package}"
    with open(os.path.join(REPO, "README.md")) as handle:
        readme = handle.read()
    with open(os.path.join(REPO, ".ci", "run")) as handle:
        ci = handle.read()
    with open(os.path.join(REPO, "Dockerfile")) as handle:
        dockerfile = handle.read()
    test_command = "python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e '.[test]' && .venv/bin/pytest"
    assert "python3 -m venv .venv && .venv/bin/pip install -c constraints.txt -e . && .venv/bin/skill-mcp" in readme
    assert test_command in readme and test_command in ci
    assert "-c /src/constraints.txt /src" in dockerfile and "COPY pyproject.toml constraints.txt" in dockerfile


def test_wheel_carries_the_demo_skill(tmp_path) -> None:
    built = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", str(tmp_path), REPO],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert built.returncode == 0, built.stderr
    (wheel,) = [name for name in os.listdir(tmp_path) if name.endswith(".whl")]
    names = zipfile.ZipFile(tmp_path / wheel).namelist()
    demo = "skill_mcp/skills/skill-mcp-demo/"
    for rel in ("SKILL.md", "references/declaration.md", "scripts/report.py", "scripts/report.js"):
        assert demo + rel in names


def test_console_script_serves_the_bundled_demo_from_an_unrelated_directory(tmp_path) -> None:
    listed = subprocess.run(
        [os.path.join(BIN, "skill-mcp"), "list", "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={"PATH": os.environ["PATH"]},
    )
    assert listed.returncode == 0, listed.stderr
    answer = json.loads(listed.stdout)
    assert answer["rootsFrom"] == "default"
    assert [skill["name"] for skill in answer["skills"]] == ["skill-mcp-demo"]
    assert answer["problems"] == []
