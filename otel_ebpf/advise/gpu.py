"""GPU findings from the agent's GPU profiles and metrics: memory (top holders, churn,
peak against what is held), copies (time by site, copies inside loops, asynchronous copies
that blocked: pageable host memory), launches (many small kernels from one site) and the
CPU waiting for the GPU in synchronize calls."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping

from otel_ebpf.gpu.ledger import ESTIMATED

from .model import COPIES, GPU_MEMORY, LAUNCHES, SYNC, Finding, Location, Point, Profile
from .sites import process_of, site_of

MiB = 1 << 20
LOOP_COPIES = 64  # copies from one site in the window: a loop
LOOP_COPY_MAX_BYTES = 1 * MiB  # ... of pieces this small (mean)
STORM_LAUNCHES = 1000  # launches from one Python site in the window
SYNC_CALLS = 10  # synchronize calls from one site: once per step, not once at the end
PAGEABLE_MIN_BYTES = 256 << 10  # asynchronous copies this large ...
PAGEABLE_GBPS = 25.0  # ... enqueued slower than this blocked: a staged (pageable) copy
CHURN_INTERVALS = 3  # a site that allocates in this many intervals churns


def _fmt_bytes(n: float) -> str:
    return f"{n / MiB:.1f} MiB" if n >= MiB else f"{n / 1024:.1f} KiB"


def _fmt_s(ns: float) -> str:
    return f"{ns / 1e9:.3f} s" if ns >= 1e8 else f"{ns / 1e6:.2f} ms"


class _Site:
    __slots__ = ("values", "labels", "intervals", "names", "estimated")

    def __init__(self, n: int) -> None:
        self.values = [0] * n
        self.labels: Counter = Counter()
        self.intervals = 0
        self.names: Counter = Counter()  # kernel names (launches)
        self.estimated = False  # launch counts scaled from the probes' duty cycle


def by_site(profiles: Iterable[Profile], kind: str, types: tuple[str, ...],
            process: Callable[[Mapping], str] = process_of
            ) -> tuple[dict[tuple[str, Location], _Site], Counter]:
    """Values summed by (process, location) over the profiles of `kind`, with the number
    of profiles in which the first value was not 0 (intervals the site was active in);
    the window (sum of the profiles' durations) per process. `process` names a sample's
    process from its labels."""
    sites: dict[tuple[str, Location], _Site] = {}
    window: Counter = Counter()
    for prof in profiles:
        if prof.kind != kind:
            continue
        idx = [prof.index(t) for t in types]
        seen_procs, seen_sites = set(), set()
        for s in prof.samples:
            proc = process(s.labels)
            loc = site_of(s.frames)
            site = sites.setdefault((proc, loc), _Site(len(types)))
            for j, i in enumerate(idx):
                if i is not None:
                    site.values[j] += s.values[i]
            for k in ("gpu.copy.api", "gpu.sync.api"):
                if k in s.labels:
                    site.labels[s.labels[k]] += s.values[idx[0] or 0]
            if str(s.labels.get(ESTIMATED)).lower() in ("true", "1"):  # OTLP bool, pprof
                site.estimated = True  # label "True"
            if "gpu.kernel.name" in s.labels:
                site.names[s.labels["gpu.kernel.name"]] += s.values[idx[0] or 0]
            seen_procs.add(proc)
            if s.values[idx[0]] if idx[0] is not None else 0:
                seen_sites.add((proc, loc))  # active this interval (allocated, copied...)
        for key in seen_sites:
            sites[key].intervals += 1
        for proc in seen_procs:
            window[proc] += prof.duration_ns
    return sites, window


def _copies(profiles: list[Profile]) -> list[Finding]:
    sites, window = by_site(profiles, COPIES, ("copies", "copy_space", "copy_time"))
    per_proc: Counter = Counter()
    for (proc, _), s in sites.items():
        per_proc[proc] += s.values[2] or s.values[0]
    out = []
    for (proc, loc), s in sites.items():
        count, nbytes, ns = s.values
        if not count:
            continue
        share = (ns or count) / per_proc[proc] if per_proc[proc] else 0.0
        mean = nbytes / count
        apis = ", ".join(a for a, _ in s.labels.most_common())
        evidence = [f"{count} copies, {_fmt_bytes(nbytes)} in all ({_fmt_bytes(mean)} "
                    f"each on average), {_fmt_s(ns)} inside the copy calls ({apis})",
                    f"{share:.0%} of {proc}'s copy time"]
        if window[proc]:
            evidence.append(f"over {_fmt_s(window[proc])} of profiles: "
                            f"{count / (window[proc] / 1e9):.0f} copies/s")
        if count >= LOOP_COPIES and mean <= LOOP_COPY_MAX_BYTES:
            out.append(Finding(
                "copy_in_loop", f"{count} small copies from {loc.function}() (a copy inside "
                "a loop)", share, loc, evidence,
                "gather the pieces into one host buffer (torch.stack/torch.cat, a NumPy "
                "array) and copy it once, or build the data on the device; each copy "
                "pays the driver's fixed cost", process=proc))
            continue
        async_htod = s.labels.get("memcpy_htod_async", 0)
        if async_htod and mean >= PAGEABLE_MIN_BYTES and ns and nbytes / ns < PAGEABLE_GBPS:
            out.append(Finding(
                "unpinned_copy", f"asynchronous copies from {loc.function}() blocked like "
                "synchronous ones (pageable host memory)", share, loc, evidence + [
                    f"enqueued at {nbytes / ns:.1f} GB/s: a pinned-memory copy returns at "
                    "once"],
                "allocate the host tensors pinned (pin_memory=True in the DataLoader, "
                "tensor.pin_memory()) and copy with non_blocking=True, so the copy "
                "overlaps compute", process=proc))
            continue
        if "memcpy_htod" in s.labels or "memcpy_htod_async" in s.labels or not s.labels:
            out.append(Finding(
                "copy_time", f"host-to-device copies from {loc.function}()", share, loc,
                evidence, "copy once and keep the data on the device across steps; "
                "overlap copies with compute (pinned memory, non_blocking=True)",
                process=proc))
    return out


def _launches(profiles: list[Profile]) -> list[Finding]:
    sites, window = by_site(profiles, LAUNCHES, ("kernel_launches",))
    per_proc: Counter = Counter()
    for (proc, _), s in sites.items():
        per_proc[proc] += s.values[0]
    out = []
    for (proc, loc), s in sites.items():
        n = s.values[0]
        if n < STORM_LAUNCHES:
            continue
        share = n / per_proc[proc]
        about = "~" if s.estimated else ""
        evidence = [f"{about}{n} kernel launches from this site, {share:.0%} of {proc}'s "
                    "launches"]
        if s.estimated:
            evidence.append("estimated: the launch probes were attached part of the time "
                            "(gpu.launches.duty_cycle), the counts scaled by the time they "
                            "were attached")
        if window[proc]:
            evidence.append(f"{n / (window[proc] / 1e9):.0f} launches/s over "
                            f"{_fmt_s(window[proc])} of profiles")
        if s.names:
            evidence.append("kernels: " + ", ".join(
                f"{name} ({k})" for name, k in s.names.most_common(3)))
        out.append(Finding(
            "launch_storm", f"{about}{n} kernel launches from {loc.function}()", share, loc,
            evidence, "many small kernels from one place: capture the step in a CUDA graph "
            "(torch.cuda.CUDAGraph, torch.compile(mode=\"reduce-overhead\")), fuse the "
            "elementwise operations (torch.compile), or batch the work into larger tensors",
            process=proc))
    return out


def _syncs(profiles: list[Profile]) -> list[Finding]:
    sites, window = by_site(profiles, SYNC, ("sync_calls", "sync_wait"))
    out = []
    for (proc, loc), s in sites.items():
        calls, ns = s.values
        if calls < SYNC_CALLS or not ns:
            continue
        share = min(1.0, ns / window[proc]) if window[proc] else 0.0
        apis = ", ".join(a for a, _ in s.labels.most_common())
        out.append(Finding(
            "sync_per_step", f"the CPU waits for the GPU in {loc.function}() "
            f"({calls} synchronizations)", share, loc,
            [f"{calls} calls ({apis}), {_fmt_s(ns)} waiting in all, {_fmt_s(ns / calls)} "
             "each", f"{share:.0%} of {_fmt_s(window[proc])} of profiles spent waiting"],
            "a synchronization per step (.item(), .cpu(), .tolist(), printing a CUDA "
            "tensor, torch.cuda.synchronize()) stops the CPU from queuing the next "
            "step: keep the value on the GPU and read it every N steps, or copy it "
            "with non_blocking=True into pinned memory", process=proc))
    return out


def _memory(profiles: list[Profile], points: list[Point]) -> list[Finding]:
    mem = [p for p in profiles if p.kind == GPU_MEMORY]
    out = []
    sites, _ = by_site(mem, GPU_MEMORY,
                        ("alloc_objects", "alloc_space", "inuse_objects", "inuse_space"))
    # holders: what each site holds at the last profile of its process
    last: dict[str, Profile] = {}
    for p in sorted(mem, key=lambda p: p.start_ns):
        for s in p.samples:
            last[process_of(s.labels)] = p
    held: dict[tuple[str, Location], int] = defaultdict(int)
    for proc, p in last.items():
        i = p.index("inuse_space")
        if i is None:
            continue
        for s in p.samples:
            if process_of(s.labels) == proc:
                held[(proc, site_of(s.frames))] += s.values[i]
    per_proc: Counter = Counter()
    for (proc, _), n in held.items():
        per_proc[proc] += n
    for (proc, loc), n in sorted(held.items(), key=lambda kv: -kv[1])[:3]:
        if n:
            out.append(Finding(
                "gpu_memory_holder", f"{loc.function}() holds {_fmt_bytes(n)} of GPU memory",
                n / per_proc[proc], loc,
                [f"{_fmt_bytes(n)} held at the last profile, {n / per_proc[proc]:.0%} of "
                 f"{proc}'s GPU memory"],
                "free what is no longer needed (del, then torch.cuda.empty_cache() to give "
                "segments back), or keep it in lower precision", process=proc))
    alloc_total: Counter = Counter()
    for (proc, _), s in sites.items():
        alloc_total[proc] += s.values[1]
    for (proc, loc), s in sites.items():
        if s.intervals >= CHURN_INTERVALS and s.values[1] and alloc_total[proc]:
            out.append(Finding(
                "gpu_memory_churn", f"{loc.function}() allocates GPU memory every interval",
                s.values[1] / alloc_total[proc], loc,
                [f"{s.values[0]} driver allocations, {_fmt_bytes(s.values[1])}, in "
                 f"{s.intervals} intervals"],
                "allocate once and reuse the buffer (preallocate, out= arguments); with "
                "PyTorch, varying shapes defeat the caching allocator", process=proc))
    # peak against in use, from the metrics: the last point of each process
    peak: dict[str, float] = {}
    in_use: dict[str, float] = {}
    for p in sorted(points, key=lambda p: p.time_ns):
        if p.name == "gpu.memory.peak":
            peak[process_of(p.resource)] = p.value
        elif p.name == "gpu.memory.in_use":
            in_use[process_of(p.resource)] = p.value
    for proc, top in peak.items():
        now = in_use.get(proc)
        if now is not None and top >= 2 * max(now, 1) and top >= 64 * MiB:
            out.append(Finding(
                "gpu_memory_peak", f"{proc}'s GPU memory peaked at {_fmt_bytes(top)}, "
                f"{_fmt_bytes(now)} held now", 1 - now / top, Location(proc),
                [f"peak {_fmt_bytes(top)}, in use {_fmt_bytes(now)}"],
                "a transient peak decides the device the job needs: look at the "
                "allocation sites of the interval it happened in (activations kept for "
                "backward, a large temporary); checkpointing or smaller micro-batches "
                "lower it", process=proc))
    return out


def analyze(profiles: list[Profile], points: list[Point]) -> list[Finding]:
    return _copies(profiles) + _launches(profiles) + _syncs(profiles) + \
        _memory(profiles, points)
