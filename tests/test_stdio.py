"""The real server over real stdio, spoken to with raw JSON-RPC lines (SPEC §5.1, §13, §14.1;
§17 items 4, 72–73, 156–157, 160).

No SDK on the client side: a line-based client written here is the independent implementation.
"""

from __future__ import annotations

import importlib.metadata
import io
import json
import logging
import os
import pty
import shutil
import signal
import subprocess
import sys
import threading
import time
import tty
from pathlib import Path

import pytest
import structlog
from support import write_skill
from wire import LineClient, clean_environ, legacy_handshake, running, tool_payload

from skill_mcp.limits import MAX_MESSAGE_CHARS
from skill_mcp.logs import configure_logging
from skill_mcp.server import BEFORE_THE_SESSION

VENV_BIN = os.path.dirname(sys.executable)
MODULE = (sys.executable, "-m", "skill_mcp")
SYSTEM_PATH = "/usr/bin:/bin"
BATCH_REFUSAL = (
    "the line is a JSON array (a batch), which this server does not read: MCP carries one message per line "
    "(batches were removed in protocol 2025-06-18); send each message on its own line"
)
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
        for garbage in [b"garbage", b"{not json", b"[]", b'{"jsonrpc":"2.0"}', b"\xff\xfe\x00"]:
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


def test_garbage_lines_do_not_stop_a_2026_07_28_session(tree):
    # §17 #72 on the other era: the first request chose 2026-07-28; garbage after it is dropped the same way.
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        assert MODERN in client.request("server/discover", {"_meta": ENVELOPE})["result"]["supportedVersions"]
        for garbage in [b"garbage", b"{not json", b'{"jsonrpc":"2.0"}', b"\xff\xfe\x00"]:
            client.send_line(garbage)
        answer = client.request("tools/call", {"_meta": ENVELOPE, "name": "skill_load", "arguments": {"name": "alpha"}})
        assert tool_payload(answer)["body"] == "Alpha body.\n"
        client.close_stdin()
        assert client.wait() == 0
    assert_stdout_is_only_json_rpc(client)


def test_blank_lines_are_no_messages_and_log_nothing(tree):
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        legacy_handshake(client)
        for blank in [b"", b"   ", b"\t \r"]:
            client.send_line(blank)
        client.send_line(b"\xc2\xa0")  # a no-break space is not JSON's whitespace: unreadable, as before
        assert client.request("ping") == {"jsonrpc": "2.0", "id": 2, "result": {}}
        client.close_stdin()
        assert client.wait() == 0
    unreadable = [event for event in client.log_events() if event["event"] == "message.unreadable"]
    assert len(unreadable) == 1 and "not JSON" in unreadable[0]["problem"]
    assert_stdout_is_only_json_rpc(client)


