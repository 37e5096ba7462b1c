"""The socket capture program on its own: what each syscall family produces, as decoded
events, with traffic from a separate process (the tracer never traces its own pid)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from otel_ebpf.protocols.base import Direction, Role

from otel_ebpf.kernel import abi
from otel_ebpf.kernel.libbpf import LibbpfLog
from otel_ebpf.kernel.socket_tracer import CaptureSettings, SocketTracer

from .conftest import REPO, free_port, require_kernel

pytestmark = pytest.mark.kernel


def capture(kind: str, arg: str, **settings) -> tuple[list[abi.Event], dict]:
    require_kernel()
    tracer = SocketTracer(CaptureSettings(**settings), LibbpfLog())
    try:
        proc = subprocess.run([sys.executable, "-m", "tests.integration.peers.sockets", kind, arg],
                              cwd=REPO, capture_output=True, text=True, timeout=30)
        assert proc.returncode == 0, proc.stderr
        events: list[abi.Event] = []
        deadline = time.monotonic() + 2
        while time.monotonic() < deadline:
            events += tracer.poll(50)
        return events, tracer.kernel_counters()
    finally:
        tracer.close()


def data(events, direction=None):
    return [e for e in events if isinstance(e, abi.DataEvent)
            and (direction is None or e.direction == direction)]


def test_udp_datagrams_carry_their_peer():
    port = free_port()
    events, _ = capture("udp", str(port), ports=(port,))
    sent = data(events, Direction.EGRESS)
    received = data(events, Direction.INGRESS)
    assert {e.payload for e in sent} == {b"dgram-sendto", b"dgram-sendmsg"}
    assert {e.payload for e in received} == {b"dgram-sendto", b"dgram-sendmsg"}
    for e in sent:
        assert e.peer == ("127.0.0.1", port)
    for e in received:
        assert e.peer is not None and e.peer[0] == "127.0.0.1" and e.peer[1] != port


def test_sendmmsg_and_recvmmsg_one_event_per_datagram():
    port = free_port()
    events, _ = capture("mmsg", str(port), ports=(port,))
    expected = [b"mmsg-0", b"mmsg-1", b"mmsg-2"]
    assert [e.payload for e in data(events, Direction.EGRESS)] == expected
    received = data(events, Direction.INGRESS)
    assert [e.payload for e in received] == expected
    assert all(e.peer and e.peer[0] == "127.0.0.1" for e in received)


def test_tcp_ipv6_read_write_families_positions_and_truncation():
    port = free_port()
    events, counters = capture("tcp", str(port), ports=(port,), capture_max=4096)
    opens = [e for e in events if isinstance(e, abi.ConnOpen)]
    assert {e.role for e in opens} == {Role.CLIENT, Role.SERVER}
    for e in opens:
        assert e.family == 10 and e.local_addr == "::1" and e.remote_addr == "::1"
        assert e.flags & abi.CONN_F_TCP
    client = next(e for e in opens if e.role == Role.CLIENT)
    sent = [e for e in data(events, Direction.EGRESS) if e.key == client.key]
    assert [e.payload[:12] for e in sent] == [b"write-call", b"writev-call", b"x" * 12]
    # positions run on without a gap; the 10 kB send was cut at the capture size
    assert [e.pos for e in sent] == [0, 10, 21]
    assert sent[2].msg_len == 10000 and len(sent[2].payload) == 4096 and sent[2].truncated
    # the kernel counts each message it cut: the client's one send, and each server read
    # longer than the capture size (the 10 kB arrive in reads the kernel sizes)
    assert sum(counters["truncated"]) == len([e for e in data(events) if e.truncated])
    assert [e.truncated for e in sent] == [False, False, True]
    # the server read the same bytes: TCP sequence numbers match across the two ends
    server = next(e for e in opens if e.role == Role.SERVER)
    received = [e for e in data(events, Direction.INGRESS) if e.key == server.key]
    assert received[0].tcp_seq == sent[0].tcp_seq
    assert any(e.tcp_seq == sent[1].tcp_seq for e in received)
    closes = {e.key: e for e in events if isinstance(e, abi.ConnClose)}
    assert closes[client.key].bytes_sent == 10021


def test_fd_reuse_gives_a_new_connection_id():
    port = free_port()
    events, _ = capture("fd_reuse", str(port), ports=(port,))
    clients = [e for e in events if isinstance(e, abi.ConnOpen) and e.role == Role.CLIENT]
    assert len(clients) == 2
    assert clients[0].key[:2] == clients[1].key[:2]  # same pid and fd...
    assert clients[0].key[2] != clients[1].key[2]  # ...different connections


def test_unix_stream_sockets_are_marked(tmp_path):
    events, _ = capture("unix", str(tmp_path / "sock"), pids=())
    mine = [e for e in events if isinstance(e, abi.ConnOpen) and e.flags & abi.CONN_F_UNIX]
    keys = {e.key for e in mine}
    payloads = [e.payload for e in data(events) if e.key in keys]
    assert b"over-unix" in payloads


# one TCP exchange on 127.0.0.1:port, run in the tracer's own process and in another one
SELF_TRAFFIC = """
import socket, sys
port = PORT if "PORT" in globals() else int(sys.argv[1])
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen()
cli = socket.create_connection(("127.0.0.1", port))
conn, _ = srv.accept()
cli.sendall(b"the same bytes")
assert conn.recv(100) == b"the same bytes"
for s in (cli, conn, srv):
    s.close()
