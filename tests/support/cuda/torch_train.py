"""A small PyTorch training loop for the GPU + CPU profile check on a real GPU
(bench/h200_torch_profile.sh): an MLP trained for a few hundred steps inside
train_mlp(), its weights made in build_model(). Before training it warms up (CUDA
context, cuBLAS loaded by a first matmul and backward) in warm_up(), hands the warm-up's
cached memory back to the driver (empty_cache), prints `WARM <pid>`, and waits for
--wait-file to exist (the script creates it once the agent has the unwind tables of
this process's libraries), so the training's own segment allocations are walked with
them. Its process name is set first (--name), so the agent can select it.

    python torch_train.py [--device cuda|cpu] [--steps 300] [--min-seconds 10]
        [--wait-file PATH] [--wait-max 300] [--name torch-train]

--device cpu runs the same on the CPU (no GPU allocations: a check of the program)."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import sys
import time


def set_name(name: str) -> None:
    try:
        ctypes.CDLL(None).prctl(15, name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    except (OSError, AttributeError):
        pass


def warm_up(torch, device: str) -> None:
    """Context, allocator and cuBLAS/cuBLASLt loaded: what a first step loads lazily."""
    a = torch.randn(256, 256, device=device, requires_grad=True)
    (a @ a).sum().backward()
    if device == "cuda":
        torch.cuda.synchronize()
        del a
        torch.cuda.empty_cache()  # the training allocates its segments anew


def build_model(torch, device: str, width: int):
    nn = torch.nn
    return nn.Sequential(nn.Linear(512, width), nn.ReLU(), nn.Linear(width, width),
                         nn.ReLU(), nn.Linear(width, 10)).to(device)


def train_mlp(torch, device: str, steps: int, min_seconds: float, width: int) -> dict:
    model = build_model(torch, device, width)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    gen = torch.Generator(device=device).manual_seed(0)
    t0 = time.perf_counter()
    step = 0
    loss = None
    while step < steps or time.perf_counter() - t0 < min_seconds:
        x = torch.randn(1024, 512, device=device, generator=gen)
        y = torch.randint(0, 10, (1024,), device=device, generator=gen)
        opt.zero_grad(set_to_none=True)
        loss = loss_fn(model(x), y)
        loss.backward()
        opt.step()
        step += 1
        if step % 50 == 0 and device == "cuda":
            torch.cuda.synchronize()
    if device == "cuda":
        torch.cuda.synchronize()
    out = {"steps": step, "seconds": round(time.perf_counter() - t0, 3),
           "loss": float(loss.item()) if loss is not None else None}
    if device == "cuda":
        out["reserved_mib"] = torch.cuda.memory_reserved() >> 20
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--min-seconds", type=float, default=10.0)
    ap.add_argument("--width", type=int, default=2048)
    ap.add_argument("--wait-file", default="")
    ap.add_argument("--wait-max", type=float, default=300.0)
    ap.add_argument("--name", default="torch-train")
    args = ap.parse_args()
    set_name(args.name)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device", file=sys.stderr, flush=True)
        return 2
    print(f"IMPORTED {os.getpid()} torch {torch.__version__}", flush=True)
    warm_up(torch, args.device)
    print(f"WARM {os.getpid()}", flush=True)
    if args.wait_file:
        end = time.monotonic() + args.wait_max
        while not os.path.exists(args.wait_file) and time.monotonic() < end:
            time.sleep(0.2)
        print(f"WAITED {'go' if os.path.exists(args.wait_file) else 'timeout'}", flush=True)
    result = train_mlp(torch, args.device, args.steps, args.min_seconds, args.width)
    print("TRAINED " + json.dumps(result), flush=True)
    time.sleep(3)  # the agent drains and names the last allocations while we live
    return 0


if __name__ == "__main__":
    sys.exit(main())
