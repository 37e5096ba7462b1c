"""Socket traffic of every kind the kernel side captures, run as its own process:
`python -m tests.integration.peers.sockets KIND PORT`."""

import ctypes
import os
import socket
import sys
import time


def udp(port: int) -> None:
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", port))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.sendto(b"dgram-sendto", ("127.0.0.1", port))
    rx.recvfrom(100)
    tx.sendmsg([b"dgram-", b"sendmsg"], [], 0, ("127.0.0.1", port))
    rx.recvmsg(100)


class IOVec(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]


class MsgHdr(ctypes.Structure):
    _fields_ = [("name", ctypes.c_void_p), ("namelen", ctypes.c_uint32),
                ("iov", ctypes.POINTER(IOVec)), ("iovlen", ctypes.c_size_t),
                ("control", ctypes.c_void_p), ("controllen", ctypes.c_size_t),
                ("flags", ctypes.c_int)]


class MMsgHdr(ctypes.Structure):
    _fields_ = [("hdr", MsgHdr), ("len", ctypes.c_uint)]


def mmsg(port: int) -> None:
    """sendmmsg/recvmmsg, which Python's socket module does not wrap: three datagrams each."""
    libc = ctypes.CDLL(None, use_errno=True)
    rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    rx.bind(("127.0.0.1", port))
    tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    tx.connect(("127.0.0.1", port))
    payloads = [b"mmsg-%d" % i for i in range(3)]
    bufs = [ctypes.create_string_buffer(p, len(p)) for p in payloads]
    iovs = [IOVec(ctypes.cast(b, ctypes.c_void_p), len(p)) for b, p in zip(bufs, payloads, strict=True)]
    msgs = (MMsgHdr * 3)()
    for i, iov in enumerate(iovs):
        msgs[i].hdr.iov = ctypes.pointer(iov)
        msgs[i].hdr.iovlen = 1
    assert libc.sendmmsg(tx.fileno(), msgs, 3, 0) == 3, ctypes.get_errno()
    rbufs = [ctypes.create_string_buffer(64) for _ in range(3)]
    riovs = [IOVec(ctypes.cast(b, ctypes.c_void_p), 64) for b in rbufs]
    rmsgs = (MMsgHdr * 3)()
    names = [ctypes.create_string_buffer(16) for _ in range(3)]
    for i, iov in enumerate(riovs):
        rmsgs[i].hdr.iov = ctypes.pointer(iov)
        rmsgs[i].hdr.iovlen = 1
        rmsgs[i].hdr.name = ctypes.cast(names[i], ctypes.c_void_p)
        rmsgs[i].hdr.namelen = 16
    time.sleep(0.05)
    assert libc.recvmmsg(rx.fileno(), rmsgs, 3, 0, None) == 3, ctypes.get_errno()


def tcp_kinds(port: int) -> None:
    """One TCP connection over IPv6 exercising write/read, writev/readv, send/recv, and a
    message larger than the capture size."""
    srv = socket.socket(socket.AF_INET6, socket.SOCK_STREAM)
    srv.bind(("::1", port))
    srv.listen()
    cli = socket.create_connection(("::1", port))
    conn, _ = srv.accept()
    os.write(cli.fileno(), b"write-call")
    os.read(conn.fileno(), 100)
    os.writev(cli.fileno(), [b"writev-", b"call"])
    os.readv(conn.fileno(), [bytearray(100)])
    cli.send(b"x" * 10000)
    got = 0
    while got < 10000:
        got += len(conn.recv(65536))
    for s in (cli, conn, srv):
        s.close()


