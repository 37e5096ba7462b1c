"""The correlator on synthetic frames and spans: each kind of evidence, ambiguity left a
root, the waiting window, derived IDs, bounds."""

from __future__ import annotations

from otel_ebpf.protocols.base import (
    ConnInfo,
    Direction,
    Frame,
    NeutralSpan,
    Role,
    SpanKind,
)

from otel_ebpf.correlate.joiner import Correlator, derived_ids, parse_traceparent
from otel_ebpf.telemetry import Stats

MS = 1_000_000


def conn(pid: int, fd: int, role: Role, local: int, remote: int) -> ConnInfo:
    return ConnInfo(pid=pid, fd=fd, generation=1, role=role, transport="stream", family="ipv4",
                    local_addr="127.0.0.1", local_port=local, remote_addr="127.0.0.1",
                    remote_port=remote)


def frame(direction: Direction, start: int, end: int, tid: int, seq: int, pos: int = 0,
          **carrier: str) -> Frame:
    return Frame(direction=direction, start_ns=start, end_ns=end, tid=tid, tcp_seq=seq,
                 stream_pos=pos, carrier={k.replace("_", "-"): v for k, v in carrier.items()})


def request(c: ConnInfo, start: int, end: int, tid: int, seq: int, pos: int = 0, **carrier):
    direction = Direction.EGRESS if c.role == Role.CLIENT else Direction.INGRESS
    return c, frame(direction, start, end, tid, seq, pos, **carrier)


def response(c: ConnInfo, start: int, tid: int):
    direction = Direction.INGRESS if c.role == Role.CLIENT else Direction.EGRESS
    return c, frame(direction, start, start + 1, tid, 0)


def span(c: ConnInfo, pos: int = 0) -> NeutralSpan:
    kind = SpanKind.CLIENT if c.role == Role.CLIENT else SpanKind.SERVER
    return NeutralSpan(name="GET", kind=kind, start_ns=0, end_ns=1, conn=c, request_pos=pos)


# a client in pid 1 calls a server in pid 2 on port 80 from port 5000
UP_CLIENT = conn(1, 3, Role.CLIENT, 5000, 80)
SERVER = conn(2, 4, Role.SERVER, 80, 5000)


def test_client_and_server_pair_by_sequence_number_either_order():
    for order in ("client first", "server first"):
        c = Correlator(Stats())
        frames = [request(UP_CLIENT, 10, 11, 1, seq=777), request(SERVER, 12, 12, 2, seq=777)]
        c.on_frames(frames if order == "client first" else frames[::-1], now_ns=0)
        server, client = span(SERVER), span(UP_CLIENT)
        out = c.on_spans([server, client], now_ns=0)
        assert out == [server, client]
        assert server.parent_span_id == client.span_id and server.trace_id == client.trace_id
        assert server.attributes["otel_ebpf.correlation"] == "wire"
        assert not client.links  # its server end was seen here: no derived link


def test_keepalive_pairs_request_n_with_request_n():
    c = Correlator(Stats())
    frames = []
    for n in range(3):
        frames += [request(UP_CLIENT, 10 * n, 10 * n + 1, 1, seq=100 * n, pos=50 * n),
                   request(SERVER, 10 * n + 2, 10 * n + 3, 2, seq=100 * n, pos=50 * n)]
    c.on_frames(frames, now_ns=0)
    pairs = [(span(UP_CLIENT, 50 * n), span(SERVER, 50 * n)) for n in range(3)]
    c.on_spans([s for p in pairs for s in p], now_ns=0)
    for client, server in pairs:
        assert server.parent_span_id == client.span_id
    assert len({client.trace_id for client, _ in pairs}) == 3


# pid 2 serves on fd 4 and 5 and calls out on fd 9
SERVER_B = conn(2, 5, Role.SERVER, 80, 5001)
OUT = conn(2, 9, Role.CLIENT, 6000, 443)


def test_call_on_the_reading_thread_is_a_child():
    c = Correlator(Stats())
    c.on_frames([request(SERVER, 10, 20, tid=7, seq=1), request(OUT, 30, 31, tid=7, seq=2)],
                now_ns=0)
    server, out = span(SERVER), span(OUT)
    c.on_spans([out, server], now_ns=0)
    c.flush()
    assert out.parent_span_id == server.span_id and out.trace_id == server.trace_id
    assert out.attributes["otel_ebpf.correlation"] == "thread"


