"""Fuzz targets for every C entry point of the agent (otel_ebpf/_fast/*.c and the protocols'
accelerators, protocols/*/_*.c) that reads bytes a peer chooses, run against the sanitizer
build (bench/fuzz/asan_build.py) and, where the C code has one, against its Python
reference: a sanitizer report, a crash, an exception or a difference
from the reference is a failure.

This module is the process that fuzzes or replays one target; bench/fuzz/sanitize.py
builds the extensions, starts it with the sanitizer runtime preloaded and reads what it
says (`make fuzz`, tests/fuzz/test_sanitized_c.py). By hand:

    python -m bench.fuzz.sanitized fuzz TARGET [--seeds DIR] [libFuzzer flags] [corpus dirs]
    python -m bench.fuzz.sanitized replay TARGET FILE...
    python -m bench.fuzz.sanitized list

With $FUZZ_ASAN_DIR set (sanitize.py sets it) the extension modules (otel_ebpf._fast.* and
the protocols' accelerators, otel_ebpf.protocols.*._*) and strictbuf are loaded from that
directory, ahead of the in-place ones, and checked to be from there; without it this
refuses to run unless FUZZ_UNSANITIZED=1 (the in-place build: for trying a target quickly,
finds reference mismatches but no memory errors).
"""

from __future__ import annotations

import contextlib
import importlib.machinery
import importlib.util
import os
import struct
import sys
import sysconfig
from collections.abc import Callable
from pathlib import Path

class _SanitizedFinder:
    """Every extension module of otel_ebpf (the core's otel_ebpf._fast.<name> and each
    protocol's accelerator, otel_ebpf.protocols.<folder>._<name>) and strictbuf from the
    sanitizer build's directory, where it has them."""

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, name: str, path=None, target=None):  # noqa: ANN001, ANN201
        if not (name.startswith("otel_ebpf.") or name == "strictbuf"):
            return None
        parts = name.split(".")
        f = self.root.joinpath(*parts[:-1], parts[-1] + sysconfig.get_config_var("EXT_SUFFIX"))
        if not f.exists():
            return None
        loader = importlib.machinery.ExtensionFileLoader(name, str(f))
        return importlib.util.spec_from_file_location(name, f, loader=loader)


def _load_sanitized() -> Path | None:
    root = os.environ.get("FUZZ_ASAN_DIR")
    if not root:
        if os.environ.get("FUZZ_UNSANITIZED") != "1":
            sys.exit("bench.fuzz.sanitized: FUZZ_ASAN_DIR is not set (run it through "
                     "bench/fuzz/sanitize.py, or FUZZ_UNSANITIZED=1 for the in-place build)")
        return None
    if "otel_ebpf._fast" in sys.modules:
        sys.exit("bench.fuzz.sanitized: otel_ebpf._fast was imported before the sanitizer "
                 "build could be put first")
    root_path = Path(root).resolve()
    sys.meta_path.insert(0, _SanitizedFinder(root_path))
    return root_path


ASAN_DIR = _load_sanitized()

import atheris  # noqa: E402
from hypothesis import settings as _hypothesis_settings  # noqa: E402

# before any test module makes its settings: no example database written by a fuzz run
_hypothesis_settings.register_profile("sanitized-fuzz", database=None, deadline=None)
_hypothesis_settings.load_profile("sanitized-fuzz")

# Python-side coverage (atheris' bytecode instrumentation of the references) costs seconds
# at start: FUZZ_PY_COVERAGE=0 leaves it out (short runs), the C side's stays
_instrumented = (atheris.instrument_imports(include=["otel_ebpf"])
                 if os.environ.get("FUZZ_PY_COVERAGE", "1") != "0" else contextlib.nullcontext())

with _instrumented:
    from otel_ebpf import _fast
    from otel_ebpf.conntrack import table as table_module
    from otel_ebpf.conntrack.table import ConnTable
    from otel_ebpf.export import otlp_json, otlp_proto
    from otel_ebpf.kernel import abi
    from otel_ebpf.protocols.base import (
        Direction,
        NeutralSpan,
        Role,
        SpanEvent,
        SpanKind,
        SpanLink,
        StatusCode,
    )
    from otel_ebpf.protocols.http1 import parse as http1_parse
    from otel_ebpf.protocols.http1.fuzz import EXCHANGES, FRAGMENTS
    from otel_ebpf.protocols.layers import Body, BodyPiece
    from otel_ebpf.protocols import registry as registry_module
    from otel_ebpf.protocols.registry import Registry
    from otel_ebpf.protocols.rtps import parse as rtps_parse
    from otel_ebpf.protocols.testing import conn_info, fuzz_chunk
    from otel_ebpf.spans.clock import KernelClock
    from otel_ebpf.spans.convert import ready, resource_for
    from otel_ebpf.telemetry import Stats

    from bench import stream_pipeline as sp
    from bench.fuzz import known
    from tests.protocols.http1 import test_http1_chunks as h1_chunks
    from tests.protocols.http1 import test_http1_fastpath as h1_fast
    from tests.protocols.http1 import test_http1_whole as h1_whole
    from tests.protocols.http2 import test_h2span_compiled as h2span_tests
    from tests.protocols.http2 import test_http2_compiled as h2_tests
    from tests.protocols.http2.test_http2_fuzz import FRAGMENTS as H2_FRAGMENTS
    from tests.protocols.llm import test_sse_compiled as sse_tests
    from tests.protocols.llm import test_sse_openai_compiled as openai_tests
    from tests.protocols.rtps import test_rtps_compiled as rtps_tests
    from tests.protocols.rtps.test_rtps_fuzz import DATAGRAMS
    from tests.unit import test_table_compiled as table_tests

