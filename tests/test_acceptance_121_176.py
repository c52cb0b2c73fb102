"""§17 items 121–176 that no other test proves as written: real server processes restarted between the
issue and the use of a token (138), a real clock running past a 1 s TTL (136), every confirmation result as
the bytes a client reads (147), and the CI stages' skip notices (176)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from support import REPO
from wire import LineClient, clean_environ, legacy_handshake, running

SERVER = [sys.executable, "-m", "skill_mcp"]
DEMO = {"name": "skill-mcp-demo", "script": "scripts/report.py"}
DEMO_GRANT = json.dumps([{"skill": "skill-mcp-demo", "script": "scripts/report.py"}])


def environ(**extra: str) -> dict[str, str]:
    """The bundled demo root, Debian's python3 for scripts, and `extra`."""
    return clean_environ(MCP_SKILL_PYTHON="/usr/bin/python3", **extra)


def run(client: LineClient, **arguments: Any) -> dict[str, Any]:
    """The `result` of one skill_run on the demo script."""
    return client.request("tools/call", {"name": "skill_run", "arguments": {**DEMO, **arguments}})["result"]


def body(result: dict[str, Any]) -> dict[str, Any]:
    """The one text item of a confirmation result, held to §11's minified, single-line JSON."""
    (item,) = result["content"]
    text = item["text"]
    assert "\n" not in text and text == json.dumps(json.loads(text), ensure_ascii=False, separators=(",", ":"))
    return json.loads(text)


def rejection(result: dict[str, Any]) -> str:
    assert result["isError"] is True
    answer = body(result)
    assert (answer["status"], answer["dispatched"]) == ("confirmation-rejected", False)
    return answer["error"]


def token_of(client: LineClient, args: list[str]) -> str:
    first = body(run(client, args=args))
    assert first["status"] == "confirmation-required"
    return first["confirmToken"]


# --- item 138: a restart is a new process ------------------------------------------------------------


def test_a_random_key_dies_with_its_process_so_a_restart_voids_every_token() -> None:
    with running(SERVER, environ()) as first:
        legacy_handshake(first)
        token = token_of(first, ["a"])
    with running(SERVER, environ()) as second:
        legacy_handshake(second)
        assert rejection(run(second, args=["a"], confirmToken=token)) == "TOKEN_INVALID"
        ran = body(run(second, args=["a"], confirmToken=token_of(second, ["a"])))
    assert (ran["exitCode"], json.loads(ran["stdout"])["argv"][-1:]) == (0, ["a"])


def test_a_stable_secret_and_data_dir_carry_tokens_and_their_spending_across_a_restart(tmp_path: Path) -> None:
    data = tmp_path.resolve() / "data"
    data.mkdir()
    env = environ(MCP_CONFIRM_SECRET="stable-secret", MCP_DATA_DIR=str(data), MCP_SKILL_RUN=DEMO_GRANT)
    with running(SERVER, env) as first:
        legacy_handshake(first)
        spent, kept = token_of(first, ["spent"]), token_of(first, ["kept"])
        assert body(run(first, args=["spent"], confirmToken=spent))["exitCode"] == 0
        first.close_stdin()
        assert first.wait() == 0
    with running(SERVER, env) as second:
        legacy_handshake(second)
        assert rejection(run(second, args=["spent"], confirmToken=spent)) == "TOKEN_REUSED"
        ran = body(run(second, args=["kept"], confirmToken=kept))
        assert rejection(run(second, args=["kept"], confirmToken=kept)) == "TOKEN_REUSED"
    assert (ran["exitCode"], json.loads(ran["stdout"])["argv"][-1:]) == (0, ["kept"])


# --- item 136 on the wall clock, and item 147 ---------------------------------------------------------


def test_every_confirmation_result_is_one_line_of_minified_json() -> None:
    with running(SERVER, environ(MCP_CONFIRM_TTL_SECONDS="1")) as client:
        legacy_handshake(client)
        required = body(run(client, args=["x"]))
        assert (required["status"], required["ttlSeconds"]) == ("confirmation-required", 1)
        time.sleep(2)  # a 1 s TTL, two seconds later on the server's own clock
        assert rejection(run(client, args=["x"], confirmToken=required["confirmToken"])) == "TOKEN_EXPIRED"
        token = token_of(client, ["x"])
        assert rejection(run(client, args=["x"], confirmToken=token + "A")) == "TOKEN_INVALID"
        changed = run(client, args=["y"], confirmToken=token)
        assert rejection(changed) == "DRAFT_CHANGED" and body(changed)["reason"] == "payload-changed"
        fresh = body(changed)["confirmToken"]
        assert body(run(client, args=["y"], confirmToken=fresh))["exitCode"] == 0
        assert rejection(run(client, args=["y"], confirmToken=fresh)) == "TOKEN_REUSED"
    with running(SERVER, environ(MCP_CONFIRM_MODE="refuse")) as client:
        legacy_handshake(client)
        refused = run(client)
        assert refused.get("isError", False) is False
        assert body(refused)["reason"] == "confirmation-unsupported"
    with running(SERVER, environ()) as client:  # path 1: the user declines the server's question
        client.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
                                      "clientInfo": {"name": "acceptance", "version": "0"}})  # fmt: skip
        client.notify("notifications/initialized")
        client.send_line(json.dumps({"jsonrpc": "2.0", "id": "run", "method": "tools/call",
                                     "params": {"name": "skill_run", "arguments": DEMO}}).encode())  # fmt: skip
        question = client.next_message()
        assert question["method"] == "elicitation/create"
        client.send_line(json.dumps({"jsonrpc": "2.0", "id": question["id"], "result": {"action": "decline"}}).encode())
        while (answer := client.next_message()).get("id") != "run":
            pass
        declined = answer["result"]
        assert declined.get("isError", False) is False
        assert body(declined)["cancelled"] is True


# --- item 176: a CI stage that cannot run says so ------------------------------------------------------


@pytest.mark.parametrize(
    ("script", "notice"),
    [("netns-egress-test.sh", "SKIP: netns egress test: needs root"),
     ("container-test.sh", "SKIP: container test: needs root")],
)  # fmt: skip
def test_a_ci_stage_that_cannot_run_prints_a_skip_notice(script: str, notice: str) -> None:
    if shutil.which("setpriv") is None:
        pytest.skip("NOTICE: setpriv not found, the CI stages were not started as an unprivileged user")
    stage = Path(tempfile.mkdtemp(prefix="skmcp-ci-"))
    try:
        (stage / "ci").mkdir()
        copy = stage / "ci" / script
        shutil.copy(Path(REPO) / "ci" / script, copy)
        for path in (stage, stage / "ci", copy):
            path.chmod(0o755)
        command = ["bash", str(copy)]
        if os.geteuid() == 0:
            command = ["setpriv", "--reuid", "10001", "--regid", "10001", "--clear-groups", *command]
        proc = subprocess.run(command, capture_output=True, text=True, timeout=60, cwd=stage)
    finally:
        shutil.rmtree(stage)
    assert (proc.returncode, proc.stdout.strip()) == (0, notice), proc.stderr
    assert "PASS" not in proc.stdout + proc.stderr
