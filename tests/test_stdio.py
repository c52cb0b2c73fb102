"""The real server over real stdio, spoken to with raw JSON-RPC lines (SPEC §5.1, §13, §14.1;
§17 items 4, 72–73, 156–157, 160).

No SDK on the client side: a line-based client written here is the independent implementation.
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from support import write_skill

VENV_BIN = os.path.dirname(sys.executable)
MODULE = (sys.executable, "-m", "skill_mcp")
CONSOLE_SCRIPT = (os.path.join(VENV_BIN, "skill-mcp"),)
LAUNCHERS = {"python -m skill_mcp": MODULE, "skill-mcp": CONSOLE_SCRIPT}
SNAPSHOT = Path(__file__).parent / "snapshots" / "tools_list.json"
MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "line-client", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
VERSION = importlib.metadata.version("skill-mcp")
BOOT_FIELDS = {
    "version", "roots", "rootsFrom", "grantFrom", "hosted", "skills", "problems", "interpreters",
    "environScrub", "nonDumpable", "maxSkills", "confirmMode", "elicitation",
}  # fmt: skip
ANSWER_SECONDS = 15
EXIT_SECONDS = 5


def clean_environ(**extra: str) -> dict[str, str]:
    """The test process's environment without any skill-mcp configuration, plus `extra`."""
    environ = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith("MCP_") and key not in {"SKILLS_DIR", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy"}
    }
    return {**environ, **extra}


