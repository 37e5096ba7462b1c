"""One atheris fuzz target per parser: fuzzer bytes become a script of syscalls (chunks,
lost bytes, directions, close) fed through the real connection tracker, stitch, to_spans.

Run one target with `python -m bench.fuzz.targets PARSER -runs=N` (libFuzzer flags after
the name), or every target with bench/fuzz/run.py. An exception escaping the parser (or
the tracker around it) is a crash: libFuzzer stops and writes the input to crash-<sha>.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable

import atheris

from bench.fuzz import REFS, TARGETS

with atheris.instrument_imports(include=["otel_ebpf"]):
    import otel_ebpf.protocols.http1.parse  # noqa: F401  (both head paths)
    from otel_ebpf.protocols.base import Direction, Role
    from otel_ebpf.protocols.fuzz_targets import load_fuzz_target
    from otel_ebpf.protocols.http1 import HTTP1Parser
    from otel_ebpf.protocols.http2 import HTTP2Parser
    from otel_ebpf.protocols.llm import LLMLayer
    from otel_ebpf.protocols.llm.endpoints import BUILTIN
    from otel_ebpf.protocols.llm.eventstream import encode_frame
    from otel_ebpf.protocols.mcp import MCPLayer
    from otel_ebpf.protocols.rtps import RTPSParser
    from otel_ebpf.protocols.vectordb import CAPTURE_PREFIXES, VectorDBLayer

    import otel_ebpf.conntrack.connection  # noqa: F401  (the tracker around the parser)

    # every registered target, loaded (so its parser imported) under the instrumentation
    FUZZ_TARGETS = {name: load_fuzz_target(ref) for name, ref in REFS.items()}

# the same seed pieces the CI property tests use, so the fuzzer starts deep in each protocol
from otel_ebpf.protocols.http1.fuzz import EXCHANGES, FRAGMENTS  # noqa: E402
from otel_ebpf.protocols.http1.spans import to_spans  # noqa: E402
from otel_ebpf.protocols.testing import (  # noqa: E402
    GAPS,
    MAX_STEPS,
    ConnectionDriver,
    conn_info,
    fuzz_chunk,
    fuzz_script,
    fuzz_stream,
)

from tests.protocols.http2.test_http2_fuzz import _fragments as http2_fragments  # noqa: E402
from tests.protocols.llm.test_llm_fuzz import (  # noqa: E402
    EVENT_TYPES,
    FRAME_EVENTS,
    PATH_ROUTES,
    VOCABULARY,
)
from tests.protocols.mcp import wire as mcp_wire  # noqa: E402
from tests.protocols.rtps import wire as rtps_wire  # noqa: E402
from tests.protocols.rtps.test_rtps_fuzz import DATAGRAMS  # noqa: E402


class Totals:
    """What the run saw, written to $FUZZ_STATS every STATS_EVERY inputs and at the end."""

    STATS_EVERY = 20_000

    def __init__(self, name: str, runs: int) -> None:
        self.name, self.runs = name, runs
        self.path = os.environ.get("FUZZ_STATS")
        self.values = {"inputs": 0, "parse_errors": 0, "gaps": 0, "records": 0, "spans": 0}

    def add(self, driver: ConnectionDriver, spans: int,
            more: tuple[ConnectionDriver, ...] = ()) -> None:
        """One input's counts: its connection's, and those of `more` it drove."""
        v = self.values
        v["inputs"] += 1
        v["spans"] += spans
        for d in (driver, *more):
            v["parse_errors"] += d.stats.total("parse.errors")
            v["gaps"] += d.stats.total("gaps")
            v["records"] += len(d.records)
        if self.path and (v["inputs"] % self.STATS_EVERY == 0 or v["inputs"] == self.runs):
            with open(self.path, "w") as f:
                json.dump({"target": self.name, **v}, f)


def _stream(parser_factory: Callable[[], tuple], pieces: list[bytes]) -> Callable[[bytes], None]:
    """A target for a stream parser: role, mid-stream start, then chunks both ways."""

    def one(data: bytes, totals: Totals) -> None:
        (driver,) = fuzz_stream(atheris.FuzzedDataProvider(data), parser_factory, pieces)
        totals.add(driver, len(driver.spans()))

    return one


def _registered(target) -> Callable[[bytes], None]:
    """A protocol's own FuzzTarget (otel_ebpf.protocols.testing), found by entry point."""
    one_input = target.one()

    def one(data: bytes, totals: Totals) -> None:
        drivers = one_input(atheris.FuzzedDataProvider(data))
        if drivers:
            totals.add(drivers[0], sum(len(d.spans()) for d in drivers), tuple(drivers[1:]))

    return one


