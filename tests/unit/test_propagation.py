"""The trace-context TCP option's user-space side without a kernel: its config keys, the
map keys and values user space writes (struct prop_key, prop_pending, prop_net), finding
the cgroup2 mount, and the prefix of struct bpf_prog_info its run statistics come from."""

from __future__ import annotations

import ipaddress
import socket

import pytest

from otel_ebpf.config import ConfigError, load_config, parse_config
from otel_ebpf.config.schema import DEFAULT_TRUSTED_NETWORKS as SCHEMA_DEFAULT
from otel_ebpf.kernel import abi, libbpf
from otel_ebpf.kernel.loader import BPFError
from otel_ebpf.kernel.propagation import (
    DEFAULT_TRUSTED_NETWORKS,
    PropagationSettings,
    cgroup2_root,
    networks,
)
from tests.support.c_layout import c_layout

PREFIX = "receivers.ebpf.propagation"


def test_config_defaults():
    r = load_config(None, {}).receiver
    assert r.propagation_enabled is False
    assert r.propagation_trusted_networks == DEFAULT_TRUSTED_NETWORKS == SCHEMA_DEFAULT == (
        "127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16", "::1/128", "fc00::/7")
    assert r.propagation_cgroup == ""  # the cgroup2 root, found when attaching
    assert PropagationSettings() == PropagationSettings(DEFAULT_TRUSTED_NETWORKS, "")


def test_config_from_yaml_and_environment():
    r = parse_config(
        "receivers: {ebpf: {propagation: {enabled: true, cgroup: /sys/fs/cgroup/nodes,"
        " trusted_networks: [10.1.0.0/16, '2001:db8::/32', 192.0.2.7]}}}", {}).receiver
    assert r.propagation_enabled and r.propagation_cgroup == "/sys/fs/cgroup/nodes"
    assert r.propagation_trusted_networks == ("10.1.0.0/16", "2001:db8::/32", "192.0.2.7")
    env = {"OTEL_EBPF_RECEIVERS_EBPF_PROPAGATION_TRUSTED_NETWORKS": "10.0.0.0/8,fd00::/8",
           "OTEL_EBPF_RECEIVERS_EBPF_PROPAGATION_ENABLED": "true"}
    r = load_config(None, env).receiver
    assert r.propagation_enabled
    assert r.propagation_trusted_networks == ("10.0.0.0/8", "fd00::/8")
    # an empty list: no peer is trusted (nothing written, every option refused)
    r = parse_config("receivers: {ebpf: {propagation: {trusted_networks: []}}}", {}).receiver
    assert r.propagation_trusted_networks == ()


@pytest.mark.parametrize("bad", ["10.0.0.0/33", "10.0.0.1/8", "fc00::/129", "intranet", "",
                                 "10.0.0.0/8/8"])
def test_an_invalid_network_is_a_config_error_naming_its_path(bad):
    with pytest.raises(ConfigError) as info:
        parse_config(f"receivers: {{ebpf: {{propagation: {{trusted_networks: "
                     f"[10.0.0.0/8, '{bad}']}}}}}}", {})
    assert info.value.path == f"{PREFIX}.trusted_networks[1]"
    assert "CIDR" in info.value.expected


def test_an_invalid_network_from_the_environment_names_the_variable():
    var = "OTEL_EBPF_RECEIVERS_EBPF_PROPAGATION_TRUSTED_NETWORKS"
    with pytest.raises(ConfigError) as info:
        load_config(None, {var: "10.0.0.0/8,10.0.0.300/32"})
    assert var in str(info.value) and "CIDR" in str(info.value)


def test_networks_names_the_bad_one():
    assert networks([" 10.0.0.0/8", "::1/128"]) == [ipaddress.ip_network("10.0.0.0/8"),
                                                     ipaddress.ip_network("::1/128")]
    with pytest.raises(ValueError, match="'10.0.0.1/8'"):
        networks(["10.0.0.0/8", "10.0.0.1/8"])


MAPPED = bytes(10) + b"\xff\xff"


