"""Where the agent's CPU goes per HTTP/1 exchange, stage by stage, in one process (no
kernel): ring-buffer records -> events -> connection table and parsers -> correlator ->
spans ready for export (resource, wall clock) -> OTLP encodings. Each round runs every
stage twice, side by side: with the compiled per-event path (otel_ebpf/_fast and
protocols/http1/_parse.c: record decoding, HTTP/1 heads, OTLP protobuf and JSON spans) and
with the pure Python path it implements (what OTEL_EBPF_PURE_PYTHON=1 runs). Side by side
too, the encodings the exporters use: OTLP protobuf written directly
(otel_ebpf/export/otlp_proto.py: the otlp exporter) and by the SDK's encoder (otlphttp,
and the otlp exporter before), and OTLP/JSON for the file exporter built directly
(otel_ebpf/export/otlp_json.py) and by the old protobuf route.

    .venv/bin/python bench/agent_pipeline.py [--exchanges 5000] [--rounds 5]
        [--answer-writes 2] [--profile] [--out docs/performance.md]

--answer-writes 2: each answer's head and body written in two syscalls and read in two, as
uvicorn writes them (its head, then its body) and a client reading as they arrive sees them.

--profile prints the 20 functions with the most own time over the parse and correlate
stages (cProfile, compiled path). Times are this process's CPU time (time.process_time), so
time the machine gives other processes is not counted in. Medians [min–max] over rounds,
µs per exchange (2 spans: one client, one server).
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans  # noqa: E402
from otel_ebpf.protocols.base import Direction, Role  # noqa: E402
from otel_ebpf.protocols.http1 import parse as http1_parse  # noqa: E402
from otel_ebpf.protocols.registry import Registry  # noqa: E402

from bench.side_by_side import publish, spread  # noqa: E402
from otel_ebpf import _fast  # noqa: E402
from otel_ebpf.conntrack.table import ConnTable  # noqa: E402
from otel_ebpf.correlate import Correlator, assign_ids  # noqa: E402
from otel_ebpf.export.file import to_otlp_json  # noqa: E402
from otel_ebpf.export.otlp_json import spans_to_otlp_json  # noqa: E402
from otel_ebpf.export.otlp_proto import spans_to_otlp_proto  # noqa: E402
from otel_ebpf.kernel import abi  # noqa: E402
from otel_ebpf.spans.clock import KernelClock  # noqa: E402
from otel_ebpf.spans.convert import ready, resource_for, to_readable  # noqa: E402
from otel_ebpf.telemetry import Stats  # noqa: E402

REQUEST = (b"GET /items/42?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: python-requests/"
           b"2.31\r\nAccept: */*\r\nConnection: keep-alive\r\n\r\n")
RESPONSE = (b"HTTP/1.1 200 OK\r\ndate: Wed, 02 Dec 2026 10:00:00 GMT\r\nserver: uvicorn\r\n"
            b"content-length: 20\r\ncontent-type: application/json\r\n\r\n"
            b'{"id":"42","ok":true}')[:-1]
BATCH = 64  # events per ring-buffer drain, about what the agent sees under load


# the stages the agent pays per exchange exporting to both the otlp and the file exporter
AGENT_PATH = ("ring records to events", "parse and correlate",
              "ready for export (resource, wall clock)", "OTLP protobuf, direct (otlp exporter)",
              "OTLP/JSON, direct (file exporter)")

def events(exchanges: int, request: bytes = REQUEST, response: bytes = RESPONSE,
           answer_writes: int = 1) -> list:
    """Both ends of `exchanges` keep-alive requests: a client and a server connection; with
    `answer_writes` 2, each answer's head and body in a syscall of their own."""
    out: list = []
    ends = {Role.CLIENT: (100, 5, 1), Role.SERVER: (200, 9, 2)}
    for role, key in ends.items():
        local, remote = (40000, 8000) if role == Role.CLIENT else (8000, 40000)
        out.append(abi.ConnOpen(key=key, ts_ns=1, tid=key[0], role=role,
                                flags=abi.CONN_F_STREAM | abi.CONN_F_TCP, family=2,
                                local_addr="127.0.0.1", local_port=local,
                                remote_addr="127.0.0.1", remote_port=remote, comm="python"))
    pos = {k: [0, 0] for k in ends.values()}
    t = 1_000
    head, sep, body = response.partition(b"\r\n\r\n")
    answer = (head + sep, body) if answer_writes == 2 and body else (response,)
    steps = [(Role.CLIENT, Direction.EGRESS, request), (Role.SERVER, Direction.INGRESS, request)]
    steps += [(Role.SERVER, Direction.EGRESS, piece) for piece in answer]
    steps += [(Role.CLIENT, Direction.INGRESS, piece) for piece in answer]
    for _ in range(exchanges):
        for role, direction, payload in steps:
            key, t = ends[role], t + 1_000
            p = pos[key][direction]
            seq = (1_000 + p) & 0xFFFFFFFF
            out.append(abi.DataEvent(key=key, tid=key[0], enter_ns=t, exit_ns=t + 500,
                                     direction=direction, pos=p, msg_len=len(payload),
                                     tcp_seq=seq, payload=payload, peer=None))
            pos[key][direction] += len(payload)
    return out


