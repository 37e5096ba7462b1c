"""Query values redacted by config: url.query and url.full of every span, any protocol."""

from __future__ import annotations

from otel_ebpf.protocols.base import ConnInfo, NeutralSpan, Role, SpanKind

from otel_ebpf.config import parse_config
from otel_ebpf.spans.redact import QueryRedactor


def _span(attrs: dict) -> NeutralSpan:
    conn = ConnInfo(pid=1, fd=3, generation=1, role=Role.CLIENT, transport="stream", family="ipv4")
    return NeutralSpan(name="GET", kind=SpanKind.CLIENT, start_ns=1, end_ns=2, conn=conn,
                       attributes=dict(attrs))


def test_named_parameters_only():
    r = QueryRedactor(["Session", "email"])
    assert r.query("session=abc&q=shoes&EMAIL=a%40b.c&email=") == \
        "session=REDACTED&q=shoes&EMAIL=REDACTED&email="
    assert r.url("http://h/p?q=1&session=s#frag") == "http://h/p?q=1&session=REDACTED#frag"
    assert r.url("http://h/p") == "http://h/p"


def test_star_redacts_every_value():
    r = QueryRedactor(["*"])
    assert r.query("a=1&b=&c&api_key=REDACTED") == "a=REDACTED&b=&REDACTED&api_key=REDACTED"


def test_apply_to_spans_and_empty_config_is_off():
    span = _span({"url.query": "sid=1&x=2", "url.full": "http://h/?sid=1&x=2", "url.path": "/"})
    QueryRedactor(["sid"]).apply([span])
    assert span.attributes == {"url.query": "sid=REDACTED&x=2",
                               "url.full": "http://h/?sid=REDACTED&x=2", "url.path": "/"}
    assert not QueryRedactor([])


def test_config_key():
    cfg = parse_config("receivers: {ebpf: {redaction: {query_params: [sid, '*']}}}", {})
    assert cfg.receiver.redact_query_params == ("sid", "*")
    env = parse_config("", {"OTEL_EBPF_RECEIVERS_EBPF_REDACTION_QUERY_PARAMS": "a,b"})
    assert env.receiver.redact_query_params == ("a", "b")
