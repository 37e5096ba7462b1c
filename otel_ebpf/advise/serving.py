"""Serving findings from spans: time to first token and time per output token by model
and side (client or server spans), the time a gateway adds on top of the call it makes,
and database or vector store calls that take most of the request they serve."""

from __future__ import annotations

from collections import defaultdict

from .model import Finding, Location, Span

SERVER, CLIENT = 2, 3
TTFT = "gen_ai.response.time_to_first_chunk"
TPOT = "otel_ebpf.gen_ai.time_per_output_token"
MIN_REQUESTS = 5  # fewer requests than this make no distribution
HOP_MIN_S = 0.005  # a gateway adding less than this per request is not a finding
HOP_MIN_SHARE = 0.1
DB_MIN_SHARE = 0.3  # a call taking this much of its parent's time, on average
DB_SYSTEMS = ("db.system.name", "db.system")


def percentile(values: list[float], q: float) -> float:
    v = sorted(values)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def _ms(s: float) -> str:
    return f"{s * 1e3:.1f} ms"


def service_of(span: Span) -> str:
    return str(span.resource.get("service.name") or span.resource.get("process.pid") or "?")


def genai_groups(spans: list[Span]) -> dict[tuple[str, str], list[Span]]:
    """The spans with a time to first token by (model, side: client or server)."""
    groups: dict[tuple[str, str], list[Span]] = defaultdict(list)
    for s in spans:
        if TTFT in s.attributes and s.kind in (SERVER, CLIENT):
            model = str(s.attributes.get("gen_ai.response.model")
                        or s.attributes.get("gen_ai.request.model") or "?")
            groups[(model, "server" if s.kind == SERVER else "client")].append(s)
    return groups


def _latency(spans: list[Span]) -> list[Finding]:
    out = []
    for (model, side), group in sorted(genai_groups(spans).items()):
        ttft = [float(s.attributes[TTFT]) for s in group]
        if len(ttft) < MIN_REQUESTS:
            continue
        tpot = [float(s.attributes[TPOT]) for s in group if TPOT in s.attributes]
        p50, p90, p99 = (percentile(ttft, q) for q in (0.5, 0.9, 0.99))
        slow = sum(1 for v in ttft if v > 2 * p50) / len(ttft)
        evidence = [f"{len(ttft)} requests; TTFT p50 {_ms(p50)}, p90 {_ms(p90)}, "
                    f"p99 {_ms(p99)}"]
        if tpot:
            evidence.append(f"TPOT p50 {_ms(percentile(tpot, 0.5))}, "
                            f"p99 {_ms(percentile(tpot, 0.99))}")
        evidence.append(f"{slow:.0%} of requests waited over twice the median for their "
                        "first token")
        out.append(Finding(
            "serving_latency", f"{model} ({side} side): TTFT p99 {_ms(p99)}, "
            f"{p99 / p50 if p50 else 0:.1f}x its median", slow,
            Location(f"{model} ({side})", service_of(group[0])), evidence,
            "a long TTFT tail under load is queueing before prefill: cap concurrent "
            "requests per replica, enable chunked prefill / prefix caching, or add "
            "replicas; a long TPOT is decode batch size or memory bandwidth"))
    return out


def _outside(parent: Span, children: list[Span]) -> float:
    """Seconds of `parent` outside every one of its calls (their union, clipped to it)."""
    busy, end = 0, parent.start_ns
    for c in sorted(children, key=lambda c: c.start_ns):
        start, stop = max(c.start_ns, end), min(c.end_ns, parent.end_ns)
        if stop > start:
            busy += stop - start
            end = stop
    return max(0, parent.end_ns - parent.start_ns - busy) / 1e9


def _hops(by_id: dict[str, Span], spans: list[Span]) -> list[Finding]:
    calls: dict[str, list[Span]] = defaultdict(list)
    for c in spans:
        parent = by_id.get(c.parent_span_id)
        if c.kind == CLIENT and parent is not None and parent.kind == SERVER:
            calls[parent.span_id].append(c)
    added: dict[tuple[str, str], list[tuple[float, float]]] = defaultdict(list)
    for parent_id, children in calls.items():
        parent = by_id[parent_id]
        if parent.duration_s > 0:
            added[(service_of(parent), parent.name)].append(
                (_outside(parent, children), parent.duration_s))
    out = []
    for (service, name), rows in sorted(added.items()):
        if len(rows) < MIN_REQUESTS:
            continue
        mean = sum(e for e, _ in rows) / len(rows)
        share = sum(e for e, _ in rows) / sum(d for _, d in rows)
        if mean < HOP_MIN_S or share < HOP_MIN_SHARE:
            continue
        out.append(Finding(
            "gateway_hop", f"{service} adds {_ms(mean)} per request on top of its upstream "
            "call", share, Location(name, service),
            [f"{len(rows)} requests; {share:.0%} of the server span's time is outside "
             "the calls it makes"],
            "the gateway's own work per request (auth, body parsing, re-encoding, a new "
            "upstream connection per request): reuse upstream connections (keep-alive), "
            "stream bodies instead of buffering them"))
    return out


def _db_calls(by_id: dict[str, Span], spans: list[Span]) -> list[Finding]:
    rows: dict[tuple[str, str, str], list[tuple[float, float]]] = defaultdict(list)
    for c in spans:
        system = next((c.attributes[k] for k in DB_SYSTEMS if k in c.attributes), None)
        parent = by_id.get(c.parent_span_id)
        if system is None or c.kind != CLIENT or parent is None or parent.duration_s <= 0:
            continue
        rows[(str(system), c.name, parent.name)].append((c.duration_s, parent.duration_s))
    out = []
    for (system, name, parent), r in sorted(rows.items()):
        share = sum(c for c, _ in r) / sum(p for _, p in r)
        if share < DB_MIN_SHARE:
            continue
        mean = sum(c for c, _ in r) / len(r)
        out.append(Finding(
            "slow_db_call", f"{system} call {name!r} takes {share:.0%} of {parent!r}", share,
            Location(name, system),
            [f"{len(r)} calls, {_ms(mean)} on average, under {parent!r}"],
            "index or narrow the query (fewer rows, a smaller top_k, a filter the "
            "store can index), cache repeated lookups, or make independent calls "
            "concurrently"))
    return out


def analyze(spans: list[Span]) -> list[Finding]:
    by_id = {s.span_id: s for s in spans if s.span_id}
    return _latency(spans) + _hops(by_id, spans) + _db_calls(by_id, spans)
