"""`otel-ebpf diff` and `otel-ebpf flamegraph --diff` on runs written by the agent's own
exporters: a planted hot spot that shrinks is found and significant, two runs of one
distribution show nothing significant, processes match by name across pids, findings
that disappear are listed, and the command's answers to bad input."""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import orjson
import pytest

from otel_ebpf.advise.diff import FEW, NOISE, SIGNIFICANT, diff
from otel_ebpf.advise.render_diff import RENDERERS
from otel_ebpf.export.pprof import ProfileFileExporter
from otel_ebpf.export.profiles import ProfileBatch, ProfileSample
from otel_ebpf.gpu.ledger import LAUNCH_SAMPLE_TYPES
from otel_ebpf.profiling.frames import CUDA, PYTHON, Frame
from otel_ebpf.profiling.profiler import SAMPLE_TYPES as CPU_TYPES

T0 = 1_700_000_000 * 10**9
WINDOW_NS = 10 * 10**9
MAIN = Frame("main", "/src/app.py", PYTHON, 0, 1)


def fn(name: str, line: int) -> Frame:
    return Frame(name, "/src/app.py", PYTHON, 0, line)


CHECKSUM, PARSE, HANDLER, RENDER = (fn("checksum", 10), fn("parse", 20), fn("handler", 30),
                                   fn("render", 50))


def write_run(folder: Path, weights: dict[Frame, float], seed: int, pid: int,
              windows: int = 8, samples: int = 400) -> None:
    """One CPU profile file per window, `samples` drawn from `weights` (each function
    called from main) for the process `api` with `pid`."""
    rng = random.Random(seed)
    exporter = ProfileFileExporter(str(folder), "pprof", "cpu")
    resource = {"service.name": "api", "process.pid": pid}
    for i in range(windows):
        drawn = Counter(rng.choices(list(weights), list(weights.values()), k=samples))
        start = T0 + i * WINDOW_NS
        exporter.export(ProfileBatch(CPU_TYPES, start, start + WINDOW_NS, [
            ProfileSample((f, MAIN), (n, n * 10**7), resource) for f, n in drawn.items()],
            ("cpu", "nanoseconds"), 10**7))


@pytest.fixture
def planted(tmp_path) -> tuple[Path, Path]:
    """checksum falls from 80 % to 10 % of the CPU; parse (8 %) goes, render (30 %) comes,
    handler grows from 12 % to 60 %. The same process name, another pid."""
    before, after = tmp_path / "before", tmp_path / "after"
    write_run(before, {CHECKSUM: 0.80, PARSE: 0.08, HANDLER: 0.12}, seed=1, pid=100)
    write_run(after, {CHECKSUM: 0.10, HANDLER: 0.60, RENDER: 0.30}, seed=2, pid=200)
    return before, after


def _row(table, what):
    (row,) = [r for r in table.rows if r.what == what]
    return row


def test_a_shrunk_hot_spot_is_significant_and_matched_by_process_name(planted):
    d = diff([str(planted[0])], [str(planted[1])])
    tables = {t.name: t for t in d.tables}
    row = _row(tables["cpu_self_share"], "checksum (app.py)")
    # pids 100 and 200 are one process, api: one row, with both runs' windows
    assert row.process == "api"
    assert (len(row.before_windows), len(row.after_windows)) == (8, 8)
    assert row.before == pytest.approx(0.8, abs=0.02)
    assert row.after == pytest.approx(0.1, abs=0.02)
    assert row.ratio == pytest.approx(row.after / row.before)
    assert row.ratio == pytest.approx(0.125, rel=0.2)
    # 8 windows against 8 that do not overlap: the smallest p an ordering can give
    assert row.verdict == SIGNIFICANT and row.p < 0.01
    assert tables["cpu_self_share"].rows[0] is row  # the biggest change first
    assert _row(tables["cpu_self_share"], "handler (app.py)").verdict == SIGNIFICANT
    # main is on every stack: its total share does not move
    main = _row(tables["cpu_total_share"], "main (app.py)")
    assert (main.before, main.after, main.verdict) == (1.0, 1.0, NOISE)
    assert d.per == "second"  # no spans to count requests by
    (samples,) = tables["cpu_samples"].rows
    assert samples.before == samples.after == pytest.approx(40.0)  # 400 per 10 s


