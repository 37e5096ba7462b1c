"""CPU profiles for real: the BPF sampler on a Python program with a known profile, for
every CPython 3.11+ on this machine; exported over OTLP/gRPC to a ProfilesService server
built here from opentelemetry-proto's service definition, and as pprof and folded files
read back."""

from __future__ import annotations

import glob
import gzip
import subprocess
import sys
import time
from collections import Counter
from concurrent import futures
from pathlib import Path

import grpc
import pytest
from opentelemetry.proto.collector.profiles.v1development import (
    profiles_service_pb2 as service_pb2,
)
from opentelemetry.proto.collector.profiles.v1development import (
    profiles_service_pb2_grpc as service_grpc,
)

from tests.integration.conftest import REPO, require_kernel
from tests.support.processes import stop_process

WORKLOAD = REPO / "tests/integration/peers/cpu_workload.py"
SAMPLE_S = 5.0
FREQUENCY = 99
# samples of 5 s on a CPU, however long the workload takes to get them on a busy machine
# (it is sampled only while it runs): a count, not a wall-clock window
SAMPLES = int(SAMPLE_S * FREQUENCY)
SAMPLE_LIMIT_S = 180.0


def _interpreters() -> dict[str, str]:
    """`<version>-<source>` -> interpreter, for each CPython 3.11+ (with the GIL) found:
    Debian's (/usr/bin), pyenv's, uv's, and this venv's (each binary once)."""
    sources = [("system", sorted(glob.glob("/usr/bin/python3.1[1-9]"))),
               ("pyenv", sorted(glob.glob(str(Path.home() / ".pyenv/versions/3.1[1-9]*/bin/python3")))),
               ("uv", sorted(glob.glob(str(Path.home() / ".local/share/uv/python/cpython-3.1[1-9]*/bin/python3")))),
               ("venv", [sys.executable])]
    found: dict[str, str] = {}
    seen: set[str] = set()
    for source, exes in sources:
        for exe in exes:
            real = str(Path(exe).resolve())
            if real in seen or not Path(exe).is_file():
                continue
            seen.add(real)
            try:
                out = subprocess.run(
                    [exe, "-c", "import sys;print('%d.%d' % sys.version_info[:2], "
                     "getattr(sys, '_is_gil_enabled', lambda: True)())"],
                    capture_output=True, text=True, timeout=20).stdout.split()
            except (OSError, subprocess.TimeoutExpired):
                continue
            if len(out) == 2 and out[1] == "True" and tuple(map(int, out[0].split("."))) >= (3, 11):
                found.setdefault(f"{out[0]}-{source}", exe)
    return found


INTERPRETERS = _interpreters()


class _Receiver(service_grpc.ProfilesServiceServicer):
    def __init__(self) -> None:
        self.requests: list[service_pb2.ExportProfilesServiceRequest] = []

    def Export(self, request, context):  # noqa: N802 (the proto's name)
        self.requests.append(request)
        return service_pb2.ExportProfilesServiceResponse()


@pytest.fixture
def receiver():
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    rec = _Receiver()
    service_grpc.add_ProfilesServiceServicer_to_server(rec, server)
    port = server.add_insecure_port("127.0.0.1:0")
    server.start()
    yield rec, port
    server.stop(grace=None)


def _otlp_stacks(requests) -> list[tuple[list[tuple[str, str, str]], int]]:
    """(frames innermost first as (name, file, frame type), sample count) per sample of
    the `samples` profile, resolved through each request's dictionary."""
    out = []
    for req in requests:
        d = req.dictionary
        s = d.string_table
        for rp in req.resource_profiles:
            for sp in rp.scope_profiles:
                for prof in sp.profiles:
                    if s[prof.sample_type.type_strindex] != "samples":
                        continue
                    for sample in prof.samples:
                        frames = []
                        for li in d.stack_table[sample.stack_index].location_indices:
                            loc = d.location_table[li]
                            fn = d.function_table[loc.lines[0].function_index]
                            kind = next(d.attribute_table[a].value.string_value
                                        for a in loc.attribute_indices
                                        if s[d.attribute_table[a].key_strindex] ==
                                        "profile.frame.type")
                            frames.append((s[fn.name_strindex], s[fn.filename_strindex], kind))
                        out.append((frames, sum(sample.values)))
    return out


def _folded_name(name: str, kind: str) -> str:
    """A frame as folded stacks name it (flamegraph.pl's conventions)."""
    name = name.replace(";", ":").replace(" ", "_") or "?"
    return name + "_[k]" if kind == "kernel" else name


def _shares(stacks):
    """Shares of samples in python_hot, and in native code (zlib's, or the kernel's on
    its behalf) under native_part, with whether native_part sits below that native code."""
    total = hot = native = ordered = 0
    for frames, n in stacks:
        total += n
        names = [f[0] for f in frames]
        if "python_hot" in names:
            hot += n
        if "native_part" in names:
            below = names.index("native_part")
            inner = [f for f in frames[:below] if f[2] in ("native", "kernel")]
            if any("libz" in f[1] or "zlib" in f[1] or f[2] == "kernel" for f in inner):
                native += n
                if frames[below][2] == "python":
                    ordered += n
    return total, hot / total, native / total, ordered


