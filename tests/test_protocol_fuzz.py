"""Generated requests against the whole protocol surface, both eras (SPEC §5.3, §8, §11, §12): every tool's
arguments, near-valid tokens and request states, resource URIs, cursors and prompt names. Each call must end
in a result valid for its request or a -32602 that says what was wrong, never an internal error, a -32603, a
crash or a hang, and the log must hold no `tool.error` or `method.error`."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import shutil
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import anyio
import mcp_types as types
import pytest
from anyio.from_thread import start_blocking_portal
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from mcp.shared.exceptions import MCPError
from mcp_types import methods
from pydantic import TypeAdapter
from structlog.testing import capture_logs
from support import ERAS, connect, deployment_for, write_skill
from wire import clean_environ, legacy_handshake, running, tool_payload

from skill_mcp.confirm import payload_hash
from skill_mcp.run_tool import RunService
from skill_mcp.schemas import TOOLS_BY_NAME
from skill_mcp.spent import NONCE_PATTERN

INVALID_PARAMS = -32602
MODULE = (sys.executable, "-m", "skill_mcp")
SECRET = "fuzz-secret"
KEY = hashlib.sha256(SECRET.encode()).digest()
_RAW = TypeAdapter(dict[str, Any])
_FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
CALL_SECONDS = 20

ALPHA = """\
name: alpha
description: The alpha skill.
mcp-host:
  version: 1
  run:
    - script: scripts/go.py
      interpreter: python3
      env: [API_KEY]
      timeout: 5
    - script: scripts/web.js
      interpreter: constructor
"""
ALPHA_FILES = {
    "scripts/go.py": "print('ran')\n",
    "scripts/web.js": "1\n",
    "references/guide.md": "# Guide\n",
    "docs/sub/deep.txt": "deep\n",
    "odd name.md": "odd\n",
    "café.md": "café\n",
    "blob.bin": b"\xff\xfe\x00A",
}


# --- strategies -----------------------------------------------------------------------------------------------

# Strings that reach the corners: lone surrogates, NUL, controls, huge, and the server's own words.
_ODD_TEXT = st.text(alphabet=st.characters(codec=None), max_size=40)
_WORDS = st.sampled_from([
    "", " ", "alpha", "beta", "Beta", "alpha/", "../alpha", "SKILL.md", "scripts/go.py", "scripts/web.js", "scripts",
    "references/guide.md", "odd name.md", "café.md", "blob.bin", "docs", "docs/sub", "\x00", "\ud800", "\udfff",
    "%", "%2e%2e", "a\\b", "/etc/passwd", ".", "..", "x" * 5000, "é" * 1025, "skill_list", "skill_run", "0", "-1",
    "1e400", "null", "constructor", "__proto__", "toString", "skmcp.token.v1.", "skmcp.state.v1.",
])
_STRING = _WORDS | _ODD_TEXT
_NUMBER = st.sampled_from([
    0, -0.0, 1, -1, 2**31, 2**53 + 1, 2**63, -(2**63) - 1, 2**64, 10**30, 1.5, 1e308, -1e308, 5e-324, 2.2250738585072014e-308,
]) | st.integers() | st.floats(allow_nan=False, allow_infinity=False)
_SCALAR = st.none() | st.booleans() | _NUMBER | _STRING
JSON = st.recursive(
    _SCALAR,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_STRING, inner, max_size=4),
    max_leaves=10,
)


def mostly(usual: st.SearchStrategy[Any], other: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """`usual` about three times in four, so that generated calls get past the first check often enough."""
    return st.one_of(usual, usual, usual, other)


def _nested(depth: int, inner: Any) -> Any:
    for _ in range(depth):
        inner = [inner] if depth % 2 else {"a": inner}
    return inner


# The in-process client cannot serialize past 255 levels; deeper nesting goes over the wire below.
DEEP = st.builds(_nested, st.integers(min_value=50, max_value=120), _SCALAR)
ANY = JSON | DEEP


_META = st.dictionaries(_STRING | st.sampled_from(["progressToken", "io.modelcontextprotocol/clientCapabilities"]), ANY,
                        max_size=3)
_WITH_META = st.builds(lambda params, meta: {**params, "_meta": meta}, st.dictionaries(_STRING, ANY, max_size=2), _META)
_STRING = _STRING.filter(lambda text: text != "_meta")


# --- a live server per era, shared by every example ---------------------------------------------------------


def _tree() -> Path:
    root = Path(tempfile.mkdtemp(prefix="skill-mcp-fuzz-")).resolve()
    write_skill(root / "skills", "alpha", ALPHA, files=ALPHA_FILES)
    write_skill(root / "skills", "beta", "name: Beta\ndescription: not in the extension\n", files={"b.txt": "b\n"})
    (root / "data").mkdir()
    return root


class Live:
    """One in-process server and client on a portal's event loop; every call is awaited there."""

    def __init__(self, portal: Any, client: Any, root: Path, offered: dict[str, Any]) -> None:
        self.portal, self.client, self.root, self.offered = portal, client, root, offered

    def request(self, method: str, params: Any) -> dict[str, Any]:
        async def send() -> dict[str, Any]:
            # Past the session's model dump, which refuses lone surrogates and deep nesting a wire carries;
            # the era's _meta envelope is stamped on params that are an object.
            session = self.client.session
            data: dict[str, Any] = {"method": method, "params": params}
            opts: dict[str, Any] = {}
            if isinstance(params, dict):
                envelope: dict[str, Any] = {"method": method, "params": {}}
                session._stamp(envelope, opts)  # headers are the in-process transport's; only _meta is sent
                # A generated _meta keeps the era's envelope (a _meta that is no object goes over the wire below).
                meta = {**params.get("_meta", {}), **envelope["params"].get("_meta", {})}
                data["params"] = {**params, **({"_meta": meta} if meta else {})}
            with anyio.fail_after(CALL_SECONDS):
                raw = await session._dispatcher.send_raw_request(method, data["params"], opts)
            if method in methods.SPEC_CLIENT_METHODS:  # an answer valid for its request, in this era
                methods.validate_server_result(method, session._negotiated_version or "2025-11-25", raw)
            return raw

        return self.portal.call(send)


