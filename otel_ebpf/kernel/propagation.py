"""The trace-context TCP option (bpf/propagation.bpf.c, linked into capture.bpf.o): attach
its sock_ops program to a cgroup, say which networks are trusted, queue the contexts a
connection's next segments carry, read its counts. What the option carries and when it is
written: docs/correlation.md, "TCP option carrier"."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from . import abi
from .loader import BPFError, BPFObject

PROGRAM = "prop_sockops"

# loopback and the private ranges (the config's default, receivers.ebpf.propagation)
DEFAULT_TRUSTED_NETWORKS = ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                            "::1/128", "fc00::/7")

Network = ipaddress.IPv4Network | ipaddress.IPv6Network


@dataclass(frozen=True)
class PropagationSettings:
    trusted_networks: tuple[str, ...] = DEFAULT_TRUSTED_NETWORKS
    cgroup: str = ""  # a cgroup v2 directory; "": the cgroup2 root


def cgroup2_root(mounts: str = "/proc/mounts") -> str:
    """Where the cgroup v2 hierarchy is mounted (/sys/fs/cgroup, or /sys/fs/cgroup/unified
    on a host that mounts v1 controllers beside it): its root covers every socket."""
    try:
        lines = Path(mounts).read_text().splitlines()
    except OSError as exc:
        raise BPFError(f"reading {mounts} failed: {exc.strerror}") from None
    for line in lines:
        fields = line.split()
        if len(fields) > 2 and fields[2] == "cgroup2":
            # mount points escape spaces and the like as octal (\040)
            return fields[1].encode().decode("unicode_escape")
    raise BPFError("no cgroup2 file system is mounted (see /proc/mounts): the TCP option "
                   "program attaches to a cgroup v2; mount one (mount -t cgroup2 none "
                   "/sys/fs/cgroup) or name one in receivers.ebpf.propagation.cgroup")


def networks(cidrs: Iterable[str]) -> list[Network]:
    """CIDR strings -> networks; ValueError naming the first that is not one."""
    out: list[Network] = []
    for text in cidrs:
        try:
            out.append(ipaddress.ip_network(text.strip(), strict=True))
        except ValueError as exc:
            raise ValueError(f"{text!r} is not a network in CIDR notation ({exc})") from None
    return out


class Propagation:
    """The option program, loaded with the capture object, attached to one cgroup."""

    def __init__(self, obj: BPFObject, settings: PropagationSettings) -> None:
        self.obj = obj
        self.nets = networks(settings.trusted_networks)
        if len(self.nets) > abi.PROP_MAX_NETS:
            raise BPFError(f"{len(self.nets)} trusted networks, the kernel takes "
                           f"{abi.PROP_MAX_NETS}")
        self.out = obj.map("prop_out")
        trusted = obj.map("prop_trusted")
        for net in self.nets:
            trusted.update(abi.pack_prop_net(net), b"\x01")
        self.cgroup = settings.cgroup or cgroup2_root()
        self.link = obj.attach_cgroup(PROGRAM, self.cgroup)
        self.untrusted = 0  # send() calls towards an untrusted address: never queued
        self.full = 0  # send() calls on a connection with PROP_SLOTS contexts pending

    def trusted(self, addr: str) -> bool:
        ip = ipaddress.ip_address(addr)
        if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
            ip = ip.ipv4_mapped
        return any(ip in net for net in self.nets)

    def send(self, local: str, local_port: int, remote: str, remote_port: int, seq: int,
             trace_id: bytes, sampled: bool) -> bool:
        """Queue a context for the connection (local:local_port -> remote:remote_port, as
        this node's socket sees it): its next outgoing segment with room carries it, with
        `seq`, the TCP sequence number of the request's first byte. False when it is not
        queued: the remote address is not trusted (the kernel would never write it), or
        PROP_SLOTS contexts are pending already (this one is dropped).

        A read-modify-write of the connection's value. The kernel clears a slot once its
        context is in a segment; when it does so between this lookup and this update, the
        update writes that slot back and its context goes out a second time. The peer then
        gets it twice, the same sequence number and trace id both times; never a slot half
        written (a hash map update replaces the value whole) and never one lost."""
        if len(trace_id) != 16:
            raise ValueError(f"a trace id is 16 bytes, not {len(trace_id)}")
        if not self.trusted(remote):
            self.untrusted += 1
            return False
        key = abi.pack_prop_key(local, local_port, remote, remote_port)
        raw = self.out.lookup(key)
        slots = abi.unpack_prop_pending(raw) if raw else [abi.FREE_SLOT] * abi.PROP_SLOTS
        free = [i for i, s in enumerate(slots) if not s.order]
        if not free:
            self.full += 1
            return False
        # the kernel sends the lowest order first: one above every pending one, and above 1,
        # which the kernel gives the context of a call it queues at the call's first write
        order = max(1, *(s.order for s in slots)) + 1
        slots[free[0]] = abi.PropSlot(trace_id, seq & 0xFFFFFFFF, order,
                                      abi.PROP_F_SAMPLED if sampled else 0)
        self.out.update(key, abi.pack_prop_pending(slots))
        return True

    def pending(self, local: str, local_port: int, remote: str, remote_port: int
                ) -> list[abi.PropSlot]:
        """The contexts still waiting on a connection, oldest first."""
        raw = self.out.lookup(abi.pack_prop_key(local, local_port, remote, remote_port))
        if raw is None:
            return []
        return sorted((s for s in abi.unpack_prop_pending(raw) if s.order),
                      key=lambda s: s.order)

    def counters(self) -> dict[str, int]:
        """The kernel's counts (prop_written, prop_no_room, prop_received, prop_refused,
        prop_untrusted_dst: summed over CPUs) and send()'s (untrusted, full)."""
        counters = self.obj.map("counters")
        out = {name: sum(counters.lookup_percpu_u64(idx))
               for idx, name in abi.COUNTER_NAMES.items() if name.startswith("prop_")}
        out.update(untrusted=self.untrusted, full=self.full)
        return out

    def stats(self) -> tuple[int, int, int]:
        """(program id, runs, run time in ns); runs and time grow only while the sysctl
        kernel.bpf_stats_enabled is 1."""
        return self.obj.program_stats(PROGRAM)

    def close(self) -> None:
        """Detach from the cgroup (the object's close does it too)."""
        if self.link in self.obj.links:
            self.obj.detach(self.link)
