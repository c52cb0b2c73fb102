"""The fast start (issue 7 items 2 and 3): each lever of skill_mcp.startup takes effect on the installed SDK,
and what goes on the wire is validated exactly as without it. Every check runs in a fresh interpreter: the
test process has imported the SDK the ordinary way already."""

from __future__ import annotations

import dataclasses
import inspect
import json
import subprocess
import sys
import threading
import time
from pathlib import Path
from types import ModuleType
from typing import Annotated, Any

import pytest
from pydantic import BaseModel, Field, PydanticUserError
from wire import clean_environ, legacy_handshake, running

from skill_mcp.startup import DEFERRED_MODULES, DEFERRED_REVISIONS, _deferred_builds, fast_imports

ENVELOPE = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientInfo": {"name": "line-client", "version": "0"},
    "io.modelcontextprotocol/clientCapabilities": {},
}
PROBE_SECONDS = 60

# Imports what `serve` imports (fast or the ordinary way), then reports what the levers left behind and
# which SDK models and adapters are still unbuilt after each was used once.
PROBE = """
import dataclasses, gc, json, os, re, sys
os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"  # as `serve` sets it
create_fn = dataclasses._create_fn
from pydantic import BaseModel, TypeAdapter
from pydantic._internal import _config, _model_construction
collect_fields = _model_construction.set_model_fields
defer_property = vars(TypeAdapter)["_defer_build"]
rebuild = vars(BaseModel)["model_rebuild"]
from skill_mcp.startup import DEFERRED_MODULES, DEFERRED_REVISIONS, import_sdk
unavailable = None
collections = sum(generation["collections"] for generation in gc.get_stats())
if sys.argv[1] == "fast":
    unavailable = import_sdk()
else:
    import mcp.server.lowlevel, anyio._backends._asyncio
collections = sum(generation["collections"] for generation in gc.get_stats()) - collections
import skill_mcp.lifecycle, skill_mcp.run_tool, skill_mcp.server
from mcp_types import methods
def waiting(method):  # a dataclass method that compiles itself at its first call
    method = getattr(method, "__wrapped__", method)  # __repr__'s guard against recursion
    return method.__code__.co_filename == sys.modules["skill_mcp.startup"].__file__
sdk_dataclasses = [value for name, module in list(sys.modules.items()) if name.split(".")[0] in ("mcp", "mcp_types", "anyio")
                   for value in vars(module).values() if dataclasses.is_dataclass(value) and isinstance(value, type)
                   and value.__module__ == name]
revisions = [sorted(name for name in DEFERRED_REVISIONS if name in sys.modules)]
methods.parse_client_request("tools/list", "2025-11-25", None)  # a legacy request, through its surface class
revisions.append(sorted(name for name in DEFERRED_REVISIONS if name in sys.modules))
methods.serialize_server_result("tools/call", "2026-07-28", {"content": [], "resultType": "complete"})  # a union
revisions.append(sorted(name for name in DEFERRED_REVISIONS if name in sys.modules))
sdk = [module for name, module in list(sys.modules.items()) if name.split(".")[0] in ("mcp", "mcp_types")]
models = {value for module in sdk for value in vars(module).values()
          if isinstance(value, type) and issubclass(value, BaseModel) and value.__module__ == module.__name__}
adapters = {f"{module.__name__}.{name}": value for module in sdk for name, value in vars(module).items()
            if isinstance(value, TypeAdapter)}
report = {
    "unavailable": unavailable,
    "revisions": revisions,
    "loaded": sorted(name for name in ("mcp.client.client", "mcp.server.mcpserver", "mcp.os.win32.utilities")
                     if name in sys.modules),
    "models": len(models),
    "deferredModels": sum(not model.__pydantic_complete__ for model in models),
    "deferredFields": sum(not isinstance(vars(model)["__pydantic_fields__"], dict) for model in models),
    "deferredAdapters": sorted(name for name, adapter in adapters.items() if not adapter.pydantic_complete),
    "collections": collections,
    "dataclasses": sorted(f"{cls.__module__}.{cls.__qualname__}" for cls in sdk_dataclasses),
    "waitingMethods": sorted({name for cls in sdk_dataclasses for name, method in vars(cls).items()
                              if callable(method) and hasattr(method, "__code__") and waiting(method)}),
    "compiledInits": all(not waiting(vars(cls)["__init__"]) for cls in sdk_dataclasses),
    "createFnRestored": dataclasses._create_fn is create_fn,
    "frozen": gc.get_freeze_count(),
    "gcRestored": gc.isenabled(),
    "pydanticRestored": _config.config_defaults["defer_build"] is False and vars(TypeAdapter)["_defer_build"] is defer_property
        and vars(BaseModel)["model_rebuild"] is rebuild and _model_construction.set_model_fields is collect_fields,
    "deferredLoaded": sorted(name for name in DEFERRED_MODULES if name in sys.modules),
    "standInsLeft": sorted(name for name, module in sys.modules.items() if module is not None and "__file__" not in vars(module)
                           and "__getattr__" in vars(module) and name in DEFERRED_MODULES),
}
def use_each_once():  # pydantic's lazy build looks 5 frames up the stack, always there in a server
    for model in models:
        model.__pydantic_validator__.validate_python
    for adapter in adapters.values():
        adapter.validator.validate_python
use_each_once()
def json_schema(model):
    try:
        return model.model_json_schema()
    except Exception as error:  # a field pydantic cannot describe (a callable)
        return type(error).__name__
def in_order(match):  # equal Literals share typing's cache, so their values come in the first one's order
    return match.group(1) + ", ".join(sorted(match.group(2).split(", "))) + "]"
def shape(model):  # what collecting a model's fields decides; reprs carry addresses
    text = repr([sorted(vars(model)), sorted(model.__class_vars__), sorted(model.__private_attributes__),
                 model.__pydantic_extra_info__, model.__pydantic_fields__, json_schema(model)])
    return re.sub(r"(Literal\\[|'enum': \\[)([^\\]]*)\\]", in_order, re.sub(r"0x[0-9a-f]+", "", text))
report["shapes"] = {f"{model.__module__}.{model.__qualname__}": shape(model) for model in models}
report["unbuiltAfterUse"] = sorted(
    [model.__qualname__ for model in models if not model.__pydantic_complete__]
    + [name for name, adapter in adapters.items() if not adapter.pydantic_complete]
)
import mcp, mcp.server
report["lateInits"] = [mcp.Client.__module__, mcp.server.MCPServer.__module__]
import importlib
report["missingNames"] = [f"{module}.{name}" for module, names in DEFERRED_MODULES.items() for name in names
                          if not hasattr(importlib.import_module(module), name)]
print(json.dumps(report))
"""

