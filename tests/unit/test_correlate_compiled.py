"""The correlator's compiled step (otel_ebpf/_fast/correlate.c) against its Python reference
(Correlator with compiled=False): drawn traffic of many processes, connections and
requests, fed to both in the same batches with the same random state, must give the same
spans (trace, span and parent IDs byte for byte, attributes in order, links), the same
counters and the same tables after every batch.

The traffic crosses every line the C step draws: both ends seen (either order) or one,
keep-alive and several requests open on a connection, several server requests open in a
process (thread, sole-request and ambiguous parents), asyncio tasks born from reads,
traceparent and x-request-id carriers (valid and not), datagram and pipe connections,
unknown roles, unknown sequence numbers, message spans, spans of requests never seen,
HTTP/1 frames (a Frame subclass), clients through NAT (their conntrack view, valid and
not), the waiting window's expiry and table evictions."""

from __future__ import annotations

import random

import pytest

from otel_ebpf import _fast
from otel_ebpf.conntrack.table import LastRead
from otel_ebpf.correlate.joiner import Correlator
from otel_ebpf.kernel.abi import TaskNew
from otel_ebpf.protocols.base import ConnInfo, Direction, Frame, NeutralSpan, Role, SpanKind
from otel_ebpf.protocols.http1.parse import HTTPMessage
from otel_ebpf.telemetry import Stats

pytestmark = pytest.mark.skipif(_fast.correlate is None,
                                reason="no compiled correlator (OTEL_EBPF_PURE_PYTHON=1)")

MS = 1_000_000
IN, OUT = Direction.INGRESS, Direction.EGRESS