if _fast.PURE_PYTHON:
    sys.exit("bench.fuzz.sanitized: OTEL_EBPF_PURE_PYTHON is set: no C code to fuzz")
for _name in [f"otel_ebpf._fast.{m}" for m in _fast.MODULES] + [
        name for name, _ in _fast.accelerators()]:
    try:
        _mod = importlib.import_module(_name)
    except ImportError as _e:
        sys.exit(f"bench.fuzz.sanitized: {_name} did not load: {_e}")
    if ASAN_DIR is not None and not Path(_mod.__file__).resolve().is_relative_to(ASAN_DIR):
        sys.exit(f"bench.fuzz.sanitized: {_name} came from {_mod.__file__}, not the "
                 f"sanitizer build in {ASAN_DIR}")

if ASAN_DIR is not None:
    from strictbuf import StrictBuffer  # noqa: E402
else:
    StrictBuffer = bytes  # noqa: N816 - the in-place run has no strict buffers

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests/protocols/rtps/fixtures"


GUARDS_OFF = {g for g in os.environ.get("FUZZ_GUARDS_OFF", "").split(",") if g}


def guarded(finding: str) -> bool:
    """True while the known finding is open: the target steers around it. The replay of
    its own input turns its guard off (FUZZ_GUARDS_OFF=id[,id]); FUZZ_NO_GUARDS=1 turns
    every guard off."""
    return (finding in known.open_ids() and finding not in GUARDS_OFF
            and os.environ.get("FUZZ_NO_GUARDS") != "1")


# --- ring: record decoding (ring.c decode; Ring.poll's drain needs a real BPF map) ------

def _ring_seeds() -> list[bytes]:
    payload = b"GET / HTTP/1.1\r\nHost: h\r\n\r\n"
    data = abi.DATA.pack(abi.EV_DATA, 11, 100, 42, 7, 1, 200, 0, len(payload), len(payload),
                         5, 1, 0, 0, b"\0" * 16, 0, 0, 0xABC) + payload
    peer = abi.DATA.pack(abi.EV_DATA, 11, 100, 42, 7, 1, 200, 0, 4, 4, 0, 1,
                         abi.DATA_F_NO_SEQ | abi.DATA_F_HAS_PEER, 0,
                         bytes(10) + b"\xff\xff" + bytes([10, 1, 2, 3]), 7412, 10, 0) + b"RTPS"
    tail = abi.DATA.pack(abi.EV_DATA, 11, 100, 42, 7, 1, 200, 0, 5000, 20, 0, 0,
                         abi.DATA_F_TRUNCATED | abi.DATA_F_WIDE, 8, bytes(16), 0, 2, 1) + \
        bytes(range(28))
    close = abi.CONN_CLOSE.pack(abi.EV_CONN_CLOSE, 11, 300, 42, 7, 1, 10, 20)
    task = abi.TASK_NEW.pack(abi.EV_TASK_NEW, 12, 400, 42, 2**64 - 1, 0xDEF, 0xDEF, 390)
    opened = abi.CONN_OPEN.pack(abi.EV_CONN_OPEN, 1, 2, 42, 7, 1, bytes(16), 8000, 2,
                                bytes(16), 40000, 2, 1, 5, b"python\0")
    exited = abi.PROC_EXIT.pack(abi.EV_PROC_EXIT, 7, 123, 0)
    ctx_in = abi.CONTEXT_IN.pack(abi.EV_CONTEXT_IN, 1, 5, bytes(16), bytes(16), 80, 4000, 2, 9,
                                 1, bytes(range(16)))
    ctx_out = abi.CONTEXT_OUT.pack(abi.EV_CONTEXT_OUT, 1, 5, 42, 7, 1, 100, 9, 1,
                                   bytes(range(16)), 43, 8, 2, 50)
    records = [data, peer, tail, close, task, opened, exited, ctx_in, ctx_out]
    return [_ring_input(records), *(_ring_input([r]) for r in records),
            _ring_input([data[:40], close[:-1], b"", b"\xff" * 9])]


def _ring_input(records: list[bytes]) -> bytes:
    return b"".join(struct.pack("<H", len(r)) + r for r in records)


def _ring(data: bytes) -> None:
    """Records as (u16 length, bytes)...: abi.decode_batch (the C decoder, then abi.decode
    for what it hands back) against abi.decode_each, event for event, type for type."""
    records, at = [], 0
    while at < len(data) and len(records) < 64:
        n = int.from_bytes(data[at:at + 2], "little")
        records.append(data[at + 2:at + 2 + n])
        at += 2 + n
    want = abi.decode_each(records)
    got = abi.decode_batch(records)
    assert got == want, (got, want)
    assert [type(e) for e in got[0]] == [type(e) for e in want[0]]
    for g, w in zip(got[0], want[0], strict=True):
        if isinstance(g, tuple):
            assert [type(x) for x in g] == [type(x) for x in w]


# --- http1: heads (http1/_parse.c head), whole messages (whole), chunked bodies (chunks) --------

def _h1_head_seeds() -> list[bytes]:
    out = []
    for ex in EXCHANGES:
        for i, message in enumerate(ex):
            out.append(bytes([i % 2]) + message)
    return out + [b"\x00" + f for f in FRAGMENTS[:40]]


