"""Recorded traffic for the span differential test (tests/unit/test_span_golden.py):
deterministic random kernel events over many HTTP/1 connections, the whole path from
events to correlated spans, and each span as plain data (IDs replaced by the order they
first appear in, so that only which span shares which ID counts, not the random draw).

    .venv/bin/python -m tests.unit.span_traffic | gzip -9n > tests/unit/data/spans_golden.json.gz

writes what the code of the day makes of it (run it only to record a change meant to
change spans)."""

from __future__ import annotations

import dataclasses
import enum
import json
import random
import sys

from otel_ebpf.protocols.base import Direction, Measurement, Measurements, Role
from otel_ebpf.protocols.registry import Registry

from otel_ebpf.conntrack.table import ConnTable
from otel_ebpf.correlate import Correlator, assign_ids
from otel_ebpf.kernel import abi
from otel_ebpf.telemetry import Stats

SEEDS = range(40)

CHAT = (b'{"model":"gpt-4o","messages":[{"role":"user","content":"hi"}],"max_tokens":5}')
CHAT_ANSWER = (b'{"id":"c1","object":"chat.completion","model":"gpt-4o-2024","choices":[{"index":0,'
               b'"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],'
               b'"usage":{"prompt_tokens":3,"completion_tokens":1,"total_tokens":4}}')
QUERY = b'{"query_embeddings":[[0.1,0.2]],"n_results":3}'
QUERY_ANSWER = b'{"ids":[["a","b"]],"distances":[[0.1,0.2]]}'


def _len(body: bytes) -> bytes:
    return b"Content-Length: %d\r\n\r\n" % len(body) + body


def _chunked(body: bytes, cut: int) -> bytes:
    parts = [body[i : i + cut] for i in range(0, len(body), cut)]
    return b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in parts) + b"0\r\n\r\n"


