"""Reading a client connection's NAT from conntrack (otel_ebpf/conntrack/nat.py), against
real conntrack entries: two network namespaces (tests/support/nodes.py), a server in node
B, kube-proxy's nftables rules for a Service in node A, and a client in node A holding its
connection open while it is looked up. The server's own accept() says what the answer must
be: the client's address and port as the server saw them, and the server's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from otel_ebpf.conntrack.nat import NatLookup, parse_reply_tuple, procfs_reply_tuple, wanted
from otel_ebpf.protocols.base import ConnInfo, Role
from otel_ebpf.telemetry import Stats
from tests.integration.conftest import REQUIRE_BPF
from tests.support.nodes import require_tools, two_nodes

REPO = Path(__file__).resolve().parents[2]
VIP, VIP_MASQUERADE, SERVER_PORT = "10.96.100.10", "10.96.100.11", 8080
WAIT_S = 20.0

# a server that prints, for every connection it accepts, the peer and its own address
SERVER = """
import json, socket, sys
s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", int(sys.argv[1]))); s.listen(64)
held = []
while True:
    c, peer = s.accept()
    held.append(c)
    print(json.dumps([peer[0], peer[1], *c.getsockname()]), flush=True)
"""
# a client that connects to each address given, prints its own ends, and holds them open
CLIENT = """
import json, socket, sys, time
held = []
for target in sys.argv[1:]:
    host, port = target.rsplit(":", 1)
    c = socket.create_connection((host, int(port)), timeout=10)
    held.append(c)
    print(json.dumps([*c.getsockname(), host, int(port)]), flush=True)
time.sleep(120)
"""


def _info(pid: int, local: str, lport: int, remote: str, rport: int, **kw) -> ConnInfo:
    fields = {"transport": "stream", "family": "ipv4", **kw}
    return ConnInfo(pid=pid, fd=3, generation=1, role=Role.CLIENT, local_addr=local,
                    local_port=lport, remote_addr=remote, remote_port=rport, **fields)


def test_only_tcp_connections_to_other_hosts_are_looked_up():
    assert wanted(_info(1, "10.244.1.2", 40000, "10.96.100.10", 80))
    assert wanted(_info(1, "fd00::1", 40000, "fd00:96::10", 80, family="ipv6"))
    assert not wanted(_info(1, "127.0.0.1", 40000, "127.0.0.1", 80))  # loopback
    assert not wanted(_info(1, "::1", 40000, "::1", 80, family="ipv6"))
    assert not wanted(_info(1, "10.244.1.2", 40000, "10.244.1.2", 80))  # its own address
    assert not wanted(_info(1, "10.244.1.2", 40000, "10.96.100.10", 80,
                            transport="datagram"))
    assert not wanted(_info(1, "", 0, "", 0, family="unix"))
    assert not wanted(_info(1, "10.244.1.2", 40000, "10.96.100.10", 0))


@pytest.mark.parametrize("budget", [{"per_second": 0}, {"time_share": 0.0}])
def test_lookups_over_the_budget_are_skipped_and_counted(budget):
    stats = Stats()
    lookup = NatLookup(stats, **budget)
    assert lookup.server_view(_info(os.getpid(), "10.244.1.2", 4000, "10.96.0.1", 80)) is None
    assert stats.snapshot() == {("nat.lookups", (("result", "skipped"),)): 1}


def test_a_reply_without_a_reply_tuple_gives_none():
    header = (36).to_bytes(4, "little") + bytes(12) + bytes(4)  # nlmsghdr, nfgenmsg
    assert parse_reply_tuple(header + bytes(16)) is None


@pytest.fixture(scope="module")
def nodes(tmp_path_factory):
    why = require_tools()
    if why:
        if REQUIRE_BPF:
            pytest.fail(why)
        pytest.skip(why)
    tmp = tmp_path_factory.mktemp("nat")
    with two_nodes(cgroups=False) as (a, b):
        server = b.spawn([sys.executable, "-c", SERVER, str(SERVER_PORT)],
                         log=tmp / "server.log")
        b.wait_port(SERVER_PORT, server)
        a.service("default/server", VIP, 80, b.address, SERVER_PORT)
        a.service("default/server-masq", VIP_MASQUERADE, 80, b.address, SERVER_PORT,
                  masquerade_all=True)
        yield a, b, server, tmp


def _lines(read, n: int) -> list[list]:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        lines = [json.loads(x) for x in read().splitlines() if x.startswith("[")]
        if len(lines) >= n:
            return lines
        time.sleep(0.1)
    raise TimeoutError(f"fewer than {n} lines after {WAIT_S}s: {read()[-1000:]}")


@pytest.fixture(scope="module")
def connections(nodes):
    """A client in node A holding three connections: to the Service, to the masquerading
    Service, to the server's own address; with what the server saw of each."""
    a, b, server, tmp = nodes
    client = a.spawn([sys.executable, "-c", CLIENT, f"{VIP}:80", f"{VIP_MASQUERADE}:80",
                      f"{b.address}:{SERVER_PORT}"], log=tmp / "client.log")
    try:
        mine = _lines(client.output, 3)
        seen = _lines(server.output, 3)
        # the server's lines come in accept order, the client's in connect order: the same
        yield client, [(tuple(m), tuple(s)) for m, s in zip(mine, seen[-3:], strict=True)]
    finally:
        client.stop()


