"""What the MCP layer costs the agent per exchange seen at both ends, stage by stage
(bench/agent_pipeline.py's stages, compiled per-event path, no kernel): a tools/call POST
answered with JSON, the same bytes with the layer off (the plain HTTP/1 span: bodies
skipped by length), and a session's tools/call answered on an event stream that also
carries a log notification (a span more on each side).

    .venv/bin/python bench/mcp_cost.py [--exchanges 5000] [--rounds 5] [--out docs/performance.md]

Rounds are interleaved, their order rotating (a noisy machine); times are this process's
CPU time. Medians [min–max] over rounds, µs per exchange.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.agent_pipeline import AGENT_PATH, ENABLED, one_round  # noqa: E402
from bench.side_by_side import publish, rotated, spread  # noqa: E402
from otel_ebpf import _fast  # noqa: E402
from otel_ebpf.protocols.http1 import parse as http1_parse  # noqa: E402
from tests.protocols.mcp import wire  # noqa: E402

CALL = wire.rpc(id=2, method="tools/call", params={"name": "get_weather",
                                                   "arguments": {"city": "Paris"}})
RESULT = wire.rpc(id=2, result={"content": [{"type": "text", "text": "sunny in Paris"}],
                                "isError": False,
                                "structuredContent": {"result": "sunny in Paris"}})
NOTE = wire.rpc(method="notifications/message", params={"level": "info", "data": "looking up"})
SSE_ANSWER = (wire.sse_head(session=wire.SESSION) + wire.sse_chunk(NOTE) + wire.sse_chunk(RESULT)
              + wire.SSE_END)
JSON_CALL = wire.post("/mcp", CALL, version=wire.MODERN)
SESSION_CALL = wire.post("/mcp", CALL, session=wire.SESSION, version=wire.LEGACY)
# (name, enabled, request, response, spans per exchange)
WORKLOADS = (
    ("the same POST, MCP layer off (HTTP/1 spans)", ENABLED, JSON_CALL, wire.json_answer(RESULT), 2),
    ("tools/call answered with JSON", (*ENABLED, "mcp"), JSON_CALL, wire.json_answer(RESULT), 2),
    ("tools/call answered on an event stream, with a notification", (*ENABLED, "mcp"),
     SESSION_CALL, SSE_ANSWER, 4),
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--exchanges", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if http1_parse.compiled is None or _fast.ring is None or _fast.otlp is None:
        sys.exit("otel_ebpf._fast is not built (make install) or OTEL_EBPF_PURE_PYTHON is set")
    runs: dict[str, list[dict[str, float]]] = {w[0]: [] for w in WORKLOADS}
    for i in range(args.rounds):
        order = rotated(WORKLOADS, i)
        for name, enabled, request, response, per in order:
            runs[name].append(one_round(args.exchanges, None, True, enabled=enabled,
                                        request=request, response=response,
                                        spans_per_exchange=per))

    lines = [f"### MCP layer cost per exchange seen at both ends ({time.strftime('%Y-%m-%d')}, "
             f"{args.exchanges} exchanges, median [min–max] of {args.rounds} interleaved rounds, "
             "compiled path)", "",
             f"`.venv/bin/python bench/mcp_cost.py --exchanges {args.exchanges} "
             f"--rounds {args.rounds}`", "",
             "| workload | spans per exchange | parse and correlate µs | agent's path µs "
             "(records to OTLP protobuf and OTLP/JSON) |", "|---|---:|---:|---:|"]
    base = statistics.median(sum(r[k] for k in AGENT_PATH) for r in runs[WORKLOADS[0][0]])
    for name, _, _, _, per in WORKLOADS:
        parse = [r["parse and correlate"] for r in runs[name]]
        path = [sum(r[k] for k in AGENT_PATH) for r in runs[name]]
        lines.append(f"| {name} | {per} | {spread(parse)} | {spread(path)} |")
    lines.append("")
    for name, *_ in WORKLOADS[1:]:
        path = statistics.median(sum(r[k] for k in AGENT_PATH) for r in runs[name])
        lines.append(f"- {name}: +{path - base:.1f} µs per exchange over the layer off.")
    publish(lines, args.out)


if __name__ == "__main__":
    main()
