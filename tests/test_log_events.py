"""SPEC §13's events, from the real server over real stdio: each one's level, its exact fields and their types,
the order §5.1 and §13 fix, and what each format and threshold shows. (test_log_audit.py checks that no secret
reaches a line; this file checks what a line is.)"""

from __future__ import annotations

import json
import logging
import os
import pty
import re
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
import structlog
from support import write_skill
from wire import LineClient, clean_environ, legacy_handshake, running, tool_payload

from skill_mcp.logs import configure_logging

MODULE = (sys.executable, "-m", "skill_mcp")
SYSTEM_PATH = "/usr/bin:/bin"  # no version manager's shims, whose own warning would depend on the machine
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
SHA256 = re.compile(r"[0-9a-f]{64}")
RUNNER = """\
name: runner
description: Runs things.
mcp-host:
  version: 1
  run:
    - script: run.py
      interpreter: python3
      env: [API_KEY]
      timeout: 30
    - script: slow.py
      interpreter: python3
    - script: stuck.py
      interpreter: python3
      timeout: 0.5
"""
RUN_PY = "import sys\nprint('out', len(sys.argv))\nprint('err', file=sys.stderr)\n"
SLOW_PY = "import time\nprint('started', flush=True)\ntime.sleep(60)\n"
ARGS = ["one", "tw\u00f6"]


def is_str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(item, str) for item in value)


def is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def is_optional(check: Any) -> Any:
    return lambda value: value is None or check(value)


def is_str(value: Any) -> bool:
    return isinstance(value, str)


def is_bool(value: Any) -> bool:
    return isinstance(value, bool)


def one_of(*values: str) -> Any:
    return lambda value: value in values