@pytest.mark.parametrize("label", sorted(INTERPRETERS) or ["none"])
def test_python_and_native_shares(label, receiver, tmp_path):
    require_kernel()
    if label == "none":  # this venv's own interpreter is one: finding none is a fault
        pytest.fail("no CPython 3.11+ found, not even this venv's")
    from otel_ebpf.export.pprof import PprofProfile
    from otel_ebpf.export.profile_exporters import build_profile_exporters
    from otel_ebpf.kernel.libbpf import LibbpfLog
    from otel_ebpf.profiling.profiler import CpuProfiler, ProfilerSettings
    from otel_ebpf.telemetry import Stats

    rec, port = receiver
    exporters, _ = build_profile_exporters({
        "otlp": {"endpoint": f"http://127.0.0.1:{port}"},
        "pprof": {"path": str(tmp_path / "pprof")},
        "folded": {"path": str(tmp_path / "folded")},
    })
    proc = subprocess.Popen([INTERPRETERS[label], str(WORKLOAD), str(SAMPLE_LIMIT_S + 20)],
                            stdout=subprocess.PIPE, text=True)
    received = 0
    stats = Stats()
    try:
        assert proc.stdout.readline().strip() == "READY"
        profiler = CpuProfiler(
            ProfilerSettings(frequency=FREQUENCY, interval_s=3600, pids=(proc.pid,)),
            exporters, LibbpfLog(), resources=lambda pid, comm: {"process.pid": pid},
            to_wall=lambda t: t, stats=stats)
        try:
            deadline = time.monotonic() + SAMPLE_LIMIT_S
            while received < SAMPLES and time.monotonic() < deadline:
                received += profiler.poll(100)
            profiler.stop()
        finally:
            profiler.close()
        interp = profiler.pythons.get(proc.pid)
    finally:
        stop_process(proc)
    assert interp is not None, "the interpreter was not recognised"
    assert f"{interp.version[0]}.{interp.version[1]}" == label.split("-")[0]

    # OTLP: what the receiver got
    stacks = _otlp_stacks(rec.requests)
    total, hot, native, ordered = _shares(stacks)
    assert received >= SAMPLES, f"only {received} samples in {SAMPLE_LIMIT_S:.0f} s"
    # stop() drains what the kernel still held: the profiler's own count includes those
    taken = stats.total("profiles.samples")
    assert taken >= received
    assert total == taken, f"{taken} samples taken, {total} exported"
    assert abs(hot - 0.70) <= 0.10, f"python_hot share {hot:.2f}"
    assert abs(native - 0.20) <= 0.10, f"zlib share {native:.2f}"
    assert ordered == round(native * total), "native_part not below zlib's frames"

    # pprof, parsed back
    (pprof_file,) = (tmp_path / "pprof").iterdir()
    p = PprofProfile()
    p.ParseFromString(gzip.decompress(pprof_file.read_bytes()))
    st = p.string_table
    assert [st[t.type] for t in p.sample_type] == ["samples", "cpu"]
    funcs = {f.id: f for f in p.function}
    locs = {loc.id: loc for loc in p.location}
    maps = {m.id: st[m.filename] for m in p.mapping}
    pstacks = []
    for sample in p.sample:
        frames = []
        for lid in sample.location_id:
            loc = locs[lid]
            fn = funcs[loc.line[0].function_id]
            module = maps[loc.mapping_id]
            kind = "kernel" if module == "[kernel]" else (
                "python" if module.endswith(".py") else "native")
            frames.append((st[fn.name], st[fn.filename], kind))
        pstacks.append((frames, sample.value[0]))
    assert _shares(pstacks)[0] == total
    assert abs(_shares(pstacks)[1] - hot) < 1e-9

    # folded: the same samples, root first, under the process's root frame
    (folded_file,) = (tmp_path / "folded").iterdir()
    folded: Counter[tuple[str, ...]] = Counter()
    for line in folded_file.read_text().splitlines():
        stack, n = line.rsplit(" ", 1)
        root, *names = stack.split(";")
        assert root == str(proc.pid), line
        folded[tuple(names)] += int(n)
    assert sum(folded.values()) == total
    otlp: Counter[tuple[str, ...]] = Counter()
    for frames, n in stacks:
        otlp[tuple(_folded_name(name, kind) for name, _, kind in reversed(frames))] += n
    assert folded == otlp
    # ... and zlib's frames (or the kernel's on its behalf) sit below native_part there too,
    # in as many samples as OTLP said
    zlib = {_folded_name(name, kind) for frames, _ in stacks for name, file, kind in frames
            if kind == "kernel" or (kind == "native" and ("libz" in file or "zlib" in file))}
    under = sum(n for names, n in folded.items() if "native_part" in names
                and zlib & set(names[names.index("native_part") + 1:]))
    assert under == round(native * total) > 0
