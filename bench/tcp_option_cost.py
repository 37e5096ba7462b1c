"""Kernel cost of the trace-context TCP option (bpf/propagation.bpf.c): the sock_ops
program's runs and run time per request and per run, at the client's node and at the
server's, and the client's segments per request, side by side in one run, for three modes:

  off        both programs attached, the connection to a trusted address, nothing queued:
             what every trusted connection pays per segment (one lookup, a miss)
  on         the same with a context queued after every response, as the client's agent
             will queue them: each goes out on the next segment, and the server parses it
  untrusted  the connection to an address the client's node does not trust: the program
             runs once, when it is made, never per segment

Two network namespaces joined by a veth pair, a cgroup v2 for each node, the capture object
loaded once per node (its capture selecting nothing: only the option program's cost is
read), the client and server of tests/integration/peers/prop_peer.py (one request of
--size bytes and a response of --size bytes at a time on one keep-alive connection, the
client acknowledging each response at once). Runs and run time come from the kernel's
counters (kernel.bpf_stats_enabled, turned on for the run and back off), read with
BPF_OBJ_GET_INFO_BY_FD; segments from the client namespace's Tcp OutSegs.

Run as root:  .venv/bin/python bench/tcp_option_cost.py [--rounds 5] [--requests 2000]
              [--size 100]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from otel_ebpf.kernel.libbpf import LibbpfLog  # noqa: E402
from otel_ebpf.kernel.propagation import DEFAULT_TRUSTED_NETWORKS, PropagationSettings  # noqa: E402
from otel_ebpf.kernel.socket_tracer import CaptureSettings, SocketTracer  # noqa: E402
from tests.support.cgroups import PodCgroup, v2_root  # noqa: E402

PORT = 8080
TRUSTED = ("10.211.0.1", "10.211.0.2")
UNTRUSTED = ("198.18.1.1", "198.18.1.2")
STATS = Path("/proc/sys/kernel/bpf_stats_enabled")


def sh(*argv: str) -> str:
    return subprocess.run(argv, check=True, capture_output=True, text=True, timeout=30).stdout


def out_segs(ns: str) -> int:
    lines = [ln.split() for ln in sh("ip", "netns", "exec", ns, "cat", "/proc/net/snmp")
             .splitlines() if ln.startswith("Tcp:")]
    return int(lines[1][lines[0].index("OutSegs")])


class Peer:
    def __init__(self, cgroup: PodCgroup, ns: str, args: list[str]) -> None:
        argv = cgroup.wrap(["ip", "netns", "exec", ns, sys.executable, "-m",
                            "tests.integration.peers.prop_peer", *args])
        self.proc = subprocess.Popen(argv, cwd=REPO, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)

    def call(self, **cmd) -> dict:
        self.proc.stdin.write(json.dumps(cmd) + "\n")  # type: ignore[union-attr]
        self.proc.stdin.flush()  # type: ignore[union-attr]
        return json.loads(self.proc.stdout.readline())  # type: ignore[union-attr]

    def stop(self) -> None:
        with contextlib.suppress(OSError):
            self.proc.stdin.close()  # type: ignore[union-attr]
        self.proc.terminate()
        self.proc.wait(10)


def one_mode(mode: str, client: Peer, node_a, node_b, ns_a: str, n: int, size: int) -> dict:
    host = UNTRUSTED[1] if mode == "untrusted" else TRUSTED[1]
    conn = client.call(op="connect", host=host, port=PORT)
    local, remote = conn["local"], conn["remote"]
    client.call(op="request", size=size, response=size, seed=0)  # warm: after the handshake
    a0, b0, segs0 = node_a.stats(), node_b.stats(), out_segs(ns_a)
    for i in range(n):
        r = client.call(op="request", size=size, response=size, seed=i)
        if mode == "on":
            node_a.send(*local, *remote, r["offset"], i.to_bytes(16, "big"), True)
    a1, b1, segs1 = node_a.stats(), node_b.stats(), out_segs(ns_a)
    client.call(op="close")
    return {"client_runs": (a1[1] - a0[1]) / n, "client_ns": (a1[2] - a0[2]) / n,
            "server_runs": (b1[1] - b0[1]) / n, "server_ns": (b1[2] - b0[2]) / n,
            "segments": (segs1 - segs0) / n}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--size", type=int, default=100)
    args = ap.parse_args()
    tag = f"bench{os.getpid()}"
    ns_a, ns_b = f"{tag}-a", f"{tag}-b"
    root = v2_root()
    made: list[str] = []
    cgroups: list[PodCgroup] = []
    peers: list[Peer] = []
    tracers: list[SocketTracer] = []
    stats_before = STATS.read_text().strip()
    try:
        for ns in (ns_a, ns_b):
            sh("ip", "netns", "add", ns)
            made.append(ns)
        sh("ip", "link", "add", "tca" + tag[5:][:10], "netns", ns_a, "type", "veth", "peer",
           "name", "tcb" + tag[5:][:10], "netns", ns_b)
        for ns, dev, end in ((ns_a, "tca", 0), (ns_b, "tcb", 1)):
            dev += tag[5:][:10]
            for pair in (TRUSTED, UNTRUSTED):
                sh("ip", "-n", ns, "addr", "add", f"{pair[end]}/24", "dev", dev)
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        cg_a, cg_b = PodCgroup(root, f"{tag}-a"), PodCgroup(root, f"{tag}-b")
        cgroups += [cg_a, cg_b]
        logs = tempfile.TemporaryDirectory(prefix=tag)
        server = Peer(cg_b, ns_b, ["server", str(PORT), logs.name])
        peers.append(server)
        assert "listening" in server.proc.stdout.readline()  # type: ignore[union-attr]
        client = Peer(cg_a, ns_a, ["client"])
        peers.append(client)
        log = LibbpfLog()
        for cg in (cg_a, cg_b):  # the capture attached, selecting nothing (port 1)
            tracers.append(SocketTracer(CaptureSettings(
                ports=(1,), propagation=PropagationSettings(
                    DEFAULT_TRUSTED_NETWORKS, str(cg.path))), log))
        node_a, node_b = tracers[0].propagation, tracers[1].propagation
        STATS.write_text("1")
        results: dict[str, list[dict]] = {"off": [], "on": [], "untrusted": []}
        for r in range(args.rounds):
            for mode in results:
                results[mode].append(one_mode(mode, client, node_a, node_b, ns_a,
                                              args.requests, args.size))
                for tr in tracers:  # nothing accumulates in the rings
                    tr.poll(0)
            print(f"round {r + 1} of {args.rounds}", file=sys.stderr)
        counters = {"client": node_a.counters(), "server": node_b.counters()}
    finally:
        STATS.write_text(stats_before)
        for peer in reversed(peers):
            peer.stop()
        for tr in tracers:
            tr.close()
        for ns in made:
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        for cg in cgroups:
            cg.remove()
        if "logs" in locals():
            logs.cleanup()

    for rounds in results.values():
        for x in rounds:
            x["client_per_run"] = x["client_ns"] / x["client_runs"] if x["client_runs"] else 0
            x["server_per_run"] = x["server_ns"] / x["server_runs"] if x["server_runs"] else 0

    def spread(mode: str, key: str, fmt: str) -> str:
        xs = [x[key] for x in results[mode]]
        return f"{format(statistics.median(xs), fmt)} [{format(min(xs), fmt)}–{format(max(xs), fmt)}]"

    print(f"\n{args.rounds} rounds of {args.requests} requests of {args.size} B (responses "
          f"{args.size} B) on one keep-alive connection per mode; medians [min–max]\n")
    print("| mode | client segments per request | client program runs per request | client "
          "ns per run | client ns per request | server runs per request | server ns per run "
          "|")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for mode in results:
        print(f"| {mode} | {spread(mode, 'segments', '.2f')} | "
              f"{spread(mode, 'client_runs', '.2f')} | {spread(mode, 'client_per_run', '.0f')} | "
              f"{spread(mode, 'client_ns', '.0f')} | {spread(mode, 'server_runs', '.2f')} | "
              f"{spread(mode, 'server_per_run', '.0f')} |")
    print(f"\ncounters: {counters}")


if __name__ == "__main__":
    main()
