"""Warm `skills/list` over 32 skills × 100 small files (SPEC §12; issue 4 target: median ≤ 30 ms).

    .venv/bin/python bench/bench_skills_ext.py [--calls 40]

Every call hashes every file of its page again (digests are computed at request time), so this
measures the digest path, not a cache. Measured through the in-process SDK client on both eras,
and through a real stdio subprocess spoken to in raw JSON-RPC lines.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from typing import Any

import anyio
import mcp_types as types
from mcp.client import Client
from pydantic import TypeAdapter

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trees
from bench_server import MODERN, Bench

from skill_mcp.deployment import build_deployment
from skill_mcp.run_tool import RunService
from skill_mcp.server import build_server

SKILLS, FILES = 32, 100
TARGET_MS = 30.0
_RAW = TypeAdapter(dict[str, Any])


def _ms(seconds: list[float]) -> float:
    return statistics.median(seconds) * 1000


async def _in_process(root: str, era: str, calls: int) -> dict[str, float]:
    deployment, _ = build_deployment({"SKILLS_DIR": root})

    async def skills_list(client: Client, cursor: str | None) -> dict[str, Any]:
        params = {"cursor": cursor} if cursor else {}
        request = types.Request[dict[str, Any], str](method="skills/list", params=params)
        return await client.session.send_request(request, _RAW)

    first_page: list[float] = []
    both_pages: list[float] = []
    async with Client(build_server(deployment, RunService(deployment).call), mode=era) as client:
        for round_ in range(calls + 3):  # three discarded warm-up rounds
            start = time.perf_counter()
            answer = await skills_list(client, None)
            middle = time.perf_counter()
            rest = await skills_list(client, answer["nextCursor"])
            end = time.perf_counter()
            assert len(answer["skills"]) + len(rest["skills"]) == SKILLS
            assert all(isinstance(skill["resources"], list) for skill in answer["skills"])
            if round_ >= 3:
                first_page.append(middle - start)
                both_pages.append(end - start)
    return {"first_page_ms": _ms(first_page), "both_pages_ms": _ms(both_pages)}


def _stdio(root: str, work: str, calls: int) -> dict[str, float]:
    bench = Bench(sys.executable, os.path.dirname(os.path.dirname(os.path.abspath(__file__))), work)
    proc = bench.spawn_ours(root)
    try:
        proc.handshake(MODERN)
        seconds = []
        for round_ in range(calls + 3):
            result, elapsed = proc.request("skills/list")
            assert len(result["skills"]) == 16
            if round_ >= 3:
                seconds.append(elapsed)
        return {"first_page_ms": _ms(seconds)}
    finally:
        proc.close()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=40, help="measured calls per row (at least 20)")
    calls = max(20, parser.parse_args().calls)
    with tempfile.TemporaryDirectory() as work:
        root = trees.build_wide(os.path.join(work, "wide"), SKILLS, FILES)
        results = {
            "in_process.legacy": anyio.run(_in_process, root, "legacy", calls),
            "in_process.2026-07-28": anyio.run(_in_process, root, "auto", calls),
            "stdio.2026-07-28": _stdio(root, work, calls),
        }
    for row, numbers in results.items():
        print(f"{row:24} " + "  ".join(f"{key} {value:7.2f}" for key, value in numbers.items()))
    worst = max(numbers["first_page_ms"] for numbers in results.values())
    print(json.dumps({"skills": SKILLS, "files": FILES, "calls": calls, "targetMs": TARGET_MS, "results": results}))
    return 0 if worst <= TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
