"""receivers.ebpf.rdma: off by default, settable in YAML and by OTEL_EBPF_* variables,
validated like every other key."""

from __future__ import annotations

import pytest

from otel_ebpf.config import ConfigError, parse_config


def test_defaults():
    r = parse_config("").receiver
    assert (r.rdma_enabled, r.rdma_sysfs_root, r.rdma_interval_s) == (False, "/sys", 10.0)


def test_yaml_and_environment():
    r = parse_config("receivers: {ebpf: {rdma: {enabled: true, interval: 2s}}}",
                     {"OTEL_EBPF_RECEIVERS_EBPF_RDMA_SYSFS_ROOT": "/fixture/sys"}).receiver
    assert (r.rdma_enabled, r.rdma_sysfs_root, r.rdma_interval_s) == (True, "/fixture/sys", 2.0)


@pytest.mark.parametrize("yaml, path", [
    ("receivers: {ebpf: {rdma: {interval: 0s}}}", "receivers.ebpf.rdma.interval"),
    ("receivers: {ebpf: {rdma: {enabled: maybe}}}", "receivers.ebpf.rdma.enabled"),
    ("receivers: {ebpf: {rdma: {sysfs: /sys}}}", "receivers.ebpf.rdma.sysfs"),
])
def test_invalid_values_name_their_path(yaml, path):
    with pytest.raises(ConfigError) as err:
        parse_config(yaml)
    assert err.value.path == path
