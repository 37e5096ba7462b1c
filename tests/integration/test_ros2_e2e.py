"""ROS 2 over DDS end to end: Cyclone DDS peers (the `cyclonedds` package) with ROS 2
topic and type names, each in its own process, RTPS over UDP on 127.0.0.1, the real agent
reading their datagrams. A topic with two subscribers, a fragmented large sample and a
service call must become PRODUCER/CONSUMER and CLIENT/SERVER spans joined into traces."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.integration.peers.dds_peer import discovery_ports, peer_env, pick_domain

from tests.support.wallclock import WRITE_RETURN_NS

from .conftest import REPO, Span

pytestmark = pytest.mark.kernel

SERVER, CLIENT, PRODUCER, CONSUMER = 2, 3, 4, 5


def peer(role: str, domain: int, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "tests.integration.peers.dds_peer", role,
                             "--domain", str(domain), *args], cwd=REPO, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=peer_env(domain))


def finish(proc: subprocess.Popen, timeout_s: float = 60.0) -> list[dict]:
    out, err = proc.communicate(timeout=timeout_s)
    assert proc.returncode == 0, err[-2000:]
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def pid_of(lines: list[dict]) -> int:
    return next(line["pid"] for line in lines if line["event"] == "ready")


def on_topic(spans: list[Span], kind: int, topic: str = "/chatter") -> list[Span]:
    return [s for s in spans
            if s.kind == kind and s.attrs.get("messaging.destination.name") == topic]


@pytest.fixture
def domain() -> int:
    return pick_domain()


@pytest.fixture
def ros_agent(start_agent, domain):
    ports = discovery_ports(domain)
    return start_agent(ports, targets={"ports": ports})


def test_topic_with_two_subscribers_is_one_trace_per_sample(ros_agent, domain):
    subs = [peer("subscriber", domain, "--count", "5", "--timeout", "40") for _ in range(2)]
    # the readers learn the writer a moment after it learns them (a volatile reader drops
    # what comes first): on a loaded machine that moment passed 200 ms
    pub = peer("publisher", domain, "--count", "5", "--interval-ms", "50", "--subscribers", "2",
               "--settle-ms", "1500")
    published = finish(pub)
    received = [finish(s) for s in subs]
    pub_pid, sub_pids = pid_of(published), {pid_of(r) for r in received}

    def complete(spans: list[Span]) -> bool:
        return len(on_topic(spans, PRODUCER)) >= 5 and len(on_topic(spans, CONSUMER)) >= 10

    spans = ros_agent.wait_for(complete, timeout_s=30)
    producers, consumers = on_topic(spans, PRODUCER), on_topic(spans, CONSUMER)
    assert len(producers) == 5, [s.name for s in spans]
    assert len(consumers) == 10
    by_message = {p.attrs["messaging.message.id"]: p for p in producers}
    for span in producers + consumers:
        a = span.attrs
        assert a["messaging.system"] == "ros2"
        assert a["ros.message.type"] == "std_msgs/msg/String"
        assert a["otel_ebpf.dds.topic.name"] == "rt/chatter"
    for p in producers:
        assert p.name == "publish /chatter" and p.resource["process.pid"] == pub_pid
        assert not p.parent_span_id
    for c in consumers:
        assert c.name == "receive /chatter" and c.resource["process.pid"] in sub_pids
        producer = by_message[c.attrs["messaging.message.id"]]
        # one trace per sample: each receiver's span is a child of the publisher's
        assert c.trace_id == producer.trace_id and c.parent_span_id == producer.span_id
        latency = c.attrs["otel_ebpf.messaging.delivery.latency"]
        assert 0 < latency < 0.5
        assert c.start >= producer.start
    # each subscriber got each sample once
    for pid in sub_pids:
        got = {c.attrs["messaging.message.id"] for c in consumers if c.resource["process.pid"] == pid}
        assert got == set(by_message)


def test_a_fragmented_sample_is_one_message(ros_agent, domain):
    sub = peer("subscriber", domain, "--count", "1", "--timeout", "40")
    big = peer("big", domain, "--size", "200000")
    finish(big)
    finish(sub)

    def both(spans: list[Span]) -> bool:
        return bool(on_topic(spans, PRODUCER)) and bool(on_topic(spans, CONSUMER))

    spans = ros_agent.wait_for(both, timeout_s=30)
    (producer,) = on_topic(spans, PRODUCER)
    (consumer,) = on_topic(spans, CONSUMER)
    for span in (producer, consumer):
        assert span.attrs["otel_ebpf.rtps.fragments"] > 1
        assert span.attrs["messaging.message.body.size"] > 200000
    assert consumer.parent_span_id == producer.span_id


def test_service_call_pairs_request_and_reply(ros_agent, domain):
    server = peer("service-server", domain, "--count", "3", "--timeout", "40")
    client = peer("service-client", domain, "--count", "3")
    calls = [line for line in finish(client) if line["event"] == "call"]
    finish(server)
    assert len(calls) == 3

    def paired(spans: list[Span]) -> bool:
        return (len([s for s in spans if s.kind == CLIENT]) >= 3
                and len([s for s in spans if s.kind == SERVER]) >= 3)

    spans = ros_agent.wait_for(paired, timeout_s=30)
    clients = [s for s in spans if s.kind == CLIENT]
    servers = {s.parent_span_id: s for s in spans if s.kind == SERVER}
    assert len(clients) == 3 and len(servers) == 3
    for c in clients:
        assert c.attrs["rpc.system.name"] == "ros2"
        assert "/add_two_ints" in c.name
        s = servers[c.span_id]  # the server's span is the client's child
        assert s.trace_id == c.trace_id
        assert c.start <= s.start and s.end <= c.end + WRITE_RETURN_NS