def record_of(ev) -> bytes:
    """The ring-buffer record the kernel would have sent for an event (abi.h layout)."""
    if type(ev) is abi.ConnOpen:
        def raw(addr: str) -> bytes:
            return bytes(map(int, addr.split("."))).ljust(16, b"\0")
        return abi.CONN_OPEN.pack(abi.EV_CONN_OPEN, ev.tid, ev.ts_ns, *ev.key,
                                  raw(ev.local_addr), ev.local_port, ev.family,
                                  raw(ev.remote_addr), ev.remote_port, ev.family, int(ev.role),
                                  ev.flags, ev.comm.encode())
    return abi.DATA.pack(abi.EV_DATA, ev.tid, ev.enter_ns, *ev.key, ev.exit_ns, ev.pos,
                         ev.msg_len, len(ev.payload), ev.tcp_seq, int(ev.direction), 0, 0,
                         b"\0" * 16, 0, 0, ev.task) + ev.payload


ENABLED = ("http1", "http2", "rtps", "llm", "vectordb")


def one_round(exchanges: int, profile: cProfile.Profile | None, compiled: bool,
              **workload) -> dict[str, float]:
    saved = http1_parse.compiled, _fast.otlp
    if not compiled:  # HTTP/1 states made from now on parse every head with llhttp
        http1_parse.compiled = _fast.otlp = None
    try:
        return _one_round(exchanges, profile if compiled else None, compiled, **workload)
    finally:
        http1_parse.compiled, _fast.otlp = saved


