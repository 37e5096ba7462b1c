"""`otel-ebpf advise` on files written by the agent's own exporters (pprof, folded, OTLP/JSON
profile, span and metric lines): what each analysis finds, how findings rank, what is
redacted before a model sees it, and the command's answers to bad input."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from otel_ebpf.advise import llm
from otel_ebpf.advise.model import Finding, Location
from otel_ebpf.advise.readers import ReadError, read
from otel_ebpf.advise.redact import redact
from otel_ebpf.advise.render import RENDERERS
from otel_ebpf.advise.report import advise
from otel_ebpf.export.file import to_otlp_json
from otel_ebpf.export.pprof import ProfileFileExporter
from otel_ebpf.export.profiles import ProfileBatch, ProfileSample, encode_request
from otel_ebpf.gpu.ledger import COPY_SAMPLE_TYPES, LAUNCH_SAMPLE_TYPES, SYNC_SAMPLE_TYPES
from otel_ebpf.profiling.frames import CUDA, NATIVE, PYTHON, Frame
from otel_ebpf.profiling.profiler import SAMPLE_TYPES as CPU_TYPES

APP = '''import json


def handler(body):
    return checksum(body.decode())


def checksum(text):
    api_key = "sk-live-0123456789abcdef0123"
    total = 0
    for ch in text:
        total += ord(ch)
    return total
'''
RES = {"service.name": "api", "process.pid": 42}
T0 = 1_700_000_000 * 10**9


@pytest.fixture
def app(tmp_path) -> Path:
    path = tmp_path / "app.py"
    path.write_text(APP)
    return path


def _py(name: str, path: Path, line: int) -> Frame:
    return Frame(name, str(path), PYTHON, 0, line)


def cpu_batch(app: Path) -> ProfileBatch:
    """10 samples: 8 in checksum (2 of them in a native call), 2 in handler."""
    handler, checksum = _py("handler", app, 4), _py("checksum", app, 8)
    ordf = Frame("builtin_ord", "/usr/lib/libpython3.11.so", NATIVE, 0x10)
    samples = [ProfileSample((checksum, handler), (6, 6 * 10**7), RES),
               ProfileSample((ordf, checksum, handler), (2, 2 * 10**7), RES),
               ProfileSample((handler,), (2, 2 * 10**7), RES)]
    return ProfileBatch(CPU_TYPES, T0, T0 + 10**9, samples, ("cpu", "nanoseconds"), 10**7)


def write(batch: ProfileBatch, folder: Path, fmt: str = "pprof", prefix: str = "cpu") -> None:
    ProfileFileExporter(str(folder), fmt, prefix).export(batch)


def test_cpu_hotspot_from_pprof(tmp_path, app):
    write(cpu_batch(app), tmp_path / "p")
    findings, ev = advise([str(tmp_path / "p")])
    top = findings[0]
    assert (top.kind, top.location) == ("cpu_hotspot", Location("checksum", str(app), 8))
    assert top.share == pytest.approx(0.8)
    assert top.evidence[0] == ("self 80% of api (pid 42)'s CPU samples (8 of 10); total "
                               "80% (with the functions it calls)")
    assert "native children: builtin_ord 25%" in top.evidence
    assert "per-character loop at app.py:11" in top.evidence
    assert top.source[0] == (8, "def checksum(text):") and top.source[-1][0] == 13
    # handler: 2 self samples, 10 with it on the stack
    (second,) = [f for f in findings if f.location.function == "handler"]
    assert second.share == pytest.approx(0.2) and "total 100%" in second.evidence[0]
    assert len(ev.profiles) == 1 and ev.skipped == []


def test_folded_and_otlp_profiles_give_the_same_hot_spot(tmp_path, app):
    write(cpu_batch(app), tmp_path / "f", "folded")
    (folded,) = advise([str(tmp_path / "f")])[0][:1]
    # folded lines keep names only: the function, not its file; nor which frames are
    # native, so `builtin_ord` (a plain identifier) takes its 2 samples from checksum
    assert (folded.location.function, folded.location.file) == ("checksum", "")
    assert folded.share == pytest.approx(0.6)
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "profiles.jsonl").write_bytes(
        to_otlp_json(encode_request(cpu_batch(app))))
    findings, ev = advise([str(tmp_path / "o")])
    # the OTLP request's two profiles (samples, cpu) are one profile of two types again
    (prof,) = ev.profiles
    assert prof.sample_types == CPU_TYPES and len(prof.samples) == 3
    top = findings[0]
    assert top.location == Location("checksum", str(app), 8)
    assert top.share == pytest.approx(0.8) and "(8 of 10)" in top.evidence[0]


def _gpu(types, samples, name, folder: Path, fmt: str) -> None:
    batch = ProfileBatch(types, T0, T0 + 2 * 10**9, samples, name=name)
    if fmt == "pprof":
        write(batch, folder, prefix="gpu")
    else:  # OTLP/JSON lines, as a Collector's file exporter writes profiles
        folder.mkdir(exist_ok=True)
        with (folder / "profiles.jsonl").open("ab") as f:
            f.write(to_otlp_json(encode_request(batch)))


@pytest.mark.parametrize("fmt", ["pprof", "otlp"])
def test_gpu_copies_launches_and_waits_rank_by_share(tmp_path, app, fmt):
    loop, weights, step = _py("handler", app, 4), _py("checksum", app, 8), _py("main", app, 1)
    out = tmp_path / "g"
    _gpu(COPY_SAMPLE_TYPES, [
        ProfileSample((loop,), (500, 500 * 4096, 50_000_000), {**RES, "gpu.copy.api": "memcpy_htod"}),
        # 8 MiB async copies enqueued at 1 GB/s: they blocked (pageable memory)
        ProfileSample((weights,), (4, 32 << 20, 33_554_432),
                      {**RES, "gpu.copy.api": "memcpy_htod_async"})], "copies", out, fmt)
    _gpu(LAUNCH_SAMPLE_TYPES, [ProfileSample(
        (Frame("scale(float*)", "[cuda kernel]", CUDA), step), (4000,),
        {**RES, "gpu.kernel.name": "scale(float*)"})], "launches", out, fmt)
    _gpu(SYNC_SAMPLE_TYPES, [ProfileSample((step,), (100, 10**9),
                                           {**RES, "gpu.sync.api": "stream_sync"})], "sync",
         out, fmt)
    findings, _ = advise([str(out)])
    by_kind = {f.kind: f for f in findings}
    assert by_kind["copy_in_loop"].location.function == "handler"
    assert by_kind["copy_in_loop"].share == pytest.approx(50 / (50 + 33.554432))
    assert by_kind["unpinned_copy"].location.function == "checksum"
    storm = by_kind["launch_storm"]
    assert storm.share == 1.0 and "kernels: scale(float*) (4000)" in storm.evidence
    assert "2000 launches/s over 2.000 s of profiles" in storm.evidence
    wait = by_kind["sync_per_step"]
    assert wait.share == pytest.approx(0.5)  # 1 s of the 2 s window
    # scores: launch storm 1.0 * 0.9, copy loop ~0.6, unpinned ~0.32, sync 0.5
    assert [f.kind for f in findings] == ["launch_storm", "copy_in_loop", "sync_per_step",
                                          "unpinned_copy"]


@pytest.mark.parametrize("fmt", ["pprof", "otlp"])
def test_estimated_launch_counts_are_said_to_be_estimates(tmp_path, app, fmt):
    """Launch counts scaled from the launch probes' duty cycle carry
    gpu.launch.count.estimated (a bool in OTLP, the label "True" in pprof): the finding
    says they are estimates."""
    step = _py("main", app, 1)
    out = tmp_path / "g"
    _gpu(LAUNCH_SAMPLE_TYPES, [ProfileSample(
        (Frame("scale(float*)", "[cuda kernel]", CUDA), step), (4000,),
        {**RES, "gpu.kernel.name": "scale(float*)", "gpu.launch.count.estimated": True})],
        "launches", out, fmt)
    storm = next(f for f in advise([str(out)])[0] if f.kind == "launch_storm")
    assert storm.title.startswith("~4000 kernel launches")
    assert any(e.startswith("estimated: the launch probes were attached part of the time")
               for e in storm.evidence)


def _span(span_id, parent, name, kind, start_ms, end_ms, attrs=None, service="gw"):
    return {"traceId": "ab" * 16, "spanId": span_id, "parentSpanId": parent, "name": name,
            "kind": kind, "startTimeUnixNano": str(T0 + start_ms * 10**6),
            "endTimeUnixNano": str(T0 + end_ms * 10**6),
            "attributes": [{"key": k, "value": {"doubleValue": v} if isinstance(v, float)
                            else {"stringValue": v}} for k, v in (attrs or {}).items()],
            "_service": service}


def _lines(spans) -> bytes:
    by_service: dict[str, list] = {}
    for s in spans:
        s = dict(s)
        by_service.setdefault(s.pop("_service"), []).append(s)
    return orjson.dumps({"resourceSpans": [
        {"resource": {"attributes": [{"key": "service.name", "value": {"stringValue": svc}}]},
         "scopeSpans": [{"spans": group}]} for svc, group in by_service.items()]}) + b"\n"


def test_serving_latency_gateway_hops_and_slow_db_calls(tmp_path):
    spans = []
    for i in range(10):
        ttft = 0.05 if i < 8 else 0.5  # two requests of ten wait 10x the median
        spans.append(_span(f"{i:016x}", "", "chat m", 2, 0, 600, {
            "gen_ai.response.model": "m", "gen_ai.response.time_to_first_chunk": ttft,
            "otel_ebpf.gen_ai.time_per_output_token": 0.01}, "vllm"))
        # a gateway: 100 ms of its own around a 50 ms upstream call
        spans.append(_span(f"a{i:015x}", "", "POST /v1/chat", 2, 0, 150))
        spans.append(_span(f"b{i:015x}", f"a{i:015x}", "POST", 3, 50, 100))
        # a RAG service whose vector search takes 120 ms of its 150
        spans.append(_span(f"d{i:015x}", "", "POST /search", 2, 0, 150, service="rag"))
        spans.append(_span(f"c{i:015x}", f"d{i:015x}", "query", 3, 0, 120,
                           {"db.system.name": "chroma"}, "rag"))
    (tmp_path / "traces.jsonl").write_bytes(_lines(spans))
    findings, ev = advise([str(tmp_path)])
    assert len(ev.spans) == 50
    by_kind = {f.kind: f for f in findings if f.process != "rag"}
    lat = by_kind["serving_latency"]
    assert lat.title == "m (server side): TTFT p99 500.0 ms, 10.0x its median"
    assert lat.share == pytest.approx(0.2)
    (hop,) = [f for f in findings if f.kind == "gateway_hop" and f.location.file == "gw"]
    assert hop.title == "gw adds 100.0 ms per request on top of its upstream call"
    assert hop.share == pytest.approx(100 / 150)
    db = by_kind["slow_db_call"]
    assert db.share == pytest.approx(0.8) and db.location.file == "chroma"


def test_gpu_memory_peak_from_metrics(tmp_path):
    point = {"resourceMetrics": [{"resource": {"attributes": [
        {"key": "process.pid", "value": {"intValue": "7"}}]}, "scopeMetrics": [{"metrics": [
            {"name": "gpu.memory.peak", "gauge": {"dataPoints": [
                {"asInt": str(4 << 30), "timeUnixNano": str(T0)}]}},
            {"name": "gpu.memory.in_use", "sum": {"dataPoints": [
                {"asInt": str(1 << 30), "timeUnixNano": str(T0)}]}}]}]}]}
    (tmp_path / "metrics.jsonl").write_bytes(orjson.dumps(point) + b"\n")
    (f,) = advise([str(tmp_path)])[0]
    assert f.kind == "gpu_memory_peak" and f.share == pytest.approx(0.75)


def test_redaction_of_what_a_model_is_sent(app, tmp_path):
    write(cpu_batch(app), tmp_path / "p")
    top = advise([str(tmp_path / "p")])[0][0]
    text = llm.prompt(top)
    assert "sk-live" not in text and 'api_key = "REDACTED"' in text
    assert "for ch in text:" in text and "self 80%" in text
    assert redact("curl -H 'Authorization: Bearer abcdef123456789' "
                  "https://u:pw@h/x?token=s3&page=2") == (
        "curl -H 'Authorization: Bearer REDACTED' https://REDACTED@h/x?token=REDACTED&page=2")
    assert redact('connect(host="db", password="hunter2")') == \
        'connect(host="db", password="REDACTED")'


def test_completions_url():
    assert llm.completions_url("http://h:8000") == "http://h:8000/v1/chat/completions"
    assert llm.completions_url("http://h:8000/v1/") == "http://h:8000/v1/chat/completions"
    assert llm.completions_url("https://h/x/v1/chat/completions") == \
        "https://h/x/v1/chat/completions"
    with pytest.raises(llm.LLMError):
        llm.completions_url("h:8000")


def test_renderings(tmp_path, app):
    write(cpu_batch(app), tmp_path / "p")
    findings, ev = advise([str(tmp_path / "p")])
    doc = json.loads(RENDERERS["json"](findings, ev))
    assert set(doc["findings"][0]) >= {"kind", "title", "share", "location", "evidence",
                                       "suggestion"}
    assert doc["findings"][0]["location"] == {"function": "checksum", "file": str(app),
                                              "line": 8}
    text = RENDERERS["text"](findings, ev)
    assert "1. [cpu_hotspot] checksum() takes 80% of api (pid 42)'s CPU" in text
    assert "   11 |     for ch in text:" in text
    md = RENDERERS["markdown"](findings, ev)
    assert "## 1. checksum() takes 80%" in md and "```python" in md


def test_since_and_unknown_files(tmp_path, app):
    write(cpu_batch(app), tmp_path / "p")
    (tmp_path / "p" / "notes.txt").write_text("x")
    old = time.time() - 7200
    for f in (tmp_path / "p").iterdir():
        os.utime(f, (old, old))
    findings, ev = advise([str(tmp_path / "p")], since_s=3600)
    assert findings == [] and ev.files == []
    ev = read([str(tmp_path / "p")])
    assert ev.skipped == [f"{tmp_path / 'p' / 'notes.txt'}: not a profile, OTLP/JSON or "
                          "folded file"]
    (tmp_path / "bad.jsonl").write_text('{"x": 1}\n')
    with pytest.raises(ReadError, match="bad.jsonl:1: no resourceSpans"):
        read([str(tmp_path / "bad.jsonl")])


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_ebpf.cli", "advise", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_bad_input(tmp_path):
    r = _cli(str(tmp_path / "missing"))
    assert r.returncode == 2 and "no such file or folder" in r.stderr
    r = _cli(str(tmp_path), "--since", "yesterday")
    assert r.returncode == 2 and "--since 'yesterday'" in r.stderr
    r = _cli(str(tmp_path), "--llm-endpoint", "http://127.0.0.1:9")
    assert r.returncode == 2 and "go together" in r.stderr
    r = _cli(str(tmp_path))
    assert r.returncode == 0 and "no findings" in r.stdout


def test_finding_json_is_the_documented_shape():
    f = Finding("cpu_hotspot", "t", 0.123456, Location("f", "a.py", 3), ["e"], "s")
    assert f.to_json() == {"kind": "cpu_hotspot", "title": "t", "share": 0.1235,
                           "location": {"function": "f", "file": "a.py", "line": 3},
                           "evidence": ["e"], "suggestion": "s"}


def test_flamegraph_svg(tmp_path, app):
    import xml.etree.ElementTree as ET

    write(cpu_batch(app), tmp_path / "p")
    svg = tmp_path / "cpu.svg"
    r = subprocess.run([sys.executable, "-m", "otel_ebpf.cli", "flamegraph",
                        str(tmp_path / "p"), "-o", str(svg)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    ns = {"s": "http://www.w3.org/2000/svg"}
    frames = {}
    for g in ET.parse(svg).getroot().findall("s:g", ns):
        name = g.find("s:title", ns).text
        frames[name.rpartition(" (")[0]] = (name, float(g.find("s:rect", ns).get("width")))
    assert frames["checksum"][0] == "checksum (8, 80.00%)"
    assert frames["api (pid 42)"][0] == "api (pid 42) (10, 100.00%)"
    # widths in proportion to the samples: checksum is 8/10 of its caller handler
    assert frames["checksum"][1] == pytest.approx(0.8 * frames["handler"][1], rel=1e-3)
    r = subprocess.run([sys.executable, "-m", "otel_ebpf.cli", "flamegraph",
                        str(tmp_path / "p"), "--kind", "launches"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "no launches samples" in r.stderr


def test_top_follows_the_spans_file(tmp_path):
    from rich.console import Console

    from otel_ebpf.views.top import Follower, Top

    spans = [_span(f"{i:016x}", "", "chat m", 2, i * 100, i * 100 + 50 + i, {
        "gen_ai.response.time_to_first_chunk": 0.02}, "vllm") for i in range(10)]
    spans[3]["status"] = {"code": 2}
    path = tmp_path / "traces.jsonl"
    second = _lines(spans[5:])
    path.write_bytes(_lines(spans[:5]) + second[:-10])  # the last line half written
    follower, top = Follower(str(path)), Top(window_s=60)
    top.add(follower.spans())
    (row,) = top.rows.values()
    assert len(row.spans) == 5
    with path.open("ab") as f:
        f.write(second[-10:])  # the line completed
    top.add(follower.spans())
    assert len(row.spans) == 10
    console = Console(record=True, width=150)
    console.print(top.table())
    text = console.export_text()
    # 10 spans in 60 s; 1 error; durations 50..59 ms, p50 55 ms, p99 59 ms; TTFT 20 ms
    assert "vllm" in text and "server" in text and "0.17" in text and "1 (10%)" in text
    assert "55.0" in text and "59.0" in text and "20.0" in text
    r = subprocess.run([sys.executable, "-m", "otel_ebpf.cli", "top", str(path), "--once"],
                       capture_output=True, text=True, timeout=60, env={**os.environ,
                                                                       "COLUMNS": "150"})
    assert r.returncode == 0 and "vllm" in r.stdout, r.stderr
