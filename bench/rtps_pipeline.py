"""Agent CPU per ROS 2 / DDS span, in one process (no kernel), over recorded RTPS datagrams
(tests/protocols/rtps/fixtures/pubsub.jsonl: a Cyclone DDS publisher and two subscribers,
captured by the agent's own BPF programs): ring records -> events -> connection table and
the rtps parser -> correlator -> spans ready for export -> OTLP protobuf and OTLP/JSON.

    .venv/bin/python bench/rtps_pipeline.py [--rounds 5] [--repeat 100] [--profile] [--agent-gc]
    .venv/bin/python bench/rtps_pipeline.py --against DIR [--rounds 7] [--agent-gc] [--out FILE]

The recording is replayed whole once (discovery, then 10 samples); then its steady part,
the datagrams of the user writer (DATA, HEARTBEAT, ACKNACK, GAP: what a running topic
sends), `--repeat` more times, sequence numbers and kernel times moved on each time so
every replay is 10 new samples, published once and received twice (30 spans). Only the
steady replays are timed. --against DIR interleaves rounds of another checkout (prepared
as for bench/stream_pipeline.py). Times are CPU time of this process; medians [min–max]
over rounds, µs per span. The garbage collector runs at Python's defaults unless
--agent-gc sets it as the running agent does (otherwise a full collection of the replay's
objects falls into whichever stage allocates when it is due).
"""

from __future__ import annotations

import argparse
import json
import statistics
import struct
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
RECORDING = HERE.parent / "tests/protocols/rtps/fixtures/pubsub.jsonl"
ENABLED = ("http1", "http2", "rtps", "llm", "vectordb")
BATCH = 64  # events per ring-buffer drain
STAGES = ("ring records to events", "parse and correlate", "ready for export",
          "OTLP protobuf", "OTLP/JSON")
BUILTIN = 0xC0
DATA, DATA_FRAG, HEARTBEAT, ACKNACK, GAP = 0x15, 0x16, 0x07, 0x06, 0x08
# where a submessage's 64-bit sequence numbers sit, from its body (after the 8 octets of
# reader and writer ids): DATA/DATA_FRAG writerSN (+4 extraFlags/octetsToInlineQos),
# HEARTBEAT first and last, ACKNACK the set's base, GAP gapStart and the list's base
SEQ_AT = {DATA: (12,), DATA_FRAG: (12,), HEARTBEAT: (8, 16), ACKNACK: (8,), GAP: (8, 16)}
KIND_AT = {DATA: 11, DATA_FRAG: 11}  # the writer's entity kind octet; 7 for the others


def datagrams() -> list[dict]:
    return [json.loads(line) for line in RECORDING.read_text().splitlines()]


def _walk(buf: bytes):
    """(submessage id, flags, body offset, body end) of each submessage."""
    off = 20
    while off + 4 <= len(buf):
        sub, flags = buf[off], buf[off + 1]
        (length,) = struct.unpack_from("<H" if flags & 1 else ">H", buf, off + 2)
        end = len(buf) if length == 0 else off + 4 + length
        yield sub, flags, off + 4, end
        if length == 0:
            break
        off = end


def user_writer(buf: bytes) -> bool:
    """Whether the datagram carries submessages of a user (non-builtin) writer and no
    discovery sample (those come every few seconds, not with every sample)."""
    user = False
    for sub, _, body, _ in _walk(buf):
        if sub in SEQ_AT and body + 12 <= len(buf):
            if not buf[body + KIND_AT.get(sub, 7)] & BUILTIN:
                user = True
            elif sub in (DATA, DATA_FRAG):
                return False
    return user


def shifted(buf: bytes, by: int) -> bytes:
    """The datagram with the user writer's sequence numbers moved on by `by`."""
    out = bytearray(buf)
    for sub, flags, body, end in _walk(buf):
        if sub not in SEQ_AT or body + 12 > end or buf[body + KIND_AT.get(sub, 7)] & BUILTIN:
            continue
        order = "<" if flags & 1 else ">"
        for at in SEQ_AT[sub]:
            o = body + at
            if o + 8 > end:
                continue
            high, low = struct.unpack_from(order + "iI", out, o)
            seq = ((high << 32) | low) + by
            struct.pack_into(order + "iI", out, o, seq >> 32, seq & 0xFFFFFFFF)
    return bytes(out)


