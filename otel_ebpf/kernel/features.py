"""What this host can do: privileges and kernel features the agent needs, each checked for
real (a map created, a program loaded), with the fix when one is missing."""

from __future__ import annotations

import ctypes
import os
import platform
from dataclasses import dataclass
from pathlib import Path

from . import abi, libbpf
from .loader import BTF_PATH, TRACEFS, BPFError, BPFObject, bpf_dir, ensure_tracefs
from .propagation import PROGRAM as PROPAGATION_PROGRAM

CAPS = {"CAP_DAC_READ_SEARCH": 2, "CAP_SYS_PTRACE": 19, "CAP_SYS_ADMIN": 21,
        "CAP_SYS_RESOURCE": 24, "CAP_PERFMON": 38, "CAP_BPF": 39}


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str
    required: bool = True
    unknown: bool = False  # could not be told here (another check says why)


def effective_caps(status_path: str = "/proc/self/status") -> set[str]:
    for line in Path(status_path).read_text().splitlines():
        if line.startswith("CapEff:"):
            bits = int(line.split()[1], 16)
            return {name for name, bit in CAPS.items() if bits >> bit & 1}
    return set()


def missing_privileges(caps: set[str] | None = None) -> list[str]:
    """Capabilities the agent lacks to load and attach its programs ([] when it can)."""
    caps = effective_caps() if caps is None else caps
    if "CAP_SYS_ADMIN" in caps:
        return []
    return [c for c in ("CAP_BPF", "CAP_PERFMON") if c not in caps] or []


def privilege_message(missing: list[str]) -> str:
    return (
        f"otel-ebpf cannot load its eBPF programs: missing {', '.join(missing)} "
        "(needs CAP_BPF and CAP_PERFMON, or CAP_SYS_ADMIN). Run it as root, or grant them: "
        "`setcap cap_bpf,cap_perfmon,cap_sys_ptrace,cap_dac_read_search+ep` on the "
        "interpreter, or `--cap-add BPF --cap-add PERFMON` for a container"
    )


def _check_privileges() -> Check:
    caps = effective_caps()
    missing = missing_privileges(caps)
    if missing:
        return Check("privileges", False, privilege_message(missing))
    return Check("privileges", True, "effective: " + ", ".join(sorted(caps)))


def _check_proc_access() -> Check:
    caps = effective_caps()
    ok = "CAP_SYS_PTRACE" in caps
    return Check(
        "read other processes' /proc", ok,
        "service.name from OTEL_SERVICE_NAME in /proc/PID/environ" if ok
        else "no CAP_SYS_PTRACE: service.name falls back to the command line",
        required=False,
    )


def _check_btf() -> Check:
    ok = BTF_PATH.is_file()
    return Check("BTF", ok, str(BTF_PATH) if ok else
                 f"{BTF_PATH} missing: kernel needs CONFIG_DEBUG_INFO_BTF=y (CO-RE)")


def _check_tracefs() -> Check:
    try:
        root = ensure_tracefs()
        read = root / "events/syscalls/sys_enter_read"
        present = read.is_dir()
    except BPFError as exc:
        return Check("tracefs", False, str(exc))
    except PermissionError as exc:  # tracefs is root's (mode 0700): an unprivileged user
        return Check("tracefs", False, f"cannot read {exc.filename}: permission denied "
                     "(run as root, or with CAP_DAC_READ_SEARCH for tracefs)")
    if not present:
        return Check("syscall tracepoints", False,
                     f"{read} missing: kernel needs CONFIG_FTRACE_SYSCALLS=y")
    return Check("tracefs + syscall tracepoints", True, str(root))


def _check_path(name: str, path: str, why: str, required: bool) -> Check:
    ok = Path(path).exists()
    return Check(name, ok, why if ok else f"{path} missing", required=required)


class _PerfEventAttr(ctypes.Structure):
    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32),
                ("config", ctypes.c_uint64), ("sample_period", ctypes.c_uint64),
                ("rest", ctypes.c_uint8 * 104)]


def _check_perf_events() -> Check:
    libc = ctypes.CDLL(None, use_errno=True)
    attr = _PerfEventAttr(type=1, size=ctypes.sizeof(_PerfEventAttr), config=0,  # cpu-clock
                          sample_period=1_000_000)
    nr_perf_event_open = {"x86_64": 298, "aarch64": 241}.get(platform.machine(), 298)
    fd = libc.syscall(nr_perf_event_open, ctypes.byref(attr), -1, 0, -1, 0)
    if fd < 0:
        return Check("perf events (cpu-clock)", False, libbpf.errno_text(ctypes.get_errno()),
                     required=False)
    os.close(fd)
    return Check("perf events (cpu-clock)", True, "sampling available", required=False)