def test_sole_open_request_is_the_parent_of_another_threads_call():
    c = Correlator(Stats())
    c.on_frames([request(SERVER, 10, 20, tid=7, seq=1), request(OUT, 30, 31, tid=8, seq=2)],
                now_ns=0)
    server, out = span(SERVER), span(OUT)
    c.on_spans([out, server], now_ns=0)
    c.flush()
    assert out.parent_span_id == server.span_id
    assert out.attributes["otel_ebpf.correlation"] == "sole_request"


def test_two_open_requests_on_the_loop_thread_leave_a_root():
    stats = Stats()
    c = Correlator(stats)
    c.on_frames([request(SERVER, 10, 20, tid=7, seq=1), request(SERVER_B, 12, 22, tid=7, seq=5),
                 request(OUT, 30, 31, tid=7, seq=2)], now_ns=0)
    out = span(OUT)
    c.on_spans([out], now_ns=0)
    c.flush()
    assert out.parent_span_id == b"" and out.attributes["otel_ebpf.correlation"] == "ambiguous"
    assert stats.total("correlation.ambiguous") == 1


def test_a_request_already_answered_is_no_candidate():
    c = Correlator(Stats())
    c.on_frames([request(SERVER, 10, 20, tid=7, seq=1), request(SERVER_B, 12, 22, tid=7, seq=5),
                 response(SERVER, 25, tid=7), request(OUT, 30, 31, tid=7, seq=2)], now_ns=0)
    server_b, out = span(SERVER_B), span(OUT)
    c.on_spans([out, server_b], now_ns=0)
    c.flush()
    assert out.parent_span_id == server_b.span_id


def test_server_waits_for_its_client_then_derives():
    c = Correlator(Stats(), window_ns=100 * MS)
    c.on_frames([request(SERVER, 10, 20, tid=7, seq=99), request(OUT, 30, 31, tid=7, seq=2)],
                now_ns=0)
    server, out = span(SERVER), span(OUT)
    assert c.on_spans([out, server], now_ns=50 * MS) == []  # both wait on the server's client
    released = c.expire(now_ns=150 * MS)
    assert released == [out, server]
    trace, parent = derived_ids(("127.0.0.1", 5000, "127.0.0.1", 80, 99))
    assert server.trace_id == trace and server.parent_span_id == parent
    assert out.trace_id == trace and out.parent_span_id == server.span_id


def test_unmatched_client_links_to_the_derived_ids():
    c = Correlator(Stats())
    c.on_frames([request(UP_CLIENT, 10, 11, 1, seq=5)], now_ns=0)
    client = span(UP_CLIENT)
    c.on_spans([client], now_ns=0)
    assert [(link.trace_id, link.span_id) for link in client.links] == [
        derived_ids(("127.0.0.1", 5000, "127.0.0.1", 80, 5))]


def test_traceparent_wins():
    trace, parent = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    c = Correlator(Stats())
    c.on_frames([request(UP_CLIENT, 10, 11, 1, seq=3, traceparent=f"00-{trace}-{parent}-01"),
                 request(SERVER, 12, 13, 2, seq=3, traceparent=f"00-{trace}-{parent}-01")],
                now_ns=0)
    client, server = span(UP_CLIENT), span(SERVER)
    c.on_spans([server, client], now_ns=0)
    for s in (client, server):
        assert s.trace_id.hex() == trace and s.parent_span_id.hex() == parent


def test_malformed_traceparent_is_ignored():
    assert parse_traceparent("00-xyz-00f067aa0ba902b7-01") is None
    assert parse_traceparent("00-" + "0" * 32 + "-00f067aa0ba902b7-01") is None
    assert parse_traceparent("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01") is None
    assert parse_traceparent("garbage") is None


def test_spans_of_unknown_requests_pass_through():
    c = Correlator(Stats())
    s = span(UP_CLIENT, pos=12345)
    assert c.on_spans([s], now_ns=0) == [s] and s.trace_id == b""


