"""The baseline: a bare low-level SDK server over stdio with 4 dummy tools.

Same SDK, same `Server` class, same stdio transport as skill-mcp and nothing else, so the
benchmark's ratios show what skill-mcp adds on top of the SDK. Every tool answers a tiny JSON.
With `--resources N` it also answers `resources/list` with one prebuilt page of N resources.
With `--levers` it imports the SDK through skill-mcp's `startup.import_sdk()` (skill_mcp on PYTHONPATH): the
cold start any server on this SDK could reach with those levers and nothing of its own.
"""

from __future__ import annotations

import os
import sys
from typing import Any

if "--levers" in sys.argv:  # before the SDK's first import, as `skill-mcp serve` does
    os.environ["PYDANTIC_DISABLE_PLUGINS"] = "__all__"
    from skill_mcp.startup import import_sdk

    import_sdk()

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server
from trees import resource_page

_SCHEMA = {"type": "object", "properties": {}, "additionalProperties": True}
TOOLS = [types.Tool(name=f"dummy_{n}", description=f"Dummy tool {n}.", input_schema=_SCHEMA) for n in range(4)]


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text='{"ok":true}')])


async def main() -> None:
    # `--resources N` also serves one page of N resources, built once: what the SDK alone spends on a page.
    extra: dict[str, Any] = {}
    if "--resources" in sys.argv:
        page = resource_page(int(sys.argv[sys.argv.index("--resources") + 1]))

        async def list_resources(ctx: Any, params: Any) -> dict[str, Any]:
            return page

        extra["on_list_resources"] = list_resources
    server: Server[Any] = Server("bare", version="0", on_list_tools=list_tools, on_call_tool=call_tool, **extra)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
