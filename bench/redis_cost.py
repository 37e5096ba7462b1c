"""What the redis parser costs the agent per command seen at both ends (a client's and a
server's connection), stage by stage (bench/agent_pipeline.py's stages, no kernel), beside
the HTTP/1 exchange the cost budget is stated for: a GET, a SET of a 64-byte value, and a
pipeline of 10 GETs written and read in one call each.

    .venv/bin/python bench/redis_cost.py [--exchanges 5000] [--rounds 5] [--out docs/performance.md]

Rounds are interleaved, their order rotating (a noisy machine); times are this process's
CPU time. Medians [min–max] over rounds, µs per exchange and per command.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.agent_pipeline import ENABLED, REQUEST, RESPONSE, one_round  # noqa: E402
from bench.side_by_side import publish, rotated, spread  # noqa: E402
from otel_ebpf import _fast  # noqa: E402
from otel_ebpf.protocols.http1 import parse as http1_parse  # noqa: E402


def command(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


GET = command(b"GET", b"user:1234")
VALUE = b"v" * 64
REPLY = b"$%d\r\n%s\r\n" % (len(VALUE), VALUE)
SET = command(b"SET", b"user:1234", VALUE)
PIPELINE = b"".join(command(b"GET", b"user:%d" % i) for i in range(10))
ENABLED_ALL = (*ENABLED, "redis")
# (name, request, response, commands per exchange)
WORKLOADS = (
    ("HTTP/1 GET (the budget's exchange)", REQUEST, RESPONSE, 1),
    ("redis GET, a 64-byte value back", GET, REPLY, 1),
    ("redis SET of a 64-byte value", SET, b"+OK\r\n", 1),
    ("redis pipeline of 10 GETs", PIPELINE, REPLY * 10, 10),
)
PATH = ("ring records to events", "parse and correlate",
        "ready for export (resource, wall clock)", "OTLP protobuf, direct (otlp exporter)")


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
        for name, request, response, per in order:
            runs[name].append(one_round(args.exchanges, None, True, enabled=ENABLED_ALL,
                                        request=request, response=response,
                                        spans_per_exchange=2 * per))

    lines = [f"### Redis cost per command seen at both ends ({time.strftime('%Y-%m-%d')}, "
             f"{args.exchanges} exchanges, median [min–max] of {args.rounds} interleaved rounds, "
             "compiled path)", "",
             f"`.venv/bin/python bench/redis_cost.py --exchanges {args.exchanges} "
             f"--rounds {args.rounds}`", "",
             "| workload | commands per exchange | parse and correlate µs per command | "
             "agent's path µs per command (records to OTLP protobuf) |", "|---|---:|---:|---:|"]
    for name, _, _, per in WORKLOADS:
        parse = [r["parse and correlate"] / per for r in runs[name]]
        path = [sum(r[k] for k in PATH) / per for r in runs[name]]
        lines.append(f"| {name} | {per} | {spread(parse)} | {spread(path)} |")
    publish(lines, args.out)


if __name__ == "__main__":
    main()