async def _real_approvals(deployment: Any) -> dict[str, Any]:
    """A confirmation-required answer (its token) and a request state, issued by this deployment's key."""
    arguments = {"name": "alpha", "script": "scripts/go.py", "args": ["a"]}
    service = RunService(deployment)
    async with connect(deployment, "legacy", service.call) as client:
        offered = json.loads((await client.call_tool("skill_run", arguments)).content[0].text)
    assert offered["status"] == "confirmation-required", offered
    async with connect(deployment, "auto", service.call, elicitation_callback=_decline) as client:
        asked = await client.session.call_tool("skill_run", arguments, allow_input_required=True)
    assert isinstance(asked, types.InputRequiredResult), asked
    return {**offered, "requestState": asked.request_state}


async def _decline(context: Any, params: Any) -> types.ElicitResult:
    return types.ElicitResult(action="decline")


# Each era without elicitation (path 3, tokens), and with a client that declares it: path 1 on the handshake era
# (asked, declined), path 2 on 2026-07-28 (inputResponses and requestState).
@pytest.fixture(scope="module", params=[(era, asks) for era in ERAS for asks in (False, True)],
                ids=lambda param: f"{param[0]}-{'elicits' if param[1] else 'tokens'}")
def live(request) -> Iterator[Live]:
    era, asks = request.param
    root = _tree()
    environ = {
        "SKILLS_DIR": str(root / "skills"),
        "PATH": "/usr/bin:/bin",
        "MCP_SKILL_PYTHON": "/usr/bin/python3",
        "MCP_CONFIRM_SECRET": SECRET,
        "MCP_DATA_DIR": str(root / "data"),
        "MCP_SKILL_RUN": json.dumps([{"skill": "alpha", "script": "scripts/go.py", "env": ["API_KEY"]},
                                     {"skill": "alpha", "script": "scripts/web.js"}]),
        "API_KEY": "k",
    }
    deployment = deployment_for(environ)
    try:
        with start_blocking_portal() as portal:
            offered = portal.call(_real_approvals, deployment)
            service = RunService(deployment)  # same key and spent store as the services that issued them
            callback = {"elicitation_callback": _decline} if asks else {}
            with portal.wrap_async_context_manager(connect(deployment, era, service.call, **callback)) as client:
                yield Live(portal, client, root, offered)
    finally:
        shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="module")
def offered(live: Live) -> dict[str, Any]:
    """A real confirmation-required answer of this deployment, with a real requestState."""
    return live.offered


# --- the property every call must hold ------------------------------------------------------------------------


