"""The log audit (SPEC §13; §17 items 157-160): the real server over real stdio, at MCP_LOG_LEVEL=debug in both
formats, with a distinct sentinel planted everywhere a secret could come from. No sentinel may reach stderr, every
stderr line of the json format is one JSON object, stdout carries only JSON-RPC, and each event §13 lists carries
the fields §13 fixes."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import io
import json
import logging
import re
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path
from typing import Any

import pytest
import structlog
from support import write_skill
from wire import LineClient, clean_environ, legacy_handshake, running, tool_payload

from skill_mcp.logs import configure_logging

MODULE = (sys.executable, "-m", "skill_mcp")
MODERN = "2026-07-28"


def sentinel(source: str) -> str:
    return f"SNTL{source}X"


SENTINEL = re.compile(rb"SNTL[A-Za-z0-9]+X")
S = sentinel

RUNNER = f"""\
name: runner
description: Runs things {S("desc")}.
license: {S("license")}
compatibility: {S("compat")}
metadata:
  note: {S("meta")}
  nested: [{S("metalist")}]
mcp-host:
  version: 1
  run:
    - script: run.py
      interpreter: python3
      env: [API_KEY, DECLARED_UNGRANTED]
      timeout: 30
    - script: slow.py
      interpreter: python3
      env: [API_KEY]
  env:
    - name: API_KEY
      description: {S("envdesc")}
      secret: true
  egress: [api.example]
"""
RUN_PY = f"""\
import os, sys
print("{S("stdout")}", sys.argv[1:], os.environ.get("API_KEY"), os.environ.get("DECLARED_UNGRANTED"))
print("{S("stderr")}", file=sys.stderr)
"""
# A skill whose declaration is wrong in every way that reads a value: each finding is a logged `problem`.
DECLARATION = f"""\
name: decl
description: Declares badly.
mcp-host:
  version: 1
  run:
    - script: go.py
      interpreter: python3
      timeout: "{S("timeout")}"
      env: ["{S("envitem")}-x", 7]
    - script: "../escapes.py"
      interpreter: python3
  env:
    - description: {S("blockenv")}
  egress: ["{S("egress")}!"]