def test_request_table_is_bounded():
    stats = Stats()
    c = Correlator(stats, max_requests=10)
    c.on_frames([request(conn(1, fd, Role.CLIENT, 5000 + fd, 80), 1, 2, 1, seq=fd)
                 for fd in range(30)], now_ns=0)
    assert len(c.requests) == 10 and stats.total("correlation.evicted") == 20


def test_a_server_reading_late_still_finds_its_client():
    """A request queued in a server's backlog longer than the window is still paired."""
    c = Correlator(Stats(), window_ns=100 * MS)
    c.on_frames([request(UP_CLIENT, 10, 11, 1, seq=8)], now_ns=0)
    c.expire(now_ns=5_000 * MS)
    c.on_frames([request(SERVER, 5_000 * MS, 5_000 * MS, 2, seq=8)], now_ns=5_000 * MS)
    server = span(SERVER)
    assert c.on_spans([server], now_ns=5_001 * MS) == [server]
    assert server.attributes["otel_ebpf.correlation"] == "wire"


def test_asyncio_task_born_for_a_request_makes_its_calls():
    """Two requests open on one loop thread: each call is tied to the request whose read
    its task was born from (or whose task created its task)."""
    from otel_ebpf.conntrack.table import LastRead
    from otel_ebpf.kernel.abi import TaskNew

    c = Correlator(Stats())
    births = [
        (TaskNew(pid=2, tid=7, ts_ns=1_000, task=0xA, parent=0x50),
         LastRead(SERVER.key, 0, 40, ns=900, context=0x50)),  # read in the reader's 0x50
        (TaskNew(pid=2, tid=7, ts_ns=2_000, task=0xB, parent=0x51),
         LastRead(SERVER_B.key, 0, 40, ns=1_900, context=0x51)),
        (TaskNew(pid=2, tid=7, ts_ns=3_000, task=0xC, parent=0xB), None),  # B's child task
    ]
    c.on_tasks(births)
    out_a = conn(2, 9, Role.CLIENT, 6000, 443)
    out_b = conn(2, 10, Role.CLIENT, 6001, 443)
    ca, cb = frame(Direction.EGRESS, 30, 31, 7, seq=2), frame(Direction.EGRESS, 32, 33, 7, seq=3)
    ca.task, cb.task = 0xA, 0xC
    c.on_frames([request(SERVER, 10, 20, tid=7, seq=1), request(SERVER_B, 12, 22, tid=7, seq=5),
                 (out_b, cb), (out_a, ca)], now_ns=0)
    server, server_b, a, b = span(SERVER), span(SERVER_B), span(out_a), span(out_b)
    c.on_spans([a, b, server, server_b], now_ns=0)
    c.flush()
    assert a.parent_span_id == server.span_id and a.attributes["otel_ebpf.correlation"] == "task"
    assert b.parent_span_id == server_b.span_id


def test_task_born_long_after_the_read_is_not_bound():
    from otel_ebpf.conntrack.table import LastRead
    from otel_ebpf.kernel.abi import TaskNew

    c = Correlator(Stats())
    c.on_tasks([(TaskNew(pid=2, tid=7, ts_ns=10**9, task=0xA, parent=0x50),
                 LastRead(SERVER.key, 0, 40, ns=0, context=0x50))])
    assert not c.task_reads


def test_a_reused_task_address_does_not_rebind_earlier_calls():
    """Task A dies and a new task is born at its address: calls A wrote before that birth
    keep A's request (births and frames are observed in event order)."""
    from otel_ebpf.conntrack.table import LastRead
    from otel_ebpf.kernel.abi import TaskNew

    c = Correlator(Stats())
    out = conn(2, 9, Role.CLIENT, 6000, 443)
    call = frame(Direction.EGRESS, 30, 31, 7, seq=2)
    call.task = 0xA
    c.observe([
        (TaskNew(pid=2, tid=7, ts_ns=1_000, task=0xA, parent=0x50),
         LastRead(SERVER.key, 0, 40, 900, context=0x50)),
        request(SERVER, 10, 20, tid=7, seq=1),
        request(SERVER_B, 12, 22, tid=7, seq=5),
        (out, call),
        (TaskNew(pid=2, tid=7, ts_ns=2_000, task=0xA, parent=0x51),
         LastRead(SERVER_B.key, 0, 40, 1_900, context=0x51)),
    ], now_ns=0)
    server, call_span = span(SERVER), span(out)
    c.on_spans([call_span, server], now_ns=0)
    c.flush()
    assert call_span.parent_span_id == server.span_id


