"""The trace-context TCP option (bpf/propagation.bpf.c) between two nodes, as two agents
run it: two network namespaces joined by a veth pair, a cgroup v2 per node, and the capture
object loaded twice, once per node, each copy's sock_ops program attached to its node's
cgroup. A real TCP client (tests/integration/peers/prop_peer.py) in node A's namespace and
cgroup sends requests on one keep-alive connection to a server in node B's; after each
request the test does what A's agent will do: it reads the request's TCP sequence number
from A's capture and queues the request's context. B's capture is the other witness: the
context must arrive once, in B's ring, with the sequence number B's own capture gives the
request's first byte.

Addresses (A's end, B's end) on the veth pair:
    10.210.0.x and fd77::x   trusted by both nodes (the default private ranges)
    198.18.0.x               A does not trust B's address: never written
    198.19.0.x               A trusts B's, B does not trust A's: written, refused at B
A third server, in node B's namespace but in a cgroup with no program (an untraced node),
takes the same requests. A sniffer on B's end of the veth pair (an AF_PACKET socket) shows
the options as they are on the wire.
"""

from __future__ import annotations

import hashlib
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from otel_ebpf.protocols.base import Direction, Role

from otel_ebpf.kernel import abi
from otel_ebpf.kernel.libbpf import LibbpfLog
from otel_ebpf.kernel.propagation import DEFAULT_TRUSTED_NETWORKS, PropagationSettings
from otel_ebpf.kernel.socket_tracer import CaptureSettings, SocketTracer
from tests.integration.peers.prop_peer import log_name, request_bytes
from tests.support.cgroups import PodCgroup, v2_root
from tests.support.processes import stop_process

from .conftest import REPO, require_kernel, require_peer

pytestmark = pytest.mark.kernel

PORT_B, PORT_C = 8080, 8081
TRUSTED = ("10.210.0.1", "10.210.0.2")
TRUSTED_V6 = ("fd77::1", "fd77::2")
UNTRUSTED_DST = ("198.18.0.1", "198.18.0.2")
UNTRUSTED_SRC = ("198.19.0.1", "198.19.0.2")
A_TRUSTED = (*DEFAULT_TRUSTED_NETWORKS, "198.19.0.0/24")  # B keeps the defaults
# (request bytes, response bytes): one request past the MSS (a TSO/GSO segment, which the
# option never rides: its context waits for the next segment), one response many segments
REQUESTS = [(100, 200), (3000, 50), (20000, 1000), (10, 70000), (500, 500)]
WAIT_S = 15.0
TCP_FIN = 0x01


def sh(*argv: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=30)
    if proc.returncode:
        raise RuntimeError(f"{' '.join(argv)}: {proc.stderr.strip()}")


class Node:
    """One node's agent side: its capture object (with the option program) and the events
    drained from its ring so far."""

    def __init__(self, tracer: SocketTracer) -> None:
        self.tracer = tracer
        self.events: list = []

    @property
    def prop(self):
        return self.tracer.propagation

    def poll(self, timeout_ms: int = 50) -> None:
        self.events += self.tracer.poll(timeout_ms)

    def drain(self) -> None:
        while True:
            got = self.tracer.poll(0)
            if not got:
                return
            self.events += got

    def wait(self, find: Callable[[list], object], what: str) -> object:
        deadline = time.monotonic() + WAIT_S
        while True:
            found = find(self.events)
            if found:
                return found
            if time.monotonic() > deadline:
                pytest.fail(f"no {what} after {WAIT_S}s")
            self.poll()

    def conn_key(self, role: Role, match: Callable[[abi.ConnOpen], bool]) -> tuple:
        def find(events):
            opens = [e for e in events if isinstance(e, abi.ConnOpen) and e.role == role
                     and match(e)]
            return opens[-1].key if opens else None
        return self.wait(find, f"{role.name} connection")  # type: ignore[return-value]

    def seq_at(self, key: tuple, direction: Direction, pos: int) -> int:
        """The TCP sequence number this node's capture gives the byte at `pos`, where a
        call's bytes begin."""
        def find(events):
            for e in events:
                if isinstance(e, abi.DataEvent) and e.key == key and \
                        e.direction == direction and e.pos == pos:
                    return e
            return None
        ev = self.wait(find, f"data at {pos} of {key}")
        return ev.tcp_seq  # type: ignore[union-attr]

    def contexts(self, addr: str, port: int) -> list[abi.ContextIn]:
        return [e for e in self.events if isinstance(e, abi.ContextIn)
                and (e.remote_addr, e.remote_port) == (addr, port)]


