"""What a Context probe costs the watched program, by how it is attached: ns per
`contextvars.copy_context()` in three processes at once (one the probes are for, another
process of the same interpreter, and a child the first one forks), with the probe pair on
the interpreter file for every process, for one process, for one process with 16 other
processes probed too (each is one more consumer every trap walks), and the entry probe alone.

    sudo .venv/bin/python bench/context_probe_cost.py [--copies 200000] [--rounds 3]

Each loop runs `--copies` copies `--rounds` times in a fresh process per mode (medians over
rounds, [min-max]). Prints Markdown.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from otel_ebpf.kernel.asyncio_probes import interpreter_record, interpreters_of  # noqa: E402
from otel_ebpf.kernel.libbpf import LibbpfLog  # noqa: E402
from otel_ebpf.kernel.socket_tracer import CaptureSettings, SocketTracer  # noqa: E402

# a copy loop that starts on a file's appearance; with "fork" it forks first and the child
# runs its loop before the parent's
LOOP = """
import contextvars, os, sys, time
def loop(n, rounds):
    out = []
    for _ in range(rounds):
        t = time.perf_counter_ns()
        for _ in range(n):
            contextvars.copy_context()
        out.append((time.perf_counter_ns() - t) / n)
    return out
go, n, rounds, fork = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == "fork"
print(os.getpid(), flush=True)
while not os.path.exists(go):
    time.sleep(0.01)
if fork:
    child = os.fork()
    if child == 0:
        print("child", *loop(n, rounds), flush=True)
        os._exit(0)
    os.waitpid(child, 0)
print("self", *loop(n, rounds), flush=True)
"""
MODES = {
    "no probes": None,
    "pair on the file (every process)": "file",
    "pair for one process": "process",
    "pair for one process, 16 others probed": "process+16",
    "entry probe alone, for one process": "entry",
}


def measure(tracer: SocketTracer, mode: str | None, copies: int, rounds: int,
            work: Path) -> dict[str, list[float]]:
    go = work / f"go-{time.monotonic_ns()}"
    py = sys.executable
    probed = subprocess.Popen([py, "-c", LOOP, str(go), str(copies), str(rounds), "fork"],
                              stdout=subprocess.PIPE, text=True)
    other = subprocess.Popen([py, "-c", LOOP, str(go), str(copies), str(rounds), "-"],
                             stdout=subprocess.PIPE, text=True)
    idle = []
    try:
        pid = int(probed.stdout.readline())
        int(other.stdout.readline())
        path = sorted(interpreters_of(pid))[0]
        offset, record = interpreter_record(path)
        obj = tracer.obj
        obj.map("py_ctx_files").update((0).to_bytes(4, "little"), record)
        links = []
        if mode is not None:
            target = -1 if mode == "file" else pid
            links.append(obj.attach_uprobe("context_copy_enter", path, offset, pid=target,
                                           cookie=0))
            if mode != "entry":
                links.append(obj.attach_uprobe("context_copy_return", path, offset,
                                               retprobe=True, pid=target, cookie=0))
            if mode == "process+16":
                idle = [subprocess.Popen([py, "-c", "import time; time.sleep(600)"])
                        for _ in range(16)]
                for p in idle:
                    links.append(obj.attach_uprobe("context_copy_enter", path, offset,
                                                   pid=p.pid, cookie=0))
                    links.append(obj.attach_uprobe("context_copy_return", path, offset,
                                                   retprobe=True, pid=p.pid, cookie=0))
        go.touch()
        out = {}
        for proc, names in ((probed, ("child", "self")), (other, ("self",))):
            lines = proc.communicate(timeout=600)[0].split("\n")
            for line in lines:
                if line.split(" ", 1)[0] in names:
                    label = {"self": "probed process" if proc is probed else "another process",
                             "child": "its forked child"}[line.split()[0]]
                    out[label] = [float(x) for x in line.split()[1:]]
        for link in links:
            obj.detach(link)
        return out
    finally:
        for p in (probed, other, *idle):
            p.kill()
            p.wait()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--copies", type=int, default=200_000)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    tracer = SocketTracer(CaptureSettings(ports=(1,)), LibbpfLog())
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, mode in MODES.items():
            print(f"{label}...", file=sys.stderr, flush=True)
            rows.append((label, measure(tracer, mode, args.copies, args.rounds, Path(tmp))))
    cols = ("probed process", "another process", "its forked child")
    print(f"### Context probe cost per copy_context() ({time.strftime('%Y-%m-%d')}, "
          f"{args.copies} copies, median [min–max] of {args.rounds} loops, ns)\n")
    print("| probes | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for label, out in rows:
        cells = [f"{statistics.median(out[c]):.0f} [{min(out[c]):.0f}–{max(out[c]):.0f}]"
                 if c in out else "n/a" for c in cols]
        print(f"| {label} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
