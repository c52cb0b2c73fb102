"""MCP wiring (SPEC §5, §8): connects protocol methods to the handlers of tools.py, surfaces.py and
skills_ext.py, both eras.

Nothing here decides what is served; it only translates between the SDK's models and
the handlers' plain values, and keeps every exception off the wire.
"""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from dataclasses import replace
from typing import Any

import anyio
import mcp_types as types
from mcp.server.caching import CacheHint
from mcp.server.context import ServerRequestContext
from mcp.server.lowlevel import Server
from mcp.shared.exceptions import MCPError
from mcp_types import methods
from pydantic import ValidationError

from . import skills_ext, surfaces
from .deployment import Deployment
from .limits import MAX_SKILLS_DEFAULT
from .logs import get_logger
from .results import BadRequest, ToolFailure, failure_result, minified, text_result
from .schemas import TOOLS, TOOLS_BY_NAME, params_violation, schema_violation, sdk_params_violation
from .text import quoted
from .tools import BOOT_TIME_TOOLS, READ_TOOLS
from .version import VERSION

_SDK_BARE_INVALID_PARAMS = "Invalid request parameters"
ENVELOPE_MODEL_METHOD = "tools/list"  # in every revision; its params are the envelope and an optional cursor
EXTENSION_WORKERS = 4  # Skills-extension answers computed at once (each may hash 16 MiB per skill)
# skill_list's answer and skill_load's kept rendered: all of a default deployment's (an LRU one short would miss
# on every call of a client that loads them in turn)
RENDERED_ANSWERS_KEPT = MAX_SKILLS_DEFAULT + 1
RESOURCE_PAGES_KEPT = 32  # resources/list pages kept built: 16,000 resources, about 8 MiB
# The SDK commits a connection to the era of its first request: after this refusal, it is the handshake era's.
BEFORE_THE_SESSION = (
    "the session has not begun: send initialize, then notifications/initialized, before any other request "
    "(this connection now serves the handshake protocol; a 2026-07-28 client opens a new connection and "
    "puts the _meta envelope on every request, the first included)"
)
# tools/call arguments that are not an object, which the SDK's model refuses: handed to call_tool this way
_NON_OBJECT_ARGUMENTS: ContextVar[Any] = ContextVar("non_object_arguments", default=None)
RunTool = Callable[[ServerRequestContext[Any], Any], Awaitable[dict[str, Any] | types.InputRequiredResult]]


