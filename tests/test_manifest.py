"""The manifest walk's listing (SPEC §3.5); the walk itself is tested through discovery in test_catalog.py."""

from __future__ import annotations

import os

from skill_mcp import manifest


def test_a_listing_keeps_the_first_names_it_is_asked_for_and_closes_its_descriptor(tmp_path):
    for index in reversed(range(10)):
        (tmp_path / f"f{index}").write_text("x")
    before = len(os.listdir("/proc/self/fd"))
    with manifest._listing(str(tmp_path), 3) as entries:
        assert [entry.name for entry in entries] == ["f0", "f1", "f2"]
    assert len(os.listdir("/proc/self/fd")) == before
