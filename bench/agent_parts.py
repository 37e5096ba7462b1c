"""Where `parse and correlate` goes (bench/agent_pipeline.py's traffic and stage), part by
part, in one process: the connection table with its parsers (events to frames and
records), the HTTP/1 span attributes of those records (to_spans), and the correlator over
the frames and spans the table gave. Each part is timed alone, over the same recorded
input, on the compiled path (what the agent runs when otel_ebpf/_fast is built).

    .venv/bin/python bench/agent_parts.py [--exchanges 3000] [--rounds 7]

Medians [min–max] over rounds of CPU time (time.process_time), µs per exchange (4 data
events, 4 frames, 2 spans).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.agent_pipeline import BATCH, ENABLED, events  # noqa: E402
from otel_ebpf.conntrack.table import ConnTable  # noqa: E402
from otel_ebpf.correlate import Correlator  # noqa: E402
from otel_ebpf.protocols.http1 import HTTP1Parser  # noqa: E402
from otel_ebpf.protocols.http1 import spans as http1_spans  # noqa: E402
from otel_ebpf.protocols.registry import Registry  # noqa: E402
from otel_ebpf.telemetry import Stats  # noqa: E402


def _registry() -> Registry:
    return Registry.from_config(list(ENABLED), {"http1": {"correlation_headers": ["x-request-id"]}})


def _table_pass(evs: list, keep: list | None) -> float:
    """One pass of the table over the events; `keep`: gets the records it stitched and the
    frames and spans of each batch (an untimed pass: held objects make the collector work)."""
    table = ConnTable(_registry(), Stats(), 65536, 300 * 10**9)
    to_spans = HTTP1Parser.to_spans
    if keep is not None:
        def kept(parser, record, conn):  # noqa: ANN001, ANN202
            keep.append((parser, record, conn))
            return to_spans(parser, record, conn)
        HTTP1Parser.to_spans = kept
    try:
        t0 = time.process_time()
        for i in range(0, len(evs), BATCH):
            done = table.handle(evs[i : i + BATCH])
            if keep is not None:
                keep.append((list(table.observed), done))
            table.observed.clear()
        return time.process_time() - t0
    finally:
        HTTP1Parser.to_spans = to_spans


def one_round(evs: list, exchanges: int) -> dict[str, float]:
    us = 1e6 / exchanges
    held: list = []
    _table_pass(evs, held)
    records = [h for h in held if not isinstance(h[0], list)]
    to_spans = HTTP1Parser.to_spans  # compiled where it can be (protocols/http1/_parse.c span)
    batches = [h for h in held if isinstance(h[0], list)]
    table = _table_pass(evs, None)  # timed: frames and spans let go, as the agent does
    t0 = time.process_time()
    for parser, record, conn in records:
        to_spans(parser, record, conn)
    spans = time.process_time() - t0
    t0 = time.process_time()
    for _, record, conn in records:
        http1_spans.to_spans(record, conn)
    spans_python = time.process_time() - t0
    correlator = Correlator(Stats(), 2 * 10**9, ("x-request-id",), max_requests=100_000)
    t0 = time.process_time()
    for observed, done in batches:
        correlator.observe(observed)
        correlator.on_spans(done, 10**18)
    correlator.flush()
    correlate = time.process_time() - t0
    return {"connection table, parsers, stitching (without span attributes)": (table - spans) * us,
            "HTTP/1 span attributes (to_spans)": spans * us,
            "HTTP/1 span attributes, the Python reference alone": spans_python * us,
            "correlator (frames, then spans)": correlate * us}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--exchanges", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--gc-defaults", action="store_true",
                    help="leave the cyclic collector as Python sets it (the agent tunes it)")
    args = ap.parse_args()
    if not args.gc_defaults:  # what the running agent does once started (agent._tune_gc)
        from otel_ebpf.agent import _tune_gc  # noqa: PLC0415
        _tune_gc()
    evs = events(args.exchanges)
    rounds = [one_round(evs, args.exchanges) for _ in range(args.rounds)]
    print("| part of parse and correlate | µs per exchange |\n|---|---:|")
    for part in rounds[0]:
        values = [r[part] for r in rounds]
        print(f"| {part} | {statistics.median(values):.1f} "
              f"[{min(values):.1f}–{max(values):.1f}] |")


if __name__ == "__main__":
    main()