# Builds the SDK's streamable HTTP app with OAuth resource-server settings, which calls every deferred name the
# low-level server holds, and reports the app's shape; started fast or the ordinary way.
HTTP_APP = """
import json, os, sys
os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
if sys.argv[1] == "fast":
    from skill_mcp.startup import import_sdk
    assert import_sdk() == []
from mcp.server.lowlevel import Server
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from starlette.applications import Starlette

class Verifier:
    async def verify_token(self, token):
        return None

app = Server("http").streamable_http_app(
    auth=AuthSettings(issuer_url="https://auth.example", resource_server_url="https://mcp.example/mcp",
                      required_scopes=["skills"]),
    token_verifier=Verifier(),
)

import anyio

async def post(body, headers=()):
    # One real request through the transport, by ASGI: host check, Request, JSON-RPC, the SSE or JSON answer.
    server = Server("http")
    plain = server.streamable_http_app()
    body = json.dumps(body).encode()
    scope = {"type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST", "scheme": "http",
             "path": "/mcp", "raw_path": b"/mcp", "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
             "server": ("127.0.0.1", 80), "headers": [(b"host", b"127.0.0.1:8000"), (b"content-type", b"application/json"),
             (b"accept", b"application/json, text/event-stream"), (b"content-length", str(len(body)).encode()), *headers]}
    sent, messages = [], [{"type": "http.request", "body": body, "more_body": False}]

    async def receive():
        if messages:
            return messages.pop(0)
        await anyio.sleep(60)  # the client stays connected until the answer is complete
        return {"type": "http.disconnect"}

    async def send(message):
        sent.append(message)

    async with server.session_manager.run():
        await plain(scope, receive, send)
    return sent[0]["status"], b"".join(message.get("body", b"") for message in sent).decode()

async def post_both_eras():
    status, text = await post({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t", "version": "0"}}})
    envelope = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {}}
    modern_status, modern_text = await post(  # the 2026 era's own entry point
        {"jsonrpc": "2.0", "id": 2, "method": "server/discover", "params": {"_meta": envelope}},
        [(b"mcp-protocol-version", b"2026-07-28"), (b"mcp-method", b"server/discover")])
    return [status, '"protocolVersion":"2025-11-25"' in text], [modern_status, '"supportedVersions"' in modern_text]

initialize, discover = anyio.run(post_both_eras)
print(json.dumps({
    "isStarlette": isinstance(app, Starlette),
    "routes": [[type(route).__name__, route.path, type(getattr(route, "app", None)).__name__] for route in app.routes],
    "middleware": [middleware.cls.__name__ for middleware in app.user_middleware],
    "defaults": [Server.streamable_http_app.__kwdefaults__ or {}, Server.streamable_http_app.__defaults__],
    "initialize": initialize,
    "discover": discover,
}, default=repr))
"""