class Client:
    """The client process of node A, one JSON line per command and per reply."""

    def __init__(self, proc: subprocess.Popen, log: Path) -> None:
        self.proc, self.log = proc, log

    def call(self, **cmd) -> dict:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(json.dumps(cmd) + "\n")
        self.proc.stdin.flush()
        ready, _, _ = select.select([self.proc.stdout], [], [], 30)
        line = self.proc.stdout.readline() if ready else ""
        if not line:
            pytest.fail(f"the client gave no reply to {cmd}:\n{self.log.read_text()[-2000:]}")
        return json.loads(line)


@dataclass
class World:
    a: Node
    b: Node
    client: Client
    dirs: dict[int, Path]  # server port -> where it writes what it read
    wire_log: Path  # the sniffer's: segments from A carrying a kind-253 option

    def wire(self, addr: str, port: int, at_least: int = 0) -> list[list[bytes]]:
        """The kind-253 options of each segment from addr:port seen on B's wire, in order;
        waits until `at_least` options have been seen."""
        return [[bytes.fromhex(o) for o in rec["options"]]
                for rec in self.wire_segments(addr, port, at_least)]

    def wire_segments(self, addr: str, port: int, at_least: int = 0) -> list[dict]:
        """The sniffer's records of the segments from addr:port carrying kind-253 options."""
        deadline = time.monotonic() + WAIT_S
        while True:
            segs = [rec for rec in map(json.loads, self.wire_log.read_text().splitlines())
                    if (rec["src"], rec["sport"]) == (addr, port)]
            if sum(len(rec["options"]) for rec in segs) >= at_least:
                return segs
            if time.monotonic() > deadline:
                pytest.fail(f"{at_least} options from {addr}:{port} not seen on the wire")
            time.sleep(0.05)

    def server_read(self, port: int, addr: str, client_port: int) -> bytes:
        """What the server on `port` read from the connection, once it has seen it end."""
        name = log_name(addr, client_port)
        deadline = time.monotonic() + WAIT_S
        while not (self.dirs[port] / f"{name}.done").exists():
            if time.monotonic() > deadline:
                pytest.fail(f"the server on {port} did not see {addr}:{client_port} end")
            time.sleep(0.05)
        return (self.dirs[port] / f"{name}.bin").read_bytes()


def _start(cgroup: PodCgroup, ns: str, args: list[str], log: Path, **kw) -> subprocess.Popen:
    argv = ["ip", "netns", "exec", ns, sys.executable, "-m",
            "tests.integration.peers.prop_peer", *args]
    return subprocess.Popen(cgroup.wrap(argv), cwd=REPO, stderr=log.open("w"), text=True,
                            stdout=subprocess.PIPE, **kw)


def _wait_line(proc: subprocess.Popen, log: Path, text: str) -> None:
    ready, _, _ = select.select([proc.stdout], [], [], 30)
    line = proc.stdout.readline() if ready else ""  # type: ignore[union-attr]
    if text not in line:
        pytest.fail(f"expected {text!r} from a peer, got {line!r}:\n{log.read_text()[-2000:]}")