class LineClient:
    """One server process; stdout and stderr drained by threads into line queues."""

    def __init__(self, command: Sequence[str], environ: dict[str, str], cwd: str | None = None) -> None:
        self.process = subprocess.Popen(
            list(command),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=environ,
            cwd=cwd,
        )
        self.stdout_lines: list[bytes] = []
        self.stderr_lines: list[bytes] = []
        self._answers: queue.Queue[bytes | None] = queue.Queue()
        self._threads = [
            threading.Thread(target=self._drain, args=(self.process.stdout, self.stdout_lines, self._answers), daemon=True),
            threading.Thread(target=self._drain, args=(self.process.stderr, self.stderr_lines, None), daemon=True),
        ]
        for thread in self._threads:
            thread.start()
        self._next_id = 0

    @staticmethod
    def _drain(stream, lines: list[bytes], answers: queue.Queue | None) -> None:
        for line in stream:
            lines.append(line)
            if answers is not None:
                answers.put(line)
        if answers is not None:
            answers.put(None)

    def send_line(self, line: bytes) -> None:
        self.process.stdin.write(line + b"\n")
        self.process.stdin.flush()

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            message["params"] = params
        self.send_line(json.dumps(message).encode())

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one request and return the response carrying its id (anything else must not come)."""
        self._next_id += 1
        message: dict[str, Any] = {"jsonrpc": "2.0", "id": self._next_id, "method": method}
        if params is not None:
            message["params"] = params
        self.send_line(json.dumps(message).encode())
        deadline = time.monotonic() + ANSWER_SECONDS
        while True:
            line = self._answers.get(timeout=max(0.01, deadline - time.monotonic()))
            assert line is not None, f"stdout closed before answering {method}: {self.stderr_text()}"
            answer = json.loads(line)
            if answer.get("id") == self._next_id:
                return answer

    def close_stdin(self) -> None:
        self.process.stdin.close()

    def wait(self, seconds: float = EXIT_SECONDS) -> int:
        started = time.monotonic()
        code = self.process.wait(timeout=seconds)
        assert time.monotonic() - started <= seconds
        for thread in self._threads:
            thread.join(timeout=seconds)
        return code

    def stderr_text(self) -> str:
        return b"".join(self.stderr_lines).decode("utf-8", "replace")

    def log_events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stderr_lines]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


@contextmanager
def running(command: Sequence[str], environ: dict[str, str], cwd: str | None = None) -> Iterator[LineClient]:
    client = LineClient(command, environ, cwd)
    try:
        yield client
    finally:
        client.kill()
        for stream in (client.process.stdin, client.process.stdout, client.process.stderr):
            try:
                stream.close()
            except (OSError, ValueError):
                pass


def legacy_handshake(client: LineClient) -> dict[str, Any]:
    answer = client.request(
        "initialize",
        {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "line-client", "version": "0"}},
    )
    client.notify("notifications/initialized")
    return answer


def tool_payload(answer: dict[str, Any]) -> Any:
    result = answer["result"]
    assert result.get("isError", False) is False, result
    (item,) = result["content"]
    assert item["type"] == "text" and "\n" not in item["text"]
    return json.loads(item["text"])


def assert_stdout_is_only_json_rpc(client: LineClient) -> None:
    assert client.stdout_lines, "no protocol output at all"
    for line in client.stdout_lines:
        assert line.endswith(b"\n")
        message = json.loads(line)
        assert message["jsonrpc"] == "2.0"
        assert ("id" in message and ("result" in message or "error" in message)) or "method" in message, message


@pytest.fixture
def tree(root: Path) -> Path:
    """One good skill and two problems: a directory without SKILL.md and broken YAML."""
    write_skill(root, "alpha", body="Alpha body.\n", files={"notes.md": "# Notes\n"})
    (root / "no-skill-here").mkdir()
    (root / "broken").mkdir()
    (root / "broken" / "SKILL.md").write_text("---\nname: [unclosed\n---\nBody\n", encoding="utf-8")
    return root


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_legacy_session_logs_and_clean_exit_on_eof(tree, launcher):
    with running(LAUNCHERS[launcher], clean_environ(SKILLS_DIR=str(tree))) as client:
        answer = legacy_handshake(client)
        result = answer["result"]
        assert result["protocolVersion"] == "2025-11-25"
        assert result["serverInfo"] == {"name": "skill-mcp", "version": VERSION}
        assert result["capabilities"] == {
            "prompts": {"listChanged": False},
            "resources": {"listChanged": False, "subscribe": False},
            "tools": {"listChanged": False},
        }
        assert result["instructions"].split("\n")[1:] == ["- alpha: The alpha skill."]

        tools = client.request("tools/list")["result"]["tools"]
        assert tools == json.loads(SNAPSHOT.read_text(encoding="utf-8"))["tools"]

        listed = tool_payload(client.request("tools/call", {"name": "skill_list", "arguments": {}}))
        assert [skill["name"] for skill in listed["skills"]] == ["alpha"]
        assert sorted(problem["reason"] for problem in listed["problems"]) == ["malformed-frontmatter", "no-skill-md"]

        client.close_stdin()
        assert client.wait() == 0

    assert_stdout_is_only_json_rpc(client)
    events = client.log_events()
    for event in events:
        assert {"event", "level", "timestamp"} <= set(event), event
        assert event["timestamp"].endswith("Z") or event["timestamp"].endswith("+00:00")
    (boot,) = [event for event in events if event["event"] == "boot"]
    assert BOOT_FIELDS <= set(boot)
    assert (boot["level"], boot["version"], boot["roots"], boot["rootsFrom"], boot["grantFrom"], boot["hosted"]) == (
        "info",
        VERSION,
        [str(tree)],
        "SKILLS_DIR",
        "declaration",
        False,
    )
    assert (boot["skills"], boot["problems"], boot["maxSkills"]) == (1, 2, 32)
    problems = [event for event in events if event["event"] == "problem"]
    assert [
        {"path": event["path"], "reason": event["reason"], "detail": event["detail"], "level": event["level"]}
        for event in problems
    ] == [{**problem, "level": "warning"} for problem in listed["problems"]]
    shutdown = [event for event in events if event["event"] == "shutdown"]
    assert [(event["level"], event["reason"], event["killedRun"]) for event in shutdown] == [("info", "eof", False)]
    assert events[-1] is shutdown[0]


def test_garbage_lines_do_not_stop_the_server(tree):
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        legacy_handshake(client)
        for garbage in [b"garbage", b"{not json", b"[]", b'{"jsonrpc":"2.0"}', b"", b"\xff\xfe\x00"]:
            client.send_line(garbage)
        assert client.request("ping") == {"jsonrpc": "2.0", "id": 2, "result": {}}
        loaded = tool_payload(client.request("tools/call", {"name": "skill_load", "arguments": {"name": "alpha"}}))
        assert loaded["body"] == "Alpha body.\n"
        unknown = client.request("no/such/method")
        assert unknown["error"]["code"] == -32601
        assert client.request("ping")["result"] == {}
        client.close_stdin()
        assert client.wait() == 0
    assert_stdout_is_only_json_rpc(client)


def test_modern_era_on_the_wire_with_the_request_envelope(tree):
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        discovered = client.request("server/discover", {"_meta": ENVELOPE})["result"]
        assert MODERN in discovered["supportedVersions"]
        assert discovered["capabilities"]["extensions"] == {"io.modelcontextprotocol/skills": {"directoryRead": True}}
        assert "logging" not in discovered["capabilities"] and "completions" not in discovered["capabilities"]
        assert discovered["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "skill-mcp"
        assert discovered["instructions"].split("\n")[1:] == ["- alpha: The alpha skill."]

        tools = client.request("tools/list", {"_meta": ENVELOPE})["result"]["tools"]
        assert tools == json.loads(SNAPSHOT.read_text(encoding="utf-8"))["tools"]

        answer = client.request("tools/call", {"_meta": ENVELOPE, "name": "skill_file", "arguments": {"name": "alpha", "paths": ["notes.md"]}})
        assert tool_payload(answer)["files"][0]["content"] == "# Notes\n"

        read = client.request("resources/read", {"_meta": ENVELOPE, "uri": "skill://alpha/../outside.txt"})
        assert read["error"]["code"] == -32602
        assert read["error"]["message"] == 'path "../outside.txt" is not usable: it has a ".." segment'

        # a 2026-07-28 request without its envelope is refused, and the server goes on
        bare = client.request("tools/list", {})
        assert bare["error"]["code"] == -32602
        assert client.request("tools/list", {"_meta": ENVELOPE})["result"]["tools"] == tools

        client.close_stdin()
        assert client.wait() == 0
    assert_stdout_is_only_json_rpc(client)


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_sigterm_exits_zero_with_a_shutdown_event(tree, launcher):
    with running(LAUNCHERS[launcher], clean_environ(SKILLS_DIR=str(tree))) as client:
        legacy_handshake(client)
        assert client.request("ping")["result"] == {}
        client.process.send_signal(signal.SIGTERM)
        assert client.wait() == 0
    shutdown = [event for event in client.log_events() if event["event"] == "shutdown"]
    assert [(event["reason"], event["killedRun"]) for event in shutdown] == [("signal", False)]
    assert_stdout_is_only_json_rpc(client)


def test_sigint_exits_zero_too(tree):
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        legacy_handshake(client)
        client.process.send_signal(signal.SIGINT)
        assert client.wait() == 0
    assert [event["reason"] for event in client.log_events() if event["event"] == "shutdown"] == ["signal"]


def test_eof_before_any_request_exits_zero(tree):
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        client.close_stdin()
        assert client.wait() == 0
    assert client.stdout_lines == []
    assert [event["reason"] for event in client.log_events() if event["event"] == "shutdown"] == ["eof"]


def test_console_log_format_is_human_readable(tree):
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree), MCP_LOG_FORMAT="console")) as client:
        legacy_handshake(client)
        client.close_stdin()
        assert client.wait() == 0
    text = client.stderr_text()
    assert "boot" in text and "shutdown" in text
    for line in client.stderr_lines:
        with pytest.raises(ValueError):
            json.loads(line)
    assert "\x1b[" not in text  # stderr is a pipe, not a TTY: no colour
    assert_stdout_is_only_json_rpc(client)


def test_log_level_error_silences_info_and_warning(tree):
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree), MCP_LOG_LEVEL="ERROR")) as client:
        legacy_handshake(client)
        assert tool_payload(client.request("tools/call", {"name": "skill_list", "arguments": {}}))["problems"]
        client.close_stdin()
        assert client.wait() == 0
    assert client.stderr_lines == []
    assert_stdout_is_only_json_rpc(client)


def test_an_unknown_log_setting_falls_back_with_a_warning(tree):
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree), MCP_LOG_FORMAT="xml", MCP_LOG_LEVEL="loud")) as client:
        client.close_stdin()
        assert client.wait() == 0
    events = client.log_events()  # still JSON: the fallback format
    warnings = [(event["variable"], event["level"]) for event in events if event["event"] == "config.warning"]
    assert sorted(warnings) == [("MCP_LOG_FORMAT", "warning"), ("MCP_LOG_LEVEL", "warning")]
    assert "xml" not in client.stderr_text() and "loud" not in client.stderr_text()
    assert any(event["event"] == "boot" for event in events)


@pytest.mark.parametrize("launcher", sorted(LAUNCHERS))
def test_an_unrelated_cwd_serves_the_bundled_demo(tmp_path, launcher):
    with running(LAUNCHERS[launcher], clean_environ(), cwd=str(tmp_path)) as client:
        legacy_handshake(client)
        listed = tool_payload(client.request("tools/call", {"name": "skill_list", "arguments": {}}))
        assert listed["rootsFrom"] == "default"
        assert [skill["name"] for skill in listed["skills"]] == ["skill-mcp-demo"]
        assert listed["problems"] == []
        read = client.request("resources/read", {"uri": "skill://skill-mcp-demo/references/declaration.md"})
        assert read["result"]["contents"][0]["mimeType"] == "text/markdown"
        client.close_stdin()
        assert client.wait() == 0
    assert_stdout_is_only_json_rpc(client)