# A low-level SDK server whose handlers return malformed results; started fast or the ordinary way.
BROKEN_SERVER = """
import os, sys
os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
if sys.argv[1] == "fast":
    from skill_mcp.startup import import_sdk
    assert import_sdk() == []
import anyio
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

async def list_tools(ctx, params):
    return {"tools": [{"name": "no-input-schema"}]}  # inputSchema is required in both eras

async def call_tool(ctx, params):
    return {"content": [{"type": "text"}]}  # a text block without its text

async def main():
    server = Server("broken", version="0", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())

anyio.run(main)
"""

INVALID_RESULT = {"code": -32603, "message": "Handler returned an invalid result"}  # the SDK's own answer


def json_from(script: str, *args: str) -> Any:
    """What `script`, run in a fresh interpreter, prints as JSON."""
    finished = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=PROBE_SECONDS, check=True
    )
    return json.loads(finished.stdout)


def test_every_lever_takes_effect_and_everything_deferred_still_builds() -> None:
    fast, ordinary = json_from(PROBE, "fast"), json_from(PROBE, "ordinary")
    assert fast["unavailable"] == []
    assert fast["loaded"] == []
    assert ordinary["loaded"] == ["mcp.client.client", "mcp.os.win32.utilities", "mcp.server.mcpserver"]
    assert fast["models"] > 400 and fast["deferredModels"] > 0.9 * fast["models"] > 10 * ordinary["deferredModels"]
    assert fast["deferredFields"] > 0.8 * fast["models"] and ordinary["deferredFields"] == 0
    assert fast["shapes"] == {name: ordinary["shapes"][name] for name in fast["shapes"]}  # the client's models aside
    assert "mcp_types._types.server_result_adapter" in fast["deferredAdapters"] and ordinary["deferredAdapters"] == []
    assert fast["collections"] == 0 < 10 < ordinary["collections"]
    assert 30 < len(fast["dataclasses"]) and set(fast["dataclasses"]) < set(ordinary["dataclasses"])
    assert fast["compiledInits"] is fast["createFnRestored"] is True
    assert fast["waitingMethods"] == ["__delattr__", "__eq__", "__hash__", "__repr__", "__setattr__"]
    assert ordinary["waitingMethods"] == []
    assert fast["frozen"] > 50_000 and ordinary["frozen"] == 0
    assert fast["pydanticRestored"] is fast["gcRestored"] is True
    assert fast["unbuiltAfterUse"] == ordinary["unbuiltAfterUse"] == []
    assert fast["lateInits"] == ordinary["lateInits"] == ["mcp.client.client", "mcp.server.mcpserver.server"]
    assert fast["deferredLoaded"] == fast["standInsLeft"] == [] == fast["missingNames"] == ordinary["missingNames"]
    assert ordinary["deferredLoaded"] == sorted(DEFERRED_MODULES)
    legacy, modern = DEFERRED_REVISIONS
    assert fast["revisions"] == [[], [legacy], [legacy, modern]] and ordinary["revisions"] == [[legacy, modern]] * 3