HANDSHAKE_LINES = b"".join(
    json.dumps(message).encode() + b"\n"
    for message in (
        {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
            "protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "c", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "skill_list", "arguments": {}}},
    )
)  # fmt: skip


ASKING_SKILL = "name: asks\ndescription: Runs.\nmcp-host:\n  version: 1\n  run:\n    - script: run.py\n      interpreter: python3\n"


def assert_exits_zero_within_5_seconds(server: subprocess.Popen) -> None:
    started = time.monotonic()
    assert server.wait(timeout=15) == 0
    assert time.monotonic() - started <= 5


def answers_of(stdout: bytes) -> dict[int, dict]:
    messages = [json.loads(line) for line in stdout.splitlines()]
    assert all(message["jsonrpc"] == "2.0" and "id" in message for message in messages), messages
    return {message["id"]: message for message in messages}


@pytest.mark.parametrize("fmt", ["json", "console"])
def test_with_stderr_closed_logs_go_nowhere_and_stdout_stays_protocol(tree, fmt):
    # Python starts with no sys.stderr when fd 2 is closed; print() and structlog would then write to stdout. The
    # console format asks stderr whether it is a terminal.
    served = subprocess.run(
        MODULE, input=HANDSHAKE_LINES, stdout=subprocess.PIPE, env=clean_environ(SKILLS_DIR=str(tree), MCP_LOG_FORMAT=fmt),
        preexec_fn=lambda: os.close(2), timeout=30,
    )  # fmt: skip
    assert served.returncode == 0
    answers = answers_of(served.stdout)
    assert sorted(answers) == [1, 2] and tool_payload(answers[2])["skills"][0]["name"] == "alpha"
    checked = subprocess.run(
        [*CONSOLE_SCRIPT, "check", "--json", str(tree)], stdout=subprocess.PIPE, preexec_fn=lambda: os.close(2), timeout=30
    )
    assert checked.returncode == 1 and json.loads(checked.stdout)["problems"]


@pytest.mark.parametrize("closed", [0, 1])
def test_with_stdin_or_stdout_closed_the_server_exits_zero_and_reads_no_other_file(tree, closed):
    # A closed fd 0 or 1 would be taken by the next file opened (the event loop's epoll), then read or written as
    # the wire; it reads and writes /dev/null instead: no message comes in, or every answer goes nowhere.
    served = subprocess.run(
        MODULE, input=None if closed == 0 else HANDSHAKE_LINES, capture_output=True,
        env=clean_environ(SKILLS_DIR=str(tree)), preexec_fn=lambda: os.close(closed), timeout=30,
    )  # fmt: skip
    assert served.returncode == 0, served.stderr
    assert served.stdout == b""
    events = [json.loads(line)["event"] for line in served.stderr.splitlines()]
    assert events[-1] == "shutdown" and "Traceback" not in served.stderr.decode()


def test_a_stdout_that_fails_with_an_error_other_than_epipe_is_logged_and_ends_the_session(tree):
    with open("/dev/full", "wb") as full:
        served = subprocess.run(
            MODULE, input=HANDSHAKE_LINES, stdout=full, stderr=subprocess.PIPE, env=clean_environ(SKILLS_DIR=str(tree)),
            timeout=30,
        )  # fmt: skip
    assert served.returncode == 0
    logged = [json.loads(line) for line in served.stderr.splitlines()]
    failed = [line for line in logged if line["event"] == "stdout.failed"]
    assert [(line["errorType"], line["errno"], line["level"]) for line in failed] == [("OSError", "ENOSPC", "warning")]
    assert logged[-1]["event"] == "shutdown"


def test_a_client_that_closes_its_end_of_stderr_is_still_answered(tree):
    # The first log line then meets EPIPE: it is dropped, where it would end the server before it answered.
    unread, stderr = os.pipe()
    os.close(unread)
    try:
        served = subprocess.run(
            MODULE, input=HANDSHAKE_LINES, stdout=subprocess.PIPE, stderr=stderr,
            env=clean_environ(SKILLS_DIR=str(tree)), timeout=30,
        )  # fmt: skip
    finally:
        os.close(stderr)
    assert served.returncode == 0
    assert sorted(answers_of(served.stdout)) == [1, 2]


def test_requests_the_sdk_cannot_read_are_answered_with_the_reason_and_logged(tree):
    # The SDK drops a line it cannot read as an MCP message; a request whose id can still be read is answered,
    # so its client does not wait forever, and every such line is logged.
    lines = [
        b'{"jsonrpc":"2.0","id":41,"method":"resources/read","params":["skill://alpha/SKILL.md"]}',
        b'{"jsonrpc":"2.0","id":"42","method":"tools/call","params":"skill_list"}',
        b'{"jsonrpc":"2.0","id":43,"method":"ping","params":{"_meta":{"x":"\\ud800"}}}',
        b'{"jsonrpc":"1.0","id":44,"method":"ping"}',
        b'{"jsonrpc":"2.0","method":"notifications/initialized","params":[1]}',  # a notification: no answer
        b'{"jsonrpc":"2.0","id":"\\udc80","method":"ping","params":[]}',  # an id no answer could carry
        b"garbage",
        b'{"jsonrpc":"2.0","id":45,"method":{"method":"x","id":99}}',  # the id is the message's, not a field's
        b'{"jsonrpc":"2.0","id":46,"result":3}',  # a malformed response: nothing to answer
        b'{"jsonrpc":"2.0","id":47,"method":"ping","params":' + b"[" * 5000 + b"]" * 5000 + b"}",  # too deep to parse
        b'[{"jsonrpc":"2.0","id":48,"method":"ping"},{"jsonrpc":"2.0","id":"49","method":"tools/list"}]',  # a batch
        b'{"jsonrpc":"2.0","id":2.5,"method":"tools/list"}',  # read by the SDK as a notification: nothing to answer
    ]
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        legacy_handshake(client)
        for line in lines:
            client.send_line(line)
        assert client.request("ping")["result"] == {}
        client.close_stdin()
        assert client.wait() == 0
    assert_stdout_is_only_json_rpc(client)
    errors = {answer["id"]: answer["error"] for answer in map(json.loads, client.stdout_lines) if "error" in answer}
    assert errors == {
        41: {"code": -32602, "message": 'invalid params: "params" must be an object, whose members name the parameters, not an array'},
        "42": {"code": -32602, "message": 'invalid params: "params" must be an object, whose members name the parameters, not a string'},
        43: {"code": -32700, "message": "the message is not strict JSON: a string in it holds a lone surrogate escape (\\ud800-\\udfff), which is no character"},
        44: {"code": -32600, "message": 'invalid request: "jsonrpc" must be "2.0"'},
        45: {"code": -32600, "message": 'invalid request: "method" must be a string'},
        47: {"code": -32700, "message": "the message nests deeper than the server reads"},
        48: {"code": -32600, "message": BATCH_REFUSAL},
        "49": {"code": -32600, "message": BATCH_REFUSAL},
    }  # fmt: skip
    unreadable = [event for event in client.log_events() if event["event"] == "message.unreadable"]
    expected_ids = [[41], ["42"], [43], [44], [], [], [], [45], [], [47], [48, "49"], []]
    assert [event["requestIds"] for event in unreadable] == expected_ids
    assert [event["answersTo"] for event in unreadable] == [[]] * 8 + [[46], [], [], []]  # answering nothing pending
    assert "no usable id" in unreadable[-1]["problem"]
    assert all(event["level"] == "warning" and event["problem"] for event in unreadable)


def test_every_request_of_a_large_batch_is_answered_and_its_log_line_stays_short(tree):
    batch = [{"jsonrpc": "2.0", "id": f"b{n}", "method": "ping"} for n in range(40)]
    sixteen = [{"jsonrpc": "2.0", "id": f"s{n}", "method": "ping"} for n in range(16)]  # all logged, none left out
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        legacy_handshake(client)
        client.send_line(json.dumps(batch).encode())
        client.send_line(json.dumps(sixteen).encode())
        assert client.request("ping")["result"] == {}
        client.close_stdin()
        assert client.wait() == 0
    answered = [answer["id"] for answer in map(json.loads, client.stdout_lines) if "error" in answer]
    logged, logged_whole = [event for event in client.log_events() if event["event"] == "message.unreadable"]
    assert sorted(answered) == sorted([f"b{n}" for n in range(40)] + [f"s{n}" for n in range(16)])
    assert (logged["requestIds"], logged["requestIdsNotLogged"]) == ([f"b{n}" for n in range(16)], 24)
    assert logged_whole["requestIds"] == [f"s{n}" for n in range(16)] and "requestIdsNotLogged" not in logged_whole


@pytest.mark.parametrize("answer", [None, [], "yes", "accepted, in a batch"])
def test_an_unreadable_answer_to_the_confirmation_question_is_a_failed_confirmation(root, answer):
    # The SDK cannot read an elicitation result that is not an object; it reaches the waiting question as the
    # client's error, so the call is answered "not confirmed" at once, not when the question expires (600 s).
    write_skill(root, "asks", ASKING_SKILL, files={"run.py": "print('ran')\n"})
    with running(MODULE, clean_environ(SKILLS_DIR=str(root))) as client:
        client.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
                                      "clientInfo": {"name": "c", "version": "0"}})  # fmt: skip
        client.notify("notifications/initialized")
        call = {"jsonrpc": "2.0", "id": "run", "method": "tools/call",
                "params": {"name": "skill_run", "arguments": {"name": "asks", "script": "run.py"}}}  # fmt: skip
        client.send_line(json.dumps(call).encode())
        question = client.next_message()
        assert question["method"] == "elicitation/create"
        if answer == "accepted, in a batch":  # nothing in a batch is read, an acceptance neither
            accepted = {"action": "accept", "content": {"confirmed": True}}
            client.send_line(json.dumps([{"jsonrpc": "2.0", "id": question["id"], "result": accepted}]).encode())
        else:
            client.send_line(json.dumps({"jsonrpc": "2.0", "id": question["id"], "result": answer}).encode())
        started = time.monotonic()
        answered = client.next_message()
        assert time.monotonic() - started < 5
        client.close_stdin()
        assert client.wait() == 0
    assert answered["id"] == "run" and tool_payload(answered)["confirmed"] is False
    confirms = [event["decision"] for event in client.log_events() if event["event"] == "run.confirm"]
    assert confirms == ["failed"] and not [event for event in client.log_events() if event["event"] == "run.start"]