@contextmanager
def no_internal_error() -> Iterator[None]:
    with capture_logs() as logs:
        yield
    internal = [entry for entry in logs if entry["event"] in ("tool.error", "method.error")]
    assert internal == [], internal


def _kind(result: dict[str, Any]) -> str:
    """What kind of answer came back (hypothesis's statistics show how often each did)."""
    if result.get("resultType") == "input_required":
        return "input required"
    if "content" not in result:
        return "result"
    text = result["content"][0]["text"]
    status = text.startswith("{") and json.loads(text).get("status", json.loads(text).get("error"))
    return f"tool {'isError' if result.get('isError') else 'result'} {status or text.split(chr(34))[0][:32]}"


def answered(live: Live, method: str, params: Any) -> dict[str, Any] | None:
    """The result, or None for a -32602 with a message; anything else fails the test."""
    with no_internal_error():
        try:
            result = live.request(method, params)
        except MCPError as error:
            assert error.error.code == INVALID_PARAMS, (method, params, error.error)
            assert error.error.message.strip(), (method, params)
            assert "internal error" not in error.error.message
            event("-32602")
            return None
    event(_kind(result))
    if method == "tools/call" and result.get("resultType") != "input_required":
        types.CallToolResult.model_validate(result)
        (item,) = result["content"]
        assert item["type"] == "text" and item["text"].strip()
        assert "internal error" not in item["text"], (params, item["text"])
    return result


# --- tools ----------------------------------------------------------------------------------------------------

_TOOL = st.sampled_from(["skill_list", "skill_load", "skill_file", "skill_run"] * 4 + ["", "Skill_list", "skill_run\x00"])
_PROPERTY = {
    "name": mostly(st.sampled_from(["alpha", "beta"]), ANY),
    "paths": mostly(st.lists(_WORDS, min_size=1, max_size=8), st.lists(_WORDS | ANY, max_size=10) | ANY),
    "script": mostly(st.sampled_from(["scripts/go.py", "scripts/web.js", "blob.bin"]), ANY),
    "args": mostly(st.lists(_STRING, max_size=70), ANY),
    "confirmToken": _STRING | ANY,
}


@st.composite
def _arguments_for(draw: Any, tool: str) -> Any:
    """Mostly the tool's own properties (each any value, a required one now and then missing), sometimes an unknown
    one, sometimes any JSON value at all."""
    schema = TOOLS_BY_NAME.get(tool, {"inputSchema": {"properties": {}, "required": []}})["inputSchema"]
    if draw(st.integers(0, 9)) == 0:
        return draw(ANY)
    required = set(schema.get("required", ()))
    arguments = {
        key: draw(_PROPERTY[key])
        for key in schema["properties"]
        if draw(st.integers(0, 9)) < (9 if key in required else 4)
    }
    if draw(st.integers(0, 9)) == 0:
        arguments[draw(_STRING)] = draw(ANY)
    return arguments


@_FUZZ
@given(data=st.data())
def test_any_tool_arguments_get_a_result_or_a_clear_refusal(live, data):
    tool = data.draw(_TOOL)
    arguments = data.draw(st.none() | _arguments_for(tool))
    params = {"name": tool} if arguments is None else {"name": tool, "arguments": arguments}
    answered(live, "tools/call", params)


@_FUZZ
@given(params=st.dictionaries(_STRING | st.sampled_from(["name", "arguments"]), ANY, max_size=3) | _WITH_META)
def test_any_tools_call_params_get_a_result_or_a_clear_refusal(live, params):
    answered(live, "tools/call", params)


# --- tokens and request states --------------------------------------------------------------------------------


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode("ascii")


def _sealed(prefix: str, claims: Any) -> str:
    body = _b64(json.dumps(claims).encode("utf-8", "surrogatepass"))
    return f"{prefix}{body}.{_b64(hmac.new(KEY, (prefix + body).encode(), hashlib.sha256).digest())}"


def _mutate(real: str, how: str, at: int, piece: str) -> str:
    at = at % (len(real) + 1)
    return {
        "flip": real[:at] + piece + real[at + 1:],
        "insert": real[:at] + piece + real[at:],
        "cut": real[:at],
        "drop": real[:at] + real[at + 1:],
        "swap": ".".join(reversed(real.rsplit(".", 1))),
        "prefix": real.replace("token", "state") if "token" in real else real.replace("state", "token"),
        "pad": real + "=" * (at % 4),
        "upper": real.upper(),
    }[how]


