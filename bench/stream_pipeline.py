"""Agent CPU per gRPC unary call and per SSE chunk, in one process (no kernel), over
recorded traffic (bench/record_streams.py: a grpcio client and server, a chat-completions
stream from the test OpenAI server): ring records -> events -> connection table and
parsers -> correlator -> spans ready for export -> OTLP protobuf and OTLP/JSON. Each
connection is seen at both ends, as a call between two traced processes on one host.

    .venv/bin/python bench/stream_pipeline.py [--rounds 5] [--repeat 10] [--profile]
    .venv/bin/python bench/stream_pipeline.py --against DIR [--rounds 7] [--out FILE]

--against DIR: the same rounds from another checkout (its `otel_ebpf` imported from DIR,
built extensions in place, `otel_ebpf/protocols` linking to `../protocols`), interleaved
with this one, the order alternating, so a busy machine weighs on both alike. --repeat
replays the recording that many times (a fresh connection each). Times are CPU time of
this process; medians [min–max] over rounds, µs per gRPC call (2 spans) and per SSE
event (a stream of 35 events gives 2 spans). The garbage collector runs at Python's
defaults unless --agent-gc sets it as the running agent does (a full collection of the
replay's objects otherwise falls into whichever stage allocates when it is due).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "data"
WORKLOADS = {"grpc": "grpc_unary.json.gz", "sse": "sse_chat.json.gz"}
ENABLED = ("http1", "http2", "rtps", "llm", "vectordb")
BATCH = 64  # events per ring-buffer drain, about what the agent sees under load
STAGES = ("ring records to events", "parse and correlate", "ready for export",
          "OTLP protobuf", "OTLP/JSON")


def recording(workload: str) -> list[tuple[bool, bytes]]:
    doc = json.loads(gzip.decompress((DATA / WORKLOADS[workload]).read_bytes()))
    return [(bool(c), d.encode("latin-1")) for c, d in doc["chunks"]]


def units(workload: str, chunks: list[tuple[bool, bytes]], spans: int) -> float:
    """What a figure is per: a gRPC call (its 2 spans, one per end), or an SSE event of
    the answers (a `data: ` line)."""
    if workload == "sse":
        return sum(d.count(b"\ndata: ") + d.startswith(b"data: ") for c, d in chunks if not c)
    return spans / 2


def events(chunks: list[tuple[bool, bytes]], repeat: int = 1, cut: random.Random | None = None
           ) -> list:
    """Both ends of the recorded connection, `repeat` times over (a new pair of connections
    each time): a write of one end is a read of the other. With `cut`, writes are split at
    random points into several syscalls, and now and then one end misses a syscall (lost
    by the kernel: the stream position moves on without its bytes)."""
    from otel_ebpf.kernel import abi
    from otel_ebpf.protocols.base import Direction, Role

    out: list = []
    t = 1_000
    for r in range(repeat):
        ends = {Role.CLIENT: (100 + r, 5 + 2 * r, 1), Role.SERVER: (200 + r, 6 + 2 * r, 2)}
        for role, key in ends.items():
            local, remote = (40000 + r, 8000) if role == Role.CLIENT else (8000, 40000 + r)
            out.append(abi.ConnOpen(key=key, ts_ns=t, tid=key[0], role=role,
                                    flags=abi.CONN_F_STREAM | abi.CONN_F_TCP, family=2,
                                    local_addr="127.0.0.1", local_port=local,
                                    remote_addr="127.0.0.1", remote_port=remote,
                                    comm="python"))
        pos = {k: [0, 0] for k in ends.values()}
        for from_client, data in chunks:
            pieces = [data]
            if cut is not None and len(data) > 1 and cut.random() < 0.3:
                at = sorted(cut.sample(range(1, len(data)), min(len(data) - 1, cut.randint(1, 3))))
                pieces = [data[a:b] for a, b in zip([0, *at], [*at, len(data)])]
            for payload in pieces:
                sender = Role.CLIENT if from_client else Role.SERVER
                receiver = Role.SERVER if from_client else Role.CLIENT
                for role, direction in ((sender, Direction.EGRESS), (receiver, Direction.INGRESS)):
                    key, t = ends[role], t + 1_000
                    p = pos[key][direction]
                    if cut is not None and cut.random() < 0.01:
                        pos[key][direction] += len(payload)
                        continue
                    out.append(abi.DataEvent(key=key, tid=key[0], enter_ns=t, exit_ns=t + 500,
                                             direction=direction, pos=p, msg_len=len(payload),
                                             tcp_seq=(1_000 + p) & 0xFFFFFFFF, payload=payload,
                                             peer=None))
                    pos[key][direction] += len(payload)
        for role, key in ends.items():
            t += 1_000
            out.append(abi.ConnClose(key=key, ts_ns=t, bytes_sent=pos[key][0], bytes_recv=pos[key][1]))
    return out


def spans_of(evs: list, batches: random.Random | None = None) -> list:
    """The agent's path from events to correlated spans (IDs assigned)."""
    from otel_ebpf.conntrack.table import ConnTable
    from otel_ebpf.correlate import Correlator, assign_ids
    from otel_ebpf.protocols.registry import Registry
    from otel_ebpf.telemetry import Stats

    stats = Stats()
    registry = Registry.from_config(list(ENABLED),
                                    {"http1": {"correlation_headers": ["x-request-id"]}})
    table = ConnTable(registry, stats, 65536, 300 * 10**9)
    correlator = Correlator(stats, 2 * 10**9, ("x-request-id",), max_requests=100_000)
    spans: list = []
    i = 0
    while i < len(evs):
        n = batches.randint(1, BATCH) if batches is not None else BATCH
        done = table.handle(evs[i : i + n])
        i += n
        correlator.observe(table.observed)
        table.observed.clear()
        spans += correlator.on_spans(done, 10**18)
    spans += correlator.on_spans(table.close_all(), 10**18)
    spans += correlator.flush()
    assign_ids(spans)
    return spans