def _http1_differential(pieces: list[bytes]) -> Callable[[bytes], None]:
    """The compiled HTTP/1 heads and syscall steps (protocols/http1/_parse.c,
    otel_ebpf/_fast/conn.c) against llhttp and Connection.on_data: one script of syscalls
    fed to two connections, one parsing heads and body pieces in C, one in Python with
    llhttp; a difference in their records or spans is a crash (AssertionError)."""
    parser = HTTP1Parser({"correlation_headers": ["x-request-id", "traceparent"]})

    def one(data: bytes, totals: Totals) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        role, midstream, script, close = fuzz_script(fdp, pieces)
        drivers = []
        for compiled in (True, False):
            driver = ConnectionDriver(parser, conn_info(role), midstream=midstream)
            if not compiled:
                driver.state.fast_kept = None  # every head through llhttp
                driver.fast_data = None  # every syscall through on_data: _chunks, not C's
            for direction, captured, gap in script:
                driver.feed(direction, captured, gap)
            if close:
                driver.close()
            drivers.append(driver)
        fast, slow = drivers
        assert fast.records == slow.records, (fast.records, slow.records)
        spans = fast.spans()
        assert spans == slow.spans()
        for record in fast.records:  # the compiled span step against its Python reference
            made, reference = parser.to_spans(record, fast.conn), to_spans(record, fast.conn)
            assert made == reference, (made, reference)
            assert [list(s.attributes.items()) for s in made] == \
                [list(s.attributes.items()) for s in reference]
        assert fast.stats.totals() == slow.stats.totals()
        totals.add(fast, len(spans))

    return one


def _http2_differential(pieces: list[bytes]) -> Callable[[bytes], None]:
    """HTTP/2's compiled steps against their Python references: one script of syscalls fed
    to two connections, one through the compiled frame loop and header block readers
    (protocols/http2/_parse.c), the connection's syscall step (conn.c stream_step), pairing and
    the gRPC span (http2/_stitch.c), the other through parse.py, Connection.on_data, stitch.py and
    spans.py; a difference in their records, spans or counts is a crash (AssertionError).
    Header fields are not captured (the compiled readers' case)."""
    from otel_ebpf import _fast
    from otel_ebpf.conntrack.connection import MAX_PARSE_STEPS, FrameStart, compiled_data
    from otel_ebpf.protocols.base import Frame, ParseResult
    from otel_ebpf.protocols.http2 import parse as h2parse
    from otel_ebpf.protocols.http2 import spans as h2spans
    from otel_ebpf.protocols.http2 import stitch as h2stitch

    from tests.protocols.http2.test_http2_compiled import _plain

    options = {"capture_headers": False, "max_streams": 4}
    stepped = compiled_data() is not None  # the compiled data step set up (None: pure Python)
    compiled = HTTP2Parser(options)
    h2parse.COMPILED = False
    reference = HTTP2Parser(options)  # its frame loop the Python one
    h2parse.COMPILED = True

    def run(parser: HTTP2Parser, fast: bool, role: Role, midstream: bool, script: list,
            close: bool) -> tuple[ConnectionDriver, list]:
        h2stitch.COMPILED = h2spans.COMPILED = fast
        if stepped:  # which parsers' syscalls the compiled data step takes (ConnTable's)
            _fast.conn.stream_parsers((HTTP2Parser,) if fast else (), ParseResult.FRAME,
                                      ParseResult.NEED_MORE, FrameStart, MAX_PARSE_STEPS,
                                      Frame)
        driver = ConnectionDriver(parser, conn_info(role), midstream=midstream)
        for direction, captured, gap, tick in script:
            driver.feed(direction, captured, gap)
            if tick:
                driver.tick(driver.now + 60 * 10**9)
        if close:
            driver.close()
        return driver, driver.spans()

    def one(data: bytes, totals: Totals) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        role, midstream, script, close = fuzz_script(fdp, pieces, ticks=True)
        fast, fast_spans = run(compiled, True, role, midstream, script, close)
        slow, slow_spans = run(reference, False, role, midstream, script, close)
        h2stitch.COMPILED = h2spans.COMPILED = True
        assert [_plain(r) for r in fast.records] == [_plain(r) for r in slow.records]
        assert fast_spans == slow_spans
        assert [list(s.attributes.items()) for s in fast_spans] == \
            [list(s.attributes.items()) for s in slow_spans]
        assert fast.stats.totals() == slow.stats.totals()
        assert compiled.counters(fast.state) == reference.counters(slow.state)
        totals.add(fast, len(fast_spans))

    return one


