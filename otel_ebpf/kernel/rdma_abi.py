"""bpf/include/rdma.h in Python: the verbs call events and the NCCL counting map's key and
value, decoded into frozen objects (tests/unit/test_rdma_abi.py checks every offset)."""

from __future__ import annotations

import ipaddress
import struct
from dataclasses import dataclass

# struct rdma_event
EVENT = struct.Struct("<QQQIIiIIIIIII BBBx H2x 16s 16s 64s")
QP_CREATE, QP_MODIFY, QP_DESTROY, MR_REG, MR_DEREG = 1, 2, 3, 4, 5
# enum ibv_qp_attr_mask bits the probes read
QP_STATE_BIT, QP_PORT_BIT, QP_AV_BIT, QP_PATH_MTU_BIT, QP_DEST_QPN_BIT = (
    1 << 0, 1 << 5, 1 << 7, 1 << 8, 1 << 20)

# struct nccl_key, struct nccl_totals
NCCL_KEY = struct.Struct("<IIiI")
NCCL_TOTALS = struct.Struct("<QQ")
NCCL_OPS = {0: "AllReduce", 1: "AllGather", 2: "ReduceScatter", 3: "Broadcast", 4: "Reduce",
            5: "Send", 6: "Recv"}

# enum rdma_counter
COUNTER_NAMES = {0: "ring_drops", 1: "nccl_full", 2: "pending_full"}

# enum ibv_qp_type and enum ibv_qp_state (verbs.h), as attribute values
QP_TYPES = {2: "RC", 3: "UC", 4: "UD", 8: "RAW_PACKET", 9: "XRC_SEND", 10: "XRC_RECV",
            255: "DRIVER"}
QP_STATES = {0: "RESET", 1: "INIT", 2: "RTR", 3: "RTS", 4: "SQD", 5: "SQE", 6: "ERR"}


class BadRecord(ValueError):
    """A ring-buffer record of the wrong size (a stale build)."""


def _cstr(raw: bytes) -> str:
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def gid_text(raw: bytes) -> str:
    """A GID as rdma-core's tools print it: 8 groups of 4 hex digits (fe80:0000:...)."""
    return ":".join(raw[i:i + 2].hex() for i in range(0, 16, 2))


def gid_ip(raw: bytes) -> str:
    """The IP address a RoCE v2 GID carries (IPv4-mapped or IPv6)."""
    addr = ipaddress.IPv6Address(raw)
    return str(addr.ipv4_mapped or addr)


@dataclass(frozen=True, slots=True)
class VerbsCall:
    """One libibverbs call, seen at its return."""

    kind: int  # QP_CREATE ...
    ts_ns: int
    pid: int
    tid: int
    comm: str
    ok: bool
    handle: int  # the QP's or MR's address in the process
    device: str
    length: int = 0
    qp_num: int = 0
    qp_type: int = 0
    attr_mask: int = 0
    qp_state: int = 0
    dest_qp_num: int = 0
    path_mtu: int = 0
    port_num: int = 0
    dlid: int = 0
    dgid: bytes | None = None  # the remote GID, when the address vector is global
    sgid_index: int = 0


def decode_event(record: bytes) -> VerbsCall:
    if len(record) != EVENT.size:
        raise BadRecord(f"rdma event of {len(record)} bytes, expected {EVENT.size}")
    (ts, handle, length, pid, tid, ret, kind, qpn, qp_type, mask, state, dest, mtu,
     port, is_global, sgid_index, dlid, dgid, comm, device) = EVENT.unpack(record)
    return VerbsCall(
        kind=kind, ts_ns=ts, pid=pid, tid=tid, comm=_cstr(comm), ok=ret == 0,
        handle=handle, device=_cstr(device), length=length, qp_num=qpn, qp_type=qp_type,
        attr_mask=mask, qp_state=state, dest_qp_num=dest, path_mtu=mtu, port_num=port,
        dlid=dlid, dgid=dgid if is_global else None, sgid_index=sgid_index,
    )


@dataclass(frozen=True, slots=True)
class CollectiveTotals:
    """What a process's NCCL calls of one operation and datatype added up to so far."""

    pid: int
    op: str
    datatype: int
    calls: int
    elements: int


def decode_collective(key: bytes, value: bytes) -> CollectiveTotals:
    pid, op, datatype, _ = NCCL_KEY.unpack(key)
    calls, elements = NCCL_TOTALS.unpack(value)
    return CollectiveTotals(pid, NCCL_OPS.get(op, str(op)), datatype, calls, elements)