@pytest.mark.parametrize("ending", ["eof", "sigterm"])
def test_a_client_that_never_reads_stderr_is_still_answered_and_the_server_still_exits(root, ending):
    # 400 previews log 800 lines, far past the 64 KiB a pipe holds: a blocking log write would stop the event
    # loop (no answers, no signal handled, no exit); the lines past the backlog are dropped instead.
    write_skill(root, "asks", ASKING_SKILL, files={"run.py": "print('ran')\n"})
    server = subprocess.Popen(
        MODULE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=clean_environ(SKILLS_DIR=str(root), MCP_CONFIRM_ELICITATION="off"),
    )  # fmt: skip
    answers: list[bytes] = []
    reader = threading.Thread(target=lambda: answers.extend(server.stdout), daemon=True)
    reader.start()
    try:
        call = {"name": "skill_run", "arguments": {"name": "asks", "script": "run.py"}}
        previews = b"".join(
            json.dumps({"jsonrpc": "2.0", "id": f"run-{index}", "method": "tools/call", "params": call}).encode() + b"\n"
            for index in range(400)
        )
        server.stdin.write(HANDSHAKE_LINES + previews)
        server.stdin.flush()
        deadline = time.monotonic() + 30
        while len(answers) < 402 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(answers) == 402, f"{len(answers)} of 402 answered"
        if ending == "eof":
            server.stdin.close()
        else:
            server.send_signal(signal.SIGTERM)
        assert_exits_zero_within_5_seconds(server)
    finally:
        server.kill()
        server.stderr.close()


def test_refused_requests_a_client_never_reads_do_not_hold_the_exit(tree, tmp_path):
    # Their answers wait for a reader of their own: the server still reads to the end of input, and exits in 5 s.
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr:
        server = subprocess.Popen(
            MODULE, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
            env=clean_environ(SKILLS_DIR=str(tree)),
        )  # fmt: skip
    try:
        refused = b"".join(b'{"jsonrpc":"2.0","id":%d,"method":"ping","params":[]}\n' % index for index in range(800))
        server.stdin.write(HANDSHAKE_LINES + refused)
        server.stdin.flush()
        # §5.1's 5 s count from the end of input the server can see: once it has read every line before it.
        deadline = time.monotonic() + 30
        while log.read_bytes().count(b'"event": "message.unreadable"') < 800:
            assert time.monotonic() < deadline, "the server stopped reading its input"
            time.sleep(0.05)
        server.stdin.close()
        assert_exits_zero_within_5_seconds(server)
    finally:
        server.kill()
        server.stdout.close()