def test_the_deferred_http_transport_still_works_when_called() -> None:
    fast, ordinary = json_from(HTTP_APP, "fast"), json_from(HTTP_APP, "ordinary")
    assert fast == ordinary and fast["isStarlette"] is True
    assert ["AuthenticationMiddleware", "AuthContextMiddleware"] == fast["middleware"]
    assert any(route[0] == "Route" and route[1] == "/mcp" for route in fast["routes"]), fast["routes"]
    assert fast["initialize"] == fast["discover"] == [200, True]


# One UDP datagram over loopback, through the asyncio backend's handler, which calls the deferred socket helper.
UDP_ROUNDTRIP = """
import json, os, sys
os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
if sys.argv[1] == "fast":
    from skill_mcp.startup import import_sdk
    assert import_sdk() == []
import anyio

async def roundtrip():
    async with await anyio.create_udp_socket(local_host="127.0.0.1") as receiver:
        async with await anyio.create_connected_udp_socket("127.0.0.1", receiver.extra(anyio.abc.SocketAttribute.local_port)) as sender:
            await sender.send(b"ping")
            data, (host, port) = await receiver.receive()
            return [data.decode(), host, port == sender.extra(anyio.abc.SocketAttribute.local_port)]

print(json.dumps(anyio.run(roundtrip)))
"""


def test_the_deferred_socket_layer_still_works_when_called() -> None:
    fast, ordinary = json_from(UDP_ROUNDTRIP, "fast"), json_from(UDP_ROUNDTRIP, "ordinary")
    assert fast == ordinary == ["ping", "127.0.0.1", True]


def broken_session(tmp_path: Path, way: str, era: str) -> list[dict]:
    script = tmp_path / "broken_server.py"
    script.write_text(BROKEN_SERVER, encoding="utf-8")
    with running([sys.executable, str(script), way], clean_environ()) as client:
        if era == "legacy":
            meta: dict = {}
            answers = [legacy_handshake(client)["result"]["protocolVersion"]]
        else:
            meta = {"_meta": ENVELOPE}
            answers = [client.request("server/discover", meta)["result"]["supportedVersions"]]
        answers += [
            client.request("tools/list", meta),
            client.request("tools/call", {**meta, "name": "anything", "arguments": {}}),
            client.request("tools/call", {**meta, "name": 5}),
        ]
        client.close_stdin()
        assert client.wait() == 0, client.stderr_text()
    return answers


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
def test_a_malformed_result_is_rejected_exactly_as_without_the_fast_start(tmp_path: Path, era: str) -> None:
    fast = broken_session(tmp_path, "fast", era)
    assert fast == broken_session(tmp_path, "ordinary", era)
    versions, listed, called, malformed = fast
    assert versions == ("2025-11-25" if era == "legacy" else ["2026-07-28"])
    assert (listed["error"], called["error"]) == (INVALID_RESULT, INVALID_RESULT)
    assert malformed["error"] == {"code": -32602, "message": "Invalid request parameters", "data": ""}