def _http1_head(data: bytes) -> None:
    """Byte 0: bit 0 request, bit 1 a request seen first (for an answer), bit 2 the server
    end; the rest one syscall's bytes. The compiled head against llhttp through the parser
    (tests/protocols/http1/test_http1_fastpath.py _same_step), then head() again on a
    StrictBuffer (exact size, freed on release) against head() on bytes."""
    if not data:
        return
    flags, body = data[0], data[1:]
    request = bool(flags & 1)
    role = Role.SERVER if flags & 4 else Role.CLIENT
    egress = request == (role == Role.CLIENT)
    direction = Direction.EGRESS if egress else Direction.INGRESS
    h1_fast._same_step(body, direction, role, prime_request=bool(flags & 2) and not request)
    kept = http1_parse._fast_kept(h1_fast.parser.new_state(conn_info(role)).carrier_names)
    for chunked in (False, True):
        want = http1_parse.compiled.head(body, request, kept, chunked)
        if guarded("http1-head-after-release") and want is not None:
            continue  # head() reads the target after releasing the buffer: known
        got = http1_parse.compiled.head(StrictBuffer(body), request, kept, chunked)
        assert got == want, (body, got, want)


STAMPS = [(0, 1_000, 2_000, 77, 9, 0), (2**40, 2**62, 2**62 + 5, None, 2**31, 2**63),
          (5, 10, 3, 2**33, 0, 1)]


def _http1_whole(data: bytes) -> None:
    """Byte 0: bit 0 request, bit 1 server end, bit 2 layers (LLM, vector DB), bits 3-4 the
    stamp, bits 5-7 requests seen before; the rest one syscall: http1/_parse.c whole (through
    parse.compiled_whole) against parse.py whole and the general path
    (tests/protocols/http1/test_http1_whole.py _compare)."""
    if not data:
        return
    flags, body = data[0], data[1:]
    request = bool(flags & 1)
    role = Role.SERVER if flags & 2 else Role.CLIENT
    parser = h1_whole.layered if flags & 4 else h1_whole.plain
    stamp = STAMPS[(flags >> 3) % len(STAMPS)]
    egress = request == (role == Role.CLIENT)
    direction = Direction.EGRESS if egress else Direction.INGRESS
    primes = [] if request else h1_whole.PRIMES[: (flags >> 5) % (len(h1_whole.PRIMES) + 1)]
    h1_whole._compare(parser, role, direction, body, primes, stamp)


def _h1_chunk_seeds() -> list[bytes]:
    chunk = h1_chunks._chunk_bytes
    return [b"\x03\x00\x00" + chunk(5, b"", 1) + chunk(40, b";x=y", 3) + b"0\r\n\r\n",
            b"\x01\x01\x02" + chunk(300, b"", 4) + chunk(0, b"", 1) + b"T: v\r\n\r\n",
            b"\x00\x02\x00" + chunk(26, b"", 2)[:-1],
            b"\x02\x00\x00" + b"data: {}\n\n".join([b"7\r\n", b"\r\n"]) + b"0\r\n\r\n"]


def _http1_chunks(data: bytes) -> None:
    """Byte 0: bit 0 body kept, bit 1 request; byte 1 the body limit; byte 2 earlier pieces;
    the rest one syscall inside a chunked body: http1/_parse.c chunks against parse.py _chunks on
    the same state (tests/protocols/http1/test_http1_chunks.py _walks_agree)."""
    if len(data) < 3:
        return
    limit = (0, 1, 16, 64 * 1024)[data[1] % 4]
    h1_chunks._walks_agree(data[3:], bool(data[0] & 1), bool(data[0] & 2), limit, data[2] % 4)


# --- SSE: whole_pieces, openai_events ---------------------------------------------------

def _sse_bodies() -> list[bytes]:
    answers = b"".join(d for c, d in sp.recording("sse")[:60] if not c)
    start = answers.find(b"\r\n\r\n") + 4
    docs = [b'{"id":"c","object":"chat.completion.chunk","model":"m","choices":[{"index":0,'
            b'"delta":{"role":"assistant","content":"hi \\u00e9\\n"},"finish_reason":null}]}',
            b'{"choices":[{"index":1,"delta":{"tool_calls":[{"index":0,"function":'
            b'{"name":"f","arguments":"{}"}}]},"finish_reason":"tool_calls"}]}',
            b'{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":5,'
            b'"completion_tokens_details":{"reasoning_tokens":2}}}',
            b'{"error":{"message":"x","type":"t"}}', b'{"choices":[{"text":"x","index":0}]}']
    return [answers[start:start + 3000],
            b"".join(b"data: " + d + b"\n\n" for d in docs) + b"data: [DONE]\n\n",
            b"event: x\ndata: a\n\n: ping\n\ndata:b\r\n\r\nid: 3\nretry: 1\ndata: [DONE]\n\n"]


def _sse_seeds() -> list[bytes]:
    return [bytes([m, 0]) + b for b in _sse_bodies() for m in (0, 2, 5)]


def _pieces_of(data: bytes) -> tuple[list[bytes], int | None, int]:
    """Byte 0: bits 0-1 how the body is cut (whole, after each event, every n bytes, both),
    bit 2 a gap (bytes not captured) before piece bits 3-7; byte 1: n - 1; the rest the
    body."""
    mode, n, body = data[0] & 3, data[1] + 1, data[2:]
    if mode == 0:
        pieces = [body]
    elif mode == 1:
        pieces = [e + b"\n\n" for e in body.split(b"\n\n")]
        pieces[-1] = pieces[-1][:-2]
    else:
        pieces = [body[i:i + n] for i in range(0, len(body), n)] or [b""]
        if mode == 3:
            pieces = [p for piece in pieces for p in piece.split(b"\n\n")]
    gap = (data[0] >> 3) % len(pieces) if data[0] & 4 else None
    return pieces[:64], gap, mode