def test_the_sdks_own_warnings_are_json_lines_without_values(tree):
    # A malformed notification makes the SDK's stdlib logger warn; it used to print plain text on stderr.
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        legacy_handshake(client)
        client.notify("notifications/cancelled", {"requestId": {"secret": "VALUE-SENTINEL-5e1"}})
        client.notify("notifications/progress", {"x": "VALUE-SENTINEL-5e1"})
        assert client.request("ping")["result"] == {}
        client.close_stdin()
        assert client.wait() == 0
    events = client.log_events()  # every stderr line parses as one JSON object
    sdk = [event for event in events if event.get("logger", "").startswith("mcp.")]
    assert [(event["level"], event["event"]) for event in sdk] == [("warning", "dropped %r: malformed params")] * 2
    assert all("timestamp" in event for event in sdk)
    assert b"VALUE-SENTINEL" not in b"".join(client.stderr_lines)


def test_an_sdk_exception_is_logged_by_its_type_only():
    stream = io.StringIO()
    configure_logging(stream=stream)
    try:
        try:
            raise ValueError("FILE-CONTENT-SENTINEL")
        except ValueError:
            logging.getLogger("mcp.server.runner").exception("handler for %r returned an invalid result", "ARG-SENTINEL")
    finally:
        structlog.reset_defaults()
        logging.basicConfig(force=True)
    (line,) = stream.getvalue().splitlines()
    event = json.loads(line)
    assert (event["event"], event["errorType"], event["level"]) == (
        "handler for %r returned an invalid result", "ValueError", "error"
    )
    assert "SENTINEL" not in line


@pytest.mark.parametrize("threshold", ["debug", "warning", "error"])
def test_the_sdks_stdlib_logging_starts_at_warning_or_a_higher_threshold(threshold):
    # §13: the SDK's own logging reaches stderr from warning up (its info lines may name what a request carried),
    # and from MCP_LOG_LEVEL up when that is higher.
    stream = io.StringIO()
    configure_logging(level=threshold, stream=stream)
    try:
        sdk = logging.getLogger("mcp.server.lowlevel.server")
        sdk.debug("Received message: %s", "DEBUG-SENTINEL")
        sdk.info("Processing request of type %s", "INFO-SENTINEL")
        sdk.warning("dropped %r: malformed params", "WARNING-SENTINEL")
        sdk.error("failed")
    finally:
        structlog.reset_defaults()
        logging.basicConfig(force=True)
    expected = ["failed"] if threshold == "error" else ["dropped %r: malformed params", "failed"]
    assert [json.loads(line)["event"] for line in stream.getvalue().splitlines()] == expected


def test_a_non_utf8_root_is_answered_as_json_escapes(tmp_path):
    # The root's byte 0xff decodes to a lone surrogate, which no UTF-8 line can carry; the SDK's writer used to
    # die on it, taking the session down.
    root = Path(os.fsdecode(bytes(tmp_path) + b"/bad\xff"))
    write_skill(root, "alpha", "name: alpha\ndescription: A.\n", "Alpha body.\n")
    with running(MODULE, clean_environ(SKILLS_DIR=str(root))) as client:
        legacy_handshake(client)
        listed = tool_payload(client.request("tools/call", {"name": "skill_list", "arguments": {}}))
        assert listed["roots"] == [str(root)] and listed["skills"][0]["source"] == str(root)
        assert b"\\udcff" in client.stdout_lines[-1]
        client.close_stdin()
        assert client.wait() == 0


def test_a_confirm_secret_of_random_bytes_boots(tree):
    # §2.1: a malformed value never crashes the server; `head -c 32 /dev/urandom` is rarely UTF-8.
    secret = os.fsdecode(b"\x9c\xffsecret\xfe")
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree), MCP_CONFIRM_SECRET=secret)) as client:
        legacy_handshake(client)
        assert tool_payload(client.request("tools/call", {"name": "skill_list", "arguments": {}}))["skills"]
        client.close_stdin()
        assert client.wait() == 0


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
        assert bare["error"]["code"] == -32602 and "params._meta must be an object" in bare["error"]["message"]
        assert client.request("tools/list", {"_meta": ENVELOPE})["result"]["tools"] == tools

        client.close_stdin()
        assert client.wait() == 0
    assert_stdout_is_only_json_rpc(client)


EXTENSION_CALLS = {
    "skills/list": {},
    "skills/get": {"uri": "skill://alpha/SKILL.md"},
    "resources/directory/read": {"uri": "skill://alpha"},
}


@pytest.mark.parametrize("era", ["legacy", MODERN])
def test_the_extension_methods_check_the_envelope_as_the_spec_methods_do(tree, era):
    # The SDK checks a custom method's 2026-07-28 envelope only for presence: clientInfo 5 used to pass.
    malformed = {
        "io.modelcontextprotocol/clientInfo": (5, '"_meta.io.modelcontextprotocol/clientInfo" must be an object, not a number'),
        "io.modelcontextprotocol/clientCapabilities": ([], '"_meta.io.modelcontextprotocol/clientCapabilities" must be an object, not an array'),
        "progressToken": ({}, '"_meta.progressToken" must be a string or an integer, not an object'),
    }
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        if era == "legacy":
            legacy_handshake(client)
        envelope = ENVELOPE if era == MODERN else {}
        for method, params in EXTENSION_CALLS.items():
            assert "result" in client.request(method, {"_meta": envelope, **params})
            for key, (value, problem) in malformed.items():
                if era == "legacy" and key.startswith("io."):  # not the handshake era's: carried as any other key
                    assert "result" in client.request(method, {"_meta": {key: value}, **params})
                    continue
                answer = client.request(method, {"_meta": {**envelope, key: value}, **params})
                assert answer["error"] == {"code": -32602, "message": f"invalid params for {method}: {problem}"}
                # tools/list answers the same envelope with the same reason
                listing = client.request("tools/list", {"_meta": {**envelope, key: value}})
                assert listing["error"]["message"] == f"invalid params for tools/list: {problem}"
        client.close_stdin()
        assert client.wait() == 0
    assert not [event for event in client.log_events() if event["event"] == "method.error"]