"""
BAD_VERSION = f'name: version\ndescription: V.\nmcp-host:\n  version: "{S("version")}"\n'
# Not YAML, in ways whose parser messages could quote what they read.
BROKEN_YAML = {
    "quote": f'name: quote\ndescription: "never closed {S("unclosed")}\n',
    "escape": f'name: escape\ndescription: "a \\q escape {S("escape")}"\n',
    "tab": f"name: tab\ndescription: x\n\t{S('tab')}: y\n",
    "colon": f"name: colon\ndescription: a: b: {S('colon')}\n",
    "date": f"name: date\ndescription: x\nwhen: 2024-02-30\nlicense: {S('datelicense')}\n",
    "anchor": f"name: anchor\ndescription: &a {S('anchor')}\n",
    "flow": f"name: flow\ndescription: [{S('flow')}\n",
    "control": f"name: control\ndescription: \x07{S('control')}\n",
}
GRANT = json.dumps([{"skill": "runner", "script": "run.py", "env": ["API_KEY"]},
                    {"skill": "runner", "script": "slow.py", "env": ["API_KEY"]}])  # fmt: skip
SLOW_PY = f"""\
import os, sys, time
print("{S("slowout")}", os.environ["API_KEY"], sys.argv[1:], flush=True)
print("{S("slowerr")}", file=sys.stderr, flush=True)
time.sleep(60)
"""
SECRET_ENVIRON = {
    "API_KEY": S("granted"),
    "DECLARED_UNGRANTED": S("declaredungranted"),
    "UNRELATED_TOKEN": S("ungranted"),
    "MCP_CONFIRM_SECRET": S("confirmsecret"),
    "MCP_HOST_CONFIRM_SECRET": S("hostsecret"),
    "HTTPS_PROXY": f"http://user:{S('proxy')}@proxy.example:3128",
    # malformed configuration values: each falls back with a `config.warning` that must not quote it
    "MCP_MAX_SKILLS": S("maxskills"),
    "MCP_SKILL_RLIMIT_NPROC": S("nproc"),
    "MCP_SKILL_RLIMIT_AS_MB": S("asmb"),
    "MCP_SKILL_ALLOW_UNSCRUBBED": S("allow"),
    "MCP_EGRESS_FENCED": S("fenced"),
    "MCP_CONFIRM_ELICITATION": S("elicitation"),
    "MCP_SKILL_NODE": S("node"),
}
# Malformed lines carrying sentinels: not JSON, not strict JSON, not JSON-RPC, a batch, an answer to nothing.
MALFORMED_LINES = [
    line % sentinel(source).encode()
    for line, source in [
        (b'{"jsonrpc": "2.0", "id": "m1", "method": "tools/call", "params": "%s"}', "paramsstring"),
        (b'{"jsonrpc": "2.0", "id": "m2", "method": "ping", "%s": "', "unclosed"),
        (b'{"jsonrpc": "2.0", "id": "m3", "method": "ping", "params": {"x": NaN, "y": "%s"}}', "nan"),
        (b'[{"jsonrpc": "2.0", "id": "m4", "method": "ping", "params": {"x": "%s"}}]', "batch"),
        (b'{"jsonrpc": "1.0", "id": "m5", "method": "ping", "params": {"x": "%s"}}', "version"),
        (b'{"jsonrpc": "2.0", "id": "m6", "result": {"x": "%s"}}', "answer"),
        (b'{"jsonrpc": "2.0", "id": "m7", "error": {"code": 1, "message": "%s"}}', "errorans"),
        (b'{"jsonrpc": "2.0", "id": 2.5, "method": "tools/call", "params": {"x": "%s"}}', "lostid"),
        (b'{"jsonrpc": "2.0", "id": "m8", "method": "ping", "params": ["%s"]}', "paramslist"),
        (b'{"jsonrpc": "2.0", "id": "m9", "method": "tools/call", "params": {"name": 5, "arguments": "%s"}}', "toolname"),
        (b'{"jsonrpc": "2.0", "id": "m10", "method": "ping", "params": {"x": "\xff%s"}}', "notutf8"),
        (b'{"jsonrpc": "2.0", "id": "m11", "method": "ping", "params": {"x": "\\ud800%s"}}', "surrogate"),
        (b'{"jsonrpc": "2.0", "id": "m12", "method": "ping", "params": {"x": "%s", "y": ' + b"[" * 5000
         + b"]" * 5000 + b"}}", "deep"),
        (b'{"jsonrpc": "2.0", "id": "m13", "method": "ping", "params": {"x": "%s", "y": "' + b"a" * 4194304 + b'"}}',
         "long"),
        (b'{"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": {"x": "%s"}}}', "cancelled"),
        (b'{"jsonrpc": "2.0", "method": "notifications/progress", "params": {"x": "%s"}}', "progress"),
        (b'{"jsonrpc": "2.0", "method": "notifications/initialized", "params": "%s"}', "initialized"),
        (b'{"jsonrpc": "2.0", "id": "m14", "method": "nope/nothing", "params": {"x": "%s"}}', "unknown"),
        (b"%s", "plaintext"),
    ]
]  # fmt: skip
RUN = {"name": "runner", "script": "run.py"}
ARGS = [S("arg1"), f"--key={S('arg2')}"]
ACCEPT = {"action": "accept", "content": {"confirmed": True, "note": S("elicitextra")}}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    root = tmp_path.resolve() / "root"
    files = {"run.py": RUN_PY, "slow.py": SLOW_PY, "data.txt": f"{S('file')}\n",
             "blob.bin": b"\x00\xff" + S("binary").encode(), "references/deep.md": f"# {S('reference')}\n"}  # fmt: skip
    write_skill(root, "runner", RUNNER, f"Body {S('body')}.\n", files)
    write_skill(root, "decl", DECLARATION, f"{S('declbody')}\n", {"go.py": "print(1)\n"})
    write_skill(root, "version", BAD_VERSION, "v\n")
    for name, frontmatter in BROKEN_YAML.items():
        write_skill(root, name, frontmatter, f"{S('brokenbody')}\n")
    (root / "not-utf8").mkdir()
    not_utf8 = b"---\nname: not-utf8\ndescription: \xff%s\n---\n" % S("utf8").encode()
    (root / "not-utf8" / "SKILL.md").write_bytes(not_utf8)
    return root


def environ(tree: Path, fmt: str, **extra: str) -> dict[str, str]:
    settings = {"SKILLS_DIR": str(tree), "MCP_LOG_LEVEL": "debug", "MCP_LOG_FORMAT": fmt, "MCP_SKILL_RUN": GRANT}
    return clean_environ(**{**settings, **SECRET_ENVIRON, **extra})


def call(client: LineClient, arguments: dict[str, Any], **params: Any) -> dict[str, Any]:
    return client.request("tools/call", {"name": "skill_run", "arguments": arguments, **params})


def token_session(client: LineClient) -> list[str]:
    """The handshake era without elicitation: the token path, every read surface, every malformed line."""
    legacy_handshake(client)
    offered = tool_payload(call(client, {**RUN, "args": ARGS}))
    token = offered["confirmToken"]
    ran = tool_payload(call(client, {**RUN, "args": ARGS, "confirmToken": token}))
    assert S("stdout") in ran["stdout"] and S("granted") in ran["stdout"] and S("stderr") in ran["stderr"]
    call(client, {**RUN, "args": ARGS, "confirmToken": token})  # reused
    call(client, {**RUN, "args": ARGS, "confirmToken": S("forgedtoken")})
    call(client, {**RUN, "args": [S("other")], "confirmToken": token})  # another draft
    call(client, {**RUN, "args": S("argsnotalist")})
    call(client, {**RUN, "args": [S("nul") + "\x00"]})
    call(client, {**RUN, "args": [S("toomany")] * 65})
    call(client, {**RUN, "args": ["x" * 9000 + S("toolong")]})
    call(client, {**RUN, "extra": S("extrakey")})
    call(client, {"name": "decl", "script": "go.py", "args": [S("notgranted")]})
    call(client, {"name": "runner", "script": "data.txt", "args": [S("notdeclared")]})
    call(client, {"name": "runner", "script": 7, "args": [S("scriptnotstring")]})
    client.request("tools/call", {"name": "skill_run", "arguments": [S("argumentsarray")]})
    client.request("tools/call", {"name": "skill_file", "arguments": {"name": "runner", "path": "data.txt"}})
    client.request("tools/call", {"name": "skill_file", "arguments": {"name": "runner", "path": "blob.bin"}})
    client.request("tools/call", {"name": "skill_file", "arguments": {"name": "runner", "path": S("nopath")}})
    client.request("tools/call", {"name": "skill_load", "arguments": {"name": "runner"}})
    client.request("tools/call", {"name": "skill_load", "arguments": {"name": "runner", "x": S("loadextra")}})
    client.request("tools/call", {"name": "skill_list", "arguments": {"cursor": S("listarg")}})
    client.request("tools/call", {"name": S("toolname2"), "arguments": {}})
    client.request("resources/read", {"uri": "skill://runner/data.txt"})
    client.request("resources/read", {"uri": f"skill://runner/{S('uri')}"})
    client.request("resources/list", {"cursor": S("cursor")})
    client.request("prompts/get", {"name": "runner", "arguments": {"x": S("promptarg")}})
    client.request("skills/list", {"cursor": S("skillscursor")})
    client.request("skills/get", {"uri": f"skill://{S('skilluri')}"})
    for line in MALFORMED_LINES:
        client.send_line(line)
    assert client.request("ping")["result"] == {}
    return [token]


def modern_session(client: LineClient) -> list[str]:
    """The 2026-07-28 era: the input-required path, with forged, foreign and real request states."""
    envelope = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientInfo": {"name": "audit", "version": S("clientversion")},
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}},
    }
    arguments = {**RUN, "args": ARGS}
    required = call(client, arguments, _meta=envelope)["result"]
    state = required["requestState"]
    call(client, arguments, _meta=envelope, inputResponses={"confirm": ACCEPT}, requestState=S("forgedstate"))
    call(client, arguments, _meta=envelope, inputResponses={"confirm": ACCEPT})
    declined = {"action": "decline", "content": {"note": S("declined")}}
    call(client, arguments, _meta=envelope, inputResponses={"confirm": declined}, requestState=state)
    weird = {"action": S("action"), "content": {"confirmed": S("confirmed")}}
    call(client, arguments, _meta=envelope, inputResponses={"confirm": weird}, requestState=state)
    ran = call(client, arguments, _meta=envelope, inputResponses={"confirm": ACCEPT}, requestState=state)
    assert S("stdout") in tool_payload(ran)["stdout"]
    call(client, arguments, _meta=envelope, inputResponses={"confirm": ACCEPT}, requestState=state)  # spent
    return [state]


def elicitation_session(client: LineClient) -> list[str]:
    """The handshake era with elicitation: the server's question, answered with sentinels in every member."""
    client.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
                                  "clientInfo": {"name": "audit", "version": "0"}})  # fmt: skip
    client.notify("notifications/initialized")
    answers = [
        {"result": ACCEPT},
        {"result": {"action": "decline", "content": {"note": S("eldeclined")}}},
        {"result": {"action": S("elaction")}},
        {"result": S("elresultstring")},
        {"error": {"code": -1, "message": S("elerror"), "data": S("elerrordata")}},
    ]
    for index, answer in enumerate(answers):
        client.send_line(json.dumps({"jsonrpc": "2.0", "id": f"run{index}", "method": "tools/call",
                                     "params": {"name": "skill_run", "arguments": {**RUN, "args": ARGS}}}).encode())  # fmt: skip
        question = client.next_message()
        assert question["method"] == "elicitation/create", question
        client.send_line(json.dumps({"jsonrpc": "2.0", "id": question["id"], **answer}).encode())
        while client.next_message().get("id") != f"run{index}":
            pass
    return []


