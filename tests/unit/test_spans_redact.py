"""Query values redacted on every span (url.query, url.full, any protocol): secret-looking
names by default, more by config."""

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


def test_apply_to_spans():
    span = _span({"url.query": "sid=1&x=2", "url.full": "http://h/?sid=1&x=2", "url.path": "/"})
    QueryRedactor(["sid"]).apply([span])
    assert span.attributes == {"url.query": "sid=REDACTED&x=2",
                               "url.full": "http://h/?sid=REDACTED&x=2", "url.path": "/"}


def test_secret_looking_names_by_default():
    """Credentials by name, whatever the case, with an empty config; other values stay."""
    r = QueryRedactor([])
    query = ("password=p1&PASSWD=p2&pwd=p3&key=k&Secret=s&token=t&api_key=a&apikey=b&api-key=c"
             "&access_token=d&refresh_token=e&auth=f&signature=g&X-Amz-Signature=h&sig=i"
             "&client_secret=j&X-Amz-Credential=l&session_id=m&jwt=n"
             "&q=shoes&page=2&keyword=k&tokenizer=gpt2&max_tokens=5&user=bob&sort=")
    out = r.query(query)
    kept = {"q=shoes", "page=2", "keyword=k", "tokenizer=gpt2", "max_tokens=5", "user=bob",
            "sort="}
    params = out.split("&")
    assert kept <= set(params)
    assert all(p.endswith("=REDACTED") for p in params if p not in kept), params
    assert r.url("https://h/login?user=bob&password=hunter2#top") == \
        "https://h/login?user=bob&password=REDACTED#top"
    span = _span({"url.query": "key=abc", "url.full": "http://h/?key=abc"})
    r.apply([span])
    assert span.attributes == {"url.query": "key=REDACTED", "url.full": "http://h/?key=REDACTED"}


def test_config_key():
    cfg = parse_config("receivers: {ebpf: {redaction: {query_params: [sid, '*']}}}", {})
    assert cfg.receiver.redact_query_params == ("sid", "*")
    env = parse_config("", {"OTEL_EBPF_RECEIVERS_EBPF_REDACTION_QUERY_PARAMS": "a,b"})
    assert env.receiver.redact_query_params == ("a", "b")


def test_command_args_config_key():
    """process.command_args is off unless resource_attributes turns it on (file or env)."""
    assert parse_config("", {}).receiver.command_args is False
    on = "receivers: {ebpf: {resource_attributes: {process.command_args: {enabled: true}}}}"
    assert parse_config(on, {}).receiver.command_args is True
    var = "OTEL_EBPF_RECEIVERS_EBPF_RESOURCE_ATTRIBUTES_PROCESS_COMMAND_ARGS_ENABLED"
    assert parse_config("", {var: "true"}).receiver.command_args is True
