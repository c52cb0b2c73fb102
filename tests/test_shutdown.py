"""Shutdown with a script running (SPEC §5.1): stdin EOF or SIGTERM kills its process group, logs
`shutdown` with `killedRun`, and the server exits 0 within 5 s."""

from __future__ import annotations

import json
import os
import pty
import signal
import subprocess
import sys
import threading
import time
import tty
from typing import Any

import anyio
import mcp_types as types
import pytest
from mcp.shared.message import SessionMessage
from support import fails_after, in_signal_mask, write_skill
from wire import EXIT_SECONDS, LineClient, clean_environ, legacy_handshake, tool_payload

from skill_mcp.lifecycle import (
    ANSWER_DRAIN_SECONDS,
    EXIT_DEADLINE_SECONDS,
    MAX_REQUESTS_IN_FLIGHT,
    SHUTDOWN_WAIT_SECONDS,
    STDERR_DRAIN_SECONDS,
    _Shutdown,
    _Unanswered,
    _WatchedOutput,
)
from skill_mcp.limits import MAX_MESSAGE_CHARS

SLOW_SKILL = """\
name: slow
description: Sleeps.
mcp-host:
  version: 1
  run:
    - script: slow.py
      interpreter: python3
"""


def start_slow_run(tmp_path, watched: str = "script") -> tuple[LineClient, int]:
    """A server in the middle of a confirmed run of a script that sleeps; returns the pid of the script or, when
    `watched` is "its child", of a child the script started."""
    pid_file = tmp_path / "pid"
    pid = "subprocess.Popen(['sleep', '60']).pid" if watched == "its child" else "os.getpid()"
    script = f"import os, subprocess, time\nopen({str(pid_file)!r}, 'w').write(str({pid}))\ntime.sleep(60)\n"
    write_skill(tmp_path / "skills", "slow", SLOW_SKILL, files={"slow.py": script})
    environ = clean_environ(SKILLS_DIR=str(tmp_path / "skills"), MCP_SKILL_PYTHON="/usr/bin/python3")
    server = LineClient([sys.executable, "-m", "skill_mcp"], environ)
    legacy_handshake(server)
    call = {"name": "slow", "script": "slow.py"}
    token = tool_payload(server.request("tools/call", {"name": "skill_run", "arguments": call}))["confirmToken"]
    confirmed = {"name": "skill_run", "arguments": {**call, "confirmToken": token}}
    server.send_line(json.dumps({"jsonrpc": "2.0", "id": 99, "method": "tools/call", "params": confirmed}).encode())
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


