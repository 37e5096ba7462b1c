"""On a GPU machine: a PyTorch single-GPU NCCL all-reduce of a known size, seen by the
NCCL uprobes of bpf/rdma.bpf.c (the libnccl.so.2 inside PyTorch's nvidia-nccl wheel, found
in the worker's /proc/PID/maps as the agent finds it). Prints what the probes counted,
the nccl.* metric points built from it, and whether they match; exit 1 when not.
Command and result: docs/rdma.md.

    sudo .venv/bin/python bench/rdma_nccl_device.py --elements 16777216 --iterations 10
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from otel_ebpf.kernel.libbpf import LibbpfLog  # noqa: E402
from otel_ebpf.kernel.rdma_probes import RdmaProbes  # noqa: E402
from otel_ebpf.rdma.usage import RdmaUsage  # noqa: E402

WORKER = r"""
import os, sys
import torch, torch.distributed as dist
n, k = int(sys.argv[1]), int(sys.argv[2])
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:29533", rank=0, world_size=1,
                        device_id=torch.device("cuda", 0))
x = torch.ones(n, dtype=torch.float32, device="cuda")
nccl = ".".join(map(str, torch.cuda.nccl.version()))
print("ready", torch.__version__, nccl, torch.cuda.get_device_name(0), flush=True)
sys.stdin.readline()
for _ in range(k):
    dist.all_reduce(x)
torch.cuda.synchronize()
print("done", float(x[0]), flush=True)
sys.stdin.readline()
dist.destroy_process_group()
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--elements", type=int, default=16 << 20, help="float32 elements")
    ap.add_argument("--iterations", type=int, default=10)
    ap.add_argument("--out", default=os.environ.get("OUT", ""), help="folder for result.json")
    args = ap.parse_args()

    probes = RdmaProbes(LibbpfLog())
    # NVLink multicast stays off on shared machines
    env = {**os.environ, "NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1"}
    worker = subprocess.Popen([sys.executable, "-c", WORKER, str(args.elements),
                               str(args.iterations)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True, env=env)
    try:
        ready = worker.stdout.readline().split()
        if not ready or ready[0] != "ready":
            raise SystemExit(f"worker failed to start (exit {worker.wait(30)})")
        torch_version, nccl_version, gpu = ready[1], ready[2], " ".join(ready[3:])
        attached = probes.scan([worker.pid])
        t0 = time.monotonic()
        worker.stdin.write("go\n")
        worker.stdin.flush()
        done = worker.stdout.readline().split()
        seconds = time.monotonic() - t0
        totals = [t for t in probes.collectives() if t.pid == worker.pid]
        usage = RdmaUsage()
        usage.set_collectives(totals)
        metrics = usage.metrics(worker.pid, probes.attached_ns or 0, time.time_ns())
    finally:
        worker.stdin.close()
        worker.wait(60)
        probes.close()

    points = [{"metric": m.name, "unit": m.unit, "attributes": dict(p.attributes),
               "value": p.value} for m in metrics for p in m.data.data_points]
    expected = {"calls": args.iterations, "bytes": args.iterations * args.elements * 4}
    seen = {p["metric"]: p["value"] for p in points
            if p["attributes"] == {"nccl.operation": "AllReduce", "nccl.datatype": "float32"}}
    result = {
        "kernel": os.uname().release, "gpu": gpu, "torch": torch_version, "nccl": nccl_version,
        "libnccl": sorted(probes.nccl), "files_attached": attached,
        "worker_result": done, "all_reduce_seconds": round(seconds, 3),
        "totals": [dataclasses.asdict(t) for t in totals],
        "points": points, "expected": expected,
        "match": seen.get("nccl.calls") == expected["calls"]
        and seen.get("nccl.bytes") == expected["bytes"],
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        Path(args.out, "result.json").write_text(text + "\n")
    return 0 if result["match"] else 1


if __name__ == "__main__":
    sys.exit(main())
