"""An MCP server built with the official SDK (mcp.server.mcpserver.MCPServer), one process:
a tool that succeeds (and logs to the client on the way), one that asks the client's model
(sampling), one that fails.

    python -m tests.integration.peers.mcp_server PORT streamable-http|sse
"""

from __future__ import annotations

import sys
import warnings

from mcp import MCPDeprecationWarning, types
from mcp.server.mcpserver import Context, MCPServer

# sampling is deprecated by the 2026-07-28 protocol; sessions of the ones before still use it
warnings.simplefilter("ignore", MCPDeprecationWarning)
app = MCPServer("weather")


@app.tool()
async def get_weather(city: str, ctx: Context) -> str:
    """The weather of a city (and a log message to the client first)."""
    await ctx.info(f"looking up {city}")
    return f"sunny in {city}"


@app.tool()
async def summarize(text: str, ctx: Context) -> str:
    """Asks the client's model (a request from the server, sampling/createMessage)."""
    message = types.SamplingMessage(role="user", content=types.TextContent(type="text", text=text))
    answer = await ctx.session.create_message([message], max_tokens=8,
                                              related_request_id=ctx.request_id)
    return answer.content.text


@app.tool()
def fail(reason: str) -> str:
    """Always fails: the SDK answers with a result marked isError."""
    raise ValueError(reason)


if __name__ == "__main__":
    port, transport = int(sys.argv[1]), sys.argv[2]
    app.run(transport, host="127.0.0.1", port=port)  # type: ignore[call-overload]
