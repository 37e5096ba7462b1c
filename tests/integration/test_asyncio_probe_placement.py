"""Where the asyncio task probes go: onto a traced asyncio process only (a pid filter), and
off again once it has served enough requests without calling out (a leaf service pays no
trap per task step, Context.run or Context freed), while its spans keep coming."""

from __future__ import annotations

import re

import pytest

from otel_ebpf.kernel.asyncio_probes import LEAF_AFTER_REQUESTS

from .conftest import run_client
from .test_correlation_topology import interpreter_has_symbols

pytestmark = pytest.mark.kernel

SERVER = 2


def test_leaf_service_loses_its_probes(start_agent, uvicorn_server):
    if not interpreter_has_symbols():
        pytest.skip("this interpreter has no symbols for the task probes")
    agent = start_agent([uvicorn_server], overrides={"service": {"telemetry": {
        "logs": {"level": "info"}}}})
    n = LEAF_AFTER_REQUESTS + 20
    run_client("httpx", uvicorn_server, [f"/items/{i}" for i in range(n)])
    spans = agent.wait_for(lambda s: sum(1 for x in s if x.kind == SERVER) >= n, timeout_s=60)
    assert sum(1 for s in spans if s.kind == SERVER) >= n
    log = agent.stderr
    attached = re.findall(r"asyncio task probes attached to pid (\d+)", log)
    off = re.findall(r"pid (\d+) served \d+ requests without calling out", log)
    assert attached, log[-3000:]
    assert off and off[0] in attached, log[-3000:]
    # after the probes came off, the leaf's requests are still traced
    run_client("httpx", uvicorn_server, ["/items/after"])
    spans = agent.wait_for(lambda s: any(x.kind == SERVER and x.attrs.get("url.path") ==
                                         "/items/after" for x in s), timeout_s=30)
    assert any(s.kind == SERVER and s.attrs.get("url.path") == "/items/after" for s in spans)