"""


def test_the_agent_never_traces_itself():
    """The tracer's own traffic gives no event, while the same traffic from another
    process, right after, is captured: the silence is not a capture that saw nothing."""
    port = free_port()
    require_kernel()
    tracer = SocketTracer(CaptureSettings(ports=(port,)), LibbpfLog())
    try:
        exec(SELF_TRAFFIC, {"__name__": "self_traffic", "PORT": port})
        other = subprocess.Popen([sys.executable, "-c", SELF_TRAFFIC, str(port)],
                                 stderr=subprocess.PIPE, text=True)
        _, err = other.communicate(timeout=30)
        assert other.returncode == 0, err
        # ours were made first: once the other process's are all in, ours would be too
        events: list = []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            events += tracer.poll(50)
            theirs = [e for e in data(events) if e.key[0] == other.pid]
            if len(theirs) == 2:
                break
    finally:
        tracer.close()
    assert not [e for e in events if getattr(e, "key", (0,))[0] == os.getpid()
                or getattr(e, "pid", 0) == os.getpid()]
    # the positive control: the other process's exchange, both ends, byte for byte
    theirs = [e for e in data(events) if e.key[0] == other.pid]
    assert sorted((e.direction, e.payload) for e in theirs) == sorted(
        [(Direction.EGRESS, b"the same bytes"), (Direction.INGRESS, b"the same bytes")])
    opens = [e for e in events if isinstance(e, abi.ConnOpen) and e.key[0] == other.pid]
    assert sorted(e.role for e in opens) == sorted([Role.CLIENT, Role.SERVER])


def test_llm_request_widens_its_connection_with_prefix_and_tail():
    port = free_port()
    events, counters = capture("llm_request", str(port), ports=(port,), capture_max=1024,
                               wide_prefixes=("/v1/chat/completions", "/api/chat"),
                               wide_capture=8192, tail_capture=512)
    opens = {e.key: e for e in events if isinstance(e, abi.ConnOpen)}
    first_client = min((k for k, e in opens.items() if e.role == Role.CLIENT), key=lambda k: k[2])
    sent = [e for e in data(events, Direction.EGRESS) if e.key == first_client]
    request = sent[0]
    # the request's own send was copied again, wider, and its last bytes came along
    assert request.payload.startswith(b"POST /v1/chat/completions ")
    assert len(request.payload) == 8192 and len(request.tail) == 512
    assert request.tail.endswith(b'"model":"tail-model"}') and request.truncated
    assert len(sent[1].payload) == 8192 and sent[1].tail == b"x" * 512
    # the server read the request: its side was widened by what it read
    server_reads = [e for e in data(events, Direction.INGRESS)
                    if opens[e.key].role == Role.SERVER and e.payload.startswith(b"POST")]
    assert server_reads and len(server_reads[0].payload) > 1024
    # a GET to the same path does not widen
    other = [
        e for e in data(events, Direction.EGRESS)
        if e.key != first_client and opens[e.key].role == Role.CLIENT]
    assert other and len(other[0].payload) == 1024 and other[0].tail == b""
    assert sum(counters["widened"]) == 2  # the client's connection and the server's


def test_process_names_select_by_the_process_not_the_thread():
    port = free_port()
    # the peer renames itself after it started: the agent sees it as new (no scan of it)
    events, _ = capture("named_threads", str(port), process_names=("peerproc",))
    payloads = [e.payload for e in data(events) if e.payload == b"from-a-named-thread"]
    assert len(payloads) == 2  # sent and received, both by the thread named "recv"
    opens = [e for e in events if isinstance(e, abi.ConnOpen) and e.comm == "peerproc"]
    assert opens, "connections are opened under the process's name"


# 4 KiB written and read on 127.0.0.1:port, PAIRS times, by another process: a data event
# for each write and each read; then "done", and the connection held open until stdin
# closes (a close or an exit is a record too, that would look at the fill itself)
FILL_TRAFFIC = """
import socket, sys
port, pairs = int(sys.argv[1]), int(sys.argv[2])
srv = socket.socket()
srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port))
srv.listen()
cli = socket.create_connection(("127.0.0.1", port))
conn, _ = srv.accept()
msg = b"f" * 4096
for _ in range(pairs):
    cli.sendall(msg)
    got = 0
    while got < len(msg):
        got += len(conn.recv(len(msg) - got))