def build_server(deployment: Deployment, run_tool: RunTool) -> Server[Any]:
    log = get_logger()
    tool_list = {"tools": list(TOOLS), "resultType": "complete"}  # validated on its way out, as text_result's

    def answer(method: str, action: Callable[[], Any]) -> Any:
        """`action()`'s value for `method`; bad input becomes -32602, anything else -32603, logged (§5.3)."""
        try:
            return action()
        except BadRequest as bad:
            raise MCPError(code=types.INVALID_PARAMS, message=str(bad)) from None
        except Exception as error:  # noqa: BLE001 - the handshake-era SDK would send code 0 with the exception text
            log.error("method.error", method=method, errorType=type(error).__name__)
            raise MCPError(
                code=types.INTERNAL_ERROR, message=f"an internal error occurred in {method}; see the server log"
            ) from None

    async def list_tools(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> dict[str, Any]:
        answer("tools/list", lambda: surfaces.refuse_cursor(params and params.cursor))
        return tool_list

    # A boot-time answer is rendered once while it is among the last RENDERED_ANSWERS_KEPT asked for: rendering again
    # costs little, keeping every skill's could cost 1.5 MB each (a 256 KiB body of control characters, escaped).
    @functools.lru_cache(maxsize=RENDERED_ANSWERS_KEPT)
    def boot_time_answer(tool: str, skill: str | None) -> str:
        arguments = {} if skill is None else {"name": skill}  # what passed the schema: at most a skill name
        return minified(READ_TOOLS[tool](deployment, arguments))

    async def call_tool(
        ctx: ServerRequestContext[Any], params: types.CallToolRequestParams
    ) -> dict[str, Any] | types.InputRequiredResult:
        name = params.name
        if name not in TOOLS_BY_NAME:
            hint = f"This server's tools are {', '.join(TOOLS_BY_NAME)}; tools/list describes them."
            return failure_result(ToolFailure(f"unknown tool {quoted(name)}", hint))
        arguments = _NON_OBJECT_ARGUMENTS.get()
        if arguments is None:
            arguments = params.arguments or {}
        try:
            if name == "skill_run":  # it checks its own arguments (§9.1 step 1) and logs a refusal
                return await run_tool(ctx, arguments)
            if (violation := schema_violation(name, arguments)) is not None:
                return text_result(violation, is_error=True)
            if name not in BOOT_TIME_TOOLS:
                return text_result(minified(READ_TOOLS[name](deployment, arguments)))
            return text_result(boot_time_answer(name, arguments.get("name")))
        except ToolFailure as failure:
            return failure_result(failure)
        except Exception as error:  # noqa: BLE001 - the low-level SDK would turn it into a bare JSON-RPC error
            log.error("tool.error", tool=name, errorType=type(error).__name__)
            return text_result(f"an internal error occurred in {name}; nothing more is known here, see the server log", is_error=True)

    async def list_prompts(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> types.ListPromptsResult:
        answer("prompts/list", lambda: surfaces.refuse_cursor(params and params.cursor))
        return types.ListPromptsResult.model_validate({"prompts": surfaces.prompts(deployment)})

    async def get_prompt(ctx: ServerRequestContext[Any], params: types.GetPromptRequestParams) -> types.GetPromptResult:
        return answer("prompts/get", lambda: types.GetPromptResult.model_validate(surfaces.prompt(deployment, params.name)))

    # The listing comes from the boot-time manifest, so a page is built, validated and dumped once while it is
    # among the last RESOURCE_PAGES_KEPT asked for (a few MiB, where every page of a huge catalog could take GiBs);
    # a plain dict spares the SDK a model dump per request, and it still validates every answer on its way out.
    @functools.lru_cache(maxsize=RESOURCE_PAGES_KEPT)
    def resource_page(cursor: str | None) -> dict[str, Any]:
        def page() -> dict[str, Any]:
            resources, next_cursor = surfaces.resources_page(deployment, cursor)
            result = types.ListResourcesResult.model_validate({"resources": resources, "nextCursor": next_cursor})
            return result.model_dump(by_alias=True, mode="json", exclude_none=True)

        return answer("resources/list", page)

    async def list_resources(ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None) -> dict[str, Any]:
        return resource_page(params.cursor if params else None)

    async def list_templates(
        ctx: ServerRequestContext[Any], params: types.PaginatedRequestParams | None
    ) -> types.ListResourceTemplatesResult:
        answer("resources/templates/list", lambda: surfaces.refuse_cursor(params and params.cursor))
        return types.ListResourceTemplatesResult.model_validate({"resourceTemplates": [surfaces.RESOURCE_TEMPLATE]})

    async def read_resource(ctx: ServerRequestContext[Any], params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
        uri = str(params.uri)
        return answer("resources/read", lambda: types.ReadResourceResult.model_validate(surfaces.read_resource(deployment, uri)))

    server: Server[Any] = Server(
        "skill-mcp",
        version=VERSION,
        instructions=surfaces.instructions(deployment),
        on_list_tools=list_tools,
        on_call_tool=call_tool,
        on_list_prompts=list_prompts,
        on_get_prompt=get_prompt,
        on_list_resources=list_resources,
        on_list_resource_templates=list_templates,
        on_read_resource=read_resource,
        cache_hints={"tools/list": CacheHint()},  # the SDK's defaults (immediately stale, private), for a dict
    )
    server.middleware.append(_explaining_invalid_params(server))
    _register_skills_extension(server, deployment, answer)
    return server


def _explaining_invalid_params(server: Server[Any]) -> Callable[..., Awaitable[Any]]:
    """The SDK refuses malformed params with a bare "Invalid request parameters"; §5.3 asks for a message that
    names the field and the rule broken, and for tool arguments that are not an object, the tool's isError result."""

    async def explain(ctx: ServerRequestContext[Any], call_next: Callable[..., Awaitable[Any]]) -> Any:
        arguments = ctx.params.get("arguments") if ctx.method == "tools/call" and isinstance(ctx.params, dict) else None
        if arguments is not None and not isinstance(arguments, dict):
            # The SDK would refuse the whole call; §5.3 wants the tool's own isError answer, so the tool gets them.
            token = _NON_OBJECT_ARGUMENTS.set(arguments)
            try:
                return await explain(replace(ctx, params={**ctx.params, "arguments": None}), call_next)
            finally:
                _NON_OBJECT_ARGUMENTS.reset(token)
        try:
            return await call_next(ctx)
        except ValidationError:
            errors = _params_errors(server, ctx.method, ctx.protocol_version, ctx.params)
            if errors is None:  # the params pass: the error is not the client's to fix
                raise
            raise MCPError(code=types.INVALID_PARAMS, message=sdk_params_violation(ctx.method, ctx.params, errors)) from None
        except MCPError as error:
            # The SDK's one other use of those words: a request before the session began, whatever its params.
            if (error.error.code, error.error.message) != (types.INVALID_PARAMS, _SDK_BARE_INVALID_PARAMS):
                raise
            raise MCPError(code=types.INVALID_PARAMS, message=BEFORE_THE_SESSION) from None

    return explain


def _params_errors(server: Server[Any], method: str, version: str, params: Any) -> list[Any] | None:
    """The SDK's two checks of a request's params (its protocol revision's model, then the handler's), run
    again on a failure: the errors, located in the params, or None when the params pass both."""
    try:
        if method in methods.SPEC_CLIENT_METHODS:
            methods.validate_client_request(method, version, params)
        else:
            _validate_envelope(version, params)
        if (entry := server.get_request_handler(method)) is not None:
            entry.params_type.model_validate({} if params is None else params, by_name=False)
    except ValidationError as error:
        errors = error.errors(include_url=False, include_input=False)
        # The revision's check validates the whole request, so its locations start at "params".
        return [{**each, "loc": tuple(each["loc"])[1:]} if each["loc"][:1] == ("params",) else each for each in errors]
    except (KeyError, ValueError):  # a method or revision the SDK does not know: nothing to explain
        return None
    return None


def _validate_envelope(version: str, params: Any) -> None:
    """A custom method's `_meta`, checked as a listing's would be on `version`: the SDK checks only that a
    2026-07-28 envelope is there, and would let `clientInfo: 5` through. Raises pydantic's ValidationError."""
    meta = params.get("_meta") if isinstance(params, dict) else None
    methods.validate_client_request(ENVELOPE_MODEL_METHOD, version, None if meta is None else {"_meta": meta})


class ExtensionParams(types.RequestParams):
    """Whatever the client sent: schemas.params_violation checks it, and says which field is wrong and how."""

    uri: Any = None
    cursor: Any = None


def _register_skills_extension(
    server: Server[Any], deployment: Deployment, answer: Callable[[str, Callable[[], Any]], Any]
) -> None:
    """Declare the Skills extension (the SDK carries it on 2026-07-28 only) and answer its methods on both eras;
    `answer(method, compute)` applies the error convention: bad input -32602, anything else -32603."""

    # Their own few worker threads: at most EXTENSION_WORKERS answers hash at once, however many are asked for,
    # and anyio's shared pool of 40 stays free for the SDK.
    workers = anyio.CapacityLimiter(EXTENSION_WORKERS)

    def handler(method: str, compute: Callable[[Any], dict[str, Any]]) -> Any:
        async def handle(ctx: Any, params: ExtensionParams | None) -> dict[str, Any]:
            _validate_envelope(ctx.protocol_version, ctx.params)  # refused with its reasons by _explaining_invalid_params
            given = {name: value for name in ("uri", "cursor") if (value := getattr(params, name, None)) is not None}

            def checked() -> dict[str, Any]:
                if (problem := params_violation(method, given)) is not None:
                    raise BadRequest(problem)
                return compute(given)

            # Off the event loop: one answer may hash 16 MiB per skill.
            return await anyio.to_thread.run_sync(answer, method, checked, limiter=workers)

        return handle

    server.extensions = {**server.extensions, skills_ext.EXTENSION_ID: {"directoryRead": True}}
    server.add_request_handler(
        "skills/list", ExtensionParams, handler("skills/list", lambda given: skills_ext.skills_page(deployment, given.get("cursor")))
    )
    server.add_request_handler(
        "skills/get", ExtensionParams, handler("skills/get", lambda given: skills_ext.get_skill(deployment, given["uri"]))
    )
    server.add_request_handler(
        "resources/directory/read",
        ExtensionParams,
        handler(
            "resources/directory/read",
            lambda given: skills_ext.directory_page(deployment, given["uri"], given.get("cursor")),
        ),
    )
