"""GPU memory profiling from CUDA driver uprobes: allocations paired with frees per process
(ledger), OTLP metrics per process resource (metrics), and interval profile samples
(stack + values) for the `profiles` pipeline; `GpuMonitor` runs them beside the agent."""
