"""MCP calls made by the official SDK's client (mcp.Client), one process per run: calls a
tool that succeeds and one that fails, and prints one JSON line per call.

    python -m tests.integration.peers.mcp_client URL MODE CITY REASON

MODE: `auto` (the SDK's default, the stateless protocol), `legacy` (initialize handshake,
a session, answers on event streams; a tool that asks the client's model in between) or
`sse` (the HTTP+SSE transport). CITY and REASON
are the tools' arguments: tests pass markers and look for them in what was exported.
"""

from __future__ import annotations

import json
import sys
import warnings

import anyio
from mcp import Client, MCPDeprecationWarning, types
from mcp.client.sse import sse_client

warnings.simplefilter("ignore", MCPDeprecationWarning)  # sampling, in legacy sessions


async def sample(context, params: types.CreateMessageRequestParams) -> types.CreateMessageResult:
    """The client's "model": answers the server's sampling request."""
    return types.CreateMessageResult(role="assistant", model="test-model",
                                     content=types.TextContent(type="text", text="in short"))


async def main(url: str, mode: str, city: str, reason: str) -> None:
    server = sse_client(url) if mode == "sse" else url
    calls = [("get_weather", {"city": city}), ("fail", {"reason": reason})]
    if mode == "legacy":  # the server asks back, on the call's event stream
        calls.insert(1, ("summarize", {"text": city}))
    async with Client(server, mode="legacy" if mode == "sse" else mode,
                      sampling_callback=sample if mode == "legacy" else None) as client:
        for tool, args in calls:
            result = await client.call_tool(tool, args)
            text = "".join(getattr(block, "text", "") for block in result.content)
            print(json.dumps({"tool": tool, "is_error": result.is_error, "text": text}),
                  flush=True)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:5])
