"""The GPU memory ledger: frees pair with the allocation that returned their pointer,
in-use and peak per device and memory type, interval profiles by site; and the gpu.*
metrics built from it."""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource

from otel_ebpf.gpu.ledger import SAMPLE_TYPES, MemoryLedger, Site, site_profiles
from otel_ebpf.gpu.metrics import build_metrics
from otel_ebpf.kernel.cuda_abi import Api, GpuAlloc, GpuFree, GpuInit, GpuMap
from otel_ebpf.kernel.cuda_tracer import CopyTotals, LaunchTotals, SiteTotals

MiB = 1 << 20
A, B = (0x1000, 0x2000), (0x3000, 0x2000)


def alloc(dptr, size, stack=A, pid=1, device=0, api=Api.MEM_ALLOC):
    return GpuAlloc(pid, pid, 0, api, device, dptr, size, 100, stack)


def free(dptr, pid=1, device=0):
    return GpuFree(pid, pid, 0, Api.MEM_FREE, device, dptr, 50)


def test_frees_pair_with_allocations_and_peak_holds():
    ledger = MemoryLedger()
    ledger.apply([GpuInit(1, 1, 0), alloc(0x10, 256 * MiB), alloc(0x20, 1024 * MiB, B)])
    ledger.apply([free(0x10)])
    (u,) = ledger.usage()
    assert (u.in_use, u.peak, u.live, u.allocated, u.allocations) == (
        1024 * MiB, 1280 * MiB, 1, 1280 * MiB, 2)
    assert ledger.live_allocations(1) == {0x20: 1024 * MiB}
    ledger.apply([free(0x20)])
    assert ledger.usage()[0].in_use == 0
    assert ledger.unmatched_frees == 0


def test_unknown_free_and_reused_pointer_are_counted_not_guessed():
    ledger = MemoryLedger()
    ledger.apply([free(0x99), alloc(0x10, MiB), alloc(0x10, 2 * MiB)])
    assert ledger.unmatched_frees == 1
    assert ledger.replaced == 1  # the first block's free was never seen
    (u,) = ledger.usage()
    assert (u.in_use, u.live) == (2 * MiB, 1)


def test_device_and_managed_memory_apart():
    ledger = MemoryLedger()
    ledger.apply([alloc(0x10, MiB, device=1), alloc(0x20, 3 * MiB, device=1,
                                                    api=Api.MEM_ALLOC_MANAGED),
                  alloc(0x30, 5 * MiB, device=-1)])
    got = {(u.device, u.type): u.in_use for u in ledger.usage()}
    assert got == {(1, "device"): MiB, (1, "managed"): 3 * MiB, (-1, "device"): 5 * MiB}


def test_snapshot_alloc_and_inuse_by_site():
    ledger = MemoryLedger()
    ledger.apply([alloc(0x10, 256 * MiB, A), alloc(0x20, 1024 * MiB, B), free(0x10)])
    (profile,) = ledger.snapshot(now_ns=10)
    assert profile.sample_types == SAMPLE_TYPES
    rows = {s.site: s.values for s in profile.samples}
    # alloc_objects, alloc_space, inuse_objects, inuse_space
    assert rows == {Site(A): (1, 256 * MiB, 0, 0), Site(B): (1, 1024 * MiB, 1, 1024 * MiB)}
    # the next interval: no new allocations, the 1 GiB still held
    (profile,) = ledger.snapshot(now_ns=20)
    assert [(s.site, s.values) for s in profile.samples] == [(Site(B), (0, 0, 1, 1024 * MiB))]
    assert (profile.start_ns, profile.end_ns) == (10, 20)
    ledger.apply([free(0x20)])
    assert ledger.snapshot(now_ns=30) == []  # nothing allocated, nothing held


def _site(api, stack, count, nbytes=0, ns=0, func=0, py=()):
    return SiteTotals(7, api, 0, stack, py, func, count, nbytes, ns)


def test_site_profiles_are_deltas_of_kernel_totals():
    seen: dict = {}
    names = {(7, 0xF1): "void add<float>(float*, int)"}
    first = site_profiles([_site(Api.LAUNCH_KERNEL, A, 5, func=0xF1),
                           _site(Api.LAUNCH_KERNEL, B, 3)], seen, 0, 1, names)
    launches = first["launches"][0]
    assert {s.site.stack: s.values for s in launches.samples} == {A: (5,), B: (3,)}
    by_stack = {s.site.stack: dict(s.attributes) for s in launches.samples}
    assert by_stack[A]["gpu.kernel.name"] == "void add<float>(float*, int)"
    assert "gpu.kernel.name" not in by_stack[B]  # a function never seen looked up
    second = site_profiles([_site(Api.LAUNCH_KERNEL, A, 9, func=0xF1),
                            _site(Api.LAUNCH_KERNEL, B, 3)], seen, 1, 2, names)
    assert [(s.site.stack, s.values) for s in second["launches"][0].samples] == [(A, (4,))]