@pytest.mark.kernel
@pytest.mark.parametrize("method", ["netlink", "procfs"])
def test_dnat_and_snat_give_the_connection_as_the_server_sees_it(connections, method):
    client, pairs = connections
    stats = Stats()
    lookup = NatLookup(stats, method=method)
    try:
        (vip, vip_seen), (masq, masq_seen), (direct, _) = pairs
        # DNAT: the server is the pod, the client unchanged
        view = lookup.server_view(_info(client.pid, *vip))
        assert view == (vip_seen[0], vip_seen[1], vip_seen[2], vip_seen[3])
        assert view[:2] == vip[:2] and view[2:] == ("10.244.2.2", SERVER_PORT)
        # DNAT and masquerade (fully random): the client's port as the server saw it
        assert lookup.server_view(_info(client.pid, *masq)) == tuple(masq_seen)
        # nothing translated the direct call
        assert lookup.server_view(_info(client.pid, *direct)) is None
        # no entry: a connection nobody made
        assert lookup.server_view(_info(client.pid, direct[0], 1, direct[2], 9)) is None
    finally:
        lookup.close()
    by_result = {dict(labels)["result"]: n for (name, labels), n in stats.snapshot().items()
                 if name == "nat.lookups"}
    assert by_result == {"translated": 2, "untranslated": 1, "absent": 1}


@pytest.mark.kernel
def test_the_node_namespace_is_read_when_the_process_namespace_has_no_entry(
        connections, nodes, tmp_path):
    """A pod's connection to a Service is translated on the node (the host's namespace), not
    in the pod's own: the process's namespace (node B's here, which holds no entry) is asked
    first, then pid 1's (node A's here), through a /proc laid out that way."""
    a, b, server, _ = nodes
    client, pairs = connections
    (vip, vip_seen) = pairs[0]
    proc = tmp_path / "proc"
    fake_pid = 4242
    for pid, owner in ((fake_pid, server.pid), (1, client.pid)):
        (proc / str(pid) / "ns").mkdir(parents=True)
        (proc / str(pid) / "ns" / "net").symlink_to(f"/proc/{owner}/ns/net")
        (proc / str(pid) / "net").symlink_to(f"/proc/{owner}/net")
    for method in ("netlink", "procfs"):
        lookup = NatLookup(Stats(), proc=str(proc), method=method)
        try:
            assert lookup.server_view(_info(fake_pid, *vip)) == tuple(vip_seen), method
        finally:
            lookup.close()


