"""`otel-ebpf advise` on what the real agent wrote about programs with one planted
inefficiency each: a per-character Python loop in an HTTP server's request path (CPU
profiles), and, on the stand-in CUDA driver, a copy inside a loop, a launch storm and a
synchronization per step (GPU profiles). The planted inefficiency must rank first, at the
right function, file and line, with its share."""

from __future__ import annotations

import http.client
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest import VENV_BIN, require_kernel
from tests.support.cuda import SRC, build_libcuda, compiler
from tests.support.ports import free_port
from tests.support.processes import stop_process

pytestmark = pytest.mark.kernel
PEERS = Path(__file__).parent / "peers"
SERVER = PEERS / "cpu_http_server.py"
PLANTED = SRC / "planted.py"


def def_line(path: Path, name: str) -> int:
    """The line of `def name(` in `path`: what the profiles give as the function's line."""
    for n, line in enumerate(path.read_text().splitlines(), 1):
        if re.match(rf"\s*def {name}\(", line):
            return n
    raise AssertionError(f"no def {name} in {path}")


def line_of(path: Path, text: str) -> int:
    return next(n for n, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def advise(*paths: Path) -> list[dict]:
    out = subprocess.run([str(VENV_BIN / "otel-ebpf"), "advise", *map(str, paths),
                          "--format", "json"], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    findings = json.loads(out.stdout)["findings"]
    print(json.dumps(findings[:3], indent=1))
    return findings


def _profiles_config(out: Path, targets: dict, gpu: dict | None = None) -> dict:
    ebpf: dict = {"targets": targets,
                  "profiling": {"frequency": 49, "interval": "1s"}}
    if gpu is not None:
        ebpf["gpu"] = gpu
    return {"receivers": {"ebpf": ebpf},
            "exporters": {"pprof": {"path": str(out)}},
            "service": {"pipelines": {"profiles": {"receivers": ["ebpf"],
                                                   "exporters": ["pprof"]}}}}


def first(out: Path, kind: str, function: str, path: Path) -> dict:
    """advise's first finding on `out`, checked to be `kind` at `function` of `path`, at
    the function's `def` line (what the profiles give)."""
    top = advise(out)[0]
    assert top["kind"] == kind, top
    assert top["location"] == {"function": function, "file": str(path),
                               "line": def_line(path, function)}
    return top


def _cpu_samples_with(folder: Path, function: str) -> int:
    from otel_ebpf.advise.readers import read_pprof

    n = 0
    for f in folder.glob("cpu-*.pb.gz"):
        for s in read_pprof(f).samples:
            if any(fr.name == function for fr in s.frames):
                n += s.values[0]
    return n


def test_per_character_loop_in_a_request_path_ranks_first(start_agent, tmp_path):
    require_kernel()
    port, out = free_port(), tmp_path / "pprof"
    server = subprocess.Popen([sys.executable, str(SERVER), str(port)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "READY"
        run = start_agent([port], overrides=_profiles_config(out, {"pids": [server.pid]}))
        body = ("lorem ipsum dolor sit amet " * 8000).encode()  # 216 kB per request
        deadline = time.monotonic() + 120
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
        # requests until the profiles hold enough of the server's samples in checksum
        while time.monotonic() < deadline:
            for _ in range(5):
                conn.request("POST", "/sum", body)
                assert conn.getresponse().read().isdigit()
            if _cpu_samples_with(out, "checksum") >= 100:
                break
        conn.close()
    finally:
        stop_process(server)
    run.stop()
    assert _cpu_samples_with(out, "checksum") >= 100, run.stderr[-3000:]
    top = first(out, "cpu_hotspot", "checksum", SERVER)
    # the loop is nearly all the server does; its self share is of the server's samples
    assert 0.5 <= top["share"] <= 1.0, top
    loop = line_of(SERVER, "for ch in text:")
    assert f"per-character loop at cpu_http_server.py:{loop}" in top["evidence"]
    assert any(t["line"] == loop for t in top["source"])


@pytest.fixture(scope="module")
def libcuda(tmp_path_factory) -> Path:
    if compiler() is None:
        pytest.fail("a C compiler is needed (make install brings clang)")
    return build_libcuda(tmp_path_factory.mktemp("advisecuda"))


def _exported(out: Path, pattern: str, pid: int) -> int:
    """Calls of process `pid` in the profiles written so far (their first value)."""
    from otel_ebpf.advise.readers import read_pprof

    return sum(s.values[0] for f in out.glob(pattern) for s in read_pprof(f).samples
               if s.labels.get("process.pid") == pid)


def _run_planted(start_agent, tmp_path: Path, libcuda: Path, mode: str,
                 kernel_us: int = 20) -> Path:
    """The planted program under the agent (GPU profiles and CPU profiles as pprof, GPU
    metrics to the file exporter); the folder advise reads."""
    require_kernel()
    name, out = f"advise-{mode}"[:15], tmp_path / "out"
    run = start_agent([1], overrides=_profiles_config(out, {"process_names": [name]}, {
        "enabled": True, "scan_interval": "200ms", "libraries": [str(libcuda)],
        # exact launch counts: the storm's evidence names them (duty cycles estimate)
        "launches": {"duty_cycle": 1}}))
    app = subprocess.Popen([sys.executable, str(PLANTED), str(libcuda), mode, name],
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                           env={**os.environ, "STANDIN_KERNEL_US": str(kernel_us)})
    try:
        assert app.stdout.readline().strip() == "ready"  # after cuInit
        run.wait_log(f"pid {app.pid} runs CPython", app, 60)  # its frames will be walked
        app.stdin.write("go\n")
        app.stdin.flush()
        assert app.stdout.readline().strip() == "done"
        # every call of the work exported while the program lives (its Python frames are
        # named from its memory)
        kind, calls = {"copy_loop": ("copies", 2001), "launch_storm": ("launches", 3000),
                       "sync_step": ("sync", 40)}[mode]
        deadline = time.monotonic() + 60
        while _exported(out, f"gpu-{kind}-*.pb.gz", app.pid) < calls:
            if time.monotonic() > deadline:
                pytest.fail(f"not all {calls} calls in the gpu-{kind} profiles:\n"
                            f"{run.stderr[-3000:]}")
            time.sleep(0.2)
    finally:
        stop_process(app)
    run.stop()
    # the GPU metrics (the file exporter's OTLP/JSON lines) beside the profiles
    if run.traces.exists():
        (out / "metrics.jsonl").write_bytes(run.traces.read_bytes())
    return out


def test_copy_inside_a_loop_ranks_first(start_agent, tmp_path, libcuda):
    out = _run_planted(start_agent, tmp_path, libcuda, "copy_loop")
    top = first(out, "copy_in_loop", "upload_rows", PLANTED)
    assert top["share"] >= 0.5, top  # of the process's copy time: the one big copy is fast
    assert top["evidence"][0].startswith("2000 copies, 7.8 MiB in all (4.0 KiB each")


def test_launch_storm_ranks_first_with_kernel_names(start_agent, tmp_path, libcuda):
    out = _run_planted(start_agent, tmp_path, libcuda, "launch_storm")
    top = first(out, "launch_storm", "tiny_kernels", PLANTED)
    assert top["share"] == 1.0  # every launch of the program
    assert top["evidence"][0].startswith("3000 kernel launches")
    assert "kernels: scale_add(float*, float*, float, int) (3000)" in top["evidence"]
    # the launch flame graph: the kernel's name on top of the Python function
    svg = tmp_path / "launches.svg"
    r = subprocess.run([str(VENV_BIN / "otel-ebpf"), "flamegraph", str(out), "--kind",
                        "launches", "-o", str(svg)], capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stderr
    text = svg.read_text()
    assert "<title>scale_add(float*, float*, float, int) (3000, 100.00%)</title>" in text
    assert "<title>tiny_kernels (3000, 100.00%)</title>" in text


def test_sync_per_step_ranks_first(start_agent, tmp_path, libcuda):
    # 40 steps of 3 kernels of 20 ms each: ~2.4 s of the CPU waiting
    out = _run_planted(start_agent, tmp_path, libcuda, "sync_step", kernel_us=20_000)
    top = first(out, "sync_per_step", "loss_value", PLANTED)
    assert top["evidence"][0].startswith("40 calls (stream_sync)")
    assert top["share"] >= 0.3, top  # of the profiles' window, spent waiting