def _sse(data: bytes) -> None:
    """An SSE body cut into pieces: llm/_stream.c whole_pieces against stream.py's Python splitter
    (tests/protocols/llm/test_sse_compiled.py same), events, offsets and decode_sse."""
    if len(data) < 2:
        return
    pieces, gap, _ = _pieces_of(data)
    sse_tests.same(sse_tests.body_of(pieces, gap))


def _sse_openai(data: bytes) -> None:
    """The same bodies read as an OpenAI chat (or completions, byte 0 bit 7) stream:
    llm/_stream.c openai_events into a ResponseInfo against read_events on the Python splitter
    (tests/protocols/llm/test_sse_openai_compiled.py same), field for field."""
    if len(data) < 2:
        return
    pieces, gap, _ = _pieces_of(data)
    route = openai_tests.COMPLETIONS if data[0] & 0x80 else openai_tests.CHAT
    openai_tests.same(sse_tests.body_of(pieces, gap), route)


# --- HTTP/2: the frame loop and header blocks (http2/_parse.c parse), h2span pair and span --------

def _h2_pieces() -> list[bytes]:
    recorded = [d for _, d in sp.recording("grpc")[:80]]
    return list(H2_FRAGMENTS) + recorded


H2_PIECES: list[bytes] = []


def _http2_frames(data: bytes) -> None:
    """Syscalls both ways on one connection (role, then direction and bytes: a recorded or
    hand-made frame, whole or cut, or raw), each fed to http2/_parse.c parse and to parse.py parse
    on states of their own, the bytes held as the tracker holds them: every call's result,
    frame, consumed count and the whole state (HPACK tables included) alike
    (tests/protocols/http2/test_http2_compiled.py _Ends). Each direction's bytes are a
    bytearray read through a memoryview, as the tracker hands them."""
    if not H2_PIECES:
        H2_PIECES.extend(_h2_pieces())
    fdp = atheris.FuzzedDataProvider(data)
    ends = h2_tests._Ends((Role.CLIENT, Role.SERVER)[fdp.ConsumeIntInRange(0, 1)], conn_info)
    for _ in range(fdp.ConsumeIntInRange(0, 24)):
        if fdp.remaining_bytes() == 0:
            break
        direction = (Direction.EGRESS, Direction.INGRESS)[fdp.ConsumeIntInRange(0, 1)]
        ends.feed(direction, fuzz_chunk(fdp, H2_PIECES))


def _hypothesis_target(test) -> Callable[[bytes], None]:  # noqa: ANN001
    """A @given test of the suite driven by the fuzzer's bytes (Hypothesis' fuzz_one_input):
    its strategies build the objects, its assertions compare C and the reference."""
    return test.hypothesis.fuzz_one_input


def _random_seeds() -> list[bytes]:
    """For targets whose input is a script drawn with a FuzzedDataProvider: a few longer
    inputs, so the first scripts have several steps (pieces are picked from known frames)."""
    import random  # noqa: PLC0415

    return [random.Random(i).randbytes(64 << (i % 5)) for i in range(10)]


def _hypothesis_seeds() -> list[bytes]:
    """Hypothesis draws from the input as from a stream: under ~500 bytes most inputs end
    before an example is whole and the test is not called. Seeds long enough for many."""
    import random  # noqa: PLC0415

    return [random.Random(i).randbytes(2048 + 512 * (i % 4)) for i in range(12)]


# --- RTPS: a datagram (rtps/_parse.c parse) ----------------------------------------------------

def _rtps_seeds() -> list[bytes]:
    import json

    out = list(DATAGRAMS)
    for name in ("pubsub", "big", "service"):
        lines = (FIXTURES / f"{name}.jsonl").read_text().splitlines()
        out += [bytes.fromhex(json.loads(line)["hex"]) for line in lines[:40]]
    return out


def _number_set_overflows(data: bytes) -> bool:
    """Whether the datagram may hold an ACKNACK or GAP whose bitmap base, plus a bit
    position, passes 2^63 - 1 (the known number_set overflow). Read off the raw bytes, not
    the reference's message (which drops a submessage whose set runs past its end, after C
    has already added): every byte that could be an ACKNACK (0x06) or GAP (0x08) id, its
    base where that submessage has it, either byte order. An over-approximation: it skips
    some inputs that would not overflow, never one that would."""
    for at in range(20, len(data)):
        kind = data[at]
        if kind not in (0x06, 0x08):
            continue
        base_at = at + 4 + (8 if kind == 0x06 else 16)
        raw = data[base_at:base_at + 8]
        if len(raw) < 8:
            continue
        for order in ("little", "big"):
            high = int.from_bytes(raw[:4], order)
            low = int.from_bytes(raw[4:], order)
            base = (high << 32 | low) - (1 << 64 if high & 0x80000000 else 0)
            if base + 256 > 2**63 - 1:
                return True
    return False


def _steer_rtps() -> None:
    """While the number_set overflow is open, the targets that reach rtps/_parse.c through the
    tracker (rtps_sockets, table) take the Python reference for a datagram that may hold
    it; every other datagram still goes to C."""
    if not guarded("rtps-number-set-overflow"):
        return
    compiled = rtps_parse.parse

    def steered(buf):  # noqa: ANN001, ANN202
        if _number_set_overflows(bytes(buf)):
            return rtps_parse.parse_python(buf)
        return compiled(buf)

    rtps_parse.parse = steered


