"""Span-parent correctness of the agent against ground truth, on a small inference-shaped
topology (asyncio gateway, threadpool RAG service, gunicorn sync service, leaves).

    sudo .venv/bin/python -m bench.correlation.run [--levels 1,8,64] [--requests N] [--out docs/performance.md]

For tests: `start_topology(tmpdir) -> Topology` and `evaluate(spans, truth) -> Report`.
"""

from __future__ import annotations

import importlib

# imported when first used: the services (bench.correlation.services) run on interpreters
# that have their web packages only, not the evaluation's (tests, the agent)
_WHERE = {"Report": "evaluate", "evaluate": "evaluate", "read_spans": "evaluate",
          "Topology": "topology", "pick_ports": "topology", "read_truth": "topology",
          "start_topology": "topology"}

__all__ = sorted(_WHERE)


def __getattr__(name: str):
    if name not in _WHERE:
        raise AttributeError(name)
    return getattr(importlib.import_module(f"bench.correlation.{_WHERE[name]}"), name)
