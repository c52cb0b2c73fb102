"""The manifest walk's listing (SPEC §3.5); the walk itself is tested through discovery in test_catalog.py."""

from __future__ import annotations

import os

import pytest

from skill_mcp import manifest, paths


def test_a_listing_keeps_the_first_names_it_is_asked_for_and_closes_its_descriptor(tmp_path):
    for index in reversed(range(10)):
        (tmp_path / f"f{index}").write_text("x")
    before = len(os.listdir("/proc/self/fd"))
    with manifest._listing(str(tmp_path), 3) as entries:
        assert [entry.name for entry in entries] == ["f0", "f1", "f2"]
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("link_free", [True, False], ids=["openat2", "checked-open"])
def test_a_directory_is_listed_through_a_descriptor_no_script_inherits(tmp_path, monkeypatch, link_free):
    # Both ways of opening a directory to list it: a script started meanwhile must not inherit the descriptor.
    if not link_free:
        monkeypatch.setattr(paths, "_OPEN_DIRECTORY_LINK_FREE", None)
    elif paths._OPEN_DIRECTORY_LINK_FREE is None:
        pytest.skip("no openat2 here")
    fd = paths.open_directory_in_place(str(tmp_path.resolve()))
    assert fd is not None
    try:
        assert not os.get_inheritable(fd)
    finally:
        os.close(fd)