SESSIONS = {"token": token_session, "modern": modern_session, "elicitation": elicitation_session}


def assert_clean(client: LineClient, fmt: str, issued: list[str]) -> None:
    stderr = b"".join(client.stderr_lines)
    assert stderr, "nothing logged"
    leaked = sorted({match.decode() for match in SENTINEL.findall(stderr)})
    assert leaked == [], f"sentinels in stderr: {leaked}"
    for secret in issued:
        assert secret.encode() not in stderr
    for line in client.stdout_lines:
        message = json.loads(line)
        assert isinstance(message, dict) and message.get("jsonrpc") == "2.0", line
    for line in client.stderr_lines:
        assert line.endswith(b"\n")
        if fmt == "json":
            assert isinstance(json.loads(line), dict), line


@pytest.mark.parametrize("fmt", ["json", "console"])
@pytest.mark.parametrize("session", sorted(SESSIONS))
def test_no_sentinel_reaches_stderr(tree, fmt, session):
    with running(MODULE, environ(tree, fmt)) as client:
        issued = SESSIONS[session](client)
        client.close_stdin()
        assert client.wait() == 0
    assert_clean(client, fmt, issued)


# §13's table: each event's level and the fields it fixes.
SPEC_EVENTS = {
    "boot": ("info", {"version", "roots", "rootsFrom", "grantFrom", "hosted", "skills", "problems", "interpreters",
                      "environScrub", "nonDumpable", "maxSkills", "confirmMode", "elicitation"}),
    "problem": ("warning", {"path", "reason", "detail"}),
    "config.warning": ("warning", {"variable", "problem"}),
    "run.preview": ("info", {"skill", "script", "interpreter", "argc", "argBytes", "argvSha256", "envNames",
                             "confirmPath"}),
    "run.confirm": ("info", {"skill", "script", "confirmPath", "decision"}),
    "run.refused": ("warning", {"skill", "script", "reason"}),
    "run.start": ("info", {"skill", "script", "interpreter", "pid", "timeoutMs", "argc", "argvSha256", "envNames"}),
    "run.end": ("info", {"skill", "script", "exitCode", "signal", "timedOut", "durationMs", "truncated",
                         "stdoutBytes", "stderrBytes", "env"}),
    "shutdown": ("info", {"reason", "killedRun"}),
}  # fmt: skip
CONFIRM_PATHS = {"elicitation", "input-required", "token", "refused"}
DECISIONS = {"accepted", "declined", "cancelled", "failed", "asked", "ok", "TOKEN_INVALID", "TOKEN_EXPIRED",
             "TOKEN_REUSED", "DRAFT_CHANGED", "confirmation-unsupported"}  # fmt: skip
