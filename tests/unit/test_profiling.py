"""CPU profiling without the kernel: the ABI mirror, stack merging, span links, the
OTLP/pprof/folded encoders, the config, and CPython offsets checked against live
interpreters of each version at hand (code objects read from another process)."""

from __future__ import annotations

import glob
import gzip
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from otel_ebpf.config import ConfigError, parse_config
from otel_ebpf.export.pprof import PprofProfile, encode_folded, encode_pprof
from otel_ebpf.export.profiles import ProfileBatch, ProfileSample, encode_request
from otel_ebpf.kernel import cpu_sampler
from otel_ebpf.profiling.elf import ElfCache, follows_call
from otel_ebpf.profiling.frames import KERNEL, NATIVE, PYTHON, Frame, merge, python_groups
from otel_ebpf.profiling.links import ActiveSpans
from otel_ebpf.profiling.procmaps import ProcessMaps
from otel_ebpf.profiling.python_offsets import TABLES, from_debug_offsets
from otel_ebpf.profiling.python_procs import CodeNames, find_interpreter

REPO = Path(__file__).resolve().parents[2]


def test_abi_matches_the_c_header(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:  # make install brings clang: a missing compiler is a broken install
        pytest.fail("a C compiler is needed (make install brings clang)")
    src = tmp_path / "probe.c"
    src.write_text("""
#include <stdio.h>
#include <stddef.h>
#include <linux/types.h>
#include "profile_abi.h"
int main(void) {
  printf("%zu %zu %zu %zu %zu %zu %zu %zu %zu %d\\n", sizeof(struct profile_sample),
         offsetof(struct profile_sample, kstack), offsetof(struct profile_sample, ustack),
         offsetof(struct profile_sample, py), sizeof(struct py_proc),
         sizeof(struct profile_config), offsetof(struct py_proc, o),
         sizeof(struct unwind_row), sizeof(struct unwind_proc), UNWIND_MAX_MAPS);
  return 0;
}""")
    subprocess.run([cc, "-I", str(REPO / "bpf/include"), "-o", str(tmp_path / "probe"),
                    str(src)], check=True)
    out = subprocess.run([str(tmp_path / "probe")], capture_output=True, text=True,
                         check=True).stdout.split()
    assert list(map(int, out)) == [cpu_sampler.SAMPLE_SIZE, cpu_sampler._K_AT,
                                   cpu_sampler._U_AT, cpu_sampler._P_AT,
                                   cpu_sampler.PY_PROC_SIZE, cpu_sampler.CONFIG.size, 8,
                                   cpu_sampler.UNWIND_ROW_SIZE, cpu_sampler.UNWIND_PROC_SIZE,
                                   cpu_sampler.UNWIND_MAX_MAPS]


def test_decode_sample_roundtrip():
    import struct
    head = struct.pack("<QIIIiiHH16sIB3x", 5, 10, 11, 1, 16, 8, 2, 1, b"worker", 10, 2)
    body = bytearray(cpu_sampler.SAMPLE_SIZE - len(head))
    struct.pack_into("<2Q", body, 0, 0xffffffff81000000, 0xffffffff81000010)
    struct.pack_into("<Q", body, 8 * cpu_sampler.MAX_KSTACK, 0x401000)
    struct.pack_into("<2Q", body, 8 * (cpu_sampler.MAX_KSTACK + cpu_sampler.MAX_USTACK),
                     0x7000 | 1, 0x8000)
    s = cpu_sampler.decode(head + bytes(body))
    assert (s.pid, s.tid, s.comm, s.py_status) == (10, 11, "worker", 1)
    # a worker's sample with the frames of thread 10, two wakers away
    assert (s.py_tid, s.py_hops, s.dispatched) == (10, 2, True)
    assert s.kstack == (0xffffffff81000000, 0xffffffff81000010)
    assert s.ustack == (0x401000,)
    assert s.py == (0x7001, 0x8000)
    with pytest.raises(cpu_sampler.BadSample):
        cpu_sampler.decode(b"short")


def _f(name, kind=NATIVE):
    return Frame(name, "x.py" if kind == PYTHON else "lib.so", kind)


def test_python_frames_replace_evaluator_frames_in_order():
    py = [_f("inner", PYTHON), _f("middle", PYTHON), _f("outer", PYTHON)]
    groups = python_groups(py, [False, True, True])
    assert [[f.name for f in g] for g in groups] == [["inner", "middle"], ["outer"]]
    native = [_f("deflate"), _f("zlib_compress"), _f("_PyEval_EvalFrameDefault"),
              _f("PyObject_Call"), _f("_PyEval_EvalFrameDefault"), _f("main")]
    out = merge([_f("page_fault", KERNEL)], native, groups)
    assert [f.name for f in out] == ["page_fault", "deflate", "zlib_compress", "inner",
                                     "middle", "PyObject_Call", "outer", "main"]


def test_a_workers_stack_has_its_dispatchers_python_frames_under_the_worker_frame():
    from otel_ebpf.profiling.frames import WORKER_FRAME, merge_dispatched

    groups = [[_f("torch_hot", PYTHON), _f("main", PYTHON)]]
    native = [_f("mkl_blas_sgemm_kernel"), _f("gomp_thread_start"), _f("start_thread")]
    out = merge_dispatched([_f("page_fault", KERNEL)], native, groups)
    assert [f.name for f in out] == ["page_fault", "mkl_blas_sgemm_kernel",
                                     "gomp_thread_start", "start_thread", WORKER_FRAME.name,
                                     "torch_hot", "main"]
    # the name the docs and the integration test give it
    assert WORKER_FRAME.name == "[dispatched to worker threads]"


def test_python_frames_go_below_a_short_native_unwind():
    groups = [[_f("native_part", PYTHON), _f("main", PYTHON)]]
    out = merge([], [_f("deflate")], groups)
    assert [f.name for f in out] == ["deflate", "native_part", "main"]


def test_return_address_check():
    assert follows_call(b"\x90\x90\xe8\x00\x00\x00\x00", "x86_64")       # call rel32
    assert follows_call(b"\x90\x90\x90\x90\x90\xff\xd0", "x86_64")       # call *%rax
    assert not follows_call(b"\x90" * 7, "x86_64")
    assert follows_call((0x94000010).to_bytes(4, "little"), "aarch64")    # bl
    assert not follows_call((0xD503201F).to_bytes(4, "little"), "aarch64")  # nop


def test_links_need_exactly_one_covering_span():
    spans = ActiveSpans()
    spans.add(1, 2, 100, 200, b"t" * 16, b"a" * 8)
    assert spans.find(1, 2, 150) == (b"t" * 16, b"a" * 8)
    assert spans.find(1, 2, 250) is None
    assert spans.find(1, 3, 150) is None
    spans.add(1, 2, 140, 300, b"u" * 16, b"b" * 8)  # overlapping: an event loop
    assert spans.find(1, 2, 150) is None
    assert spans.find(1, 2, 250) == (b"u" * 16, b"b" * 8)
    spans.prune(before_ns=250)
    assert spans.find(1, 2, 120) is None


def _batch():
    a = Frame("deflate", "/usr/lib/libz.so.1", NATIVE, 0x1234)
    b = Frame("native_part", "/w.py", PYTHON, 0, 20)
    c = Frame("python_hot", "/w.py", PYTHON, 0, 10)
    res = {"service.name": "w", "process.pid": 7}
    link = (bytes(range(16)), bytes(range(8)))
    return ProfileBatch(
        sample_types=(("samples", "count"), ("cpu", "nanoseconds")),
        start_ns=1_000, end_ns=11_000, period_type=("cpu", "nanoseconds"), period=10,
        samples=[ProfileSample((a, b), (1, 10), res, {"thread.id": 8}, None, 2_000),
                 ProfileSample((a, b), (1, 10), res, {"thread.id": 8}, None, 3_000),
                 ProfileSample((c,), (1, 10), res, {"thread.id": 8}, link, 4_000)])


def test_otlp_encoding_shares_one_dictionary():
    req = encode_request(_batch())
    d = req.dictionary
    assert d.string_table[0] == "" and len(d.stack_table[0].location_indices) == 0
    (rp,) = req.resource_profiles
    attrs = {kv.key: kv.value for kv in rp.resource.attributes}
    assert attrs["process.pid"].int_value == 7
    profiles = rp.scope_profiles[0].profiles
    types = [d.string_table[p.sample_type.type_strindex] for p in profiles]
    assert types == ["samples", "cpu"]
    counts, cpu = profiles
    # identical stack/attributes/link merge, values and timestamps side by side
    merged = [s for s in counts.samples if len(s.values) == 2]
    assert len(counts.samples) == 2 and merged[0].timestamps_unix_nano == [2000, 3000]
    assert sum(v for s in cpu.samples for v in s.values) == 30
    linked = [s for s in counts.samples if s.link_index]
    assert d.link_table[linked[0].link_index].trace_id == bytes(range(16))
    names = [d.string_table[d.function_table[d.location_table[i].lines[0].function_index]
                            .name_strindex]
             for i in d.stack_table[merged[0].stack_index].location_indices]
    assert names == ["deflate", "native_part"]


def test_pprof_and_folded():
    data = encode_pprof(_batch())
    p = PprofProfile()
    p.ParseFromString(gzip.decompress(gzip.compress(data)))
    st = p.string_table
    assert st[0] == "" and [st[t.type] for t in p.sample_type] == ["samples", "cpu"]
    assert len(p.sample) == 3 and p.period == 10
    labels = {st[lb.key]: st[lb.str] for lb in p.sample[2].label if lb.str}
    assert labels["trace_id"] == bytes(range(16)).hex()
    fn = {f.id: st[f.name] for f in p.function}
    loc = {lc.id: fn[lc.line[0].function_id] for lc in p.location}
    assert [loc[i] for i in p.sample[0].location_id] == ["deflate", "native_part"]
    assert encode_folded(_batch()).splitlines() == ["w;native_part;deflate 2",
                                                    "w;python_hot 1"]


def test_config_profiles_pipeline():
    cfg = parse_config("""
receivers: {ebpf: {profiling: {frequency: 99, interval: 5s}}}
exporters: {pprof: {path: /tmp/p}, otlp: {endpoint: "http://127.0.0.1:4317"}}
service: {pipelines: {profiles: {receivers: [ebpf], exporters: [pprof, otlp]}}}
""")
    assert cfg.receiver.profiling_frequency == 99 and cfg.receiver.profiling_interval_s == 5
    assert list(cfg.exporters_for("profiles")) == ["pprof", "otlp"]
    assert parse_config("{}").receiver.profiling_frequency == 19
    bad = {
        "receivers: {ebpf: {profiling: {frequency: 1000}}}":
            "receivers.ebpf.profiling.frequency",
        "exporters: {debug: {}}\nservice: {pipelines: {profiles: "
        "{receivers: [ebpf], exporters: [debug]}}}": "service.pipelines.profiles.exporters[0]",
        "exporters: {folded: {path: /tmp/x}}\nservice: {pipelines: {traces: "
        "{receivers: [ebpf], exporters: [folded]}}}": "service.pipelines.traces.exporters[0]",
    }
    for text, path in bad.items():
        with pytest.raises(ConfigError) as err:
            parse_config(text)
        assert err.value.path == path


# ---------------------------------------------------------------- CPython offsets, live

def _pythons() -> list[str]:
    exes = [sys.executable, *glob.glob("/usr/bin/python3.1[1-9]"),
            *glob.glob(str(Path.home() / ".pyenv/versions/3.1[1-9]*/bin/python3"))]
    return sorted({str(Path(e).resolve()) for e in exes if Path(e).is_file()})


CHILD = """
import sys
def some_function(): pass
class Klass:
    def méthode(self): pass
print(id(some_function.__code__), id(Klass.méthode.__code__), flush=True)
sys.stdin.read()
"""


@pytest.mark.parametrize("exe", _pythons())
def test_code_objects_read_from_a_live_interpreter(exe):
    """The offsets of the interpreter's version name its code objects from outside."""
    proc = subprocess.Popen([exe, "-c", CHILD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True)
    try:
        line = proc.stdout.readline().split()
        if not line:  # an installed interpreter that cannot start is a fault, not a skip
            pytest.fail(f"{exe} did not start")
        maps = ProcessMaps(proc.pid)
        interp = find_interpreter(proc.pid, maps, ElfCache())
        if interp is None:
            ver = subprocess.run([exe, "-c", "import sys;print(sys.version_info>=(3,11))"],
                                 capture_output=True, text=True).stdout.strip()
            assert ver == "False", f"{exe}: a 3.11+ interpreter was not recognised"
            return
        names = CodeNames(interp)
        try:
            f1, f2 = (names.frame(int(x)) for x in line)
        finally:
            names.close()
        assert (f1.name, f1.module, f1.line) == ("some_function", "<string>", 3)
        assert (f2.name, f2.line) == ("Klass.méthode", 5)
        if interp.version >= (3, 13):
            assert interp.offsets.cframe_current == 0xFFFFFFFF  # read from _Py_DebugOffsets
        else:
            assert interp.offsets is TABLES[interp.version]
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


def test_debug_offsets_reject_other_layouts():
    with pytest.raises(ValueError):
        from_debug_offsets(b"notdebug" + bytes(600))
    raw = bytearray(b"xdebugpy" + bytes(600))
    raw[8:16] = (0x030E00F0).to_bytes(8, "little")  # 3.14
    with pytest.raises(ValueError):
        from_debug_offsets(bytes(raw))


def test_an_interpreter_is_found_after_the_first_process_of_its_file_exited():
    """The ELF cache shares one parse per file among processes, and each process's files
    are reached through its own /proc/PID/root: once the first process that mapped the
    interpreter is gone, the next one must still be read (on a GPU host, a training run
    started after a first torch process ended got no Python frames)."""
    elfs = ElfCache()
    found = []
    for _ in range(2):  # one after the other: the first has exited when the second is read
        proc = subprocess.Popen(
            [sys.executable, "-c", "import sys; print('up', flush=True); sys.stdin.read()"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "up"
            found.append(find_interpreter(proc.pid, ProcessMaps(proc.pid), elfs))
        finally:
            proc.communicate(timeout=30)
        assert found[-1] is not None and found[-1].pid == proc.pid
