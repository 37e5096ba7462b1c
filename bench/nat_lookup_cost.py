"""What the agent pays to read one client connection's NAT from conntrack
(otel_ebpf/conntrack/nat.py), by way (netlink, procfs) and by the size of the namespace's
conntrack table.

Run as root, from the repository root:

    sudo .venv/bin/python -m bench.nat_lookup_cost [--sizes 16,256,1000] [--rounds 5]

Two network namespaces (tests/support/nodes.py): a server in node B, a ClusterIP Service in
node A (kube-proxy's nftables DNAT), and a client in node A holding N connections to the
Service open: node A's conntrack table then holds N translated entries. For each N, every
connection is looked up as the agent does (`NatLookup.server_view`: the process's namespace
found in /proc, its entry asked for, the answer checked) in `--rounds` rounds with a fresh
lookup object each round, so that each round also opens the namespace's socket once (a
thread enters the namespace). Printed: the first lookup of a round (the socket's opening
included) and the median of the others, in microseconds, per way.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

from otel_ebpf.conntrack.nat import NatLookup
from otel_ebpf.protocols.base import ConnInfo, Role

VIP, SERVER_PORT = "10.96.100.10", 8080
SERVER = """
import socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(4096)
import resource
resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
held = []
while True:
    held.append(s.accept()[0])
"""
CLIENT = """
import json, resource, socket, sys, time
resource.setrlimit(resource.RLIMIT_NOFILE, (8192, 8192))
held = []
for _ in range(int(sys.argv[2])):
    c = socket.create_connection((sys.argv[1], 80), timeout=10)
    held.append(c)
print(json.dumps([c.getsockname() for c in held]), flush=True)
time.sleep(600)
"""


def measure(sizes: list[int], rounds: int, workdir: Path) -> list[dict]:
    from tests.support.nodes import two_nodes

    rows = []
    with two_nodes(cgroups=False) as (a, b):
        server = b.spawn([sys.executable, "-c", SERVER, str(SERVER_PORT)],
                         log=workdir / "server.log")
        b.wait_port(SERVER_PORT, server)
        a.service("default/server", VIP, 80, b.address, SERVER_PORT)
        for size in sizes:
            client = a.spawn([sys.executable, "-c", CLIENT, VIP, str(size)],
                             log=workdir / f"client-{size}.log")
            try:
                deadline = time.monotonic() + 120
                while not client.output().strip() and time.monotonic() < deadline:
                    if client.poll() is not None:
                        raise RuntimeError(client.output())
                    time.sleep(0.1)
                ends = json.loads(client.output().strip().splitlines()[-1])
                table = a.conntrack().count("\n")
                infos = [ConnInfo(pid=client.pid, fd=3 + i, generation=1, role=Role.CLIENT,
                                  transport="stream", family="ipv4", local_addr=addr,
                                  local_port=port, remote_addr=VIP, remote_port=80)
                         for i, (addr, port) in enumerate(ends)]
                for method in ("netlink", "procfs"):
                    first, rest = [], []
                    for _ in range(rounds):
                        lookup = NatLookup(per_second=1 << 30, time_share=1.0, method=method)
                        try:
                            for i, info in enumerate(infos):
                                t0 = time.perf_counter_ns()
                                view = lookup.server_view(info)
                                took = (time.perf_counter_ns() - t0) / 1000
                                if view is None or view[2:] != (b.address, SERVER_PORT):
                                    raise RuntimeError(f"{method}: {info} gave {view}")
                                (first if i == 0 else rest).append(took)
                        finally:
                            lookup.close()
                    rows.append({"connections": size, "table": table, "method": method,
                                 "first_us": round(statistics.median(first), 1),
                                 "median_us": round(statistics.median(rest), 1) if rest
                                 else None, "lookups": len(first) + len(rest)})
                    print(json.dumps(rows[-1]), flush=True)
            finally:
                client.stop()
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.nat_lookup_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--sizes", default="16,256,1000", help="connections held, comma-separated")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--workdir", type=Path)
    a = p.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root (network namespaces, nftables)", file=sys.stderr)
        return 1
    import tempfile

    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="otel-ebpf-nat-cost-"))
    workdir.mkdir(parents=True, exist_ok=True)
    rows = measure([int(x) for x in a.sizes.split(",") if x], a.rounds, workdir)
    print("| connections | conntrack entries | way | first lookup (µs) | then, median (µs) |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['connections']} | {r['table']} | {r['method']} | {r['first_us']} | "
              f"{r['median_us']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
