"""The confirmation gate under attack, through the protocol (SPEC §11): what the user is shown, and approvals
that must not run twice or run unseen.

Every script under test appends one line to a marker file before doing anything else, so "nothing ran" is a
line count, not an inference from a result.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from support import (
    UNPRIVILEGED_UID,
    as_unprivileged,
    connect,
    deployment_for,
    error_text,
    needs_root,
    world_readable_dir,
    write_skill,
)
from wire import clean_environ, running, tool_payload

from skill_mcp.deployment import build_deployment
from skill_mcp.hardening import ScrubResult
from skill_mcp.run_tool import RunService
from skill_mcp.spent import FileSpentStore, SpentStoreError

pytestmark = pytest.mark.anyio

PYTHON = "/usr/bin/python3"
ACCEPT = types.ElicitResult(action="accept", content={"confirmed": True})
SKILL = (
    "name: gate\ndescription: Gate fixture.\nmcp-host:\n  version: 1\n  run:\n"
    "    - script: mark.py\n      interpreter: python3\n    - script: slow.py\n      interpreter: python3\n"
)
MARK_PY = """\
import json, sys
with open({marker!r}, "a", encoding="utf-8") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
"""
SLOW_PY = """\
import time
with open({marker!r}, "a", encoding="utf-8") as log:
    log.write('["slow"]\\n')
time.sleep(1)
"""


class Gate:
    """A skills root with the `gate` skill, whose one script records each run's arguments."""

    def __init__(self, tmp_path: Path) -> None:
        self.base = tmp_path.resolve()
        self.marker = self.base / "runs.log"
        scripts = {"mark.py": MARK_PY.format(marker=str(self.marker)), "slow.py": SLOW_PY.format(marker=str(self.marker))}
        write_skill(self.base / "root", "gate", SKILL, files=scripts)

    def runs(self) -> list[list[str]]:
        return [json.loads(line) for line in self.marker.read_text().splitlines()] if self.marker.exists() else []

    def service(self, **extra: str) -> RunService:
        environ = {"SKILLS_DIR": str(self.base / "root"), "PATH": "/usr/bin:/bin", "MCP_SKILL_PYTHON": PYTHON}
        return RunService(deployment_for({**environ, **extra}))


@pytest.fixture
def gate(tmp_path: Path) -> Gate:
    return Gate(tmp_path)


class Asker:
    def __init__(self) -> None:
        self.questions: list[Any] = []

    async def __call__(self, context: Any, params: Any) -> Any:
        self.questions.append(params)
        return ACCEPT


def run(*args: str, **extra: Any) -> dict[str, Any]:
    return {"name": "gate", "script": "mark.py", "args": list(args), **extra}


# --- what the user is shown (§11.1, §9.2) ---------------------------------------------------------

# Characters that render as nothing (Unicode's Default_Ignorable_Code_Point): an argument carrying them shows as
# "report.txt" while the script is handed something else. The tag characters spell hidden ASCII ("ASCII smuggling").
INVISIBLE = {
    "tag characters": "\U000e0072\U000e006d\U000e0020\U000e002d\U000e0072\U000e0066",
    "variation selector supplement": "\U000e0100",
    "Mongolian free variation selector": "\u180b",
    "Khmer inherent vowel": "\u17b4",
    "deprecated format character": "\u206a",
    "musical format control": "\U0001d173",
    "shorthand format control": "\U0001bca0",
    "reserved ignorable": "\ufff0",
}


@pytest.mark.parametrize("case", sorted(INVISIBLE))
async def test_an_invisible_character_in_an_argument_is_shown_escaped_on_every_path(gate: Gate, case: str) -> None:
    argument = f"report.txt{INVISIBLE[case]}"
    service = gate.service()
    asker = Asker()
    async with connect(service.deployment, "legacy", service.call, elicitation_callback=asker) as client:  # path 1
        assert not (await client.call_tool("skill_run", run(argument))).is_error
    async with connect(service.deployment, "auto", service.call, elicitation_callback=Asker()) as client:  # path 2
        asked = await client.session.call_tool("skill_run", run(argument), allow_input_required=True)
    async with connect(service.deployment, "legacy", service.call) as client:  # path 3, then DRAFT_CHANGED
        preview = (await client.call_tool("skill_run", run(argument))).content[0].text
        changed = error_text(
            await client.call_tool("skill_run", run(argument, "x", confirmToken=json.loads(preview)["confirmToken"]))
        )
    shown = [asker.questions[0].message, asked.input_requests["confirm"].params.message, preview, changed]
    for text in shown:
        assert not any(character in text for character in INVISIBLE[case]), ascii(text)
    # Escaped, not dropped: the same string to a parser, and what the script was handed.
    assert json.loads(preview)["preview"]["willRun"]["argv"] == ["mark.py", argument]
    assert json.loads(changed)["preview"]["willRun"]["argv"] == ["mark.py", argument, "x"]
    details = shown[0].split("\n", 1)[1]
    assert json.loads(details)["details"]["argv"] == ["mark.py", argument]
    assert gate.runs() == [[argument]]


