"""The GPU memory ledger: frees pair with the allocation that returned their pointer,
in-use and peak per device and memory type, interval profiles by site; and the gpu.*
metrics built from it."""

from __future__ import annotations

from opentelemetry.sdk.resources import Resource

from otel_ebpf.gpu.ledger import SAMPLE_TYPES, MemoryLedger, Site, launch_profiles
from otel_ebpf.gpu.metrics import build_metrics
from otel_ebpf.kernel.cuda_abi import Api, GpuAlloc, GpuFree, GpuInit
from otel_ebpf.kernel.cuda_tracer import CopyTotals, LaunchTotals

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


def test_launch_profiles_are_deltas_of_kernel_totals():
    seen: dict = {}
    first = launch_profiles([LaunchTotals(7, 0, A, 5), LaunchTotals(7, 0, B, 3)], seen, 0, 1)
    assert {s.site.stack: s.values for s in first[0].samples} == {A: (5,), B: (3,)}
    second = launch_profiles([LaunchTotals(7, 0, A, 9), LaunchTotals(7, 0, B, 3)], seen, 1, 2)
    assert [(s.site.stack, s.values) for s in second[0].samples] == [(A, (4,))]


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