_CLAIM = st.sampled_from(["t", "a", "g", "h", "exp", "n"])
_CLAIM_VALUE = ANY | st.sampled_from(["skill_run", "skill.run", "alpha/scripts/go.py", "A" * 22, 10**20, 2**63])
_FORGED_CLAIMS = st.dictionaries(_CLAIM, _CLAIM_VALUE, max_size=6) | ANY


def _claims(will_run: dict[str, Any], kind: tuple[str, str]) -> st.SearchStrategy[dict[str, Any]]:
    """Claims a holder of the key could seal: each one mostly right (this run's target and payload hash, a future
    expiry, a well-formed nonce), now and then anything at all, or missing, or one too many."""
    right = {
        kind[0]: st.just(kind[1]),
        "g": st.just("alpha/scripts/go.py"),
        "h": st.just(payload_hash(will_run)),
        "exp": st.integers(min_value=2**41, max_value=2**53) | st.sampled_from([0, -1, 2**63, 10**300, True, 1.0e15]),
        "n": st.from_regex(NONCE_PATTERN, fullmatch=True),
    }
    return st.fixed_dictionaries({key: mostly(value, ANY) for key, value in right.items()}) | st.builds(
        lambda claims, extra: {**claims, **extra}, st.fixed_dictionaries({}, optional=right),
        st.dictionaries(_STRING, ANY, max_size=2),
    )


def near_valid(real: str) -> st.SearchStrategy[str]:
    mutated = st.builds(
        _mutate, st.just(real), st.sampled_from(["flip", "insert", "cut", "drop", "swap", "prefix", "pad", "upper"]),
        st.integers(min_value=0), st.sampled_from(["A", "-", "_", "=", ".", "+", "/", "\x00", "\ud800", "é", "..", ""]),
    )
    forged = st.builds(_sealed, st.sampled_from(["skmcp.token.v1.", "skmcp.state.v1."]), _FORGED_CLAIMS)
    return st.just(real) | mutated | forged | _STRING


def sealed_by_the_key(will_run: dict[str, Any]) -> st.SearchStrategy[str]:
    """Tokens and states with a valid MAC over near-valid claims: what gets past the MAC to the claim checks."""
    token = st.builds(_sealed, st.just("skmcp.token.v1."), _claims(will_run, ("t", "skill_run")))
    state = st.builds(_sealed, st.just("skmcp.state.v1."), _claims(will_run, ("a", "skill.run")))
    return token | state


@_FUZZ
@given(data=st.data())
def test_near_valid_tokens_are_rejected_clearly(live, offered, data):
    token = data.draw(near_valid(offered["confirmToken"]) | sealed_by_the_key(offered["preview"]["willRun"]) | ANY)
    args = data.draw(st.sampled_from([["a"], ["b"], [], None]))
    arguments = {"name": "alpha", "script": "scripts/go.py", "confirmToken": token}
    if args is not None:
        arguments["args"] = args
    answered(live, "tools/call", {"name": "skill_run", "arguments": arguments})


@_FUZZ
@given(data=st.data())
def test_near_valid_request_states_and_input_responses_are_answered(live, offered, data):
    real_state = offered["requestState"]
    params: dict[str, Any] = {"name": "skill_run", "arguments": {"name": "alpha", "script": "scripts/go.py", "args": ["a"]}}
    accept = {"confirm": {"action": "accept", "content": {"confirmed": True}}}
    responses = mostly(st.just(accept), st.dictionaries(st.sampled_from(["confirm"]) | _STRING, ANY | st.just(accept["confirm"])))
    params["inputResponses"] = data.draw(mostly(responses, ANY))
    if data.draw(st.booleans()):
        will_run = offered["preview"]["willRun"]
        states = near_valid(real_state) | sealed_by_the_key(will_run)
        params["requestState"] = data.draw(mostly(states, near_valid(offered["confirmToken"]) | ANY))
    answered(live, "tools/call", params)


# --- resources, prompts, the Skills extension, cursors -------------------------------------------------------

_SEGMENT = st.sampled_from([
    "alpha", "beta", "Beta", "SKILL.md", "docs", "sub", "deep.txt", "odd%20name.md", "odd name.md", "caf%C3%A9.md",
    "caf%E9.md", "%ED%A0%80", "%00", "%2F", "%2e%2e", "..", ".", "", "%", "%zz", "%C3", "references", "guide.md",
    "blob.bin", "\x00", "\ud800", "é", "?q", "#f", ":", "@", "x" * 300,
])
_URI = (
    st.builds(lambda scheme, parts: scheme + "/".join(parts),
              st.sampled_from(["skill://", "SKILL://", "skill:/", "skill:", "file://", "skill:///", ""]),
              st.lists(_SEGMENT, max_size=5))
    | _STRING
)