def test_a_request_before_initialize_is_told_to_initialize_first(tree):
    # The SDK refuses it with its bare "Invalid request parameters", though nothing is wrong with the params.
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        early = client.request("tools/list")
        assert early["error"] == {"code": -32602, "message": BEFORE_THE_SESSION}
        # The SDK has committed the connection to the handshake era: the message must not advise the envelope here.
        assert "a 2026-07-28 client opens a new connection" in BEFORE_THE_SESSION
        assert client.request("tools/list", {"_meta": ENVELOPE})["error"]["code"] == -32600
        legacy_handshake(client)
        assert len(client.request("tools/list")["result"]["tools"]) == 4
        client.close_stdin()
        assert client.wait() == 0


@pytest.mark.parametrize("era", ["legacy", MODERN])
def test_params_the_sdk_refuses_are_explained_field_by_field(tree, era):
    """§5.3: the SDK's own check of a spec method's params used to answer a bare "Invalid request parameters"."""
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        if era == "legacy":
            legacy_handshake(client)
            meta: dict = {}
        else:
            meta = {"_meta": ENVELOPE}

        def refused(method: str, params: dict) -> dict:
            return client.request(method, {**meta, **params})["error"]

        assert refused("prompts/get", {"name": 5}) == {
            "code": -32602, "message": 'invalid params for prompts/get: "name" must be a string, not a number'
        }
        assert refused("prompts/get", {})["message"] == 'invalid params for prompts/get: "name" is required'
        assert refused("tools/call", {"arguments": {}})["message"] == 'invalid params for tools/call: "name" is required'

        # §5.3: arguments that are not an object are the tool's to refuse, with its isError result
        def tool_error(params: dict) -> tuple[bool, str]:
            result = client.request("tools/call", {**meta, **params})["result"]
            return result["isError"], result["content"][0]["text"]

        assert tool_error({"name": "skill_load", "arguments": ["alpha"]}) == (
            True, "invalid arguments for skill_load: arguments must be an object, not an array"
        )
        assert tool_error({"name": "nope", "arguments": 3})[1].startswith('unknown tool "nope"\n\nHint: ')

        assert refused("resources/read", {"uri": None})["message"] == (
            'invalid params for resources/read: "uri" must be a string, not null'
        )
        # a name that is not a string, with bad arguments: it used to escape as an exception (code 0)
        assert refused("tools/call", {"name": {"a": 1}, "arguments": 5})["message"] == (
            'invalid params for tools/call: "name" must be a string, not an object'
        )
        # refused by the handler's model rather than the revision's (the handshake era ignores inputResponses)
        answer = {"inputResponses": {"confirm": {"action": "nope"}}}
        assert refused("tools/call", {"name": "skill_run", "arguments": {"name": "alpha", "script": "x"}, **answer}) == {
            "code": -32602,
            "message": 'invalid params for tools/call: "inputResponses.confirm" matches none of the forms this method accepts',
        }
        if era == MODERN:
            # refused by the revision's model alone (the handler's model does not look inside the envelope)
            envelope = {**ENVELOPE, "io.modelcontextprotocol/clientInfo": 5}
            assert client.request("tools/call", {"_meta": envelope, "name": "skill_list", "arguments": {}})["error"] == {
                "code": -32602,
                "message": 'invalid params for tools/call: "_meta.io.modelcontextprotocol/clientInfo" must be an object, not a number',
            }
        # and the session goes on
        loaded = client.request("tools/call", {**meta, "name": "skill_load", "arguments": {"name": "alpha"}})
        assert tool_payload(loaded)["body"] == "Alpha body.\n"
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


def test_a_signal_as_soon_as_ready_is_logged_as_a_shutdown(tree):
    # `ready` comes once the server handles signals itself: from then on a signal logs `shutdown`.
    for _ in range(5):
        with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
            deadline = time.monotonic() + 30
            while not any(b'"event": "ready"' in line for line in client.stderr_lines):
                assert time.monotonic() < deadline, client.stderr_text()
                time.sleep(0.001)
            client.process.send_signal(signal.SIGTERM)
            assert client.wait() == 0
        assert [event["reason"] for event in client.log_events() if event["event"] == "shutdown"] == ["signal"]


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


def test_busy_skills_extension_answers_leave_stdio_answering(root):
    """60 skills/list at once, each hashing 16 skills x 16 MiB: the server still reads and answers a ping at
    once, and still exits within 5 s of the end of input (on anyio's shared 40 threads, the hashing took them all)."""
    for index in range(16):
        write_skill(root, f"s{index:02d}")
        for part in range(16):  # each within the 1 MiB a read serves, or the skill is "dynamic" and nothing hashed
            with open(root / f"s{index:02d}" / f"blob{part:02d}.bin", "wb") as blob:
                blob.truncate(2**20 - 256)
    with running(MODULE, clean_environ(SKILLS_DIR=str(root))) as client:
        legacy_handshake(client)
        for index in range(60):
            client.send_line(json.dumps({"jsonrpc": "2.0", "id": f"list-{index}", "method": "skills/list"}).encode())
        assert client.request("ping")["result"] == {}
        assert not [line for line in client.stdout_lines if b'"list-' in line], "a skills/list was answered first"
        # One answer, whole, before the end of input: those still hashing then are cut off (-32000), by design.
        first = client.next_message()
        assert all(isinstance(skill["resources"], list) for skill in first["result"]["skills"])
        client.close_stdin()
        assert client.wait() == 0
    assert_stdout_is_only_json_rpc(client)


