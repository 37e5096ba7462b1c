"""`otel-ebpf diff`: two runs of the agent's outputs compared (CPU shares by function, GPU
copies, launches and waits by site, GPU memory peaks, latency percentiles, advise's
findings), each change held against the noise between the runs' own export windows."""

from __future__ import annotations

from bisect import bisect_left
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from otel_ebpf.profiling.frames import Frame

from . import cpu, gpu, serving
from .model import COPIES, CPU, LAUNCHES, SYNC, Evidence, Finding, Profile
from .readers import read
from .report import cutoff, findings_of
from .sites import name_of, process_name, short
from .stats import benjamini_hochberg, mann_whitney

ALPHA = 0.05  # the false discovery rate over all the rows tested together
MIN_WINDOWS = 4  # per run: 3 windows against 3 cannot give a p-value under 0.1
MIN_SHARE = 0.01  # a function under this self or total share in both runs is left out
SPAN_SLICES = 10  # a group's spans are cut into at most this many slices ...
MIN_SPANS = serving.MIN_REQUESTS  # ... of this many spans at least
MOVED_SHARE = 0.05  # a finding in both runs moved when its rank or this much share changed
PERCENTILES = (0.5, 0.9, 0.99)
SIGNIFICANT, NOISE, FEW, ONE_VALUE = (
    "significant", "within noise", "not enough windows", "one value per run")
# GPU tables: (key, title, profile kind, sample type, scale to the unit, what a value is)
GPU_TABLES = (
    ("gpu_copies", "GPU copies by site", COPIES, "copies", 1, "copies"),
    ("gpu_launches", "GPU kernel launches by site", LAUNCHES, "kernel_launches", 1,
     "launches"),
    ("gpu_sync_wait", "Time waiting for the GPU by site", SYNC, "sync_wait", 1e-9,
     "seconds waiting"),
)

Key = tuple[str, str]  # (process name, what: a function, a site, a percentile)


@dataclass
class Row:
    """One quantity in both runs: over the whole run and in each of its windows."""

    process: str
    what: str
    before: float
    after: float
    before_windows: list[float]
    after_windows: list[float]
    p: float | None = None  # adjusted for every row tested with it
    verdict: str = ""

    @property
    def ratio(self) -> float | None:
        return self.after / self.before if self.before else None


@dataclass
class Table:
    name: str  # its key in the JSON
    title: str
    measure: str  # "share", "rate", "seconds" or "bytes": how values read
    unit: str  # what a value is, in words
    rows: list[Row]


@dataclass
class FindingChange:
    """An advise finding matched across the runs by (kind, function or site, process
    name); `before`/`after`: its rank (1: first) and share, None where it is not."""

    kind: str
    where: str
    process: str
    title: str
    before: tuple[int, float] | None
    after: tuple[int, float] | None

    @property
    def change(self) -> str:
        return "appeared" if not self.before else "disappeared" if not self.after else "moved"


@dataclass
class Diff:
    before: Evidence
    after: Evidence
    per: str  # "request", "second" or "profile": what the rates are counted per
    requests: tuple[int, int]  # server spans in each run (per request; else 0)
    tables: list[Table]
    findings: list[FindingChange]

    @property
    def tested(self) -> int:
        return sum(1 for t in self.tables for r in t.rows if r.p is not None)


@dataclass
class _Measure:
    """One run's values by key, over the whole run and per window. A window has a value
    for the keys it names, and 0 for the other keys of the processes it saw (a function
    with no samples in a window where its process ran had a share of 0 there)."""

    whole: dict[Key, float] = field(default_factory=dict)
    windows: list[tuple[dict[Key, float], set[str]]] = field(default_factory=list)

    def series(self, key: Key) -> list[float]:
        return [w.get(key, 0.0) for w, seen in self.windows if key in w or key[0] in seen]


def _shares(windows: Iterable[tuple[Counter, Counter]]) -> _Measure:
    """Counts by key as shares of their process's count (in the window, in the run)."""
    m, counts, whole = _Measure(), Counter(), Counter()
    for by_key, by_process in windows:
        by_key = Counter({k: v for k, v in by_key.items() if by_process[k[0]] > 0})
        seen = {proc for proc, n in by_process.items() if n > 0}  # a share of 0 is none
        m.windows.append(({k: v / by_process[k[0]] for k, v in by_key.items()}, seen))
        counts.update(by_key)
        whole.update(by_process)
    m.whole = {k: v / whole[k[0]] for k, v in counts.items()}
    return m


def _rates(windows: Iterable[tuple[Counter, float]]) -> _Measure:
    """Counts by key per unit of work (in the window; in the run: over the windows the
    process was seen in). Windows without work (no request in them) are left out."""
    m, counts, work = _Measure(), Counter(), Counter()
    for by_key, w in windows:
        if w <= 0:
            continue
        seen = {k[0] for k in by_key}
        m.windows.append(({k: v / w for k, v in by_key.items()}, seen))
        counts.update(by_key)
        for proc in seen:
            work[proc] += w
    m.whole = {k: v / work[k[0]] for k, v in counts.items()}
    return m


