"""The redis parser through the real connection tracker: every RESP2/RESP3 type, whole and
byte by byte, pipelines, transactions, pub/sub pushes, errors, large values, garbage."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.base import Direction, Role, SpanKind, StatusCode
from otel_ebpf.protocols.redis import RedisParser
from otel_ebpf.protocols.redis.resp import RESPState
from otel_ebpf.protocols.testing import REQ, RESP, TICK, ConnectionDriver, conn_info, run_exchange

MODES = ("whole", "bytes", "garbage")
GARBAGE = b"\x00\xffnot resp\r\n"


def cmd(*args: str | bytes) -> bytes:
    """A command as clients send it: an array of bulk strings."""
    out = [b"*%d\r\n" % len(args)]
    for a in args:
        a = a.encode() if isinstance(a, str) else a
        out.append(b"$%d\r\n%s\r\n" % (len(a), a))
    return b"".join(out)


def bulk(value: bytes) -> bytes:
    return b"$%d\r\n%s\r\n" % (len(value), value)


def spans_of(events, mode="whole", parser=None, role=Role.CLIENT, **kw):
    driver = run_exchange(parser or RedisParser(), conn_info(role), events, mode, GARBAGE, **kw)
    return driver, driver.spans()


# every reply type RESP2 and RESP3 define (streamed aggregates aside), as a server sends it
REPLIES = {
    "simple": b"+OK\r\n",
    "error": b"-ERR unknown command 'FOO'\r\n",
    "integer": b":-42\r\n",
    "bulk": bulk(b"hello"),
    "null bulk": b"$-1\r\n",
    "array": b"*3\r\n:1\r\n$1\r\nx\r\n*1\r\n+nested\r\n",
    "null array": b"*-1\r\n",
    "empty array": b"*0\r\n",
    "null": b"_\r\n",
    "double": b",3.14e10\r\n",
    "boolean": b"#t\r\n",
    "big number": b"(3492890328409238509324850943850943825024385\r\n",
    "blob error": b"!21\r\nSYNTAX invalid syntax\r\n",
    "verbatim": b"=15\r\ntxt:Some string\r\n",
    "map": b"%2\r\n+first\r\n:1\r\n$6\r\nsecond\r\n#f\r\n",
    "set": b"~3\r\n+a\r\n+b\r\n_\r\n",
    "attribute": b"|1\r\n+key-popularity\r\n%1\r\n$1\r\na\r\n,0.19\r\n*2\r\n:2\r\n:3\r\n",
    "nested attribute": b"*2\r\n|1\r\n+ttl\r\n:3600\r\n:1\r\n:2\r\n",
}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("reply", REPLIES)
def test_every_reply_type_ends_one_exchange(reply, mode):
    # a second command after it: the reply must end exactly where it ends
    events = [(REQ, cmd("GET", "k")), (RESP, REPLIES[reply]), (REQ, cmd("PING")), (RESP, b"+PONG\r\n")]
    driver, spans = spans_of(events, mode)
    assert [s.name for s in spans] == ["GET", "PING"]
    get = spans[0]
    assert get.attributes["db.system.name"] == "redis"
    assert get.attributes["db.operation.name"] == "GET"
    if reply in ("error", "blob error"):
        code = "ERR" if reply == "error" else "SYNTAX"
        assert get.status == StatusCode.ERROR
        assert get.attributes["db.response.status_code"] == get.attributes["error.type"] == code
    else:
        assert get.status == StatusCode.UNSET and "error.type" not in get.attributes
    assert spans[1].status == StatusCode.UNSET
    assert driver.state.orphans == 0
    if mode != "garbage":
        assert driver.invalid == 0


def test_a_get_span_carries_the_conventions_attributes():
    _, (span,) = spans_of([(REQ, cmd("GET", "user:1")), (RESP, bulk(b"secret-value"))])
    assert span.kind == SpanKind.CLIENT
    assert span.attributes == {
        "db.system.name": "redis", "db.operation.name": "GET", "db.query.text": "GET ?",
        "db.namespace": "0", "network.protocol.name": "redis", "network.transport": "tcp",
        "network.type": "ipv4", "network.peer.address": "10.0.0.2", "network.peer.port": 8080,
        "server.address": "10.0.0.2", "server.port": 8080}
    assert span.request_pos == 0 and span.request_seq is not None  # correlation evidence


def test_the_server_side_is_a_server_span_with_the_client_address():
    _, (span,) = spans_of([(REQ, cmd("SET", "k", "v")), (RESP, b"+OK\r\n")], role=Role.SERVER)
    assert span.kind == SpanKind.SERVER
    assert span.attributes["server.port"] == 8080
    assert span.attributes["client.address"] == "10.0.0.2"


def test_keys_only_with_capture_keys_and_values_never():
    events = [(REQ, cmd("SET", "user:42", "planted-value")), (RESP, b"+OK\r\n"),
              (REQ, cmd("AUTH", "admin", "hunter2")), (RESP, b"+OK\r\n"),
              (REQ, cmd("HSET", "h", "field", "planted-value")), (RESP, b":1\r\n")]
    _, plain = spans_of(events)
    assert [s.attributes["db.query.text"] for s in plain] == ["SET ? ?", "AUTH ? ?", "HSET ? ? ?"]
    _, keyed = spans_of(events, parser=RedisParser({"capture_keys": True}))
    assert [s.attributes["db.query.text"] for s in keyed] == [
        "SET user:42 ?", "AUTH ? ?", "HSET h ? ?"]
    for span in plain + keyed:
        assert not any("planted-value" in str(v) or "hunter2" in str(v)
                       for v in span.attributes.values())


def test_subcommands_name_the_operation():
    _, spans = spans_of([(REQ, cmd("client", "setname", "app")), (RESP, b"+OK\r\n"),
                         (REQ, cmd("CONFIG", "GET", "maxmemory")), (RESP, b"*2\r\n$9\r\nmaxmemory\r\n$1\r\n0\r\n")])
    assert [s.name for s in spans] == ["CLIENT SETNAME", "CONFIG GET"]
    assert spans[0].attributes["db.query.text"] == "CLIENT SETNAME ?"


@pytest.mark.parametrize("mode", MODES)
def test_a_pipeline_pairs_n_replies_with_n_commands_in_order(mode):
    commands = b"".join([cmd("SET", "a", "1"), cmd("GET", "a"), cmd("INCR", "a"),
                         cmd("LPUSH", "a", "x"), cmd("GET", "missing")])
    replies = b"+OK\r\n" + bulk(b"1") + b":2\r\n-WRONGTYPE Operation against a key\r\n$-1\r\n"
    driver, spans = spans_of([(REQ, commands), (RESP, replies)], mode)
    assert [s.name for s in spans] == ["SET", "GET", "INCR", "LPUSH", "GET"]
    assert [s.status for s in spans] == [StatusCode.UNSET] * 3 + [StatusCode.ERROR, StatusCode.UNSET]
    assert spans[3].attributes["db.response.status_code"] == "WRONGTYPE"
    assert len({s.request_pos for s in spans}) == 5  # each its own request


def test_select_moves_the_namespace_of_later_commands_in_a_pipeline():
    commands = cmd("GET", "a") + cmd("SELECT", "7") + cmd("GET", "a") + cmd("SELECT", "x")
    _, spans = spans_of([(REQ, commands + cmd("GET", "b")),
                         (RESP, b"$-1\r\n+OK\r\n$-1\r\n-ERR invalid DB index\r\n$-1\r\n")])
    assert [s.attributes["db.namespace"] for s in spans] == ["0", "7", "7", "7", "7"]


@pytest.mark.parametrize("mode", MODES)
def test_multi_exec_queued_commands_and_the_batch(mode):
    events = [(REQ, cmd("MULTI") + cmd("INCR", "n") + cmd("SET", "k", "v") + cmd("EXEC")),
              (RESP, b"+OK\r\n+QUEUED\r\n+QUEUED\r\n*2\r\n:1\r\n+OK\r\n"),
              (REQ, cmd("GET", "k")), (RESP, b"+QUEUED\r\n")]  # a value that reads QUEUED
    _, spans = spans_of(events, mode)
    assert [s.name for s in spans] == ["MULTI", "INCR", "SET", "EXEC", "GET"]
    assert [bool(s.attributes.get("otel_ebpf.redis.queued")) for s in spans] == [
        False, True, True, False, False]
    assert spans[3].attributes["db.operation.batch.size"] == 2


def test_a_transaction_aborted_by_a_bad_command_fails_exec():
    events = [(REQ, cmd("MULTI")), (RESP, b"+OK\r\n"), (REQ, cmd("NOPE")),
              (RESP, b"-ERR unknown command 'NOPE'\r\n"), (REQ, cmd("EXEC")),
              (RESP, b"-EXECABORT Transaction discarded because of previous errors.\r\n")]
    _, spans = spans_of(events)
    assert [s.attributes.get("error.type") for s in spans] == [None, "ERR", "EXECABORT"]


@pytest.mark.parametrize("mode", MODES)
def test_resp2_pubsub_messages_are_pushes_not_replies(mode):
    events = [(REQ, cmd("SUBSCRIBE", "a", "b")),
              (RESP, b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n"
                     b"*3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n"),
              (RESP, b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$5\r\nhello\r\n"),
              (REQ, cmd("PING")),
              (RESP, b"*3\r\n$7\r\nmessage\r\n$1\r\nb\r\n$2\r\nyo\r\n"),  # before PING's reply
              (RESP, b"*2\r\n$4\r\npong\r\n$0\r\n\r\n"),
              (REQ, cmd("UNSUBSCRIBE")),
              (RESP, b"*3\r\n$11\r\nunsubscribe\r\n$1\r\na\r\n:1\r\n"
                     b"*3\r\n$11\r\nunsubscribe\r\n$1\r\nb\r\n:0\r\n"),
              (REQ, cmd("LRANGE", "l", "0", "-1")),  # out of pub/sub: arrays are replies again
              (RESP, b"*2\r\n$7\r\nmessage\r\n$1\r\nx\r\n")]
    driver, spans = spans_of(events, mode)
    assert [s.name for s in spans] == ["SUBSCRIBE", "PING", "UNSUBSCRIBE", "LRANGE"]
    assert driver.state.orphans == 0
    assert driver.state.pushes == 3  # two messages, the second unsubscribe confirmation
    # SUBSCRIBE a b ends at its second confirmation
    assert spans[0].end_ns > spans[0].start_ns


@pytest.mark.parametrize("mode", MODES)
def test_resp3_hello_then_pushes_between_replies(mode):
    hello = (b"%7\r\n$6\r\nserver\r\n$5\r\nredis\r\n$7\r\nversion\r\n$5\r\n7.2.4\r\n"
             b"$5\r\nproto\r\n:3\r\n$2\r\nid\r\n:5\r\n$4\r\nmode\r\n$10\r\nstandalone\r\n"
             b"$4\r\nrole\r\n$6\r\nmaster\r\n$7\r\nmodules\r\n*0\r\n")
    events = [(REQ, cmd("HELLO", "3")), (RESP, hello),
              (REQ, cmd("SUBSCRIBE", "c")), (RESP, b">3\r\n$9\r\nsubscribe\r\n$1\r\nc\r\n:1\r\n"),
              (REQ, cmd("GET", "k")),
              (RESP, b">3\r\n$7\r\nmessage\r\n$1\r\nc\r\n$3\r\nhey\r\n"),
              (RESP, b">2\r\n$10\r\ninvalidate\r\n*1\r\n$1\r\nk\r\n"),
              (RESP, bulk(b"v"))]
    driver, spans = spans_of(events, mode)
    assert [s.name for s in spans] == ["HELLO", "SUBSCRIBE", "GET"]
    assert driver.state.pushes == 2 and driver.state.orphans == 0
    assert all(s.status == StatusCode.UNSET for s in spans)


def test_inline_commands():
    events = [(REQ, b"PING\r\n"), (RESP, b"+PONG\r\n"), (REQ, b"\r\n"),
              (REQ, b"set k v\r\n"), (RESP, b"+OK\r\n")]
    for mode in MODES:
        _, spans = spans_of(events, mode)
        assert [s.name for s in spans] == ["PING", "SET"]
        assert spans[1].attributes["db.query.text"] == "SET ? ?"


def test_infer_claims_commands_and_leaves_other_protocols():
    parser = RedisParser()
    conn = conn_info()
    assert parser.infer(Direction.EGRESS, cmd("GET", "k"), conn) == Role.CLIENT
    assert parser.infer(Direction.INGRESS, cmd("JSON.GET", "k"), conn) == Role.SERVER
    assert parser.infer(Direction.EGRESS, b"PING\r\n", conn) == Role.CLIENT
    for other in (b"GET / HTTP/1.1\r\n", b"get k\r\n", b"+OK\r\n", b"*2\r\n:1\r\n",
                  b"EHLO mail\r\n", b"\x16\x03\x01\x02\x00", b"*x\r\n"):
        assert parser.infer(Direction.EGRESS, other, conn) is None, other


def test_a_large_value_is_stepped_over_not_buffered():
    big = b"x" * 300_000
    driver = ConnectionDriver(RedisParser(), conn_info())
    # the client writes it in one call, the kernel captured 4096 bytes of it
    request = cmd("SET", "k", big)
    driver.feed(Direction.EGRESS, request[:4096], gap=len(request) - 4096)
    reply = bulk(big)
    driver.feed(Direction.INGRESS, reply[:4096], gap=len(reply) - 4096)
    driver.feed(Direction.EGRESS, cmd("GET", "k"))
    driver.feed(Direction.INGRESS, reply[:100])  # read in pieces
    for at in range(100, len(reply), 65536):
        driver.feed(Direction.INGRESS, reply[at:at + 65536])
        # nothing of the value is held: the decoder skips it by length
        assert len(driver.connection.streams[Direction.INGRESS].buf) < 70_000
    driver.close()
    spans = driver.spans()
    assert [s.name for s in spans] == ["SET", "GET"]
    assert driver.invalid == 0 and driver.state.orphans == 0


def test_unanswered_commands_time_out_or_end_with_the_close():
    driver = ConnectionDriver(RedisParser({"response_timeout": "1s"}), conn_info())
    driver.feed(Direction.EGRESS, cmd("BLPOP", "q", "0"))
    driver.tick(driver.now + 2 * 10**9)
    driver.feed(Direction.EGRESS, cmd("GET", "k"))
    driver.close()
    spans = driver.spans()
    assert [(s.name, s.attributes["error.type"]) for s in spans] == [
        ("BLPOP", "timeout"), ("GET", "connection_closed")]


def test_lost_reply_bytes_do_not_shift_later_pairs():
    driver = ConnectionDriver(RedisParser(), conn_info())
    driver.feed(Direction.EGRESS, cmd("GET", "a"))
    driver.feed(Direction.INGRESS, b"*2\r\n", gap=14)  # the reply's elements never captured
    driver.feed(Direction.EGRESS, cmd("GET", "b"))
    driver.feed(Direction.INGRESS, bulk(b"bb"))
    driver.close()
    spans = driver.spans()
    assert driver.stats.total("gaps") == 1
    assert [s.name for s in spans] == ["GET", "GET"]
    assert spans[1].request_pos > 0 and spans[1].status == StatusCode.UNSET
    assert "error.type" not in spans[0].attributes  # its answer was lost, not failed


def test_capture_begun_mid_connection_leaves_the_namespace_unknown_until_select():
    events = [(RESP, b"+OK\r\n"), (REQ, cmd("GET", "a")), (RESP, b"$-1\r\n"),
              (REQ, cmd("SELECT", "2")), (RESP, b"+OK\r\n"), (REQ, cmd("GET", "a")),
              (RESP, b"$-1\r\n")]
    driver, spans = spans_of(events, midstream=True)
    assert [s.attributes.get("db.namespace") for s in spans] == [None, "2", "2"]
    assert driver.state.orphans == 1


def test_garbage_in_the_reply_direction_is_counted_not_raised():
    driver, spans = spans_of([(REQ, cmd("GET", "a")), (RESP, b"?what\r\n"),
                              (REQ, cmd("GET", "b")), (RESP, b"$1\r\nb\r\n")])
    assert driver.invalid >= 1
    assert [s.name for s in spans] == ["GET", "GET"]


def test_options_are_declared_and_typed():
    parser = RedisParser({"response_timeout": "250ms", "capture_keys": "on"})
    assert parser.timeout_ns == 250_000_000 and parser.capture_keys is True
    assert RedisParser.default_enabled and set(RedisParser.option_schema) == {
        "response_timeout", "capture_keys"}
    with pytest.raises(ValueError, match="redis.capture_keys"):
        RedisParser({"capture_keys": "maybe"})


def test_state_is_bounded_per_direction():
    state = RESPState(conn_info())
    assert state.decoders[0].requests and not state.decoders[1].requests
    # a deep nesting past the bound is not RESP a server sends
    driver, _ = spans_of([(REQ, cmd("GET", "a")), (RESP, b"*1\r\n" * 40 + b":1\r\n")])
    assert driver.invalid >= 1


def test_a_tick_alone_closes_nothing_early():
    _, spans = spans_of([(REQ, cmd("GET", "a")), (TICK, 5 * 10**9), (RESP, b"$-1\r\n")])
    assert [s.status for s in spans] == [StatusCode.UNSET]


def _frames(events, monkeypatch=None):
    driver = ConnectionDriver(RedisParser(), conn_info())
    out = []
    for direction, data in events:
        driver.feed(direction, data)
        for d in Direction:
            out += [(f.direction, f.stream_pos, f.size, f.args, f.argc, f.kind, f.error, f.text,
                     f.head, f.count, f.start_ns, f.end_ns) for f in driver.state.frames[d]]
            driver.state.frames[d].clear()
    return out, driver.invalid


def test_the_whole_syscall_step_makes_the_frames_the_general_loop_makes(monkeypatch):
    import random

    from otel_ebpf.protocols.redis import fuzz, resp
    rng = random.Random(7)
    pieces = [(Direction.EGRESS, c) for c in fuzz.COMMANDS] + \
             [(Direction.INGRESS, r) for r in fuzz.REPLIES] + \
             [(Direction.EGRESS, cmd("SET", "k" * 200, "v")), (Direction.EGRESS, cmd("GET", "a") * 3),
              (Direction.INGRESS, b"-" + b"E" * 600 + b"\r\n"), (Direction.INGRESS, b"$3\r\nabcd\r\n")]
    scripts = [rng.choices(pieces, k=12) for _ in range(300)]
    fast = [_frames(s) for s in scripts]
    monkeypatch.setattr(resp, "_simple", lambda data, requests: None)
    assert [_frames(s) for s in scripts] == fast


def test_commands_waiting_are_bounded_and_later_replies_still_pair_in_order(monkeypatch):
    import importlib
    monkeypatch.setattr(importlib.import_module("otel_ebpf.protocols.redis.pair"),
                        "MAX_WAITING", 4)
    driver = ConnectionDriver(RedisParser(), conn_info())
    for i in range(6):
        driver.feed(Direction.EGRESS, cmd("GET", f"k{i}"))
    assert len(driver.state.frames[Direction.EGRESS]) == 4
    driver.feed(Direction.INGRESS, b"".join(bulk(b"v%d" % i) for i in range(5)) + b"-ERR last\r\n")
    driver.close()
    spans = driver.spans()
    assert len(spans) == 6 and driver.state.evicted == 2 and driver.state.orphans == 0
    assert spans[-1].attributes["error.type"] == "ERR"  # the sixth reply, the sixth command
    assert RedisParser().counters(driver.state)["evicted"] == 2
