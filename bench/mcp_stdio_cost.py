"""What an MCP tools/call over stdio costs the agent, seen at both ends (the client's two
pipes and its server's), from ring-buffer records to OTLP, beside the same call over
streamable HTTP (bench/mcp_cost.py's JSON workload) in the same rounds. No kernel: the
records are the ones the kernel sends for each pipe syscall (one line per write, one per
read, as the SDKs do).

    .venv/bin/python bench/mcp_stdio_cost.py [--calls 5000] [--rounds 7] [--out docs/performance.md]

Rounds are interleaved; times are this process's CPU time. Medians [min–max] over rounds,
µs per tools/call (two spans: the client's and the server's).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from otel_ebpf.protocols.base import Direction  # noqa: E402
from otel_ebpf.protocols.registry import Registry  # noqa: E402

from bench.agent_pipeline import BATCH, ENABLED, one_round  # noqa: E402
from bench.mcp_cost import CALL, JSON_CALL, RESULT  # noqa: E402
from bench.side_by_side import publish  # noqa: E402
from otel_ebpf import _fast  # noqa: E402
from otel_ebpf.conntrack.table import ConnTable  # noqa: E402
from otel_ebpf.correlate import Correlator, assign_ids  # noqa: E402
from otel_ebpf.export.otlp_json import spans_to_otlp_json  # noqa: E402
from otel_ebpf.export.otlp_proto import spans_to_otlp_proto  # noqa: E402
from otel_ebpf.kernel import abi  # noqa: E402
from otel_ebpf.spans.clock import KernelClock  # noqa: E402
from otel_ebpf.spans.convert import ready, resource_for  # noqa: E402
from otel_ebpf.telemetry import Stats  # noqa: E402
from tests.protocols.mcp import wire  # noqa: E402

TO_SERVER, FROM_SERVER = 7001, 7002  # pipe inodes
# (key, inode): the client's write and read ends, the server's stdin and stdout
PIPES = {"client out": ((100, 5, 1), TO_SERVER), "client in": ((100, 6, 1), FROM_SERVER),
         "server in": ((200, 0, 2), TO_SERVER), "server out": ((200, 1, 2), FROM_SERVER)}


def records(calls: int) -> list[bytes]:
    out = [abi.CONN_OPEN.pack(abi.EV_CONN_OPEN, key[0], 1, *key, inode.to_bytes(16, "little"),
                              0, 0, b"\0" * 16, 0, 0, 0,
                              abi.CONN_F_STREAM | abi.CONN_F_PIPE | abi.CONN_F_PREEXISTING,
                              b"python")
           for key, inode in PIPES.values()]
    pos = {name: 0 for name in PIPES}
    t = 1_000
    request, answer = CALL + b"\n", RESULT + b"\n"
    for i in range(calls):
        ask = request.replace(b'"id":2', b'"id":%d' % i)
        reply = answer.replace(b'"id":2', b'"id":%d' % i)
        for name, direction, payload in (("client out", Direction.EGRESS, ask),
                                         ("server in", Direction.INGRESS, ask),
                                         ("server out", Direction.EGRESS, reply),
                                         ("client in", Direction.INGRESS, reply)):
            key, t = PIPES[name][0], t + 1_000
            out.append(abi.DATA.pack(abi.EV_DATA, key[0], t, *key, t + 500, pos[name],
                                     len(payload), len(payload), 0, int(direction), 0, 0,
                                     b"\0" * 16, 0, 0, 0) + payload)
            pos[name] += len(payload)
    return out


def stdio_round(calls: int) -> dict[str, float]:
    stats = Stats()
    registry = Registry.from_config(["mcp_stdio"], {})
    table = ConnTable(registry, stats, 65536, 300 * 10**9)
    correlator = Correlator(stats, 2 * 10**9, ("x-request-id",), max_requests=100_000)
    recs = records(calls)
    spans: list = []
    t0 = time.process_time()
    evs: list = []
    for i in range(0, len(recs), BATCH):
        evs += abi.decode_batch(recs[i:i + BATCH])[0]
    t1 = time.process_time()
    for i in range(0, len(evs), BATCH):
        done = table.handle(evs[i:i + BATCH])
        correlator.observe(table.observed)
        table.observed.clear()
        spans += correlator.on_spans(done, 10**18)
    spans += correlator.flush()
    t2 = time.process_time()
    assign_ids(spans)
    clock, resource = KernelClock(), resource_for({"service.name": "bench", "process.pid": 1})
    for s in spans:
        ready(s, resource, clock)
    spans_to_otlp_proto(spans)
    spans_to_otlp_json(spans)
    t3 = time.process_time()
    assert len(spans) == 2 * calls, len(spans)
    client = [s for s in spans if s.pid == 100]
    assert all(s.parent_span_id == b"" for s in client)
    us = 1e6 / calls
    return {"records to events": (t1 - t0) * us, "parse and correlate": (t2 - t1) * us,
            "to OTLP protobuf and OTLP/JSON": (t3 - t2) * us, "all": (t3 - t0) * us}


def http_round(calls: int) -> dict[str, float]:
    r = one_round(calls, None, True, enabled=(*ENABLED, "mcp"), request=JSON_CALL,
                  response=wire.json_answer(RESULT), spans_per_exchange=2)
    stages = ("ring records to events", "parse and correlate", "ready for export (resource, wall clock)",
              "OTLP protobuf, direct (otlp exporter)", "OTLP/JSON, direct (file exporter)")
    return {"parse and correlate": r["parse and correlate"],
            "all": sum(r[k] for k in stages if k in r)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if _fast.ring is None or _fast.otlp is None:
        sys.exit("otel_ebpf._fast is not built (make install) or OTEL_EBPF_PURE_PYTHON is set")
    runs: dict[str, list[dict[str, float]]] = {"stdio": [], "http": []}
    for i in range(args.rounds):
        for name in (("stdio", "http") if i % 2 == 0 else ("http", "stdio")):
            runs[name].append((stdio_round if name == "stdio" else http_round)(args.calls))

    def cell(name: str, key: str) -> str:
        values = [r[key] for r in runs[name]]
        return f"{statistics.median(values):.1f} [{min(values):.1f}–{max(values):.1f}]"

    lines = [f"### MCP over stdio: agent cost per tools/call seen at both ends "
             f"({time.strftime('%Y-%m-%d')}, {args.calls} calls, median [min–max] of "
             f"{args.rounds} interleaved rounds, compiled path)", "",
             f"`.venv/bin/python bench/mcp_stdio_cost.py --calls {args.calls} "
             f"--rounds {args.rounds}`", "",
             "| transport | parse and correlate µs | records to OTLP protobuf and OTLP/JSON µs |",
             "|---|---:|---:|",
             f"| stdio (4 pipe events, 2 spans) | {cell('stdio', 'parse and correlate')} | "
             f"{cell('stdio', 'all')} |",
             f"| streamable HTTP, JSON answer (4 socket events, 2 spans) | "
             f"{cell('http', 'parse and correlate')} | {cell('http', 'all')} |"]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