@pytest.fixture(scope="module")
def world(tmp_path_factory) -> Iterator[World]:
    require_kernel()
    require_peer(None if shutil.which("ip") else "the `ip` command (iproute2) is needed")
    tmp = tmp_path_factory.mktemp("tcp-option")
    tag = str(os.getpid())
    ns_a, ns_b = f"otelprop-a-{tag}", f"otelprop-b-{tag}"
    veth_a, veth_b = f"opa{tag}"[:15], f"opb{tag}"[:15]
    root = v2_root()
    cgroups: list[PodCgroup] = []
    procs: list[subprocess.Popen] = []
    tracers: list[SocketTracer] = []
    namespaces: list[str] = []
    try:
        for ns in (ns_a, ns_b):
            sh("ip", "netns", "add", ns)
            namespaces.append(ns)
        sh("ip", "link", "add", veth_a, "netns", ns_a, "type", "veth", "peer", "name", veth_b,
           "netns", ns_b)
        for ns, dev, end in ((ns_a, veth_a, 0), (ns_b, veth_b, 1)):
            for pair, plen in ((TRUSTED, 24), (UNTRUSTED_DST, 24), (UNTRUSTED_SRC, 24)):
                sh("ip", "-n", ns, "addr", "add", f"{pair[end]}/{plen}", "dev", dev)
            sh("ip", "-n", ns, "addr", "add", f"{TRUSTED_V6[end]}/64", "dev", dev, "nodad")
            sh("ip", "-n", ns, "link", "set", dev, "up")
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        cg_a, cg_b, cg_c = (PodCgroup(root, f"otel-prop-{tag}-{n}") for n in "abc")
        cgroups += [cg_a, cg_b, cg_c]
        dirs = {PORT_B: tmp / "b", PORT_C: tmp / "c"}
        for port, cg in ((PORT_B, cg_b), (PORT_C, cg_c)):
            dirs[port].mkdir()
            log = tmp / f"server-{port}.log"
            procs.append(_start(cg, ns_b, ["server", str(port), str(dirs[port])], log))
            _wait_line(procs[-1], log, "listening")
        server_b = procs[0]
        wire_log, sniff_log = tmp / "wire.jsonl", tmp / "sniff.log"
        wire_log.touch()
        procs.append(subprocess.Popen(
            ["ip", "netns", "exec", ns_b, sys.executable, "-m",
             "tests.integration.peers.prop_peer", "sniff", veth_b, f"{PORT_B},{PORT_C}",
             str(wire_log)], cwd=REPO, stdout=subprocess.PIPE, stderr=sniff_log.open("w"),
            text=True))
        _wait_line(procs[-1], sniff_log, "sniffing")
        client_log = tmp / "client.log"
        client = _start(cg_a, ns_a, ["client"], client_log, stdin=subprocess.PIPE)
        procs.append(client)
        libbpf_log = LibbpfLog()
        # node B's agent: defaults (B does not trust 198.19.0.0/24); node A's: one more net
        tracers.append(SocketTracer(CaptureSettings(
            pids=(server_b.pid,), propagation=PropagationSettings(cgroup=str(cg_b.path))),
            libbpf_log))
        tracers.append(SocketTracer(CaptureSettings(
            pids=(client.pid,), propagation=PropagationSettings(A_TRUSTED, str(cg_a.path))),
            libbpf_log))
        yield World(a=Node(tracers[1]), b=Node(tracers[0]), client=Client(client, client_log),
                    dirs=dirs, wire_log=wire_log)
    finally:
        for proc in reversed(procs):
            if proc.stdin is not None:
                proc.stdin.close()
            stop_process(proc, grace_s=5)
        for tracer in tracers:
            tracer.close()
        for ns in namespaces:  # the veth pair goes with them
            subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        for cg in cgroups:
            cg.remove()


@dataclass
class Queued:
    offset: int  # stream position of the request's first byte
    seq: int  # its TCP sequence number, from A's capture
    trace_id: bytes
    sampled: bool


@dataclass
class Exchange:
    local: tuple[str, int]  # the client's end, as A sees it
    remote: tuple[str, int]
    responses: list[str]  # sha256 of each response the client read
    queued: list[Queued]
    read: bytes  # what the server read, all of it


def plain(addr: str) -> str:
    return addr.removeprefix("::ffff:")


