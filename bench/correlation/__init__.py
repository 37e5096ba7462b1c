"""Span-parent correctness of the agent against ground truth, on a small inference-shaped
topology (asyncio gateway, threadpool RAG service, gunicorn sync service, leaves).

    sudo .venv/bin/python -m bench.correlation.run [--levels 1,8,64] [--requests N] [--out docs/performance.md]

For tests: `start_topology(tmpdir) -> Topology` and `evaluate(spans, truth) -> Report`.
"""

from bench.correlation.evaluate import Report, evaluate, read_spans
from bench.correlation.topology import Topology, pick_ports, read_truth, start_topology

__all__ = ["Report", "Topology", "evaluate", "pick_ports", "read_spans", "read_truth",
           "start_topology"]