# -------------------------------------------------------------------------- per what

def _requests(ev: Evidence) -> Callable[[Profile], int]:
    """Server spans that ended inside a profile's window."""
    ends = sorted(s.end_ns for s in ev.spans if s.kind == serving.SERVER)
    return lambda p: (bisect_left(ends, p.start_ns + p.duration_ns)
                      - bisect_left(ends, p.start_ns))


def _per(before: Evidence, after: Evidence) -> str:
    """Per request where both runs have server spans inside their profiles' windows, else
    per second of profile where every profile has its time, else per profile file."""
    profiles = before.profiles + after.profiles
    if not all(p.duration_ns for p in profiles):
        return "profile"
    if all(sum(map(_requests(ev), ev.profiles)) for ev in (before, after)):
        return "request"
    return "second"


def _work(ev: Evidence, per: str) -> Callable[[Profile], float]:
    if per == "request":
        return _requests(ev)
    if per == "second":
        return lambda p: p.duration_ns / 1e9
    return lambda p: 1.0


# -------------------------------------------------------------------------- measures

def _function(frame: Frame) -> tuple[str, str]:
    # by name and file's base name, not line: the change being measured moves lines,
    # and the two runs may come from different checkouts
    return frame.name, short(frame.module)


def _label(name: str, file: str) -> str:
    return f"{name} ({file})" if file else name


def _flat(by_process: dict[str, Counter]) -> Counter:
    return Counter({(proc, _label(*fn)): n for proc, fns in by_process.items()
                    for fn, n in fns.items()})


def _cpu(ev: Evidence, work: Callable[[Profile], float]) -> tuple[_Measure, ...]:
    """Self shares, total shares (by function) and samples per unit of work (by process)."""
    self_w, total_w, samples_w = [], [], []
    for prof in ev.profiles:
        if prof.kind != CPU:
            continue
        t = cpu.tally([prof], process_name, _function)
        self_w.append((_flat(t.self_n), t.samples))
        total_w.append((_flat(t.total_n), t.samples))
        samples_w.append((Counter({(p, "all functions"): n for p, n in t.samples.items()}),
                          work(prof)))
    return _shares(self_w), _shares(total_w), _rates(samples_w)


def _gpu(ev: Evidence, kind: str, value: str, scale: float,
         work: Callable[[Profile], float]) -> _Measure:
    windows = []
    for prof in ev.profiles:
        if prof.kind != kind:
            continue
        sites, _ = gpu.by_site([prof], kind, (value,), process_name)
        counts: Counter = Counter()
        for (proc, loc), site in sites.items():
            counts[(proc, _label(loc.function, short(loc.file)))] += site.values[0] * scale
        windows.append((counts, work(prof)))
    return _rates(windows)


def _peaks(ev: Evidence) -> _Measure:
    """The highest gpu.memory.peak of each process name: a peak since the process
    started, so its points are not windows of their own."""
    m = _Measure()
    for p in ev.points:
        if p.name == "gpu.memory.peak":
            key = (process_name(p.resource), "peak")
            m.whole[key] = max(m.whole.get(key, 0.0), p.value)
    return m


