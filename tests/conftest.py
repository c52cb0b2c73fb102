"""Shared fixtures: build real skill directories on disk."""

from __future__ import annotations

from pathlib import Path

import pytest


def make_skill(
    root: Path,
    name: str,
    frontmatter_text: str | None = None,
    body: str = "Instructions.\n",
    files: dict[str, str | bytes] | None = None,
) -> Path:
    """Create `<root>/<name>/SKILL.md` (default frontmatter: name and a description) plus bundled files."""
    skill_dir = root / name
    skill_dir.mkdir(parents=True, exist_ok=True)
    if frontmatter_text is None:
        frontmatter_text = f"name: {name}\ndescription: The {name} skill.\n"
    (skill_dir / "SKILL.md").write_text(f"---\n{frontmatter_text}---\n{body}", encoding="utf-8")
    for rel, content in (files or {}).items():
        path = skill_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        if isinstance(content, bytes):
            path.write_bytes(content)
        else:
            path.write_text(content, encoding="utf-8")
    return skill_dir


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty skills root whose path is already real (tmp_path may sit behind a symlink)."""
    skills_root = tmp_path.resolve() / "root"
    skills_root.mkdir()
    return skills_root