def events(repeat: int) -> tuple[list, int]:
    """Events of the whole recording, then `repeat` steady replays; and how many events
    the first part is."""
    from otel_ebpf.protocols.base import Direction, Role

    from otel_ebpf.kernel import abi

    grams = datagrams()
    first = min(i for i, g in enumerate(grams) if user_writer(bytes.fromhex(g["hex"])))
    steady = [g for g in grams[first:] if user_writer(bytes.fromhex(g["hex"]))]
    t0 = min(g["ts_ns"] for g in grams)
    span_ns = max(g["ts_ns"] for g in grams) - t0 + 1_000_000
    out: list = []
    pos: dict[tuple, int] = {}
    for g in grams:
        key = (g["pid"], g["fd"], 1)
        if (key, 0) not in pos:
            pos[(key, 0)] = pos[(key, 1)] = 0
            out.append(abi.ConnOpen(key=key, ts_ns=g["ts_ns"] - 1, tid=g["pid"],
                                    role=Role.UNKNOWN, flags=0, family=2,
                                    local_addr="127.0.0.1", local_port=7400 + g["fd"],
                                    remote_addr="0.0.0.0", remote_port=0, comm="dds_peer"))
    def data(g: dict, payload: bytes, shift_ns: int) -> None:
        key = (g["pid"], g["fd"], 1)
        direction = Direction.EGRESS if g["direction"] == "out" else Direction.INGRESS
        p = pos[(key, int(direction))]
        pos[(key, int(direction))] = p + g["len"]
        ts = g["ts_ns"] + shift_ns
        out.append(abi.DataEvent(key=key, tid=g["pid"], enter_ns=ts - 2_000, exit_ns=ts,
                                 direction=direction, pos=p, msg_len=g["len"], tcp_seq=None,
                                 payload=payload, peer=tuple(g["peer"]) if g["peer"] else None))

    for g in grams:
        data(g, bytes.fromhex(g["hex"]), 0)
    head = len(out)
    raw = [(g, bytes.fromhex(g["hex"])) for g in steady]
    for r in range(1, repeat + 1):
        for g, buf in raw:
            data(g, shifted(buf, 10 * r), r * span_ns)
    return out, head


def record_of(ev) -> bytes:
    from otel_ebpf.kernel import abi

    def raw(addr: str) -> bytes:
        return bytes(map(int, addr.split("."))).ljust(16, b"\0")

    if type(ev) is abi.ConnOpen:
        return abi.CONN_OPEN.pack(abi.EV_CONN_OPEN, ev.tid, ev.ts_ns, *ev.key,
                                  raw(ev.local_addr), ev.local_port, ev.family,
                                  raw(ev.remote_addr), ev.remote_port, ev.family, int(ev.role),
                                  ev.flags, ev.comm.encode())
    if type(ev) is abi.ConnClose:
        return abi.CONN_CLOSE.pack(abi.EV_CONN_CLOSE, ev.key[0], ev.ts_ns, *ev.key,
                                   ev.bytes_sent, ev.bytes_recv)
    addr, port = ev.peer if ev.peer else ("0.0.0.0", 0)
    return abi.DATA.pack(abi.EV_DATA, ev.tid, ev.enter_ns, *ev.key, ev.exit_ns, ev.pos,
                         ev.msg_len, len(ev.payload), 0, int(ev.direction),
                         abi.DATA_F_NO_SEQ | (abi.DATA_F_HAS_PEER if ev.peer else 0), 0,
                         raw(addr), port, 2, 0) + ev.payload


class Pipeline:
    """The agent's path from events to correlated spans (IDs assigned), fed in batches."""

    def __init__(self) -> None:
        from otel_ebpf.protocols.registry import Registry

        from otel_ebpf.conntrack.table import ConnTable
        from otel_ebpf.correlate import Correlator
        from otel_ebpf.telemetry import Stats

        stats = Stats()
        registry = Registry.from_config(list(ENABLED), {})
        self.table = ConnTable(registry, stats, 65536, 300 * 10**9)
        self.correlator = Correlator(stats, 2 * 10**9, (), max_requests=100_000)

    def feed(self, evs: list, now_ns: int = 10**18) -> list:
        from otel_ebpf.correlate import assign_ids

        spans: list = []
        for i in range(0, len(evs), BATCH):
            done = self.table.handle(evs[i : i + BATCH])
            self.correlator.observe(self.table.observed)
            self.table.observed.clear()
            spans += self.correlator.on_spans(done, now_ns)
        assign_ids(spans)
        return spans

    def close(self) -> list:
        from otel_ebpf.correlate import assign_ids

        spans = self.correlator.on_spans(self.table.close_all(), 10**18)
        spans += self.correlator.flush()
        assign_ids(spans)
        return spans