GOLDEN_SEEDS = range(6)


def golden() -> dict[str, list]:
    """Spans of each recording as plain data (tests/protocols/test_recorded_streams.py):
    replayed whole, and with writes cut, syscalls lost and batches of random size."""
    from tests.unit.span_traffic import plain

    out = {}
    for w in WORKLOADS:
        chunks = recording(w)
        out[f"{w}-whole"] = plain(spans_of(events(chunks, 2)))
        for seed in GOLDEN_SEEDS:
            rng = random.Random(seed)
            out[f"{w}-{seed}"] = plain(spans_of(events(chunks, 2, rng), rng))
    return out


def record_of(ev) -> bytes:
    from otel_ebpf.kernel import abi

    if type(ev) is abi.ConnOpen:
        def raw(addr: str) -> bytes:
            return bytes(map(int, addr.split("."))).ljust(16, b"\0")
        return abi.CONN_OPEN.pack(abi.EV_CONN_OPEN, ev.tid, ev.ts_ns, *ev.key,
                                  raw(ev.local_addr), ev.local_port, ev.family,
                                  raw(ev.remote_addr), ev.remote_port, ev.family, int(ev.role),
                                  ev.flags, ev.comm.encode())
    if type(ev) is abi.ConnClose:
        return abi.CONN_CLOSE.pack(abi.EV_CONN_CLOSE, ev.key[0], ev.ts_ns, *ev.key, ev.bytes_sent,
                                   ev.bytes_recv)
    return abi.DATA.pack(abi.EV_DATA, ev.tid, ev.enter_ns, *ev.key, ev.exit_ns, ev.pos,
                         ev.msg_len, len(ev.payload), ev.tcp_seq, int(ev.direction), 0, 0,
                         b"\0" * 16, 0, 0, ev.task) + ev.payload


def one_round(workload: str, repeat: int, profile=None) -> dict[str, float]:
    from otel_ebpf.export.otlp_json import spans_to_otlp_json
    from otel_ebpf.export.otlp_proto import spans_to_otlp_proto
    from otel_ebpf.kernel import abi
    from otel_ebpf.spans.clock import KernelClock
    from otel_ebpf.spans.convert import ready, resource_for

    chunks = recording(workload)
    records = [record_of(ev) for ev in events(chunks, repeat)]
    t0 = time.process_time()
    evs: list = []
    for i in range(0, len(records), BATCH):
        evs += abi.decode_batch(records[i : i + BATCH])[0]
    t1 = time.process_time()
    if profile is not None:
        profile.enable()
    spans = spans_of(evs)
    if profile is not None:
        profile.disable()
    t2 = time.process_time()
    clock, resource = KernelClock(), resource_for({"service.name": "bench", "process.pid": 1})
    for s in spans:
        ready(s, resource, clock)
    t3 = time.process_time()
    spans_to_otlp_proto(spans)
    t4 = time.process_time()
    spans_to_otlp_json(spans)
    t5 = time.process_time()
    per = 1e6 / units(workload, chunks, len(spans) / repeat) / repeat
    return dict(zip(STAGES, ((t1 - t0) * per, (t2 - t1) * per, (t3 - t2) * per,
                             (t4 - t3) * per, (t5 - t4) * per)), spans=len(spans) / repeat)


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}–{max(values):.1f}]"


