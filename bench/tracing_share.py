"""The share of a watched process's own CPU spent in the tracing machinery, read from its
kernel call chains (`perf record -g`): the cost to the program, measured inside one run.

Comparing CPU per request between a traced and an untraced run mixes that cost with the
load each run happened to get: on a shared core a slower load generator leaves the server
less busy, and a less busy asyncio server spends more per request (fewer events per
epoll_wait, more sleeps and wake-ups), traced or not. The samples taken inside the
process name their cause: a sample whose kernel chain holds a syscall tracepoint's entry
(`syscall_trace_enter`, `syscall_exit_work`, `perf_syscall_*`), `trace_call_bpf`, a BPF
program, or a uprobe's trap and handler (`exc_int3`, `handle_swbp`, `uprobe_*`) was taken
while the process paid for being traced. Untraced, no sample has such a frame (the control).

    sudo .venv/bin/python bench/tracing_share.py PERF_DATA...   # shares of recorded files

`bench/app_overhead.py --perf` records the server under wrk in each traced mode.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

# frames that a process runs only because a syscall tracepoint is enabled on it
SYSCALL_TRACEPOINT = frozenset({"syscall_trace_enter", "syscall_exit_work", "perf_syscall_enter",
                                "perf_syscall_exit", "trace_call_bpf"})
# frames of a uprobe: the int3 trap, its handler, the return trampoline
UPROBE = frozenset({"exc_int3", "asm_exc_int3", "handle_swbp", "handle_trampoline",
                    "uprobe_notify_resume"})
_PROGRAM = re.compile(r"bpf_prog_[0-9a-f]+_(\w+)")


@dataclass
class TracingShare:
    """Samples of one process: all of them, and those taken in tracing, by what ran."""
    samples: int = 0
    by_part: Counter = field(default_factory=Counter)  # BPF program name, or the entry frame

    @property
    def traced(self) -> int:
        return sum(self.by_part.values())

    @property
    def fraction(self) -> float:
        return self.traced / self.samples if self.samples else 0.0

    def add(self, other: "TracingShare") -> None:
        self.samples += other.samples
        self.by_part.update(other.by_part)


def part_of(frames: list[str]) -> str | None:
    """What a sample's call chain (leaf first) was paying for, or None when it was the
    program's own work: the BPF program it was in, else the tracing frame it was under
    (`uprobe` for a trap taken without a program on the stack)."""
    for frame in frames:
        m = _PROGRAM.match(frame)
        if m:
            return m[1]
    for frame in frames:
        if frame in SYSCALL_TRACEPOINT:
            return frame
        if frame in UPROBE or frame.startswith(("uprobe_", "uretprobe_")):
            return "uprobe"
    return None


def parse_script(text: str) -> TracingShare:
    """`perf script -F ip,sym` output (one block of `ip symbol` lines per sample, blocks
    separated by blank lines) to its share."""
    share = TracingShare()
    for block in text.split("\n\n"):
        frames = [parts[1] for line in block.strip().splitlines()
                  if len(parts := line.split(None, 1)) == 2]
        if not block.strip():
            continue
        share.samples += 1
        part = part_of(frames)
        if part is not None:
            share.by_part[part] += 1
    return share


def record(pid: int, seconds: float, out: Path, frequency: int = 999) -> subprocess.Popen:
    """Start sampling process `pid` with kernel call chains for `seconds` (perf exits by
    itself); wait on the returned process before reading `out`."""
    return subprocess.Popen(
        ["perf", "record", "-q", "-g", "-F", str(frequency), "-p", str(pid), "-o", str(out),
         "--", "sleep", f"{seconds:g}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)


def read(path: Path) -> TracingShare:
    out = subprocess.run(["perf", "script", "-i", str(path), "-F", "ip,sym"],
                         capture_output=True, text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"perf script -i {path}: {out.stderr.strip()[-500:]}")
    return parse_script(out.stdout)


def main() -> None:
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    for name in sys.argv[1:]:
        share = read(Path(name))
        parts = ", ".join(f"{k} {100 * v / share.samples:.2f}" for k, v in share.by_part.most_common())
        print(f"{name}: {share.samples} samples, {100 * share.fraction:.2f} % in tracing ({parts})")


if __name__ == "__main__":
    main()
