"""RDMA port counters from a sysfs tree laid out as the kernel lays out an mlx5 device
with two ports (RoCE), through the RDMA receiver and the real file exporter: bytes in
4-octet units, errors and congestion by name, link state, and a counter reset that the
exported sums count through."""

from __future__ import annotations

import pytest

from otel_ebpf.export.factory import build_metric_exporters
from otel_ebpf.kernel.libbpf import LibbpfLog
from otel_ebpf.rdma import RdmaReceiver, RdmaSettings
from otel_ebpf.rdma.ports import COUNTERS
from otel_ebpf.spans.resources import ProcessResources
from otel_ebpf.telemetry import Stats
from tests.support.otlp_metrics import find, read_points
from tests.support.rdma.mlx5_sysfs import HW, NETDEVS, PMA, make_mlx5, set_counters, write


@pytest.fixture
def receiver(tmp_path):
    out = tmp_path / "metrics.jsonl"
    exporters = build_metric_exporters({"file": {"path": str(out)}})
    stats = Stats()
    r = RdmaReceiver(RdmaSettings(sysfs_root=str(tmp_path / "sys"), uprobes=False),
                     exporters, ProcessResources(), stats, LibbpfLog())
    r.start(thread=False)
    yield r, out, stats
    r.shutdown()
    for e in exporters.values():
        e.shutdown()


def _value(points, metric, port, **attrs):
    found = find(points, metric, rdma__device="mlx5_0", rdma__port=port, **attrs)
    assert len(found) == 1, (metric, port, attrs, found)
    return found[0]


def test_two_port_mlx5_counters_with_a_reset(tmp_path, receiver):
    r, out, stats = receiver
    dev = make_mlx5(tmp_path / "sys")
    set_counters(dev, 1, port_xmit_data=1_000_000, port_rcv_data=2_000_000,
                 port_xmit_packets=5000, out_of_sequence=7, np_cnp_sent=3)
    assert r.export() == {"file": "ok"}  # baseline: the counts since now are 0

    set_counters(dev, 1, port_xmit_data=1_250_000, port_rcv_data=2_500_000,
                 port_xmit_packets=5400, port_rcv_packets=300, out_of_sequence=9,
                 packet_seq_err=4, local_ack_timeout_err=2, rnr_nak_retry_err=5,
                 np_cnp_sent=13, rp_cnp_handled=6, np_ecn_marked_roce_packets=21)
    set_counters(dev, 2, port_rcv_data=100)
    assert r.export() == {"file": "ok"}

    # the driver reloaded: port 1's counters start again from zero, then counted on
    set_counters(dev, 1, port_xmit_data=40, port_rcv_data=2_500_010, out_of_sequence=1)
    assert r.export() == {"file": "ok"}

    first, second, third = read_points(out)
    # the host's resource, not a process's
    assert {p.resource["service.name"] for p in first + second + third} == {"otel-ebpf"}
    for metric in ("rdma.port.io", "rdma.port.errors", "rdma.port.congestion"):
        assert all(p.value == 0 for p in find(first, metric))

    tx = _value(second, "rdma.port.io", 1, network__io__direction="transmit")
    assert tx.value == 250_000 * 4  # PortXmitData counts 4-octet words
    assert tx.kind == "sum" and tx.monotonic and tx.cumulative
    assert tx.attributes["rdma.link_layer"] == "Ethernet"
    assert tx.attributes["network.interface.name"] == "ens1f0np0"
    assert _value(second, "rdma.port.io", 1, network__io__direction="receive").value == 2_000_000
    assert _value(second, "rdma.port.io", 2, network__io__direction="receive").value == 400
    assert _value(second, "rdma.port.io", 2, network__io__direction="receive") \
        .attributes["network.interface.name"] == "ens1f1np1"
    assert _value(second, "rdma.port.packets", 1, network__io__direction="transmit").value == 400
    assert _value(second, "rdma.port.packets", 1, network__io__direction="receive").value == 300
    errors = {p.attributes["error.type"]: p.value
              for p in find(second, "rdma.port.errors", rdma__port=1) if p.value}
    assert errors == {"out_of_sequence": 2, "packet_seq_err": 4, "local_ack_timeout_err": 2,
                      "rnr_nak_retry_err": 5}
    congestion = {p.attributes["rdma.congestion.event"]: p.value
                  for p in find(second, "rdma.port.congestion", rdma__port=1)}
    assert congestion == {"cnp_sent": 10, "cnp_handled": 6, "cnp_ignored": 0, "ecn_marked": 21}
    assert _value(second, "rdma.port.up", 1).value == 1
    assert _value(second, "rdma.port.up", 2).value == 0
    assert _value(second, "rdma.port.up", 1).kind == "gauge"
    assert _value(second, "rdma.port.bandwidth.limit", 1).value == 100_000_000_000 // 8
    # a setting is not a counter
    assert not [p for p in second if "lifespan" in str(p.attributes)]

    # after the reset: the sums went on from what the counters read now, start time unchanged
    tx3 = _value(third, "rdma.port.io", 1, network__io__direction="transmit")
    assert tx3.value == (250_000 + 40) * 4
    assert tx3.start_ns == tx.start_ns
    rx3 = _value(third, "rdma.port.io", 1, network__io__direction="receive")
    assert rx3.value == 2_000_000 + 10 * 4  # no reset here: just 10 words more
    assert _value(third, "rdma.port.errors", 1, error__type="out_of_sequence").value == 2 + 1
    for p in third:
        if p.kind == "sum":
            before = [q for q in second if q.metric == p.metric and q.attributes == p.attributes]
            assert before and p.value >= before[0].value, p  # never goes down
    assert stats.total("rdma.counter_resets") == 2  # port_xmit_data and out_of_sequence


def test_every_mapped_counter_exists_in_the_mlx5_layout():
    # the mapping names files that the real layout has (a typo would silently export nothing)
    names = {f"counters/{n}" for n in PMA} | {f"hw_counters/{n}" for n in HW}
    assert set(COUNTERS) <= names
    assert "hw_counters/lifespan" not in COUNTERS


def test_no_rdma_devices_exports_nothing(tmp_path, receiver):
    r, out, _ = receiver
    (tmp_path / "sys" / "class").mkdir(parents=True)
    assert r.export() == {}
    assert not out.exists() or out.read_text() == ""


def test_ipoib_netdev_is_found_by_dev_port(tmp_path, receiver):
    r, out, _ = receiver
    dev = make_mlx5(tmp_path / "sys")
    for port in (1, 2):  # InfiniBand: no RoCE GID netdevs; IPoIB interfaces under the device
        (dev / "ports" / str(port) / "gid_attrs" / "ndevs" / "0").unlink()
        write(dev / "ports" / str(port) / "link_layer", "InfiniBand")
    for netdev in NETDEVS.values():
        for f in (dev / "device" / "net" / netdev).iterdir():
            f.unlink()
        (dev / "device" / "net" / netdev).rmdir()
    write(dev / "device" / "net" / "ib0" / "dev_port", "0")
    write(dev / "device" / "net" / "ib1" / "dev_port", "1")
    r.export()
    points = read_points(out)[0]
    assert _value(points, "rdma.port.up", 1).attributes["network.interface.name"] == "ib0"
    assert _value(points, "rdma.port.up", 2).attributes["network.interface.name"] == "ib1"
    assert _value(points, "rdma.port.up", 2).attributes["rdma.link_layer"] == "InfiniBand"