def test_a_context_copied_in_a_loop_callback_takes_the_read_once():
    """The loop callback that reads a request runs in a Context of its own (the reader's,
    serving no request): the first Context copied from it after the read is the request's
    task's; a later copy on the thread (an accept's call_soon for another connection) does
    not take the same read, nor pass it on to the Contexts made from it."""
    from otel_ebpf.conntrack.table import LastRead
    from otel_ebpf.kernel.abi import TaskNew

    c = Correlator(Stats())
    read = LastRead(SERVER.key, 0, 40, ns=900, context=0x50)  # read in the reader's 0x50
    c.on_tasks([
        (TaskNew(pid=2, tid=7, ts_ns=1_000, task=0xA, parent=0x50), read),  # the task
        (TaskNew(pid=2, tid=7, ts_ns=1_200, task=0xD, parent=0x50), read),  # call_soon
        (TaskNew(pid=2, tid=7, ts_ns=1_300, task=0xE, parent=0xD), read),   # its reader
        (TaskNew(pid=2, tid=8, ts_ns=1_400, task=0xF, parent=0xA), None),   # to_thread copy
    ])
    assert set(c.task_reads) == {(2, 0xA), (2, 0xF)}
    out = conn(2, 9, Role.CLIENT, 6000, 443)
    call = frame(Direction.EGRESS, 30, 31, 8, seq=2)  # from a worker thread, in 0xF
    call.task = 0xF
    c.on_frames([request(SERVER, 10, 20, tid=7, seq=1), request(SERVER_B, 12, 22, tid=7, seq=5),
                 (out, call)], now_ns=0)
    server, call_span = span(SERVER), span(out)
    c.on_spans([call_span, server], now_ns=0)
    c.flush()
    assert call_span.parent_span_id == server.span_id
    assert call_span.attributes["otel_ebpf.correlation"] == "task"


def test_only_a_copy_from_the_reads_own_context_takes_the_read():
    """Recorded at concurrency 64 (CPython 3.13, uvicorn): a request is read in its
    connection's reader Context, and in the same loop iteration the loop copies Contexts
    from its base Context for other connections (accepts: their readers and tasks). Such a
    copy, first after the read, took the request and handed it to the thread-pool calls of
    another request (wrong parents), and the request's own task found the read taken
    (ambiguous). Only a copy from the Context the read ran in takes it, in either order."""
    from otel_ebpf.conntrack.table import LastRead
    from otel_ebpf.kernel.abi import TaskNew

    reader, base = 0x3140, 0x1D40
    read = LastRead(SERVER.key, 0, 40, ns=1_000, context=reader)
    task_copy = (TaskNew(pid=2, tid=7, ts_ns=1_100, task=0xA, parent=reader), read)
    base_copy = (TaskNew(pid=2, tid=7, ts_ns=1_050, task=0xB, parent=base), read)
    for births in ([base_copy, task_copy], [task_copy, base_copy]):
        c = Correlator(Stats())
        c.on_tasks([
            *births,
            (TaskNew(pid=2, tid=7, ts_ns=1_200, task=0xC, parent=0xB), None),  # B's task
            (TaskNew(pid=2, tid=7, ts_ns=1_300, task=0xF, parent=0xA), None),  # to_thread
            (TaskNew(pid=2, tid=7, ts_ns=1_400, task=0xE, parent=0xC), None),  # to_thread
        ])
        assert set(c.task_reads) == {(2, 0xA), (2, 0xF)}
        mine, other = conn(2, 9, Role.CLIENT, 6000, 443), conn(2, 10, Role.CLIENT, 6001, 443)
        call_mine = frame(Direction.EGRESS, 30, 31, 8, seq=2)  # worker threads 8 and 9
        call_other = frame(Direction.EGRESS, 32, 33, 9, seq=3)
        call_mine.task, call_other.task = 0xF, 0xE
        c.on_frames([request(SERVER, 10, 20, tid=7, seq=1),
                     request(SERVER_B, 12, 22, tid=7, seq=5),
                     (mine, call_mine), (other, call_other)], now_ns=0)
        server, server_b, a, b = span(SERVER), span(SERVER_B), span(mine), span(other)
        c.on_spans([a, b, server, server_b], now_ns=0)
        c.flush()
        assert a.parent_span_id == server.span_id
        assert a.attributes["otel_ebpf.correlation"] == "task"
        assert not b.parent_span_id and b.attributes["otel_ebpf.correlation"] == "ambiguous"