REFUSALS = {"unknown-skill", "run-blocked", "not-declared", "not-granted", "interpreter-unavailable", "path-refused",
            "bad-arguments", "busy", "spawn-failed"}  # fmt: skip
TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")


def test_each_event_carries_the_fields_spec_fixes(tree):
    with running(MODULE, environ(tree, "json")) as client:
        token_session(client)
        client.close_stdin()
        assert client.wait() == 0
    events = client.log_events()
    for event in events:
        assert TIMESTAMP.fullmatch(event["timestamp"]) and event["level"] in {"debug", "info", "warning", "error"}
    seen = {event["event"] for event in events}
    assert seen >= set(SPEC_EVENTS), set(SPEC_EVENTS) - seen
    for event in events:
        if event["event"] in SPEC_EVENTS:
            level, fields = SPEC_EVENTS[event["event"]]
            assert event["level"] == level and set(event) - {"event", "level", "timestamp"} == fields, event
    by_name = {name: [event for event in events if event["event"] == name] for name in SPEC_EVENTS}
    assert {event["confirmPath"] for event in by_name["run.preview"] + by_name["run.confirm"]} <= CONFIRM_PATHS
    assert {event["decision"] for event in by_name["run.confirm"]} <= DECISIONS
    assert {event["reason"] for event in by_name["run.refused"]} <= REFUSALS
    assert {event["reason"] for event in by_name["shutdown"]} == {"eof"}
    (boot,) = by_name["boot"]
    assert (boot["skills"], boot["problems"]) == (4, len(by_name["problem"]))
    for preview in by_name["run.preview"]:
        if preview["argc"] == len(ARGS):
            assert preview["argBytes"] == sum(len(arg.encode()) for arg in ARGS)
            argv = json.dumps(["run.py", *ARGS], ensure_ascii=False, separators=(",", ":")).encode()  # willRun.argv
            assert preview["argvSha256"] == hashlib.sha256(argv).hexdigest()
    assert {tuple(event["envNames"]) for event in by_name["run.start"]} == {("API_KEY", "HOME", "LANG", "PATH")}


