"""Which kernel helpers each configured feature needs, and what `run` says when the kernel
lacks one (the probing itself is tested against this kernel in integration/test_cli.py)."""

from __future__ import annotations

import textwrap

from otel_ebpf.config import parse_config
from otel_ebpf.kernel.features import FEATURE_NEEDS, configured_features, unmet_needs

PROFILES = """
    exporters: {file: {path: t.jsonl}, folded: {path: ./p}}
    service:
      pipelines:
        traces: {receivers: [ebpf], exporters: [file]}
        profiles/cpu: {receivers: [ebpf], exporters: [folded]}
    """


def _cfg(text: str):
    return parse_config(textwrap.dedent(text), {})


def _supported(**lacking: bool) -> dict:
    """Every need supported, except the helpers named (as helper=False)."""
    return {n: lacking.get(n.helper, True) for needs in FEATURE_NEEDS.values() for n in needs}


def test_configured_features_name_the_key_that_turns_each_on():
    assert configured_features(_cfg("receivers: {ebpf: {tls: {openssl: false}}}")) == {
        "socket capture (traces, metrics)": "receivers.ebpf"}
    assert configured_features(_cfg(PROFILES + "receivers: {ebpf: {gpu: {enabled: true}, "
                                    "rdma: {enabled: true}, "
                                    "propagation: {enabled: true}}}")) == {
        "socket capture (traces, metrics)": "receivers.ebpf",
        "TLS (OpenSSL uprobes)": "receivers.ebpf.tls.openssl",
        "CPU profiles": "service.pipelines.profiles/cpu",
        "GPU memory (CUDA uprobes)": "receivers.ebpf.gpu.enabled",
        "RDMA and NCCL (uprobes)": "receivers.ebpf.rdma.enabled",
        "trace context TCP option (sock_ops)": "receivers.ebpf.propagation.enabled",
    }


def test_profiles_on_a_kernel_without_bpf_loop_are_refused_naming_the_version():
    features = configured_features(_cfg(PROFILES))
    lines = unmet_needs(features, _supported(bpf_loop=False), kernel="5.15.0-91-generic")
    assert lines == [
        "CPU profiles (service.pipelines.profiles/cpu) needs bpf_loop in perf_event programs "
        "(Linux 5.17+); this kernel, 5.15.0-91-generic, lacks it: run on Linux 5.17 or "
        "later, or turn service.pipelines.profiles/cpu off"]


def test_gpu_without_bpf_loop_and_nothing_held_against_features_not_configured():
    features = configured_features(_cfg("receivers: {ebpf: {gpu: {enabled: true}}}"))
    lines = unmet_needs(features, _supported(bpf_loop=False), kernel="5.10.0")
    assert len(lines) == 1 and lines[0].startswith(
        "GPU memory (CUDA uprobes) (receivers.ebpf.gpu.enabled) needs bpf_loop in uprobe "
        "programs (Linux 5.17+); this kernel, 5.10.0, lacks it")
    # the same kernel runs a config without profiles or GPU
    assert unmet_needs(configured_features(_cfg("")), _supported(bpf_loop=False)) == []


def test_a_need_that_could_not_be_probed_is_not_held_against_the_kernel():
    features = configured_features(_cfg(PROFILES))
    unprobed = {n: None for needs in FEATURE_NEEDS.values() for n in needs}
    assert unmet_needs(features, unprobed) == []


def test_every_feature_needs_at_least_the_ring_buffer_kernel():
    # the README's requirements: 5.8 for everything, 5.17 for CPU profiles and GPU memory,
    # 5.10 for the TCP option
    versions = {f: max(tuple(map(int, n.since.split("."))) for n in needs)
                for f, needs in FEATURE_NEEDS.items()}
    assert versions == {
        "socket capture (traces, metrics)": (5, 8), "TLS (OpenSSL uprobes)": (5, 8),
        "CPU profiles": (5, 17), "GPU memory (CUDA uprobes)": (5, 17),
        "RDMA and NCCL (uprobes)": (5, 8), "trace context TCP option (sock_ops)": (5, 10)}


def test_the_tcp_option_on_a_kernel_without_header_option_helpers_is_refused():
    features = configured_features(_cfg("receivers: {ebpf: {propagation: {enabled: true}}}"))
    lines = unmet_needs(features, _supported(bpf_reserve_hdr_opt=False, bpf_load_hdr_opt=False),
                        kernel="5.8.0")
    assert lines == [
        "trace context TCP option (sock_ops) (receivers.ebpf.propagation.enabled) needs "
        "bpf_reserve_hdr_opt in sock_ops programs (Linux 5.10+), bpf_load_hdr_opt in sock_ops "
        "programs (Linux 5.10+); this kernel, 5.8.0, lacks it: run on Linux 5.10 or later, "
        "or turn receivers.ebpf.propagation.enabled off"]
