"""The connection table with the real HTTP/1 parser, fed kernel events as the ring buffer
delivers them: roles, truncation, lost events, closes, process exits, the LRU bound."""

from __future__ import annotations

import gc

from otel_ebpf.protocols.base import Direction, Role, SpanKind, StatusCode
from otel_ebpf.protocols.registry import Registry

from otel_ebpf.conntrack.table import ConnTable
from otel_ebpf.kernel import abi
from otel_ebpf.telemetry import Stats

OUT, IN = Direction.EGRESS, Direction.INGRESS


def table(max_connections: int = 100) -> tuple[ConnTable, Stats]:
    stats = Stats()
    registry = Registry.from_config(["http1"], {"http1": {"response_timeout": 5}})
    return ConnTable(registry, stats, max_connections, idle_timeout_ns=60 * 10**9), stats


def opened(key, role=Role.SERVER, ts=1) -> abi.ConnOpen:
    return abi.ConnOpen(key=key, ts_ns=ts, tid=key[0], role=role,
                        flags=abi.CONN_F_STREAM | abi.CONN_F_TCP, family=2,
                        local_addr="127.0.0.1", local_port=8000, remote_addr="127.0.0.1",
                        remote_port=40000, comm="srv")


class Wire:
    """Data events for one connection, keeping each direction's position like the kernel."""

    def __init__(self, key):
        self.key, self.pos, self.t = key, [0, 0], 10

    def data(self, direction: Direction, payload: bytes, msg_len: int | None = None,
             captured: int | None = None) -> abi.DataEvent:
        msg_len = len(payload) if msg_len is None else msg_len
        body = payload[:captured] if captured is not None else payload
        ev = abi.DataEvent(key=self.key, tid=1, enter_ns=self.t, exit_ns=self.t + 5,
                           direction=direction, pos=self.pos[direction], msg_len=msg_len,
                           tcp_seq=1000 + self.pos[direction], payload=body, peer=None)
        self.pos[direction] += msg_len
        self.t += 100
        return ev

    def lose(self, direction: Direction, n: int) -> None:
        """Bytes moved whose event never reached user space (a ring-buffer drop)."""
        self.pos[direction] += n
        self.t += 100


REQ = b"GET /a HTTP/1.1\r\nHost: x\r\n\r\n"
RESP = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"


def test_server_request_response_becomes_one_span():
    t, stats = table()
    key = (10, 5, 1)
    w = Wire(key)
    spans = t.handle([opened(key), w.data(IN, REQ), w.data(OUT, RESP)])
    assert len(spans) == 1
    span = spans[0]
    assert span.kind == SpanKind.SERVER and span.attributes["url.path"] == "/a"
    assert span.start_ns == 15 and span.end_ns == 115  # request read return .. response write end
    assert span.request_seq == 1000 and span.response_seq == 1000
    assert stats.total("connections.tracked") == 1


def test_a_context_record_between_a_connections_events_changes_nothing():
    """EV_CONTEXT_IN records (the TCP option, receivers.ebpf.propagation) come in the same
    ring; until the correlator takes them, the table passes over them."""
    key = (10, 5, 1)
    ctx = abi.ContextIn(ts_ns=12, family=2, local_addr="127.0.0.1", local_port=8000,
                        remote_addr="127.0.0.1", remote_port=40000, seq=1000, flags=1,
                        trace_id=bytes(16))
    spans = []
    for events in ([0, 1, 2], [0, "ctx", 1, "ctx", 2]):
        t, _ = table()
        w = Wire(key)
        evs = {0: opened(key), 1: w.data(IN, REQ), 2: w.data(OUT, RESP)}
        spans.append(t.handle([ctx if e == "ctx" else evs[e] for e in events]))
    assert len(spans[0]) == len(spans[1]) == 1
    assert (spans[0][0].name, spans[0][0].start_ns, spans[0][0].end_ns) == (
        spans[1][0].name, spans[1][0].start_ns, spans[1][0].end_ns)


def test_role_inferred_when_open_was_not_seen():
    t, _ = table()
    w = Wire((11, 6, 2))
    spans = t.handle([w.data(OUT, REQ), w.data(IN, RESP)])
    assert [s.kind for s in spans] == [SpanKind.CLIENT]