def _one_round(exchanges: int, profile: cProfile.Profile | None, compiled: bool,
               enabled: tuple[str, ...] = ENABLED, request: bytes = REQUEST,
               response: bytes = RESPONSE, spans_per_exchange: int = 2,
               answer_writes: int = 1) -> dict[str, float]:
    """One pass over every stage; `enabled`, the bytes of each exchange and the spans each
    gives may be another workload's (bench/mcp_cost.py)."""
    stats = Stats()
    registry = Registry.from_config(list(enabled),
                                    {"http1": {"correlation_headers": ["x-request-id"]}})
    table = ConnTable(registry, stats, 65536, 300 * 10**9)
    correlator = Correlator(stats, 2 * 10**9, ("x-request-id",), max_requests=100_000)
    records = [record_of(ev) for ev in events(exchanges, request, response, answer_writes)]
    decode = abi.decode_batch if compiled else abi.decode_each
    spans: list = []
    td = time.process_time()
    evs: list = []
    for i in range(0, len(records), BATCH):
        evs += decode(records[i : i + BATCH])[0]
    t0 = time.process_time()
    if profile:
        profile.enable()
    for i in range(0, len(evs), BATCH):
        done = table.handle(evs[i : i + BATCH])
        correlator.observe(table.observed)
        table.observed.clear()
        spans += correlator.on_spans(done, 10**18)
    spans += correlator.flush()
    if profile:
        profile.disable()
    t1 = time.process_time()
    assign_ids(spans)
    clock, resource = KernelClock(), resource_for({"service.name": "bench", "process.pid": 1})
    for s in spans:
        ready(s, resource, clock)
    t2 = time.process_time()
    spans_to_otlp_proto(spans)
    t3 = time.process_time()
    spans_to_otlp_json(spans)
    t4 = time.process_time()
    readable = [to_readable(s) for s in spans]  # for the SDK's exporters only
    t5 = time.process_time()
    encode_spans(readable).SerializeToString()
    t6 = time.process_time()
    to_otlp_json(encode_spans(readable))
    t7 = time.process_time()
    assert len(spans) == spans_per_exchange * exchanges, len(spans)
    us = 1e6 / exchanges
    return {"ring records to events": (t0 - td) * us, "parse and correlate": (t1 - t0) * us,
            "ready for export (resource, wall clock)": (t2 - t1) * us,
            "OTLP protobuf, direct (otlp exporter)": (t3 - t2) * us,
            "OTLP/JSON, direct (file exporter)": (t4 - t3) * us,
            "to ReadableSpan (SDK exporters only: otlphttp, debug)": (t5 - t4) * us,
            "OTLP protobuf, SDK encoder (otlphttp)": (t6 - t5) * us,
            "OTLP/JSON via protobuf (file exporter first)": (t7 - t6) * us}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--exchanges", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--answer-writes", type=int, choices=(1, 2), default=1,
                    help="2: each answer's head and body in a syscall of their own")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--gc-defaults", action="store_true",
                    help="leave the cyclic collector as Python sets it (the agent tunes it)")
    args = ap.parse_args()
    if not args.gc_defaults:  # what the running agent does once started (agent._tune_gc)
        from otel_ebpf.agent import _tune_gc  # noqa: PLC0415
        _tune_gc()
    profile = cProfile.Profile() if args.profile else None
    if http1_parse.compiled is None or _fast.ring is None or _fast.otlp is None:
        sys.exit("otel_ebpf._fast is not built (make install) or OTEL_EBPF_PURE_PYTHON is set")
    rounds: dict[bool, list[dict[str, float]]] = {True: [], False: []}
    for i in range(args.rounds):  # interleaved, the order alternating: a noisy machine
        for compiled in ((True, False) if i % 2 else (False, True)):
            rounds[compiled].append(one_round(args.exchanges, profile, compiled,
                                              answer_writes=args.answer_writes))
    lines = [f"### Agent CPU per HTTP/1 exchange, by stage ({time.strftime('%Y-%m-%d')}, "
             f"{args.exchanges} exchanges seen at both ends, median [min–max] of {args.rounds} "
             "interleaved rounds)",
             "", "`.venv/bin/python bench/agent_pipeline.py --exchanges "
             f"{args.exchanges} --rounds {args.rounds}"
             f"{' --answer-writes 2' if args.answer_writes == 2 else ''}`", "",
             "| stage | pure Python µs per exchange (2 spans) | compiled path µs | ratio |",
             "|---|---:|---:|---:|"]

    for stage in rounds[True][0]:
        slow = [r[stage] for r in rounds[False]]
        fast = [r[stage] for r in rounds[True]]
        lines.append(f"| {stage} | {spread(slow)} | {spread(fast)} | "
                     f"{statistics.median(fast) / statistics.median(slow):.2f} |")
    slow = [sum(r[k] for k in AGENT_PATH) for r in rounds[False]]
    fast = [sum(r[k] for k in AGENT_PATH) for r in rounds[True]]
    lines.append(f"| **the agent's path, both exporters** (records to OTLP protobuf and "
                 f"OTLP/JSON) | {spread(slow)} | {spread(fast)} | "
                 f"{statistics.median(fast) / statistics.median(slow):.2f} |")
    publish(lines, args.out)
    if profile:
        pstats.Stats(profile).sort_stats("tottime").print_stats(20)


if __name__ == "__main__":
    main()