def _rtps(data: bytes) -> None:
    """One datagram: rtps/_parse.c parse (on bytes, a memoryview and a StrictBuffer) against
    parse.py parse_python, submessage for submessage
    (tests/protocols/rtps/test_rtps_compiled.py same)."""
    if guarded("rtps-number-set-overflow") and _number_set_overflows(data):
        return
    rtps_tests.same(data)
    rtps_tests.same(memoryview(data))
    want = rtps_parse.parse_python(data)
    assert rtps_parse.compiled.parse(StrictBuffer(data)) == want


# --- OTLP: span writing (otlp.c span, span_json, spans, spans_json) ---------------------

class _Color(int):
    """An int subclass: Python's str(v) path, never C's int."""


RESOURCE = None
HUGE = (2**63 - 1, 2**63, -(2**63), -(2**63) - 1, 2**64 - 1, 2**64, -(2**64), 2**80, -(2**100))
FLOATS = (float("nan"), -0.0, 0.0, float("inf"), float("-inf"), 5e-324, 1.7976931348623157e308,
          -1e-310, 0.1, 1e16, 2.0**53 + 1)
TEXTS = ("", "é→\u2028", "\x00\x1f\"\\/\x7f", "\ud800", "\udfff x", "😀" * 3, "a" * 300)


def _value(fdp, depth: int = 0):  # noqa: ANN001, ANN202
    k = fdp.ConsumeIntInRange(0, 15)
    if k == 0:
        return fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 40))
    if k == 1:
        return TEXTS[fdp.ConsumeIntInRange(0, len(TEXTS) - 1)]
    if k == 2:
        return fdp.ConsumeBool()
    if k == 3:
        return fdp.ConsumeIntInRange(-(2**63), 2**63 - 1)
    if k == 4:
        return HUGE[fdp.ConsumeIntInRange(0, len(HUGE) - 1)]
    if k == 5:
        return fdp.ConsumeFloat()
    if k == 6:
        return FLOATS[fdp.ConsumeIntInRange(0, len(FLOATS) - 1)]
    if k == 7:
        return fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 12))
    if k in (8, 9) and depth < 4 and not (depth and guarded("otlp-nested-list-reference")):
        # lists, nested ones too (while the Python encoders refuse those, not nested)
        items = [_value(fdp, depth + 1) for _ in range(fdp.ConsumeIntInRange(0, 5))]
        return items if k == 8 else tuple(items)
    if k == 10:
        return None
    if k == 11:
        return _Color(fdp.ConsumeIntInRange(0, 3))
    if k == 12 and depth < 4:
        return {fdp.ConsumeUnicode(4): _value(fdp, depth + 1)}
    if k == 13:
        return fdp.ConsumeIntInRange(-(2**31), 2**31)
    return fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 8))


KEYS = ("a", "b", "http.request.method", "é→\u2028", "", "\ud800")


def _attrs(fdp, n: int) -> dict:  # noqa: ANN001
    """Keys mostly from a few (the same key in a span's, its events' and links' attributes:
    the encoders' pair caches are keyed by it), now and then any text."""
    return {(fdp.ConsumeUnicode(8) if fdp.ConsumeIntInRange(0, 3) == 0 else
             KEYS[fdp.ConsumeIntInRange(0, len(KEYS) - 1)]): _value(fdp)
            for _ in range(fdp.ConsumeIntInRange(0, n))}


TIMES = struct.Struct("<4QB")  # kernel start, end, wall start, end; event count


def _span_of(data: bytes) -> NeutralSpan:
    """Bytes 0-31: the span's kernel and wall start and end (u64 each), byte 32 the number
    of events (0-7), then a u64 time per event; the rest draws the name, kind, status, IDs,
    attributes (of every type, nested, past 64 bits, NaN, -0.0, surrogates), events and
    links."""
    head = data[:TIMES.size].ljust(TIMES.size, b"\0")
    kstart, kend, wall, wall_end, n_events = TIMES.unpack(head)
    n_events %= 8
    at = TIMES.size
    times = [int.from_bytes(data[at + 8 * i:at + 8 * i + 8].ljust(8, b"\0"), "little")
             for i in range(n_events)]
    fdp = atheris.FuzzedDataProvider(data[at + 8 * n_events:])
    kinds, statuses = list(SpanKind), list(StatusCode)
    ids = fdp.ConsumeIntInRange(0, 5)
    span = NeutralSpan(
        name=fdp.ConsumeUnicode(fdp.ConsumeIntInRange(0, 20)) if fdp.ConsumeBool() else "GET /",
        kind=kinds[fdp.ConsumeIntInRange(0, len(kinds) - 1)], start_ns=kstart, end_ns=kend,
        conn=conn_info(), attributes=_attrs(fdp, 8),
        status=statuses[fdp.ConsumeIntInRange(0, len(statuses) - 1)],
        status_message=TEXTS[fdp.ConsumeIntInRange(0, len(TEXTS) - 1)],
        trace_id=bytes(range(1, 17)) if ids else fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 17)),
        span_id=bytes([7] * 8) if ids != 1 else b"",
        parent_span_id=(b"", bytes(8), bytes([9] * 8), b"\x01")[fdp.ConsumeIntInRange(0, 3)],
        events=[SpanEvent(fdp.ConsumeUnicode(6), t, _attrs(fdp, 2)) for t in times],
        links=[SpanLink(bytes([5] * 16), bytes([6] * 8), _attrs(fdp, 2))
               for _ in range(fdp.ConsumeIntInRange(0, 2))],
        trace_state=("", "ot=th:c", "\ud800")[fdp.ConsumeIntInRange(0, 2)])
    global RESOURCE
    if RESOURCE is None:
        RESOURCE = resource_for({"service.name": "fuzz", "process.pid": 1})
    span.resource = RESOURCE
    span.wall_ns, span.wall_end_ns = wall, wall_end
    return span


