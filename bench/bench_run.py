"""End-to-end cost of a confirmed `skill_run` over what spawning the interpreter costs anyway.

    .venv/bin/python bench/bench_run.py [--runs 30]

For each interpreter, interleaved: (a) a confirmed run of the demo skill's trivial script through a real
stdio server (the token call: check, verify, spend, spawn, drain, answer), timed from the request line to
the answer line; (b) the same interpreter with the same flags spawned on the same script from Python with
`subprocess.run`. The overhead is median(a) - median(b), and also the median of per-round differences.
Issue 3 target: overhead <= 10 ms median for each interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from bench_server import LEGACY, Proc

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEMO = os.path.join(REPO, "skill_mcp", "skills", "skill-mcp-demo")
SCRIPTS = {"python3": "scripts/report.py", "node": "scripts/report.js"}
FLAGS = {"python3": ["-B", "-E", "-s"], "node": []}


def interpreters() -> dict[str, str]:
    found = {"python3": "/usr/bin/python3", "node": shutil.which("node") or ""}
    return {name: path for name, path in found.items() if path and os.access(path, os.X_OK)}


def confirmed_run(server: Proc, script: str) -> float:
    arguments = {"name": "skill-mcp-demo", "script": script}
    preview, _ = server.call("skill_run", arguments)
    token = json.loads(preview["content"][0]["text"])["confirmToken"]
    result, seconds = server.call("skill_run", {**arguments, "confirmToken": token})
    assert json.loads(result["content"][0]["text"])["exitCode"] == 0
    return seconds


def raw_spawn(interpreter: str, path: str, script: str, env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run([path, *FLAGS[interpreter], os.path.join(DEMO, script)], cwd=DEMO, env=env,
                   stdin=subprocess.DEVNULL, capture_output=True, check=True)
    return time.perf_counter() - start


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="rounds per interpreter (at least 20)")
    options = parser.parse_args()
    found = interpreters()
    work = tempfile.mkdtemp(prefix="skill-mcp-bench-run-")
    script_env = {"PATH": "/usr/bin:/bin", "HOME": work, "LANG": "C.UTF-8", "TMPDIR": work}
    server_env = {**script_env, "PYTHONHASHSEED": "0", "MCP_SKILL_PYTHON": found.get("python3", ""),
                  "MCP_SKILL_NODE": found.get("node", ""), "MCP_LOG_LEVEL": "error"}
    server = Proc([sys.executable, "-m", "skill_mcp"], server_env, REPO, work)
    summary: dict[str, dict[str, float]] = {}
    try:
        server.handshake(LEGACY)
        for interpreter, path in found.items():
            script = SCRIPTS[interpreter]
            for _ in range(3):  # warm the page cache and the server's first-call paths
                confirmed_run(server, script)
                raw_spawn(interpreter, path, script, script_env)
            through_server, raw = [], []
            for round_ in range(max(options.runs, 20)):
                pair = [lambda: through_server.append(confirmed_run(server, script)),
                        lambda: raw.append(raw_spawn(interpreter, path, script, script_env))]
                for job in pair if round_ % 2 == 0 else reversed(pair):
                    job()
            summary[interpreter] = {
                "confirmedRunMs": statistics.median(through_server) * 1000,
                "rawSpawnMs": statistics.median(raw) * 1000,
                "overheadMs": (statistics.median(through_server) - statistics.median(raw)) * 1000,
                "pairedOverheadMs": statistics.median(a - b for a, b in zip(through_server, raw)) * 1000,
            }
    finally:
        server.close()
        shutil.rmtree(work, ignore_errors=True)
    for interpreter, row in summary.items():
        verdict = "meets" if row["overheadMs"] <= 10 else "misses"
        print(f"{interpreter:8} confirmed run {row['confirmedRunMs']:7.2f} ms   raw spawn {row['rawSpawnMs']:7.2f} ms   "
              f"overhead {row['overheadMs']:5.2f} ms (paired {row['pairedOverheadMs']:5.2f})   {verdict} <= 10 ms")
    print(json.dumps({"runs": max(options.runs, 20), "results": summary}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