def is_truncated(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {"stdout", "stderr"} and all(map(is_bool, value.values()))


CONFIRM_PATH = one_of("elicitation", "input-required", "token", "refused")
# §13's table: the level, and each field with the check its value must pass. The fields are exact: a missing one,
# a misnamed one, or one §13 does not list fails (run.end's `cancelled`, an addition, is checked on its own below).
SPEC_EVENTS: dict[str, tuple[str, dict[str, Any]]] = {
    "boot": ("info", {
        "version": is_str, "roots": is_str_list, "rootsFrom": one_of("MCP_SKILLS_PATH", "SKILLS_DIR", "default"),
        "grantFrom": one_of("MCP_SKILL_RUN", "hosted-default", "declaration"), "hosted": is_bool, "skills": is_count,
        "problems": is_count,
        "interpreters": lambda value: isinstance(value, dict) and set(value) <= {"node", "python3"}
        and all(isinstance(path, str) and path.startswith("/") for path in value.values()),
        "environScrub": one_of("scrubbed", "failed", "unsupported"), "nonDumpable": is_bool, "maxSkills": is_count,
        "confirmMode": one_of("ask-user", "auto", "refuse"), "elicitation": one_of("on", "off"),
    }),
    "problem": ("warning", {"path": is_str, "reason": is_str, "detail": is_str}),
    "config.warning": ("warning", {"variable": is_str, "problem": is_str}),
    "run.preview": ("info", {
        "skill": is_str, "script": is_str, "interpreter": one_of("node", "python3"), "argc": is_count,
        "argBytes": is_count, "argvSha256": lambda value: bool(SHA256.fullmatch(value)), "envNames": is_str_list,
        "confirmPath": CONFIRM_PATH,
    }),
    "run.confirm": ("info", {
        "skill": is_str, "script": is_str, "confirmPath": CONFIRM_PATH,
        "decision": one_of("accepted", "declined", "cancelled", "failed", "asked", "ok", "TOKEN_INVALID",
                           "TOKEN_EXPIRED", "TOKEN_REUSED", "DRAFT_CHANGED", "confirmation-unsupported"),
    }),
    # `input-ended` and `spend-failed` are this server's additions (§0: reasons are additive).
    "run.refused": ("warning", {
        "skill": is_optional(is_str), "script": is_optional(is_str),
        "reason": one_of("unknown-skill", "run-blocked", "not-declared", "not-granted", "interpreter-unavailable",
                         "path-refused", "bad-arguments", "busy", "spawn-failed", "input-ended", "spend-failed"),
    }),
    "run.start": ("info", {
        "skill": is_str, "script": is_str, "interpreter": one_of("node", "python3"), "pid": is_count,
        "timeoutMs": is_count, "argc": is_count, "argvSha256": lambda value: bool(SHA256.fullmatch(value)),
        "envNames": is_str_list,
    }),
    "run.end": ("info", {
        "skill": is_str, "script": is_str, "exitCode": is_optional(lambda value: isinstance(value, int)),
        "signal": is_optional(lambda value: value.startswith("SIG")), "timedOut": is_bool, "durationMs": is_count,
        "truncated": is_optional(is_truncated), "stdoutBytes": is_optional(is_count),
        "stderrBytes": is_optional(is_count), "env": is_str_list,
    }),
    "tool.error": ("error", {"tool": is_str, "errorType": is_str}),
    "shutdown": ("info", {"reason": one_of("eof", "signal"), "killedRun": is_bool}),
}  # fmt: skip


def assert_conforms(event: dict[str, Any]) -> None:
    """One logged event against §13: `event`, `level`, `timestamp` always; a §13 event's level and typed fields."""
    assert isinstance(event.get("event"), str) and TIMESTAMP.fullmatch(event["timestamp"]), event
    assert event["level"] in {"debug", "info", "warning", "error"}, event
    if event["event"] not in SPEC_EVENTS:
        return
    level, fields = SPEC_EVENTS[event["event"]]
    own = {key: value for key, value in event.items() if key not in {"event", "level", "timestamp"}}
    if event["event"] == "run.end" and "cancelled" in own:  # a stopped run's end says so
        assert own.pop("cancelled") is True, event
    assert event["level"] == level and set(own) == set(fields), event
    for name, check in fields.items():
        assert check(own[name]), (name, event)


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path.resolve() / "root"
    files = {"run.py": RUN_PY, "slow.py": SLOW_PY, "stuck.py": SLOW_PY}
    write_skill(root, "runner", RUNNER, "Runs.\n", files)
    (root / "broken").mkdir()
    (root / "broken" / "SKILL.md").write_text("no frontmatter\n")  # one `problem`
    return root


def environ(tree: Path, **extra: str) -> dict[str, str]:
    return clean_environ(SKILLS_DIR=str(tree), PATH=SYSTEM_PATH, API_KEY="k", **extra)


def run(client: LineClient, script: str, **arguments: Any) -> dict[str, Any]:
    call = {"name": "runner", "script": script, **arguments}
    return client.request("tools/call", {"name": "skill_run", "arguments": call})


def confirmed(client: LineClient, script: str, args: list[str]) -> dict[str, Any]:
    token = tool_payload(run(client, script, args=args))["confirmToken"]
    return run(client, script, args=args, confirmToken=token)


def wait_for_event(client: LineClient, name: str) -> None:
    deadline = time.monotonic() + 15
    while not any(json.loads(line)["event"] == name for line in list(client.stderr_lines)):
        assert time.monotonic() < deadline, client.stderr_text()
        time.sleep(0.05)


def test_each_spec_event_has_its_level_fields_and_types_in_the_order_of_a_session(tree):
    with running(MODULE, environ(tree, MCP_MAX_SKILLS="many")) as client:
        legacy_handshake(client)
        assert tool_payload(confirmed(client, "run.py", ARGS))["exitCode"] == 0
        run(client, "run.py", args=ARGS, confirmToken="forged")
        run(client, "undeclared.py")
        client.request("tools/call", {"name": "skill_run", "arguments": {"name": 7, "script": "run.py"}})
        client.close_stdin()
        assert client.wait() == 0
    events = client.log_events()
    for event in events:
        assert_conforms(event)
    events = [event for event in events if event["event"] != "hardening.warning"]  # as root, a warning says so
    names = [event["event"] for event in events]
    # Boot: the configuration's warnings, then `boot`, then one `problem` each, then the line for people.
    assert names[:4] == ["config.warning", "boot", "problem", "ready"], names
    assert (events[0]["variable"], events[1]["problems"], events[2]["reason"]) == (
        "MCP_MAX_SKILLS", 1, "malformed-frontmatter",
    )  # fmt: skip
    assert events[1]["grantFrom"] == "declaration" and events[1]["maxSkills"] == 32
    runs = [(event["event"], event.get("decision") or event.get("reason")) for event in events[4:-1]]
    assert runs == [
        ("run.preview", None), ("run.confirm", "asked"),
        ("run.preview", None), ("run.confirm", "ok"), ("run.start", None), ("run.end", None),
        ("run.preview", None), ("run.confirm", "TOKEN_INVALID"),
        ("run.refused", "not-declared"),
        ("run.refused", "bad-arguments"),
    ]  # fmt: skip
    preview, start, end = events[6], events[8], events[9]
    assert (preview["argc"], preview["argBytes"], preview["confirmPath"]) == (2, 3 + 4, "token")  # "ö" is 2 bytes
    assert (start["argc"], start["argvSha256"], start["envNames"]) == (2, preview["argvSha256"], preview["envNames"])
    assert "API_KEY" in start["envNames"] and start["timeoutMs"] == 30000
    assert (end["exitCode"], end["signal"], end["timedOut"], end["truncated"]) == (
        0, None, False, {"stdout": False, "stderr": False},
    )  # fmt: skip
    assert (end["stdoutBytes"], end["stderrBytes"], end["env"]) == (len("out 3\n"), len("err\n"), start["envNames"])
    assert (events[-2]["skill"], events[-2]["script"]) == (None, "run.py")  # a non-string name is not shown
    assert (events[-1]["event"], events[-1]["reason"], events[-1]["killedRun"]) == ("shutdown", "eof", False)


def test_a_timed_out_run_logs_its_end_with_the_signal_and_what_it_captured(tree):
    with running(MODULE, environ(tree)) as client:
        legacy_handshake(client)
        assert tool_payload(confirmed(client, "stuck.py", []))["timedOut"] is True
        client.close_stdin()
        assert client.wait() == 0
    events = client.log_events()
    for event in events:
        assert_conforms(event)
    (start,) = [event for event in events if event["event"] == "run.start"]
    (end,) = [event for event in events if event["event"] == "run.end"]
    assert start["timeoutMs"] == 500
    assert (end["exitCode"], end["signal"], end["timedOut"]) == (None, "SIGTERM", True)
    assert is_truncated(end["truncated"]) and is_count(end["stdoutBytes"]) and is_count(end["stderrBytes"])  # captured
    assert "cancelled" not in end and end["durationMs"] >= 500


def test_a_run_stopped_by_a_signal_logs_a_typed_end_before_a_typed_shutdown(tree):
    with running(MODULE, environ(tree)) as client:
        legacy_handshake(client)
        token = tool_payload(run(client, "slow.py"))["confirmToken"]
        arguments = {"name": "runner", "script": "slow.py", "confirmToken": token}
        client.send_line(json.dumps({"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
                                     "params": {"name": "skill_run", "arguments": arguments}}).encode())  # fmt: skip
        wait_for_event(client, "run.start")
        client.process.send_signal(signal.SIGTERM)
        assert client.wait() == 0
    events = client.log_events()
    for event in events:
        assert_conforms(event)
    assert [event["event"] for event in events][-3:] == ["run.start", "run.end", "shutdown"]
    end, shutdown = events[-2:]
    assert (end["exitCode"], end["signal"], end["timedOut"], end["cancelled"]) == (None, "SIGKILL", False, True)
    assert (end["truncated"], end["stdoutBytes"], end["stderrBytes"]) == (None, None, None)  # nothing was captured
    assert (shutdown["reason"], shutdown["killedRun"]) == ("signal", True)


# The real server, with one tool made to fail as no input can make it: §5.3's unexpected exception.
FAILING_SKILL_FILE = """\
import sys
from skill_mcp import tools
def fails(deployment, arguments):
    raise LookupError("what the tool read")
tools.READ_TOOLS["skill_file"] = fails
from skill_mcp.cli import main
sys.exit(main([]))
"""


def skill_file(client: LineClient) -> dict[str, Any]:
    return client.request("tools/call", {"name": "skill_file", "arguments": {"name": "runner", "paths": ["run.py"]}})


def test_an_unexpected_tool_exception_logs_one_tool_error_with_its_type_only(tree):
    with running((sys.executable, "-c", FAILING_SKILL_FILE), environ(tree)) as client:
        legacy_handshake(client)
        failed = skill_file(client)["result"]
        client.close_stdin()
        assert client.wait() == 0
    assert failed["isError"] is True and "internal error occurred in skill_file" in failed["content"][0]["text"]
    events = client.log_events()
    for event in events:
        assert_conforms(event)
    errors = [event for event in events if event["level"] == "error"]
    assert [(event["event"], event["tool"], event["errorType"]) for event in errors] == [
        ("tool.error", "skill_file", "LookupError"),
    ]  # fmt: skip
    assert "what the tool read" not in client.stderr_text() and "Traceback" not in client.stderr_text()


def test_the_warning_threshold_keeps_warnings_and_errors_only(tree):
    with running((sys.executable, "-c", FAILING_SKILL_FILE), environ(tree, MCP_LOG_LEVEL="warning")) as client:
        legacy_handshake(client)
        client.send_line(b'{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"x": 1}}')  # the SDK's
        run(client, "undeclared.py")
        skill_file(client)
        client.close_stdin()
        assert client.wait() == 0
    events = client.log_events()
    for event in events:
        assert_conforms(event)
    shown = {event["event"] for event in events} - {"hardening.warning"}
    assert shown == {"problem", "run.refused", "dropped %r: malformed params", "tool.error"}, shown
    assert {event["level"] for event in events} == {"warning", "error"}


def test_the_error_threshold_shows_an_error_and_nothing_below_it_not_even_the_sdks_warnings(tree):
    with running((sys.executable, "-c", FAILING_SKILL_FILE), environ(tree, MCP_LOG_LEVEL="error")) as client:
        legacy_handshake(client)
        client.send_line(b'{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"x": 1}}')
        run(client, "undeclared.py")
        skill_file(client)
        client.close_stdin()
        assert client.wait() == 0
    assert [(event["event"], event["level"]) for event in client.log_events()] == [("tool.error", "error")]


CONSOLE_LINE = re.compile(r"(?P<timestamp>\S+) \[(?P<level>\w+) *\] (?P<event>\S+) +(?P<fields>.*)")


def test_the_console_format_shows_each_spec_events_level_and_every_field(tree):
    with running(MODULE, environ(tree, MCP_LOG_FORMAT="console", MCP_MAX_SKILLS="many")) as client:
        legacy_handshake(client)
        assert tool_payload(confirmed(client, "run.py", ARGS))["exitCode"] == 0
        run(client, "undeclared.py")
        client.close_stdin()
        assert client.wait() == 0
    seen = set()
    for line in client.stderr_text().splitlines():
        match = CONSOLE_LINE.fullmatch(line)
        assert match and TIMESTAMP.fullmatch(match["timestamp"]), line
        if match["event"] in SPEC_EVENTS:
            level, fields = SPEC_EVENTS[match["event"]]
            assert match["level"] == level, line
            assert all(re.search(rf"(^| ){name}=", match["fields"]) for name in fields), line
            seen.add(match["event"])
    assert seen == set(SPEC_EVENTS) - {"tool.error"}, seen


def stderr_on_a_terminal(tree: Path, fmt: str) -> bytes:
    """What the server writes to a stderr that is a terminal, from its start to its exit at the end of input."""
    controller, terminal = pty.openpty()
    environment = environ(tree, MCP_LOG_FORMAT=fmt)
    started = subprocess.Popen(MODULE, env=environment, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=terminal)
    with started as process:
        os.close(terminal)
        written = b""
        try:
            while chunk := os.read(controller, 65536):  # read as it comes: a full terminal would hold the server
                written += chunk
        except OSError:  # EIO: the server has exited and everything it wrote was read
            pass
        finally:
            os.close(controller)
        assert process.wait(timeout=30) == 0 and process.stdout.read() == b""  # no client: no protocol
    return written


@pytest.mark.parametrize("fmt", ["console", "json"])
def test_colour_only_for_the_console_format_on_a_terminal(tree, fmt):
    written = stderr_on_a_terminal(tree, fmt)
    lines = written.decode().splitlines()
    assert any("boot" in line for line in lines) and any("shutdown" in line for line in lines)
    if fmt == "console":
        assert b"\x1b[" in written
    else:  # machines read it even on a terminal (docker logs -t): plain JSON, one object per line
        assert b"\x1b" not in written
        assert all(isinstance(json.loads(line), dict) for line in lines)


class _Writes:
    """A stream that keeps each write apart, as BackgroundStderr hands each to fd 2."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_each_log_line_reaches_stderr_in_one_write_with_its_newline(fmt: str) -> None:
    # Written apart, another thread's line (the SDK's, the exit watchdog's) could land between a line and its
    # newline, and two lines would read as one.
    stream = _Writes()
    configure_logging(level="info", fmt=fmt, stream=stream)
    try:
        structlog.get_logger().info("ours", field=1)
        logging.getLogger("mcp.test").warning("the SDK's")
    finally:
        structlog.reset_defaults()
        logging.basicConfig(force=True)
    assert len(stream.writes) == 2
    assert all(write.endswith("\n") and write.count("\n") == 1 for write in stream.writes), stream.writes

