"""A line-based JSON-RPC client for the real server over real stdio: no SDK on the client side, so it is
an independent implementation of the wire."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

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

    def next_message(self) -> dict[str, Any]:
        """The next line the server writes, whatever it is (an answer, or a request of the server's own)."""
        line = self._answers.get(timeout=ANSWER_SECONDS)
        assert line is not None, f"stdout closed: {self.stderr_text()}"
        return json.loads(line)

    def request(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        """Send one request and return the response carrying its id; any other line read meanwhile is skipped
        here (it stays in stdout_lines)."""
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