def traffic(seed: int) -> list[tuple[str, list, int]]:
    """Batches: ("observe", [(conn, frame) or (TaskNew, LastRead | None)], now) and
    ("spans", [NeutralSpan], now), in the order a running agent would give them."""
    rng = random.Random(seed)
    t = [1_000]
    now = 0

    def tick(n: int = 1000) -> int:
        t[0] += rng.randint(1, n)
        return t[0]

    pairs = []
    for n in range(rng.randint(2, 10)):
        cpid, spid = rng.choice([1, 2, 3]), rng.choice([2, 3, 4])
        cport, sport = 5000 + n, rng.choice([80, 81])
        transport, family = "stream", rng.choice(["ipv4"] * 8 + ["ipv6", "unix"])
        if rng.random() < 0.05:
            transport = "datagram"
        if rng.random() < 0.05:
            family = "pipe"
        remote = 0 if rng.random() < 0.05 else 1
        crole = Role.UNKNOWN if rng.random() < 0.05 else Role.CLIENT
        # through a Service: the client's socket names the VIP, conntrack the server (and
        # with an SNAT, another client port); rarely a malformed answer (the reference's)
        through = rng.random()
        seen_port = cport + 1000 if through < 0.1 else cport
        nat = None
        if through < 0.25:
            nat = ("10.0.0.1", seen_port, "10.0.0.2", sport)
            if through < 0.03:
                nat = list(nat)
        client = ConnInfo(pid=cpid, fd=10 + n, generation=1, role=crole, transport=transport,
                          family=family, local_addr="10.0.0.1", local_port=cport,
                          remote_addr="10.0.0.2" if nat is None else "10.96.0.1",
                          remote_port=(sport if nat is None else 80) * remote, nat=nat)
        server = ConnInfo(pid=spid, fd=20 + n, generation=1, role=Role.SERVER,
                          transport=transport, family=family, local_addr="10.0.0.2",
                          local_port=sport, remote_addr="10.0.0.1",
                          remote_port=seen_port * remote)
        seen = rng.choice(["both", "both", "both", "client", "server"])
        pairs.append((client, server, seen, [0, 0], rng.randrange(1 << 32)))

    items: list = []  # (time, kind, payload) to be batched in time order
    for _ in range(rng.randint(5, 60)):
        client, server, seen, pos, seq = rng.choice(pairs)
        tid, task = rng.choice([100, 101, 102]), rng.choice([0, 0, 0, 7, 8])
        carrier = {}
        if rng.random() < 0.15:
            carrier["traceparent"] = rng.choice([
                "00-" + "ab" * 16 + "-" + "cd" * 8 + "-01", "00-zz-bad", "ff-" + "1" * 32])
        if rng.random() < 0.15:
            carrier["x-request-id"] = rng.choice(["r1", "r2", "r3"])
        tcp_seq = None if rng.random() < 0.05 else seq + pos[0]
        kind = HTTPMessage if rng.random() < 0.5 else Frame
        start = tick()
        size = rng.randint(10, 200)

        def made(direction, start, at, tid=tid, task=task, carrier=carrier, tcp_seq=tcp_seq,
                 kind=kind):
            f = kind(direction=direction, start_ns=start, end_ns=start + rng.randint(0, 50),
                     stream_pos=at, tcp_seq=tcp_seq, tid=tid, task=task,
                     carrier=dict(carrier))
            if rng.random() < 0.1:
                f.exchange = rng.randint(0, 3)
            return f

        req_pos, resp_pos = pos[0], pos[1]
        pos[0] += size
        pos[1] += size
        if seen in ("both", "client"):
            items.append((start, "observe", (client, made(OUT, start, req_pos))))
        if seen in ("both", "server"):
            s_start = start + rng.randint(-500, 3000)
            items.append((s_start, "observe", (server, made(IN, s_start, req_pos))))
            if rng.random() < 0.3:  # a task born from the read that brought the request
                read = LastRead((server.pid, server.fd, server.generation), req_pos,
                                req_pos + size, s_start + 10, rng.choice([0, 5]))
                birth = TaskNew(pid=server.pid, tid=tid, ts_ns=s_start + 20,
                                task=rng.choice([7, 8, 9]), parent=rng.choice([0, 5, 7]))
                items.append((s_start + 20, "observe", (birth, rng.choice([read, None]))))
            # an outbound call made while handling it (or just after)
            if rng.random() < 0.4:
                other = rng.choice(pairs)[0]
                if other.pid == server.pid:
                    items.append((s_start + 100, "observe",
                                  (other, made(OUT, s_start + 100, 10**9 + t[0]))))
            r_start = s_start + rng.randint(200, 5000)
            if rng.random() < 0.9:
                items.append((r_start, "observe", (server, made(OUT, r_start, resp_pos))))
            if rng.random() < 0.9:
                items.append((r_start + 10, "span", (server, req_pos)))
        if seen in ("both", "client"):
            c_end = start + rng.randint(1000, 9000)
            if rng.random() < 0.9:
                items.append((c_end, "observe", (client, made(IN, c_end, resp_pos))))
            if rng.random() < 0.9:
                items.append((c_end + 10, "span", (client, req_pos)))
        if rng.random() < 0.05:
            items.append((start, "message", (client, None)))
        if rng.random() < 0.05:
            items.append((start, "span", (client, None)))
    items.sort(key=lambda x: x[0])

    batches: list[tuple[str, list, int]] = []
    i = 0
    while i < len(items):
        n = rng.randint(1, 12)
        chunk = items[i:i + n]
        i += n
        now += rng.randint(0, 150 * MS)
        observed = [p for _, k, p in chunk if k == "observe"]
        spans = []
        for _, k, (c, at) in chunk:
            if k == "observe":
                continue
            sk = SpanKind.CLIENT if c.role != Role.SERVER else SpanKind.SERVER
            s = NeutralSpan(name="GET", kind=sk, start_ns=0, end_ns=1, conn=c, request_pos=at)
            if k == "message":
                s.message_id = "m1"
            spans.append(s)
        batches.append(("observe", observed, now))
        batches.append(("spans", spans, now))
    return batches


def state(c: Correlator) -> dict:
    def ids(d):
        return [(k, v.span_id) for k, v in d.items()]

    return {
        "requests": ids(c.requests), "clients": ids(c.clients), "waiting": ids(c.waiting),
        "open": {pid: sorted(r.span_id for r in d.values()) for pid, d in c.open.items()},
        "unanswered": {k: [r.span_id for r in v] for k, v in c.unanswered.items()},
        "first_by_id": ids(c.first_by_id), "task_reads": list(c.task_reads.items()),
        "held": [(s.request_pos, r.span_id) for s, r in c.held], "decided": dict(c.decided),
    }


