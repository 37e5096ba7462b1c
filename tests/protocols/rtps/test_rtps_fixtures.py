"""Real RTPS traffic (Cyclone DDS peers captured by the agent's own BPF programs, see
fixtures/record.py) replayed through one shared parser, each (pid, fd) its own connection,
stitched as the agent does (now_ns 0 after each datagram, then the close)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from otel_ebpf.protocols.base import Direction, Role, SpanKind
from otel_ebpf.protocols.rtps import RTPSParser
from otel_ebpf.protocols.testing import ConnectionDriver, conn_info

FIXTURES = Path(__file__).parent / "fixtures"


def replay(name: str):
    """(spans, {role: pid}, parse errors) of fixtures/<name>.jsonl."""
    path, meta = FIXTURES / f"{name}.jsonl", FIXTURES / f"{name}.meta.json"
    if not path.exists() or not meta.exists():  # committed with the tests: never optional
        pytest.fail(f"no {path.name} fixture (re-record with fixtures/record.py)")
    roles = {role: int(pid) for pid, role in json.loads(meta.read_text())["roles"].items()}
    drivers = drive(RTPSParser(), path)
    spans = [span for driver in drivers for span in driver.spans()]
    errors = sum(driver.invalid for driver in drivers)
    return spans, roles, errors


def drive(parser: RTPSParser, path: Path) -> list[ConnectionDriver]:
    """The recording at `path` through `parser`, each (pid, fd) its own connection, closed
    at the end: the drivers, in the order their connections first appear."""
    drivers: dict[tuple[int, int], ConnectionDriver] = {}
    positions: dict[tuple[int, int, Direction], int] = {}
    for line in path.read_text().splitlines():
        ev = json.loads(line)
        key = (ev["pid"], ev["fd"])
        driver = drivers.get(key)
        if driver is None:
            driver = drivers[key] = ConnectionDriver(parser, conn_info(
                role=Role.UNKNOWN, pid=ev["pid"], fd=ev["fd"], transport="datagram"))
        direction = Direction.EGRESS if ev["direction"] == "out" else Direction.INGRESS
        pos = positions.get((*key, direction), 0)
        positions[(*key, direction)] = pos + ev["len"]
        driver.connection.on_data(direction, pos, ev["len"], bytes.fromhex(ev["hex"]),
                                  ev["ts_ns"], ev["ts_ns"], 0, driver.registry, driver.stats,
                                  peer=tuple(ev["peer"]) if ev["peer"] else None)
        driver.stitch(0)
    for driver in drivers.values():
        driver.close()
    return list(drivers.values())


def of(spans, pid: int, kind: SpanKind, name: str | None = None):
    return [s for s in spans if s.conn.pid == pid and s.kind == kind
            and (name is None or s.name == name)]


def test_pubsub_two_subscribers() -> None:
    spans, roles, errors = replay("pubsub")
    assert errors == 0
    producers = of(spans, roles["publisher"], SpanKind.PRODUCER, "publish /chatter")
    assert sorted(s.attributes["otel_ebpf.rtps.sequence_number"] for s in producers) \
        == list(range(1, 11))
    sent = {s.message_id for s in producers}
    for producer in producers:
        assert producer.attributes["ros.message.type"] == "std_msgs/msg/String"
        assert producer.attributes["messaging.system"] == "ros2"
    for sub in ("subscriber-1", "subscriber-2"):
        consumers = of(spans, roles[sub], SpanKind.CONSUMER, "receive /chatter")
        assert len(consumers) == 10
        assert {s.message_id for s in consumers} == sent  # one trace per sample, both ends
        for consumer in consumers:
            a = consumer.attributes
            assert a["messaging.destination.name"] == "/chatter"
            assert a["ros.message.type"] == "std_msgs/msg/String"
            assert 0 < a["otel_ebpf.messaging.delivery.latency"] < 0.05
    assert not [s for s in spans if "undiscovered" in str(s.attributes)]


def test_big_sample_is_one_sample() -> None:
    spans, roles, errors = replay("big")
    assert errors == 0
    (producer,) = of(spans, roles["publisher"], SpanKind.PRODUCER, "publish /chatter")
    (consumer,) = of(spans, roles["subscriber"], SpanKind.CONSUMER, "receive /chatter")
    assert producer.message_id == consumer.message_id
    for span in (producer, consumer):
        assert span.attributes["messaging.message.body.size"] >= 200_000
        assert span.attributes["otel_ebpf.rtps.fragments"] > 1
    assert consumer.attributes["otel_ebpf.messaging.delivery.latency"] > 0


def test_service_calls_pair() -> None:
    spans, roles, errors = replay("service")
    assert errors == 0
    clients = of(spans, roles["client"], SpanKind.CLIENT)
    servers = of(spans, roles["server"], SpanKind.SERVER)
    assert len(clients) == len(servers) == 3
    by_id = {s.message_id: s for s in servers}
    assert set(by_id) == {c.message_id for c in clients}
    for client in clients:
        server = by_id[client.message_id]
        for span in (client, server):
            assert span.name == "/add_two_ints"
            assert span.attributes["ros.service.type"] == "example_interfaces/srv/AddTwoInts"
            assert span.attributes["otel_ebpf.rtps.service.pairing"] == "cyclone_header"
            assert "error.type" not in span.attributes
        assert client.start_ns <= server.start_ns <= server.end_ns <= client.end_ns