def _check_ringbuf() -> Check:
    create = libbpf.lib.bpf_map_create
    create.restype = ctypes.c_int
    create.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32, ctypes.c_uint32,
                       ctypes.c_uint32, ctypes.c_void_p]
    fd = create(27, b"probe_rb", 0, 0, 4096, None)  # BPF_MAP_TYPE_RINGBUF
    if fd < 0:
        return Check("BPF ring buffer", False, f"{libbpf.errno_text()} (kernel 5.8+ needed)")
    os.close(fd)
    return Check("BPF ring buffer", True, "map created")


def _check_socket_program() -> Check:
    log = libbpf.LibbpfLog()
    try:
        obj = BPFObject("capture", log)
    except BPFError as exc:
        return Check("socket capture program", False, str(exc))
    try:
        obj.set_max_entries("scratch_buf", libbpf.lib.libbpf_num_possible_cpus())
        # the TCP option's program is the feature line "trace context TCP option" (Linux
        # 5.10): loaded only when configured, so not here
        obj.set_autoload(PROPAGATION_PROGRAM, False)
        obj.set_rodata(abi.pack_agent_config(
            agent_pid=os.getpid(), capture_max=4096, filter_pids=False, filter_comms=False,
            filter_ports=True, wakeup_bytes=1 << 20))  # selects nothing: no port is listed
        obj.load()
        n = obj.attach_all()
    except BPFError as exc:
        return Check("socket capture program", False, str(exc))
    finally:
        obj.close()
    return Check("socket capture program", True, f"loaded and attached {n} programs")


def _check_asyncio_symbols() -> Check:
    """Which running Pythons' Context hand-offs the probes can see (correlation evidence)."""
    from .asyncio_probes import interpreter_record, interpreters_of

    files = {path for p in Path("/proc").iterdir() if p.name.isdigit()
             for path in interpreters_of(p.name)}
    if not files:
        return Check("asyncio context probes", True, "no CPython runs now", required=False)
    uncovered = []
    for path in sorted(files):
        try:
            interpreter_record(path)
        except (OSError, ValueError) as exc:
            uncovered.append(f"{path} ({exc})")
    detail = f"{len(files) - len(uncovered)} of {len(files)} interpreters covered"
    if uncovered:
        detail += "; not covered (their calls correlate without task evidence): " + \
            ", ".join(uncovered)
    return Check("asyncio context probes", not uncovered, detail, required=False)


# --------------------------------------------------------------------------- kernel needs


@dataclass(frozen=True)
class Need:
    """A BPF helper some programs call, in the program type they are (uprobes are kprobe
    programs), and the first Linux version that has it."""

    helper: str
    helper_id: int  # enum bpf_func_id (linux/bpf.h)
    prog: str
    prog_type: int  # enum bpf_prog_type
    since: str


_KPROBE, _TRACEPOINT, _PERF_EVENT, _SOCK_OPS = 2, 5, 7, 13
_RINGBUF_RESERVE, _RINGBUF_OUTPUT, _LOOP, _GET_STACK = 131, 130, 181, 67
_LOAD_HDR_OPT, _RESERVE_HDR_OPT = 142, 144

# What each feature's BPF objects (bpf/*.bpf.c) call that an older kernel may lack: the
# helper that sets its minimum Linux version, and the others newer than 4.18. Every one
# also needs BTF (CO-RE), checked on its own.
FEATURE_NEEDS: dict[str, tuple[Need, ...]] = {
    "socket capture (traces, metrics)": (
        Need("bpf_ringbuf_reserve", _RINGBUF_RESERVE, "tracepoint", _TRACEPOINT, "5.8"),
    ),
    "TLS (OpenSSL uprobes)": (
        Need("bpf_ringbuf_reserve", _RINGBUF_RESERVE, "uprobe", _KPROBE, "5.8"),
    ),
    "CPU profiles": (
        Need("bpf_loop", _LOOP, "perf_event", _PERF_EVENT, "5.17"),
        Need("bpf_get_stack", _GET_STACK, "perf_event", _PERF_EVENT, "4.18"),
    ),
    "GPU memory (CUDA uprobes)": (
        Need("bpf_loop", _LOOP, "uprobe", _KPROBE, "5.17"),
        Need("bpf_ringbuf_reserve", _RINGBUF_RESERVE, "uprobe", _KPROBE, "5.8"),
    ),
    "RDMA and NCCL (uprobes)": (
        Need("bpf_ringbuf_output", _RINGBUF_OUTPUT, "uprobe", _KPROBE, "5.8"),
    ),
    "trace context TCP option (sock_ops)": (
        Need("bpf_reserve_hdr_opt", _RESERVE_HDR_OPT, "sock_ops", _SOCK_OPS, "5.10"),
        Need("bpf_load_hdr_opt", _LOAD_HDR_OPT, "sock_ops", _SOCK_OPS, "5.10"),
        Need("bpf_ringbuf_reserve", _RINGBUF_RESERVE, "sock_ops", _SOCK_OPS, "5.8"),
    ),
}


