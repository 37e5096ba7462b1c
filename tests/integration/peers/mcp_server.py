"""An MCP server built with the official SDK (mcp.server.mcpserver.MCPServer), one process:
a tool that succeeds (and logs to the client on the way), one that fails.

    python -m tests.integration.peers.mcp_server PORT streamable-http|sse
"""

from __future__ import annotations

import sys

from mcp.server.mcpserver import Context, MCPServer

app = MCPServer("weather")


@app.tool()
async def get_weather(city: str, ctx: Context) -> str:
    """The weather of a city (and a log message to the client first)."""
    await ctx.info(f"looking up {city}")
    return f"sunny in {city}"


@app.tool()
def fail(reason: str) -> str:
    """Always fails: the SDK answers with a result marked isError."""
    raise ValueError(reason)


if __name__ == "__main__":
    port, transport = int(sys.argv[1]), sys.argv[2]
    app.run(transport, host="127.0.0.1", port=port)  # type: ignore[call-overload]
