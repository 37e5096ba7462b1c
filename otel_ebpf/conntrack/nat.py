"""A client connection as its server sees it, when NAT between them changed it.

A Kubernetes Service is a virtual IP: kube-proxy (iptables, nftables or IPVS mode) DNATs a
connection to the Service's VIP:port to one pod's IP:port, and may SNAT its source too. The
client's socket still names the VIP; the server's socket names the client as it arrived.
Netfilter's connection tracking keeps both views of every connection it translated: the
original tuple (what the client sent) and the reply tuple (what the server answers to), so
the reply tuple's source is the real server and its destination the client as the server
sees it. Both agents of a cross-node call derive their IDs from the server's view
(correlate/joiner.py), and then meet through a Service as they do on a direct call.

Conntrack is per network namespace. The translation is made in the namespace whose rules
matched: the client process's own (a host-network process; this repository's two-node test
harness, tests/support/nodes.py) or the node's (a pod's connection, translated on the host
side of its veth). So a connection is looked up in its process's namespace, then in the
namespace of pid 1 of the agent's pid namespace (the host's, with `hostPID: true`); the
first entry found decides.

How an entry is read, per namespace:

- netlink: a CTNETLINK get of the original tuple (IPCTNL_MSG_CT_GET with CTA_TUPLE_ORIG,
  the message `conntrack -G` sends), on a NETLINK_NETFILTER socket opened in that namespace
  (a short-lived thread enters it with setns(2); the socket stays bound to it). One hash
  lookup in the kernel. Needs CAP_NET_ADMIN (every nfnetlink request is checked for it)
  and, for another namespace than the agent's own, CAP_SYS_ADMIN (setns).
- procfs: `/proc/<pid>/net/nf_conntrack`, the namespace's whole table in text, searched for
  the tuple, when the netlink way is refused. Needs only to read that file, where the kernel
  has it (CONFIG_NF_CONNTRACK_PROCFS); costs time in proportion to the table (at most
  PROCFS_MAX_BYTES are read).

Only TCP client connections whose remote end is not this host (not loopback, not the
connection's own local address) are looked up, once each; in any second, at most
`per_second` of them and for at most `time_share` of that second (the procfs way on a busy
node costs milliseconds a lookup): the others are skipped. Every answer is counted in
`otel_ebpf.nat.lookups{result}`.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import ipaddress
import logging
import os
import socket
import struct
import threading
import time
from collections import OrderedDict
from typing import TYPE_CHECKING

from otel_ebpf.kernel.abi import is_loopback

if TYPE_CHECKING:
    from otel_ebpf.protocols.base import ConnInfo
    from otel_ebpf.telemetry import Stats

log = logging.getLogger("otel_ebpf")

# (client address, client port, server address, server port) as the server sees them
ServerView = tuple[str, int, str, int]

NETLINK_NETFILTER = 12
NFNL_SUBSYS_CTNETLINK = 1
IPCTNL_MSG_CT_NEW, IPCTNL_MSG_CT_GET = 0, 1
NLM_F_REQUEST = 0x1
NLMSG_ERROR = 2
NLA_F_NESTED = 0x8000
NLA_TYPE_MASK = 0x3FFF  # without NLA_F_NESTED and NLA_F_NET_BYTEORDER
CTA_TUPLE_ORIG, CTA_TUPLE_REPLY = 1, 2
CTA_TUPLE_IP, CTA_TUPLE_PROTO = 1, 2
CTA_IP_V4_SRC, CTA_IP_V4_DST, CTA_IP_V6_SRC, CTA_IP_V6_DST = 1, 2, 3, 4
CTA_PROTO_NUM, CTA_PROTO_SRC_PORT, CTA_PROTO_DST_PORT = 1, 2, 3
CLONE_NEWNET = 0x40000000
_HDR = struct.Struct("=IHHII")  # struct nlmsghdr
_NLA = struct.Struct("=HH")  # struct nlattr
_GET_TYPE = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_GET
_NEW_TYPE = (NFNL_SUBSYS_CTNETLINK << 8) | IPCTNL_MSG_CT_NEW

PROCFS_MAX_BYTES = 8 << 20  # of one namespace's /proc/.../nf_conntrack, per lookup
NAMESPACES_MAX = 64  # namespaces with a socket open at once (each socket pins its namespace)
NAMESPACE_IDLE_S = 60.0  # a namespace's socket unused this long is closed (a pod that went)
RECV_TIMEOUT_S = 0.5  # the kernel answers a get while the request is sent; this bounds a stray
SETNS_TIMEOUT_S = 5.0


def wanted(info: ConnInfo) -> bool:
    """A connection worth a lookup: TCP, opened by the traced process (connect), to an
    address that is not this host's (loopback, or the connection's own local address)."""
    if info.transport != "stream" or info.family not in ("ipv4", "ipv6") \
            or not info.remote_port or not info.local_port:
        return False
    remote = info.remote_addr
    return remote != info.local_addr and not is_loopback(remote)


def _nla(kind: int, payload: bytes) -> bytes:
    size = _NLA.size + len(payload)
    return _NLA.pack(size, kind) + payload + b"\0" * (-size % 4)


def _attrs(data: bytes | memoryview, start: int, end: int) -> dict[int, memoryview]:
    """Netlink attributes between `start` and `end`: {type: payload}."""
    out: dict[int, memoryview] = {}
    view = memoryview(data)
    while start + _NLA.size <= end:
        size, kind = _NLA.unpack_from(view, start)
        if size < _NLA.size or start + size > end:
            break
        out[kind & NLA_TYPE_MASK] = view[start + _NLA.size : start + size]
        start += (size + 3) & ~3
    return out


def get_request(seq: int, src: str, sport: int, dst: str, dport: int) -> bytes:
    """The CTNETLINK get of a TCP connection by its original tuple."""
    family = socket.AF_INET if ":" not in src else socket.AF_INET6
    raw_src, raw_dst = socket.inet_pton(family, src), socket.inet_pton(family, dst)
    v4 = family == socket.AF_INET
    ip = (_nla(CTA_IP_V4_SRC if v4 else CTA_IP_V6_SRC, raw_src)
          + _nla(CTA_IP_V4_DST if v4 else CTA_IP_V6_DST, raw_dst))
    proto = (_nla(CTA_PROTO_NUM, bytes([socket.IPPROTO_TCP]))
             + _nla(CTA_PROTO_SRC_PORT, struct.pack(">H", sport))
             + _nla(CTA_PROTO_DST_PORT, struct.pack(">H", dport)))
    orig = _nla(CTA_TUPLE_ORIG | NLA_F_NESTED,
                _nla(CTA_TUPLE_IP | NLA_F_NESTED, ip) + _nla(CTA_TUPLE_PROTO | NLA_F_NESTED, proto))
    body = struct.pack("=BBH", family, 0, 0) + orig  # struct nfgenmsg, NFNETLINK_V0
    return _HDR.pack(_HDR.size + len(body), _GET_TYPE, NLM_F_REQUEST, seq, 0) + body


def _addr_text(raw: bytes) -> str:
    if len(raw) == 4:
        return socket.inet_ntop(socket.AF_INET, raw)
    ip = ipaddress.IPv6Address(raw)
    return str(ip.ipv4_mapped) if ip.ipv4_mapped else str(ip)


def parse_reply_tuple(msg: bytes | memoryview) -> tuple[str, int, str, int] | None:
    """(source address, source port, destination address, destination port) of the reply
    tuple of one IPCTNL_MSG_CT_NEW message, or None when it has none."""
    length = _HDR.unpack_from(msg, 0)[0]
    top = _attrs(msg, _HDR.size + 4, min(length, len(msg)))
    reply = top.get(CTA_TUPLE_REPLY)
    if reply is None:
        return None
    parts = _attrs(reply, 0, len(reply))
    ip, proto = parts.get(CTA_TUPLE_IP), parts.get(CTA_TUPLE_PROTO)
    if ip is None or proto is None:
        return None
    ips, ports = _attrs(ip, 0, len(ip)), _attrs(proto, 0, len(proto))
    src = ips.get(CTA_IP_V4_SRC) or ips.get(CTA_IP_V6_SRC)
    dst = ips.get(CTA_IP_V4_DST) or ips.get(CTA_IP_V6_DST)
    sport, dport = ports.get(CTA_PROTO_SRC_PORT), ports.get(CTA_PROTO_DST_PORT)
    if src is None or dst is None or sport is None or dport is None \
            or len(sport) != 2 or len(dport) != 2:
        return None
    return (_addr_text(bytes(src)), struct.unpack(">H", sport)[0],
            _addr_text(bytes(dst)), struct.unpack(">H", dport)[0])


class Refused(Exception):
    """This way of reading the namespace's table is not allowed here."""