# The script dies with its server (parent-death signal), but its own children do not inherit that signal:
# shutdown kills the script's whole process group.
@pytest.mark.parametrize("watched", ["script", "its child"])
@pytest.mark.parametrize("how", ["eof", "signal", "hangup"])
def test_shutdown_kills_the_running_script_and_exits_zero(tmp_path, how: str, watched: str) -> None:
    server, script_pid = start_slow_run(tmp_path, watched)
    assert alive(script_pid)
    if how == "eof":
        server.close_stdin()
    else:  # SIGHUP: the terminal or SSH session that started the server went away
        server.process.send_signal(signal.SIGTERM if how == "signal" else signal.SIGHUP)
    assert server.wait() == 0  # within 5 s
    deadline = time.monotonic() + 2
    while alive(script_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(script_pid)
    events = server.log_events()
    shutdown = [event for event in events if event["event"] == "shutdown"]
    assert len(shutdown) == 1
    assert shutdown[0]["reason"] == ("eof" if how == "eof" else "signal")
    assert shutdown[0]["killedRun"] is True, events


def test_a_script_dies_when_its_server_is_killed(tmp_path) -> None:
    # §17 #118 with the real server: SIGKILL leaves it no time to kill anything; the parent-death signal does.
    server, script_pid = start_slow_run(tmp_path)
    assert alive(script_pid)
    server.kill()
    deadline = time.monotonic() + 5
    while alive(script_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        assert not alive(script_pid)
    finally:
        if alive(script_pid):
            os.kill(script_pid, signal.SIGKILL)


@pytest.mark.parametrize("how", ["eof", "SIGTERM", "SIGINT", "SIGHUP"])
def test_a_run_stopped_by_shutdown_logs_its_end_before_shutdown(tmp_path, how: str) -> None:
    # A signal exits before the run's call is cancelled: its run.start used to be left without a run.end.
    server, _ = start_slow_run(tmp_path)
    if how == "eof":
        server.close_stdin()
    else:
        server.process.send_signal(getattr(signal, how))
    assert server.wait() == 0
    events = [event for event in server.log_events() if event["event"] in ("run.start", "run.end", "shutdown")]
    assert [event["event"] for event in events] == ["run.start", "run.end", "shutdown"], events
    start, end, _ = events
    assert (end["skill"], end["script"], end["exitCode"], end["signal"], end["timedOut"], end["cancelled"]) == (
        "slow", "slow.py", None, "SIGKILL", False, True,
    )  # fmt: skip
    assert end["env"] == start["envNames"]
    assert isinstance(end["durationMs"], int) and end["durationMs"] >= 0
    assert {"truncated", "stdoutBytes", "stderrBytes"} <= end.keys()


def test_a_run_stopped_by_the_end_of_input_is_still_answered(tmp_path) -> None:
    # The client may still read stdout: the call is answered with what the killed script wrote, not dropped.
    server, _ = start_slow_run(tmp_path)
    server.close_stdin()
    assert server.wait() == 0
    (answer,) = [json.loads(line) for line in server.stdout_lines if json.loads(line).get("id") == 99]
    result = tool_payload(answer)
    assert (result["exitCode"], result["signal"], result["timedOut"]) == (None, "SIGKILL", False)


ASKING_SKILL = SLOW_SKILL.replace("name: slow", "name: asks").replace("slow.py", "run.py")


def test_a_question_the_user_was_still_deciding_at_the_end_of_input_is_withdrawn_at_once(tmp_path) -> None:
    # No answer can come once stdin is closed: the call is answered "not confirmed" now, not at the drain's bound.
    write_skill(tmp_path / "skills", "asks", ASKING_SKILL, files={"run.py": "print('ran')\n"})
    server = LineClient([sys.executable, "-m", "skill_mcp"], clean_environ(SKILLS_DIR=str(tmp_path / "skills")))
    asking = {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}}, "clientInfo": {"name": "c", "version": "0"}}
    server.request("initialize", asking)
    server.notify("notifications/initialized")
    run = {"name": "skill_run", "arguments": {"name": "asks", "script": "run.py"}}
    server.send_line(json.dumps({"jsonrpc": "2.0", "id": "run", "method": "tools/call", "params": run}).encode())
    assert server.next_message()["method"] == "elicitation/create"
    started = time.monotonic()
    server.close_stdin()
    assert server.wait() == 0
    assert time.monotonic() - started < ANSWER_DRAIN_SECONDS / 2
    (answer,) = [json.loads(line) for line in server.stdout_lines if json.loads(line).get("id") == "run"]
    assert tool_payload(answer)["confirmed"] is False
    decisions = [(event["event"], event.get("decision")) for event in server.log_events() if event["event"].startswith("run.")]
    assert decisions == [("run.preview", None), ("run.confirm", "cancelled")]