def test_what_the_server_sets_for_itself_is_never_handed_to_a_script(root):
    # `serve` sets PYDANTIC_DISABLE_PLUGINS for its own imports; a script declaring that name sees it unset, as
    # the operator left it, in the preview (and so in the run).
    declaration = (
        "name: envy\ndescription: Asks for variables.\nmcp-host:\n  version: 1\n  run:\n"
        "    - script: show.py\n      interpreter: python3\n      env: [PYDANTIC_DISABLE_PLUGINS, OPERATOR_SET]\n"
    )
    write_skill(root, "envy", declaration, files={"show.py": "print('hi')\n"})
    with running(MODULE, clean_environ(SKILLS_DIR=str(root), OPERATOR_SET="1")) as client:
        legacy_handshake(client)
        answer = client.request("tools/call", {"name": "skill_run", "arguments": {"name": "envy", "script": "show.py"}})
        client.close_stdin()
        assert client.wait() == 0
    will_run = tool_payload(answer)["preview"]["willRun"]
    assert will_run["envNotSet"] == ["PYDANTIC_DISABLE_PLUGINS"]
    assert "OPERATOR_SET" in will_run["envNames"] and "PYDANTIC_DISABLE_PLUGINS" not in will_run["envNames"]


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


def test_console_log_format_shows_terminal_escapes_in_names_as_text(tree):
    (tree / "clear\x1b[2J").mkdir()  # logged at boot as a directory without SKILL.md
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree), MCP_LOG_FORMAT="console")) as client:
        client.close_stdin()
        assert client.wait() == 0
    text = client.stderr_text()
    assert "\x1b" not in text and "clear\\u001b[2J" in text


def test_json_logs_carry_a_name_with_terminal_escapes_exactly(tree):
    # JSON escapes C0 controls already; a C1 control and a bidi override are escaped too, so a terminal showing
    # the log neither obeys nor reorders them, and the value a reader decodes is still the real path.
    names = ["clear\x1b[2J", "csi\x9b2J", "txt.\u202eexe"]
    for name in names:
        (tree / name).mkdir()
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        client.close_stdin()
        assert client.wait() == 0
    paths = [event["path"] for event in client.log_events() if event["event"] == "problem"]
    assert all(str(tree / name) in paths for name in names)
    assert "\x9b" not in client.stderr_text() and "\u202e" not in client.stderr_text()


def test_log_level_error_silences_info_and_warning(tree):
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree), MCP_LOG_LEVEL="ERROR")) as client:
        legacy_handshake(client)
        assert tool_payload(client.request("tools/call", {"name": "skill_list", "arguments": {}}))["problems"]
        client.close_stdin()
        assert client.wait() == 0
    assert client.stderr_lines == []
    assert_stdout_is_only_json_rpc(client)


@pytest.mark.parametrize(
    ("environ", "may_run"),
    [
        # the bundled demo's report.py, and report.js where node is found
        ({"SKILLS_DIR": "", "PATH": SYSTEM_PATH}, f"and {1 + bool(shutil.which('node', path=SYSTEM_PATH))} runnable script(s)"),
        # report.js with no node to run it: the count is of scripts that may run, not of scripts declared
        ({"SKILLS_DIR": "", "MCP_SKILL_NODE": "/nonexistent/node"}, "and 1 runnable script(s)"),
        ({"MCP_DATA_DIR": "/nonexistent"}, "and no script may run (hosted, and no MCP_SKILL_RUN grant was supplied)"),
        ({"MCP_SKILL_RUN": "{"}, "and no script may run (MCP_SKILL_RUN is malformed; skill_list's grantError says how)"),
    ],
)
def test_the_ready_line_says_whether_any_script_may_run(tree, environ, may_run):
    # An operator reading the log sees at once that a hosted server without a grant runs nothing.
    with running(MODULE, clean_environ(**{"SKILLS_DIR": str(tree), **environ})) as client:
        client.close_stdin()
        assert client.wait() == 0
    (ready,) = [event["message"] for event in client.log_events() if event["event"] == "ready"]
    assert ready.endswith(f" problem(s) {may_run}; waiting for an MCP client on stdin")


@pytest.mark.parametrize(
    ("count", "named"), [(0, ""), (8, " (s0, s1, s2, s3, s4, s5, s6, s7)"), (9, " (s0, s1, s2, s3, s4, s5, s6, s7, …)")]
)
def test_the_ready_line_names_the_first_eight_skills_and_says_when_there_are_more(tmp_path, count, named):
    for index in range(count):
        write_skill(tmp_path, f"s{index}")
    with running(MODULE, clean_environ(SKILLS_DIR=str(tmp_path))) as client:
        client.close_stdin()
        assert client.wait() == 0
    (ready,) = [event["message"] for event in client.log_events() if event["event"] == "ready"]
    assert f" serves {count} skill(s){named} with 0 problem(s) " in ready