class _Netlink:
    """A NETLINK_NETFILTER socket bound to one network namespace."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.seq = 0
        self.used = time.monotonic()

    def reply_tuple(self, src: str, sport: int, dst: str, dport: int
                    ) -> tuple[str, int, str, int] | None:
        """The reply tuple of the entry whose original tuple is this, or None (no entry)."""
        self.seq = (self.seq + 1) & 0xFFFFFFFF
        self.used = time.monotonic()
        self.sock.send(get_request(self.seq, src, sport, dst, dport))
        for _ in range(4):  # a stray answer to an earlier request that timed out: skip it
            data = self.sock.recv(65536)
            if len(data) < _HDR.size:
                raise OSError(errno.EPROTO, "short netlink message")
            _, kind, _, seq, _ = _HDR.unpack_from(data, 0)
            if seq != self.seq:
                continue
            if kind == NLMSG_ERROR:
                code = -struct.unpack_from("=i", data, _HDR.size)[0]
                if code == errno.ENOENT:
                    return None
                if code == errno.EPERM:
                    raise Refused("conntrack netlink needs CAP_NET_ADMIN")
                raise OSError(code, os.strerror(code))
            if kind == _NEW_TYPE:
                return parse_reply_tuple(data)
            raise OSError(errno.EPROTO, f"unexpected netlink message type {kind:#x}")
        raise OSError(errno.EPROTO, "no answer with our sequence number")

    def close(self) -> None:
        self.sock.close()


def _netlink_socket() -> socket.socket:
    sock = socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, NETLINK_NETFILTER)
    try:
        sock.bind((0, 0))
        sock.settimeout(RECV_TIMEOUT_S)
    except OSError:
        sock.close()
        raise
    return sock


_libc = None


def _setns(fd: int) -> None:
    if hasattr(os, "setns"):  # Python 3.12+
        os.setns(fd, CLONE_NEWNET)
        return
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code))


def socket_in(ns_path: str) -> socket.socket:
    """A NETLINK_NETFILTER socket of the network namespace `ns_path` (/proc/PID/ns/net):
    made by a thread of its own that enters the namespace and ends (a namespace is a
    thread's own, so no other thread of the agent ever runs in it)."""
    box: dict[str, object] = {}

    def enter() -> None:
        try:
            fd = os.open(ns_path, os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(fd)
            finally:
                os.close(fd)
            box["sock"] = _netlink_socket()
        except BaseException as e:  # handed to the caller's thread
            box["error"] = e

    thread = threading.Thread(target=enter, name="otel-ebpf-netns", daemon=True)
    thread.start()
    thread.join(SETNS_TIMEOUT_S)
    if "sock" in box:
        return box["sock"]  # type: ignore[return-value]
    error = box.get("error")
    if isinstance(error, PermissionError):
        raise Refused(f"entering {ns_path} needs CAP_SYS_ADMIN")
    if isinstance(error, OSError):
        raise error
    raise OSError(errno.ETIMEDOUT, f"no socket made in {ns_path}")


def procfs_reply_tuple(path: str, src: str, sport: int, dst: str, dport: int,
                       max_bytes: int = PROCFS_MAX_BYTES) -> tuple[str, int, str, int] | None:
    """The reply tuple of the TCP entry whose original tuple is this, from a namespace's
    /proc/.../net/nf_conntrack (IPv6 addresses are written there in full), or None."""
    def text(addr: str) -> str:
        return ipaddress.IPv6Address(addr).exploded if ":" in addr else addr

    needle = f" src={text(src)} dst={text(dst)} sport={sport} dport={dport} "
    try:
        with open(path, "rb") as f:
            table = f.read(max_bytes).decode("ascii", "replace")
    except PermissionError as e:
        raise Refused(f"{path}: {e}") from None
    at = table.find(needle)
    while at >= 0:
        start = table.rfind("\n", 0, at) + 1
        end = table.find("\n", at)
        line = table[start : end if end >= 0 else len(table)]
        fields = line.split()
        # the original tuple is a line's first src=..dport=; the reply tuple the second
        if len(fields) > 3 and fields[2] == "tcp" and line.find(" src=") == at - start:
            tuples = [f for f in fields if "=" in f and f.split("=", 1)[0] in
                      ("src", "dst", "sport", "dport")]
            if len(tuples) >= 8:
                reply = dict(f.split("=", 1) for f in tuples[4:8])
                return (_addr_text(socket.inet_pton(
                            socket.AF_INET6 if ":" in reply["src"] else socket.AF_INET,
                            reply["src"])), int(reply["sport"]),
                        _addr_text(socket.inet_pton(
                            socket.AF_INET6 if ":" in reply["dst"] else socket.AF_INET,
                            reply["dst"])), int(reply["dport"]))
        at = table.find(needle, at + 1)
    return None


def _namespace(proc: str, pid: int) -> int | None:
    try:
        return os.stat(f"{proc}/{pid}/ns/net").st_ino
    except OSError:
        return None


class NatLookup:
    """`server_view(info)`: the connection as its server sees it, when conntrack says NAT
    changed it, else None. Sockets per namespace are kept (bounded, closed when idle)."""

    def __init__(self, stats: Stats | None = None, *, per_second: int = 2000,
                 time_share: float = 0.05, proc: str = "/proc", method: str = "auto",
                 max_namespaces: int = NAMESPACES_MAX) -> None:
        if method not in ("auto", "netlink", "procfs"):
            raise ValueError(f"method {method!r}: auto, netlink or procfs")
        self.stats = stats
        self.per_second = per_second
        self.time_share = time_share
        self.setns_refused = False  # no CAP_SYS_ADMIN: no other namespace's socket is tried
        self.proc = proc
        self.method = method
        self.max_namespaces = max_namespaces
        self.own = _namespace(proc, os.getpid())
        self.host = _namespace(proc, 1)  # pid 1's: the node's, with hostPID
        self.channels: OrderedDict[int, _Netlink | None] = OrderedDict()  # None: procfs
        self._window, self._spent, self._spent_ns = 0, 0, 0
        self._said: set[str] = set()

    def server_view(self, info: ConnInfo) -> ServerView | None:
        """Looked up now: call it once per connection (the answer belongs on its ConnInfo)."""
        started = time.monotonic_ns()
        window = started // 1_000_000_000
        if window != self._window:
            self._window, self._spent, self._spent_ns = window, 0, 0
        if self._spent >= self.per_second or self._spent_ns >= self.time_share * 1e9:
            self._count("skipped")
            return None
        self._spent += 1
        try:
            return self._server_view(info)
        finally:
            self._spent_ns += time.monotonic_ns() - started

    def _server_view(self, info: ConnInfo) -> ServerView | None:
        local, lport = info.local_addr, info.local_port
        remote, rport = info.remote_addr, info.remote_port
        reply, result = None, "absent"
        try:
            mine = _namespace(self.proc, info.pid)  # None: the process is gone
            for pid, ns in ((info.pid, mine), (1, self.host)):
                if ns is None or (pid == 1 and ns == mine):
                    continue
                reply = self._reply(ns, pid, local, lport, remote, rport)
                if reply is not None:
                    break
        except (OSError, Refused, ValueError) as e:
            self._say(type(e).__name__ + str(getattr(e, "errno", "")),
                      f"conntrack lookups fail ({e}): calls through a Service's NAT are "
                      "not linked to their server's trace (docs/deploy.md)")
            self._count("failed")
            return None
        if reply is not None:
            view = (reply[2], reply[3], reply[0], reply[1])
            if view == (local, lport, remote, rport):
                result = "untranslated"
            else:
                self._count("translated")
                return view
        self._count(result)
        return None

    def _reply(self, ns: int, pid: int, src: str, sport: int, dst: str, dport: int
               ) -> tuple[str, int, str, int] | None:
        channel = self._channel(ns, pid)
        if channel is not None:
            try:
                return channel.reply_tuple(src, sport, dst, dport)
            except Refused as e:  # no CAP_NET_ADMIN: this namespace goes to procfs
                if self.method == "netlink":
                    raise
                self._say("netlink", f"{e}: reading /proc/<pid>/net/nf_conntrack instead")
                self._drop(ns)
                self.channels[ns] = None
        return procfs_reply_tuple(f"{self.proc}/{pid}/net/nf_conntrack", src, sport, dst,
                                  dport)

    def _channel(self, ns: int, pid: int) -> _Netlink | None:
        channels = self.channels
        if ns in channels:
            channels.move_to_end(ns)
            return channels[ns]
        channel = None
        if self.method != "procfs" and (ns == self.own or not self.setns_refused):
            try:
                sock = _netlink_socket() if ns == self.own else \
                    socket_in(f"{self.proc}/{pid}/ns/net")
                channel = _Netlink(sock)
            except Refused as e:
                if self.method == "netlink":
                    raise
                self.setns_refused = True  # a capability: so for every namespace
                self._say("setns", f"{e}: reading /proc/<pid>/net/nf_conntrack instead")
        channels[ns] = channel
        while len(channels) > self.max_namespaces:
            _, old = channels.popitem(last=False)
            if old is not None:
                old.close()
        return channel

    def _drop(self, ns: int) -> None:
        old = self.channels.pop(ns, None)
        if old is not None:
            old.close()

    def sweep(self, now: float | None = None) -> None:
        """Close the sockets of namespaces not looked at for NAMESPACE_IDLE_S: an open
        socket keeps its namespace alive after its pod went."""
        now = time.monotonic() if now is None else now
        for ns, channel in list(self.channels.items()):
            if channel is not None and now - channel.used > NAMESPACE_IDLE_S:
                self._drop(ns)

    def close(self) -> None:
        for channel in self.channels.values():
            if channel is not None:
                with contextlib.suppress(OSError):
                    channel.close()
        self.channels.clear()

    def _count(self, result: str) -> None:
        if self.stats is not None:
            self.stats.add("nat.lookups", result=result)

    def _say(self, reason: str, line: str) -> None:
        if reason not in self._said:  # once per reason: a few kinds, whatever the pids
            self._said.add(reason)
            log.warning("%s", line)