def test_a_cancelled_run_logs_its_end_and_is_not_killed_again_at_shutdown(tmp_path) -> None:
    server, script_pid = start_slow_run(tmp_path)
    server.notify("notifications/cancelled", {"requestId": 99, "reason": "user stopped it"})
    deadline = time.monotonic() + 5
    while alive(script_pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not alive(script_pid)
    assert server.request("ping")["result"] == {}  # the session goes on
    server.close_stdin()
    assert server.wait() == 0
    events = server.log_events()
    (end,) = [event for event in events if event["event"] == "run.end"]
    assert (end["cancelled"], end["exitCode"], end["signal"], end["skill"], end["script"]) == (
        True, None, "SIGKILL", "slow", "slow.py",
    )  # fmt: skip
    (shutdown,) = [event for event in events if event["event"] == "shutdown"]
    assert (shutdown["reason"], shutdown["killedRun"]) == ("eof", False)


def test_requests_piped_in_before_stdin_closes_are_all_answered(tmp_path) -> None:
    """The SDK cancels what is in flight when stdin ends; `printf … | skill-mcp` used to lose the last answers."""
    write_skill(tmp_path / "skills", "alpha", files={"notes.md": "# Notes\n"})
    handshake = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "pipe", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
    ]  # fmt: skip
    calls = [
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "skill_list"}},
        {"jsonrpc": "2.0", "id": 2, "method": "resources/list"},
        {"jsonrpc": "2.0", "id": 3, "method": "tools/call",
         "params": {"name": "skill_file", "arguments": {"name": "alpha", "paths": ["notes.md"]}}},
        {"jsonrpc": "2.0", "id": 4, "method": "ping"},
    ]  # fmt: skip
    loads = [{"jsonrpc": "2.0", "id": index, "method": "tools/call",
              "params": {"name": "skill_load", "arguments": {"name": "alpha"}}} for index in range(10, 50)]  # fmt: skip
    # skill_run calls last, a refusal and a preview whose hashing is still under way when stdin ends
    runs = [{"jsonrpc": "2.0", "id": 99, "method": "tools/call",
             "params": {"name": "skill_run", "arguments": {"name": "alpha", "script": "x.py"}}},
            {"jsonrpc": "2.0", "id": 100, "method": "tools/call",
             "params": {"name": "skill_run", "arguments": {"name": "slow", "script": "slow.py"}}}]  # fmt: skip
    write_skill(tmp_path / "skills", "slow", SLOW_SKILL, files={"slow.py": "#" * (16 << 20)})
    piped = "".join(json.dumps(message) + "\n" for message in [*handshake, *calls, *loads, *runs])
    for _ in range(3):  # the loss was a race: each run must answer everything
        finished = subprocess.run(
            [sys.executable, "-m", "skill_mcp"], input=piped, capture_output=True, text=True, timeout=30,
            env=clean_environ(SKILLS_DIR=str(tmp_path / "skills"), MCP_SKILL_PYTHON="/usr/bin/python3"),
        )  # fmt: skip
        assert finished.returncode == 0, finished.stderr
        answers = {answer["id"]: answer for answer in map(json.loads, finished.stdout.splitlines())}
        assert sorted(answers) == [0, 1, 2, 3, 4, *range(10, 50), 99, 100]
        assert all("result" in answer for answer in answers.values())
        assert tool_payload(answers[3])["files"][0]["content"] == "# Notes\n"
        assert answers[99]["result"]["isError"] is True
        assert "confirmToken" in tool_payload(answers[100])  # the user's preview, which the client came for


@pytest.mark.anyio
async def test_a_cancelled_request_is_not_waited_for_at_the_end_of_input() -> None:
    # The SDK writes nothing for a request the client cancelled: waiting for its answer would only delay the exit.
    unanswered = _Unanswered()
    request = types.JSONRPCRequest(jsonrpc="2.0", id=7, method="resources/list")
    cancel = types.JSONRPCNotification(jsonrpc="2.0", method="notifications/cancelled", params={"requestId": 7})
    unanswered.note_read(SessionMessage(request))
    unanswered.note_read(SessionMessage(cancel))
    with anyio.fail_after(ANSWER_DRAIN_SECONDS / 4):
        await unanswered.drain()
    # and an unanswered one is waited for, up to the bound
    unanswered.note_read(SessionMessage(types.JSONRPCRequest(jsonrpc="2.0", id=8, method="ping")))
    with anyio.move_on_after(ANSWER_DRAIN_SECONDS / 4) as waited:
        await unanswered.drain()
    assert waited.cancelled_caught


def handshake_lines(requests: int) -> bytes:
    lines = [
        {"jsonrpc": "2.0", "id": 0, "method": "initialize",
         "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "rude", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        *({"jsonrpc": "2.0", "id": index, "method": "tools/list"} for index in range(1, requests + 1)),
    ]  # fmt: skip
    return "".join(json.dumps(line) + "\n" for line in lines).encode()


def rude_client(tmp_path, requests: int, close_stdout: bool) -> tuple[int, float, list[dict]]:
    """A client that writes its requests and closes stdin, but never reads stdout (or closed it at once)."""
    stderr_path = tmp_path / "stderr"
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "skill_mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
            env=clean_environ(),
        )  # fmt: skip
        if close_stdout:
            process.stdout.close()
        process.stdin.write(handshake_lines(requests))
        # The clock starts when the server can see the end of input, once booted: a loaded machine's slow boot is
        # no part of §5.1's 5 s.
        deadline = time.monotonic() + 30
        while b'"event": "ready"' not in stderr_path.read_bytes():
            assert time.monotonic() < deadline and process.poll() is None, "the server never became ready"
            time.sleep(0.01)
        process.stdin.close()
        ended = time.monotonic()
        code = process.wait(timeout=EXIT_SECONDS + 5)
        waited = time.monotonic() - ended
        if not close_stdout:
            process.stdout.close()
    return code, waited, [json.loads(line) for line in stderr_path.read_text().splitlines()]  # only JSON lines


