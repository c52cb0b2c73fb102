"""The real server over real pipes, sockets and ptys (SPEC §5.1): what a client does
with its ends of stdin and stdout, and how its lines end."""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import socket
import subprocess
import sys
import threading
import time
import tty
from typing import Any

from support import process_gone, write_skill
from test_shutdown import SLOW_SKILL
from wire import EXIT_SECONDS, clean_environ

MODULE = (sys.executable, "-m", "skill_mcp")
INITIALIZE = {
    "jsonrpc": "2.0", "id": 0, "method": "initialize",
    "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}  # fmt: skip
INITIALIZED = {"jsonrpc": "2.0", "method": "notifications/initialized"}


def wire(message: dict[str, Any], end: bytes = b"\n") -> bytes:
    return json.dumps(message).encode() + end


class RawClient:
    """A server whose stdout this client reads itself, one select() at a time, so that it may close its end of
    stdout (or of a socket) whenever it likes; stderr is drained by a thread."""

    def __init__(self, environ: dict[str, str], stdin: Any = subprocess.PIPE, stdout: Any = subprocess.PIPE) -> None:
        self.process = subprocess.Popen(MODULE, stdin=stdin, stdout=stdout, stderr=subprocess.PIPE, env=environ)
        self.stderr_lines: list[bytes] = []
        self._stderr = threading.Thread(target=lambda: self.stderr_lines.extend(self.process.stderr), daemon=True)
        self._stderr.start()
        self._buffer = b""

    def write(self, data: bytes, fd: int | None = None) -> None:
        os.write(self.process.stdin.fileno() if fd is None else fd, data)

    def read_message(self, fd: int | None = None, seconds: float = 15) -> dict[str, Any]:
        fd = self.process.stdout.fileno() if fd is None else fd
        deadline = time.monotonic() + seconds
        while b"\n" not in self._buffer:
            ready, _, _ = select.select([fd], [], [], max(0.0, deadline - time.monotonic()))
            assert ready, f"no answer within {seconds}s: {b''.join(self.stderr_lines).decode()}"
            chunk = os.read(fd, 65536)
            assert chunk, f"stdout closed: {b''.join(self.stderr_lines).decode()}"
            self._buffer += chunk
        line, _, self._buffer = self._buffer.partition(b"\n")
        return json.loads(line)

    def answer_to(self, request_id: Any, fd: int | None = None) -> dict[str, Any]:
        while (message := self.read_message(fd)).get("id") != request_id or "method" in message:
            pass
        return message

    def exits_in_time(self) -> int:
        started = time.monotonic()
        try:
            code = self.process.wait(timeout=EXIT_SECONDS + 5)
        finally:
            if self.process.poll() is None:
                self.process.kill()
                self.process.wait()
        assert time.monotonic() - started <= EXIT_SECONDS, f"exited {time.monotonic() - started:.1f}s after the close"
        self._stderr.join(5)
        return code

    def events(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.stderr_lines]

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()


def handshake(client: RawClient, answers: int | None = None, end: bytes = b"\n") -> None:
    client.write(wire(INITIALIZE, end))
    assert client.answer_to(0, answers)["result"]["serverInfo"]["name"] == "skill-mcp"
    client.write(wire(INITIALIZED, end))


def assert_clean_exit(client: RawClient) -> None:
    assert client.exits_in_time() == 0
    assert "Traceback" not in b"".join(client.stderr_lines).decode()
    assert client.events()[-1]["event"] == "shutdown"


# §5.1: the client closing its end of stdout is the client leaving, even while stdin stays open and nothing is
# left to answer: the server used to notice only at its next write, which an idle session never makes.
def test_a_client_that_closes_stdout_and_keeps_stdin_open_is_gone_within_5_s(root) -> None:
    write_skill(root, "alpha")
    client = RawClient(clean_environ(SKILLS_DIR=str(root)))
    try:
        handshake(client)
        client.process.stdout.close()
        assert_clean_exit(client)
    finally:
        client.kill()
        client.process.stdin.close()


def test_a_client_that_closes_its_stdout_socket_and_keeps_stdin_open_is_gone_within_5_s(root) -> None:
    write_skill(root, "alpha")
    ours, theirs = socket.socketpair()
    client = RawClient(clean_environ(SKILLS_DIR=str(root)), stdout=theirs)
    theirs.close()
    try:
        handshake(client, ours.fileno())
        client.write(wire({"jsonrpc": "2.0", "id": 1, "method": "ping"}))
        assert client.answer_to(1, ours.fileno())["result"] == {}
        ours.close()
        assert_clean_exit(client)
    finally:
        client.kill()
        client.process.stdin.close()


def test_a_client_that_closes_stdout_during_a_run_has_the_run_killed_and_the_server_gone(tmp_path) -> None:
    pid_file = tmp_path / "pid"
    script = f"import os, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\ntime.sleep(60)\n"
    write_skill(tmp_path / "skills", "slow", SLOW_SKILL, files={"slow.py": script})
    client = RawClient(clean_environ(SKILLS_DIR=str(tmp_path / "skills"), MCP_SKILL_PYTHON="/usr/bin/python3"))
    try:
        handshake(client)
        call = {"name": "slow", "script": "slow.py"}
        preview = {"name": "skill_run", "arguments": call}
        client.write(wire({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": preview}))
        token = json.loads(client.answer_to(1)["result"]["content"][0]["text"])["confirmToken"]
        confirmed = {"name": "skill_run", "arguments": {**call, "confirmToken": token}}
        client.write(wire({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": confirmed}))
        deadline = time.monotonic() + 10
        while not (pid_file.exists() and pid_file.read_text()):
            assert time.monotonic() < deadline, "the script never started"
            time.sleep(0.05)
        client.process.stdout.close()
        assert_clean_exit(client)
        assert [event["event"] for event in client.events() if event["event"] in ("run.start", "run.end")] == [
            "run.start", "run.end",
        ]  # fmt: skip
        assert process_gone(int(pid_file.read_text()))
    finally:
        client.kill()
        client.process.stdin.close()


# A lone "\r" ends a line, as the SDK's own reader has it; but that reader waits for the next byte before it takes
# "\r" for a line's end (it might be half of "\r\n"), so a client that ends its lines so and waits for each answer
# waited forever. A "\n" that comes later, after the "\r", still completes the same line ending: no empty line.
def test_a_line_ended_by_a_lone_cr_is_answered_before_the_next_byte_comes(root) -> None:
    write_skill(root, "alpha")
    client = RawClient(clean_environ(SKILLS_DIR=str(root)))
    try:
        handshake(client, end=b"\r")
        client.write(wire({"jsonrpc": "2.0", "id": 1, "method": "ping"}, b"\r"))
        assert client.answer_to(1)["result"] == {}
        client.write(b"\n" + wire({"jsonrpc": "2.0", "id": 2, "method": "ping"}, b"\r\n"))  # that "\r"'s "\n"
        assert client.answer_to(2)["result"] == {}
        client.write(wire({"jsonrpc": "2.0", "id": 3, "method": "ping"}, b"\r\r\n\n"))
        assert client.answer_to(3)["result"] == {}
        client.process.stdin.close()
        assert_clean_exit(client)
        unreadable = [event for event in client.events() if event["event"] == "message.unreadable"]
        assert unreadable == []  # "\r\r\n\n" is three line ends: two blank lines, skipped
    finally:
        client.kill()


# The pages of a widened pipe count against its creator's pipe quota (pipe-user-pages-soft, 64 MiB by default),
# past which each new pipe of that user gets 8 KiB: widened for good at boot, 64 idle servers spent it all.
def test_the_clients_stdout_pipe_is_as_wide_as_it_made_it_but_while_a_large_answer_crosses(root) -> None:
    write_skill(root, "alpha", files={"big.txt": "x" * 700_000})
    client = RawClient(clean_environ(SKILLS_DIR=str(root)))
    answers = client.process.stdout.fileno()
    made = fcntl.fcntl(answers, fcntl.F_GETPIPE_SZ)
    try:
        handshake(client)
        client.write(wire({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "skill_list"}}))
        client.answer_to(1)
        assert fcntl.fcntl(answers, fcntl.F_GETPIPE_SZ) == made
        read = {"name": "skill_file", "arguments": {"name": "alpha", "paths": ["big.txt"]}}
        client.write(wire({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": read}))
        assert len(client.answer_to(2)["result"]["content"][0]["text"]) > 700_000
        deadline = time.monotonic() + 3
        while fcntl.fcntl(answers, fcntl.F_GETPIPE_SZ) != made:
            assert time.monotonic() < deadline, "the pipe stayed widened after its answer was read"
            time.sleep(0.02)
        client.process.stdin.close()
        assert_clean_exit(client)
    finally:
        client.kill()


def test_a_terminal_stdout_whose_other_side_closes_is_the_client_gone_within_5_s(root) -> None:
    write_skill(root, "alpha")
    terminal, server_side = pty.openpty()
    tty.setraw(server_side)
    client = RawClient(clean_environ(SKILLS_DIR=str(root)), stdout=server_side)
    os.close(server_side)
    try:
        handshake(client, terminal)
        os.close(terminal)  # stdin, a pipe, stays open
        assert_clean_exit(client)
    finally:
        client.kill()
        client.process.stdin.close()
