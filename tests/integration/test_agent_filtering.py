"""The agent tells the kernel to stop sending connections no parser recognizes: their
later calls are not copied, decoded or parsed (the performance issue's in-kernel filter)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.support.ports import free_port

from .conftest import REPO, read_metrics

pytestmark = pytest.mark.kernel


def test_unrecognized_connections_are_muted_in_the_kernel(start_agent):
    port = free_port()
    agent = start_agent([port])
    subprocess.run([sys.executable, "-m", "tests.integration.peers.sockets", "chatty_binary",
                    str(port)], cwd=REPO, check=True, timeout=60)
    assert agent.stop() == 0
    metrics = read_metrics(agent.traces)
    # both ends (client and server socket) were given up on and muted
    assert metrics["otel_ebpf.connections.unparsed"] == 2
    assert metrics["otel_ebpf.kernel.muted"] == 2
    # 1,200 data events happened (300 round trips, 4 calls each); a few dozen were sent
    # before the agent's verdict reached the kernel, none after
    assert metrics["otel_ebpf.events"] < 400, metrics["otel_ebpf.events"]
