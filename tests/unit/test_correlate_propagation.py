"""Two hosts' correlators joined by what the TCP option carries: the client host's
RemoteContexts says which contexts to send, the server host's takes them; the server's span
becomes a child of the client span in the client's trace."""

from __future__ import annotations

from otel_ebpf.correlate.joiner import Correlator, derived_ids
from otel_ebpf.correlate.propagation import EVIDENCE, SEND_CONTEXT, RemoteContexts
from otel_ebpf.kernel.abi import ContextOut
from otel_ebpf.protocols.base import ConnInfo, Direction, Frame, NeutralSpan, Role, SpanKind
from otel_ebpf.telemetry import Stats

A, B = "10.244.1.2", "10.244.2.3"  # the gateway's host, the model server's host


def conn(pid: int, fd: int, role: Role, local: str, lport: int, remote: str, rport: int
         ) -> ConnInfo:
    return ConnInfo(pid=pid, fd=fd, generation=1, role=role, transport="stream", family="ipv4",
                    local_addr=local, local_port=lport, remote_addr=remote, remote_port=rport)


def frame(direction: Direction, start: int, end: int, tid: int, seq: int, task: int = 0
          ) -> Frame:
    f = Frame(direction=direction, start_ns=start, end_ns=end, tid=tid, tcp_seq=seq,
              stream_pos=0)
    f.task = task
    return f


def span(c: ConnInfo) -> NeutralSpan:
    kind = SpanKind.CLIENT if c.role == Role.CLIENT else SpanKind.SERVER
    return NeutralSpan(name="POST", kind=kind, start_ns=0, end_ns=1, conn=c, request_pos=0)


INGRESS, EGRESS = Direction.INGRESS, Direction.EGRESS
GATEWAY_IN = conn(1, 4, Role.SERVER, A, 8000, "127.0.0.1", 40000)  # from a local caller
CALLER = conn(3, 3, Role.CLIENT, "127.0.0.1", 40000, A, 8000)  # traced: the wire decides
GATEWAY_OUT = conn(1, 5, Role.CLIENT, A, 41000, B, 8000)
MODEL_IN = conn(2, 7, Role.SERVER, B, 8000, A, 41000)
SEQ = 123_456


def _gateway() -> tuple[Correlator, RemoteContexts, NeutralSpan, NeutralSpan]:
    """Host A: a request comes in and, on its thread, a call goes out to host B."""
    c = Correlator(Stats())
    p = RemoteContexts(c)
    c.on_frames([(CALLER, frame(EGRESS, 5, 6, tid=1, seq=1)),
                 (GATEWAY_IN, frame(INGRESS, 10, 20, tid=9, seq=1)),
                 (GATEWAY_OUT, frame(EGRESS, 30, 31, tid=9, seq=SEQ))], now_ns=0)
    return c, p, span(GATEWAY_IN), span(GATEWAY_OUT)


def test_the_server_host_joins_the_client_hosts_trace():
    gw, gw_prop, inbound, outbound = _gateway()
    sent = gw_prop.outgoing()
    assert [o.key for o in sent] == [(A, 41000, B, 8000, SEQ)]
    assert gw_prop.outgoing() == []  # each request once
    model = Correlator(Stats())
    model_prop = RemoteContexts(model)
    model.on_frames([(MODEL_IN, frame(INGRESS, 40, 50, tid=3, seq=SEQ))], now_ns=0)
    served = span(MODEL_IN)
    assert model.on_spans([served], now_ns=0) == []  # waits for its client end
    model_prop.incoming([(o.key, o.trace_id, o.sampled) for o in sent])
    ready = gw.on_spans([outbound, inbound], now_ns=0) + model.on_spans([], now_ns=0)
    gw.flush()
    assert served in ready
    assert outbound.trace_id == inbound.trace_id == served.trace_id
    assert outbound.span_id == derived_ids((A, 41000, B, 8000, SEQ))[1]
    assert served.parent_span_id == outbound.span_id
    assert outbound.parent_span_id == inbound.span_id
    assert served.attributes["otel_ebpf.correlation"] == EVIDENCE
    # the link to the derived pair stays: where the context is lost, the server's trace is
    # that pair's
    assert [(link.trace_id, link.span_id) for link in outbound.links] == \
        [derived_ids((A, 41000, B, 8000, SEQ))]