def spans_of(seed: int, compiled: bool, handed: dict | None = None
             ) -> tuple[list, list, dict]:
    """The spans, the tables after each batch and the counters; `handed` counts what the
    compiled step handed to the reference's methods, and what it was given."""
    stats = Stats()
    c = Correlator(stats, window_ns=100 * MS, max_requests=random.Random(seed).choice(
        [8, 30, 1000]), compiled=compiled)
    assert (c._compiled is not None) is compiled
    if handed is not None:
        for name in ("_frame", "_span"):
            def counted(*args, _name=name, _method=getattr(c, name)):
                handed[_name] = handed.get(_name, 0) + 1
                return _method(*args)
            setattr(c, name, counted)
    random.seed(seed)  # both runs draw the same IDs
    out, states = [], []
    for what, batch, now in traffic(seed):
        # fresh objects per run: the correlator writes into frames' requests and spans
        if what == "observe":
            if handed is not None:
                handed["frames"] = handed.get("frames", 0) + sum(
                    type(first) is ConnInfo for first, _ in batch)
            c.observe(list(batch), now)
        else:
            if handed is not None:
                handed["spans"] = handed.get("spans", 0) + len(batch)
            out += c.on_spans(batch, now)
        states.append(state(c))
    out += c.flush()
    return [span_data(s) for s in out], states, stats.snapshot()


def span_data(s: NeutralSpan) -> tuple:
    return (s.conn.pid, s.conn.fd, s.request_pos, s.trace_id, s.span_id, s.parent_span_id,
            list(s.attributes.items()),
            [(link.trace_id, link.span_id, dict(link.attributes)) for link in s.links])


@pytest.mark.parametrize("seed", range(300))
def test_compiled_correlator_gives_the_reference_spans(seed):
    compiled = spans_of(seed, True)
    reference = spans_of(seed, False)
    assert compiled[0] == reference[0]
    assert compiled[1] == reference[1]
    assert compiled[2] == reference[2]


def test_the_drawn_traffic_reaches_every_evidence():
    """The seeds above are not vacuous: every kind of evidence and every fallback shows."""
    seen: dict = {}
    handed: dict = {}
    for seed in range(300):
        spans, _, stats = spans_of(seed, True, handed)
        for s in spans:
            for k, v in s[6]:
                if k == "otel_ebpf.correlation":
                    seen[v] = seen.get(v, 0) + 1
            if s[7]:
                seen["link"] = seen.get("link", 0) + 1
        for (name, labels), n in stats.items():
            if name in ("correlation.ambiguous", "correlation.evicted"):
                seen[name] = seen.get(name, 0) + n
    for kind in ("wire", "thread", "sole_request", "traceparent", "derived", "message",
                 "task", "ambiguous", "link", "correlation.ambiguous", "correlation.evicted"):
        assert seen.get(kind, 0) > 0, (kind, seen)
    # the C step took most frames and spans itself, and handed some to the reference
    assert 0 < handed["_frame"] < handed["frames"] / 2, handed
    assert 0 < handed["_span"] < handed["spans"] / 2, handed


@pytest.mark.parametrize("nat", [("10.0.0.1", 6000, "10.0.0.2", 80),
                                 ["10.0.0.1", 6000, "10.0.0.2", 80]])
def test_a_client_through_nat_is_keyed_as_its_server_sees_it(monkeypatch, nat):
    """The C step keys a client frame by conntrack's view itself when it is a 4-tuple, and
    hands any other value to the reference: either way, the key the reference makes."""
    client = ConnInfo(pid=1, fd=10, generation=1, role=Role.CLIENT, transport="stream",
                      family="ipv4", local_addr="10.0.0.1", local_port=5000,
                      remote_addr="10.96.0.1", remote_port=80, nat=nat)
    handed = []
    original = Correlator._frame
    monkeypatch.setattr(Correlator, "_frame",
                        lambda self, *a: (handed.append(a[0]), original(self, *a))[1])
    keys = []
    for compiled in (True, False):
        c = Correlator(Stats(), compiled=compiled)
        c.observe([(client, Frame(direction=OUT, start_ns=10, end_ns=11, tcp_seq=77))],
                  now_ns=0)
        keys.append(list(c.clients))
    assert keys[0] == keys[1] == [("10.0.0.1", 6000, "10.0.0.2", 80, 77)]
    # the compiled run handed it over only when the view was not a tuple; the reference run
    # is the Python loop itself
    assert len(handed) == (1 if isinstance(nat, list) else 0) + 1
