"""Shared fixtures: build real skill directories on disk."""

from __future__ import annotations

from pathlib import Path

import pytest
from support import write_skill

# One helper builds skill trees for every test module.
make_skill = write_skill


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """An empty skills root whose path is already real (tmp_path may sit behind a symlink)."""
    skills_root = tmp_path.resolve() / "root"
    skills_root.mkdir()
    return skills_root
