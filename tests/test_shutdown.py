"""Shutdown with a script running (SPEC §5.1): stdin EOF or SIGTERM kills its process group, logs
`shutdown` with `killedRun`, and the server exits 0 within 5 s."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from support import write_skill

SLOW_SKILL = """\
name: slow
description: Sleeps.
mcp-host:
  version: 1
  run:
    - script: slow.py
      interpreter: python3
"""


def start_server(skills: str) -> subprocess.Popen[bytes]:
    env = {"PATH": os.environ["PATH"], "SKILLS_DIR": skills, "MCP_SKILL_PYTHON": "/usr/bin/python3"}
    return subprocess.Popen(
        [sys.executable, "-m", "skill_mcp"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )


def send(server: subprocess.Popen[bytes], message: dict) -> None:
    assert server.stdin is not None
    server.stdin.write((json.dumps(message) + "\n").encode())
    server.stdin.flush()


def exchange(server: subprocess.Popen[bytes], message: dict) -> dict:
    send(server, message)
    assert server.stdout is not None
    return json.loads(server.stdout.readline())


def start_slow_run(tmp_path) -> tuple[subprocess.Popen[bytes], int]:
    """A server in the middle of a confirmed run of a script that sleeps; returns the script's pid."""
    pid_file = tmp_path / "pid"
    write_skill(
        tmp_path / "skills",
        "slow",
        SLOW_SKILL,
        files={"slow.py": f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n"},
    )
    server = start_server(str(tmp_path / "skills"))
    exchange(server, {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "test", "version": "1"}}})
    send(server, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    call = {"name": "slow", "script": "slow.py"}
    answer = exchange(server, {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "skill_run", "arguments": call}})
    token = json.loads(answer["result"]["content"][0]["text"])["confirmToken"]
    confirmed = {"name": "skill_run", "arguments": {**call, "confirmToken": token}}
    send(server, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": confirmed})  # answered only at exit
    deadline = time.monotonic() + 10
    while not (pid_file.exists() and pid_file.read_text()):
        assert time.monotonic() < deadline, "the script never started"
        time.sleep(0.05)
    return server, int(pid_file.read_text())


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize("how", ["eof", "signal"])
def test_shutdown_kills_the_running_script_and_exits_zero(tmp_path, how: str) -> None:
    server, script_pid = start_slow_run(tmp_path)
    assert alive(script_pid)
    started = time.monotonic()
    if how == "eof":
        server.stdin.close()
    else:
        server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=5) == 0
    assert time.monotonic() - started < 5
    deadline = time.monotonic() + 2
    while alive(script_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(script_pid)
    events = [json.loads(line) for line in server.stderr.read().decode().splitlines()]
    shutdown = [event for event in events if event["event"] == "shutdown"]
    assert len(shutdown) == 1
    assert shutdown[0]["reason"] == how
    assert shutdown[0]["killedRun"] is True, events