def test_a_read_whose_context_is_not_known_binds_nothing():
    """A read the kernel could not name a Context for (0: the process's interpreter not
    registered yet) is no evidence for any copy after it, even one made in no Context."""
    from otel_ebpf.conntrack.table import LastRead
    from otel_ebpf.kernel.abi import TaskNew

    c = Correlator(Stats())
    c.on_tasks([(TaskNew(pid=2, tid=7, ts_ns=1_000, task=0xA, parent=0),
                 LastRead(SERVER.key, 0, 40, ns=900)),
                (TaskNew(pid=2, tid=7, ts_ns=1_100, task=0xB, parent=0x50),
                 LastRead(SERVER.key, 0, 40, ns=900))])
    assert not c.task_reads


def test_a_connections_reader_context_made_after_another_read_stays_unbound():
    """A keep-alive connection's reader Context is copied when it is accepted, from the
    accept's Context, maybe right after another connection's read and before that read's
    task. Had it taken the read, every request later read on the connection would have a
    task copied from a Context bound to a request long answered (all its calls ambiguous),
    and request 1's task none. It takes nothing; each request's task takes its own read."""
    from otel_ebpf.conntrack.table import LastRead
    from otel_ebpf.kernel.abi import TaskNew

    c = Correlator(Stats())
    reader_a, accept, reader_b = 0x50, 0x60, 0x70
    read_1 = LastRead(SERVER.key, 0, 40, ns=900, context=reader_a)  # request 1 on fd 4
    c.on_tasks([
        (TaskNew(pid=2, tid=7, ts_ns=1_000, task=reader_b, parent=accept), read_1),  # fd 5
        (TaskNew(pid=2, tid=7, ts_ns=1_100, task=0xA, parent=reader_a), read_1),  # 1's task
    ])
    assert set(c.task_reads) == {(2, 0xA)}
    c.on_frames([request(SERVER, 10, 20, tid=7, seq=1), response(SERVER, 25, 7)], now_ns=0)
    # the second connection's first request, read in its reader's Context
    c.on_tasks([(TaskNew(pid=2, tid=7, ts_ns=5_000, task=0xB, parent=reader_b),
                 LastRead(SERVER_B.key, 0, 40, ns=4_900, context=reader_b)),
                (TaskNew(pid=2, tid=7, ts_ns=5_100, task=0xF, parent=0xB), None)])  # to_thread
    call = frame(Direction.EGRESS, 60, 61, 8, seq=2)
    call.task = 0xF
    c.on_frames([request(SERVER_B, 50, 55, tid=7, seq=5), request(SERVER, 52, 56, 7, 9, pos=40),
                 (OUT, call)], now_ns=0)
    server_b, call_span = span(SERVER_B), span(OUT)
    c.on_spans([call_span, server_b], now_ns=0)
    c.flush()
    assert call_span.parent_span_id == server_b.span_id
    assert call_span.attributes["otel_ebpf.correlation"] == "task"