def test_truncated_body_is_skipped_and_next_request_parsed():
    t, stats = table()
    key = (12, 7, 3)
    w = Wire(key)
    big = b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n" + b"x" * 100000
    events = [opened(key, Role.CLIENT), w.data(OUT, REQ), w.data(IN, big, captured=4096),
              w.data(OUT, REQ.replace(b"/a", b"/b")), w.data(IN, RESP)]
    spans = t.handle(events)
    assert [s.attributes["url.path"] for s in spans] == ["/a", "/b"]
    assert spans[0].attributes["http.response.body.size"] == 100000
    assert stats.total("gaps") == 0 and stats.total("parse.errors") == 0


def test_lost_event_resyncs_on_the_next_message():
    t, stats = table()
    key = (13, 8, 4)
    w = Wire(key)
    events = [opened(key), w.data(IN, REQ), w.data(OUT, RESP)]
    w.lose(IN, len(REQ))  # a request's event was dropped, and its response...
    w.lose(OUT, len(RESP))
    events += [w.data(IN, REQ.replace(b"/a", b"/c")), w.data(OUT, RESP)]
    spans = t.handle(events)
    assert [s.attributes["url.path"] for s in spans] == ["/a", "/c"]
    assert stats.total("gaps") >= 1


def test_close_flushes_unanswered_request_as_error():
    t, _ = table()
    key = (14, 9, 5)
    w = Wire(key)
    assert t.handle([opened(key, Role.CLIENT), w.data(OUT, REQ)]) == []
    spans = t.handle([abi.ConnClose(key=key, ts_ns=999, bytes_sent=len(REQ), bytes_recv=0)])
    assert len(spans) == 1 and spans[0].status == StatusCode.ERROR
    assert spans[0].attributes["error.type"] == "connection_closed"
    assert len(t) == 0


def test_process_exit_closes_its_connections():
    t, _ = table()
    keys = [(15, fd, fd) for fd in (3, 4)]
    t.handle([opened(k) for k in keys] + [opened((16, 3, 3))])
    t.handle([abi.ProcessExit(pid=15, ts_ns=5)])
    assert list(t.conns) == [(16, 3, 3)]


def test_table_is_bounded_and_counts_evictions():
    t, stats = table(max_connections=3)
    t.handle([opened((20, fd, fd)) for fd in range(10)])
    assert len(t) == 3 and stats.total("connections.evicted") == 7
    assert list(t.conns) == [(20, 7, 7), (20, 8, 8), (20, 9, 9)]


def test_unrecognized_connection_is_given_up():
    t, stats = table()
    key = (21, 3, 3)
    w = Wire(key)
    t.handle([opened(key)] + [w.data(IN, b"\x00\x01binary") for _ in range(20)])
    assert stats.total("connections.unparsed") == 1


def test_parser_counters_reach_self_telemetry_at_close():
    t, stats = table()
    key = (22, 3, 3)
    w = Wire(key)
    t.handle([opened(key), w.data(OUT, RESP)])  # a response whose request came before capture
    t.handle([abi.ConnClose(key=key, ts_ns=999, bytes_sent=len(RESP), bytes_recv=0)])
    assert stats.snapshot()[("protocol.events", (("event", "orphan_responses"),
                                                 ("protocol", "http1")))] == 1


def test_a_closed_or_evicted_connection_leaves_no_reference_cycle():
    """The agent runs the collector's oldest generation rarely (agent._tune_gc): what a
    finished connection leaves must go by reference counting, or RSS grows with every
    connection until that pass (10,000 connections: ~45 MiB)."""
    t, _ = table(max_connections=4)
    gc.collect()
    gc.disable()
    try:
        for fd in range(10):  # six evicted, then four closed, each with an exchange
            key = (30, fd, fd)
            w = Wire(key)
            t.handle([opened(key), w.data(IN, REQ), w.data(OUT, RESP)])
        t.handle([abi.ConnClose(key=(30, fd, fd), ts_ns=10**6, bytes_sent=0, bytes_recv=0)
                  for fd in range(6, 10)])
        assert len(t) == 0
        assert gc.collect() == 0
    finally:
        gc.enable()