def fd_reuse(port: int) -> None:
    """Two connections in a row that get the same fd number."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", port))
    srv.listen()
    for i in range(2):
        cli = socket.create_connection(("127.0.0.1", port))
        conn, _ = srv.accept()
        cli.sendall(b"conn %d" % i)
        conn.recv(100)
        cli.close()
        conn.close()


def unix(path: str) -> None:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(path)
    srv.listen()
    cli = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    cli.connect(path)
    conn, _ = srv.accept()
    cli.sendall(b"over-unix")
    conn.recv(100)


def silent_server(port: int) -> None:
    """Accepts, reads a request, never answers (until killed)."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen()
    print("listening", flush=True)
    conn, _ = srv.accept()
    conn.recv(65536)
    time.sleep(60)


def patient_client(port: int) -> None:
    """Sends one request and waits 4 s for an answer that never comes, then hangs up."""
    cli = socket.create_connection(("127.0.0.1", port))
    cli.sendall(b"GET /never HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    time.sleep(4)
    cli.close()


def llm_request(port: int) -> None:
    """An LLM API call whose head and body come in one 100 kB send (as http.client sends
    them), then a GET on another connection: the first is widened, the second not."""
    body = b'{"messages":"' + b"p" * 100_000 + b'","model":"tail-model"}'
    srv = socket.socket()
    srv.bind(("127.0.0.1", port))
    srv.listen()
    cli = socket.create_connection(("127.0.0.1", port))
    conn, _ = srv.accept()
    head = b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(body)
    cli.sendall(head + body)
    got = 0
    while got < len(head) + len(body):
        got += len(conn.recv(1 << 20))
    cli.sendall(b"x" * 30_000)  # later messages of a wide connection are wide too
    got = 0
    while got < 30_000:
        got += len(conn.recv(1 << 20))
    other = socket.create_connection(("127.0.0.1", port))
    conn2, _ = srv.accept()
    get = b"GET /v1/chat/completions HTTP/1.1\r\n\r\n" + b"y" * 30_000
    other.sendall(get)
    got = 0
    while got < len(get):
        got += len(conn2.recv(1 << 20))
    for s in (cli, conn, other, conn2, srv):
        s.close()


def named_threads(port: int) -> None:
    """The process names itself "peerproc"; a thread named "recv" makes all the socket
    calls (as Cyclone DDS's threads do): selection by process name must still hold."""
    import ctypes
    import threading

    libc = ctypes.CDLL(None)
    pr_set_name = 15
    libc.prctl(pr_set_name, b"peerproc", 0, 0, 0)

    def work() -> None:
        libc.prctl(pr_set_name, b"recv", 0, 0, 0)
        rx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        rx.bind(("127.0.0.1", port))
        tx = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        tx.sendto(b"from-a-named-thread", ("127.0.0.1", port))
        rx.recvfrom(100)

    t = threading.Thread(target=work)
    t.start()
    t.join(10)


def chatty_binary(port: int, pause_after: int | None = None) -> None:
    """A protocol no parser knows: 300 binary round trips, 5 ms apart, on one connection.
    `pause_after`: after that many, print "paused" and wait for a line on stdin."""
    srv = socket.socket()
    srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port))
    srv.listen()
    cli = socket.create_connection(("127.0.0.1", port))
    conn, _ = srv.accept()
    message = bytes(range(64))
    for i in range(300):
        if i == pause_after:
            print("paused", flush=True)
            sys.stdin.readline()
        cli.sendall(message)
        got = 0
        while got < len(message):
            got += len(conn.recv(64 - got))
        conn.sendall(message)
        got = 0
        while got < len(message):
            got += len(cli.recv(64 - got))
        time.sleep(0.005)
    for s in (cli, conn, srv):
        s.close()


if __name__ == "__main__":
    kind, arg = sys.argv[1], sys.argv[2]
    fn = {"udp": udp, "mmsg": mmsg, "tcp": tcp_kinds, "fd_reuse": fd_reuse, "unix": unix,
          "silent_server": silent_server, "patient_client": patient_client,
          "llm_request": llm_request, "named_threads": named_threads,
          "chatty_binary": chatty_binary,
          "chatty_binary_paused": lambda port: chatty_binary(port, pause_after=20)}[kind]
    fn(arg if kind == "unix" else int(arg))

