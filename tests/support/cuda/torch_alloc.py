"""PyTorch allocating and freeing known tensors (256 MiB and 1 GiB) on the GPU, for the
GPU memory demo (docs/gpu.md): each allocation happens in a function of its own, so the
agent's report must name it as the Python allocation site. The caching allocator keeps
freed blocks; empty_cache() hands them back to the driver (cuMemFree)."""

import sys
import time

import torch

MiB = 1 << 20


def load_weights() -> torch.Tensor:
    return torch.empty(256 * MiB, dtype=torch.uint8, device="cuda")


def make_activations() -> torch.Tensor:
    return torch.empty(1024 * MiB, dtype=torch.uint8, device="cuda")


def main() -> None:
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # context and the allocator's first small segment
    time.sleep(2)
    weights = load_weights()
    activations = make_activations()
    torch.cuda.synchronize()
    print(f"allocated: weights {weights.numel() // MiB} MiB, activations "
          f"{activations.numel() // MiB} MiB; torch reserved "
          f"{torch.cuda.memory_reserved() // MiB} MiB", flush=True)
    time.sleep(5)
    del activations
    torch.cuda.empty_cache()
    print(f"freed activations; torch reserved {torch.cuda.memory_reserved() // MiB} MiB",
          flush=True)
    time.sleep(5)
    del weights
    torch.cuda.empty_cache()
    print(f"freed weights; torch reserved {torch.cuda.memory_reserved() // MiB} MiB",
          flush=True)
    time.sleep(4)


if __name__ == "__main__":
    sys.exit(main())
