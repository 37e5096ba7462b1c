#!/usr/bin/env bash
# CPU profiles and GPU memory profiles of a PyTorch training loop, with unwind tables, on
# a machine with an NVIDIA GPU: the agent (otel-ebpf run) with CPU profiles, unwind tables
# and GPU memory on, a small MLP trained in train_mlp() (tests/support/cuda/torch_train.py),
# then a summary of what came out. What to check in $OUT/summary.txt:
#   - CPU samples of train_mlp reach at:: frames (libtorch, built without frame pointers);
#   - GPU allocation stacks go from the Python site (train_mlp, build_model) through
#     libtorch and libc10_cuda (at::, c10::cuda::) to the driver call (cuMemAlloc_v2).
#
# Run as root from the repository root (BPF objects in bpf/build or $OTEL_EBPF_BPF_DIR):
#
#     sudo OUT=/tmp/out bench/h200_torch_profile.sh [--cpu]
#
# --cpu: the same on the CPU (no GPU allocations; checks the CPU profile and the script).
# Environment: OUT (default ./h200-out), TORCH_PYTHON (default /opt/torch/.venv/bin/python3,
# else python3), AGENT (default .venv/bin/otel-ebpf, else otel-ebpf on PATH),
# OTEL_EBPF_BPF_DIR (default bpf/build), FREQUENCY (99), UNWIND_MIB (256: kernel memory
# for the tables of every file a CUDA torch process maps), WAIT_TABLES_S (240: then it trains
# anyway, and the summary says so), STABLE_S (20: how long "all in" must hold), STEPS (300),
# MIN_SECONDS (10). Takes 2-8 minutes (most of it: the tables of the CUDA libraries,
# built by the agent once per file). Writes into $OUT (7 files): summary.txt, agent.log, agent.yaml,
# train.log, cpu.folded, gpu.folded, metrics.jsonl (each cut to 16 MiB).
set -uo pipefail

DEVICE=cuda
[ "${1:-}" = "--cpu" ] && DEVICE=cpu
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
OUT=${OUT:-$REPO/h200-out}
mkdir -p "$OUT"
if [ -z "${TORCH_PYTHON:-}" ]; then
  TORCH_PYTHON=/opt/torch/.venv/bin/python3
  [ -x "$TORCH_PYTHON" ] || TORCH_PYTHON=$(command -v python3)
fi
if [ -z "${AGENT:-}" ]; then
  AGENT=$REPO/.venv/bin/otel-ebpf
  [ -x "$AGENT" ] || AGENT=$(command -v otel-ebpf || true)
fi
export OTEL_EBPF_BPF_DIR=${OTEL_EBPF_BPF_DIR:-$REPO/bpf/build}
FREQUENCY=${FREQUENCY:-99}
UNWIND_MIB=${UNWIND_MIB:-256}
WAIT_TABLES_S=${WAIT_TABLES_S:-240}
STABLE_S=${STABLE_S:-20}
STEPS=${STEPS:-300}
MIN_SECONDS=${MIN_SECONDS:-10}
NAME=torch-train
WORK=$(mktemp -d /tmp/h200-torch-profile.XXXXXX)
START=$(date +%s)

say() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$WORK/steps.txt" >&2; }
[ -n "$AGENT" ] && [ -x "$AGENT" ] || { echo "no otel-ebpf found: set AGENT" >&2; exit 2; }
[ -f "$OTEL_EBPF_BPF_DIR/cuda.bpf.o" ] || { echo "no BPF objects in $OTEL_EBPF_BPF_DIR" >&2; exit 2; }

cat > "$OUT/agent.yaml" <<EOF
receivers:
  ebpf:
    targets: {process_names: [$NAME]}   # the trainer names itself; nothing else is profiled
    gpu: {enabled: true, scan_interval: 1s}
    profiling: {frequency: $FREQUENCY, interval: 5s, unwind_tables: true, unwind_table_mib: $UNWIND_MIB}
exporters:
  folded: {path: $WORK/profiles}
  file: {path: $WORK/metrics.jsonl}
service:
  pipelines:
    traces: {receivers: [ebpf], exporters: [file]}
    metrics: {receivers: [ebpf], exporters: [file]}
    profiles: {receivers: [ebpf], exporters: [folded]}
  telemetry: {metrics: {interval: 2s}}
EOF

AGENT_PID=
TRAIN_PID=
cleanup() {
  [ -n "$TRAIN_PID" ] && kill "$TRAIN_PID" 2>/dev/null
  if [ -n "$AGENT_PID" ] && kill -0 "$AGENT_PID" 2>/dev/null; then
    kill -INT "$AGENT_PID"
    for _ in $(seq 90); do kill -0 "$AGENT_PID" 2>/dev/null || break; sleep 1; done
    kill -0 "$AGENT_PID" 2>/dev/null && { say "agent did not stop in 90s: killed"; kill -9 "$AGENT_PID"; }
    wait "$AGENT_PID" 2>/dev/null
  fi
  AGENT_PID=
}
trap cleanup EXIT

