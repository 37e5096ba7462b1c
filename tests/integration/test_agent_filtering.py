"""The agent tells the kernel to stop sending connections no parser recognizes: their
later calls are not copied, decoded or parsed (the performance issue's in-kernel filter)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from otel_ebpf.conntrack.connection import INFER_ATTEMPTS

from tests.support.ports import free_port

from .conftest import REPO, read_metrics

pytestmark = pytest.mark.kernel


MESSAGE = 64  # bytes per message: 300 round trips of a client and a server message
BEFORE_PAUSE = 20  # round trips before the peer waits: > INFER_ATTEMPTS data events each end


def test_unrecognized_connections_are_muted_in_the_kernel(start_agent):
    port = free_port()
    agent = start_agent([port])
    peer = subprocess.Popen([sys.executable, "-m", "tests.integration.peers.sockets",
                             "chatty_binary_paused", str(port)], cwd=REPO,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert peer.stdout.readline().strip() == "paused"
        # the agent's verdict has reached the kernel for both ends before the rest is sent:
        # it tells the kernel in the step that gives up on a connection, and counts that in
        # connections.unparsed (kernel.muted counts only at a muted connection's next call,
        # which the paused peer makes after "go": waiting on it would race the agent's
        # first poll against the peer's 20 round trips)
        deadline = time.monotonic() + 60
        while read_metrics(agent.traces).get("otel_ebpf.connections.unparsed", 0) < 2:
            assert time.monotonic() < deadline, agent.stderr[-3000:]
            time.sleep(0.2)
        peer.communicate("go\n", timeout=60)
    finally:
        if peer.poll() is None:
            peer.kill()
            peer.wait(5)
    assert peer.returncode == 0
    assert agent.stop() == 0
    metrics = read_metrics(agent.traces)
    # both ends (client and server socket) were given up on and muted
    assert metrics["otel_ebpf.connections.unparsed"] == 2
    assert metrics["otel_ebpf.kernel.muted"] == 2
    # payload reached user space for the inference attempts (INFER_ATTEMPTS data events
    # each end, a byte at least), and none of the 280 round trips after the verdict did
    # (they would be 280 * 4 * 64 bytes); bytes, not events: the events counter also
    # counts every process exit on the host (1641 seen on a busy one, for 1,200 calls)
    got = metrics["otel_ebpf.bytes"]
    assert 2 * INFER_ATTEMPTS <= got <= BEFORE_PAUSE * 4 * MESSAGE, got
