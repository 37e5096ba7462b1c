"""MCP calls made by the official SDK's client (mcp.Client) to a server it runs as a
subprocess over stdio (tests.integration.peers.mcp_stdio_server), printing one JSON line
per call. Its arguments are the tools to call, each `name=ARG` (ARG: the tool's one
argument, or nothing). With MCP_WAIT=1 it first waits for a line on its stdin (a test
selects it by pid before it starts its server).

    python -m tests.integration.peers.mcp_stdio_client REPO get_weather=CITY fail=REASON
"""

from __future__ import annotations

import json
import os
import sys

import anyio
import anyio.to_thread
from mcp import Client, StdioServerParameters

ARGUMENT = {"get_weather": "city", "fail": "reason"}


async def main(repo: str, *calls: str) -> None:
    if os.environ.get("MCP_WAIT") == "1":
        print("waiting", flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
    server = StdioServerParameters(
        command=sys.executable, args=["-m", "tests.integration.peers.mcp_stdio_server"],
        cwd=repo, env={"PATH": os.environ.get("PATH", ""),
                       "PYTHONPATH": os.environ.get("PYTHONPATH", ""),
                       "OTEL_SERVICE_NAME": "mcp-stdio-weather"})
    async with Client(server) as client:
        for call in calls:
            tool, _, value = call.partition("=")
            args = {ARGUMENT[tool]: value} if tool in ARGUMENT else {}
            result = await client.call_tool(tool, args)
            text = "".join(getattr(block, "text", "") for block in result.content)
            print(json.dumps({"tool": tool, "is_error": result.is_error, "text": text,
                              "pid": os.getpid()}), flush=True)


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:])