# --- a spend lost after the check (§11.3 step 5, §11.6) ----------------------------------------------

MODERN_ASKING = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "line-client", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {"elicitation": {}},
}
AS_UNPRIVILEGED = ["setpriv", "--reuid", str(UNPRIVILEGED_UID), "--regid", str(UNPRIVILEGED_UID), "--clear-groups"]


@needs_root
def test_a_request_state_whose_spend_is_lost_after_its_check_is_asked_again() -> None:
    # The spent check and the exclusive create are two steps: a record that appears between them (another server
    # sharing the store spent the same state) is found only by the create. Here the server, as uid 10001, cannot
    # search the store when it checks (the directory is 0600) and makes it private again before it creates the
    # record, so its check misses the record its create then finds. A spent state is asked again (§11.3 step 5),
    # never answered as a path-3 token rejection.
    base = world_readable_dir()
    try:
        runs, data = base / "runs", base / "data"
        for directory in (runs, data):
            directory.mkdir()
            os.chown(directory, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
        write_skill(base / "root", "gate", SKILL, files={"mark.py": MARK_PY.format(marker=str(runs / "runs.log"))})
        grant = json.dumps([{"skill": "gate", "script": "mark.py"}])
        environ = clean_environ(SKILLS_DIR=str(base / "root"), MCP_SKILL_PYTHON=PYTHON, MCP_CONFIRM_SECRET="stable",
                                MCP_DATA_DIR=str(data), MCP_SKILL_RUN=grant)  # fmt: skip
        tool_call = {"_meta": MODERN_ASKING, "name": "skill_run", "arguments": run()}
        accepted = {"confirm": {"action": "accept", "content": {"confirmed": True}}}
        with running([*AS_UNPRIVILEGED, sys.executable, "-m", "skill_mcp"], environ, cwd=str(base)) as client:
            state = client.request("tools/call", tool_call)["result"]["requestState"]
            answer = {**tool_call, "inputResponses": accepted, "requestState": state}
            ran = client.request("tools/call", answer)["result"]
            (data / ".mcp-confirm" / "spent").chmod(0o600)
            lost = client.request("tools/call", answer)["result"]
            client.close_stdin()
            client.wait()
        marker = (runs / "runs.log").read_text().splitlines()
    finally:
        shutil.rmtree(base)
    assert ran["isError"] is False and json.loads(ran["content"][0]["text"])["exitCode"] == 0
    assert lost["resultType"] == "input_required", lost
    assert lost["inputRequests"]["confirm"]["method"] == "elicitation/create"
    assert lost["requestState"] not in (state, None)
    assert marker == ["[]"]
    decisions = [event["decision"] for event in client.log_events() if event["event"] == "run.confirm"]
    assert decisions == ["asked", "accepted", "accepted", "asked"]


@pytest.mark.parametrize(("state", "kind"), [(5, "a number"), ({"nonce": "x"}, "an object"), (["x"], "an array")])
def test_a_request_state_that_is_no_string_is_refused_by_name_and_runs_nothing(gate: Gate, state: Any, kind: str) -> None:
    # The handler reads requestState as the string this server sealed; a client echoing anything else gets an
    # invalid-params answer naming the field, over the wire (not an internal error, and no run).
    environ = clean_environ(SKILLS_DIR=str(gate.base / "root"), MCP_SKILL_PYTHON=PYTHON,
                            MCP_SKILL_RUN=json.dumps([{"skill": "gate", "script": "mark.py"}]))  # fmt: skip
    tool_call = {"_meta": MODERN_ASKING, "name": "skill_run", "arguments": run()}
    accepted = {"confirm": {"action": "accept", "content": {"confirmed": True}}}
    with running([sys.executable, "-m", "skill_mcp"], environ) as client:
        asked = client.request("tools/call", tool_call)["result"]
        refused = client.request("tools/call", {**tool_call, "inputResponses": accepted, "requestState": state})
        client.close_stdin()
        assert client.wait() == 0
    assert asked["resultType"] == "input_required"
    assert refused["error"] == {
        "code": -32602, "message": f'invalid params for tools/call: "requestState" must be a string, not {kind}'
    }
    assert gate.runs() == []


# --- a call cancelled while its question is out (§11.2, §13) --------------------------------------


def test_a_call_cancelled_while_the_user_decides_is_logged_as_cancelled_and_runs_nothing(tmp_path: Path) -> None:
    # The client gives up on the call (notifications/cancelled) while its question is out: the question is
    # withdrawn, an answer that still arrives approves nothing, and the log says how the confirmation ended
    # instead of leaving a run.preview with no run.confirm.
    gate = Gate(tmp_path)
    environ = clean_environ(SKILLS_DIR=str(gate.base / "root"), MCP_SKILL_PYTHON=PYTHON)
    with running([sys.executable, "-m", "skill_mcp"], environ) as client:
        client.request("initialize", {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {}},
                                      "clientInfo": {"name": "line-client", "version": "0"}})  # fmt: skip
        client.notify("notifications/initialized")
        call = {"name": "skill_run", "arguments": run("cancelled")}
        client.send_line(json.dumps({"jsonrpc": "2.0", "id": "run", "method": "tools/call", "params": call}).encode())
        question = client.next_message()
        assert question["method"] == "elicitation/create"
        client.notify("notifications/cancelled", {"requestId": "run", "reason": "the user closed the chat"})
        withdrawn = client.next_message()
        accepted = {"action": "accept", "content": {"confirmed": True}}
        client.send_line(json.dumps({"jsonrpc": "2.0", "id": question["id"], "result": accepted}).encode())
        assert "result" in client.request("ping")
        client.close_stdin()
        assert client.wait() == 0
    assert withdrawn == {"jsonrpc": "2.0", "method": "notifications/cancelled",
                         "params": {"requestId": question["id"], "reason": "caller cancelled"}}  # fmt: skip
    runs = [(event["event"], event.get("decision")) for event in client.log_events() if event["event"].startswith("run.")]
    assert runs == [("run.preview", None), ("run.confirm", "cancelled")]
    assert gate.runs() == []