@pytest.mark.kernel
def test_procfs_reader_finds_the_entry_by_its_original_tuple(connections):
    client, pairs = connections
    (vip, vip_seen) = pairs[0]
    reply = procfs_reply_tuple(f"/proc/{client.pid}/net/nf_conntrack", *vip)
    assert reply == (vip_seen[2], vip_seen[3], vip_seen[0], vip_seen[1])
    # its reply tuple is not an original tuple: not found by it
    assert procfs_reply_tuple(f"/proc/{client.pid}/net/nf_conntrack", vip_seen[2],
                              vip_seen[3], vip_seen[0], vip_seen[1]) is None


def test_a_namespace_socket_idle_too_long_is_closed():
    lookup = NatLookup(Stats(), method="netlink")
    try:
        own = lookup.own
        channel = lookup._channel(own, os.getpid())
        assert channel is not None and lookup.channels
        lookup.sweep(now=channel.used + 1)
        assert own in lookup.channels
        lookup.sweep(now=channel.used + 3600)
        assert own not in lookup.channels
    finally:
        lookup.close()


def test_stale_sockets_beyond_the_bound_are_closed():
    lookup = NatLookup(Stats(), method="procfs", max_namespaces=2)
    for ns in range(5):
        lookup._channel(ns, os.getpid())
    assert list(lookup.channels) == [3, 4]


# a lookup in a process run with only the capabilities the Helm chart gives the agent
# (deploy/helm/otel-ebpf/values.yaml): no CAP_NET_ADMIN, no CAP_SYS_ADMIN, no
# CAP_DAC_OVERRIDE; every other capability is dropped from the bounding set (capsh --drop)
CHART_CAPABILITIES = {"cap_bpf", "cap_perfmon", "cap_sys_ptrace", "cap_dac_read_search",
                      "cap_sys_resource"}
WITHOUT_CAPS = """
import json, logging, sys
logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
from otel_ebpf.conntrack.nat import NatLookup
from otel_ebpf.protocols.base import ConnInfo, Role
from otel_ebpf.telemetry import Stats
pid, local, lport, remote, rport = json.loads(sys.argv[1])
info = ConnInfo(pid=pid, fd=3, generation=1, role=Role.CLIENT, transport="stream",
                family="ipv4", local_addr=local, local_port=lport, remote_addr=remote,
                remote_port=rport)
stats = Stats()
lookup = NatLookup(stats, method=sys.argv[2])
print(json.dumps(lookup.server_view(info)))
print(json.dumps({dict(k[1])["result"]: v for k, v in stats.snapshot().items()}))
"""


@pytest.mark.kernel
def test_with_the_charts_capabilities_auto_reads_procfs_and_netlink_fails(connections):
    if subprocess.run(["sh", "-c", "command -v capsh"], capture_output=True).returncode:
        pytest.fail("capsh not installed (make deps: libcap2-bin)")
    bounding = next(line for line in subprocess.run(
        ["capsh", "--print"], capture_output=True, text=True, check=True).stdout.splitlines()
        if line.startswith("Bounding set ="))
    drop = sorted(set(bounding.split("=", 1)[1].split(",")) - CHART_CAPABILITIES)
    assert "cap_net_admin" in drop and "cap_sys_admin" in drop
    client, pairs = connections
    (vip, vip_seen) = pairs[0]
    answers = {}
    for method in ("auto", "netlink"):
        out = subprocess.run(
            ["capsh", f"--drop={','.join(drop)}", "--", "-c",
             '"$0" -c "$1" "$2" "$3"', sys.executable, WITHOUT_CAPS,
             json.dumps([client.pid, *vip]), method],
            capture_output=True, text=True, timeout=60, cwd=REPO,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        assert out.returncode == 0, out.stderr
        answers[method] = [json.loads(line) for line in out.stdout.splitlines()]
        if method == "auto":
            assert "CAP_SYS_ADMIN" in out.stderr  # said once, in the agent's log
    assert answers["auto"] == [list(vip_seen), {"translated": 1}]
    assert answers["netlink"] == [None, {"failed": 1}]  # refused: counted, never raised
