"""SPEC §5 rule by rule on the wire, in both eras: the real server over real stdio, spoken to with raw JSON-RPC
lines. Several rules pinned here are the SDK's own (era commitment, version negotiation, the 2026-07-28 method
table); they are pinned so an SDK upgrade that changes what a client receives shows up here."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest
from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS
from support import write_skill
from wire import LineClient, clean_environ, legacy_handshake, running, tool_payload

MODULE = (sys.executable, "-m", "skill_mcp")
MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "line-client", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
CLIENT_INFO = {"capabilities": {}, "clientInfo": {"name": "line-client", "version": "0"}}
METHOD_NOT_FOUND, INVALID_REQUEST, UNSUPPORTED_PROTOCOL_VERSION = -32601, -32600, -32022
SLOW_SKILL = "name: slow\ndescription: Sleeps.\nmcp-host:\n  version: 1\n  run:\n    - script: slow.py\n      interpreter: python3\n"


@pytest.fixture
def tree(root: Path) -> Path:
    write_skill(root, "alpha", body="Alpha body.\n")
    return root


def opened(client: LineClient, era: str) -> dict:
    """The era opened by its first request; the params every later request carries."""
    if era == "legacy":
        legacy_handshake(client)
        return {}
    assert client.request("server/discover", {"_meta": ENVELOPE})["result"]["supportedVersions"] == [MODERN]
    return {"_meta": ENVELOPE}


def written_ids(client: LineClient) -> list:
    return [json.loads(line).get("id") for line in client.stdout_lines]


@pytest.mark.parametrize("era", ["legacy", MODERN])
def test_methods_the_server_does_not_offer_are_method_not_found(tree, era):
    # §5.1: no logging, no completions, resources without subscribe; an unknown method likewise.
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        meta = opened(client, era)
        for method, params in [
            ("no/such/method", {}),
            ("logging/setLevel", {"level": "debug"}),
            ("completion/complete", {"ref": {"type": "ref/prompt", "name": "alpha"}, "argument": {"name": "a", "value": "b"}}),
            ("resources/subscribe", {"uri": "skill://alpha/SKILL.md"}),
        ]:
            error = client.request(method, {**meta, **params})["error"]
            assert (error["code"], error["message"]) == (METHOD_NOT_FOUND, "Method not found"), method
        assert tool_payload(client.request("tools/call", {**meta, "name": "skill_list", "arguments": {}}))["skills"]
        client.close_stdin()
        assert client.wait() == 0


def test_an_unknown_method_before_initialize_is_method_not_found_not_a_session_error(tree):
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        assert client.request("no/such/method")["error"]["code"] == METHOD_NOT_FOUND
        assert client.request("ping") == {"jsonrpc": "2.0", "id": 2, "result": {}}  # ping needs no session
        legacy_handshake(client)
        assert client.request("ping")["result"] == {}
        client.close_stdin()
        assert client.wait() == 0


def test_ping_is_no_2026_07_28_method(tree):
    # The SDK's 2026-07-28 method table has no ping: pinned, as it is what such a client receives.
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        meta = opened(client, MODERN)
        assert client.request("ping", meta)["error"]["code"] == METHOD_NOT_FOUND
        client.close_stdin()
        assert client.wait() == 0


@pytest.mark.parametrize("asked", [*HANDSHAKE_PROTOCOL_VERSIONS, "1999-01-01", MODERN, "not a version"])
def test_initialize_answers_the_version_asked_for_or_the_latest_handshake_version(tree, asked):
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        result = client.request("initialize", {"protocolVersion": asked, **CLIENT_INFO})["result"]
        expected = asked if asked in HANDSHAKE_PROTOCOL_VERSIONS else HANDSHAKE_PROTOCOL_VERSIONS[-1]
        assert result["protocolVersion"] == expected
        assert result["serverInfo"]["name"] == "skill-mcp"
        client.notify("notifications/initialized")
        assert len(client.request("tools/list")["result"]["tools"]) == 4
        client.close_stdin()
        assert client.wait() == 0


@pytest.mark.parametrize("asked", ["1999-01-01", HANDSHAKE_PROTOCOL_VERSIONS[-1]])
def test_an_envelope_naming_a_version_not_served_is_refused_with_the_versions_served(tree, asked):
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        envelope = {**ENVELOPE, "io.modelcontextprotocol/protocolVersion": asked}
        for method in ("server/discover", "tools/list"):
            error = client.request(method, {"_meta": envelope})["error"]
            assert error["code"] == UNSUPPORTED_PROTOCOL_VERSION
            assert error["data"] == {"supported": [MODERN], "requested": asked}
        assert len(client.request("tools/list", {"_meta": ENVELOPE})["result"]["tools"]) == 4
        client.close_stdin()
        assert client.wait() == 0


def test_the_first_request_decides_the_era_and_the_other_era_is_refused_after(tree):
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        opened(client, "legacy")
        for method in ("server/discover", "tools/list"):
            assert client.request(method, {"_meta": ENVELOPE})["error"]["code"] == INVALID_REQUEST
        assert len(client.request("tools/list")["result"]["tools"]) == 4
        client.close_stdin()
        assert client.wait() == 0
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        client.notify("notifications/initialized")  # notifications before the first request decide nothing
        opened(client, MODERN)
        error = client.request("initialize", {"protocolVersion": HANDSHAKE_PROTOCOL_VERSIONS[-1], **CLIENT_INFO})["error"]
        assert (error["code"], error["data"]["supported"]) == (UNSUPPORTED_PROTOCOL_VERSION, [MODERN])
        bare = client.request("tools/list", {})["error"]  # a 2026-07-28 request without its envelope
        assert bare["code"] == -32602 and "_meta must be an object" in bare["message"]
        assert len(client.request("tools/list", {"_meta": ENVELOPE})["result"]["tools"]) == 4
        client.close_stdin()
        assert client.wait() == 0


def test_results_carry_result_type_and_server_info_on_2026_07_28_only(tree):
    requests = [
        ("tools/list", {}),
        ("tools/call", {"name": "skill_load", "arguments": {"name": "alpha"}}),
        ("tools/call", {"name": "no_such_tool"}),  # an isError result too
        ("prompts/list", {}),
        ("prompts/get", {"name": "alpha"}),
        ("resources/list", {}),
        ("resources/templates/list", {}),
        ("resources/read", {"uri": "skill://alpha/SKILL.md"}),
        ("skills/list", {}),
    ]
    for era in ("legacy", MODERN):
        with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
            meta = opened(client, era)
            for method, params in requests:
                result = client.request(method, {**meta, **params})["result"]
                if era == MODERN:
                    assert result["resultType"] == "complete", method
                    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "skill-mcp", method
                else:
                    assert "resultType" not in result and "_meta" not in result, method
            client.close_stdin()
            assert client.wait() == 0


@pytest.mark.parametrize("era", ["legacy", MODERN])
def test_notifications_are_never_answered_and_leave_the_session_going(tree, era):
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        meta = opened(client, era)
        completed = client.request("tools/list", meta)["id"]
        for method, params in [
            ("notifications/initialized", None),  # again
            ("notifications/roots/list_changed", {}),
            ("notifications/progress", {"progressToken": "unknown", "progress": 1}),
            ("notifications/no-such-notification", {"x": 1}),
            ("notifications/cancelled", {"requestId": 12345}),  # an id never sent
            ("notifications/cancelled", {"requestId": completed, "reason": "too late"}),  # one already answered
        ]:
            client.notify(method, params)
        last = client.request("tools/call", {**meta, "name": "skill_list", "arguments": {}})
        assert tool_payload(last)["skills"][0]["name"] == "alpha"
        client.close_stdin()
        assert client.wait() == 0
    assert written_ids(client) == list(range(1, last["id"] + 1))  # one answer per request, nothing else


@pytest.mark.parametrize("era", ["legacy", MODERN])
def test_a_request_cancelled_in_flight_gets_no_answer_and_the_session_goes_on(tmp_path, era):
    pid_file = tmp_path / "pid"
    script = f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n"
    write_skill(tmp_path / "skills", "slow", SLOW_SKILL, files={"slow.py": script})
    environ = clean_environ(SKILLS_DIR=str(tmp_path / "skills"), MCP_SKILL_PYTHON="/usr/bin/python3")
    with running(MODULE, environ) as client:
        meta = opened(client, era)
        call = {"name": "slow", "script": "slow.py"}
        token = tool_payload(client.request("tools/call", {**meta, "name": "skill_run", "arguments": call}))["confirmToken"]
        confirmed = {**meta, "name": "skill_run", "arguments": {**call, "confirmToken": token}}
        client.send_line(json.dumps({"jsonrpc": "2.0", "id": "run", "method": "tools/call", "params": confirmed}).encode())
        deadline = time.monotonic() + 10
        while not (pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline, client.stderr_text()
            time.sleep(0.02)
        client.notify("notifications/cancelled", {"requestId": "run", "reason": "the user stopped it"})
        client.notify("notifications/cancelled", {"requestId": "run"})  # again: now an id with nothing in flight
        assert len(client.request("tools/list", meta)["result"]["tools"]) == 4
        deadline = time.monotonic() + 5
        while not any(event["event"] == "run.end" for event in client.log_events()):
            assert time.monotonic() < deadline, client.stderr_text()
            time.sleep(0.02)
        assert client.request("tools/list", meta)["result"]["tools"]
        client.close_stdin()
        assert client.wait() == 0
    assert "run" not in written_ids(client)
    (end,) = [event for event in client.log_events() if event["event"] == "run.end"]
    assert (end["cancelled"], end["signal"]) == (True, "SIGKILL")