def total(r: dict[str, float]) -> float:
    return sum(r[s] for s in STAGES)


def against(args) -> None:
    runs: dict[str, dict[str, list]] = {w: {"before": [], "after": []} for w in WORKLOADS}
    roots = {"before": str(args.against.resolve()), "after": str(HERE.parent)}
    for i in range(args.rounds):
        for side in (("before", "after") if i % 2 == 0 else ("after", "before")):
            out = subprocess.run([sys.executable, __file__, "--root", roots[side], "--rounds", "1",
                                  "--repeat", str(args.repeat), "--json",
                                  *(["--agent-gc"] if args.agent_gc else [])],
                                 check=True, capture_output=True, text=True).stdout
            for w, r in json.loads(out).items():
                runs[w][side].append(r[0])
    lines = [f"### Agent CPU per gRPC call and per SSE event, before and after "
             f"({time.strftime('%Y-%m-%d')}, recorded traffic seen at both ends, median "
             f"[min–max] of {args.rounds} interleaved rounds, µs)", "",
             f"`.venv/bin/python bench/stream_pipeline.py --against DIR --rounds {args.rounds} "
             f"--repeat {args.repeat}{' --agent-gc' if args.agent_gc else ''}`", "",
             "| workload | stage | before | after | after / before |", "|---|---|---:|---:|---:|"]
    for w in WORKLOADS:
        unit = "per call (2 spans)" if w == "grpc" else "per event"
        for stage in (*STAGES, "the agent's path"):
            get = total if stage == "the agent's path" else (lambda r, s=stage: r[s])
            b = [get(r) for r in runs[w]["before"]]
            a = [get(r) for r in runs[w]["after"]]
            name = f"**{stage}**" if stage == "the agent's path" else stage
            lines.append(f"| {w} {unit} | {name} | {cell(b)} | {cell(a)} | "
                         f"{statistics.median(a) / statistics.median(b):.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write("\n" + text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=10)
    ap.add_argument("--root", type=Path, help="import otel_ebpf from this checkout")
    ap.add_argument("--against", type=Path)
    ap.add_argument("--workload", choices=tuple(WORKLOADS), action="append")
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--golden", action="store_true", help="print golden() as JSON")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--agent-gc", action="store_true",
                    help="after the warm-up round, the garbage collector as the agent sets it "
                         "once started (otel_ebpf/agent.py _tune_gc: the heap so far frozen, "
                         "GC_THRESHOLDS); without it, Python's defaults")
    args = ap.parse_args()
    if not (1 <= args.rounds <= 100 and 1 <= args.repeat <= 1000):
        ap.error("--rounds 1..100, --repeat 1..1000")
    sys.path.insert(0, str((args.root or HERE.parent).resolve()))
    if args.against:
        return against(args)
    if args.golden:
        json.dump(golden(), sys.stdout, separators=(",", ":"))
        return
    import cProfile
    import pstats
    profile = cProfile.Profile() if args.profile else None
    workloads = args.workload or tuple(WORKLOADS)
    for w in workloads:  # imports, first-call compiles and caches: not what a call costs
        one_round(w, 1)
    if args.agent_gc:  # the checkout's own agent settings (either side of --against)
        from otel_ebpf import agent

        agent._tune_gc()
    results = {w: [one_round(w, args.repeat, profile) for _ in range(args.rounds)]
               for w in workloads}
    if args.json:
        print(json.dumps(results))
        return
    for w, rs in results.items():
        print(f"{w}: " + ", ".join(f"{s} {cell([r[s] for r in rs])}" for s in STAGES)
              + f", total {cell([total(r) for r in rs])} µs; {rs[0]['spans']:.0f} spans a replay")
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(25)


if __name__ == "__main__":
    main()
