"""Cost of the TLS uprobes: ns added to each SSL_write + SSL_read pair on a loopback TLS
connection (Python's ssl module over the system libssl), side by side in one run:

  off        no BPF program attached (the baseline)
  filtered   uprobes attached, the connection not selected (targets.ports elsewhere):
             every SSL call still enters the kernel twice (uprobe + uretprobe)
  traced     uprobes attached, the connection selected: every call copies its plaintext

Run as root:  .venv/bin/python bench/ssl_overhead.py [--rounds 5] [--iterations 20000]
              [--size 256] [--out docs/performance.md]

Each round runs every mode once, in a fresh process; the table reports medians over rounds
and the ratio to `off`. The ring buffer is drained concurrently, as the agent does. Needs
the test extra (trustme) for the certificate.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.kernel_overhead import free_port  # noqa: E402
from bench.side_by_side import cost_table, publish, rounds  # noqa: E402

LOOP = r"""
import json, socket, ssl, sys, threading, time
port, n, size, cert, key, ca = sys.argv[1:7]
port, n, size = int(port), int(n), int(size)
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port)); srv.listen()
server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); server_ctx.load_cert_chain(cert, key)
client_ctx = ssl.create_default_context(cafile=ca)
accepted = {}
def accept():
    conn, _ = srv.accept()
    accepted["s"] = server_ctx.wrap_socket(conn, server_side=True)
t = threading.Thread(target=accept); t.start()
c = client_ctx.wrap_socket(socket.create_connection(("127.0.0.1", port)),
                           server_hostname="127.0.0.1")
t.join(10)
s, msg = accepted["s"], b"x" * size
def pair():
    c.sendall(msg)
    got = 0
    while got < size:
        got += len(s.recv(size - got))
for _ in range(1000):  # warm up
    pair()
t0 = time.perf_counter_ns()
for _ in range(n):
    pair()
print(json.dumps({"ns_per_pair": (time.perf_counter_ns() - t0) / n}))
"""


def certificates(tmp: Path) -> tuple[str, str, str]:
    import trustme

    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    paths = tmp / "cert.pem", tmp / "key.pem", tmp / "ca.pem"
    server.cert_chain_pems[0].write_to_path(paths[0])
    server.private_key_pem.write_to_path(paths[1])
    ca.cert_pem.write_to_path(paths[2])
    return tuple(str(p) for p in paths)  # type: ignore[return-value]


def run_loop(port: int, iterations: int, size: int, certs: tuple[str, str, str]) -> float:
    out = subprocess.run([sys.executable, "-c", LOOP, str(port), str(iterations), str(size),
                          *certs], capture_output=True, text=True, check=True, timeout=600)
    return json.loads(out.stdout)["ns_per_pair"]


def measure(mode: str, iterations: int, size: int, certs: tuple[str, str, str]
            ) -> tuple[float, int, int, int]:
    """ns per SSL_write+SSL_read pair in `mode`; TLS events drained; drops; unbound calls."""
    from otel_ebpf.kernel import abi
    from otel_ebpf.kernel.libbpf import LibbpfLog
    from otel_ebpf.kernel.socket_tracer import CaptureSettings, SocketTracer

    port = free_port()
    if mode == "off":
        return run_loop(port, iterations, size, certs), 0, 0, 0
    selected = port if mode == "traced" else free_port()
    tracer = SocketTracer(CaptureSettings(ports=(selected,), capture_max=4096), LibbpfLog())
    tracer.ssl.scan_system()
    drained, stop = [0], threading.Event()

    def drain() -> None:
        while not stop.is_set():
            drained[0] += sum(1 for r in tracer.ring.drain(100)
                              if r[0] == abi.EV_DATA and abi.decode(r).tls)

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        ns = run_loop(port, iterations, size, certs)
    finally:
        stop.set()
        thread.join(5)
        drained[0] += sum(1 for r in tracer.ring.drain(0)
                          if r[0] == abi.EV_DATA and abi.decode(r).tls)
        counters = tracer.kernel_counters()
        tracer.close()
    return ns, drained[0], sum(counters["ringbuf_drops"]), sum(counters["tls_unbound"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--out", type=Path, help="append the table to this Markdown file")
    args = ap.parse_args()
    modes = ("off", "filtered", "traced")
    totals = [0, 0, 0]  # TLS events drained, drops, unbound SSL calls

    def one(mode: str) -> float:
        ns, *counts = measure(mode, args.iterations, args.size, certs)
        for i, n in enumerate(counts):
            totals[i] += n
        return ns

    with tempfile.TemporaryDirectory() as tmp:
        certs = certificates(Path(tmp))
        results = rounds(modes, args.rounds, one, "ns per SSL pair")
    lines = cost_table(
        f"### TLS uprobe cost per SSL call ({time.strftime('%Y-%m-%d')}, {args.iterations} "
        f"SSL_write+SSL_read pairs of {args.size} B, median of {args.rounds} rounds)",
        "SSL_write+SSL_read", "SSL call", results)
    expected = 2 * (args.iterations + 1000) * args.rounds
    lines += ["", f"TLS data events drained while traced: {totals[0]} of {expected} expected "
              f"(2 per pair, warm-up included); ring-buffer drops: {totals[1]}; SSL calls "
              f"whose socket was not found: {totals[2]}. Each pair also makes a write and "
              f"a read syscall, whose own (ciphertext) capture cost is in both traced "
              f"and filtered modes."]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
