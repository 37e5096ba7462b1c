"""bpf/include/rdma.h against the two sides it must agree with: rdma-core's structs
(offsetof in the installed <infiniband/verbs.h>) for the offsets the probes read, and
otel_ebpf/kernel/rdma_abi.py for the event and map layouts. Also: symbol versions of the
real libibverbs (the compat IBVERBS_1.0 entries must not be the ones probed)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from otel_ebpf.kernel import rdma_abi as abi
from otel_ebpf.kernel.uprobes import file_offsets
from tests.support.c_layout import c_layout as build_and_read

REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
#include <stdio.h>
#include <stddef.h>
#include <linux/types.h>
#include <infiniband/verbs.h>
#include "rdma.h"
#define CHECK(def, expr) printf(#def " %ld %ld\n", (long)(def), (long)(expr))
#define O(t, f) printf(#t "." #f " %zu\n", offsetof(struct t, f))
int main(void) {
    CHECK(IBV_QP_CONTEXT_OFF, offsetof(struct ibv_qp, context));
    CHECK(IBV_QP_QP_NUM_OFF, offsetof(struct ibv_qp, qp_num));
    CHECK(IBV_QP_STATE_OFF, offsetof(struct ibv_qp, state));
    CHECK(IBV_QP_QP_TYPE_OFF, offsetof(struct ibv_qp, qp_type));
    CHECK(IBV_CONTEXT_DEVICE_OFF, offsetof(struct ibv_context, device));
    CHECK(IBV_DEVICE_NAME_OFF, offsetof(struct ibv_device, name));
    CHECK(RDMA_DEVICE_LEN, sizeof(((struct ibv_device *)0)->name));
    CHECK(IBV_PD_CONTEXT_OFF, offsetof(struct ibv_pd, context));
    CHECK(IBV_MR_CONTEXT_OFF, offsetof(struct ibv_mr, context));
    CHECK(IBV_MR_LENGTH_OFF, offsetof(struct ibv_mr, length));
    CHECK(IBV_QP_ATTR_QP_STATE_OFF, offsetof(struct ibv_qp_attr, qp_state));
    CHECK(IBV_QP_ATTR_PATH_MTU_OFF, offsetof(struct ibv_qp_attr, path_mtu));
    CHECK(IBV_QP_ATTR_DEST_QP_NUM_OFF, offsetof(struct ibv_qp_attr, dest_qp_num));
    CHECK(IBV_QP_ATTR_AH_ATTR_OFF, offsetof(struct ibv_qp_attr, ah_attr));
    CHECK(IBV_QP_ATTR_PORT_NUM_OFF, offsetof(struct ibv_qp_attr, port_num));
    CHECK(IBV_AH_ATTR_DGID_OFF, offsetof(struct ibv_ah_attr, grh.dgid));
    CHECK(IBV_AH_ATTR_SGID_INDEX_OFF, offsetof(struct ibv_ah_attr, grh.sgid_index));
    CHECK(IBV_AH_ATTR_DLID_OFF, offsetof(struct ibv_ah_attr, dlid));
    CHECK(IBV_AH_ATTR_IS_GLOBAL_OFF, offsetof(struct ibv_ah_attr, is_global));
    CHECK(IBV_QP_STATE_BIT, IBV_QP_STATE);
    CHECK(IBV_QP_PORT_BIT, IBV_QP_PORT);
    CHECK(IBV_QP_AV_BIT, IBV_QP_AV);
    CHECK(IBV_QP_PATH_MTU_BIT, IBV_QP_PATH_MTU);
    CHECK(IBV_QP_DEST_QPN_BIT, IBV_QP_DEST_QPN);
    CHECK(IBV_QPT_RC, IBV_QPT_RC);
    CHECK(IBV_QPS_RTS, IBV_QPS_RTS);
    printf("rdma_event %zu\nnccl_key %zu\nnccl_totals %zu\n", sizeof(struct rdma_event),
           sizeof(struct nccl_key), sizeof(struct nccl_totals));
    O(rdma_event, ret); O(rdma_event, qp_num); O(rdma_event, port_num); O(rdma_event, dlid);
    O(rdma_event, dgid); O(rdma_event, comm); O(rdma_event, device);
    printf("kinds %d %d %d %d %d\n", RDMA_QP_CREATE, RDMA_QP_MODIFY, RDMA_QP_DESTROY,
           RDMA_MR_REG, RDMA_MR_DEREG);
    printf("ops %d %d %d %d %d %d %d\n", NCCL_OP_ALL_REDUCE, NCCL_OP_ALL_GATHER,
           NCCL_OP_REDUCE_SCATTER, NCCL_OP_BROADCAST, NCCL_OP_REDUCE, NCCL_OP_SEND, NCCL_OP_RECV);
    printf("counters %d %d %d %d\n", RDMA_CNT_RING_DROPS, RDMA_CNT_NCCL_FULL,
           RDMA_CNT_PENDING_FULL, RDMA_CNT_MAX);
    return 0;
}
"""


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory) -> dict[str, str]:
    if not Path("/usr/include/infiniband/verbs.h").is_file():
        pytest.fail("<infiniband/verbs.h> is missing (make install brings libibverbs-dev)")
    return build_and_read(PROBE, tmp_path_factory.mktemp("rdma_abi"))