def _llm_openai(pieces: list[bytes]) -> Callable[[bytes], None]:
    """The compiled OpenAI chunk reader (protocols/llm/_stream.c openai_events, content
    capture off) against the Python one: each input's records made into spans twice, with
    and without it; a difference is a crash (AssertionError)."""
    from otel_ebpf.protocols.llm import stream as llm_stream

    def one(data: bytes, totals: Totals) -> None:
        (driver,) = fuzz_stream(atheris.FuzzedDataProvider(data),
                                lambda: (HTTP1Parser(), (LLMLayer(),)), pieces)
        spans = driver.spans()
        saved, llm_stream.compiled = llm_stream.compiled, None
        try:
            reference = driver.spans()
        finally:
            llm_stream.compiled = saved
        assert spans == reference, (spans, reference)
        assert [list(s.attributes.items()) for s in spans] == \
            [list(s.attributes.items()) for s in reference]
        totals.add(driver, len(spans))

    return one


def _openai_pieces(json_bits: list[bytes]) -> list[bytes]:
    """Chat and completions requests, and their SSE answers: whole (head, chunks, end),
    the head alone, each chunk framed and bare, so that one pick makes a stream."""
    docs = [b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
            b'"system_fingerprint":"fp","choices":[{"index":0,"delta":{"role":"assistant",'
            b'"content":""},"logprobs":null,"finish_reason":null}]}',
            b'{"id":"chatcmpl-1","model":"m","choices":[{"index":0,"delta":{"content":" w1"},'
            b'"finish_reason":null}]}',
            b'{"id":"c","choices":[{"index":1,"delta":{"reasoning_content":"hm"}}],"usage":null}',
            b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"service_tier":"t"}',
            b'{"choices":[{"text":"x","index":0,"finish_reason":"length"}]}',
            b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5}}']
    events = [b"data: " + doc + b"\n\n" for doc in [*docs, b"[DONE]"]]
    framed = [f"{len(e):x}\r\n".encode() + e + b"\r\n" for e in events]
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    requests = [f"POST {path} HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
                f"Content-Length: 2\r\n\r\n{{}}".encode()
                for path in ("/v1/chat/completions", "/v1/completions")]
    whole = head + b"".join(framed) + b"0\r\n\r\n"
    # the request and the whole answer as often as every other piece together: most
    # inputs then hold a stream, whose chunks the fuzzer goes on to cut and alter
    rest = [head, head + framed[0], *framed, *events, b"0\r\n\r\n", *json_bits]
    return [*rest, *[requests[0], whole, requests[1], whole] * (len(rest) // 4)]


def _http_pieces(paths: list[str], bodies: list[bytes]) -> list[bytes]:
    """HTTP/1 heads for the layer's paths, and bodies shaped like its documents."""
    heads = []
    for path in paths:
        heads += [f"POST {path} HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
                  f"Content-Length: {n}\r\n\r\n".encode() for n in (0, 40, 400)]
        heads.append(f"POST {path} HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
    heads += [b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 60\r\n\r\n",
              b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n",
              b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\n\r\n",
              b"HTTP/1.1 500 Oops\r\nContent-Length: 2\r\n\r\n{}", b"\r\n", b"0\r\n\r\n", b"1f\r\n"]
    return heads + bodies + FRAGMENTS


def _json_bits() -> list[bytes]:
    keys = [f'"{k}":'.encode() for k in VOCABULARY]
    events = [f'"{e}"'.encode() for e in EVENT_TYPES]
    return keys + events + [b"{", b"}", b"[", b"]", b",", b"data: ", b"\n\n", b"data: [DONE]\n\n",
                            b'{"model":"m","messages":[{"role":"user","content":"hi"}]}',
                            b'{"choices":[{"delta":{"content":"x"},"finish_reason":"stop"}]}',
                            b'{"usage":{"prompt_tokens":3,"completion_tokens":5}}', b"1", b"null"]


def _genai_bits(json_bits: list[bytes]) -> list[bytes]:
    """Gemini SSE chunks and Bedrock event stream frames (whole: the fuzzer cuts them), the
    event stream's response head, and the JSON pieces of every dialect."""
    docs = [b'{"candidates":[{"content":{"parts":[{"text":"x"}]},"finishReason":"STOP"}],'
            b'"usageMetadata":{"promptTokenCount":3,"thoughtsTokenCount":2}}',
            b'{"contentBlockIndex":0,"delta":{"text":"x"}}', b'{"stopReason":"end_turn"}',
            b'{"usage":{"inputTokens":3,"outputTokens":5,"cacheReadInputTokens":1}}',
            b'{"bytes":"eyJ0eXBlIjoibWVzc2FnZV9zdG9wIn0="}']
    frames = [encode_frame({":event-type": event, ":message-type": "event"}, doc)
              for event in FRAME_EVENTS for doc in docs]
    frames.append(encode_frame({":message-type": "exception",
                                ":exception-type": "throttlingException"}, b"{}"))
    head = (b"HTTP/1.1 200 OK\r\nContent-Type: application/vnd.amazon.eventstream\r\n"
            b"Transfer-Encoding: chunked\r\n\r\n")
    return [head, *frames, *(b"data: " + d + b"\r\n\r\n" for d in docs), *json_bits]


def _vectordb_paths() -> list[str]:
    return [p + "docs/query" for p in CAPTURE_PREFIXES if p.endswith("/")] + [
        "/api/v1/collections/abc/query", "/collections/docs/points/search", "/v1/graphql",
        "/v1/batch/objects", "/v1/objects/Doc/1", "/v2/vectordb/entities/search",
        "/api/v2/tenants/t/databases/d/collections/c/add"]


def _mcp_pieces() -> list[bytes]:
    """MCP's HTTP messages on both transports, whole, and JSON-RPC bits to splice."""
    w = mcp_wire
    session = w.SESSION
    messages = [
        w.rpc(id=1, method="initialize", params={"protocolVersion": w.LEGACY}),
        w.rpc(id=2, method="tools/call", params={"name": "t", "arguments": {"a": 1}}),
        w.rpc(id=2, result={"content": [], "isError": True}),
        w.rpc(id=2, result={"structuredContent": {"r": 1}}),
        w.rpc(id=3, error={"code": -32601, "message": "no"}),
        w.rpc(id=0, method="sampling/createMessage"), w.rpc(id=0, result={}),
        w.rpc(method="notifications/message", params={"level": "info"}),
        w.rpc(id=9, method="resources/read", params={"uri": "file:///x"}),
        b"[" + w.rpc(id=4, method="ping") + b"," + w.rpc(id=5, method="ping") + b"]",
    ]
    target = f"/messages/?session_id={session}"
    pieces = [w.get("/mcp", session=session), w.get("/sse"), w.sse_head(),
              w.sse_head(session=session), w.SSE_END,
              w.sse_chunk(target.encode(), "endpoint"),
              w.json_answer(b"", status=202, session=session),
              w.json_answer(b"Accepted", status=202)]
    for msg in messages:
        pieces += [w.post("/mcp", msg, session=session, version=w.LEGACY),
                   w.post(target, msg), w.post("/mcp", msg), w.json_answer(msg),
                   w.sse_chunk(msg), msg]
    return pieces + [b'"jsonrpc":"2.0"', b'"id":', b'"method":', b'"result":', b"{", b"}",
                     b"data: ", b"\r\n\r\n"] + FRAGMENTS


def _mcp(pieces: list[bytes]) -> Callable[[bytes], None]:
    """Two connections of one process sharing one MCP layer, which pairs a request and its
    answer across them (a stream and the posts beside it); a small pending table."""

    def one(data: bytes, totals: Totals) -> None:
        fdp = atheris.FuzzedDataProvider(data)
        layer = MCPLayer({"capture_content": True, "max_pending": 3, "max_content_bytes": 16})
        role = (Role.CLIENT, Role.SERVER)[fdp.ConsumeIntInRange(0, 1)]
        drivers = [ConnectionDriver(HTTP1Parser(), conn_info(role, fd=fd),
                                    midstream=fdp.ConsumeBool(), layers=(layer,))
                   for fd in (7, 8)]
        now = 0
        for _ in range(fdp.ConsumeIntInRange(0, MAX_STEPS)):
            if fdp.remaining_bytes() == 0:
                break
            driver = drivers[fdp.ConsumeIntInRange(0, 1)]
            direction = (Direction.EGRESS, Direction.INGRESS)[fdp.ConsumeIntInRange(0, 1)]
            captured = fuzz_chunk(fdp, pieces)
            gap = GAPS[fdp.ConsumeIntInRange(0, len(GAPS) - 1)] if fdp.ConsumeProbability() < 0.1 else 0
            now += 1000
            driver.feed(direction, captured, gap, at=now)
        for driver in drivers:
            if fdp.ConsumeBool():
                driver.close()
        totals.add(drivers[0], sum(len(d.spans()) for d in drivers), tuple(drivers[1:]))

    return one


def _rtps(data: bytes, totals: Totals) -> None:
    """Datagrams on three sockets of two processes sharing one parser (discovery is shared)."""
    fdp = atheris.FuzzedDataProvider(data)
    parser = RTPSParser({"max_reassemblies": 2, "max_waiting": 4, "max_tracked": 16,
                         "discovery_max_entries": 2, "pairing_timeout_s": 0.5})
    sockets = [rtps_wire.Socket(parser, 100), rtps_wire.Socket(parser, 200),
               rtps_wire.Socket(parser, 100, fd=6)]
    pieces = DATAGRAMS + [rtps_wire.header(rtps_wire.Participant(1).prefix)]
    now = 1
    for _ in range(fdp.ConsumeIntInRange(0, MAX_STEPS)):
        if fdp.remaining_bytes() == 0:
            break
        sock = sockets[fdp.ConsumeIntInRange(0, 2)]
        now += fdp.ConsumeIntInRange(0, 400_000_000)
        datagram = fuzz_chunk(fdp, pieces)
        if fdp.ConsumeIntInRange(0, 3) == 0:  # a header, then raw submessages
            datagram = pieces[-1] + datagram
        extra = (0, 0, 3000)[fdp.ConsumeIntInRange(0, 2)]
        captured = (None, None, 40, 100)[fdp.ConsumeIntInRange(0, 3)]
        feed = sock.send if fdp.ConsumeBool() else sock.recv
        feed(datagram, now, size=len(datagram) + extra, captured=captured)
    close = fdp.ConsumeBool()
    for sock in sockets:
        sock.close() if close else sock.tick(now + 10**10)
    for sock in sockets:
        parser.counters(sock.driver.state)
        totals.add(sock.driver, len(sock.spans()))


def _parsers() -> dict[str, Callable]:
    json_bits = _json_bits()
    http2 = HTTP2Parser({"capture_headers": True, "max_streams": 4})
    llm_paths = sorted(BUILTIN)
    return {
        **{name: _registered(target) for name, target in FUZZ_TARGETS.items()},
        "http1_fast": _http1_differential(FRAGMENTS + [b for ex in EXCHANGES for b in ex]),
        "http2": _stream(lambda: (http2, ()), http2_fragments()),
        "http2_fast": _http2_differential(http2_fragments()),
        # layers read bodies inside HTTP/1 messages: fuzz them through the real HTTP parser
        "llm": _stream(lambda: (HTTP1Parser(), (LLMLayer({"capture_content": True}),)),
                       _http_pieces(llm_paths, json_bits)),
        # OpenAI chunks without content capture: the compiled reader against the Python one
        "llm_openai": _llm_openai(_openai_pieces(json_bits)),
        # the dialects whose paths name the model: Gemini (SSE) and Bedrock (AWS event stream)
        "genai": _stream(lambda: (HTTP1Parser(), (LLMLayer({"capture_content": True}),)),
                         _http_pieces(PATH_ROUTES, _genai_bits(json_bits))),
        "vectordb": _stream(lambda: (HTTP1Parser(), (VectorDBLayer(),)),
                            _http_pieces(_vectordb_paths(), json_bits)),
        "mcp": _mcp(_mcp_pieces()),
        "rtps": _rtps,
    }


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else ""
    if name not in TARGETS:
        sys.exit(f"usage: python -m bench.fuzz.targets {{{'|'.join(TARGETS)}}} [libFuzzer flags]")
    runs = next((int(a.split("=", 1)[1]) for a in sys.argv if a.startswith("-runs=")), -1)
    target, totals = _parsers()[name], Totals(name, runs)
    atheris.Setup([sys.argv[0], *sys.argv[2:]], lambda data: target(data, totals))
    atheris.Fuzz()


if __name__ == "__main__":
    main()