def test_a_context_that_overtakes_the_servers_read_waits_for_it():
    gw, gw_prop, _, _ = _gateway()
    sent = gw_prop.outgoing()
    model = Correlator(Stats())
    model_prop = RemoteContexts(model)
    model_prop.incoming([(o.key, o.trace_id, o.sampled) for o in sent])
    model.on_frames([(MODEL_IN, frame(INGRESS, 40, 50, tid=3, seq=SEQ))], now_ns=0)
    model_prop.resolve()
    served = span(MODEL_IN)
    assert model.on_spans([served], now_ns=0) == [served]
    assert served.trace_id == sent[0].trace_id


def test_a_call_whose_parent_still_waits_is_sent_once_its_trace_is_known():
    """A middle hop: its server request waits for its own caller's context; the call it
    makes meanwhile is sent when that context arrives, in that trace."""
    hop = Correlator(Stats())
    prop = RemoteContexts(hop)
    hop_in = conn(2, 7, Role.SERVER, B, 8000, A, 41000)
    hop_out = conn(2, 8, Role.CLIENT, B, 42000, "10.244.3.4", 9000)
    hop.on_frames([(hop_in, frame(INGRESS, 40, 50, tid=3, seq=SEQ)),
                   (hop_out, frame(EGRESS, 60, 61, tid=3, seq=777))], now_ns=0)
    assert prop.outgoing() == []  # the caller's trace is not known here yet
    upstream_trace = bytes(range(16))
    prop.incoming([((A, 41000, B, 8000, SEQ), upstream_trace, True)])
    out = prop.outgoing()
    assert [(o.key, o.trace_id) for o in out] == [((B, 42000, "10.244.3.4", 9000, 777),
                                                   upstream_trace)]


def test_loopback_calls_and_calls_answered_here_send_nothing():
    c = Correlator(Stats())
    p = RemoteContexts(c)
    local_out = conn(1, 5, Role.CLIENT, "127.0.0.1", 41000, "127.0.0.1", 8000)
    c.on_frames([(local_out, frame(EGRESS, 30, 31, tid=9, seq=5))], now_ns=0)
    assert p.outgoing() == []
    # a call to another address whose server end this host sees (both ends traced here)
    out = conn(1, 6, Role.CLIENT, A, 41001, B, 8000)
    there = conn(2, 7, Role.SERVER, B, 8000, A, 41001)
    c.on_frames([(out, frame(EGRESS, 30, 31, tid=9, seq=6)),
                 (there, frame(INGRESS, 32, 33, tid=3, seq=6))], now_ns=0)
    assert p.outgoing() == []


def test_a_remote_callers_request_waits_twice_the_window_then_derives():
    """The caller's host may itself wait the window for the trace of the request its call
    was made for: a request from another host waits twice the window for its context; one
    from this host's loopback only the window."""
    window = 2_000_000_000
    c = Correlator(Stats(), window_ns=window)
    RemoteContexts(c)
    local_in = conn(2, 8, Role.SERVER, "127.0.0.1", 8000, "127.0.0.1", 41001)
    c.on_frames([(MODEL_IN, frame(INGRESS, 40, 50, tid=3, seq=SEQ)),
                 (local_in, frame(INGRESS, 40, 50, tid=3, seq=99))], now_ns=0)
    remote, local = span(MODEL_IN), span(local_in)
    assert c.on_spans([remote, local], now_ns=0) == []
    assert c.expire(now_ns=window + 1) == [local]  # derived after the window
    assert local.attributes["otel_ebpf.correlation"] == "derived"
    assert c.expire(now_ns=2 * window - 1) == []
    assert c.expire(now_ns=2 * window) == [remote]
    assert remote.attributes["otel_ebpf.correlation"] == "derived"
    assert remote.trace_id == derived_ids((A, 41000, B, 8000, SEQ))[0]