def _otlp_seeds() -> list[bytes]:
    plain = TIMES.pack(1_000, 5_000, 1_700_000_000_000_000_000, 1_700_000_000_000_004_000, 2)
    return [plain + struct.pack("<2Q", 3_000, 9_000) + bytes(range(64)),
            TIMES.pack(0, 0, 0, 0, 0) + b"\x08\x03\x08\x05" * 8,
            TIMES.pack(2**40, 2**41, 2**60, 2**61, 1) + struct.pack("<Q", 2**40 + 7) + b"\xff" * 40]


def _encode(encode, spans: list) -> tuple[bytes | None, type | None]:  # noqa: ANN001
    try:
        return encode(spans), None
    except Exception as e:  # noqa: BLE001 - the reference's refusal, compared by type
        return None, type(e)


def _times_past_2_62(span: NeutralSpan) -> bool:
    times = [span.start_ns, span.end_ns, span.wall_ns, span.wall_end_ns,
             *(e.time_ns for e in span.events)]
    return any(t >= 2**62 for t in times)


class _NoCache(dict):
    """A pair cache that keeps nothing: the Python encoders' own meaning, _any_value of
    every value, without the cache that stands in for it."""

    def __setitem__(self, key, value) -> None:  # noqa: ANN001
        pass


def _encoded(encode, spans: list, compiled: bool, cached: bool) -> tuple:  # noqa: ANN001
    """spans encoded with the C writers (and the Python fallback for what they leave) or
    the Python encoders alone; with the pair caches, emptied first, or without any."""
    saved = _fast.otlp
    if not compiled:
        _fast.otlp = None
    caches = otlp_proto._pairs, otlp_json._pairs
    caches[0].clear()
    caches[1].clear()
    if not cached:
        otlp_proto._pairs, otlp_json._pairs = _NoCache(), _NoCache()
    try:
        return _encode(encode, spans)
    finally:
        _fast.otlp = saved
        otlp_proto._pairs, otlp_json._pairs = caches


def _otlp(data: bytes) -> None:
    """One hostile span (and a batch of it between two plain ones): the C writers
    (otlp.c through spans_to_otlp_proto / _json, and span / span_json called alone)
    against the Python encoders, byte for byte; where Python refuses (a surrogate, a time
    past 64 bits), C must leave the span to Python and the batch refuses alike. The
    encoders' pair caches start empty for each encoding (a report replays alone)."""
    import orjson

    span = _span_of(data)
    if guarded("otlp-time-overflow") and _times_past_2_62(span):
        return
    # while the cache's conflation is open both sides run without the pair caches (the C
    # writers' Python fallback uses them too)
    cached = not guarded("otlp-pair-cache-conflation")
    plain = _span_of(_otlp_seeds()[0])
    for spans in ([span], [plain, span, plain]):
        for encode in (otlp_proto.spans_to_otlp_proto, otlp_json.spans_to_otlp_json):
            fast = _encoded(encode, spans, True, cached)
            slow = _encoded(encode, spans, False, cached)
            if fast != slow and cached and _encoded(encode, spans, True, False) == \
                    _encoded(encode, spans, False, False):
                raise AssertionError(f"reference pair cache conflation: {encode.__name__} "
                                     f"wrote a cached pair for an equal value of another "
                                     f"encoding (alike without the caches): {span}")
            assert fast == slow, (encode.__name__, span, fast, slow)
    # the single-span entry points: None or bytes, never a crash
    for got in (_fast.otlp.span(span), _fast.otlp.span_json(span, orjson.dumps)):
        assert got is None or type(got) is bytes


# --- the connection table's loop (table.c data_run) and the data step (conn.c data) ------

TABLE_PARSERS = ["http1", "http2", "rtps", "llm", "vectordb"]
TABLE_PIECES: list[bytes] = []