# wait_for FILE PATTERN SECONDS [PID that must stay alive]
wait_for() {
  local end=$(( $(date +%s) + $3 ))
  while ! grep -q -- "$2" "$1" 2>/dev/null; do
    if [ -n "${4:-}" ] && ! kill -0 "$4" 2>/dev/null; then return 2; fi
    [ "$(date +%s)" -ge "$end" ] && return 1
    sleep 0.5
  done
}

say "agent: $AGENT (BPF objects in $OTEL_EBPF_BPF_DIR); trainer: $TORCH_PYTHON on $DEVICE"
"$AGENT" run -c "$OUT/agent.yaml" > "$WORK/agent.out" 2> "$OUT/agent.log" &
AGENT_PID=$!
if ! wait_for "$OUT/agent.log" "otel-ebpf ready" 180 "$AGENT_PID"; then
  say "the agent did not get ready"; tail -20 "$OUT/agent.log" >&2; exit 1
fi
say "agent ready"

"$TORCH_PYTHON" tests/support/cuda/torch_train.py --device "$DEVICE" --steps "$STEPS" \
  --min-seconds "$MIN_SECONDS" --wait-file "$WORK/go" --wait-max "$WAIT_TABLES_S" \
  --name "$NAME" > "$OUT/train.log" 2>&1 &
TRAIN_PID=$!
if ! wait_for "$OUT/train.log" "^WARM " 300 "$TRAIN_PID"; then
  say "the trainer did not warm up"; tail -20 "$OUT/train.log" >&2; exit 1
fi
say "trainer warm (pid $TRAIN_PID)"
# the agent looks at a process's mappings every 2 s (later on a busy machine), and the
# last line it logged of the process says its state: tables are in when that line says
# so and has stayed the last for STABLE_S seconds (the libraries the warm-up loaded,
# cuBLAS, seen: an agent busy building tables and naming libtorch's symbols rescans late)
sleep 4
end=$(( $(date +%s) + WAIT_TABLES_S ))
tables=timeout
stable=0
prev=
while [ "$(date +%s)" -lt "$end" ] && kill -0 "$TRAIN_PID" 2>/dev/null; do
  last=$(grep "unwind tables .*pid $TRAIN_PID:" "$OUT/agent.log" | tail -1)
  case "$last" in
    *"unwind tables in for pid $TRAIN_PID:"*)
      if [ "$last" = "$prev" ]; then stable=$((stable + 1)); else stable=0; fi;;
    *) stable=0;;
  esac
  prev=$last
  [ "$stable" -ge "$STABLE_S" ] && { tables=in; break; }
  sleep 1
done
say "unwind tables: $tables (${last:-no line})"
touch "$WORK/go"
if ! wait_for "$OUT/train.log" "^TRAINED " 300 "$TRAIN_PID"; then
  say "the trainer did not finish"; tail -20 "$OUT/train.log" >&2
fi
wait "$TRAIN_PID"; say "trainer exited ($?)"; TRAIN_PID=
# profiles go out every interval; the first naming of libtorch_cuda's symbols takes a while
want=cpu; [ "$DEVICE" = cuda ] && want=gpu
end=$(( $(date +%s) + 120 ))
while [ "$(date +%s)" -lt "$end" ]; do
  grep -qs train_mlp "$WORK"/profiles/$want-*.folded && break  # no pipe: pipefail
  sleep 2
done
sleep 6  # the CPU samples wait a little longer for their span links
say "stopping the agent"
cleanup
say "agent stopped"

cat "$WORK"/profiles/cpu-*.folded > "$OUT/cpu.folded" 2>/dev/null || : > "$OUT/cpu.folded"
cat "$WORK"/profiles/gpu-*.folded > "$OUT/gpu.folded" 2>/dev/null || : > "$OUT/gpu.folded"
cp "$WORK/metrics.jsonl" "$OUT/metrics.jsonl" 2>/dev/null || : > "$OUT/metrics.jsonl"

python3 - "$OUT" "$DEVICE" "$tables" "$WORK/steps.txt" <<'PY' > "$OUT/summary.txt"
import re
import sys
from collections import Counter
from pathlib import Path

out, device, tables, steps = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])


def folded(path):
    """(frames root first, without the process name; value) per line."""
    rows = []
    for line in path.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if stack and n.isdigit():
            rows.append((stack.split(";")[1:], int(n)))
    return rows


def short(frames, keep=40):
    names = [f if len(f) <= 90 else f[:87] + "..." for f in frames]
    if len(names) > keep:
        names = names[:8] + [f"... {len(names) - keep + 8} frames ..."] + names[-(keep - 8):]
    return "\n      ".join(names)


