"""Reads RDMA ports from sysfs (<root>/class/infiniband/<device>/ports/<n>/): link state,
link layer, rate, the netdev under the port, and the counter files asked for, as the
kernel's IB core lays them out (counters/ from the PMA, hw_counters/ from the driver)."""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

# "4: ACTIVE", "5: LinkUp"
_NUMBERED = re.compile(r"\s*(\d+)\s*:\s*(\S+)")
# "200 Gb/sec (4X HDR)", "2.5 Gb/sec (1X SDR)"
_RATE = re.compile(r"\s*([\d.]+)\s*Gb/sec")


@dataclass(frozen=True, slots=True)
class PortReading:
    """One port as read at one time. Counters are the raw file values (port_xmit_data and
    port_rcv_data still in the PMA's 4-octet units); a counter file that is missing or
    unreadable is absent from the mapping, not zero."""

    device: str
    port: int
    link_layer: str  # InfiniBand | Ethernet (RoCE)
    state: str  # ACTIVE, DOWN, INIT, ARMED...
    phys_state: str  # LinkUp, Disabled, Polling...
    rate_bps: float | None  # link rate in bits per second
    netdev: str | None  # the Ethernet or IPoIB interface over this port
    counters: dict[str, int] = field(default_factory=dict)  # "counters/port_xmit_data": n


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # a PMA query can fail (EINVAL, EIO) while a port resets
        return None


def _numbered(text: str | None) -> str:
    m = _NUMBERED.match(text or "")
    return m.group(2) if m else (text or "")


def _netdev(device_dir: Path, port_dir: Path, port: int) -> str | None:
    """RoCE names its netdev per GID (gid_attrs/ndevs/0); IPoIB interfaces sit under the
    PCI device, told apart by dev_port (dev_id on older kernels) = port - 1."""
    ndev = _read(port_dir / "gid_attrs" / "ndevs" / "0")
    if ndev:
        return ndev
    try:
        names = sorted(os.listdir(device_dir / "device" / "net"))
    except OSError:
        return None
    for name in names:
        net = device_dir / "device" / "net" / name
        for attr, base in (("dev_port", 10), ("dev_id", 16)):
            text = _read(net / attr)
            if text is not None:
                try:
                    if int(text, base) == port - 1:
                        return name
                except ValueError:
                    pass
                break
    return names[0] if len(names) == 1 else None


def _counter(path: Path) -> int | None:
    text = _read(path)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def read_ports(sysfs_root: str | os.PathLike, counter_files: Iterable[str]) -> list[PortReading]:
    """Every port of every RDMA device under `sysfs_root`, with the `counter_files`
    (paths relative to the port directory) it has. No devices: an empty list."""
    base = Path(sysfs_root) / "class" / "infiniband"
    wanted = tuple(counter_files)
    out: list[PortReading] = []
    try:
        devices = sorted(os.listdir(base))
    except OSError:
        return out
    for device in devices:
        device_dir = base / device
        try:
            ports = sorted((p for p in os.listdir(device_dir / "ports") if p.isdigit()), key=int)
        except OSError:
            continue
        for name in ports:
            port_dir = device_dir / "ports" / name
            port = int(name)
            rate = _RATE.match(_read(port_dir / "rate") or "")
            counters = {}
            for rel in wanted:
                value = _counter(port_dir / rel)
                if value is not None:
                    counters[rel] = value
            out.append(PortReading(
                device=device, port=port,
                link_layer=_read(port_dir / "link_layer") or "InfiniBand",
                state=_numbered(_read(port_dir / "state")),
                phys_state=_numbered(_read(port_dir / "phys_state")),
                rate_bps=float(rate.group(1)) * 1e9 if rate else None,
                netdev=_netdev(device_dir, port_dir, port),
                counters=counters,
            ))
    return out
