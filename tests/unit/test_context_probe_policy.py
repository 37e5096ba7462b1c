"""Which processes keep the Context probes: a connection says its process calls out when
the process connected it, when it is a pipe, or when it is TCP of unknown side (open before
the agent); a Unix socket of unknown side (a socketpair: asyncio's self-pipe) says nothing,
nor does an accepted connection. And which processes the start-up scan probes: those with a
socket open."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from otel_ebpf.kernel.abi import (
    CONN_F_PIPE,
    CONN_F_PREEXISTING,
    CONN_F_STREAM,
    CONN_F_TCP,
    CONN_F_UNIX,
    ConnOpen,
)
from otel_ebpf.kernel.asyncio_probes import calls_out, has_socket
from otel_ebpf.protocols.base import Role


def opened(role: Role, flags: int) -> ConnOpen:
    return ConnOpen(key=(1234, 7, 1), ts_ns=1, tid=1234, role=role, flags=flags, family=2,
                    local_addr="127.0.0.1", local_port=40000, remote_addr="127.0.0.1",
                    remote_port=8000, comm="python3")


@pytest.mark.parametrize(("role", "flags", "expected"), [
    (Role.CLIENT, CONN_F_STREAM | CONN_F_TCP, True),
    (Role.CLIENT, CONN_F_STREAM | CONN_F_UNIX, True),
    (Role.SERVER, CONN_F_STREAM | CONN_F_TCP, False),
    (Role.SERVER, CONN_F_STREAM | CONN_F_UNIX, False),
    (Role.UNKNOWN, CONN_F_STREAM | CONN_F_TCP | CONN_F_PREEXISTING, True),
    (Role.UNKNOWN, CONN_F_STREAM | CONN_F_UNIX | CONN_F_PREEXISTING, False),
    (Role.UNKNOWN, CONN_F_PIPE, True),
])
def test_calls_out(role, flags, expected):
    assert calls_out(opened(role, flags)) is expected


def test_has_socket_sees_a_socket_of_this_process(tmp_path):
    proc = Path("/proc/self")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        assert has_socket(proc)
    assert not has_socket(tmp_path / "no-such-process")