def on_the_wire(q: Queued) -> bytes:
    """The option as docs/correlation.md describes it: kind 253, length 25, ExID 0x07E1,
    seq (network order), flags, trace id."""
    return (bytes([253, 25, 0x07, 0xE1]) + q.seq.to_bytes(4, "big")
            + bytes([abi.PROP_F_SAMPLED if q.sampled else 0]) + q.trace_id)


def expected_bytes(seed0: int = 0) -> bytes:
    return b"".join(request_bytes(size, resp, seed0 + i)
                    for i, (size, resp) in enumerate(REQUESTS))


def exchange(w: World, host: str, port: int, contexts: bool, seed0: int = 0,
             tag: str = "") -> Exchange:
    """REQUESTS on one connection to host:port; with `contexts`, each request's context is
    queued once its response is in (A's agent decides the trace after the fact)."""
    conn = w.client.call(op="connect", host=host, port=port)
    # as the socket names them (a dual-stack socket: ::ffff:a.b.c.d), and as the capture
    # and the records do (IPv4 as itself)
    as_socket = (*conn["local"], *conn["remote"])
    local, remote = (plain(conn["local"][0]), conn["local"][1]), (plain(conn["remote"][0]),
                                                                  conn["remote"][1])
    key = w.a.conn_key(Role.CLIENT, lambda e: (e.local_port, e.remote_addr, e.remote_port)
                       == (local[1], remote[0], remote[1]))
    queued, responses = [], []
    for i, (size, resp) in enumerate(REQUESTS):
        r = w.client.call(op="request", size=size, response=resp, seed=seed0 + i)
        responses.append(r["response"])
        if not contexts:
            continue
        # the context queued after the last response left on this request's segments or
        # the ACK of its response: nothing waits any more
        assert w.a.prop.pending(*as_socket) == [], f"request {i}"
        q = Queued(r["offset"], w.a.seq_at(key, Direction.EGRESS, r["offset"]),
                   hashlib.sha256(f"{tag}{host}{i}".encode()).digest()[:16], i % 2 == 0)
        queued.append(q)
        assert w.a.prop.send(*as_socket, q.seq, q.trace_id, q.sampled)
    w.client.call(op="close")  # the last context leaves with the FIN at the latest
    # the server's own view: its address for the client (IPv4 as itself, not v4-mapped)
    read = w.server_read(port, local[0], local[1])
    return Exchange(local, remote, responses, queued, read)


@pytest.mark.parametrize("pair, host", [(TRUSTED, TRUSTED[1]), (TRUSTED_V6, TRUSTED_V6[1]),
                                        (TRUSTED, "::ffff:" + TRUSTED[1])],
                         ids=["ipv4", "ipv6", "ipv4-on-an-ipv6-socket"])
def test_each_context_arrives_once_with_its_sequence_number(world, pair, host):
    """Both ends' sockets of every kind: IPv4, IPv6, and IPv4 on an IPv6 socket (the
    client's here; the server's socket is dual-stack in every case)."""
    a0, b0 = world.a.prop.counters(), world.b.prop.counters()
    ex = exchange(world, host, PORT_B, contexts=True, tag="once")
    got = world.b.wait(lambda _: len(world.b.contexts(*ex.local)) >= len(ex.queued) or None,
                       "context for every request")
    world.b.drain()
    got = world.b.contexts(*ex.local)
    assert [e.trace_id for e in got] == [q.trace_id for q in ex.queued]  # once each, in order
    server = world.b.conn_key(Role.SERVER, lambda e: (e.remote_addr, e.remote_port) == ex.local)
    family = socket.AF_INET6 if ":" in pair[0] else socket.AF_INET
    for e, q in zip(got, ex.queued, strict=True):
        # the request's first byte as the server's own capture numbers it
        assert e.seq == q.seq == world.b.seq_at(server, Direction.INGRESS, q.offset)
        assert e.sampled == q.sampled and e.flags == (abi.PROP_F_SAMPLED if q.sampled else 0)
        # the connection as the server's socket sees it (its IPv4 socket is dual-stack)
        assert (e.family, e.local_addr, e.local_port, e.remote_addr, e.remote_port) == (
            family, pair[1], PORT_B, pair[0], ex.local[1])
    a1, b1 = world.a.prop.counters(), world.b.prop.counters()
    n = len(ex.queued)
    assert a1["prop_written"] - a0["prop_written"] == n
    assert b1["prop_received"] - b0["prop_received"] == n
    assert b1["prop_refused"] == b0["prop_refused"]
    assert world.a.prop.pending(*ex.local, *ex.remote) == []
    # the 20 kB request went out as one TSO/GSO segment without the context it found
    # waiting: counted, then sent on the next segment
    assert a1["prop_no_room"] > a0["prop_no_room"]
    assert ex.read == expected_bytes()
    # on the wire: each option as documented, one per segment
    segs = world.wire(*ex.local, at_least=n)
    assert [len(opts) for opts in segs] == [1] * n
    assert [opts[0] for opts in segs] == [on_the_wire(q) for q in ex.queued]
    # the last was queued on a quiet connection, acknowledged to the end: the client's
    # next segment, its FIN, carried it
    assert world.wire_segments(*ex.local)[-1]["flags"] & TCP_FIN


