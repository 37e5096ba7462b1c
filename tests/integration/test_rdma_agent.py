"""`receivers.ebpf.rdma` through the real agent (`otel-ebpf run`): port counters of an
mlx5 sysfs tree reach the metrics pipeline's file exporter on the configured interval, and
a counter that moves is exported as the change since the agent started."""

from __future__ import annotations

import time

from tests.integration.conftest import require_kernel
from tests.support.otlp_metrics import find, read_points
from tests.support.rdma.mlx5_sysfs import make_mlx5, set_counters


def _tx_bytes(path) -> list[int]:
    """rdma.port.io transmit values of port 1, one per export that had them."""
    if not path.exists():
        return []
    return [p.value for points in read_points(path)
            for p in find(points, "rdma.port.io", rdma__device="mlx5_0", rdma__port=1,
                          network__io__direction="transmit")]


def test_port_counters_through_the_agent(start_agent, tmp_path):
    require_kernel()
    dev = make_mlx5(tmp_path / "sys")
    set_counters(dev, 1, port_xmit_data=1_000_000)
    agent = start_agent([1], overrides={"receivers": {"ebpf": {"rdma": {
        "enabled": True, "sysfs_root": str(tmp_path / "sys"), "interval": "1s"}}}})
    deadline = time.monotonic() + 20
    while not _tx_bytes(agent.traces) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert _tx_bytes(agent.traces), f"no rdma.port.io exported:\n{agent.stderr[-2000:]}"
    set_counters(dev, 1, port_xmit_data=1_000_500)  # 500 more 4-octet words
    deadline = time.monotonic() + 20
    while 2000 not in _tx_bytes(agent.traces) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert agent.stop() == 0
    values = _tx_bytes(agent.traces)
    assert values[0] == 0 and values[-1] == 2000, values
    assert values == sorted(values)  # a monotonic sum
