"""What a skill author meets running `skill-mcp check` / `list` on broken skills (SPEC §3, §4, §14), through real
subprocesses on real files."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_cli import run_cli


@pytest.fixture
def elsewhere(tmp_path: Path) -> Path:
    """A working directory unrelated to the repository and to the skills."""
    cwd = tmp_path.resolve() / "elsewhere"
    cwd.mkdir()
    return cwd


def test_a_utf_16_skill_md_is_said_to_be_no_utf_8(root: Path, elsewhere: Path) -> None:
    # Notepad's "Unicode": the author's editor shows a "---" first line, so "its first line must be ---" misleads.
    skill = root / "windows"
    skill.mkdir()
    (skill / "SKILL.md").write_bytes("---\r\nname: windows\r\ndescription: d\r\n---\r\n".encode("utf-16"))
    code, stdout, _ = run_cli(["check", str(root)], elsewhere)
    assert code == 1
    assert stdout.splitlines()[0] == (
        f'malformed-frontmatter  {skill}: SKILL.md does not begin with a "---" frontmatter block: it is not UTF-8 '
        "text (its first line holds NUL bytes, as UTF-16 does); save it as UTF-8"
    )