def _table_events(fdp) -> list:  # noqa: ANN001
    """Opens for four connections (HTTP/1 client, HTTP/2 server, a datagram socket with its
    peer, one of bytes no parser wants), then up to 48 events: data both ways (a piece or
    raw bytes, positions with gaps, a tail, TLS), closes, exits, task births, reopens."""
    if not TABLE_PIECES:
        TABLE_PIECES.extend([*FRAGMENTS, *(m for ex in EXCHANGES for m in ex), *H2_FRAGMENTS,
                             *DATAGRAMS[:20]])
    t = 1_000
    conns = [((100, 5, 1), Role.CLIENT, abi.CONN_F_STREAM | abi.CONN_F_TCP, None),
             ((101, 6, 1), Role.SERVER, abi.CONN_F_STREAM | abi.CONN_F_TCP, None),
             ((102, 7, 1), Role.CLIENT, 0, ("10.0.0.9", 7400)),
             ((103, 8, 1), Role.CLIENT, abi.CONN_F_STREAM, None)]
    events: list = []
    pos = {}
    for key, role, flags, _ in conns:
        if fdp.ConsumeIntInRange(0, 7):  # now and then an open was lost
            events.append(abi.ConnOpen(key=key, ts_ns=t, tid=key[0], role=role, flags=flags,
                                       family=2, local_addr="127.0.0.1", local_port=key[1],
                                       remote_addr="127.0.0.1", remote_port=9000, comm="x"))
        pos[key] = [0, 0]
    for _ in range(fdp.ConsumeIntInRange(0, 48)):
        if fdp.remaining_bytes() == 0:
            break
        t += fdp.ConsumeIntInRange(1, 10**9)
        key, role, flags, peer = conns[fdp.ConsumeIntInRange(0, len(conns) - 1)]
        what = fdp.ConsumeIntInRange(0, 15)
        if what == 12:
            events.append(abi.ConnClose(key=key, ts_ns=t, bytes_sent=pos[key][0],
                                        bytes_recv=pos[key][1]))
            continue
        if what == 13:
            events.append(abi.ProcessExit(pid=key[0], ts_ns=t))
            continue
        if what == 14:
            events.append(abi.TaskNew(pid=key[0], tid=key[0] + 1, ts_ns=t, task=0x1000,
                                      parent=0))
            continue
        d = fdp.ConsumeIntInRange(0, 1)
        direction = (Direction.EGRESS, Direction.INGRESS)[d]
        payload = fuzz_chunk(fdp, TABLE_PIECES)
        msg_len = len(payload)
        tail = b""
        if what == 15:  # cut short: more moved than captured, a tail of its end
            msg_len += fdp.ConsumeIntInRange(1, 100_000)
            tail = fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 16))
        if fdp.ConsumeProbability() < 0.05:
            pos[key][d] += fdp.ConsumeIntInRange(1, 70_000)  # a lost event
        events.append(abi.DataEvent(
            key=key, tid=key[0] * 10 + fdp.ConsumeIntInRange(0, 3), enter_ns=t,
            exit_ns=t + fdp.ConsumeIntInRange(0, 5000), direction=direction, pos=pos[key][d],
            msg_len=msg_len, tcp_seq=None if flags == 0 else pos[key][d] & 0xFFFFFFFF,
            payload=payload, peer=peer, task=fdp.ConsumeIntInRange(0, 2) * 0x1000,
            tail=tail, tls=fdp.ConsumeProbability() < 0.05))
        pos[key][d] += msg_len
    return events


_ENTRY_POINTS: dict[str, dict] = {}


def _loaded(group: str) -> dict:
    """registry._load, once per group: the entry-point scan is nine tenths of an input's time
    otherwise; the classes are the same every time."""
    if group not in _ENTRY_POINTS:
        _ENTRY_POINTS[group] = _registry_load(group)
    return dict(_ENTRY_POINTS[group])


_registry_load = registry_module._load
registry_module._load = _loaded


def _table_run(events: list, cuts: list[int], compiled: bool) -> tuple[list, list]:
    registry = Registry.from_config(TABLE_PARSERS,
                                    {"http1": {"correlation_headers": ["x-request-id"]}})
    table = ConnTable(registry, Stats(), 64, 300 * 10**9)
    assert table.data_run is not None
    if not compiled:
        table.data_run = None
    out, states, i = [], [], 0
    for n in cuts:
        if i >= len(events):
            break
        spans = table.handle(events[i:i + n])
        i += n
        out.append(table_tests.plain((spans, table.observed)))
        table.observed.clear()
        states.append((list(table.conns), list(table.last_read.items()), list(table.to_mute),
                       table.stats.snapshot()))
        table.to_mute.clear()
    out.append(table_tests.plain(table.close_all()))
    return out, states


def _table(data: bytes) -> None:
    """A poll's events in batches through ConnTable.handle twice: with the compiled loop
    (table.c data_run, and conn.c data as its step, http1/_parse.c whole and http2/_parse.c
    behind it) and with the reference loop: the same spans, frames, LRU order, threads' last reads,
    connections to mute and counts (tests/unit/test_table_compiled.py)."""
    fdp = atheris.FuzzedDataProvider(data)
    small = fdp.ConsumeBool()
    events = _table_events(fdp)
    cuts = [fdp.ConsumeIntInRange(1, 16) for _ in range(len(events))] + [len(events)]
    saved = table_module.LAST_READ_THREADS
    table_module.LAST_READ_THREADS = 2 if small else saved
    try:
        compiled = _table_run(events, cuts, True)
        reference = _table_run(events, cuts, False)
    finally:
        table_module.LAST_READ_THREADS = saved
    assert compiled[1] == reference[1]
    assert compiled[0] == reference[0]


# --- the targets --------------------------------------------------------------------------

class _Totals:
    def add(self, *args, **kwargs) -> None:  # noqa: ANN002, ANN003
        pass


def _old(make) -> Callable[[bytes], None]:  # noqa: ANN001
    """A target of bench/fuzz/targets.py (the Python-side campaign's, some differential),
    imported only for the targets that use it (its imports take seconds)."""
    import bench.fuzz.targets as old  # noqa: PLC0415

    fn, totals = make(old), _Totals()
    return lambda data: fn(data, totals)


def _h1_pieces() -> list[bytes]:
    return FRAGMENTS + [b for ex in EXCHANGES for b in ex]