def test_a_client_that_stops_reading_stdout_does_not_hold_the_exit(tmp_path) -> None:
    # §5.1: exit 0 within 5 s of the end of input. The SDK writes stdout from a thread no cancellation reaches,
    # so with the pipe full (200 tools/list answers, ~600 KB) the exit used to wait forever.
    code, waited, events = rude_client(tmp_path, 200, close_stdout=False)
    assert code == 0 and waited < EXIT_SECONDS
    assert [event["reason"] for event in events if event["event"] == "shutdown"] == ["eof"]


def big_reads(tmp_path, reads: int) -> bytes:
    """The handshake and `reads` requests of 4.4 MB each, for a skill written under tmp_path/skills."""
    write_skill(tmp_path / "skills", "big", files={name: "x" * 1_100_000 for name in "abcd"})
    read = {"name": "skill_file", "arguments": {"name": "big", "paths": list("abcd")}}
    calls = [{"jsonrpc": "2.0", "id": index, "method": "tools/call", "params": read} for index in range(1, reads + 1)]
    return handshake_lines(0) + "".join(json.dumps(call) + "\n" for call in calls).encode()


def big_reads_server(tmp_path, reads: int, stdout: Any) -> subprocess.Popen:
    """A booted server whose stdin holds `reads` requests of 4.4 MB each (all fit in the pipe), still open."""
    lines = big_reads(tmp_path, reads)
    stderr_path = tmp_path / "stderr"
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen(
            [sys.executable, "-m", "skill_mcp"], stdin=subprocess.PIPE, stdout=stdout, stderr=stderr,
            env=clean_environ(SKILLS_DIR=str(tmp_path / "skills")),
        )  # fmt: skip
    deadline = time.monotonic() + 30
    while b'"event": "ready"' not in stderr_path.read_bytes():
        assert time.monotonic() < deadline and process.poll() is None, "the server never became ready"
        time.sleep(0.01)
    process.stdin.write(lines)
    process.stdin.flush()
    return process


def test_a_backlog_of_requests_left_in_stdin_does_not_hold_the_exit(tmp_path) -> None:
    # §5.1 counts 5 s from the client's close, not from the server's reading of its last line: 300 reads left in
    # the pipe took 8 s to reach the end of input, and the exit came 2 s after that.
    process = big_reads_server(tmp_path, 300, subprocess.DEVNULL)
    process.stdin.close()
    ended = time.monotonic()
    assert process.wait(timeout=EXIT_SECONDS + 10) == 0 and time.monotonic() - ended < EXIT_SECONDS


def test_a_client_that_does_not_read_its_answers_holds_at_most_a_few_in_the_servers_memory(tmp_path) -> None:
    # Each request read holds its answer until it is written: 100 unread reads of 4.4 MB took 475 MB, not read
    # past MAX_REQUESTS_IN_FLIGHT they take ~135 MB. Measured once the peak stops growing.
    process = big_reads_server(tmp_path, 100, subprocess.PIPE)
    peaks, deadline = [0], time.monotonic() + 30
    while time.monotonic() < deadline:
        time.sleep(1)
        with open(f"/proc/{process.pid}/status") as status:
            peaks.append(next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) * 1024)
        if peaks[-1] == peaks[-2]:
            break
    process.stdin.close()
    assert process.wait(timeout=EXIT_SECONDS + 5) == 0
    process.stdout.close()
    assert peaks[-1] < 250 * 1024 * 1024, peaks