def _model(wait_ns: int, window: int = 2_000_000_000) -> tuple[Correlator, RemoteContexts]:
    model = Correlator(Stats(), window_ns=window)
    return model, RemoteContexts(model, wait_ns=wait_ns)


def test_on_a_connection_that_carried_contexts_a_request_waits_for_its_own():
    """The client's agent sends a context for every call it makes, on the connection's next
    segment: the last request before a connection idles gets its context only when the
    connection is used again or closed. Once a connection has carried one, its requests
    wait up to `wait` for theirs, past twice the window."""
    window, wait = 2_000_000_000, 10_000_000_000
    model, prop = _model(wait, window)
    first_trace, second_trace = bytes(range(16)), bytes(range(1, 17))
    model.on_frames([(MODEL_IN, frame(INGRESS, 40, 50, tid=3, seq=SEQ))], now_ns=0)
    first = span(MODEL_IN)
    assert model.on_spans([first], now_ns=0) == []
    prop.incoming([((A, 41000, B, 8000, SEQ), first_trace, True)], now_ns=1)
    assert model.on_spans([], now_ns=1) == [first]
    # the next request on that connection: its context comes 7 s later (the FIN)
    model.on_frames([(MODEL_IN, frame(INGRESS, 60, 70, tid=3, seq=SEQ + 100))], now_ns=2)
    second = span(MODEL_IN)
    second.request_pos = 0
    assert model.on_spans([second], now_ns=2) == []
    assert model.expire(now_ns=2 * window + 3) == []  # past twice the window: waits on
    later = 7_000_000_000
    prop.incoming([((A, 41000, B, 8000, SEQ + 100), second_trace, True)], now_ns=later)
    assert model.on_spans([], now_ns=later) == [second]
    assert second.trace_id == second_trace
    assert second.attributes["otel_ebpf.correlation"] == EVIDENCE


def test_a_context_that_never_comes_leaves_the_derived_ids_after_the_wait():
    window, wait = 2_000_000_000, 10_000_000_000
    model, prop = _model(wait, window)
    prop.incoming([((A, 41000, B, 8000, SEQ - 100), bytes(16), True)], now_ns=0)
    model.on_frames([(MODEL_IN, frame(INGRESS, 40, 50, tid=3, seq=SEQ))], now_ns=0)
    served = span(MODEL_IN)
    assert model.on_spans([served], now_ns=0) == []
    assert model.expire(now_ns=wait - 1) == []
    assert model.expire(now_ns=wait) == [served]
    assert served.attributes["otel_ebpf.correlation"] == "derived"
    assert served.trace_id == derived_ids((A, 41000, B, 8000, SEQ))[0]
    # the context of the earlier request found no request in a window: counted
    prop.resolve(now_ns=wait)
    assert prop.unmatched == 1
    assert model.stats.snapshot()[("propagation.contexts", (("outcome", "unmatched"),))] == 1


def test_a_request_from_a_connection_without_contexts_waits_only_twice_the_window():
    """Another connection from the same host carried contexts; this one none yet (its
    client may be a process the client's agent does not trace): twice the window."""
    window = 2_000_000_000
    model, prop = _model(10_000_000_000, window)
    prop.incoming([((A, 41999, B, 8000, 5), bytes(16), True)], now_ns=0)
    model.on_frames([(MODEL_IN, frame(INGRESS, 40, 50, tid=3, seq=SEQ))], now_ns=0)
    served = span(MODEL_IN)
    assert model.on_spans([served], now_ns=0) == []
    assert model.expire(now_ns=2 * window) == [served]
    assert served.attributes["otel_ebpf.correlation"] == "derived"


def _at_send(trace: bytes, origin: tuple[int, int, int], origin_pos: int = 0) -> ContextOut:
    """What the kernel says when it queued GATEWAY_OUT's context at the call's write."""
    return ContextOut(ts_ns=30, key=(1, 5, 1), pos=0, seq=SEQ, flags=1, trace_id=trace,
                      origin=origin, origin_pos=origin_pos)


