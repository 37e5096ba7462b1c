"""Fixtures over the public test kit (otel_ebpf.protocols.testing), which drives a protocol
parser through the real connection tracker the way the agent does."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.testing import (  # noqa: F401 (the names tests here import)
    CLOSE_NS,
    ISN,
    REQ,
    RESP,
    TICK,
    ConnectionDriver,
    EchoLayer,
    conn_info,
    feed_all,
    run_exchange,
)


@pytest.fixture(scope="session")
def tracker_cls() -> type[ConnectionDriver]:
    return ConnectionDriver


@pytest.fixture(scope="session")
def make_conn():
    return conn_info