def test_the_real_server_reports_no_unavailable_lever(tmp_path: Path) -> None:
    finished = subprocess.run(
        [sys.executable, "-m", "skill_mcp"], stdin=subprocess.DEVNULL, capture_output=True, text=True,
        cwd=tmp_path, env=clean_environ(), timeout=PROBE_SECONDS,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr
    events = [json.loads(line)["event"] for line in finished.stderr.splitlines()]
    assert "boot" in events and "startup.warning" not in events


# What serve imports after import_sdk: the modules it names, then every SDK module skill_mcp uses.
SDK_IMPORTED_LATE = """
import json, pkgutil, sys, importlib
import skill_mcp
from skill_mcp.startup import import_sdk
import_sdk()
before = set(sys.modules)
for module in pkgutil.iter_modules(skill_mcp.__path__):
    if module.name != "__main__":  # which would serve
        importlib.import_module("skill_mcp." + module.name)
from mcp.server.stdio import stdio_server  # transport.py's, imported when it serves
late = sorted(name for name in set(sys.modules) - before if name.split(".")[0] in ("mcp", "mcp_types"))
print(json.dumps(late))
"""


def test_import_sdk_imports_every_sdk_module_skill_mcp_uses() -> None:
    # One imported after it would build its protocol models at once, outside the deferred-models window.
    finished = subprocess.run([sys.executable, "-c", SDK_IMPORTED_LATE], capture_output=True, text=True,
                              env=clean_environ(), timeout=PROBE_SECONDS)
    assert finished.returncode == 0, finished.stderr
    assert json.loads(finished.stdout) == []


# `serve` with stdin at EOF: the garbage collections from its start to each `gc.freeze()`, and what was frozen.
COLLECTIONS_BEFORE_SERVING = """
import gc, json, os, sys
import anyio
from skill_mcp import cli
collections, freezes = [], []
gc.callbacks.append(lambda phase, info: phase == "stop" and collections.append(info["generation"]))
serve, run, freeze = cli.serve, anyio.run, gc.freeze
def counted_serve():
    collections.clear()  # the command line's own parsing may collect
    return serve()
def counted_freeze():
    freeze()
    freezes.append([len(collections), gc.get_freeze_count()])
def counted_run(*args):
    os.write(2, json.dumps({"event": "loop", "freezes": freezes, "collecting": gc.isenabled()}).encode() + b"\\n")
    return run(*args)
cli.serve, anyio.run, gc.freeze = counted_serve, counted_run, counted_freeze
sys.exit(cli.main([]))
"""


def test_serve_imports_with_no_garbage_collection_then_freezes_what_it_imported(tmp_path: Path) -> None:
    finished = subprocess.run(
        [sys.executable, "-c", COLLECTIONS_BEFORE_SERVING], stdin=subprocess.DEVNULL, capture_output=True,
        text=True, cwd=tmp_path, env=clean_environ(), timeout=PROBE_SECONDS,
    )  # fmt: skip
    assert finished.returncode == 0, finished.stderr
    loop = next(json.loads(line) for line in finished.stderr.splitlines() if '"event": "loop"' in line)
    (sdk_collections, sdk_frozen), (collections, frozen) = loop["freezes"]  # import_sdk's, then serve's
    assert sdk_collections == collections == 0 and loop["collecting"] is True
    assert frozen > sdk_frozen > 50_000  # the SDK's objects, then ours


# As if a pydantic upgrade gave the field collector another parameter: the lever must step aside.
CHANGED_COLLECTOR = """
import json, os
os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
from pydantic._internal import _model_construction
collect = _model_construction.set_model_fields
def set_model_fields(cls, config_wrapper, ns_resolver, namespace_info=None, extra=None):
    collect(cls, config_wrapper, ns_resolver, namespace_info)
_model_construction.set_model_fields = set_model_fields
from skill_mcp.startup import import_sdk
unavailable = import_sdk()
import mcp_types
from mcp_types import methods
methods.parse_client_request("tools/list", "2025-11-25", None)
print(json.dumps([unavailable, isinstance(vars(mcp_types.Tool)["__pydantic_fields__"], dict)]))
"""


def test_the_fields_lever_steps_aside_for_a_collector_it_does_not_know() -> None:
    assert json_from(CHANGED_COLLECTOR) == [["deferred-fields"], True]


def plugin_environ(tmp_path: Path) -> tuple[dict[str, str], Path]:
    """An installed pydantic plugin (an entry point in the `pydantic` group) that leaves a marker when loaded."""
    site, marker = tmp_path / "site", tmp_path / "plugin-loaded"
    (site / "spy_plugin-1.0.dist-info").mkdir(parents=True)
    (site / "spy_plugin-1.0.dist-info" / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: spy-plugin\nVersion: 1.0\n"
    )
    (site / "spy_plugin-1.0.dist-info" / "entry_points.txt").write_text("[pydantic]\nspy = spy_plugin:plugin\n")
    (site / "spy_plugin.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n"
        "class plugin:\n    def new_schema_validator(*args, **kwargs):\n        return None, None, None\n"
    )
    return clean_environ(PYTHONPATH=str(site)), marker


def test_serve_loads_no_pydantic_plugin(tmp_path: Path) -> None:
    environ, marker = plugin_environ(tmp_path)
    with running([sys.executable, "-m", "skill_mcp"], environ, cwd=str(tmp_path)) as client:
        legacy_handshake(client)
        assert client.request("tools/list")["result"]["tools"]
        client.close_stdin()
        assert client.wait() == 0
    assert not marker.exists()
    # The control: any other pydantic user in that environment does load it.
    model = "from pydantic import BaseModel\nclass Probe(BaseModel):\n    x: int\nProbe(x=1)\n"
    subprocess.run([sys.executable, "-c", model], env=environ, timeout=PROBE_SECONDS, check=True, capture_output=True)
    assert marker.exists()


# Models created while fields are deferred (as the SDK's are), next to the same models created the ordinary way.
DEFERRED_FIELD_MODELS = """
from __future__ import annotations
from typing import Annotated, ClassVar, Generic, TypeVar
from pydantic import BaseModel, Field, PrivateAttr
Value = TypeVar("Value")

class Plain(BaseModel):
    name: str
    size: int = Field(default=0, alias="sizeInBytes")

class Child(Plain):
    note: str | None = None

class AssignedPrivate(BaseModel):
    name: str
    _token = "secret"

class AnnotatedPrivate(BaseModel):
    name: str
    _token: Annotated[str, PrivateAttr(default="secret")]

class WithClassVar(BaseModel):
    kind: ClassVar[str] = "plain"
    name: str

class Box(BaseModel, Generic[Value]):
    value: Value

IntBox = Box[int]
"""


def models_in(window: bool) -> dict:
    module = ModuleType("deferred_field_models" if window else "ordinary_models")
    sys.modules[module.__name__] = module  # a parametrized generic looks its module up
    try:
        if window:
            with _deferred_builds(set()):
                exec(DEFERRED_FIELD_MODELS, vars(module))
        else:
            exec(DEFERRED_FIELD_MODELS, vars(module))
    finally:
        del sys.modules[module.__name__]
    return {
        name: value
        for name, value in vars(module).items()
        if isinstance(value, type) and issubclass(value, BaseModel) and value is not BaseModel
    }


def test_deferred_fields_wait_for_their_first_reader_unless_creation_needs_them() -> None:
    deferred, ordinary = models_in(window=True), models_in(window=False)
    collected = sorted(name for name, model in deferred.items() if isinstance(vars(model)["__pydantic_fields__"], dict))
    assert collected == ["AnnotatedPrivate", "AssignedPrivate", "Box", "Plain"]  # read to create Child, Box[int]
    assert deferred["WithClassVar"].__pydantic_extra_info__ is None  # read before the fields: it is collected too
    assert deferred["Child"].model_fields.keys() == {"name", "size", "note"}
    for name, model in ordinary.items():
        twin = deferred[name]
        assert repr(twin.model_fields) == repr(model.model_fields), name
        assert twin.__private_attributes__.keys() == model.__private_attributes__.keys(), name
        assert twin.__class_vars__ == model.__class_vars__, name
        assert twin.model_json_schema() == model.model_json_schema(), name
    child = deferred["Child"].model_validate({"name": "a", "sizeInBytes": 3})
    assert child.model_dump(by_alias=True) == {"name": "a", "sizeInBytes": 3, "note": None}
    for name in ("AssignedPrivate", "AnnotatedPrivate"):
        assert deferred[name](name="x")._token == "secret"
    with_class_var = deferred["WithClassVar"](name="x")
    with pytest.raises(AttributeError, match="ClassVar"):
        with_class_var.kind = "other"
    assert deferred["IntBox"](value="7").value == 7


def test_deferred_fields_are_collected_once_while_another_thread_waits() -> None:
    def slowly(value: int) -> int:  # evaluated with the annotations, when the fields are collected
        time.sleep(0.3)
        return value

    with _deferred_builds(set()):

        class Slow(BaseModel):
            size: int = 5
            limit: Annotated[int, Field(ge=slowly(0))] = 1

    readers = [threading.Thread(target=lambda: Slow.model_fields) for _ in range(2)]
    for reader in readers:
        reader.start()
        time.sleep(0.1)  # the second one reads while the first collects
    for reader in readers:
        reader.join()
    # A second collection, racing the first, would find `size`'s default already taken off the class.
    assert Slow().size == 5 and not Slow.model_fields["size"].is_required()


def test_an_error_in_deferred_fields_is_raised_at_each_use_and_never_falls_back_to_the_parent() -> None:
    class Parent(BaseModel):
        name: str

    with _deferred_builds(set()):

        class Broken(Parent):
            size: int
            unannotated = 3

    for _ in range(2):
        with pytest.raises(PydanticUserError, match="non-annotated attribute"):
            Broken.model_fields
    with pytest.raises(PydanticUserError):
        Broken(name="a", size=1)


# Dataclasses of every kind whose methods the deferred-methods lever leaves to their first call.
DEFERRED_METHOD_DATACLASSES = """
from dataclasses import dataclass, field

@dataclass(frozen=True)
class Point:
    x: int
    y: int = 0

@dataclass(order=True)
class Version:
    major: int
    minor: int = field(default=0, compare=True)
    label: str = field(default="", compare=False)

@dataclass
class Node:
    name: str
    children: list = field(default_factory=list)

@dataclass(unsafe_hash=True)
class Key:
    value: str

@dataclass(eq=False)
class Handle:
    number: int

class Labelled(Point):  # not a dataclass: inherits every method
    def label(self):
        return f"{self!r}!"

@dataclass(frozen=True)
class Point3(Point):
    z: int = 0

class Hashed(Point):  # holds its parent's method too
    __hash__ = Point.__hash__
"""


def dataclasses_in(window: bool) -> dict[str, type]:
    module = ModuleType("deferred_method_dataclasses" if window else "ordinary_dataclasses")
    sys.modules[module.__name__] = module  # dataclasses look a string annotation's module up
    try:
        if window:
            with fast_imports():
                exec(DEFERRED_METHOD_DATACLASSES, vars(module))
        else:
            exec(DEFERRED_METHOD_DATACLASSES, vars(module))
    finally:
        del sys.modules[module.__name__]
    return {name: value for name, value in vars(module).items() if isinstance(value, type) and name != "field"}


def behaviour(classes: dict[str, type]) -> list:
    """What each generated method does, in a form that compares across two copies of the same classes."""
    Point, Version, Node, Key, Handle, Labelled, Point3 = (classes[name] for name in (
        "Point", "Version", "Node", "Key", "Handle", "Labelled", "Point3"))
    node = Node("root")
    node.children.append(node)  # repr's guard against recursion
    errors = []
    for change in (lambda p: setattr(p, "x", 5), lambda p: delattr(p, "y"), lambda p: setattr(p, "new", 1)):
        for point in (Point(1), Point3(1)):
            try:
                change(point)
            except Exception as error:  # noqa: BLE001 - any refusal counts; its type is what is compared
                errors.append(f"{type(error).__name__}: {error}")
    handle = Handle(1)
    return [
        repr(Point(1, 2)), Point(1, 2) == Point(1, 2), Point(1, 2) != Point(1, 3), Point(1) == (1, 0),
        hash(Point(1, 2)) == hash((1, 2)), errors,
        repr(sorted([Version(2), Version(1, 5, "b"), Version(1, 5, "a")])), Version(1) < Version(1, 1) <= Version(1, 1),
        Version(1, 1, "x") == Version(1, 1, "y"), Version(2) > Version(1) >= Version(1),
        repr(node), node == Node("root", [node]),
        hash(Key("a")) == hash(("a",)), Key("a") == Key("a"), repr(Key("a")),
        handle == Handle(1), handle == handle, repr(handle),
        Labelled(3).label(), Labelled(3) == Labelled(3), Labelled(3) == Point(3), hash(Labelled(3)) == hash((3, 0)),
        repr(Point3(1, 2, 3)), Point3(1, 2, 3) == Point(1, 2), hash(Point3(1, 2, 3)) == hash((1, 2, 3)),
        hash(classes["Hashed"](1, 2)) == hash((1, 2)),
        [(name, cls.__doc__) for name, cls in classes.items()],
    ]


def method_names(classes: dict[str, type]) -> dict[str, list]:
    """Each generated method's names and signature, as its class holds it."""
    return {
        f"{name}.{attribute}": [
            method.__name__, method.__qualname__, method.__module__.split("_")[0],
            str(inspect.signature(method)),
        ]
        for name, cls in classes.items()
        for attribute, method in vars(cls).items()
        if callable(method) and attribute.startswith("__") and attribute != "__class__"
    }


def test_dataclass_methods_compile_at_their_first_call_and_behave_as_ever() -> None:
    waiting, ordinary = dataclasses_in(window=True), dataclasses_in(window=False)
    before, expected = method_names(waiting), method_names(ordinary)
    assert list(inspect.signature(waiting["Point"].__eq__).parameters) == ["self", "arguments", "keywords"]
    compiled_at_once = {key for key, names in before.items() if names[3] == expected[key][3]}
    assert compiled_at_once == {f"{name}.__init__" for name in ("Point", "Version", "Node", "Key", "Handle", "Point3")}
    assert {key: names[:3] for key, names in before.items()} == {key: [*names[:2], "deferred"] for key, names in expected.items()}
    assert behaviour(waiting) == behaviour(ordinary)
    # Once called, each method is the one Python compiles, named as ever, in its class; and still behaves so.
    assert method_names(waiting) == {key: [*names[:2], "deferred", names[3]] for key, names in expected.items()}
    assert behaviour(waiting) == behaviour(ordinary)
    wrapped = [classes[name].__repr__.__wrapped__.__qualname__ for classes in (waiting, ordinary) for name in ("Point", "Node")]
    assert wrapped == ["__create_fn__.<locals>.__repr__"] * 4  # inside the guard against recursion, which still wraps it
    # ... and calls it directly, with no frame in between (a nested repr reaches as deep as ever)
    assert [cell.cell_contents for cell in waiting["Node"].__repr__.__closure__].count(waiting["Node"].__repr__.__wrapped__) == 1


def is_waiting(method: Any) -> bool:
    return method.__code__.co_filename == sys.modules["skill_mcp.startup"].__file__


def test_a_dataclass_method_first_called_through_a_subclass_compiles_in_every_class_that_holds_it() -> None:
    classes = dataclasses_in(window=True)
    Point, Labelled, Hashed = classes["Point"], classes["Labelled"], classes["Hashed"]
    assert is_waiting(Point.__hash__) and Hashed.__hash__ is Point.__hash__
    assert Labelled(3) == Labelled(3) and hash(Hashed(3)) == hash((3, 0))
    assert "__eq__" not in vars(Labelled) and not is_waiting(vars(Point)["__eq__"])
    assert Hashed.__hash__ is Point.__hash__ and not is_waiting(Point.__hash__)
    classes = dataclasses_in(window=True)  # the other way round: the method is compiled once, for both
    assert hash(classes["Point"](3)) == hash(classes["Hashed"](3)) and classes["Hashed"].__hash__ is classes["Point"].__hash__
    with pytest.raises(dataclasses.FrozenInstanceError, match="cannot assign to field 'x'"):
        Point.__setattr__(Point(1), name="x", value=2)  # arguments by keyword reach the method too


# As if a Python upgrade gave dataclasses' method factory another parameter: the lever must step aside.
CHANGED_METHOD_FACTORY = """
import dataclasses, json, os
os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
create_fn = dataclasses._create_fn
def changed(name, args, body, *, globals=None, locals=None, return_type=dataclasses.MISSING, decorators=()):
    return create_fn(name, args, body, globals=globals, locals=locals, return_type=return_type)
dataclasses._create_fn = changed
from skill_mcp.startup import import_sdk
unavailable = import_sdk()
from mcp.server.caching import CacheHint
print(json.dumps([unavailable, CacheHint.__eq__.__qualname__, str(CacheHint() == CacheHint())]))
"""


def test_the_methods_lever_steps_aside_for_a_method_factory_it_does_not_know() -> None:
    assert json_from(CHANGED_METHOD_FACTORY) == [["deferred-methods"], "CacheHint.__eq__", "True"]


def test_fast_imports_nest_and_restore_what_they_replaced() -> None:
    import dataclasses
    import gc

    create_fn, collecting = dataclasses._create_fn, gc.isenabled()
    with fast_imports():
        outer = dataclasses._create_fn
        with fast_imports():
            assert dataclasses._create_fn is outer and not gc.isenabled()
        assert dataclasses._create_fn is outer is not create_fn and not gc.isenabled()
    assert dataclasses._create_fn is create_fn and gc.isenabled() is collecting
    gc.unfreeze()
