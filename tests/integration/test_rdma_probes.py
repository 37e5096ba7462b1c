"""The verbs and NCCL uprobes (bpf/rdma.bpf.c) on real BPF: a program built here against
stand-in libibverbs and libnccl libraries (real signatures and rdma-core's structs from
<infiniband/verbs.h>) makes its calls; the RDMA receiver's exported metrics must name the
QP pair it set up and the bytes of its collectives, under the program's own resource."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from otel_ebpf.export.factory import build_metric_exporters
from otel_ebpf.kernel.libbpf import LibbpfLog
from otel_ebpf.rdma import RdmaReceiver, RdmaSettings
from otel_ebpf.spans.resources import ProcessResources
from otel_ebpf.telemetry import Stats
from tests.integration.conftest import REPO, require_kernel
from tests.support.otlp_metrics import find, read_points

pytestmark = pytest.mark.kernel
SRC = REPO / "tests" / "support" / "rdma"


def _cc() -> str:
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.fail("a C compiler is needed (make install brings clang)")
    if not Path("/usr/include/infiniband/verbs.h").is_file():
        pytest.fail("<infiniband/verbs.h> is missing (make install brings libibverbs-dev)")
    return cc


@pytest.fixture(scope="module")
def app(tmp_path_factory) -> Path:
    """The stand-in libraries and the program, built in a temporary directory."""
    require_kernel()
    if not (REPO / "bpf/build/rdma.bpf.o").is_file():
        pytest.fail("bpf/build/rdma.bpf.o not built (make -C bpf)")
    cc = _cc()
    d = tmp_path_factory.mktemp("rdma")
    run = lambda *args: subprocess.run([cc, *args], check=True, cwd=d)  # noqa: E731
    run("-shared", "-fPIC", "-O2", "-o", "libibverbs.so.1", str(SRC / "fake_verbs.c"))
    run("-shared", "-fPIC", "-O2", "-Wl,-soname,libnccl.so.2", "-o", "libnccl.so.2",
        str(SRC / "fake_nccl.c"))
    run("-O2", "-o", "rdma_app", str(SRC / "rdma_app.c"), f"-L{d}", "-l:libibverbs.so.1",
        "-l:libnccl.so.2", f"-Wl,-rpath,{d}")
    return d / "rdma_app"


@pytest.fixture
def receiver(tmp_path):
    out = tmp_path / "metrics.jsonl"
    exporters = build_metric_exporters({"file": {"path": str(out)}})
    stats = Stats()
    r = RdmaReceiver(RdmaSettings(sysfs_root=str(tmp_path / "nosys")), exporters,
                     ProcessResources(), stats, LibbpfLog())
    r.start(thread=False)
    yield r, out, stats
    r.shutdown()
    for e in exporters.values():
        e.shutdown()


def _line(proc: subprocess.Popen) -> str:
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"rdma_app exited with {proc.wait(5)}")
    return line.strip()


def test_qp_pair_memory_and_collectives_are_exported(app, receiver):
    r, out, stats = receiver
    assert r.probes is not None, "the RDMA probes did not load"
    proc = subprocess.Popen([str(app)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, "OTEL_SERVICE_NAME": "trainer"})
    try:
        assert _line(proc) == "ready"
        # the agent finds the libraries in the process's maps (as its interval scan does)
        assert r.probes.scan([proc.pid]) == 2
        assert {Path(p).parent for p in r.probes.verbs | r.probes.nccl} >= {app.parent}
        proc.stdin.write("go\n")
        proc.stdin.flush()
        qpn = int(_line(proc).split()[1])
        assert r.export() == {"file": "ok"}
    finally:
        proc.stdin.close()
        assert proc.wait(10) == 0
    r.export()  # the ended process, a last time
    assert r.export() == {}  # ... and no more: nothing left to export

    live, last = read_points(out)
    mine = [p for p in live if p.resource.get("process.pid") == proc.pid]
    assert mine and all(p.resource["service.name"] == "trainer" for p in mine)

    # the QP pair: local QPN, remote QPN and GID from ibv_modify_qp's attributes
    (qp,) = find(mine, "rdma.qp")
    assert qp.attributes == {
        "rdma.device": "mlx5_1", "rdma.qp.num": qpn, "rdma.qp.type": "RC",
        "rdma.qp.state": "RTS",  # the refused move to SQD changed nothing
        "rdma.port": 2, "rdma.qp.remote.num": 0x3C4D,
        "rdma.qp.remote.gid": "0000:0000:0000:0000:0000:ffff:0a00:0002",
        "network.peer.address": "10.0.0.2",
    }
    assert qp.value == 1 and qp.kind == "gauge"
    assert [p.value for p in find(mine, "rdma.qp.active", rdma__qp__type="RC")] == [1]
    assert [p.value for p in find(mine, "rdma.qp.created", rdma__qp__type="RC")] == [2]
    assert [p.value for p in find(mine, "rdma.qp.destroyed", rdma__qp__type="RC")] == [1]
    assert find(mine, "rdma.qp.created")[0].monotonic
    # ibv_reg_mr reaches ibv_reg_mr_iova2: one registration each, not two
    assert [p.value for p in find(mine, "rdma.mr.active", rdma__device="mlx5_1")] == [1]
    assert [p.value for p in find(mine, "rdma.mr.registered", rdma__device="mlx5_1")] == [1 << 20]

    calls = {(p.attributes["nccl.operation"], p.attributes["nccl.datatype"]): p.value
             for p in find(mine, "nccl.calls")}
    assert calls == {("AllReduce", "float32"): 3, ("AllGather", "bfloat16"): 2,
                     ("ReduceScatter", "float16"): 1, ("Broadcast", "int64"): 1,
                     ("Send", "uint8"): 1, ("Recv", "float64"): 1}
    nbytes = {(p.attributes["nccl.operation"], p.attributes["nccl.datatype"]): p.value
              for p in find(mine, "nccl.bytes")}
    assert nbytes == {("AllReduce", "float32"): 3 * (1 << 20) * 4,
                      ("AllGather", "bfloat16"): 2 * 256 * 2,
                      ("ReduceScatter", "float16"): 1000 * 2, ("Broadcast", "int64"): 10 * 8,
                      ("Send", "uint8"): 100, ("Recv", "float64"): 200 * 8}
    assert all(p.cumulative and p.monotonic for p in find(mine, "nccl.bytes"))

    # exported once more after it ended, then forgotten, in the kernel's table too
    assert find([p for p in last if p.resource.get("process.pid") == proc.pid], "nccl.calls")
    assert proc.pid not in r.usage.processes
    assert all(t.pid != proc.pid for t in r.probes.collectives())
    assert stats.total("rdma.lost") == 0
