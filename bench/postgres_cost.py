"""What the postgres parser costs the agent per exchange, stage by stage
(bench/agent_pipeline.py's stages, no kernel), a client and a server connection each seeing
every exchange: a simple query (Query; RowDescription, one DataRow, CommandComplete,
ReadyForQuery), an extended-protocol execute as psycopg sends it (Parse, Bind, Describe,
Execute, Sync of the unnamed statement; their five answers), and the HTTP/1 GET of
bench/agent_pipeline.py beside them for scale.

    .venv/bin/python bench/postgres_cost.py [--exchanges 5000] [--rounds 5] [--out docs/performance.md]

Rounds are interleaved, their order rotating (a noisy machine); times are this process's
CPU time. Medians [min–max] over rounds, µs per exchange at both ends; one end is half.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.agent_pipeline import ENABLED, one_round  # noqa: E402
from bench.side_by_side import publish, rotated, spread  # noqa: E402
from otel_ebpf import _fast  # noqa: E402
from tests.protocols.postgres import messages as m  # noqa: E402

TEXT = "SELECT id, name FROM users WHERE id = 42 AND status = 'active'"
SIMPLE = (m.query(TEXT), m.row_description("id", "name") + m.data_row(b"42", b"ann")
          + m.complete("SELECT 1") + m.ready())
EXTENDED = (m.parse("SELECT id, name FROM users WHERE id = $1") + m.bind((b"42",))
            + m.describe() + m.execute() + m.SYNC,
            m.PARSE_COMPLETE + m.BIND_COMPLETE + m.row_description("id", "name")
            + m.data_row(b"42", b"ann") + m.complete("SELECT 1") + m.ready())
WITH_PG = (*ENABLED, "postgres")
# (name, enabled, request, response or None for agent_pipeline's own)
WORKLOADS = (
    ("HTTP/1 GET (reference)", ENABLED, None, None),
    ("simple query, one row", WITH_PG, *SIMPLE),
    ("extended protocol execute (P/B/D/E/S), one row", WITH_PG, *EXTENDED),
)
STAGES = ("ring records to events", "parse and correlate",
          "ready for export (resource, wall clock)", "OTLP protobuf, direct (otlp exporter)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--exchanges", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if _fast.ring is None or _fast.otlp is None:
        sys.exit("otel_ebpf._fast is not built (make install) or OTEL_EBPF_PURE_PYTHON is set")
    runs: dict[str, list[dict[str, float]]] = {w[0]: [] for w in WORKLOADS}
    for i in range(args.rounds):
        order = rotated(WORKLOADS, i)
        for name, enabled, request, response in order:
            kw = {} if request is None else {"request": request, "response": response}
            runs[name].append(one_round(args.exchanges, None, True, enabled=enabled, **kw))

    lines = [f"### PostgreSQL parser cost per exchange ({time.strftime('%Y-%m-%d')}, "
             f"{args.exchanges} exchanges seen at both ends, median [min–max] of "
             f"{args.rounds} interleaved rounds, compiled path)", "",
             f"`.venv/bin/python bench/postgres_cost.py --exchanges {args.exchanges} "
             f"--rounds {args.rounds}`", "",
             "| workload | parse and correlate µs, both ends | agent's path µs, both ends "
             "(records to OTLP protobuf) | agent's path µs, one end |", "|---|---:|---:|---:|"]
    for name, *_ in WORKLOADS:
        parse = [r["parse and correlate"] for r in runs[name]]
        path = [sum(r[k] for k in STAGES) for r in runs[name]]
        lines.append(f"| {name} | {spread(parse)} | {spread(path)} | {spread([p / 2 for p in path])} |")
    publish(lines, args.out)


if __name__ == "__main__":
    main()
