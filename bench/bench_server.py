"""Benchmark skill-mcp against a bare low-level SDK server, side by side, in one run.

    .venv/bin/python bench/bench_server.py            # full run, a few minutes
    .venv/bin/python bench/bench_server.py --quick    # under a minute, for a smoke check
    .venv/bin/python bench/bench_server.py --json out.json

Both servers are spawned from the same interpreter with the same minimal environment and
spoken to in raw JSON-RPC lines over their stdio. Runs of the two are interleaved (and the
order alternates every round) so machine noise lands on both; the script prints medians and
ratios to the bare server, then one JSON summary. See bench/README.md for what each row means.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import trees

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
BARE = os.path.join(HERE, "bare_server.py")
PIPE = os.path.join(HERE, "pipe_server.py")
LEGACY, MODERN = "2025-11-25", "2026-07-28"
MiB = 1048576


# --- a small line client --------------------------------------------------------------------------


class ServerDied(RuntimeError):
    pass


class Proc:
    """One server process and a blocking JSON-RPC-over-lines client for it."""

    def __init__(self, argv: list[str], env: dict[str, str], cwd: str, errdir: str) -> None:
        self.stderr = tempfile.NamedTemporaryFile(dir=errdir, prefix="stderr-", delete=False)
        self.t0 = time.perf_counter()
        self.p = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.stderr, env=env, cwd=cwd
        )
        self.next_id = 0
        self.era = LEGACY

    def _meta(self, params: dict[str, Any]) -> dict[str, Any]:
        if self.era == MODERN:
            params = dict(params)
            params["_meta"] = {
                "io.modelcontextprotocol/protocolVersion": MODERN,
                "io.modelcontextprotocol/clientInfo": {"name": "bench", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {},
            }
        return params

    def send(self, message: dict[str, Any]) -> None:
        self.p.stdin.write(json.dumps(message, separators=(",", ":")).encode() + b"\n")
        self.p.stdin.flush()

    def request(self, method: str, params: dict[str, Any] | None = None) -> tuple[dict[str, Any], float]:
        """Send one request; return (response, seconds from write to the full answer line)."""
        self.next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self.next_id, "method": method}
        if params is not None or self.era == MODERN:
            message["params"] = self._meta(params or {})
        start = time.perf_counter()
        self.send(message)
        while True:
            line = self.p.stdout.readline()
            end = time.perf_counter()
            if not line:
                raise ServerDied(f"{method}: server closed stdout; stderr tail:\n{self.stderr_tail()}")
            response = json.loads(line)
            if response.get("id") == self.next_id:
                if "error" in response:
                    raise RuntimeError(f"{method}: {response['error']}")
                self.last_end = end
                return response["result"], end - start

    def call(self, tool: str, arguments: dict[str, Any]) -> tuple[dict[str, Any], float]:
        result, seconds = self.request("tools/call", {"name": tool, "arguments": arguments})
        if result.get("isError"):
            raise RuntimeError(f"{tool}: isError: {result['content'][0]['text'][:300]}")
        return result, seconds

    def handshake(self, era: str = LEGACY) -> None:
        self.era = era
        if era == MODERN:
            self.request("server/discover")
        else:
            self.request(
                "initialize",
                {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": {"name": "bench", "version": "0"}},
            )
            self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def since_spawn(self) -> float:
        return self.last_end - self.t0

    def status(self, key: str) -> int:
        """A /proc/<pid>/status value in bytes (VmRSS, VmHWM)."""
        with open(f"/proc/{self.p.pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
        raise KeyError(key)

    def stderr_tail(self) -> str:
        with open(self.stderr.name, errors="replace") as f:
            return f.read()[-2000:]

    def close(self) -> None:
        try:
            self.p.stdin.close()
        except OSError:
            pass
        try:
            self.p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.p.kill()
            self.p.wait()
        self.p.stdout.close()
        self.stderr.close()
        os.unlink(self.stderr.name)


# --- the setup ------------------------------------------------------------------------------------


class Bench:
    def __init__(self, python: str, src: str, work: str) -> None:
        self.python, self.src, self.work = python, src, work
        home = os.path.join(work, "home")
        os.makedirs(home, exist_ok=True)
        # Minimal and deterministic: nothing from the caller's environment leaks in.
        self.base_env = {
            "PATH": os.path.dirname(python) + ":/usr/local/bin:/usr/bin:/bin",
            "HOME": home,
            "LANG": "C.UTF-8",
            "TMPDIR": work,
            "PYTHONHASHSEED": "0",
        }

    def spawn_bare(self, *args: str) -> Proc:
        return Proc([self.python, BARE, *args], self.base_env, self.work, self.work)

    def spawn_pipe(self) -> Proc:
        return Proc([self.python, PIPE], self.base_env, self.work, self.work)

    def spawn_bare_levered(self) -> Proc:
        return Proc([self.python, BARE, "--levers"], {**self.base_env, "PYTHONPATH": self.src}, self.work, self.work)

    def spawn_ours(self, skills_dir: str | None = None) -> Proc:
        env = dict(self.base_env)
        if skills_dir:
            env["SKILLS_DIR"] = skills_dir
        # cwd = src puts that checkout's skill_mcp first on sys.path for `-m` (ahead of the editable install).
        return Proc([self.python, "-m", "skill_mcp"], env, self.src, self.work)


def median(values: list[float]) -> float:
    return statistics.median(values)


# What runs just before a warm call moves its latency as much as the call's own work does (bench/README.md,
# "Warm order"). `repeat` (the default) keeps each timed call in the same state as every other: right after
# the same call to the same process.
WARM_ORDERS = ("repeat", "alternate", "shuffled")


def interleave(
    rounds: int, jobs: dict[str, Callable[[], float]], results: dict[str, list[float]], order: str = "alternate"
) -> None:
    """Run every job once per round, the order reversing every other round (`shuffled`: a fresh seeded random
    order each round). `repeat`: each timed run is preceded by an untimed run of the same job."""
    names = list(jobs)
    shuffler = random.Random(0)
    for r in range(rounds):
        if order == "shuffled":
            shuffler.shuffle(names)
        for name in names if order == "shuffled" or r % 2 == 0 else names[::-1]:
            if order == "repeat":
                jobs[name]()
            results.setdefault(name, []).append(jobs[name]())


def cold(bench: Bench, spawn: Callable[[], Proc], era: str, then: Callable[[Proc], None]) -> float:
    proc = spawn()
    try:
        proc.handshake(era)
        then(proc)
        return proc.since_spawn()
    finally:
        proc.close()


def tools_list(proc: Proc) -> None:
    proc.request("tools/list")


def dummy_call(proc: Proc) -> None:
    proc.call("dummy_0", {})


def skill_list(proc: Proc) -> None:
    proc.call("skill_list", {})


def all_resource_pages(proc: Proc) -> int:
    cursor, count = None, 0
    while True:
        result, _ = proc.request("resources/list", {"cursor": cursor} if cursor else {})
        count += len(result["resources"])
        cursor = result.get("nextCursor")
        if not cursor:
            return count


# --- the measurements -----------------------------------------------------------------------------


def check_trees(bench: Bench, trees_by_name: dict[str, str]) -> dict[str, Any]:
    """Fail loudly if a tree is not served as intended (a benchmark of problems measures nothing)."""
    facts = {}
    for label, root in trees_by_name.items():
        proc = bench.spawn_ours(root)
        try:
            proc.handshake()
            result, _ = proc.call("skill_list", {})
            listing = json.loads(result["content"][0]["text"])
            facts[label] = {"skills": len(listing["skills"]), "problems": len(listing["problems"])}
            if listing["problems"]:
                raise SystemExit(f"tree {label} draws problems: {listing['problems'][:3]}")
        finally:
            proc.close()
    return facts


def run_cold(bench: Bench, rounds: int, modern: bool, wide100: str, wide1000: str) -> dict[str, list[float]]:
    jobs: dict[str, Callable[[], float]] = {
        "cold.tools_list.bare": lambda: cold(bench, bench.spawn_bare, LEGACY, tools_list),
        "cold.tools_list.ours": lambda: cold(bench, bench.spawn_ours, LEGACY, tools_list),
        "cold.tools_list.bare_levered": lambda: cold(bench, bench.spawn_bare_levered, LEGACY, tools_list),
        "cold.first_call.bare": lambda: cold(bench, bench.spawn_bare, LEGACY, dummy_call),
        "cold.skill_list.bundled": lambda: cold(bench, bench.spawn_ours, LEGACY, skill_list),
        "cold.skill_list.32x100": lambda: cold(bench, lambda: bench.spawn_ours(wide100), LEGACY, skill_list),
        "cold.skill_list.32x1000": lambda: cold(bench, lambda: bench.spawn_ours(wide1000), LEGACY, skill_list),
    }
    if modern:
        jobs["cold.tools_list.bare.modern"] = lambda: cold(bench, bench.spawn_bare, MODERN, tools_list)
        jobs["cold.tools_list.ours.modern"] = lambda: cold(bench, bench.spawn_ours, MODERN, tools_list)
    # One discarded round first: bytecode caches and the page cache are warm for every measured run.
    interleave(1, jobs, {})
    results: dict[str, list[float]] = {}
    interleave(rounds, jobs, results)
    return results


def run_warm(
    bench: Bench, calls: int, warmup: int, wide100: str, big: str, order: str
) -> tuple[dict[str, list[float]], dict[str, Any]]:
    bare, small, large = bench.spawn_bare(), bench.spawn_ours(wide100), bench.spawn_ours(big)
    # The SDK's own cost of one 500-resource page, served from a prebuilt dict: the floor under ours; and the
    # transport's, the same page as prebuilt bytes with no SDK.
    floor, pipe = bench.spawn_bare("--resources", "500"), bench.spawn_pipe()
    try:
        for proc in (bare, small, large, floor, pipe):
            proc.handshake()
            proc.request("tools/list")
        two = [trees.small_path(0), trees.small_path(11)]
        pages: list[int] = []

        def resources() -> float:
            start = time.perf_counter()
            pages.append(all_resource_pages(small))
            return time.perf_counter() - start

        jobs: dict[str, Callable[[], float]] = {
            "warm.dummy.bare": lambda: bare.call("dummy_0", {})[1],
            "warm.tools_list.bare": lambda: bare.request("tools/list")[1],
            "warm.tools_list.ours": lambda: small.request("tools/list")[1],
            "warm.skill_list": lambda: small.call("skill_list", {})[1],
            "warm.skill_load": lambda: small.call("skill_load", {"name": "bench-07"})[1],
            "warm.skill_file.2small": lambda: small.call("skill_file", {"name": "bench-07", "paths": two})[1],
            "warm.resources_list.all_pages": resources,
            "warm.resources_list.bare_page": lambda: floor.request("resources/list")[1],
            "warm.dummy.pipe": lambda: pipe.call("dummy_0", {})[1],
            "warm.resources_list.pipe_page": lambda: pipe.request("resources/list")[1],
            "warm.skill_file.1MiB": lambda: large.call(
                "skill_file", {"name": trees.BIG_SKILL, "paths": [trees.BIG_PATH]}
            )[1],
        }
        interleave(warmup, jobs, {}, order)
        results: dict[str, list[float]] = {}
        interleave(calls, jobs, results, order)
        page_count = -(-pages[-1] // 500)
        extra = {"resources": pages[-1], "resource_pages": page_count}
        return results, extra
    finally:
        for proc in (bare, small, large, floor, pipe):
            proc.close()


def run_memory(bench: Bench, rounds: int, reads: int, big: str) -> dict[str, list[float]]:
    """Idle RSS after boot (handshake + tools/list, then a short settle); peak (VmHWM) after the reads."""

    def idle(spawn: Callable[[], Proc]) -> float:
        proc = spawn()
        try:
            proc.handshake()
            proc.request("tools/list")
            time.sleep(0.3)
            return proc.status("VmRSS")
        finally:
            proc.close()

    def after_reads() -> list[float]:
        proc = bench.spawn_ours(big)
        try:
            proc.handshake()
            proc.request("tools/list")
            time.sleep(0.3)
            before, hwm_before = proc.status("VmRSS"), proc.status("VmHWM")
            for _ in range(reads):
                proc.call("skill_file", {"name": trees.BIG_SKILL, "paths": [trees.BIG_PATH]})
            time.sleep(0.1)
            return [before, hwm_before, proc.status("VmHWM"), proc.status("VmRSS")]
        finally:
            proc.close()

    results: dict[str, list[float]] = {}
    for r in range(rounds):
        order = ["bare", "ours", "big"] if r % 2 == 0 else ["big", "ours", "bare"]
        for which in order:
            if which == "bare":
                results.setdefault("rss.idle.bare", []).append(idle(bench.spawn_bare))
            elif which == "ours":
                results.setdefault("rss.idle.ours", []).append(idle(bench.spawn_ours))
            else:
                before, hwm_before, hwm_after, rss_after = after_reads()
                results.setdefault("rss.idle.ours_big_tree", []).append(before)
                results.setdefault("rss.hwm_at_boot.ours_big_tree", []).append(hwm_before)
                results.setdefault("rss.hwm_after_reads.ours_big_tree", []).append(hwm_after)
                results.setdefault("rss.after_reads.ours_big_tree", []).append(rss_after)
                results.setdefault("rss.peak_over_idle.ours_big_tree", []).append(hwm_after - before)
    return results


# --- the report -----------------------------------------------------------------------------------


def targets(m: dict[str, float]) -> list[dict[str, Any]]:
    cold_bare, first_bare, dummy = m["cold.tools_list.bare"], m["cold.first_call.bare"], m["warm.dummy.bare"]
    added_1000 = m["cold.skill_list.32x1000"] - m["cold.skill_list.bundled"]
    slope = (m["cold.skill_list.32x1000"] - m["cold.skill_list.32x100"]) / 28.8  # per 1000 files (28,800 more)
    small_calls = ["warm.skill_list", "warm.skill_load", "warm.skill_file.2small"]
    rows: list[tuple[str, str, float, float, str]] = [
        ("2", "cold start (tools/list) <= 1.15 x bare", m["cold.tools_list.ours"] / cold_bare, 1.15, "ratio"),
        *[("2", f"{k[5:]} <= bare dummy + 1 ms", (m[k] - dummy) * 1e3, 1.0, "ms over") for k in small_calls],
        ("2", "skill_file 1 MiB <= 10 ms", m["warm.skill_file.1MiB"] * 1e3, 10.0, "ms"),
        ("2", "32 x 1000 files add <= 0.3 s to cold start (vs bundled)", added_1000, 0.3, "s"),
        ("2", "idle RSS <= 1.1 x bare", m["rss.idle.ours"] / m["rss.idle.bare"], 1.1, "ratio"),
        ("2", "peak after 50 x 1 MiB <= idle + 30 MiB", m["rss.peak_over_idle.ours_big_tree"] / MiB, 30.0, "MiB over"),
        ("7", "cold start (tools/list) <= 0.45 x bare", m["cold.tools_list.ours"] / cold_bare, 0.45, "ratio"),
        (
            "7",
            "cold start (skill_list, bundled) <= 0.45 x bare first call",
            m["cold.skill_list.bundled"] / first_bare,
            0.45,
            "ratio",
        ),
        *[("7", f"{k[5:]} <= 1.2 x bare dummy", m[k] / dummy, 1.2, "ratio") for k in small_calls],
        ("7", "resources/list (per page) <= 1.2 x bare dummy", m["warm.resources_list.per_page"] / dummy, 1.2, "ratio"),
        ("7", "skill_file 1 MiB <= 6 ms", m["warm.skill_file.1MiB"] * 1e3, 6.0, "ms"),
        ("7", "discovery <= 10 ms / 1000 files (32x1000 vs bundled)", added_1000 / 32 * 1e3, 10.0, "ms/1000"),
        ("7", "discovery slope <= 10 ms / 1000 files (32x1000 vs 32x100)", slope * 1e3, 10.0, "ms/1000"),
        ("7", "peak after 50 x 1 MiB <= idle + 16 MiB", m["rss.peak_over_idle.ours_big_tree"] / MiB, 16.0, "MiB over"),
    ]
    return [
        {"issue": issue, "target": name, "value": round(value, 4), "limit": limit, "unit": unit, "pass": value <= limit}
        for issue, name, value, limit, unit in rows
    ]


def report(raw: dict[str, list[float]], extra: dict[str, Any]) -> dict[str, Any]:
    m = {k: median(v) for k, v in raw.items()}
    m["warm.resources_list.per_page"] = m["warm.resources_list.all_pages"] / extra["resource_pages"]
    cold_bare, first_bare, dummy = m["cold.tools_list.bare"], m["cold.first_call.bare"], m["warm.dummy.bare"]

    def paired(key: str, base_key: str) -> float:
        """Median of per-round ratios: runs of one round are adjacent in time, so they share its noise."""
        return median([a / b for a, b in zip(raw[key], raw[base_key])])

    def line(label: str, key: str, base: float | None, unit: str = "ms", base_key: str | None = None) -> None:
        value = m[key]
        n = len(raw.get(key, raw.get("warm.resources_list.all_pages", [])))
        shown = f"{value * 1e3:9.2f} ms" if unit == "ms" else f"{value / MiB:9.1f} MiB"
        ratio = f"{value / base:6.2f}x" if base else "       "
        spread = ""
        if key in raw and len(raw[key]) > 1:
            q = statistics.quantiles(raw[key], n=4)
            spread = f"  IQR {q[0] * 1e3:.2f}-{q[2] * 1e3:.2f} min {min(raw[key]) * 1e3:.2f}" if unit == "ms" else ""
        pair = f"  paired {paired(key, base_key):.2f}x" if base_key else ""
        print(f"  {label:<52}{shown}  {ratio}  n={n}{spread}{pair}")

    print(
        "\nCold start (spawn -> answer), medians; ratio of medians to the bare server, and median of per-round ratios"
    )
    line("bare: tools/list", "cold.tools_list.bare", None)
    line("ours: tools/list (bundled skills)", "cold.tools_list.ours", cold_bare, base_key="cold.tools_list.bare")
    line(
        "bare with our start-up levers: tools/list",
        "cold.tools_list.bare_levered",
        cold_bare,
        base_key="cold.tools_list.bare",
    )
    if "cold.tools_list.bare.modern" in m:
        line("bare: tools/list, 2026-07-28 era", "cold.tools_list.bare.modern", None)
        line(
            "ours: tools/list, 2026-07-28 era",
            "cold.tools_list.ours.modern",
            m["cold.tools_list.bare.modern"],
            base_key="cold.tools_list.bare.modern",
        )
    line("bare: first dummy tools/call", "cold.first_call.bare", None)
    line(
        "ours: first skill_list, bundled skills", "cold.skill_list.bundled", first_bare, base_key="cold.first_call.bare"
    )
    line(
        "ours: first skill_list, 32 x 100 files", "cold.skill_list.32x100", first_bare, base_key="cold.first_call.bare"
    )
    line(
        "ours: first skill_list, 32 x 1000 files",
        "cold.skill_list.32x1000",
        first_bare,
        base_key="cold.first_call.bare",
    )
    added = m["cold.skill_list.32x1000"] - m["cold.skill_list.bundled"]
    slope = (m["cold.skill_list.32x1000"] - m["cold.skill_list.32x100"]) / 28.8
    print(
        f"  {'32 x 1000 files add (vs bundled / vs 32 x 100)':<52}{added * 1e3:9.1f} ms / {(m['cold.skill_list.32x1000'] - m['cold.skill_list.32x100']) * 1e3:.1f} ms"
        f"  ({slope * 1e3:.2f} ms per 1000 files)"
    )

    diffs = [a - b for a, b in zip(raw["cold.skill_list.32x1000"], raw["cold.skill_list.bundled"])]
    diffs100 = [a - b for a, b in zip(raw["cold.skill_list.32x1000"], raw["cold.skill_list.32x100"])]
    m["cold.added_32x1000.paired"], m["cold.added_32x1000_vs_32x100.paired"] = median(diffs), median(diffs100)
    print(f"  {'  paired per-round differences':<52}{median(diffs) * 1e3:9.1f} ms / {median(diffs100) * 1e3:.1f} ms")
    for key, base_key in (
        ("cold.tools_list.ours", "cold.tools_list.bare"),
        ("cold.skill_list.bundled", "cold.first_call.bare"),
    ):
        m[key + ".paired_ratio"] = paired(key, base_key)
    print(
        f"  {'fastest run: bare tools/list / ours tools/list':<52}{min(raw['cold.tools_list.bare']) * 1e3:9.2f} ms / "
        f"{min(raw['cold.tools_list.ours']) * 1e3:.2f} ms ({min(raw['cold.tools_list.ours']) / min(raw['cold.tools_list.bare']):.2f}x)"
    )

    print("\nWarm latency (write -> full answer line), medians; ratio to the bare dummy call; 32 x 100 tree")
    line("bare: dummy tools/call", "warm.dummy.bare", None)
    line("bare: tools/list", "warm.tools_list.bare", None)
    line("ours: tools/list", "warm.tools_list.ours", m["warm.tools_list.bare"])
    for key in ("warm.skill_list", "warm.skill_load", "warm.skill_file.2small", "warm.skill_file.1MiB"):
        line("ours: " + key[5:], key, dummy)
    line(
        f"ours: resources/list, all {extra['resource_pages']} pages ({extra['resources']} resources)",
        "warm.resources_list.all_pages",
        dummy,
    )
    line("ours: resources/list, per page", "warm.resources_list.per_page", dummy)
    line("bare: resources/list, one prebuilt 500-resource page", "warm.resources_list.bare_page", dummy)
    print(
        f"  {'ours per page / that bare page':<52}{m['warm.resources_list.per_page'] / m['warm.resources_list.bare_page']:9.2f}x"
    )
    line("no SDK: dummy answer, prebuilt bytes", "warm.dummy.pipe", None)
    line("no SDK: the same page, prebuilt bytes", "warm.resources_list.pipe_page", None)
    # What moving a page over the pipe adds to any call, whatever the server does before it writes.
    m["warm.resources_list.transport_floor"] = dummy + m["warm.resources_list.pipe_page"] - m["warm.dummy.pipe"]
    line("bare dummy + that page's transport (a floor)", "warm.resources_list.transport_floor", dummy)

    print("\nMemory (bytes from /proc/<pid>/status), medians")
    line("bare: idle VmRSS", "rss.idle.bare", None, "MiB")
    line("ours: idle VmRSS (bundled skills)", "rss.idle.ours", m["rss.idle.bare"], "MiB")
    line("ours: idle VmRSS (1 MiB skill tree)", "rss.idle.ours_big_tree", m["rss.idle.bare"], "MiB")
    line("ours: VmHWM at boot (1 MiB skill tree)", "rss.hwm_at_boot.ours_big_tree", None, "MiB")
    line(f"ours: VmHWM after {extra['reads']} x 1 MiB reads", "rss.hwm_after_reads.ours_big_tree", None, "MiB")
    line(f"ours: VmRSS after {extra['reads']} x 1 MiB reads", "rss.after_reads.ours_big_tree", None, "MiB")
    line("ours: peak over idle (VmHWM after - VmRSS idle)", "rss.peak_over_idle.ours_big_tree", None, "MiB")

    checks = targets(m)
    print("\nTargets (issue 2, issue 7)")
    for t in checks:
        print(
            f"  [{'PASS' if t['pass'] else 'FAIL'}] #{t['issue']} {t['target']:<62} {t['value']:>10.4g} {t['unit']} (limit {t['limit']:g})"
        )
    return {"medians": m, "samples": raw, "targets": checks, **extra}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--quick", action="store_true", help="few runs: a smoke check in under a minute")
    parser.add_argument("--cold-runs", type=int, help="interleaved cold starts per configuration (full 11, quick 2)")
    parser.add_argument("--warm-calls", type=int, help="measured warm calls per kind (full 200, quick 30)")
    parser.add_argument("--warmup", type=int, help="discarded warm calls per kind first (full 30, quick 10)")
    parser.add_argument("--memory-runs", type=int, help="interleaved memory runs (full 3, quick 1)")
    parser.add_argument(
        "--warm-order",
        choices=WARM_ORDERS,
        default="repeat",
        help="what precedes each timed warm call: the same call to the same process (default), the round-robin "
        "neighbour (reversing each round), or a shuffled neighbour",
    )
    parser.add_argument("--reads", type=int, default=50, help="1 MiB reads before the peak RSS is taken")
    parser.add_argument("--no-modern", action="store_true", help="skip the 2026-07-28-era cold starts")
    parser.add_argument("--python", default=sys.executable, help="interpreter for both servers (default: this one)")
    parser.add_argument(
        "--src", default=REPO, help="directory holding the skill_mcp package to run (default: this checkout)"
    )
    parser.add_argument("--json", metavar="PATH", help="also write the JSON summary to PATH")
    parser.add_argument(
        "--tmp",
        default="/dev/shm" if os.path.isdir("/dev/shm") else None,
        help="where the trees are built (default /dev/shm: building 32,000 files on a slow disk takes ~30 s)",
    )
    parser.add_argument("--keep", action="store_true", help="keep the temporary skill trees")
    options = parser.parse_args()
    quick = options.quick
    cold_runs = options.cold_runs or (2 if quick else 11)
    warm_calls = options.warm_calls or (30 if quick else 200)
    warmup = options.warmup or (10 if quick else 30)
    memory_runs = options.memory_runs or (1 if quick else 3)

    work = tempfile.mkdtemp(prefix="skill-mcp-bench-", dir=options.tmp)
    started = time.perf_counter()
    try:
        wide100 = trees.build_wide(os.path.join(work, "wide100"), 32, 100)
        wide1000 = trees.build_wide(os.path.join(work, "wide1000"), 32, 1000)
        big = trees.build_big(os.path.join(work, "big"))
        bench = Bench(os.path.abspath(options.python), os.path.abspath(options.src), work)
        facts = check_trees(bench, {"32x100": wide100, "32x1000": wide1000, "big": big})
        print(f"python {platform.python_version()} on {platform.machine()}, {os.cpu_count()} CPUs; src {bench.src}")
        print(
            f"trees: {facts}; cold runs {cold_runs}, warm calls {warm_calls} (+{warmup} warm-up, "
            f"{options.warm_order} order), memory runs {memory_runs}"
        )
        raw = run_cold(bench, cold_runs, not options.no_modern, wide100, wide1000)
        warm, extra = run_warm(bench, warm_calls, warmup, wide100, big, options.warm_order)
        raw.update(warm)
        raw.update(run_memory(bench, memory_runs, options.reads, big))
        extra.update(
            reads=options.reads,
            config={
                "cold_runs": cold_runs,
                "warm_calls": warm_calls,
                "warmup": warmup,
                "memory_runs": memory_runs,
                "warm_order": options.warm_order,
            },
            python=platform.python_version(),
            cpus=os.cpu_count(),
            src=bench.src,
        )
        summary = report(raw, extra)
        summary["seconds"] = round(time.perf_counter() - started, 1)
        compact = {k: v for k, v in summary.items() if k != "samples"}
        print("\nJSON summary")
        print(json.dumps(compact, separators=(",", ":")))
        if options.json:
            with open(options.json, "w", encoding="utf-8") as f:
                json.dump(summary, f, indent=1)
        print(f"\n({summary['seconds']} s)")
        return 0
    finally:
        if options.keep:
            print(f"trees kept in {work}")
        else:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