def _outcomes(stats: Stats) -> dict[str, int]:
    return {dict(attrs).get("outcome"): n for (name, attrs), n in stats.snapshot().items()
            if name == "propagation.contexts"}


def test_a_call_the_kernel_sent_at_its_write_takes_that_trace():
    gw, gw_prop, inbound, outbound = _gateway()
    trace = bytes(range(1, 17))
    gw_prop.queued_at_send([_at_send(trace, origin=(1, 4, 1))])  # GATEWAY_IN's request
    assert gw_prop.outgoing() == []  # on the wire already: nothing sent after the fact
    gw.on_spans([outbound, inbound], now_ns=0)
    gw.flush()
    # the whole chain (the local caller's span is its root) takes the kernel's trace
    assert outbound.trace_id == inbound.trace_id == trace
    assert outbound.parent_span_id == inbound.span_id
    assert outbound.span_id == derived_ids((A, 41000, B, 8000, SEQ))[1]
    assert _outcomes(gw.stats) == {"at_send": 1}


def test_a_kernel_context_for_another_request_is_counted_and_changes_nothing():
    gw, gw_prop, inbound, outbound = _gateway()
    trace = bytes(range(1, 17))
    gw_prop.queued_at_send([_at_send(trace, origin=(1, 99, 1))])
    assert gw_prop.outgoing() == []
    gw.on_spans([outbound, inbound], now_ns=0)
    gw.flush()
    assert outbound.parent_span_id == inbound.span_id  # the agent's own join stands
    assert outbound.trace_id == inbound.trace_id != trace
    assert _outcomes(gw.stats) == {"at_send_disagreed": 1}


def test_an_ambiguous_call_takes_the_request_the_kernel_named():
    c = Correlator(Stats())
    p = RemoteContexts(c)
    first = conn(1, 4, Role.SERVER, A, 8000, "10.0.0.9", 50000)
    second = conn(1, 6, Role.SERVER, A, 8000, "10.0.0.9", 50001)
    # two requests open on other threads, the call made on a third: no evidence names one
    c.on_frames([(first, frame(INGRESS, 10, 20, tid=7, seq=1)),
                 (second, frame(INGRESS, 11, 21, tid=8, seq=1)),
                 (GATEWAY_OUT, frame(EGRESS, 30, 31, tid=9, seq=SEQ))], now_ns=0)
    # the served request came from an untraced host: its trace is the derived one, which
    # the kernel computes alike at the read
    trace = derived_ids(("10.0.0.9", 50001, A, 8000, 1))[0]
    p.queued_at_send([_at_send(trace, origin=(1, 6, 1))])
    assert p.outgoing() == []
    served, call = span(second), span(GATEWAY_OUT)
    c.on_spans([call, served], now_ns=0)
    c.flush()
    assert call.parent_span_id == served.span_id
    assert call.attributes["otel_ebpf.correlation"] == SEND_CONTEXT
    assert call.trace_id == served.trace_id == trace
    p.outgoing()  # the agreement is checked once the served request's trace is known
    assert _outcomes(c.stats) == {"at_send": 1}


def test_the_derived_pair_is_what_the_kernel_computes():
    """Pinned values: bpf/include/prop_send.bpf.h computes the same pair from the socket
    (a change to either side must change both)."""
    trace, span_id = derived_ids(("10.244.1.2", 41000, "10.244.2.3", 8000, 123456))
    assert (trace.hex(), span_id.hex()) == ("1816c9bbd6519e8ba2b73d4fba72c6e4", "7ac74905d05c3ee0")
    v6 = derived_ids(("fd00::1", 41000, "fd00::2", 8000, 0xFFFFFFFF))
    assert v6 != derived_ids(("fd00::1", 41000, "fd00::2", 8000, 0))
    # an IPv4 peer of an IPv6 socket is the same connection as of an IPv4 socket
    assert derived_ids(("::ffff:10.244.1.2", 41000, "10.244.2.3", 8000, 1)) == \
        derived_ids(("10.244.1.2", 41000, "10.244.2.3", 8000, 1))