# Malformed configuration, one process each: the value never appears, only the variable's name.
MALFORMED_CONFIG = {
    "grant-not-json": {"MCP_SKILL_RUN": f'[{{"skill": "{S("grantjson")}'},
    "grant-not-array": {"MCP_SKILL_RUN": json.dumps({"skill": S("grantobject")})},
    "grant-bad-row": {"MCP_SKILL_RUN": json.dumps([S("grantrow"), {"skill": "a", "script": "b", S("grantkey"): 1}])},
    "grant-bad-env": {"MCP_SKILL_RUN": json.dumps([{"skill": "runner", "script": "run.py", "env": S("grantenv")}])},
    "grant-deep": {"MCP_SKILL_RUN": "[" * 30000 + json.dumps(S("grantdeep")) + "]" * 30000},
    "mode-and-ttl": {"MCP_CONFIRM_MODE": S("mode"), "MCP_CONFIRM_TTL_SECONDS": S("ttl")},
    "log-settings": {"MCP_LOG_LEVEL": S("loglevel"), "MCP_LOG_FORMAT": S("logformat")},
    "paths": {"MCP_SKILL_PYTHON": f"/nonexistent/{S('python')}", "MCP_DATA_DIR": f"/nonexistent/{S('datadir')}",
              "MCP_HOST_METER_FILE": S("meter"), "MCP_BLOB_SIGNING_KEY": S("blobkey")},
}  # fmt: skip


