#!/usr/bin/env bash
# otel-ebpf advise on a PyTorch training loop on a real GPU, and the GPU probes' cost on a
# launch-bound loop, in one run: the launch loop untraced, then the agent started (GPU
# probes, CPU and GPU profiles as pprof, metrics to a file), the launch loop again, the
# training loop (tests/support/cuda/torch_planted.py: an unpinned non_blocking copy in
# load_batch(), a .item() per step in log_loss()), the agent stopped, and advise and
# flamegraph on what it wrote.
#
# Run as root from the repository root (BPF objects in bpf/build), with torch importable:
#
#     sudo OUT=/tmp/out bench/h200_advise.sh
#
# Environment: OUT (default ./h200-advise), TORCH_PYTHON (default python3), AGENT_CMD (default
# "$TORCH_PYTHON -m otel_ebpf.cli"), LAUNCH_STEPS (20), TRAIN_STEPS (200).
# Writes into $OUT: summary.txt (the launch loop's steps/s untraced and traced, the
# training's time), advise.txt, advise.json, launches.svg, sync.svg, agent.log (its tail).
set -uo pipefail
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
OUT=${OUT:-$REPO/h200-advise}
mkdir -p "$OUT"
PY=${TORCH_PYTHON:-python3}
AGENT_CMD=${AGENT_CMD:-"$PY -m otel_ebpf.cli"}
LAUNCH_STEPS=${LAUNCH_STEPS:-20}
TRAIN_STEPS=${TRAIN_STEPS:-200}
export OTEL_EBPF_BPF_DIR=${OTEL_EBPF_BPF_DIR:-$REPO/bpf/build}
WORK=$(mktemp -d /tmp/h200-advise.XXXXXX)
START=$(date +%s)
say() { echo "[$(( $(date +%s) - START ))s] $*" | tee -a "$OUT/summary.txt" >&2; }
: > "$OUT/summary.txt"

cat > "$WORK/agent.yaml" <<YAML
receivers:
  ebpf:
    targets: {process_names: [torch-planted]}
    gpu: {enabled: true, scan_interval: 1s}
    profiling: {frequency: 49, interval: 5s}
exporters:
  pprof: {path: $WORK/profiles}
  file: {path: $WORK/profiles/metrics.jsonl}
service:
  pipelines:
    traces: {receivers: [ebpf], exporters: [file]}
    metrics: {receivers: [ebpf], exporters: [file]}
    profiles: {receivers: [ebpf], exporters: [pprof]}
  telemetry: {metrics: {interval: 2s}}
YAML

say "launch loop, untraced: $($PY tests/support/cuda/torch_planted.py launch --steps "$LAUNCH_STEPS")"
$AGENT_CMD run -c "$WORK/agent.yaml" > "$WORK/agent.out" 2> "$WORK/agent.log" &
AGENT_PID=$!
for _ in $(seq 180); do
  grep -q "otel-ebpf ready" "$WORK/agent.log" && break
  kill -0 $AGENT_PID 2>/dev/null || break
  sleep 1
done
grep -q "otel-ebpf ready" "$WORK/agent.log" || { say "agent did not start"; tail -50 "$WORK/agent.log" > "$OUT/agent.log"; exit 1; }
say "agent ready"
say "launch loop, traced: $($PY tests/support/cuda/torch_planted.py launch --steps "$LAUNCH_STEPS")"

say "training: $($PY tests/support/cuda/torch_planted.py train --steps "$TRAIN_STEPS")"
sleep 7  # one more profile interval (5 s) exported while nothing runs
kill -INT $AGENT_PID
for _ in $(seq 120); do kill -0 $AGENT_PID 2>/dev/null || break; sleep 1; done
kill -0 $AGENT_PID 2>/dev/null && { say "agent did not stop: killed"; kill -9 $AGENT_PID; }
say "agent stopped; $(ls "$WORK/profiles" | wc -l) files"
$AGENT_CMD advise "$WORK/profiles" --top 12 > "$OUT/advise.txt" 2>> "$OUT/summary.txt"
$AGENT_CMD advise "$WORK/profiles" --top 12 --format json > "$OUT/advise.json" 2>> "$OUT/summary.txt"
$AGENT_CMD flamegraph "$WORK/profiles" --kind launches -o "$OUT/launches.svg" 2>> "$OUT/summary.txt"
$AGENT_CMD flamegraph "$WORK/profiles" --kind sync -o "$OUT/sync.svg" 2>> "$OUT/summary.txt"
grep -E "GPU|CPython|kernel|otel_ebpf\.gpu|error|Error|Traceback" "$WORK/agent.log" | tail -60 > "$OUT/agent.log"
tail -40 "$WORK/agent.log" >> "$OUT/agent.log"
say "done"