def test_the_ready_line_counts_the_problems_of_discovery(tmp_path):
    write_skill(tmp_path, "fine")
    write_skill(tmp_path, "nameless", frontmatter="description: No name.\n")
    write_skill(tmp_path, "broken", frontmatter="name: [\n")
    with running(MODULE, clean_environ(SKILLS_DIR=str(tmp_path))) as client:
        client.close_stdin()
        assert client.wait() == 0
    (ready,) = [event["message"] for event in client.log_events() if event["event"] == "ready"]
    assert " serves 2 skill(s) (fine, nameless) with 2 problem(s) " in ready


@pytest.mark.parametrize("as_root", [True, False], ids=["root", "uid-10001"])
def test_serving_as_root_warns_that_scripts_run_as_root(as_root):
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root, and setpriv (util-linux) to drop to uid 10001")
    drop = [] if as_root else ["setpriv", "--reuid=10001", "--regid=10001", "--clear-groups"]
    if subprocess.run([*drop, sys.executable, "-c", "import skill_mcp"], capture_output=True, cwd="/").returncode != 0:
        pytest.skip(f"uid 10001 cannot run this checkout's skill_mcp on {sys.executable}")
    environ = clean_environ(PATH=f"{VENV_BIN}:{SYSTEM_PATH}", HOME="/nonexistent")  # the bundled demo
    with running([*drop, *MODULE], environ, cwd="/") as client:
        client.close_stdin()
        assert client.wait() == 0, client.stderr_lines
    steps = [event["step"] for event in client.log_events() if event["event"] == "hardening.warning"]
    assert steps == (["uid"] if as_root else [])


def test_an_unknown_log_setting_falls_back_with_a_warning(tree):
    # A PATH with no version manager's shims, whose own warning would depend on the machine.
    environ = clean_environ(SKILLS_DIR=str(tree), MCP_LOG_FORMAT="xml", MCP_LOG_LEVEL="loud", PATH=SYSTEM_PATH)
    with running(MODULE, environ) as client:
        client.close_stdin()
        assert client.wait() == 0
    events = client.log_events()  # still JSON: the fallback format
    warnings = [(event["variable"], event["level"]) for event in events if event["event"] == "config.warning"]
    assert sorted(warnings) == [("MCP_LOG_FORMAT", "warning"), ("MCP_LOG_LEVEL", "warning")]
    assert "xml" not in client.stderr_text() and "loud" not in client.stderr_text()
    assert any(event["event"] == "boot" for event in events)


@pytest.mark.parametrize("value", ["on", "off"])
def test_the_boot_line_says_whether_elicitation_is_on(tree, value):
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree), MCP_CONFIRM_ELICITATION=value)) as client:
        client.close_stdin()
        assert client.wait() == 0
    assert [event["elicitation"] for event in client.log_events() if event["event"] == "boot"] == [value]


@pytest.mark.parametrize(("value", "effective"), [("5000", 4096), ("abc", 32)])
def test_a_bad_max_skills_warns_once_without_its_value(tree, value, effective):
    # §17 #14 on the wire: the fallback applies and one config.warning names the variable, never the value.
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree), MCP_MAX_SKILLS=value, PATH=SYSTEM_PATH)) as client:
        client.close_stdin()
        assert client.wait() == 0
    events = client.log_events()
    warnings = [event for event in events if event["event"] == "config.warning"]
    assert [warning["variable"] for warning in warnings] == ["MCP_MAX_SKILLS"]
    assert value not in json.dumps([{key: item for key, item in event.items() if key != "timestamp"} for event in events])
    assert [event["maxSkills"] for event in events if event["event"] == "boot"] == [effective]


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


@pytest.mark.parametrize("era", ["2025-11-25", MODERN])
def test_the_confirmation_question_under_a_non_utf8_root_is_asked_with_json_escapes(tmp_path, era):
    # The question shows willRun.cwd, a lone surrogate here; the SDK's writer died on it, taking the session down.
    root = Path(os.fsdecode(bytes(tmp_path) + b"/r\xffoot"))
    write_skill(root, "asks", ASKING_SKILL, files={"run.py": "print('ran')\n"})
    asking, accepted = {"elicitation": {}}, {"action": "accept", "content": {"confirmed": True}}
    run = {"name": "skill_run", "arguments": {"name": "asks", "script": "run.py"}}
    with running(MODULE, clean_environ(SKILLS_DIR=str(root))) as client:
        if era == MODERN:
            envelope = {**ENVELOPE, "io.modelcontextprotocol/clientCapabilities": asking}
            required = client.request("tools/call", {"_meta": envelope, **run})["result"]
            question = required["inputRequests"]["confirm"]
            ran = client.request("tools/call", {"_meta": envelope, **run, "inputResponses": {"confirm": accepted},
                                                "requestState": required["requestState"]})  # fmt: skip
        else:
            client.request("initialize", {"protocolVersion": era, "capabilities": asking,
                                          "clientInfo": {"name": "c", "version": "0"}})  # fmt: skip
            client.notify("notifications/initialized")
            client.send_line(json.dumps({"jsonrpc": "2.0", "id": "run", "method": "tools/call", "params": run}).encode())
            question = client.next_message()
            client.send_line(json.dumps({"jsonrpc": "2.0", "id": question["id"], "result": accepted}).encode())
            ran = client.next_message()
        client.close_stdin()
        assert client.wait() == 0
    assert question["method"] == "elicitation/create"
    assert f'"cwd": "{tmp_path}/r\\udcffoot/asks"' in question["params"]["message"]
    assert tool_payload(ran)["stdout"] == "ran\n"