def test_uvloop_a_copy_in_the_context_entered_after_the_read_takes_it():
    """uvloop reads in libuv's callback, in the loop's base Context, then enters the
    transport's Context (its server's, the same for every connection) to run data_received,
    where uvicorn creates the request's task: the copy's parent is the entered Context, not
    the read's. It takes the read when the kernel saw that Context entered after the read;
    a copy from another Context (another connection's handler task) or one whose entry came
    before the read takes nothing, and only the first copy takes the read."""
    from otel_ebpf.conntrack.table import LastRead
    from otel_ebpf.kernel.abi import TaskNew

    base, server_ctx, handler_b = 0x1D40, 0x3140, 0x4000
    read = LastRead(SERVER.key, 0, 40, ns=1_000, context=base)
    c = Correlator(Stats())
    c.on_tasks([
        # another connection's handler task copies (a timer) after the read: not for it
        (TaskNew(pid=2, tid=7, ts_ns=1_020, task=0xB, parent=handler_b,
                 entered=server_ctx, entered_ns=1_010), read),
        # the request's task, in the server's Context entered after the read
        (TaskNew(pid=2, tid=7, ts_ns=1_050, task=0xA, parent=server_ctx,
                 entered=server_ctx, entered_ns=1_010), read),
        # a second copy in the same callback (add_done_callback): the read is taken
        (TaskNew(pid=2, tid=7, ts_ns=1_060, task=0xC, parent=server_ctx,
                 entered=server_ctx, entered_ns=1_010), read),
        (TaskNew(pid=2, tid=8, ts_ns=1_100, task=0xF, parent=0xA), None),  # to_thread
    ])
    assert set(c.task_reads) == {(2, 0xA), (2, 0xF)}
    call = frame(Direction.EGRESS, 30, 31, 8, seq=2)
    call.task = 0xF
    c.on_frames([request(SERVER, 10, 20, tid=7, seq=1), request(SERVER_B, 12, 22, tid=7, seq=5),
                 (OUT, call)], now_ns=0)
    server, call_span = span(SERVER), span(OUT)
    c.on_spans([call_span, server], now_ns=0)
    c.flush()
    assert call_span.parent_span_id == server.span_id
    assert call_span.attributes["otel_ebpf.correlation"] == "task"

    stale = Correlator(Stats())  # the Context was entered before the read: another callback
    stale.on_tasks([(TaskNew(pid=2, tid=7, ts_ns=1_050, task=0xA, parent=server_ctx,
                             entered=server_ctx, entered_ns=990), read)])
    assert not stale.task_reads


# the same call through a Service: the client's socket names the VIP, conntrack (conn.nat)
# the connection as the server saw it (DNAT to 10.0.0.2:8080, SNAT to port 6000)
VIA_SERVICE = ConnInfo(pid=1, fd=5, generation=1, role=Role.CLIENT, transport="stream",
                       family="ipv4", local_addr="10.0.0.1", local_port=5000,
                       remote_addr="10.96.0.10", remote_port=80,
                       nat=("10.0.0.1", 6000, "10.0.0.2", 8080))
BEHIND_SERVICE = ConnInfo(pid=2, fd=6, generation=1, role=Role.SERVER, transport="stream",
                          family="ipv4", local_addr="10.0.0.2", local_port=8080,
                          remote_addr="10.0.0.1", remote_port=6000)


def test_a_client_through_nat_links_to_what_its_server_derives():
    """Each end seen by another agent: both derive from the server's view of the call."""
    client_side, server_side = Correlator(Stats()), Correlator(Stats(), window_ns=MS)
    client_side.on_frames([request(VIA_SERVICE, 10, 11, 1, seq=42)], now_ns=0)
    server_side.on_frames([request(BEHIND_SERVICE, 12, 13, 2, seq=42)], now_ns=0)
    client, server = span(VIA_SERVICE), span(BEHIND_SERVICE)
    client_side.on_spans([client], now_ns=0)
    server_side.on_spans([server], now_ns=0)
    assert server_side.expire(now_ns=10 * MS) == [server]
    assert server.attributes["otel_ebpf.correlation"] == "derived"
    assert [(link.trace_id, link.span_id) for link in client.links] == [
        (server.trace_id, server.parent_span_id)]
    assert (server.trace_id, server.parent_span_id) == derived_ids(
        ("10.0.0.1", 6000, "10.0.0.2", 8080, 42))


def test_both_ends_through_nat_on_one_host_pair_on_the_wire():
    c = Correlator(Stats())
    c.on_frames([request(VIA_SERVICE, 10, 11, 1, seq=9), request(BEHIND_SERVICE, 12, 13, 2,
                                                                  seq=9)], now_ns=0)
    client, server = span(VIA_SERVICE), span(BEHIND_SERVICE)
    assert c.on_spans([server, client], now_ns=0) == [server, client]
    assert server.parent_span_id == client.span_id
    assert server.attributes["otel_ebpf.correlation"] == "wire"
    assert not client.links
