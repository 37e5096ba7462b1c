"""An MCP server built with the official SDK (mcp.server.mcpserver.MCPServer) on stdio, run
as a subprocess by tests.integration.peers.mcp_stdio_client: a tool that succeeds, one
that fails, and `ping`, which only the run the agent must not see calls.

    python -m tests.integration.peers.mcp_stdio_server
"""

from __future__ import annotations

from mcp.server.mcpserver import MCPServer

app = MCPServer("weather-stdio")


@app.tool()
def get_weather(city: str) -> str:
    """The weather of a city."""
    return f"sunny in {city}"


@app.tool()
def fail(reason: str) -> str:
    """Always fails: the SDK answers with a result marked isError."""
    raise ValueError(reason)


@app.tool()
def ping() -> str:
    """Called only by the client whose pipes are not selected."""
    return "pong"


if __name__ == "__main__":
    app.run("stdio")
