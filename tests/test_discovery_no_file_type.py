"""Discovery on a filesystem whose listings carry no file type (ext2 without `filetype`, some FUSE and network
filesystems): each entry's kind then costs a stat, which can fail where the listing did not."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import make_skill
from support import as_unprivileged, needs_root

from skill_mcp.catalog import discover


@pytest.fixture
def no_dtype_dir() -> Iterator[Path]:
    """A fresh directory, world-readable, on a loop-mounted ext2 made without the `filetype` feature."""
    if shutil.which("mke2fs") is None:
        pytest.skip("needs mke2fs (e2fsprogs) to make a filesystem without file types in its listings")
    scratch = Path(tempfile.mkdtemp())
    image, mount_point = scratch / "no-dtype.img", scratch / "mnt"
    mount_point.mkdir()
    with image.open("wb") as sparse:
        sparse.truncate(8 * 1024 * 1024)
    made = subprocess.run(["mke2fs", "-q", "-F", "-t", "ext2", "-O", "^filetype", str(image)], capture_output=True)
    mounted = made.returncode == 0 and subprocess.run(
        ["mount", "-o", "loop", str(image), str(mount_point)], capture_output=True
    ).returncode == 0
    if not mounted:
        shutil.rmtree(scratch)
        pytest.skip("could not loop-mount an ext2 image here")
    try:
        scratch.chmod(0o755)
        mount_point.chmod(0o755)
        yield mount_point
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)
        shutil.rmtree(scratch)


@needs_root
def test_a_root_this_uid_may_list_but_not_enter_is_reported_not_raised(no_dtype_dir):
    # Telling a directory from a link there stats the entry, which a root of mode 0644 refuses: discovery raised
    # PermissionError, and the server died at boot.
    root = no_dtype_dir / "root"
    make_skill(root, "alpha")
    root.chmod(0o644)
    catalog = as_unprivileged(lambda: discover([str(root)], 32))
    assert [(problem.path, problem.reason) for problem in catalog.problems] == [(str(root), "root-unreadable")]


@needs_root
def test_a_skill_directory_this_uid_may_list_but_not_enter_costs_only_its_files(no_dtype_dir):
    # Its entries' kinds cost a stat that fails: the whole skill was dropped ("reading this skill failed
    # unexpectedly"), where a filesystem with file types serves it.
    root = no_dtype_dir / "root"
    skill_dir = make_skill(root, "alpha", files={"docs/guide.md": "g", "notes.md": "n"})
    (skill_dir / "docs").chmod(0o644)
    catalog = as_unprivileged(lambda: discover([str(root)], 32))
    assert catalog.problems == ()
    assert [entry.path for entry in catalog.skills[0].manifest] == ["SKILL.md", "notes.md"]
    assert catalog.skills[0].unlisted_dirs.first == ("docs",)
