"""PyTorch on a real GPU with planted inefficiencies, for `otel-ebpf advise` and the
probes' cost (bench/h200_advise.sh). Its process name is set first (--name).

    python torch_planted.py train [--steps 200]
    python torch_planted.py launch [--steps 20]

train: an MLP trained in train_mlp(); each step's batch is made on the CPU in pageable
memory and copied with non_blocking=True in load_batch() (an unpinned host-to-device
copy: it blocks), and log_loss() reads the loss with .item() every step (a sync per
step). launch: the launch-bound loop, steps of 2,000 x.mul_() on 1,024 floats then a
synchronize, in launch_loop(); it prints `{"steps_per_s": ...}`."""

from __future__ import annotations

import argparse
import ctypes
import json
import time

import torch


def load_batch(batch: int, dim: int) -> torch.Tensor:
    x = torch.randn(batch, dim)  # pageable host memory
    return x.to("cuda", non_blocking=True)  # planted: unpinned, so this copy blocks


def log_loss(loss: torch.Tensor, history: list) -> None:
    history.append(loss.item())  # planted: the CPU waits for the GPU every step


def train_mlp(steps: int, batch: int = 4096, dim: int = 4096) -> float:
    model = torch.nn.Sequential(torch.nn.Linear(dim, dim), torch.nn.ReLU(),
                                torch.nn.Linear(dim, 1)).cuda()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    history: list = []
    for _ in range(steps):
        x = load_batch(batch, dim)
        loss = model(x).square().mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        log_loss(loss, history)
    return history[-1]


def launch_loop(steps: int) -> float:
    x = torch.ones(1024, device="cuda")
    for _ in range(2):  # warm: kernels looked up, allocator primed
        x.mul_(1.0)
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(steps):
        for _ in range(2000):
            x.mul_(1.0001)
        torch.cuda.synchronize()
    return steps / (time.perf_counter() - t0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("mode", choices=("train", "launch"))
    ap.add_argument("--steps", type=int, default=0)
    ap.add_argument("--name", default="torch-planted")
    args = ap.parse_args()
    ctypes.CDLL(None).prctl(15, args.name.encode()[:15], 0, 0, 0)  # PR_SET_NAME
    if args.mode == "train":
        t0 = time.perf_counter()
        loss = train_mlp(args.steps or 200)
        print(json.dumps({"loss": loss, "seconds": time.perf_counter() - t0}), flush=True)
    else:
        print(json.dumps({"steps_per_s": launch_loop(args.steps or 20)}), flush=True)


if __name__ == "__main__":
    main()
