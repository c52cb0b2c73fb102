"""skill-mcp: serve a directory of Agent Skills over MCP."""