def one_round(repeat: int, profile=None) -> dict[str, float]:
    from otel_ebpf.export.otlp_json import spans_to_otlp_json
    from otel_ebpf.export.otlp_proto import spans_to_otlp_proto
    from otel_ebpf.kernel import abi
    from otel_ebpf.spans.clock import KernelClock
    from otel_ebpf.spans.convert import ready, resource_for

    evs, head = events(repeat)
    records = [record_of(ev) for ev in evs[head:]]
    pipeline = Pipeline()
    pipeline.feed(evs[:head])
    t0 = time.process_time()
    decoded: list = []
    for i in range(0, len(records), BATCH):
        decoded += abi.decode_batch(records[i : i + BATCH])[0]
    t1 = time.process_time()
    if profile is not None:
        profile.enable()
    spans = pipeline.feed(decoded)
    spans += pipeline.close()
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
    per = 1e6 / max(len(spans), 1)
    return dict(zip(STAGES, ((t1 - t0) * per, (t2 - t1) * per, (t3 - t2) * per,
                             (t4 - t3) * per, (t5 - t4) * per)), spans=len(spans))


def cell(values: list[float]) -> str:
    return f"{statistics.median(values):.1f} [{min(values):.1f}–{max(values):.1f}]"


def total(r: dict[str, float]) -> float:
    return sum(r[s] for s in STAGES)


def against(args) -> None:
    runs: dict[str, list] = {"before": [], "after": []}
    roots = {"before": str(args.against.resolve()), "after": str(HERE.parent)}
    for i in range(args.rounds):
        for side in (("before", "after") if i % 2 == 0 else ("after", "before")):
            out = subprocess.run([sys.executable, __file__, "--root", roots[side], "--rounds", "1",
                                  "--repeat", str(args.repeat), "--json",
                                  *(["--agent-gc"] if args.agent_gc else [])],
                                 check=True, capture_output=True, text=True).stdout
            runs[side] += json.loads(out)
    lines = [f"### Agent CPU per ROS 2 / DDS span, before and after "
             f"({time.strftime('%Y-%m-%d')}, recorded RTPS datagrams, median [min–max] of "
             f"{args.rounds} interleaved rounds, µs per span)", "",
             f"`.venv/bin/python bench/rtps_pipeline.py --against DIR --rounds {args.rounds} "
             f"--repeat {args.repeat}{' --agent-gc' if args.agent_gc else ''}`", "",
             "| stage | before | after | after / before |", "|---|---:|---:|---:|"]
    for stage in (*STAGES, "the agent's path"):
        get = total if stage == "the agent's path" else (lambda r, s=stage: r[s])
        b, a = [get(r) for r in runs["before"]], [get(r) for r in runs["after"]]
        name = f"**{stage}**" if stage == "the agent's path" else stage
        lines.append(f"| {name} | {cell(b)} | {cell(a)} | "
                     f"{statistics.median(a) / statistics.median(b):.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as fh:
            fh.write("\n" + text)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=100)
    ap.add_argument("--root", type=Path, help="import otel_ebpf from this checkout")
    ap.add_argument("--against", type=Path)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--agent-gc", action="store_true",
                    help="after the warm-up round, the garbage collector as the agent sets it "
                         "once started (otel_ebpf/agent.py _tune_gc); without it, Python's "
                         "defaults")
    args = ap.parse_args()
    if not (1 <= args.rounds <= 100 and 1 <= args.repeat <= 10_000):
        ap.error("--rounds 1..100, --repeat 1..10000")
    sys.path.insert(0, str((args.root or HERE.parent).resolve()))
    if args.against:
        return against(args)
    import cProfile
    import pstats
    profile = cProfile.Profile() if args.profile else None
    one_round(2)  # imports and first-call caches: not what a span costs
    if args.agent_gc:  # the checkout's own agent settings (either side of --against)
        from otel_ebpf import agent

        agent._tune_gc()
    results = [one_round(args.repeat, profile) for _ in range(args.rounds)]
    if args.json:
        print(json.dumps(results))
        return
    print(", ".join(f"{s} {cell([r[s] for r in results])}" for s in STAGES)
          + f", total {cell([total(r) for r in results])} µs per span; "
          f"{results[0]['spans']:.0f} spans a round")
    if profile is not None:
        pstats.Stats(profile).sort_stats("tottime").print_stats(30)


if __name__ == "__main__":
    main()
