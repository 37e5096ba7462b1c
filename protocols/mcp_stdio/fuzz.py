"""The mcp_stdio fuzz target: fuzzer bytes become syscalls on the two pipes of one
process (requests out on one, answers in on the other, and the other way round), so that
lines cut anywhere, lost bytes and garbage reach the pairing across pipes."""

from __future__ import annotations

from ..base import Direction, Role
from ..testing import GAPS, MAX_STEPS, ConnectionDriver, FuzzTarget, conn_info, fuzz_chunk

LINES = [
    b'{"jsonrpc":"2.0","id":0,"method":"initialize","params":{"protocolVersion":"2025-06-18"}}\n',
    b'{"jsonrpc":"2.0","id":0,"result":{"protocolVersion":"2025-06-18"}}\n',
    b'{"jsonrpc":"2.0","method":"notifications/initialized"}\n',
    b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"t","arguments":{"a":1}}}\n',
    b'{"jsonrpc":"2.0","id":1,"result":{"content":[],"isError":true}}\n',
    b'{"jsonrpc":"2.0","id":"s","error":{"code":-32601,"message":"no"}}\n',
    b'{"jsonrpc":"2.0","id":2,"method":"sampling/createMessage","params":{}}\n',
    b'{"jsonrpc":"2.0","id":2,"result":{}}\n', b"\n", b"{", b'"id":', b"not json\n",
]


def _run(fdp) -> list[ConnectionDriver]:
    from . import MCPStdioParser  # noqa: PLC0415 - imported under the fuzzer's instrumentation
    parser = MCPStdioParser({"capture_content": fdp.ConsumeBool(), "max_pending": 4})
    drivers = [ConnectionDriver(parser, conn_info(Role.CLIENT, "pipe", fd=fd,
                                                  local_addr=f"pipe:[{100 + fd}]"),
                                midstream=fdp.ConsumeBool()) for fd in (5, 6)]
    for _ in range(fdp.ConsumeIntInRange(0, 2 * MAX_STEPS)):
        if fdp.remaining_bytes() == 0:
            break
        driver = drivers[fdp.ConsumeIntInRange(0, 1)]
        direction = (Direction.EGRESS, Direction.INGRESS)[fdp.ConsumeIntInRange(0, 1)]
        gap = GAPS[fdp.ConsumeIntInRange(0, len(GAPS) - 1)] if fdp.ConsumeProbability() < 0.1 else 0
        driver.feed(direction, fuzz_chunk(fdp, LINES), gap)
    if fdp.ConsumeBool():
        for driver in drivers:
            driver.close()
    return drivers


TARGET = FuzzTarget(run=_run, ci_runs=20000)