def _latency(ev: Evidence) -> _Measure:
    """Percentiles of TTFT and TPOT by (service, model, side) and of span durations by
    (service, side), in the run and in slices of consecutive spans."""
    # (service, metric, of what) -> (end time, value)
    series: dict[tuple[str, str, str], list[tuple[int, float]]] = defaultdict(list)
    for (model, side), spans in serving.genai_groups(ev.spans).items():
        for s in spans:
            service = serving.service_of(s)
            series[(service, "TTFT", f"{model} ({side})")].append(
                (s.end_ns, float(s.attributes[serving.TTFT])))
            if serving.TPOT in s.attributes:
                series[(service, "TPOT", f"{model} ({side})")].append(
                    (s.end_ns, float(s.attributes[serving.TPOT])))
    for s in ev.spans:
        if s.kind in (serving.SERVER, serving.CLIENT):
            side = "server" if s.kind == serving.SERVER else "client"
            series[(serving.service_of(s), "duration", f"({side} spans)")].append(
                (s.end_ns, s.duration_s))
    m = _Measure()
    for (service, metric, of), points in series.items():
        values = [v for _, v in sorted(points)]  # in the order the spans ended
        keys = [(service, f"{metric} p{q * 100:g} {of}") for q in PERCENTILES]
        for key, q in zip(keys, PERCENTILES):
            m.whole[key] = serving.percentile(values, q)
        slices = min(SPAN_SLICES, len(values) // MIN_SPANS)
        for i in range(slices):
            part = values[i * len(values) // slices:(i + 1) * len(values) // slices]
            m.windows.append(({key: serving.percentile(part, q)
                               for key, q in zip(keys, PERCENTILES)}, set()))
    return m


# -------------------------------------------------------------------------- comparing

def _rows(before: _Measure, after: _Measure,
          keep: Callable[[Row], bool] = lambda row: True) -> list[Row]:
    rows = []
    for key in sorted(before.whole.keys() | after.whole.keys()):
        row = Row(*key, before.whole.get(key, 0.0), after.whole.get(key, 0.0),
                  before.series(key), after.series(key))
        if keep(row):
            rows.append(row)
    return rows


def _visible(row: Row) -> bool:
    return max(row.before, row.after) >= MIN_SHARE


def _test(rows: list[Row]) -> None:
    """Each row's verdict: a two-sided Mann-Whitney U test of its per-window values,
    adjusted (Benjamini-Hochberg) for all the rows tested, significant at ALPHA."""
    tested = []
    for r in rows:
        if not r.before_windows and not r.after_windows:
            r.verdict = ONE_VALUE
        elif min(len(r.before_windows), len(r.after_windows)) < MIN_WINDOWS:
            r.verdict = FEW
        else:
            tested.append(r)
    pvalues = [mann_whitney(r.before_windows, r.after_windows) for r in tested]
    for r, p in zip(tested, benjamini_hochberg(pvalues)):
        r.p, r.verdict = p, SIGNIFICANT if p <= ALPHA else NOISE


def _tables(before: Evidence, after: Evidence, per: str) -> list[Table]:
    wb, wa = _work(before, per), _work(after, per)
    (sb, tb, nb), (sa, ta, na) = _cpu(before, wb), _cpu(after, wa)
    share = "share of the process's CPU samples"
    tables = [
        Table("cpu_self_share", "CPU self share by function", "share", share,
              _rows(sb, sa, _visible)),
        Table("cpu_total_share", "CPU total share by function, with what it calls",
              "share", share, _rows(tb, ta, _visible)),
        Table("cpu_samples", "CPU samples by process", "rate", f"samples per {per}",
              _rows(nb, na)),
    ]
    for name, title, kind, value, scale, what in GPU_TABLES:
        tables.append(Table(name, title, "rate", f"{what} per {per}",
                            _rows(_gpu(before, kind, value, scale, wb),
                                  _gpu(after, kind, value, scale, wa))))
    tables.append(Table("gpu_memory_peak", "GPU memory peak by process", "bytes", "bytes",
                        _rows(_peaks(before), _peaks(after))))
    tables.append(Table("latency", "Latency percentiles by service", "seconds", "seconds",
                        _rows(_latency(before), _latency(after))))
    return tables


def _changed_findings(before: list[Finding], after: list[Finding]) -> list[FindingChange]:
    def key(f: Finding) -> tuple[str, str, str]:
        # serving findings have no process: their location's file is the service; a
        # memory peak's location is its process
        return (f.kind, name_of(f.location.function),
                name_of(f.process) if f.process else f.location.file)

    def ranked(findings: list[Finding]) -> dict[tuple, tuple[int, Finding]]:
        out: dict[tuple, tuple[int, Finding]] = {}
        for rank, f in enumerate(findings, 1):
            out.setdefault(key(f), (rank, f))  # of one name's processes, the first
        return out

    was, now = ranked(before), ranked(after)
    out = []
    for k in was.keys() | now.keys():
        b, a = was.get(k), now.get(k)
        if b and a and b[0] == a[0] and abs(b[1].share - a[1].share) < MOVED_SHARE:
            continue
        out.append(FindingChange(*k, (a or b)[1].title, b and (b[0], b[1].share),
                                 a and (a[0], a[1].share)))
    order = {"disappeared": 0, "appeared": 1, "moved": 2}
    return sorted(out, key=lambda c: (order[c.change], min(
        r[0] for r in (c.before, c.after) if r), c.kind, c.where, c.process))


def diff(before_paths: Iterable[str], after_paths: Iterable[str], since: float | None = None,
         now_ns: int | None = None) -> Diff:
    """BEFORE against AFTER (files and folders, as advise reads them; data of the last
    `since` seconds): every row of every table with its verdict, biggest changes first,
    and the findings that appeared, disappeared or moved."""
    since_ns = cutoff(since, now_ns)
    before, after = read(before_paths, since_ns), read(after_paths, since_ns)
    per = _per(before, after)
    tables = _tables(before, after, per)
    _test([r for t in tables for r in t.rows])
    for t in tables:
        t.rows.sort(key=lambda r: (r.verdict != SIGNIFICANT, -abs(r.after - r.before),
                                   r.process, r.what))
    requests = tuple(sum(1 for s in ev.spans if s.kind == serving.SERVER)
                     if per == "request" else 0 for ev in (before, after))
    return Diff(before, after, per, requests, tables,
                _changed_findings(findings_of(before), findings_of(after)))