@_FUZZ
@given(uri=_URI | ANY)
def test_any_resource_uri_is_read_or_refused_clearly(live, uri):
    answered(live, "resources/read", {"uri": uri})


@_FUZZ
@given(method=st.sampled_from(["skills/get", "resources/directory/read"]), uri=_URI | ANY,
       cursor=st.none() | _STRING | ANY)
def test_any_extension_uri_and_cursor_are_answered_or_refused_clearly(live, method, uri, cursor):
    params: dict[str, Any] = {"uri": uri}
    if cursor is not None:
        params["cursor"] = cursor
    answered(live, method, params)


_LISTS = ["tools/list", "prompts/list", "resources/list", "resources/templates/list", "skills/list"]


@_FUZZ
@given(method=st.sampled_from(_LISTS), cursor=st.sampled_from(["0", "1", "00", "500", "-1", "²", "1" * 5000])
       | _STRING | ANY)
def test_any_cursor_is_a_page_or_a_clear_refusal(live, method, cursor):
    answered(live, method, {"cursor": cursor})


@_FUZZ
@given(name=st.sampled_from(["alpha", "beta", "Beta", "ALPHA"]) | _STRING | ANY, arguments=st.none() | ANY)
def test_any_prompt_name_is_a_prompt_or_a_clear_refusal(live, name, arguments):
    params: dict[str, Any] = {"name": name}
    if arguments is not None:
        params["arguments"] = arguments
    answered(live, "prompts/get", params)


@_FUZZ
@given(method=st.sampled_from([*_LISTS, "prompts/get", "resources/read", "skills/get", "resources/directory/read"]),
       params=st.dictionaries(_STRING | st.sampled_from(["uri", "cursor", "name", "arguments"]), ANY, max_size=3)
       | _WITH_META)
def test_any_params_of_any_method_are_answered_or_refused_clearly(live, method, params):
    answered(live, method, params)


# --- hand-picked lines over real stdio ------------------------------------------------------------------------
# What the in-process client cannot send: params and _meta that are no object, ids of every JSON type, numbers
# past a double, NaN, nesting past the client's own limit. Each line with a usable id gets one clear answer;
# one without is dropped (and logged by the transport); the session goes on.

MODERN = "2026-07-28"
ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "fuzz", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
# Refusals a client can act on: invalid params, invalid request, parse error, no such method, unsupported version.
CLEAR_CODES = {-32602, -32600, -32700, -32601, -32022}
_NO_ID = object()
_METHODS = ["tools/call", "tools/list", "prompts/get", "prompts/list", "resources/read", "resources/list",
            "resources/templates/list", "skills/list", "skills/get", "resources/directory/read", "ping"]