def peak_memory(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM")) * 1024


@pytest.mark.parametrize("stdin", ["pipe", "pty"])
def test_a_flood_of_refusals_the_client_never_reads_holds_the_servers_memory(tmp_path, stdin: str) -> None:
    # Refusals (here of 50-request batches) escaped the count that pauses reading while the writer is behind:
    # 8 s of them, unread, took 543 MB and kept growing; counted, the server stays near its idle size. Reading on
    # a terminal (`docker run -it`) never paused: it grew by 12 MB a second, to 118 MB in 8 s.
    write_skill(tmp_path / "skills", "alpha")
    batch = json.dumps([{"jsonrpc": "2.0", "id": index, "method": "ping"} for index in range(50)])
    if stdin == "pipe":
        wire_in, client_end = os.pipe()
    else:
        client_end, wire_in = pty.openpty()
        tty.setraw(wire_in)  # no echo, no line editing: the bytes pass as they are
    flood = subprocess.Popen(["yes", batch], stdout=client_end)
    process = subprocess.Popen(
        [sys.executable, "-m", "skill_mcp"], stdin=wire_in, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=clean_environ(SKILLS_DIR=str(tmp_path / "skills")),
    )  # fmt: skip
    os.close(wire_in)
    try:
        time.sleep(3)
        early = peak_memory(process.pid)
        time.sleep(5)
        peak = peak_memory(process.pid)
    finally:
        flood.kill()
        flood.wait()
        os.close(client_end)  # the client has left: on a terminal, only its hangup says so while reading pauses
    assert process.wait(timeout=EXIT_SECONDS + 5) == 0
    process.stdout.close()
    assert peak < 150 * 1024 * 1024 and peak - early < 10 * 1024 * 1024, (early, peak)


def answers_and_peak(skills: Any, lines: bytes, answers: int, **environ: str) -> tuple[list[dict], int]:
    """A server on `skills` given `lines`: the `answers` that follow initialize's, read while stdin is still open,
    and its peak memory then; it must then exit 0 at the end of input."""
    process = subprocess.Popen(
        [sys.executable, "-m", "skill_mcp"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        env=clean_environ(SKILLS_DIR=str(skills), **environ),
    )  # fmt: skip
    try:
        process.stdin.write(lines)
        process.stdin.flush()
        process.stdout.readline()  # initialize's answer
        read = [json.loads(process.stdout.readline()) for _ in range(answers)]
        peak = peak_memory(process.pid)
        process.stdin.close()
        assert process.wait(timeout=EXIT_SECONDS + 5) == 0
    finally:
        process.kill()
        process.stdout.close()
    return read, peak


def test_a_batch_of_50000_requests_is_refused_one_by_one_in_bounded_memory(tmp_path) -> None:
    # Each request of a batch is refused by its own id, one after another: one task per id took 1 GB for 100,000.
    # Much of what is left is the SDK's own validation of the 2.5 MB line, before any of it reaches skill-mcp.
    write_skill(tmp_path / "skills", "alpha")
    batch = json.dumps([{"jsonrpc": "2.0", "id": index, "method": "ping"} for index in range(50_000)]).encode()
    assert len(batch) < MAX_MESSAGE_CHARS
    with fails_after(60):
        refused, peak = answers_and_peak(tmp_path / "skills", handshake_lines(0) + batch + b"\n", 50_000)
    assert [answer["id"] for answer in refused] == list(range(50_000))
    assert {answer["error"]["code"] for answer in refused} == {-32600}
    assert peak < 400 * 1024 * 1024, peak


def test_with_stdin_a_file_and_stdout_unread_reading_never_pauses_and_the_exit_still_comes(tmp_path) -> None:
    # A file tells nothing of its end until it is read: pausing there would leave the end of input, and the
    # exit deadline armed by it, never reached.
    (tmp_path / "requests").write_bytes(big_reads(tmp_path, 40))
    with open(tmp_path / "requests", "rb") as requests:
        process = subprocess.Popen(
            [sys.executable, "-m", "skill_mcp"], stdin=requests, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
            env=clean_environ(SKILLS_DIR=str(tmp_path / "skills")),
        )  # fmt: skip
        try:
            assert process.wait(timeout=EXIT_SECONDS + 20) == 0
        finally:
            process.kill()
            process.stdout.close()


def test_a_client_that_closed_stdout_is_no_crash(tmp_path) -> None:
    # A crashed client: writing an answer raises BrokenPipeError, which used to end the server with a traceback
    # on stderr and exit status 1.
    code, _, events = rude_client(tmp_path, 5, close_stdout=True)
    assert code == 0
    assert [event["reason"] for event in events if event["event"] == "shutdown"] == ["eof"]


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP], ids=lambda each: each.name)
def test_a_signal_during_boot_exits_zero_without_a_traceback(tmp_path, signum) -> None:
    # Boot takes ~0.2 s before the stdio loop listens for signals; a SIGTERM then used to end the process with
    # a signal status (and SIGINT with a KeyboardInterrupt traceback; SIGHUP, a closed terminal, likewise).
    stderr_path = tmp_path / "stderr"
    with open(stderr_path, "wb") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "skill_mcp"], stdin=subprocess.PIPE,
                                   stdout=subprocess.DEVNULL, stderr=stderr, env=clean_environ())
        deadline = time.monotonic() + 10
        # SIGHUP's handler is the last `serve` installs (Python's own SIGINT handler is there from the start)
        while not in_signal_mask(process.pid, "SigCgt", signal.SIGHUP):
            assert time.monotonic() < deadline and process.poll() is None, "no SIGHUP handler was installed"
            time.sleep(0.001)
        process.send_signal(signum)
        assert process.wait(timeout=EXIT_SECONDS) == 0
        process.stdin.close()
    events = [json.loads(line)["event"] for line in stderr_path.read_text().splitlines()]
    assert "boot" not in events  # it came during boot, and ended it


