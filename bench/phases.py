"""Where one cold start's time goes, phase by phase, timed inside the server process.

    .venv/bin/python bench/phases.py [--runs 5]

Each run starts `skill-mcp` (bundled skills) in a fresh interpreter, writes `initialize`,
`notifications/initialized`, `tools/list` and a `skill_list` call before the server is up (as a client does),
and closes stdin.
Inside, the phases are marked by wrapping the functions `serve` calls; time 0 is the interpreter reaching
this file. Printed: per-phase medians over the runs. The wrapping itself adds well under 1 ms.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MESSAGES = [
    {"jsonrpc": "2.0", "id": 1, "method": "initialize",
     "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "phases", "version": "1"}}},
    {"jsonrpc": "2.0", "method": "notifications/initialized"},
    {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "skill_list", "arguments": {}}},
]  # fmt: skip

# Runs in the server process: marks each phase, then prints them as one JSON line on stderr at exit.
INSIDE = """
import atexit, json, os, sys, time
started = time.perf_counter()
marks = []
mark = lambda name: marks.append((name, (time.perf_counter() - started) * 1000))
from skill_mcp import cli, startup
import_sdk = startup.import_sdk

def timed_import_sdk():
    mark("interpreter and CLI")
    levers = import_sdk()
    mark("SDK import")
    from skill_mcp import deployment, lifecycle, logs, run_tool, server  # what serve() imports next
    mark("our modules")
    build_server = server.build_server
    def timed_build_server(*args, **kwargs):
        built = build_server(*args, **kwargs)
        mark("discovery and boot")
        return built
    server.build_server = timed_build_server
    read, send = lifecycle._WatchedInput.__anext__, lifecycle._WatchedOutput.send
    async def timed_read(self):
        item = await read(self)
        mark("first message read" if len(marks) == 4 else "message read")
        return item
    async def timed_send(self, item):
        await send(self, item)
        mark("answer sent")
    lifecycle._WatchedInput.__anext__, lifecycle._WatchedOutput.send = timed_read, timed_send
    return levers

startup.import_sdk = timed_import_sdk
atexit.register(lambda: os.write(2, ("PHASES " + json.dumps(marks) + "\\n").encode()))
sys.exit(cli.main([]))
"""

# The phases printed, each from the previous mark to the named one.
PHASES = [
    ("interpreter start, CLI import", "interpreter and CLI"),
    ("SDK import (startup.import_sdk)", "SDK import"),
    ("our modules (deployment, logs, server, run_tool)", "our modules"),
    ("discovery, logging, boot log, server build", "discovery and boot"),
    ("stdio loop start -> initialize read", "first message read"),
    ("initialize -> its answer written", "answer sent"),
]


def one_run(work: str) -> list[tuple[str, float]]:
    env = {"PATH": os.path.dirname(sys.executable) + ":/usr/bin:/bin", "HOME": work, "LANG": "C.UTF-8",
           "PYTHONHASHSEED": "0", "MCP_LOG_LEVEL": "error"}  # fmt: skip
    stdin = "".join(json.dumps(message) + "\n" for message in MESSAGES)
    done = subprocess.run([sys.executable, "-c", INSIDE], input=stdin, capture_output=True, text=True, env=env,
                          cwd=REPO, timeout=60)  # fmt: skip
    line = next(line for line in done.stderr.splitlines() if line.startswith("PHASES "))
    return [(name, at) for name, at in json.loads(line[len("PHASES "):])]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as work:
        one_run(work)  # warms the bytecode caches
        runs = [one_run(work) for _ in range(options.runs)]
    durations: dict[str, list[float]] = {label: [] for label, _ in PHASES}
    to_tools_list, to_skill_list = [], []
    for marks in runs:
        at: dict[str, float] = {}
        for name, when in marks:  # each phase's first mark: the first "answer sent" is initialize's
            at.setdefault(name, when)
        previous = 0.0
        for label, name in PHASES:
            durations[label].append(at[name] - previous)
            previous = at[name]
        answers = [at for name, at in marks if name == "answer sent"]  # written in the order asked
        to_tools_list.append(answers[1])
        to_skill_list.append(answers[2])
    print(f"Phases of one cold start, medians of {options.runs} runs (ms)")
    for label, values in durations.items():
        print(f"  {label:<50} {statistics.median(values):7.1f}")
    print(f"  {'... to the tools/list answer written':<50} {statistics.median(to_tools_list):7.1f}")
    first_call = statistics.median(b - a for a, b in zip(to_tools_list, to_skill_list))
    print(f"  {'tools/list answer -> first skill_list answer':<50} {first_call:7.1f}")


if __name__ == "__main__":
    main()
