"""RDMA and collective-communication metrics: RoCE/InfiniBand port counters from sysfs,
queue pairs and memory regions from libibverbs uprobes, NCCL calls from libnccl uprobes
(docs/rdma.md). The front door is RdmaReceiver."""

from __future__ import annotations

from typing import Any

__all__ = ["RdmaReceiver", "RdmaSettings"]


def __getattr__(name: str) -> Any:
    # imported on first use: the receiver pulls in the exporters (gRPC, protobuf), which
    # the port and usage modules alone (and bench/rdma_nccl_device.py) do without
    if name in __all__:
        from . import receiver

        return getattr(receiver, name)
    raise AttributeError(name)