def test_connection_key_is_the_kernels():
    key = abi.pack_prop_key("10.0.0.1", 40000, "10.0.0.2", 8080)
    local, remote, lport, rport, family = abi.PROP_KEY.unpack(key)
    assert (local, remote) == (MAPPED + bytes([10, 0, 0, 1]), MAPPED + bytes([10, 0, 0, 2]))
    assert (lport, rport, family) == (40000, 8080, socket.AF_INET)
    assert key[32:34] == (40000).to_bytes(2, "little") and key[-2:] == b"\0\0"  # padding
    # a dual-stack socket talking IPv4 is the same connection, keyed the same
    assert abi.pack_prop_key("::ffff:10.0.0.1", 40000, "::ffff:10.0.0.2", 8080) == key
    v6 = abi.pack_prop_key("fd77::1", 1, "fd77::2", 2)
    assert abi.PROP_KEY.unpack(v6)[:2] == (ipaddress.ip_address("fd77::1").packed,
                                           ipaddress.ip_address("fd77::2").packed)
    assert abi.PROP_KEY.unpack(v6)[4] == socket.AF_INET6
    with pytest.raises(ValueError):
        abi.pack_prop_key("10.0.0.1", 1, "fd77::2", 2)
    with pytest.raises(ValueError):
        abi.pack_prop_key("host", 1, "10.0.0.2", 2)


def test_pending_value_round_trips_slot_by_slot():
    slots = [abi.PropSlot(b"a" * 16, 0xFFFFFFFF, 2, abi.PROP_F_SAMPLED), abi.FREE_SLOT,
             abi.PropSlot(b"b" * 16, 7, 1, 0), abi.FREE_SLOT]
    raw = abi.pack_prop_pending(slots)
    assert len(raw) == abi.PROP_SLOTS * abi.PROP_SLOT.size
    assert abi.unpack_prop_pending(raw) == slots
    # slot 0 as struct prop_slot lays it out: trace id, seq, order, flags, padding
    assert raw[:32] == b"a" * 16 + b"\xff" * 4 + (2).to_bytes(4, "little") + b"\x01" + bytes(7)
    with pytest.raises(ValueError):
        abi.pack_prop_pending(slots[:3])


def test_trusted_network_keys():
    v4 = abi.PROP_NET.unpack(abi.pack_prop_net(ipaddress.ip_network("10.0.0.0/8")))
    assert v4 == (8 + 96, MAPPED + bytes([10, 0, 0, 0]))
    host = abi.PROP_NET.unpack(abi.pack_prop_net(ipaddress.ip_network("192.0.2.7")))
    assert host == (128, MAPPED + bytes([192, 0, 2, 7]))
    v6 = abi.PROP_NET.unpack(abi.pack_prop_net(ipaddress.ip_network("fc00::/7")))
    assert v6 == (7, ipaddress.ip_address("fc00::").packed)


def test_cgroup2_root_from_the_mount_table(tmp_path):
    mounts = tmp_path / "mounts"
    mounts.write_text(
        "cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n"
        "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n")
    assert cgroup2_root(str(mounts)) == "/sys/fs/cgroup/unified"
    mounts.write_text("none /mnt/my\\040cgroups cgroup2 rw 0 0\n")
    assert cgroup2_root(str(mounts)) == "/mnt/my cgroups"
    mounts.write_text("cgroup /sys/fs/cgroup/cpu cgroup rw,relatime,cpu 0 0\n")
    with pytest.raises(BPFError, match="no cgroup2"):
        cgroup2_root(str(mounts))


def test_prog_info_prefix_is_linux_bpf_h(tmp_path):
    out = c_layout(r"""
#include <stdio.h>
#include <stddef.h>
#include <linux/bpf.h>
int main(void) {
    printf("id %zu\nname %zu\nrun_time_ns %zu\nrun_cnt %zu\n",
           offsetof(struct bpf_prog_info, id), offsetof(struct bpf_prog_info, name),
           offsetof(struct bpf_prog_info, run_time_ns), offsetof(struct bpf_prog_info, run_cnt));
    return 0;
}
""", tmp_path)
    info = libbpf.ProgInfo
    assert {k: int(v) for k, v in out.items()} == {
        "id": info.id.offset, "name": info.name.offset, "run_time_ns": info.run_time_ns.offset,
        "run_cnt": info.run_cnt.offset}
