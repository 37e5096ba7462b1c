"""RTPSParser options (receivers.ebpf.protocols.rtps): defaults, text values from the
environment, and errors that name the option."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.registry import PluginOptionsError, Registry
from otel_ebpf.protocols.rtps import RTPSParser


def test_defaults() -> None:
    limits = RTPSParser().limits
    assert limits.discovery_max == 4096
    assert limits.reassembly_timeout_ns == 2_000_000_000
    assert limits.pairing_timeout_ns == 10_000_000_000
    assert limits.discovery_wait_ns == 1_000_000_000
    assert limits.latency_wait_ns == 200_000_000


def test_values_and_text_values() -> None:
    limits = RTPSParser({"discovery_max_entries": "128", "reassembly_timeout_s": 0.5,
                         "pairing_timeout_s": "3", "latency_wait_s": 0,
                         "payload_head_bytes": 64}).limits
    assert (limits.discovery_max, limits.reassembly_timeout_ns, limits.pairing_timeout_ns,
            limits.latency_wait_ns, limits.payload_head) == (128, 500_000_000, 3 * 10**9, 0, 64)


@pytest.mark.parametrize("options, message", [
    ({"discovery_max_entries": 0}, "rtps.discovery_max_entries: expected at least 1"),
    ({"discovery_max_entries": "many"}, "rtps.discovery_max_entries: expected an integer"),
    ({"discovery_max_entries": 1.5}, "rtps.discovery_max_entries: expected an integer"),
    ({"pairing_timeout_s": -1}, "rtps.pairing_timeout_s: expected a duration from 1ms"),
    ({"pairing_timeout_s": float("nan")}, "rtps.pairing_timeout_s: expected a duration"),
    ({"pairing_timeout_s": "inf"}, "rtps.pairing_timeout_s: expected a duration"),
    ({"reassembly_timeout_s": True}, "rtps.reassembly_timeout_s: expected a duration"),
    ({"reassembly_timeout_s": "soon"}, "rtps.reassembly_timeout_s: expected a duration"),
    ({"payload_head_bytes": 8}, "rtps.payload_head_bytes: expected a size from 20"),
    ({"pairing_timeout": 3}, "rtps.pairing_timeout: expected an option rtps takes"),
])
def test_invalid(options, message) -> None:
    with pytest.raises(ValueError, match=message.replace(".", r"\.", 1)):
        RTPSParser(options)


def test_options_the_agent_gives_every_parser_are_accepted() -> None:
    assert RTPSParser({"correlation_headers": ["x-request-id"]}).limits.discovery_max == 4096


def test_registry_names_the_yaml_path() -> None:
    with pytest.raises(PluginOptionsError, match=r"receivers\.ebpf\.protocols\.rtps: "
                                                 r"rtps\.latency_wait_s"):
        Registry.from_config(["rtps"], {"rtps": {"latency_wait_s": "soon"}})
    registry = Registry.from_config(["rtps"], {"rtps": {"latency_wait_s": 0.1}})
    assert registry.parsers[0].limits.latency_wait_ns == 100_000_000
    assert "otel_ebpf.messaging.delivery.latency" in registry.instruments