def test_site_profiles_of_copies_and_waits():
    seen: dict = {}
    out = site_profiles([_site(Api.MEMCPY_HTOD, A, 4, 4 * MiB, 4000, py=(0x70,)),
                         _site(Api.STREAM_SYNC, B, 2, 0, 9_000_000)], seen, 0, 1)
    (copy,) = out["copies"][0].samples
    assert copy.site == Site(A, (0x70,)) and copy.values == (4, 4 * MiB, 4000)
    assert dict(copy.attributes)["gpu.copy.api"] == "memcpy_htod"
    (wait,) = out["sync"][0].samples
    assert wait.values == (2, 9_000_000)
    assert dict(wait.attributes)["gpu.sync.api"] == "stream_sync"
    assert out["launches"] == []


def test_cumemcreate_handles_pair_with_release_apart_from_pointers():
    ledger = MemoryLedger()
    ledger.apply([GpuAlloc(1, 1, 1, Api.MEM_CREATE, 0, 0x10, 2 * MiB, 0, A),
                  alloc(0x10, 1 * MiB),  # a device pointer equal to the handle
                  GpuMap(1, 1, 2, 0x7F0000, 2 * MiB, True),
                  GpuFree(1, 1, 3, Api.MEM_RELEASE, 0, 0x10, 0)])
    assert ledger.live_allocations(1) == {0x10: 1 * MiB}
    assert ledger.unmatched_frees == 0
    assert ledger.mapped() == {1: 2 * MiB}
    ledger.apply([GpuMap(1, 1, 4, 0x7F0000, 2 * MiB, False)])
    assert ledger.mapped() == {}


def test_metrics_per_process_resource():
    ledger = MemoryLedger()
    ledger.apply([alloc(0x10, 256 * MiB, device=1), alloc(0x20, 64 * MiB, pid=2, device=0),
                  free(0x10), alloc(0x30, 8 * MiB, device=1)])
    copies = [CopyTotals(1, Api.MEMCPY_HTOD, 1, 3, 3 * MiB, 3000),
              CopyTotals(1, Api.MEMCPY_HTOD_ASYNC, 1, 1, 4096, 1000)]
    launches = [LaunchTotals(1, 1, A, 5), LaunchTotals(1, 1, B, 3)]
    data = build_metrics(ledger.usage(), copies, launches,
                         lambda pid: Resource({"process.pid": pid}), lambda pid: 1, now_ns=2)
    by_pid = {rm.resource.attributes["process.pid"]: {
        m.name: [(dict(p.attributes), p.value) for p in m.data.data_points]
        for m in rm.scope_metrics[0].metrics} for rm in data.resource_metrics}
    one = by_pid[1]
    dev1 = {"gpu.device.index": 1, "gpu.memory.type": "device"}
    assert one["gpu.memory.in_use"] == [(dev1, 8 * MiB)]
    assert one["gpu.memory.peak"] == [(dev1, 256 * MiB)]
    assert one["gpu.memory.allocations"] == [(dev1, 2)]
    assert one["gpu.kernel.launches"] == [({"gpu.device.index": 1}, 8)]
    sync = {"gpu.device.index": 1, "gpu.copy.direction": "host_to_device", "gpu.copy.async": False}
    assert (sync, 3 * MiB) in one["gpu.memory.copy.bytes"]
    assert (sync, 3e-6) in one["gpu.memory.copy.time"]
    assert by_pid[2]["gpu.memory.in_use"] == [({"gpu.device.index": 0,
                                                "gpu.memory.type": "device"}, 64 * MiB)]


def test_an_exited_process_reads_zero_in_use_for_its_last_report():
    ledger = MemoryLedger()
    ledger.apply([alloc(0x10, 256 * MiB), GpuMap(1, 1, 2, 0x7F0000, 2 * MiB, True)])
    ledger.exited(1)
    (u,) = ledger.usage()
    assert (u.in_use, u.live, u.peak, u.allocated) == (0, 0, 256 * MiB, 256 * MiB)
    assert ledger.mapped() == {} and ledger.live_allocations(1) == {}