def test_pending_contexts_leave_oldest_first_one_per_segment(world):
    """Four requests in flight (HTTP/2): four contexts wait at once, a fifth is refused;
    each segment carries one, the oldest first."""
    a0 = world.a.prop.counters()
    conn = world.client.call(op="connect", host=TRUSTED[1], port=PORT_B)
    local, remote = tuple(conn["local"]), tuple(conn["remote"])
    key = world.a.conn_key(Role.CLIENT, lambda e: (e.local_port, e.remote_port)
                           == (local[1], remote[1]) and e.remote_addr == remote[0])
    offsets = [world.client.call(op="request", size=100, response=100, seed=i)["offset"]
               for i in range(4)]
    # the connection is quiet: queue four contexts, oldest first
    queued = [Queued(off, world.a.seq_at(key, Direction.EGRESS, off),
                     hashlib.sha256(f"fifo{i}".encode()).digest()[:16], True)
              for i, off in enumerate(offsets)]
    for q in queued:
        assert world.a.prop.send(*local, *remote, q.seq, q.trace_id, q.sampled)
    assert not world.a.prop.send(*local, *remote, 1, bytes(16), True)  # no fifth slot
    assert world.a.prop.counters()["full"] == a0["full"] + 1
    assert [s.trace_id for s in world.a.prop.pending(*local, *remote)] == \
        [q.trace_id for q in queued]
    # one small request: its segment and at most one ACK of its one-segment response
    world.client.call(op="request", size=100, response=100, seed=4)
    left = world.a.prop.pending(*local, *remote)
    assert 2 <= len(left) <= 3, left
    assert [s.trace_id for s in left] == [q.trace_id for q in queued[4 - len(left):]]
    for i in range(5, 13):
        if not world.a.prop.pending(*local, *remote):
            break
        world.client.call(op="request", size=100, response=100, seed=i)
    assert world.a.prop.pending(*local, *remote) == []
    world.client.call(op="close")
    world.server_read(PORT_B, local[0], local[1])
    world.b.wait(lambda _: len(world.b.contexts(*local)) >= 4 or None, "four contexts")
    world.b.drain()
    got = world.b.contexts(*local)
    assert [e.trace_id for e in got] == [q.trace_id for q in queued]
    server = world.b.conn_key(Role.SERVER, lambda e: (e.remote_addr, e.remote_port) == local)
    assert [e.seq for e in got] == [world.b.seq_at(server, Direction.INGRESS, q.offset)
                                    for q in queued]
    assert world.a.prop.counters()["prop_written"] - a0["prop_written"] == 4
    assert [opts for opts in world.wire(*local, at_least=4)] == \
        [[on_the_wire(q)] for q in queued]