@pytest.mark.parametrize("fmt", ["json", "console"])
@pytest.mark.parametrize("case", sorted(MALFORMED_CONFIG))
def test_no_malformed_configuration_value_reaches_stderr(tree, fmt, case):
    with running(MODULE, environ(tree, fmt, **MALFORMED_CONFIG[case])) as client:
        legacy_handshake(client)
        call(client, {**RUN, "args": ARGS})
        client.close_stdin()
        assert client.wait() == 0
    assert_clean(client, "json" if case == "log-settings" else fmt, [])  # an unknown format falls back to json
    if fmt == "json":
        warned = {event["variable"] for event in client.log_events() if event["event"] == "config.warning"}
        assert warned >= set(MALFORMED_CONFIG[case]) - {"MCP_HOST_METER_FILE", "MCP_BLOB_SIGNING_KEY"}


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_a_run_killed_at_shutdown_logs_nothing_it_printed(tree, fmt):
    with running(MODULE, environ(tree, fmt)) as client:
        legacy_handshake(client)
        arguments = {"name": "runner", "script": "slow.py", "args": ARGS}
        token = tool_payload(call(client, arguments))["confirmToken"]
        client.send_line(json.dumps({"jsonrpc": "2.0", "id": "slow", "method": "tools/call",
                                     "params": {"name": "skill_run", "arguments": {**arguments, "confirmToken": token}}}).encode())  # fmt: skip
        deadline = time.monotonic() + 10
        while b"run.start" not in b"".join(client.stderr_lines):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        time.sleep(0.3)  # the script has printed its sentinels into the server's pipes
        client.process.send_signal(signal.SIGTERM)
        assert client.wait() == 0
    assert_clean(client, fmt, [token])
    if fmt == "json":
        (end,) = [event for event in client.log_events() if event["event"] == "run.end"]
        (shutdown,) = [event for event in client.log_events() if event["event"] == "shutdown"]
        assert (end["signal"], end["stdoutBytes"]) == ("SIGKILL", None)
        assert (shutdown["reason"], shutdown["killedRun"]) == ("signal", True)


@pytest.fixture
def logged_to():
    """configure_logging at debug into a string; Python's report hooks are put back afterwards."""
    saved = (warnings.showwarning, sys.unraisablehook, threading.excepthook)
    stream = io.StringIO()
    configure_logging(level="debug", stream=stream)
    try:
        yield stream
    finally:
        warnings.showwarning, sys.unraisablehook, threading.excepthook = saved
        structlog.reset_defaults()
        logging.basicConfig(force=True)


class _FailsWhenCollected:
    def __del__(self) -> None:
        raise ValueError(S("unraisable"))


def test_pythons_own_reports_are_json_lines_without_their_text(logged_to, capsys):
    # A warning's text, or an exception's, can quote a value (pydantic's serializer warning quotes what it could not
    # serialize); Python writes them to stderr as raw text, outside the log's one-object-per-line.
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        warnings.warn(f"could not serialize {S('warning')}", UserWarning, stacklevel=1)
    _FailsWhenCollected()
    thread = threading.Thread(target=lambda: int(S("thread")), name="worker")
    thread.start()
    thread.join()
    exiting = threading.Thread(target=sys.exit, name="exits")  # a thread's way to end, no error
    exiting.start()
    exiting.join()
    lines = logged_to.getvalue().splitlines()
    assert [json.loads(line)["event"] for line in lines] == ["python.warning", "python.unraisable", "thread.error"]
    warned, unraisable, crashed = map(json.loads, lines)
    assert warned["category"] == "UserWarning" and warned["where"].startswith("test_log_audit.py:")
    assert (unraisable["errorType"], crashed["errorType"], crashed["thread"]) == ("ValueError", "ValueError", "worker")
    assert "SNTL" not in logged_to.getvalue() and capsys.readouterr() == ("", "")


CRASHES = f"""
from skill_mcp.logs import configure_logging
configure_logging()
def handle(contents):
    raise ValueError("could not handle " + contents)
handle("{S("crash")}")
"""


def test_a_crash_of_the_main_thread_is_one_json_line_without_its_text():
    # Python's own report is a multi-line traceback quoting the exception's message and each frame's source line.
    crashed = subprocess.run([sys.executable, "-c", CRASHES], capture_output=True, text=True, timeout=60)
    assert crashed.returncode == 1 and crashed.stdout == ""
    (line,) = crashed.stderr.splitlines()
    logged = json.loads(line)
    assert (logged["event"], logged["level"], logged["errorType"]) == ("python.crash", "error", "ValueError")
    assert logged["where"] == ["<string>:6 <module>", "<string>:5 handle"]
    assert "SNTL" not in crashed.stderr


DEEP_CRASH = """
from skill_mcp.logs import configure_logging
configure_logging()
def dive(depth):
    if depth == 0:
        raise ValueError("bottom")
    dive(depth - 1)
dive(20)
"""


def test_a_deep_crash_names_the_innermost_frames_where_it_happened():
    crashed = subprocess.run([sys.executable, "-c", DEEP_CRASH], capture_output=True, text=True, timeout=60)
    (line,) = crashed.stderr.splitlines()
    assert json.loads(line)["where"] == ["<string>:7 dive"] * 11 + ["<string>:6 dive"]