# --- §11 behaviour the other suites cover only below the protocol ---------------------------------


@pytest.mark.parametrize("era", ["2025-11-25", "2026-07-28"])
def test_a_client_declaring_only_url_elicitation_gets_the_token_path(gate: Gate, era: str) -> None:
    # §11.1: `elicitation: {url: {}}` alone is no form elicitation, on either era: no question it cannot answer.
    environ = clean_environ(SKILLS_DIR=str(gate.base / "root"), MCP_SKILL_PYTHON=PYTHON)
    url_only = {"elicitation": {"url": {}}}
    call = {"name": "skill_run", "arguments": run()}
    with running([sys.executable, "-m", "skill_mcp"], environ) as client:
        if era == "2026-07-28":
            call["_meta"] = {**MODERN_ASKING, "io.modelcontextprotocol/clientCapabilities": url_only}
        else:
            client.request("initialize", {"protocolVersion": era, "capabilities": url_only,
                                          "clientInfo": {"name": "line-client", "version": "0"}})  # fmt: skip
            client.notify("notifications/initialized")
        first = tool_payload(client.request("tools/call", call))
        call["arguments"] = run(confirmToken=first["confirmToken"])
        ran = tool_payload(client.request("tools/call", call))
        client.close_stdin()
        assert client.wait() == 0
    assert first["status"] == "confirmation-required" and ran["exitCode"] == 0
    assert not [line for line in client.stdout_lines if b"elicitation/create" in line]
    assert gate.runs() == [[]]


async def ask(client: Any, arguments: dict[str, Any], **retry: Any) -> Any:
    return await client.session.call_tool("skill_run", arguments, allow_input_required=True, **retry)


async def test_a_request_state_answered_while_a_run_is_in_flight_stays_valid_until_it_runs(gate: Gate) -> None:
    # §11.5/§11.3 step 6: the state's nonce is spent only once the lock is held, so a busy refusal leaves it valid.
    service = gate.service()
    async with connect(service.deployment, "auto", service.call, elicitation_callback=Asker()) as modern, \
            connect(service.deployment, "legacy", service.call) as plain:
        state = (await ask(modern, run("approved"))).request_state
        slow = json.loads((await plain.call_tool("skill_run", {"name": "gate", "script": "slow.py"})).content[0].text)
        results: dict[str, Any] = {}

        async def run_slow() -> None:
            arguments = {"name": "gate", "script": "slow.py", "confirmToken": slow["confirmToken"]}
            results["slow"] = await plain.call_tool("skill_run", arguments)

        async with anyio.create_task_group() as group:
            group.start_soon(run_slow)
            with anyio.fail_after(5):
                while not gate.runs():
                    await anyio.sleep(0.02)
            busy = await ask(modern, run("approved"), input_responses={"confirm": ACCEPT}, request_state=state)
        ran = await ask(modern, run("approved"), input_responses={"confirm": ACCEPT}, request_state=state)
        replay = await ask(modern, run("approved"), input_responses={"confirm": ACCEPT}, request_state=state)
    assert "already in flight" in error_text(busy)
    assert not results["slow"].is_error and not ran.is_error
    assert isinstance(replay, types.InputRequiredResult) and replay.request_state != state
    assert gate.runs() == [["slow"], ["approved"]]