def test_findings_that_disappear_appear_or_move(planted):
    d = diff([str(planted[0])], [str(planted[1])])
    changes = {(c.change, c.where, c.process): c for c in d.findings}
    gone = changes[("disappeared", "parse", "api")]
    assert gone.kind == "cpu_hotspot" and gone.before[0] == 3 and gone.after is None
    new = changes[("appeared", "render", "api")]
    assert new.before is None and new.after[0] == 2
    moved = changes[("moved", "checksum", "api")]
    assert (moved.before[0], moved.after[0]) == (1, 3)
    assert moved.before[1] == pytest.approx(0.8, abs=0.02)
    assert moved.after[1] == pytest.approx(0.1, abs=0.02)
    assert changes[("moved", "handler", "api")].after[0] == 1
    assert [c.change for c in d.findings] == ["disappeared", "appeared", "moved", "moved"]


def test_two_runs_of_one_distribution_show_nothing_significant(tmp_path):
    """The false-positive check: the same five functions' shares, other random draws."""
    weights = {fn(f"f{i}", 10 * i): w for i, w in enumerate((0.4, 0.25, 0.15, 0.12, 0.08))}
    write_run(tmp_path / "a", weights, seed=11, pid=1)
    write_run(tmp_path / "b", weights, seed=12, pid=2)
    d = diff([str(tmp_path / "a")], [str(tmp_path / "b")])
    rows = [r for t in d.tables for r in t.rows]
    assert len(rows) == 12 and d.tested == 12  # 5 self, 6 total (main too), the process
    assert [r for r in rows if r.verdict == SIGNIFICANT] == []
    assert d.findings == []  # the same findings, in the same order, at about the same share


def test_too_few_windows_are_said(tmp_path):
    write_run(tmp_path / "a", {CHECKSUM: 0.8, HANDLER: 0.2}, seed=1, pid=1, windows=3)
    write_run(tmp_path / "b", {CHECKSUM: 0.1, HANDLER: 0.9}, seed=2, pid=1, windows=5)
    d = diff([str(tmp_path / "a")], [str(tmp_path / "b")])
    row = _row(d.tables[0], "checksum (app.py)")
    assert row.verdict == FEW and row.p is None and d.tested == 0
    assert "not enough windows" in RENDERERS["text"](d)


def _server_spans(start_ns: int, n: int) -> bytes:
    spans = [{"traceId": "ab" * 16, "spanId": f"{start_ns + i:016x}", "name": "POST /x",
              "kind": 2, "startTimeUnixNano": str(start_ns + i * 10**7),
              "endTimeUnixNano": str(start_ns + i * 10**7 + 5 * 10**6)} for i in range(n)]
    return orjson.dumps({"resourceSpans": [{"resource": {"attributes": [
        {"key": "service.name", "value": {"stringValue": "api"}}]},
        "scopeSpans": [{"spans": spans}]}]}) + b"\n"


def test_gpu_launches_per_request(tmp_path):
    """Launches by site, counted per request where both runs have server spans: 40 per
    request before, 10 after (the launch count drops 4x, the requests stay)."""
    step = fn("step", 40)
    kernel = Frame("scale(float*)", "[cuda kernel]", CUDA)
    for run, launches, pid in (("a", 4000, 7), ("b", 1000, 8)):
        folder = tmp_path / run
        exporter = ProfileFileExporter(str(folder), "pprof", "gpu")
        lines = b""
        for i in range(6):
            start = T0 + i * WINDOW_NS
            exporter.export(ProfileBatch(LAUNCH_SAMPLE_TYPES, start, start + WINDOW_NS, [
                ProfileSample((kernel, step), (launches + i,), {
                    "service.name": "trainer", "process.pid": pid})], name="launches"))
            lines += _server_spans(start, 100)
        (folder / "traces.jsonl").write_bytes(lines)
    d = diff([str(tmp_path / "a")], [str(tmp_path / "b")])
    assert d.per == "request" and d.requests == (600, 600)
    row = _row({t.name: t for t in d.tables}["gpu_launches"], "step (app.py)")
    assert row.process == "trainer"
    assert row.before == pytest.approx(40.025) and row.after == pytest.approx(10.025)
    assert row.verdict == SIGNIFICANT
    # the spans' own latency did not change: 5 ms at every percentile
    latency = {t.name: t for t in d.tables}["latency"]
    assert {r.verdict for r in latency.rows} == {NOISE}
    assert _row(latency, "duration p99 (server spans)").before == pytest.approx(0.005)
    assert "rates per request (server spans: 600 before, 600 after)" in \
        RENDERERS["text"](d)


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_ebpf.cli", *args],
                          capture_output=True, text=True, timeout=120)