def _wire_lines() -> list[tuple[Any, bytes]]:
    """(the id an answer must carry, or _NO_ID when none may come; the line)."""
    lines: list[tuple[Any, bytes]] = []
    number = 100

    def request(params: str, method: str = "tools/call", *, id_text: str | None = None, expect: Any = None) -> None:
        nonlocal number
        number += 1
        ident = str(number) if id_text is None else id_text
        params_member = "" if params == "ABSENT" else f',"params":{params}'
        lines.append((number if expect is None else expect,
                      f'{{"jsonrpc":"2.0","id":{ident},"method":"{method}"{params_member}}}'.encode()))

    for method in _METHODS:
        for params in ("null", "[]", '["skill://alpha/SKILL.md"]', '"x"', "5", "true", "1e400", "ABSENT",
                       '{"_meta":5}', '{"_meta":null}', '{"_meta":[]}', '{"_meta":"x"}'):
            request(params, method)
    envelope = "ENVELOPE"  # replaced per era: the 2026-07-28 envelope, or nothing on the handshake era
    for arguments in ('{"name":1e400}', '{"name":NaN}', '{"name":-Infinity}', '{"name":' + "9" * 4000 + "}",
                      '{"name":"alpha","paths":[1e308,-0.0,5e-324]}', '{"name":"alpha","script":"scripts/go.py",'
                      '"args":[' + ",".join(["1e400"] * 3) + "]}", '{"name":"alpha","script":"scripts/go.py",'
                      '"confirmToken":' + "[" * 200 + "]" * 200 + "}"):
        for tool in ("skill_load", "skill_file", "skill_run"):
            request(f'{{"name":"{tool}","arguments":{arguments}{envelope}}}')
    for cursor in ("1e400", "NaN", "-1", "0", '"0"', '"-0"', '"1e3"', '"' + "9" * 5000 + '"', "{}", "[]", "true"):
        for method in ("resources/list", "skills/list", "tools/list", "prompts/list"):
            request(f'{{"cursor":{cursor}{envelope}}}', method)
    for progress in ("1e400", "NaN", "1.5", "-1", "10" + "0" * 40, '""', "{}", "null"):
        request(f'{{"name":"skill_list","_meta":{{"progressToken":{progress}METAENVELOPE}}}}')
    deep = "[" * 5000 + "]" * 5000
    request(f'{{"name":"skill_list","arguments":{deep}{envelope}}}', expect=_ANY_ANSWER)
    # ids: only a string or an integer can be echoed; anything else gets no answer
    for ident in ("true", "false", "null", "{}", "[1]", "1e400", "NaN", "1.5", '"\\ud800"'):
        request("{}", "ping", id_text=ident, expect=_NO_ID)
    for ident in ('""', '"é"', '"' + "i" * 10000 + '"', "-0", "-1", "9" * 30, "-" + "9" * 30):
        request('{"_metaENVELOPE_ONLY}', "ping", id_text=ident, expect=json.loads(ident))
    return lines


_ANY_ANSWER = object()  # an answer or none: the line is too deep to read, so whether its id is read is the SDK's


def _for_era(line: bytes, era: str) -> bytes:
    text = line.decode()
    envelope = json.dumps(ENVELOPE)
    if era == MODERN:
        text = text.replace("ENVELOPE_ONLY}", f'":{envelope}}}').replace("METAENVELOPE", "," + envelope[1:-1])
        text = text.replace("ENVELOPE", f',"_meta":{envelope}')
    else:
        text = text.replace('{"_metaENVELOPE_ONLY}', "{}").replace("METAENVELOPE", "").replace("ENVELOPE", "")
    return text.encode()


@pytest.mark.parametrize("era", ["legacy", MODERN])
def test_hand_picked_raw_lines_are_answered_clearly_and_the_session_goes_on(era):
    root = _tree()
    try:
        with running(MODULE, clean_environ(SKILLS_DIR=str(root / "skills"))) as client:
            if era == "legacy":
                legacy_handshake(client)
            else:
                assert client.request("server/discover", {"_meta": ENVELOPE})["result"]
            before = len(client.stdout_lines)
            lines = _wire_lines()
            for _, line in lines:
                client.send_line(_for_era(line, era))
            meta = {"_meta": ENVELOPE} if era == MODERN else {}
            listed = client.request("tools/list", meta)  # answered in order: every line before it is too
            assert len(listed["result"]["tools"]) == 4, listed
            loaded = client.request("tools/call", {**meta, "name": "skill_load", "arguments": {"name": "alpha"}})
            assert tool_payload(loaded)["name"] == "alpha"
            client.close_stdin()
            assert client.wait() == 0
        answers = [json.loads(line) for line in client.stdout_lines[before:-2]]
        by_id: dict[Any, list[dict[str, Any]]] = {}
        for answer in answers:
            by_id.setdefault(json.dumps(answer.get("id")), []).append(answer)
        for expected, line in lines:
            if expected is _ANY_ANSWER:
                continue
            got = by_id.pop(json.dumps(expected), []) if expected is not _NO_ID else []
            if expected is _NO_ID:
                continue
            assert len(got) == 1, (line[:200], got)
            (answer,) = got
            if "error" in answer:
                assert answer["error"]["code"] in CLEAR_CODES, (line[:200], answer)
                assert answer["error"]["message"].strip()
            else:
                assert "internal error" not in json.dumps(answer["result"]), (line[:200], answer)
        leftover = [answer for answers_ in by_id.values() for answer in answers_]
        assert all(answer.get("error", {}).get("code") in CLEAR_CODES for answer in leftover), leftover
        internal = [event for event in client.log_events() if event["event"] in ("tool.error", "method.error")]
        assert internal == [] and "Traceback" not in client.stderr_text()
    finally:
        shutil.rmtree(root, ignore_errors=True)