# name -> (what one input does, its seed inputs, what it covers)
TARGETS: dict[str, tuple[Callable[[], Callable[[bytes], None]], Callable[[], list[bytes]], str]] = {
    "ring": (lambda: _ring, _ring_seeds,
             "ring.c decode: data (with peer, tail, wide, TLS), close, task records built in "
             "C, the rest handed back; against abi.decode"),
    "http1_head": (lambda: _http1_head, _h1_head_seeds,
                   "http1/_parse.c head: request and status lines, headers, Content-Length, "
                   "chunked; against llhttp; StrictBuffer (exact size, freed on release)"),
    "http1_whole": (lambda: _http1_whole, _h1_head_seeds,
                    "http1/_parse.c whole: one syscall one message, HTTP1State bookkeeping; "
                    "against parse.py whole and the general path"),
    "http1_chunks": (lambda: _http1_chunks, _h1_chunk_seeds,
                     "http1/_parse.c chunks: the chunked body walk (sizes, extensions, trailers, "
                     "kept pieces, limits); against parse.py _chunks"),
    "http1_conn": (lambda: _old(lambda old: old._http1_differential(_h1_pieces())), _random_seeds,
                   "conn.c data + http1/_parse.c whole/chunks/span through the connection "
                   "tracker, scripts of syscalls both ways; against llhttp and on_data"),
    "sse": (lambda: _sse, _sse_seeds,
            "llm/_stream.c whole_pieces: SSE events of pieces, gaps; against stream.py"),
    "sse_openai": (lambda: _sse_openai, _sse_seeds,
                   "llm/_stream.c openai_events: OpenAI chat/completions chunk JSON into "
                   "ResponseInfo; against events.read_events"),
    "llm_openai": (lambda: _old(lambda old: old._llm_openai(old._openai_pieces(old._json_bits()))),
                   _random_seeds,
                   "llm/_stream.c openai_events + http1/_parse.c chunks inside HTTP/1 streams "
                   "through the LLM layer; spans against the Python chunk reader"),
    "http2_frames": (lambda: _http2_frames, _random_seeds,
                     "http2/_parse.c parse: frames, padding, priority, CONTINUATION, SETTINGS, "
                     "gRPC DATA, the reused-block HPACK answers; against parse.py, whole state"),
    "http2_conn": (lambda: _old(lambda old: old._http2_differential(old.http2_fragments())), _random_seeds,
                   "http2/_parse.c + conn.c stream step + http2/_stitch.c pair/span through the "
                   "tracker; records, spans, counters against the Python path"),
    "h2span_pair": (lambda: _hypothesis_target(h2span_tests.test_pairing_alike),
                    _hypothesis_seeds,
                    "http2/_stitch.c pair: streams paired into records, expiry, the stream table; "
                    "against stitch.py (Hypothesis-drawn)"),
    "h2span_span": (lambda: _hypothesis_target(h2span_tests.test_grpc_spans_alike),
                    _hypothesis_seeds,
                    "http2/_stitch.c span: gRPC spans of records; against spans.py "
                    "(Hypothesis-drawn)"),
    "rtps": (lambda: _rtps, _rtps_seeds,
             "rtps/_parse.c parse: every submessage kind, number sets, parameter lists, "
             "endianness, truncation; against parse_python"),
    "rtps_sockets": (lambda: _old(lambda old: old._rtps), _random_seeds,
                     "rtps/_parse.c through the tracker: datagrams on three sockets, discovery, "
                     "reassembly"),
    "otlp": (lambda: _otlp, _otlp_seeds,
             "otlp.c span/spans/span_json/spans_json: hostile attributes (nested lists, "
             "ints past 64 bits, NaN, -0.0, surrogates), any times; against otlp_proto/json"),
    "table": (lambda: _table, _random_seeds,
              "table.c data_run + conn.c data: batches of data, close, exit, task events on "
              "four connections; against ConnTable.handle's own loop"),
}


from bench.fuzz import sanitize as _campaign  # noqa: E402

if tuple(TARGETS) != _campaign.TARGETS:
    sys.exit("bench.fuzz.sanitized: TARGETS and bench/fuzz/sanitize.py TARGETS differ")


def _one(name: str) -> Callable[[bytes], None]:
    if name not in TARGETS:
        sys.exit(f"unknown target {name!r}: one of {', '.join(TARGETS)}")
    _steer_rtps()
    return TARGETS[name][0]()


def _replay(name: str, files: list[str]) -> int:
    one = _one(name)
    for f in files:
        print(f"replay {name}: {f}", flush=True)
        one(Path(f).read_bytes())
    print(f"replay {name}: {len(files)} inputs passed", flush=True)
    return 0


def _fuzz(name: str, argv: list[str]) -> None:
    one = _one(name)
    if argv[:1] == ["--seeds"]:
        seed_dir = Path(argv[1])
        seed_dir.mkdir(parents=True, exist_ok=True)
        for i, seed in enumerate(TARGETS[name][1]()):
            (seed_dir / f"seed-{i:03d}").write_bytes(seed)
        argv = argv[2:]
    program = sys.argv[0]
    if any(a.startswith("-merge=") for a in argv):
        # libFuzzer's merge runs argv[0] again as a program: this module, as one
        import tempfile  # noqa: PLC0415

        wrapper = Path(tempfile.mkdtemp(prefix="fuzz-merge-")) / "target"
        wrapper.write_text(f"#!/bin/sh\nexec {sys.executable} -m bench.fuzz.sanitized fuzz "
                           f"{name} \"$@\"\n")
        wrapper.chmod(0o755)
        program = str(wrapper)
    atheris.Setup([program, *argv], one)
    atheris.Fuzz()


def main() -> int:
    args = sys.argv[1:]
    if args[:1] == ["list"]:
        for name, (_, _, what) in TARGETS.items():
            print(f"{name}: {what}")
        return 0
    if len(args) >= 2 and args[0] == "replay":
        return _replay(args[1], args[2:])
    if len(args) >= 2 and args[0] == "fuzz":
        _fuzz(args[1], args[2:])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