def test_a_huge_request_id_is_logged_cut(tree):
    # A client's id is echoed whole in its answer, but each log line is queued for stderr (4096 lines, when the
    # client does not read it): a 4 MB id per line would queue gigabytes. The log shows its start.
    huge = "I" * 4_000_000
    batch = [{"jsonrpc": "2.0", "id": f"{index}{huge[:1_000_000]}", "method": "ping"} for index in range(3)]
    with running(MODULE, environ(tree, "json")) as client:
        legacy_handshake(client)
        client.send_line(json.dumps({"jsonrpc": "2.0", "id": huge, "method": "tools/call", "params": "x"}).encode())
        client.send_line(json.dumps(batch).encode())
        client.send_line(json.dumps({"jsonrpc": "2.0", "id": huge, "result": "x"}).encode())
        assert client.request("ping")["result"] == {}
        client.close_stdin()
        assert client.wait() == 0
    unreadable = [event for event in client.log_events() if event["event"] == "message.unreadable"]
    assert [len(event["requestIds"] + event["answersTo"]) for event in unreadable] == [1, 3, 1]
    for event in unreadable:
        assert all(isinstance(shown, str) and len(shown) <= 121 for shown in event["requestIds"] + event["answersTo"])
    assert unreadable[0]["requestIds"] == ["I" * 120 + "…"]
    assert max(map(len, client.stderr_lines)) < 4096


def test_a_library_message_that_formats_values_into_its_text_keeps_its_first_line_only(logged_to):
    # asyncio writes "Task exception was never retrieved" and then, on further lines, the task's repr, which
    # quotes the exception's message; no stdlib template is formatted with our arguments, but this one is prebuilt.
    async def fails() -> None:
        raise ValueError(S("asyncio"))

    async def main() -> None:
        asyncio.get_running_loop().create_task(fails())
        await asyncio.sleep(0.01)

    asyncio.run(main())
    gc.collect()
    (line,) = logged_to.getvalue().splitlines()
    logged = json.loads(line)
    assert (logged["logger"], logged["event"], logged["errorType"]) == (
        "asyncio", "Task exception was never retrieved", "ValueError"
    )
    assert "SNTL" not in line


def test_a_library_record_logged_with_its_stack_keeps_no_stack(logged_to):
    # logging's stack_info=True adds the call stack, which quotes each frame's source line.
    logging.getLogger("library").warning("checked %s", S("stack"), stack_info=True)
    (line,) = logged_to.getvalue().splitlines()
    assert sorted(json.loads(line)) == ["event", "level", "logger", "timestamp"]
    assert "SNTL" not in line


def test_a_library_exception_record_with_no_exception_logs_no_error_type(logged_to, capsys):
    # logger.exception outside an except block records exc_info (None, None, None): no type to name, and no
    # "--- Logging error ---" traceback on stderr either.
    logging.getLogger("library").exception("nothing raised")
    (line,) = logged_to.getvalue().splitlines()
    assert json.loads(line)["event"] == "nothing raised" and "errorType" not in json.loads(line)
    assert capsys.readouterr() == ("", "")


# A process of its own, logging to its real stderr as the server does, in each format.
UNRETRIEVED_TASK_EXCEPTION = f"""\
import asyncio, gc, sys
from skill_mcp.logs import configure_logging
configure_logging(level="debug", fmt=sys.argv[1])
async def fails():
    raise ValueError("{S("asyncio")}")
async def main():
    asyncio.get_running_loop().create_task(fails())
    await asyncio.sleep(0.01)
asyncio.run(main())
gc.collect()
"""


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_a_library_messages_further_lines_are_dropped_in_either_format(fmt):
    # The console format escapes a newline as text; were that done first, the line holding the exception's
    # message would no longer be a line of its own to drop.
    done = subprocess.run([sys.executable, "-c", UNRETRIEVED_TASK_EXCEPTION, fmt], capture_output=True, timeout=60)
    assert done.returncode == 0 and done.stdout == b"", done
    (line,) = done.stderr.decode().splitlines()
    assert "Task exception was never retrieved" in line and "ValueError" in line
    assert "SNTL" not in line and "future:" not in line