def probe(need: Need) -> bool | None:
    """Whether this kernel lets `need.prog` programs call the helper: libbpf loads a tiny
    program that calls it and reads the verifier's "unknown func". None when that cannot
    be told: without the privileges to load a program libbpf answers "assume supported"."""
    if missing_privileges():
        return None
    rc = libbpf.lib.libbpf_probe_bpf_helper(need.prog_type, need.helper_id, None)
    return None if rc < 0 else rc == 1


def probe_needs(features: list[str] | None = None) -> dict[Need, bool | None]:
    """Each need of `features` (all of them when None), probed once."""
    out: dict[Need, bool | None] = {}
    for feature in FEATURE_NEEDS if features is None else features:
        for need in FEATURE_NEEDS[feature]:
            if need not in out:
                out[need] = probe(need)
    return out


def configured_features(cfg) -> dict[str, str]:
    """{feature: the config key that turns it on} for what this config will load."""
    r = cfg.receiver
    out = {"socket capture (traces, metrics)": "receivers.ebpf"}
    if r.tls_openssl:
        out["TLS (OpenSSL uprobes)"] = "receivers.ebpf.tls.openssl"
    profiles = [n for n, p in cfg.pipelines.items() if p.signal == "profiles"]
    if profiles:
        out["CPU profiles"] = f"service.pipelines.{profiles[0]}"
    if r.gpu_enabled:
        out["GPU memory (CUDA uprobes)"] = "receivers.ebpf.gpu.enabled"
    if r.rdma_enabled:
        out["RDMA and NCCL (uprobes)"] = "receivers.ebpf.rdma.enabled"
    if r.propagation_enabled:
        out["trace context TCP option (sock_ops)"] = "receivers.ebpf.propagation.enabled"
    return out


def unmet_needs(features: dict[str, str], supported: dict[Need, bool | None],
                kernel: str | None = None) -> list[str]:
    """One line per configured feature whose helpers this kernel lacks (a need that could
    not be probed is not held against it: loading will tell)."""
    kernel = kernel or platform.release()
    lines = []
    for feature, why in features.items():
        lacking = [n for n in FEATURE_NEEDS[feature] if supported.get(n) is False]
        if lacking:
            needs = ", ".join(f"{n.helper} in {n.prog} programs (Linux {n.since}+)"
                              for n in lacking)
            lines.append(f"{feature} ({why}) needs {needs}; this kernel, {kernel}, "
                         f"lacks it: run on Linux {max_version(lacking)} or later, or turn "
                         f"{why} off")
    return lines


def max_version(needs: list[Need] | tuple[Need, ...]) -> str:
    return max((n.since for n in needs), key=lambda v: tuple(int(x) for x in v.split(".")))


def _check_feature(feature: str, supported: dict[Need, bool | None]) -> Check:
    needs = FEATURE_NEEDS[feature]
    states = [supported[n] for n in needs]
    ok = all(states)
    unknown = not ok and False not in states  # only unprobed ones: not held against it
    detail = "; ".join(
        f"{n.helper} in {n.prog} programs (Linux {n.since}+): "
        + {True: "yes", False: "NO", None: "not probed (no privileges)"}[supported[n]]
        for n in needs)
    required = feature == "socket capture (traces, metrics)" and not unknown
    return Check(f"kernel: {feature}", ok, detail, required=required, unknown=unknown)


def run_checks() -> list[Check]:
    major, minor = libbpf.version()
    supported = probe_needs()
    checks = [
        Check("kernel", True, platform.release(), required=False),
        _check_privileges(),
        _check_proc_access(),
        Check("libbpf", major >= 1, f"{major}.{minor}" + ("" if major >= 1 else " (1.0+ needed)")),
        _check_btf(),
        _check_tracefs(),
        _check_ringbuf(),
        *(_check_feature(f, supported) for f in FEATURE_NEEDS),
        _check_path("uprobes", "/sys/bus/event_source/devices/uprobe",
                    "for TLS, GPU and RDMA probes", required=False),
        _check_path("kprobes (not used)", "/sys/bus/event_source/devices/kprobe",
                    "available, though the agent does not depend on them", required=False),
        _check_perf_events(),
        _check_asyncio_symbols(),
        _check_path("BPF objects", str(bpf_dir() / "capture.bpf.o"), str(bpf_dir()),
                    required=True),
    ]
    if all(c.ok for c in checks if c.required):
        checks.append(_check_socket_program())
    return checks


__all__ = ["FEATURE_NEEDS", "Check", "Need", "TRACEFS", "configured_features",
           "missing_privileges", "privilege_message", "probe_needs", "run_checks",
           "unmet_needs"]