def test_untrusted_destination_is_never_written(world):
    a0, b0 = world.a.prop.counters(), world.b.prop.counters()
    conn = world.client.call(op="connect", host=UNTRUSTED_DST[1], port=PORT_B)
    local, remote = tuple(conn["local"]), tuple(conn["remote"])
    # the kernel saw the connection made to an address A does not trust
    assert world.a.prop.counters()["prop_untrusted_dst"] == a0["prop_untrusted_dst"] + 1
    key = world.a.conn_key(Role.CLIENT, lambda e: (e.local_port, e.remote_addr)
                           == (local[1], remote[0]))
    r = world.client.call(op="request", size=100, response=100, seed=0)
    seq = world.a.seq_at(key, Direction.EGRESS, r["offset"])
    assert not world.a.prop.send(*local, *remote, seq, b"u" * 16, True)
    assert world.a.prop.counters()["untrusted"] == a0["untrusted"] + 1
    # the kernel on its own: a context put straight into the map for this connection is
    # never taken, its segments are not even shown to the program
    prop_key = abi.pack_prop_key(*local, *remote)
    slot = abi.PropSlot(b"k" * 16, seq, 1, abi.PROP_F_SAMPLED)
    world.a.prop.out.update(prop_key, abi.pack_prop_pending([slot] + [abi.FREE_SLOT] * 3))
    try:
        for i in range(1, 4):
            world.client.call(op="request", size=100, response=2000, seed=i)
        assert world.a.prop.pending(*local, *remote) == [slot]
        world.client.call(op="close")
        world.server_read(PORT_B, local[0], local[1])
        world.b.drain()
        assert world.b.contexts(*local) == []
        assert world.wire(*local) == []
        a1, b1 = world.a.prop.counters(), world.b.prop.counters()
        assert a1["prop_written"] == a0["prop_written"]
        assert (b1["prop_received"], b1["prop_refused"]) == (b0["prop_received"],
                                                             b0["prop_refused"])
    finally:
        world.a.prop.out.delete(prop_key)


def test_untrusted_source_is_refused(world):
    a0, b0 = world.a.prop.counters(), world.b.prop.counters()
    ex = exchange(world, UNTRUSTED_SRC[1], PORT_B, contexts=True, tag="refused")
    n = len(ex.queued)
    assert world.a.prop.counters()["prop_written"] - a0["prop_written"] == n  # A sent them
    deadline = time.monotonic() + WAIT_S
    while world.b.prop.counters()["prop_refused"] - b0["prop_refused"] < n:
        assert time.monotonic() < deadline, "B did not refuse every option"
        time.sleep(0.05)
    world.b.drain()
    assert world.b.contexts(*ex.local) == []
    b1 = world.b.prop.counters()
    assert b1["prop_refused"] - b0["prop_refused"] == n
    assert b1["prop_received"] == b0["prop_received"]
    assert ex.read == expected_bytes()


def test_payload_unchanged_and_an_untraced_server_answers_the_same(world):
    """The same requests with the option, without it, and to a server whose node runs no
    program (the option reaches it, its TCP ignores it): the servers read the same bytes,
    the client reads the same responses."""
    a0 = world.a.prop.counters()
    with_option = exchange(world, TRUSTED[1], PORT_B, contexts=True, tag="same")
    without = exchange(world, UNTRUSTED_DST[1], PORT_B, contexts=False)
    a1 = world.a.prop.counters()
    untraced = exchange(world, TRUSTED[1], PORT_C, contexts=True, tag="untraced")
    a2 = world.a.prop.counters()
    n = len(REQUESTS)
    assert a1["prop_written"] - a0["prop_written"] == n
    assert a2["prop_written"] - a1["prop_written"] == n  # on the untraced server's segments
    assert with_option.read == without.read == untraced.read == expected_bytes()
    assert with_option.responses == without.responses == untraced.responses
    # the untraced server's segments did carry the options
    assert [opts for opts in world.wire(*untraced.local, at_least=n)] == \
        [[on_the_wire(q)] for q in untraced.queued]
    assert world.wire(*without.local) == []
