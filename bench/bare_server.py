"""The baseline: a bare low-level SDK server over stdio with 4 dummy tools.

Same SDK, same `Server` class, same stdio transport as skill-mcp and nothing else, so the
benchmark's ratios show what skill-mcp adds on top of the SDK. Every tool answers a tiny JSON.
"""

from __future__ import annotations

from typing import Any

import anyio
import mcp_types as types
from mcp.server.lowlevel import Server
from mcp.server.stdio import stdio_server

_SCHEMA = {"type": "object", "properties": {}, "additionalProperties": True}
TOOLS = [types.Tool(name=f"dummy_{n}", description=f"Dummy tool {n}.", input_schema=_SCHEMA) for n in range(4)]


async def list_tools(ctx: Any, params: Any) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(ctx: Any, params: types.CallToolRequestParams) -> types.CallToolResult:
    return types.CallToolResult(content=[types.TextContent(type="text", text='{"ok":true}')])


async def main() -> None:
    server: Server[Any] = Server("bare", version="0", on_list_tools=list_tools, on_call_tool=call_tool)
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