# serve_stdio with stdin at its end, then a SIGTERM from within the event loop, once its watch on signals is over:
# the moment a client's close-then-SIGTERM lands while the server winds down.
SIGNAL_AS_THE_LOOP_WINDS_DOWN = """\
import os, signal, sys, time
import anyio
from mcp.server.lowlevel import Server
from skill_mcp.lifecycle import serve_stdio

async def main():
    shutdown = lambda reason: print("shutdown", reason, file=sys.stderr, flush=True)
    await serve_stdio(Server("t"), (signal.SIGTERM,), shutdown, lambda: None, lambda: None)
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(5)  # the handler ends the process within this
    sys.exit(3)

anyio.run(main)
"""


def test_a_signal_while_the_loop_winds_down_after_the_end_of_input_exits_zero() -> None:
    # Closing the signal receiver restored each signal's default action: a SIGTERM in the few milliseconds after
    # the end of input, before `serve` set its own handlers again, ended the server with status -15 (SIGINT, -2).
    finished = subprocess.run([sys.executable, "-c", SIGNAL_AS_THE_LOOP_WINDS_DOWN], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, timeout=30)
    assert finished.returncode == 0, finished.stderr
    assert finished.stderr.decode().splitlines() == ["shutdown eof"]


# `serve` with stdin at its end, then a SIGTERM from a finalizer Python runs as it tears down.
SIGNAL_AS_PYTHON_TEARS_DOWN = """\
import gc, os, signal, sys
from skill_mcp.cli import main

code = main([])
gc.disable()

class SignalAtTeardown:
    def __del__(self):  # collected in Python's teardown, after it has put back each signal's default action
        os.kill(os.getpid(), signal.SIGTERM)

garbage = SignalAtTeardown()
garbage.cycle = garbage
del garbage
sys.exit(code)
"""


def test_a_signal_as_the_served_process_exits_still_exits_zero() -> None:
    finished = subprocess.run([sys.executable, "-c", SIGNAL_AS_PYTHON_TEARS_DOWN], stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=clean_environ(), timeout=30)
    assert finished.returncode == 0, finished.stderr
    assert [json.loads(line)["event"] for line in finished.stderr.splitlines()][-1] == "shutdown"


def test_serve_ends_through_pythons_own_exit_so_exit_hooks_run() -> None:
    # bench/phases.py reports from an atexit hook; an os._exit at the end of serve skipped it.
    hooked = "import atexit, sys\nfrom skill_mcp.cli import main\natexit.register(print, 'hook ran')\nsys.exit(main([]))\n"
    finished = subprocess.run([sys.executable, "-c", hooked], stdin=subprocess.DEVNULL, capture_output=True,
                              env=clean_environ(), timeout=30)  # fmt: skip
    assert (finished.returncode, finished.stdout) == (0, b"hook ran\n"), finished.stderr