EXCHANGES = [
    (b"GET /items/42?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: python-requests/2.31"
     b"\r\nAccept: */*\r\nConnection: keep-alive\r\n\r\n",
     b"HTTP/1.1 200 OK\r\ndate: Wed, 02 Dec 2026 10:00:00 GMT\r\nserver: uvicorn\r\n"
     b"content-type: application/json\r\n" + _len(b'{"id":"42","ok":true}')),
    (b"GET /a?b=c&token=s3cret&Signature=x HTTP/1.1\r\nHost: h:1\r\nUser-Agent: t\r\n"
     b"X-Request-Id: 7\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\n" + _len(b"ok")),
    (b"POST /p HTTP/1.1\r\nHost: h\r\n" + _len(b"hello"),
     b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"),
    (b"GET /c HTTP/1.1\r\nHost: h\r\ntraceparent: 00-0af7651916cd43dd8448eb211c80319c-"
     b"b7ad6b7169203331-01\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
    (b"HEAD /h HTTP/1.0\r\n\r\n", b"HTTP/1.0 200 OK\r\nContent-Length: 99\r\n\r\n"),
    (b"DELETE /x HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n", b"HTTP/1.1 404 Not Found\r\n\r\n"),
    (b"\r\nGET /lead HTTP/1.1\r\nHost: h\r\n\r\n",
     b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"),
    (b"PURGE /cache HTTP/1.1\r\nHost: [::1]:8080\r\n\r\n", b"HTTP/1.1 200 OK\r\n" + _len(b"")),
    (b"GET http://user:pw@proxy.example/x?sig=1 HTTP/1.1\r\nHost: proxy.example\r\n\r\n",
     b"HTTP/1.1 302 Found\r\nLocation: /y\r\n" + _len(b"moved")),
    (b"OPTIONS * HTTP/1.1\r\nHost: h\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n"),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: api.openai.com\r\n"
     b"Content-Type: application/json\r\n" + _len(CHAT),
     b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + _len(CHAT_ANSWER)),
    (b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost:8000\r\n"
     b"Content-Type: application/json\r\n" + _len(CHAT),
     b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"
     + _chunked(CHAT_ANSWER, 40)),
    (b"POST /api/v1/collections/5f0c/query HTTP/1.1\r\nHost: chroma:8000\r\n"
     b"Content-Type: application/json\r\n" + _len(QUERY),
     b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n" + _len(QUERY_ANSWER)),
    (b"GET /collections/docs/points HTTP/1.1\r\nHost: qdrant\r\n\r\n",
     b"HTTP/1.1 404 Not Found\r\nContent-Length: 2\r\n\r\nno"),
    (b"POST /upload HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n"
     + _chunked(b"x" * 300, 100),
     b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"),
    (b"GET /old HTTP/1.0\r\n\r\n", b"HTTP/1.0 200 OK\r\nContent-Type: text/html\r\n\r\n<html>"),
    (b"GET /big HTTP/1.1\r\nHost: h\r\n\r\n",
     b"HTTP/1.1 200 OK\r\n" + _len(b"y" * 5000)),
    (b"GET /ws HTTP/1.1\r\nHost: h\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n",
     b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
     b"\x81\x05hello"),
    (b"GET /notes/x%20y HTTP/1.1\r\nHost: h\r\nUser-Agent: curl/8\r\ncontent-length: 0\r\n\r\n",
     b"HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\n" + _len(b"busy")),
    (b"GARBAGE\r\n\r\n", b"HTTP/1.1 400 Bad Request\r\n" + _len(b"")),
]
UNTIL_CLOSE = {15, 17}  # answers the close delimits (or a tunnel): last of a connection


def connection_events(rng: random.Random, n: int, t: list[int]) -> list:
    """Both ends (or one) of one keep-alive connection, its messages cut into syscalls,
    some captures cut short, some events lost, some heads split from their bodies."""
    # a client in a server's process: its outbound calls may be made for that server's requests
    pid_c, pid_s = rng.choice([100, 101, 200, 201]), 200 + n % 2
    port = 40000 + n
    key_c, key_s = (pid_c, 5 + n, n + 1), (pid_s, 900 + n, n + 1)
    ends = rng.choice(["both", "both", "both", "client", "server"])
    keys = {Role.CLIENT: key_c, Role.SERVER: key_s}
    roles = {"both": [Role.CLIENT, Role.SERVER], "client": [Role.CLIENT],
             "server": [Role.SERVER]}[ends]
    out: list = []
    opened = rng.random() < 0.9
    for role in roles:
        local, remote = (port, 8000) if role == Role.CLIENT else (8000, port)
        if opened:
            out.append(abi.ConnOpen(key=keys[role], ts_ns=t[0], tid=keys[role][0], role=role,
                                    flags=abi.CONN_F_STREAM | abi.CONN_F_TCP, family=2,
                                    local_addr="127.0.0.1", local_port=local,
                                    remote_addr="127.0.0.1", remote_port=remote,
                                    comm="python"))
    pos = {(r, d): 0 for r in roles for d in Direction}
    count = rng.randint(1, 6)
    picks = [rng.randrange(len(EXCHANGES)) for _ in range(count)]
    capture = rng.choice([4096, 4096, 256, 64])
    loss = rng.choice([0.0, 0.0, 0.0, 0.05])
    for i, pick in enumerate(picks):
        if pick in UNTIL_CLOSE and i != len(picks) - 1:
            pick = 0
        request, response = EXCHANGES[pick]
        for direction_of, payload in ((Role.CLIENT, request), (Role.SERVER, response)):
            for role in roles:
                direction = Direction.EGRESS if role == direction_of else Direction.INGRESS
                data = payload
                splits = rng.choice([[], [], [7], [1, 40], [60, 13, 200]])
                k = 0
                while data:
                    cut = splits[k % len(splits)] if splits else len(data)
                    piece, data, k = data[:cut], data[cut:], k + 1
                    t[0] += rng.randint(1, 3000)
                    p = pos[(role, direction)]
                    pos[(role, direction)] += len(piece)
                    if rng.random() < loss:
                        continue  # lost: the next event shows a gap
                    captured, tail = piece[:capture], b""
                    if len(piece) > capture and rng.random() < 0.5:
                        tail = piece[-16:]
                    key = keys[role]
                    tid = key[0] * 10 + rng.randint(0, 1)
                    out.append(abi.DataEvent(
                        key=key, tid=tid, enter_ns=t[0], exit_ns=t[0] + rng.randint(0, 900),
                        direction=direction, pos=p, msg_len=len(piece),
                        tcp_seq=(1000 * n + p + (0 if direction_of == Role.CLIENT else 77))
                        & 0xFFFFFFFF, payload=captured, peer=None,
                        task=rng.choice([0, 0, 0xABC0 + n]), tail=tail))
                    if role == Role.SERVER and direction == Direction.INGRESS and k == 1 \
                            and rng.random() < 0.3:
                        out.append(abi.TaskNew(pid=key[0], tid=tid, ts_ns=t[0] + 1000,
                                               task=0xABC0 + n, parent=0))
    if rng.random() < 0.8:
        t[0] += 5000
        out += [abi.ConnClose(key=keys[r], ts_ns=t[0], bytes_sent=0, bytes_recv=0) for r in roles]
    return out


def traffic(seed: int) -> list:
    """Several connections, their events interleaved as several CPUs would send them."""
    rng = random.Random(seed)
    t = [10_000]
    conns = [connection_events(rng, seed * 16 + n, t) for n in range(rng.randint(1, 8))]
    out: list = []
    while conns:
        c = rng.choice(conns)
        take = rng.randint(1, 4)
        out += c[:take]
        del c[:take]
        conns = [c for c in conns if c]
    return out


def spans_of(events: list) -> list:
    stats = Stats()
    registry = Registry.from_config(["http1", "http2", "rtps", "llm", "vectordb"],
                                    {"http1": {"correlation_headers": ["x-request-id"]}})
    table = ConnTable(registry, stats, 64, 300 * 10**9)
    correlator = Correlator(stats, 2 * 10**9, ("x-request-id",), max_requests=1000)
    rng = random.Random(len(events))
    spans: list = []
    i, now = 0, 0
    while i < len(events):
        n = rng.randint(1, 64)
        batch = events[i : i + n]
        i += n
        done = table.handle(batch)
        correlator.observe(table.observed, now)
        table.observed.clear()
        spans += correlator.on_spans(done, now)
        now += rng.randint(0, 10**9)
        if rng.random() < 0.2:
            spans += correlator.on_spans(table.sweep(now), now)
    spans += correlator.on_spans(table.close_all(), now)
    spans += correlator.flush()
    assign_ids(spans)
    return spans


# set later, by the export pipeline: not what parsing and correlation made
EXPORT_FIELDS = frozenset({"resource", "wall_ns", "wall_end_ns", "trace_state"})


def plain(spans: list) -> list:
    """Spans as JSON-able data, IDs by first appearance, attributes in their order; a
    Measurements as the Measurement of each of its values, as span metrics record it."""
    ids: dict[bytes, str] = {}

    def ident(value: bytes) -> str:
        if not value:
            return ""
        return ids.setdefault(value, f"id{len(ids)}")

    def data(value):
        if isinstance(value, bytes):
            return ident(value)
        if isinstance(value, enum.Enum):
            return f"{type(value).__name__}.{value.name}"
        if isinstance(value, dict):
            return [[k, type(v).__name__, data(v)] for k, v in value.items()]
        if isinstance(value, (list, tuple)):
            out = []
            for v in value:
                if isinstance(v, Measurements):  # recorded as a Measurement per value
                    out += [data(Measurement(v.instrument, x, v.attributes)) for x in v.values]
                else:
                    out.append(data(v))
            return out
        if dataclasses.is_dataclass(value):
            return {f.name: data(getattr(value, f.name)) for f in dataclasses.fields(value)
                    if f.name not in EXPORT_FIELDS}
        return value

    return [data(s) for s in spans]


def record() -> dict[str, list]:
    return {str(seed): plain(spans_of(traffic(seed))) for seed in SEEDS}


if __name__ == "__main__":
    json.dump(record(), sys.stdout, indent=None, separators=(",", ":"))
    sys.stdout.write("\n")
