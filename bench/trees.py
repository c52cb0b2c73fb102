"""Skill trees for the benchmark, built fresh in a temporary directory on every run."""

from __future__ import annotations

import os
from typing import Any

BIG_FILE_BYTES = 1048576  # exactly the per-file cap (SPEC §6.3): the largest read that succeeds
SUBDIRS = 10


def _skill_md(name: str) -> str:
    return (
        "---\n"
        f"name: {name}\n"
        f"description: Benchmark skill {name}; it bundles small reference files that are read back verbatim.\n"
        "license: MIT\n"
        "---\n"
        f"# {name}\n\nRead the files under `references/` with skill_file.\n"
    )


def small_path(index: int) -> str:
    """The relative path of the index-th small file of a skill."""
    return f"references/d{index % SUBDIRS}/f{index:04d}.md"


def build_wide(root: str, skills: int, files: int) -> str:
    """`skills` skills, each a SKILL.md plus `files - 1` small files spread over a few subdirectories."""
    os.makedirs(root)
    line = "Lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod tempor.\n"
    for s in range(skills):
        name = f"bench-{s:02d}"
        base = os.path.join(root, name)
        for d in range(SUBDIRS):
            os.makedirs(os.path.join(base, "references", f"d{d}"))
        with open(os.path.join(base, "SKILL.md"), "w", encoding="utf-8") as f:
            f.write(_skill_md(name))
        for i in range(files - 1):
            with open(os.path.join(base, small_path(i)), "w", encoding="utf-8") as f:
                f.write(f"# file {i} of {name}\n\n" + line * (2 + i % 5))
    return root


def build_big(root: str) -> str:
    """One skill holding one text file of exactly 1 MiB (plus its SKILL.md)."""
    name = "bench-big"
    base = os.path.join(root, name)
    os.makedirs(os.path.join(base, "assets"))
    with open(os.path.join(base, "SKILL.md"), "w", encoding="utf-8") as f:
        f.write(_skill_md(name))
    line = b"0123456789 abcdefghijklmnopqrstuvwxyz ABCDEFGHIJKLMNOPQRSTUVWXYZ benchmark text line\n"
    data = (line * (BIG_FILE_BYTES // len(line) + 1))[:BIG_FILE_BYTES]
    with open(os.path.join(base, "assets", "big.txt"), "wb") as f:
        f.write(data)
    return root


BIG_SKILL, BIG_PATH = "bench-big", "assets/big.txt"


def resource_page(count: int) -> dict[str, Any]:
    """One `resources/list` page of `count` resources shaped like skill-mcp's, as the plain dict it serves."""
    paths = [f"references/d{n % 10}/f{n:04d}.md" for n in range(count)]
    resources = [
        {
            "uri": f"skill://bench-00/{path}",
            "name": f"bench-00/{path}",
            "title": f"bench-00: {path}",
            "mimeType": "text/markdown",
            "size": 250,
        }
        for path in paths
    ]
    return {"resources": resources, "nextCursor": str(count)}
