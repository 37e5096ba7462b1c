"""A PyTorch program that measures its own profile: prints READY, waits for a line on
stdin (the profiler attaches meanwhile), then imports torch under the profiler (before
READY instead with argv[2] == "early") and runs
`torch_hot` (torch.matmul in a loop) and `python_other` (pure Python) in alternation for
argv[1] seconds. At the end it prints one JSON line: the CPU seconds of the whole process
from the go line on (time.process_time, every thread) and of `torch_hot` alone
(time.thread_time around its calls; intra-op threads are set to 1, so its work stays on
this thread), so a test can compare the sampled share with the measured one.
With `threads=N` among the arguments, torch runs N intra-op threads (OpenMP workers,
MKL's too): the slices are then of the whole process's CPU (time.process_time, which the
workers' CPU adds to), `torch_hot_cpu_s` is the process's CPU during its calls, and the
JSON line also holds `threads` (the process's thread ids: the workers' CPU is sampled on
them, not on the main thread)."""

import json
import os
import random
import sys
import threading
import time

# slices of CPU time per round, random in length: a fixed round would run in lockstep
# with a 99 Hz sampler and bias it
SLICE_S = (0.004, 0.018)
HOT_SHARE = 0.6


def torch_hot(torch, a, b, until: float, clock=time.thread_time) -> float:
    acc = 0.0
    while clock() < until:
        acc += float(torch.matmul(a, b)[0, 0])
    return acc


def python_other(until: float, clock=time.thread_time) -> int:
    y = 0
    while clock() < until:
        y += sum(range(200))
    return y


def import_torch(threads: int):
    # under the profiler: what once stopped it (code objects come and go by thousands)
    import torch

    torch.set_num_threads(threads)
    return torch


def main() -> None:
    duration = float(sys.argv[1]) if len(sys.argv) > 1 else 10.0
    early = "early" in sys.argv[2:]
    threads = next((int(a.split("=", 1)[1]) for a in sys.argv[2:] if a.startswith("threads=")),
                   1)
    # one thread: its own CPU (the samples of other threads are not the function's);
    # several: the process's, workers included
    clock = time.thread_time if threads == 1 else time.process_time
    torch = import_torch(threads) if early else None
    print("READY", flush=True)
    sys.stdin.readline()
    cpu0 = time.process_time()
    if torch is None:
        torch = import_torch(threads)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    hot = 0.0
    end = time.monotonic() + duration
    print("IMPORTED", flush=True)
    while time.monotonic() < end:
        t, slice_s = clock(), random.uniform(*SLICE_S)
        torch_hot(torch, a, b, t + HOT_SHARE * slice_s, clock)
        hot += clock() - t
        python_other(t + slice_s, clock)
    total = time.process_time() - cpu0
    print(json.dumps({"total_cpu_s": total, "torch_hot_cpu_s": hot,
                      "torch_version": torch.__version__, "main_tid": threading.get_native_id(),
                      "threads": sorted(int(t) for t in os.listdir("/proc/self/task"))}),
          flush=True)
    sys.stdin.readline()  # stay alive until told, so the profiler can still read our memory


if __name__ == "__main__":
    main()