def test_offsets_read_by_the_probes_are_rdma_cores(c_layout):
    checks = {k: v.split() for k, v in c_layout.items() if k.startswith(("IBV_", "RDMA_DEV"))}
    assert len(checks) == 26
    wrong = {k: v for k, v in checks.items() if v[0] != v[1]}
    assert not wrong, f"rdma.h disagrees with verbs.h (ours, theirs): {wrong}"


def test_event_and_map_layouts_match_python(c_layout):
    assert int(c_layout["rdma_event"]) == abi.EVENT.size
    assert int(c_layout["nccl_key"]) == abi.NCCL_KEY.size
    assert int(c_layout["nccl_totals"]) == abi.NCCL_TOTALS.size
    # offsets by packing a marker into each field and finding it
    record = abi.EVENT.pack(1, 2, 3, 4, 5, -77, 6, 0xA1A2A3A4, 8, 9, 10, 11, 12, 0xB1, 1, 3,
                            0xC1C2, b"\xd1" * 16, b"comm".ljust(16, b"\0"),
                            b"mlx5_0".ljust(64, b"\0"))
    assert record.index((-77).to_bytes(4, "little", signed=True)) == int(c_layout["rdma_event.ret"])
    assert record.index(b"\xa4\xa3\xa2\xa1") == int(c_layout["rdma_event.qp_num"])
    assert record.index(b"\xb1") == int(c_layout["rdma_event.port_num"])
    assert record.index(b"\xc1\xc2"[::-1]) == int(c_layout["rdma_event.dlid"])
    assert record.index(b"\xd1" * 16) == int(c_layout["rdma_event.dgid"])
    assert record.index(b"comm") == int(c_layout["rdma_event.comm"])
    assert record.index(b"mlx5_0") == int(c_layout["rdma_event.device"])
    ev = abi.decode_event(record)
    assert (ev.ok, ev.qp_num, ev.port_num, ev.dlid, ev.dgid, ev.device) == (
        False, 0xA1A2A3A4, 0xB1, 0xC1C2, b"\xd1" * 16, "mlx5_0")


def test_enums_match_python(c_layout):
    assert c_layout["kinds"].split() == [str(k) for k in (
        abi.QP_CREATE, abi.QP_MODIFY, abi.QP_DESTROY, abi.MR_REG, abi.MR_DEREG)]
    assert [abi.NCCL_OPS[int(i)] for i in c_layout["ops"].split()] == [
        "AllReduce", "AllGather", "ReduceScatter", "Broadcast", "Reduce", "Send", "Recv"]
    *idx, count = (int(x) for x in c_layout["counters"].split())
    assert sorted(abi.COUNTER_NAMES) == idx and count == len(abi.COUNTER_NAMES)


def test_probes_go_on_the_default_symbol_versions_of_libibverbs():
    """rdma-core exports ibv_create_qp twice: @@IBVERBS_1.1 (what programs call) and the
    hidden compat @IBVERBS_1.0, listed first. readelf says which address is which."""
    lib = Path("/usr/lib/x86_64-linux-gnu/libibverbs.so.1")
    if not lib.exists() or shutil.which("readelf") is None:
        pytest.fail("libibverbs1 and binutils are needed (make install brings them)")
    out = subprocess.run(["readelf", "--dyn-syms", "-W", str(lib)], capture_output=True,
                         text=True, check=True).stdout
    names = ("ibv_create_qp", "ibv_modify_qp", "ibv_destroy_qp", "ibv_dereg_mr")
    default, compat = {}, {}
    for m in re.finditer(r"^\s*\d+:\s+([0-9a-f]+)\s.*\s(\w+)(@@?)IBVERBS_[\d.]+", out, re.M):
        if m.group(2) in names:
            (default if m.group(3) == "@@" else compat)[m.group(2)] = int(m.group(1), 16)
    assert set(compat) == set(default) == set(names)  # both versions exist
    # shared libraries map from offset 0 with vaddr == offset for .text here
    assert file_offsets(str(lib), names, (".dynsym",)) == default