async def test_a_retry_answering_the_question_runs_the_preview_stage_again(gate: Gate) -> None:
    # §11.3 step 2: the script removed after the question was asked is refused, whatever the answer carries.
    service = gate.service()
    async with connect(service.deployment, "auto", service.call, elicitation_callback=Asker()) as client:
        state = (await ask(client, run())).request_state
        (gate.base / "root" / "gate" / "mark.py").unlink()
        refused = await ask(client, run(), input_responses={"confirm": ACCEPT}, request_state=state)
    assert error_text(refused).startswith('"mark.py" is not a file in this skill')
    assert gate.runs() == []


# --- the boot check of the spent store predicts the spend (§11.6) ----------------------------------

STORE_LAYOUTS = {  # which of the store's levels exist, and whose they are
    "none yet": {},
    "all the server's": {".mcp-confirm": "server", ".mcp-confirm/spent": "server"},
    "store root's, spent the server's": {".mcp-confirm": "root", ".mcp-confirm/spent": "server"},
    "store the server's, spent root's and open": {".mcp-confirm": "server", ".mcp-confirm/spent": "root"},
    # "." is MCP_DATA_DIR itself: the server's and open unless named here.
    "data root's, its store the server's": {".": "root", ".mcp-confirm": "server", ".mcp-confirm/spent": "server"},
    "data the server's, writable but not searchable": {".": "server, mode 0600"},
}


UNSPENDABLE = ("so no token or request state can be recorded as spent, and a run confirmed by one (any client without "
               "elicitation) is refused after the user approved it")


@needs_root
@pytest.mark.parametrize("user", ["unprivileged", "root"])
@pytest.mark.parametrize("layout", sorted(STORE_LAYOUTS))
def test_the_boot_warns_about_the_spent_store_exactly_when_a_spend_would_fail(layout: str, user: str) -> None:
    # A spend makes both levels private (0700), which only their owner may: a level another user owns fails every
    # spend, so every run a token or state approved is refused after the user approved it. The boot said nothing.
    shared = world_readable_dir()
    try:
        data = shared / "data"
        data.mkdir()
        os.chown(data, UNPRIVILEGED_UID, UNPRIVILEGED_UID)
        for rel, owner in STORE_LAYOUTS[layout].items():
            if rel != ".":
                (data / rel).mkdir(mode=0o777)
                (data / rel).chmod(0o777)
            uid = UNPRIVILEGED_UID if owner.startswith("server") else 0
            os.chown(data / rel, uid, uid)
        data.chmod(0o600 if STORE_LAYOUTS[layout].get(".", "").endswith("0600") else 0o755)

        def boot_then_spend() -> tuple[list[str], str]:
            environ = {"MCP_CONFIRM_SECRET": "s1", "MCP_DATA_DIR": str(data)}
            _, warnings = build_deployment(environ, cwd=str(shared), scrub=ScrubResult("scrubbed", wiped_bytes=1))
            try:
                spent = FileSpentStore(str(data)).spend("A" * 22, 2_000_000_000_000, 1)
            except SpentStoreError:
                spent = False
            return [w.problem for w in warnings if w.variable == "MCP_DATA_DIR"], "spent" if spent else "refused"

        # A root server may make any level private, so it spends, and is warned of nothing, in every layout.
        warned, spend = as_unprivileged(boot_then_spend) if user == "unprivileged" else boot_then_spend()
    finally:
        shutil.rmtree(shared)
    assert (bool(warned), spend) in ((False, "spent"), (True, "refused")), (warned, spend)
    if warned and "not searchable" in layout:
        assert warned == [f"is not writable by the server's user, {UNSPENDABLE}; make it writable (the server creates "
                          "only .mcp-confirm/spent in it)"]
    elif warned:
        assert warned == [
            "holds a .mcp-confirm or .mcp-confirm/spent directory another user owns, which the server cannot make "
            f"private (mode 0700) as it does on each spend, {UNSPENDABLE}; give them to the server's user, or remove "
            "them (the server creates them)"
        ]