def test_a_spend_refused_under_a_non_utf8_data_dir_is_answered(root, tmp_path):
    # The refusal names the data directory, a lone surrogate here: answered as an escape, nothing run.
    write_skill(root, "asks", ASKING_SKILL, files={"run.py": "print('ran')\n"})
    data_dir = os.fsdecode(bytes(tmp_path) + b"/d\xffata")  # absolute, and missing: the spend cannot be recorded
    grant = json.dumps([{"skill": "asks", "script": "run.py"}])
    environ = clean_environ(SKILLS_DIR=str(root), MCP_CONFIRM_SECRET="k", MCP_DATA_DIR=data_dir, MCP_SKILL_RUN=grant)
    with running(MODULE, environ) as client:
        legacy_handshake(client)
        run = {"name": "asks", "script": "run.py"}
        token = tool_payload(client.request("tools/call", {"name": "skill_run", "arguments": run}))["confirmToken"]
        refused = client.request("tools/call", {"name": "skill_run", "arguments": {**run, "confirmToken": token}})
        client.close_stdin()
        assert client.wait() == 0
    assert refused["result"]["isError"] is True
    assert f"cannot record a spent approval in {tmp_path}/d\\udcffata" in refused["result"]["content"][0]["text"]


def test_a_stdin_inherited_in_non_blocking_mode_is_read_as_it_comes(tree):
    # A non-blocking pipe has nothing to read yet: EAGAIN, which the reader took for the end of input (exit at once).
    read_end, write_end = os.pipe()
    os.set_blocking(read_end, False)
    server = subprocess.Popen(MODULE, stdin=read_end, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                              env=clean_environ(SKILLS_DIR=str(tree)))  # fmt: skip
    os.close(read_end)
    try:
        time.sleep(1)  # nothing written yet
        assert server.poll() is None
        hello = {"jsonrpc": "2.0", "id": 1, "method": "initialize",
                 "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "c", "version": "0"}}}  # fmt: skip
        os.write(write_end, json.dumps(hello).encode() + b"\n")
        assert json.loads(server.stdout.readline())["id"] == 1
    finally:
        os.close(write_end)
    assert server.wait(timeout=10) == 0
    server.stdout.close()


def test_a_stdin_that_fails_to_read_is_the_client_leaving_not_a_crash(tree):
    # A pty whose other end closed reads EIO: the server ended with a traceback and status 1, no shutdown line.
    controller, terminal = pty.openpty()
    tty.setraw(terminal)
    server = subprocess.Popen(MODULE, stdin=terminal, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              env=clean_environ(SKILLS_DIR=str(tree)))  # fmt: skip
    os.close(terminal)
    hello = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    os.write(controller, json.dumps(hello).encode() + b"\n")
    assert json.loads(server.stdout.readline())["id"] == 1
    os.close(controller)
    assert server.wait(timeout=10) == 0
    events = [json.loads(line) for line in server.stderr.read().splitlines()]
    server.stdout.close()
    server.stderr.close()
    assert [event["event"] for event in events][-2:] == ["stdin.failed", "shutdown"]
    assert events[-1]["reason"] == "eof"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_while_the_last_log_lines_drain_still_exits_zero(tree, signum):
    # After the end of input the loop no longer handles signals while the log lines wait for a slow stderr (up to
    # 2 s): a client's close-then-SIGTERM ended the server by the signal (status -15), or SIGINT's traceback.
    server = subprocess.Popen(MODULE, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                              env=clean_environ(SKILLS_DIR=str(tree)))  # fmt: skip
    server.stdin.write(b"x\n" * 3000)  # 3000 message.unreadable lines: more than stderr's pipe holds, unread
    server.stdin.flush()
    time.sleep(3)
    server.stdin.close()
    time.sleep(1)
    server.send_signal(signum)
    try:
        assert server.wait(timeout=10) == 0
    finally:
        server.stderr.close()


def test_a_line_longer_than_a_message_may_be_is_refused_by_its_id_unparsed(tree):
    # Parsing a 100 MB line held the event loop (and with it signals and the exit deadline) for 13-20 s: a line
    # past MAX_MESSAGE_CHARS is cut there and refused, its id read from the start kept.
    keys = ",".join(f'"k{index}":1' for index in range(8_000_000))  # ~100 MB of members, the costliest to parse
    huge = ('{"jsonrpc":"2.0","id":9,"method":"ping","params":{' + keys + "}}").encode()
    with running(MODULE, clean_environ(SKILLS_DIR=str(tree))) as client:
        legacy_handshake(client)
        client.send_line(huge)
        refused = client.next_message()
        assert client.request("ping")["result"] == {}
        client.close_stdin()
        closed = time.monotonic()
        assert client.wait() == 0 and time.monotonic() - closed < 5
    assert refused["id"] == 9 and refused["error"]["code"] == -32700
    assert refused["error"]["message"].startswith(f"the line is longer than {MAX_MESSAGE_CHARS} characters")
    logged = [event for event in client.log_events() if event["event"] == "message.unreadable"]
    assert [event["requestIds"] for event in logged] == [[9]]