print("done", flush=True)
sys.stdin.read()
"""


def test_a_ring_past_its_wakeup_threshold_wakes_the_reader():
    """Data records wake no one below wakeup_fill_percent (the agent drains on its timer);
    past it the reader is woken. A CPU looks at the fill once per wakeup_step bytes it sent,
    so the wake-up comes within a step per CPU past the threshold: a reader asleep with no
    timeout in sight is woken by a writer filling the ring, and finds the threshold's worth
    of records. (Any record sent past the threshold wakes it, another process's exit too:
    on a busy host the wake-up may come from one of those as well.) Also: a read's record
    is stamped with its return, a write's with its entry."""
    require_kernel()
    from otel_ebpf import _fast

    assert _fast.ring is not None, "the compiled ring reader (setup.py build_ext) is needed"
    port = free_port()
    ring = 1 << 20
    tracer = SocketTracer(CaptureSettings(ports=(port,), ring_buffer_bytes=ring,
                                          wakeup_fill_percent=50, capture_max=4096),
                          LibbpfLog())
    try:
        while tracer.ring.poll(0)[0]:  # nothing pending, nothing armed
            pass
        woken: list = []
        waiter = threading.Thread(target=lambda: woken.append(tracer.ring.poll(120_000)))
        waiter.start()
        time.sleep(0.2)  # (if the wake-up came first, it marks the ring ready all the same)
        pairs = 3 * ring // (4 * 4096)  # 3/4 of a ring of data events
        proc = subprocess.Popen([sys.executable, "-c", FILL_TRAFFIC, str(port), str(pairs)],
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "done"
            waiter.join(150)  # the writer still holds its connection open
        finally:
            proc.stdin.close()
            proc.wait(30)
        assert woken, "the reader's poll never returned"
        events, _, rc = woken[0]
        assert rc > 0, "the poll timed out: the fill past the threshold woke no one"
        mine = data(events)
        # woken by the fill: what it found is most of the threshold's worth (4 KiB records)
        assert len(mine) * (4096 + abi.DATA.size + 8) >= ring // 4, len(mine)
        assert {e.direction for e in mine} == {Direction.EGRESS, Direction.INGRESS}
        for e in mine:
            if e.direction == Direction.INGRESS:
                assert e.enter_ns == e.exit_ns
            else:
                assert 0 < e.enter_ns <= e.exit_ns
    finally:
        tracer.close()