def test_cli_renderings_and_bounds(planted):
    r = _cli("diff", *map(str, planted), "--format", "json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert set(doc) == {"read", "per", "requests", "rule", "tables", "findings",
                        "findings_cut"}
    assert set(doc["tables"]) == {"cpu_self_share", "cpu_total_share", "cpu_samples",
                                  "gpu_copies", "gpu_launches", "gpu_sync_wait",
                                  "gpu_memory_peak", "latency"}
    row = doc["tables"]["cpu_self_share"]["rows"][0]
    assert set(row) == {"process", "what", "before", "after", "ratio", "windows", "p",
                        "verdict"}
    assert (row["what"], row["verdict"], row["windows"]) == (
        "checksum (app.py)", "significant", {"before": 8, "after": 8})
    assert doc["read"]["before"]["profiles"] == 8 and doc["rule"]["min_windows"] == 4
    assert doc["findings"][0]["change"] == "disappeared"
    r = _cli("diff", *map(str, planted), "--top", "1")
    assert r.returncode == 0, r.stderr
    text = r.stdout
    assert re.search(r"api +checksum \(app\.py\) +(79|80)\.\d% +\d+\.\d% +0\.1\dx +8/8 +"
                     r"\S+ +significant", text), text
    assert "(3 more rows cut: --top 4 shows them)" in text
    md = _cli("diff", *map(str, planted), "--format", "markdown").stdout
    assert "## CPU self share by function" in md and "| api | `checksum (app.py)` |" in md


def test_cli_bad_input(tmp_path, planted):
    r = _cli("diff", str(tmp_path / "missing"), str(planted[1]))
    assert r.returncode == 2
    assert r.stderr == f"otel-ebpf diff: {tmp_path / 'missing'}: no such file or folder\n"
    (tmp_path / "bad.jsonl").write_text("{not json\n")
    r = _cli("diff", str(planted[0]), str(tmp_path / "bad.jsonl"))
    assert r.returncode == 2 and "bad.jsonl:1: not JSON" in r.stderr
    r = _cli("diff", *map(str, planted), "--since", "yesterday")
    assert r.returncode == 2 and "--since 'yesterday'" in r.stderr
    r = _cli("flamegraph", "--diff", str(tmp_path / "missing"), str(planted[1]))
    assert r.returncode == 2 and "no such file or folder" in r.stderr
    r = _cli("flamegraph", str(planted[0]), "--diff", *map(str, planted))
    assert r.returncode == 2 and "PATH... or --diff BEFORE AFTER" in r.stderr


def _rgb(fill: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.fullmatch(r"rgb\((\d+),(\d+),(\d+)\)", fill).groups())


def test_differential_flamegraph(tmp_path, planted):
    svg = tmp_path / "diff.svg"
    r = _cli("flamegraph", "--diff", *map(str, planted), "-o", str(svg))
    assert r.returncode == 0, r.stderr
    ns = {"s": "http://www.w3.org/2000/svg"}
    fills, titles = {}, {}
    for g in ET.parse(svg).getroot().findall("s:g", ns):
        title = g.find("s:title", ns).text
        name = title.split(" (", 1)[0]
        fills[name], titles[name] = _rgb(g.find("s:rect", ns).get("fill")), title
    red, green, blue = fills["checksum"]
    assert blue == 255 and red == green < 60  # shrank the most: deep blue
    red, green, blue = fills["handler"]
    assert red == 255 and green == blue < 120  # grew
    assert "parse" not in fills  # gone: nothing of it in AFTER to draw
    # the process is one tower, by name: its share did not change
    assert titles["api"].endswith("+0.00 points since 100.00%)")
    assert fills["api"] == fills["all"] == (235, 235, 235)
