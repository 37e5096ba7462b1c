"""The postgres parser through the agent's connection tracker: simple and extended query
(pipelined), COPY, errors, SSL/GSS requests, cancel, statements prepared before capture,
any split of the bytes, garbage, bounded memory for large rows."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.base import Direction, Role, SpanKind, StatusCode
from otel_ebpf.protocols.postgres import PostgresParser
from otel_ebpf.protocols.testing import REQ, RESP, TICK, ConnectionDriver, conn_info, run_exchange

from . import messages as m

MODES = ("whole", "bytes", "garbage")
GARBAGE = b"\xff\x00garbage\x16\x03"
HELLO = [(REQ, m.startup()), (RESP, m.server_hello())]


def spans_of(events, mode="whole", role=Role.CLIENT, parser=None, **kw):
    driver = run_exchange(parser or PostgresParser(), conn_info(role), events, mode, GARBAGE,
                          **kw)
    return driver, driver.spans()


@pytest.mark.parametrize("mode", MODES)
def test_simple_query_with_rows(mode):
    events = HELLO + [
        (REQ, m.query("SELECT id, name FROM users WHERE email = 'secret@x.org' AND id > 41")),
        (RESP, m.row_description("id", "name") + m.data_row(b"42", b"ann")
         + m.data_row(b"43", b"bob") + m.complete("SELECT 2") + m.ready()),
    ]
    driver, spans = spans_of(events, mode)
    (span,) = spans
    a = span.attributes
    assert span.name == "SELECT users" and span.kind == SpanKind.CLIENT
    assert a["db.system.name"] == "postgresql" and a["db.namespace"] == "shop"
    assert a["db.query.text"] == "SELECT id, name FROM users WHERE email = ? AND id > ?"
    assert (a["db.operation.name"], a["db.collection.name"]) == ("SELECT", "users")
    assert a["db.response.returned_rows"] == 2
    assert "secret" not in repr(span) and "41" not in a["db.query.text"]
    assert span.status == StatusCode.UNSET
    assert span.request_pos == len(m.startup())  # correlation evidence, filled by the tracker
    assert span.start_ns <= span.end_ns


@pytest.mark.parametrize("mode", MODES)
def test_several_statements_in_one_query(mode):
    events = HELLO + [
        (REQ, m.query("INSERT INTO t VALUES (1); UPDATE t SET a = 2; SELECT * FROM t")),
        (RESP, m.complete("INSERT 0 1") + m.complete("UPDATE 1") + m.row_description("a")
         + m.data_row(b"2") + m.complete("SELECT 1") + m.ready()),
    ]
    _, (span,) = spans_of(events, mode)
    a = span.attributes
    assert a["db.operation.batch.size"] == 3 and a["db.operation.name"] == "BATCH"
    assert a["db.collection.name"] == "t"
    assert a["db.query.summary"] == span.name == "INSERT t; UPDATE t; SELECT t"
    assert a["db.response.returned_rows"] == 1


@pytest.mark.parametrize("mode", MODES)
def test_pipelined_extended_protocol_pairs_in_order(mode):
    # psycopg's pipeline mode: several Parse/Bind/Execute before one Sync
    requests = (
        m.parse("SELECT name FROM users WHERE id = $1", "s1") + m.parse("DELETE FROM logs WHERE at < $1")
        + m.bind((b"secret-id-7",), "s1") + m.describe() + m.execute()
        + m.bind((b"2020-01-01",)) + m.execute()
        + m.bind((b"secret-id-8",), "s1") + m.execute() + m.SYNC)
    responses = (
        m.PARSE_COMPLETE + m.PARSE_COMPLETE + m.BIND_COMPLETE + m.row_description("name")
        + m.data_row(b"ann") + m.complete("SELECT 1") + m.BIND_COMPLETE + m.complete("DELETE 9")
        + m.BIND_COMPLETE + m.complete("SELECT 0") + m.ready())
    _, spans = spans_of(HELLO + [(REQ, requests), (RESP, responses)], mode)
    got = [(s.name, s.attributes.get("db.response.returned_rows")) for s in spans]
    assert got == [("SELECT users", 1), ("DELETE logs", None), ("SELECT users", 0)]
    assert spans[0].attributes["db.query.text"] == "SELECT name FROM users WHERE id = $1"
    assert spans[0].attributes["postgresql.statement.name"] == "s1"
    assert all("secret" not in repr(s) and "2020" not in repr(s) for s in spans)


def test_error_in_pipeline_skips_to_sync():
    requests = (m.parse("SELEC oops") + m.bind() + m.execute()
                + m.parse("SELECT 1 FROM t") + m.bind() + m.execute() + m.SYNC
                + m.parse("SELECT 2 FROM u") + m.bind() + m.execute() + m.SYNC)
    responses = (m.error("42601", "syntax error at or near \"SELEC\" secret") + m.ready()
                 + m.PARSE_COMPLETE + m.BIND_COMPLETE + m.complete("SELECT 1") + m.ready())
    driver, spans = spans_of(HELLO + [(REQ, requests), (RESP, responses)])
    assert [s.name for s in spans] == ["SELEC", "SELECT u"]
    bad = spans[0]
    assert bad.status == StatusCode.ERROR
    assert bad.attributes["db.response.status_code"] == bad.attributes["error.type"] == "42601"
    assert "secret" not in repr(bad)
    assert driver.parser.counters(driver.state)["not_executed"] == 1


@pytest.mark.parametrize("mode", MODES)
def test_simple_query_error(mode):
    events = HELLO + [(REQ, m.query("SELECT * FROM missing")),
                      (RESP, m.notice() + m.error("42P01", "relation does not exist")
                       + m.ready())]
    _, (span,) = spans_of(events, mode)
    assert span.status == StatusCode.ERROR and span.attributes["error.type"] == "42P01"


@pytest.mark.parametrize("mode", MODES)
def test_copy_in_and_out(mode):
    events = HELLO + [
        (REQ, m.query("COPY items FROM STDIN")), (RESP, m.copy_in_response()),
        (REQ, m.copy_data(b"1\tsecret-row\n" * 50) + m.copy_data(b"2\tx\n") + m.COPY_DONE),
        (RESP, m.complete("COPY 51") + m.ready()),
        (REQ, m.query("COPY (SELECT * FROM items) TO STDOUT")),
        (RESP, m.copy_out_response() + m.copy_data(b"1\tsecret-row\n" * 80) + m.COPY_DONE
         + m.complete("COPY 80") + m.ready()),
    ]
    _, spans = spans_of(events, mode)
    assert [(s.name, s.attributes["db.operation.name"]) for s in spans] == [
        ("COPY items", "COPY"), ("COPY", "COPY")]
    assert all("secret" not in repr(s) for s in spans)


@pytest.mark.parametrize("answer", [b"N"])
def test_ssl_request_refused_then_plain_startup(answer):
    events = [(REQ, m.SSL_REQUEST), (RESP, answer), (REQ, m.startup(database="inv")),
              (RESP, m.server_hello()), (REQ, m.query("SELECT 1")),
              (RESP, m.row_description("x") + m.data_row(b"1") + m.complete("SELECT 1") + m.ready())]
    for mode in MODES:
        _, (span,) = spans_of(events, mode)
        assert span.attributes["db.namespace"] == "inv" and span.name == "SELECT"


@pytest.mark.parametrize("request_", [m.SSL_REQUEST, m.GSSENC_REQUEST])
def test_encrypted_session_is_left_alone(request_):
    answer = b"S" if request_ == m.SSL_REQUEST else b"G"
    events = [(REQ, request_), (RESP, answer),
              (REQ, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(200)),
              (RESP, b"\x16\x03\x03\x00\x7a\x02" + bytes(120)),
              (REQ, b"\x17\x03\x03\x00\x40" + bytes(64))]
    for mode in ("whole", "bytes"):
        driver, spans = spans_of(events, mode)
        assert spans == [] and driver.invalid == 0
        assert driver.parser.counters(driver.state)["encrypted"] == 1


def test_cancel_request_connection():
    driver, spans = spans_of([(REQ, m.cancel())])
    assert spans == [] and driver.invalid == 0
    assert driver.parser.counters(driver.state)["cancel_requests"] == 1
    assert PostgresParser().infer(Direction.EGRESS, m.cancel(), conn_info()) == Role.CLIENT


def test_password_exchange_is_skipped_and_never_kept():
    events = [(REQ, m.startup()), (RESP, m.AUTH_MD5), (REQ, m.password("md5hunter2")),
              (RESP, m.server_hello()), (REQ, m.query("SELECT 1")),
              (RESP, m.complete("SELECT 0") + m.ready())]
    driver, (span,) = spans_of(events, "bytes")
    assert "hunter2" not in repr(span) and "hunter2" not in repr(driver.state.frames)


def test_statement_prepared_before_capture_is_unknown():
    # capture starts mid-connection: s_old was prepared earlier; s_new is seen
    events = [(REQ, m.bind((b"1",), "s_old") + m.execute() + m.SYNC),
              (RESP, m.BIND_COMPLETE + m.data_row(b"x") + m.complete("SELECT 1") + m.ready()),
              (REQ, m.parse("UPDATE accounts SET n = $1", "s_new") + m.SYNC),
              (RESP, m.PARSE_COMPLETE + m.ready()),
              (REQ, m.bind((b"9",), "s_new") + m.execute() + m.bind((b"1",), "s_old")
               + m.execute() + m.SYNC),
              (RESP, m.BIND_COMPLETE + m.complete("UPDATE 3") + m.BIND_COMPLETE
               + m.complete("SELECT 0") + m.ready())]
    parser = PostgresParser()
    driver = ConnectionDriver(parser, conn_info())
    for side, data in events:
        driver.feed(Direction.EGRESS if side == REQ else Direction.INGRESS, data)
    driver.close()
    spans = driver.spans()
    assert [s.name for s in spans] == ["SELECT", "UPDATE accounts", "SELECT"]
    for s in (spans[0], spans[2]):
        assert s.attributes["postgresql.statement.unknown"] is True
        assert "db.query.text" not in s.attributes  # never another statement's text
        assert s.attributes["db.response.returned_rows"] in (1, 0)
    assert spans[1].attributes["db.query.text"] == "UPDATE accounts SET n = $1"
    assert parser.counters(driver.state)["unknown_statements"] == 2


def test_prepared_statements_are_bounded():
    parser = PostgresParser({"max_statements": 2})
    reqs = b"".join(m.parse(f"SELECT {i} FROM t{i}", f"s{i}") for i in range(3)) + m.SYNC
    reqs2 = m.bind((), "s0") + m.execute() + m.bind((), "s2") + m.execute() + m.SYNC
    resp = m.PARSE_COMPLETE * 3 + m.ready()
    resp2 = m.BIND_COMPLETE + m.complete("SELECT 1") + m.BIND_COMPLETE + m.complete("SELECT 1") + m.ready()
    driver, spans = spans_of(HELLO + [(REQ, reqs), (RESP, resp), (REQ, reqs2), (RESP, resp2)],
                             parser=parser)
    assert [s.name for s in spans] == ["SELECT", "SELECT t2"]  # s0 was pushed out
    assert spans[0].attributes["postgresql.statement.unknown"] is True
    assert parser.counters(driver.state)["statements_evicted"] == 1


def test_closed_statement_is_forgotten_and_unnamed_replaced():
    reqs = (m.parse("SELECT a FROM x", "s") + m.close(b"S", "s") + m.parse("SELECT b FROM y")
            + m.parse("SELECT c FROM z") + m.bind((), "s") + m.execute() + m.bind() + m.execute() + m.SYNC)
    resp = (m.PARSE_COMPLETE + m.CLOSE_COMPLETE + m.PARSE_COMPLETE * 2 + m.BIND_COMPLETE
            + m.complete("SELECT 0") + m.BIND_COMPLETE + m.complete("SELECT 0") + m.ready())
    _, spans = spans_of(HELLO + [(REQ, reqs), (RESP, resp)])
    assert [s.name for s in spans] == ["SELECT", "SELECT z"]


def test_vector_search_keeps_operators_and_reports_top_k():
    text = "SELECT id FROM items ORDER BY embedding <-> '[0.123,0.456,0.789]' LIMIT 5"
    events = HELLO + [(REQ, m.query(text)), (RESP, m.data_row(b"1") + m.complete("SELECT 1") + m.ready()),
                      (REQ, m.parse("SELECT id FROM items ORDER BY embedding <=> $1 LIMIT $2")
                       + m.bind((b"[1,2,3]", b"7")) + m.execute()
                       + m.bind((b"[1,2,3]", (3).to_bytes(8, "big")), formats=(0, 1)) + m.execute()
                       + m.SYNC),
                      (RESP, m.PARSE_COMPLETE + m.BIND_COMPLETE + m.complete("SELECT 0")
                       + m.BIND_COMPLETE + m.complete("SELECT 0") + m.ready())]
    _, spans = spans_of(events)
    assert spans[0].attributes["db.query.text"] == "SELECT id FROM items ORDER BY embedding <-> ? LIMIT ?"
    assert [s.attributes["db.vector.query.top_k"] for s in spans] == [5, 7, 3]
    assert "<=>" in spans[1].attributes["db.query.text"]
    assert all("0.123" not in repr(s) and "[1,2,3]" not in repr(s) for s in spans)


def test_large_rows_are_stepped_over_without_buffering():
    big = m.data_row(b"v" * 200_000)
    driver = ConnectionDriver(PostgresParser(), conn_info())
    driver.feed(Direction.EGRESS, m.startup())
    driver.feed(Direction.INGRESS, m.server_hello())
    driver.feed(Direction.EGRESS, m.query("SELECT blob FROM files"))
    # the kernel captured the head of each write only: the rest is a gap
    for _ in range(5):
        driver.feed(Direction.INGRESS, big[:4096], gap=len(big) - 4096)
    driver.feed(Direction.INGRESS, m.complete("SELECT 5") + m.ready())
    stream = driver.connection.streams[Direction.INGRESS]
    assert len(stream.buf) < 4096
    driver.close()
    (span,) = driver.spans()
    assert span.attributes["db.response.returned_rows"] == 5 and driver.invalid == 0


def test_timeout_and_close():
    parser = PostgresParser({"response_timeout": "1s"})
    events = HELLO + [(REQ, m.query("SELECT pg_sleep(10)")), (TICK, 5 * 10**9)]
    driver, (span,) = spans_of(events, parser=parser, close=False)
    assert span.attributes["error.type"] == "timeout"
    _, (span,) = spans_of(HELLO + [(REQ, m.query("SELECT 1"))])
    assert span.attributes["error.type"] == "connection_closed"


def test_server_side_spans():
    events = HELLO + [(REQ, m.query("DELETE FROM t WHERE id = 3")),
                      (RESP, m.complete("DELETE 1") + m.ready())]
    for mode in MODES:
        _, (span,) = spans_of(events, mode, role=Role.SERVER)
        assert span.kind == SpanKind.SERVER and span.name == "DELETE t"


def test_midstream_start_resyncs():
    events = [(REQ, m.query("SELECT * FROM a")[3:] + m.query("SELECT * FROM b")),
              (RESP, m.data_row(b"x")[2:] + m.complete("SELECT 1") + m.ready()
                     + m.complete("SELECT 0") + m.ready())]
    _, spans = spans_of(events, midstream=True)
    assert "SELECT b" in [s.name for s in spans]


def test_infer():
    p, c = PostgresParser(), conn_info()
    assert p.infer(Direction.EGRESS, m.startup(), c) == Role.CLIENT
    assert p.infer(Direction.INGRESS, m.startup(), c) == Role.SERVER
    assert p.infer(Direction.EGRESS, m.SSL_REQUEST, c) == Role.CLIENT
    assert p.infer(Direction.EGRESS, m.query("select 1"), c) == Role.CLIENT
    assert p.infer(Direction.EGRESS, m.parse("SELECT $1", "s"), c) == Role.CLIENT
    for head in (b"GET / HTTP/1.1\r\n", b"PRI * HTTP/2.0", b"\x00\x00\x00\x08\x00\x00\x00\x00",
                 b"Q\x00\x00\x00\x05\x00", b"Quit\r\n", b"\x16\x03\x01\x00"):
        assert p.infer(Direction.EGRESS, head, c) is None


@pytest.mark.parametrize("mode", MODES)
def test_failed_prepare_is_reported_with_its_statement(mode):
    # asyncpg prepares with Parse, Describe, Sync: the error is the Parse's
    events = HELLO + [(REQ, m.parse("SELECT * FROM missing WHERE id = $1", "__asyncpg_stmt_1__")
                       + m.describe(b"S", "__asyncpg_stmt_1__") + m.SYNC),
                      (RESP, m.error("42P01") + m.ready()),
                      (REQ, m.parse("SELECT 1", "ok") + m.describe(b"S", "ok") + m.SYNC),
                      (RESP, m.PARSE_COMPLETE + m.parameter_description() + m.NO_DATA + m.ready())]
    _, (span,) = spans_of(events, mode)
    assert span.name == "SELECT missing" and span.attributes["error.type"] == "42P01"
    assert span.attributes["postgresql.statement.name"] == "__asyncpg_stmt_1__"


def _mixed(events, whole_side):
    """Requests whole and answers byte by byte, or the other way: a Sync read with its
    Execute on one side, a ReadyForQuery read apart on the other (and the reverse)."""
    driver = ConnectionDriver(PostgresParser(), conn_info())
    for side, data in events:
        direction = Direction.EGRESS if side == REQ else Direction.INGRESS
        if side == whole_side:
            driver.feed(direction, data)
        else:
            for i in range(len(data)):
                driver.feed(direction, data[i : i + 1])
    driver.close()
    return driver.spans()


@pytest.mark.parametrize("whole_side", [REQ, RESP])
def test_folded_and_apart_sync_and_ready_pair_the_same(whole_side):
    batch = [
        (REQ, m.parse("SELECT a FROM x") + m.bind() + m.execute() + m.SYNC),
        (RESP, m.PARSE_COMPLETE + m.BIND_COMPLETE + m.data_row(b"1") + m.complete("SELECT 1")
         + m.ready()),
        (REQ, m.parse("SELEC bad") + m.bind() + m.execute() + m.parse("SELECT b FROM y")
         + m.bind() + m.execute() + m.SYNC),
        (RESP, m.error("42601") + m.ready()),
        (REQ, m.query("DELETE FROM z")), (RESP, m.complete("DELETE 2") + m.ready()),
        (REQ, m.parse("SELECT c FROM w") + m.bind() + m.execute() + m.SYNC),
        (RESP, m.PARSE_COMPLETE + m.BIND_COMPLETE + m.complete("SELECT 0") + m.ready()),
    ]
    spans = _mixed(HELLO + batch, whole_side)
    assert [(s.name, s.attributes.get("error.type")) for s in spans] == [
        ("SELECT x", None), ("SELEC", "42601"), ("DELETE z", None), ("SELECT w", None)]