log = (out / "agent.log").read_text(errors="replace")
train = (out / "train.log").read_text(errors="replace")
print(f"device {device}; unwind tables for the trainer before training: {tables}")
print("trainer:", *[line for line in train.splitlines()
                    if line.startswith(("IMPORTED", "TRAINED", "WAITED"))], sep="\n  ")
print("steps:\n  " + steps.read_text().strip().replace("\n", "\n  "))

print("\n== agent log")
builds = [line.split(" - ")[-1] for line in log.splitlines() if "unwind table of " in line]
print(f"slow table builds (>= 1 s of CPU): {len(builds)}")
for b in builds[:12]:
    print("  " + b[-200:])
for pat in ("unwind tables in for pid", "files waiting for their tables", "table_full",
            "Traceback", "ERROR", "WARNING", "GPU memory profiling:", "runs CPython"):
    lines = [line for line in log.splitlines() if pat in line]
    print(f"'{pat}': {len(lines)}" + (f"  (last: {lines[-1][-200:]})" if lines else ""))
totals = dict(re.findall(r"otel_ebpf\.(gpu\.[\w.]+|profiles\.[\w.]+)\s*\S\s*(\d+)", log))
print("agent totals at exit: " + (", ".join(f"{k} {v}" for k, v in sorted(totals.items()))
                                  or "none found"))
gpu_lines = [line for line in log.splitlines() if " GPU pid " in line]
print(f"GPU lines: {len(gpu_lines)}")
for line in gpu_lines[:8]:
    print("  " + line[-220:])

print("\n== CPU profile (cpu.folded)")
cpu = folded(out / "cpu.folded")
total = sum(n for _, n in cpu)
hot = [(f, n) for f, n in cpu if "train_mlp" in f]
n_hot = sum(n for _, n in hot)


def below(frames, name):
    return frames[frames.index(name) + 1:] if name in frames else []


reach = [(f, n) for f, n in hot if any(x.startswith("at::") for x in below(f, "train_mlp"))]
n_reach = sum(n for _, n in reach)
print(f"samples: {total}; in train_mlp: {n_hot}; of those reaching at:: frames below it: "
      f"{n_reach} ({100 * n_reach / max(n_hot, 1):.0f}%)")
leaves = Counter()
for f, n in hot:
    leaves[f[-1]] += n
print("top leaves under train_mlp: " + ", ".join(f"{k} {v}" for k, v in leaves.most_common(8)))
if reach:
    f, n = max(reach, key=lambda r: (r[1], len(r[0])))
    print(f"example ({n} samples), root first:\n      " + short(f))

print("\n== GPU profile (gpu.folded)")
gpu = folded(out / "gpu.folded")
launch = [(f, n) for f, n in gpu if f and f[-1].startswith("cuLaunchKernel")]
alloc = [(f, n) for f, n in gpu if f and not f[-1].startswith("cuLaunchKernel")]
sites = {}
for f, n in alloc:  # one line per site and interval: a site once
    sites.setdefault(tuple(f), 0)
    sites[tuple(f)] += n
print(f"allocation sites: {len(sites)}; launch stacks: {len(launch)} "
      f"({sum(n for _, n in launch)} launches)")
py_sites = {f: n for f, n in sites.items() if "train_mlp" in f or "build_model" in f}


def through_torch(f):
    """(libtorch's at:: frames, libc10_cuda's frames: named c10::cuda::, or unnamed
    libc10_cuda.so+0x...) below the Python site."""
    site = "train_mlp" if "train_mlp" in f else "build_model"
    rest = below(list(f), site)
    return (any(x.startswith("at::") for x in rest),
            any(x.startswith("c10::cuda::") or x.startswith("libc10_cuda.so") for x in rest))


both = [f for f in py_sites if all(through_torch(f))]
print(f"sites under train_mlp/build_model: {len(py_sites)}; of those through at:: and "
      f"c10::cuda:: frames: {len(both)}")
print("leaves (the driver call's caller) of those: " + ", ".join(
    f"{k} {v}" for k, v in Counter(f[-1] for f in py_sites).most_common(6)))
libs = Counter(x.split("+0x")[0] for f in py_sites for x in set(f) if "+0x" in x)
print("unnamed frames in those sites, by file: " + (", ".join(
    f"{k} {v}" for k, v in libs.most_common(8)) or "none"))
for f in sorted(both, key=len, reverse=True)[:2] or sorted(py_sites, key=len, reverse=True)[:2]:
    print("example, root first:\n      " + short(list(f), 60))
if launch:
    f, n = max(launch, key=lambda r: r[1])
    print(f"launch example ({n} launches; frame pointers), root first:\n      " + short(f))
PY
for f in "$OUT"/*; do  # at most 16 MiB a file
  [ "$(stat -c %s "$f")" -gt $((16 << 20)) ] && { head -c $((16 << 20)) "$f" > "$f.cut"; mv "$f.cut" "$f"; }
done
rm -rf "$WORK"
cat "$OUT/summary.txt"
