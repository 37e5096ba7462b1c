"""The two ends of the TCP option test (test_tcp_option.py), each run in its own network
namespace and cgroup, as the processes of two nodes.

    prop_peer server PORT DIR   a dual-stack server on [::]:PORT (IPv4 clients arrive
                                v4-mapped); each connection's bytes, as read, go to
                                DIR/<log_name(client)>.bin, and a .done file marks its end
    prop_peer client            a client driven by JSON lines on stdin, one reply per line:
        {"op": "connect", "host": h, "port": p}  -> {"local": [a, p], "remote": [a, p]}
        {"op": "request", "size": n, "response": m, "seed": s}
            -> {"offset": bytes sent before it, "sent": its length, "response": sha256}
            (the response read whole and acknowledged: the connection is then quiet)
        {"op": "close"}                          -> {}
    prop_peer sniff IFACE PORTS FILE   every TCP segment arriving on IFACE for one of PORTS
                                (comma-separated) that carries an option of kind 253, as a
                                JSON line in FILE: source, source port, the segment's
                                sequence number, payload length and flags, each kind-253
                                option (hex)

A request is 8 bytes (body length, response length: big-endian u32) and its body; the
response is 4 bytes (its length) and that many bytes derived from the request's body.
"""

from __future__ import annotations

import hashlib
import json
import socket
import struct
import sys
import threading
from pathlib import Path

TIMEOUT_S = 20.0


def request_bytes(size: int, response: int, seed: int) -> bytes:
    """What the client sends for one request (the test computes it too)."""
    body = b"".join(hashlib.sha256(f"{seed}:{i}".encode()).digest()
                    for i in range(size // 32 + 1))[:size]
    return struct.pack(">II", size, response) + body


def response_body(body: bytes, length: int) -> bytes:
    digest = hashlib.sha256(body).digest()
    return (digest * (length // 32 + 1))[:length]


def read_exactly(sock: socket.socket, n: int, sink: bytearray | None = None) -> bytes:
    out = bytearray()
    while len(out) < n:
        chunk = sock.recv(min(65536, n - len(out)))
        if not chunk:
            raise ConnectionError(f"closed after {len(out)} of {n} bytes")
        out += chunk
        if sink is not None:
            sink += chunk
    return bytes(out)


def log_name(addr: str, port: int) -> str:
    """The files of the connection from addr:port (IPv4 as itself, not v4-mapped)."""
    return f"{addr.removeprefix('::ffff:').replace(':', '_')}-{port}"


def serve_one(conn: socket.socket, peer: tuple, out_dir: Path) -> None:
    name = log_name(peer[0], peer[1])
    path = out_dir / f"{name}.bin"
    with conn, path.open("wb") as log:
        while True:
            seen = bytearray()
            try:
                head = conn.recv(8)  # a read of its own: its first byte starts a request
            except OSError:
                break
            if not head:
                break
            seen += head
            head += read_exactly(conn, 8 - len(head), seen) if len(head) < 8 else b""
            size, length = struct.unpack(">II", head)
            body = read_exactly(conn, size, seen)
            log.write(seen)
            log.flush()
            conn.sendall(struct.pack(">I", length) + response_body(body, length))
    (out_dir / f"{name}.done").write_text("")


def server(port: int, out_dir: Path) -> None:
    lst = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    lst.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    lst.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
    lst.bind(("::", port))
    lst.listen(16)
    print("listening", flush=True)
    while True:
        conn, peer = lst.accept()
        threading.Thread(target=serve_one, args=(conn, peer, out_dir), daemon=True).start()


def client() -> None:
    sock: socket.socket | None = None
    sent = 0
    for line in sys.stdin:
        cmd = json.loads(line)
        op = cmd["op"]
        if op == "connect":
            sock = socket.create_connection((cmd["host"], cmd["port"]), timeout=TIMEOUT_S)
            sent = 0
            reply = {"local": list(sock.getsockname()[:2]), "remote": list(sock.getpeername()[:2])}
        elif op == "request":
            assert sock is not None
            data = request_bytes(cmd["size"], cmd["response"], cmd["seed"])
            sock.sendall(data)  # one write: its first byte is the request's first byte
            (length,) = struct.unpack(">I", read_exactly(sock, 4))
            body = read_exactly(sock, length)
            # an ACK the kernel is holding back (delayed ACK) leaves now, not on a timer
            # while the test queues contexts: after this reply the connection is quiet
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
            reply = {"offset": sent, "sent": len(data),
                     "response": hashlib.sha256(body).hexdigest()}
            sent += len(data)
        elif op == "close":
            assert sock is not None
            sock.close()
            sock = None
            reply = {}
        else:
            raise SystemExit(f"unknown op {op!r}")
        print(json.dumps(reply), flush=True)


def tcp_segment(frame: bytes) -> tuple[str, int, int, int, bytes, int, int] | None:
    """(source, source port, destination port, seq, options, payload length, TCP flags) of
    an Ethernet frame carrying IPv4 or IPv6 (no extension headers) and TCP, else None."""
    ethertype = int.from_bytes(frame[12:14], "big")
    ip = frame[14:]
    if ethertype == 0x0800 and ip[9] == socket.IPPROTO_TCP:
        ihl = (ip[0] & 15) * 4
        src = socket.inet_ntop(socket.AF_INET, ip[12:16])
        tcp, ip_payload = ip[ihl:], int.from_bytes(ip[2:4], "big") - ihl
    elif ethertype == 0x86DD and ip[6] == socket.IPPROTO_TCP:
        src = socket.inet_ntop(socket.AF_INET6, ip[8:24])
        tcp, ip_payload = ip[40:], int.from_bytes(ip[4:6], "big")
    else:
        return None
    sport, dport, seq = struct.unpack(">HHI", tcp[:8])
    doff = (tcp[12] >> 4) * 4
    return src, sport, dport, seq, bytes(tcp[20:doff]), ip_payload - doff, tcp[13]


def options_of(raw: bytes, kind: int) -> list[bytes]:
    out, i = [], 0
    while i < len(raw):
        if raw[i] == 0:
            break
        if raw[i] == 1:
            i += 1
            continue
        if i + 1 >= len(raw) or raw[i + 1] < 2:
            break
        if raw[i] == kind:
            out.append(raw[i : i + raw[i + 1]])
        i += raw[i + 1]
    return out


def sniff(iface: str, ports: set[int], out: Path) -> None:
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(0x0003))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 8 << 20)
    sock.bind((iface, 0))
    print("sniffing", flush=True)
    with out.open("a") as log:
        while True:
            frame, addr = sock.recvfrom(1 << 18)
            if addr[2] == socket.PACKET_OUTGOING:
                continue
            seg = tcp_segment(frame)
            if seg is None or seg[2] not in ports:
                continue
            found = options_of(seg[4], 253)
            if found:
                log.write(json.dumps({"src": seg[0], "sport": seg[1], "seq": seg[3],
                                      "len": seg[5], "flags": seg[6],
                                      "options": [o.hex() for o in found]})
                          + "\n")
                log.flush()


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(int(sys.argv[2]), Path(sys.argv[3]))
    elif sys.argv[1] == "sniff":
        sniff(sys.argv[2], {int(p) for p in sys.argv[3].split(",")}, Path(sys.argv[4]))
    else:
        client()