IGNORING_LAUNCHERS = {
    signal.SIGHUP: ["nohup"],
    # a non-interactive shell's background job: `skill-mcp &`
    signal.SIGINT: [sys.executable, "-c", "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                    "os.execv(sys.argv[1], sys.argv[1:])"],
}


@pytest.mark.parametrize("signum", list(IGNORING_LAUNCHERS), ids=lambda each: each.name)
def test_a_signal_the_parent_ignored_stays_ignored_during_boot_and_serving(signum) -> None:
    server = LineClient([*IGNORING_LAUNCHERS[signum], sys.executable, "-m", "skill_mcp"], clean_environ())
    deadline = time.monotonic() + 10
    while not in_signal_mask(server.process.pid, "SigCgt", signal.SIGTERM):  # in `serve`, booting
        assert time.monotonic() < deadline and server.process.poll() is None, "the server never started"
        time.sleep(0.001)
    server.process.send_signal(signum)
    legacy_handshake(server)
    server.process.send_signal(signum)
    assert "result" in server.request("tools/list", {})
    assert in_signal_mask(server.process.pid, "SigIgn", signum)
    server.process.send_signal(signal.SIGTERM)  # what still ends it
    assert server.wait() == 0
    assert [event["reason"] for event in server.log_events() if event["event"] == "shutdown"] == ["signal"]


def test_request_ids_follow_the_sdks_rules() -> None:
    # "7" and 7 are one id to the SDK, true is none, and two requests may share an id: each needs its answer.
    unanswered = _Unanswered()
    for request_id in (1, 1, 7):
        unanswered.note_read(SessionMessage(types.JSONRPCRequest(jsonrpc="2.0", id=request_id, method="ping")))
    for cancelled in (True, "7"):
        params = {"requestId": cancelled}
        unanswered.note_read(SessionMessage(types.JSONRPCNotification(jsonrpc="2.0", method="notifications/cancelled", params=params)))
    unanswered.note_written(1)
    assert dict(unanswered._waiting) == {1: 1}  # the second request 1 still waits; 7 was cancelled
    unanswered.note_written(7)  # a late answer
    assert unanswered._waiting.total() == 1


@pytest.mark.anyio
async def test_reading_waits_while_max_requests_wait_for_their_answer_and_answers_wait_to_be_written() -> None:
    # Every answer owed counts: requests, skill_run calls (a flood of them is as many answers), and the refusals
    # of lines the SDK could not read, which the server writes of its own accord.
    unanswered = _Unanswered()
    for request_id in range(MAX_REQUESTS_IN_FLIGHT - 2):
        unanswered.note_read(SessionMessage(types.JSONRPCRequest(jsonrpc="2.0", id=request_id, method="ping")))
    run = {"name": "skill_run", "arguments": {}}
    unanswered.note_read(SessionMessage(types.JSONRPCRequest(jsonrpc="2.0", id="run", method="tools/call", params=run)))
    unanswered.note_owed(["refused"])
    with anyio.fail_after(1):  # slow requests while answers flow: a ping or a cancellation is still read
        await unanswered.wait_for_room()
    unanswered.send_started(0)  # an answer the writer has not taken: the client is not reading
    with anyio.move_on_after(0.2) as waited:
        await unanswered.wait_for_room()
    assert waited.cancelled_caught
    # An answer already with the writer still goes out when its request is cancelled: no room is made for it.
    cancel = {"requestId": 0}
    unanswered.note_read(SessionMessage(types.JSONRPCNotification(jsonrpc="2.0", method="notifications/cancelled", params=cancel)))
    with anyio.move_on_after(0.2) as waited:
        await unanswered.wait_for_room()
    assert waited.cancelled_caught
    cancel = {"requestId": 3}
    unanswered.note_read(SessionMessage(types.JSONRPCNotification(jsonrpc="2.0", method="notifications/cancelled", params=cancel)))
    with anyio.fail_after(1):
        await unanswered.wait_for_room()


@pytest.mark.anyio
async def test_the_end_of_input_waits_for_skill_run_calls_and_for_every_refusal() -> None:
    # A run's call ends soon after the input does (its script killed, its question withdrawn): its answer goes out.
    unanswered = _Unanswered()
    run = {"name": "skill_run", "arguments": {}}
    unanswered.note_read(SessionMessage(types.JSONRPCRequest(jsonrpc="2.0", id="run", method="tools/call", params=run)))
    unanswered.note_owed([7])
    drained = anyio.Event()

    async def drain() -> None:
        await unanswered.drain()
        drained.set()

    async with anyio.create_task_group() as group:
        group.start_soon(drain)
        for answered in ("run", 7):
            await anyio.sleep(0.1)
            assert not drained.is_set()
            unanswered.note_written(answered)
        with anyio.fail_after(1):
            await drained.wait()


@pytest.mark.anyio
async def test_the_end_of_input_stops_waiting_as_soon_as_the_last_answer_is_written() -> None:
    unanswered = _Unanswered()
    for request_id in (1, 2):
        unanswered.note_read(SessionMessage(types.JSONRPCRequest(jsonrpc="2.0", id=request_id, method="ping")))
    drained = anyio.Event()

    async def drain() -> None:
        await unanswered.drain()
        drained.set()

    sent, received = anyio.create_memory_object_stream(2)
    answers = _WatchedOutput(sent, unanswered)  # what the SDK writes its answers through
    async with anyio.create_task_group() as group, sent, received:
        group.start_soon(drain)
        await anyio.sleep(0)
        await answers.send(SessionMessage(types.JSONRPCResponse(jsonrpc="2.0", id=1, result={})))
        error = types.JSONRPCError(jsonrpc="2.0", id=2, error=types.ErrorData(code=-32601, message="no such method"))
        await answers.send(SessionMessage(error))
        with anyio.fail_after(ANSWER_DRAIN_SECONDS / 2):  # not the whole bound
            await drained.wait()
        assert [item.message.id for item in (received.receive_nowait(), received.receive_nowait())] == [1, 2]


@pytest.mark.anyio
async def test_the_wait_for_unanswered_requests_ends_at_its_bound_by_itself() -> None:
    # §5.1: the exit comes within 5 s of the end of input; a request the SDK never answers is waited for
    # ANSWER_DRAIN_SECONDS, not until the exit watchdog.
    unanswered = _Unanswered()
    unanswered.note_read(SessionMessage(types.JSONRPCRequest(jsonrpc="2.0", id=1, method="ping")))
    started = time.monotonic()
    with anyio.fail_after(ANSWER_DRAIN_SECONDS + 2):
        await unanswered.drain()
    assert time.monotonic() - started >= ANSWER_DRAIN_SECONDS - 0.1


def test_a_clean_end_of_input_exits_at_once_not_at_the_watchdog(tmp_path) -> None:
    # The exit watchdog only forces an exit that hangs: a client that reads its answers and closes stdin sees the
    # server exit at once, not EXIT_DEADLINE_SECONDS later (a watchdog thread that held the interpreter's exit did).
    write_skill(tmp_path / "skills", "alpha")
    server = LineClient([sys.executable, "-m", "skill_mcp"], clean_environ(SKILLS_DIR=str(tmp_path / "skills")))
    try:
        legacy_handshake(server)
        assert server.request("ping")["result"] == {}
        server.close_stdin()
        ended = time.monotonic()
        assert server.wait() == 0
        assert time.monotonic() - ended < EXIT_DEADLINE_SECONDS - 1.5
    finally:
        server.kill()
    assert [event["reason"] for event in server.log_events() if event["event"] == "shutdown"] == ["eof"]


def start_shutdown_elsewhere(on_shutdown) -> tuple[_Shutdown, threading.Thread]:
    """A shutdown under way on another thread, as the main thread's is when the exit watchdog fires."""
    started = threading.Event()

    def marked(reason: str) -> None:
        started.set()
        on_shutdown(reason)

    shutdown = _Shutdown(marked)
    thread = threading.Thread(target=shutdown, args=("eof",))
    thread.start()
    assert started.wait(5)
    return shutdown, thread


def test_the_watchdogs_shutdown_waits_for_the_one_under_way() -> None:
    # The watchdog exits right after asking for the shutdown: the main thread's kill and log line finish first.
    steps: list[str] = []
    shutdown, thread = start_shutdown_elsewhere(lambda reason: (time.sleep(0.1), steps.append(reason)))
    shutdown("eof")
    assert steps == ["eof"]
    thread.join()
    shutdown("signal")  # once done, a later call neither runs it again nor waits
    assert steps == ["eof"]


def test_a_stuck_shutdown_holds_the_forced_exit_only_briefly() -> None:
    # A shutdown stuck writing its log line (a client that stopped reading stderr) delays the exit by at most
    # SHUTDOWN_WAIT_SECONDS, so it still comes within 5 s of the end of input.
    release = threading.Event()
    shutdown, thread = start_shutdown_elsewhere(lambda reason: release.wait(30))
    started = time.monotonic()
    shutdown("eof")
    waited = time.monotonic() - started
    release.set()
    thread.join()
    assert SHUTDOWN_WAIT_SECONDS - 0.05 <= waited < SHUTDOWN_WAIT_SECONDS + 1
    assert EXIT_DEADLINE_SECONDS + SHUTDOWN_WAIT_SECONDS + STDERR_DRAIN_SECONDS < 5


def test_the_skill_load_answers_kept_rendered_are_bounded_in_memory(tmp_path) -> None:
    # Every skill_load answer stayed rendered for the server's life: a 250 KB body of control characters is
    # 1.5 MB escaped, so 100 such skills took 150 MB more than their bodies; now only the last few are kept.
    for index in range(100):
        write_skill(tmp_path / "skills", f"s{index:03d}", body="\x01" * 250_000)
    loads = [
        {"jsonrpc": "2.0", "id": index + 1, "method": "tools/call",
         "params": {"name": "skill_load", "arguments": {"name": f"s{index:03d}"}}}
        for index in range(100)
    ]  # fmt: skip
    lines = handshake_lines(0) + "".join(json.dumps(load) + "\n" for load in loads).encode()
    answers, peak = answers_and_peak(tmp_path / "skills", lines, 100, MCP_MAX_SKILLS="100")
    assert [json.loads(answer["result"]["content"][0]["text"])["name"] for answer in answers] == [
        f"s{index:03d}" for index in range(100)
    ]
    assert peak < 190 * 1024 * 1024, peak  # 245 MB before, 137 MB now
