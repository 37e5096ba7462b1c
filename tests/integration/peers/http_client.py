"""Real HTTP clients run as their own processes: `python -m ... KIND BASE_URL PATH...`.

Prints one JSON line per request: {"path", "status", "t0", "t1"} with wall-clock ns
measured around the request, so tests can check span times fall inside them."""

import json
import socket
import sys
import time
from urllib.parse import urlsplit


def with_requests(base: str, paths: list[str]) -> None:
    import requests

    with requests.Session() as session:  # one keep-alive connection for every request
        for path in paths:
            t0 = time.time_ns()
            method = "POST" if path.startswith("/echo") else "GET"
            resp = session.request(method, base + path, data=b"p" * 100 if method == "POST" else None)
            _ = resp.content  # read the whole body before the clock stops
            t1 = time.time_ns()
            print(json.dumps({"path": path, "status": resp.status_code, "t0": t0, "t1": t1}))


def with_httpx(base: str, paths: list[str]) -> None:
    import httpx

    with httpx.Client() as client:
        for path in paths:
            t0 = time.time_ns()
            resp = client.get(base + path)
            resp.read()
            t1 = time.time_ns()
            print(json.dumps({"path": path, "status": resp.status_code, "t0": t0, "t1": t1}))


def pipelined(base: str, paths: list[str]) -> None:
    """Every request written at once, before any response is read (HTTP/1.1 pipelining)."""
    url = urlsplit(base)
    with socket.create_connection((url.hostname, url.port), timeout=10) as sock:
        t0 = time.time_ns()
        sock.sendall(b"".join(
            f"GET {p} HTTP/1.1\r\nHost: {url.netloc}\r\nUser-Agent: pipeliner\r\n\r\n".encode()
            for p in paths))
        data = b""
        deadline = time.monotonic() + 10
        while data.count(b"HTTP/1.1 ") < len(paths) or not data.endswith(b"}"):
            if time.monotonic() > deadline:
                break
            piece = sock.recv(65536)
            if not piece:
                break
            data += piece
        t1 = time.time_ns()
    # the responses, in order, each with its own status and body (what the test holds
    # each request's spans to); fewer than the requests fails the client
    answers = []
    while data:
        head, sep, data = data.partition(b"\r\n\r\n")
        if not sep:
            break
        lines = head.decode("latin-1").split("\r\n")
        length = next(int(line.split(":", 1)[1]) for line in lines[1:]
                      if line.lower().startswith("content-length:"))
        body, data = data[:length], data[length:]
        answers.append((int(lines[0].split()[1]), body.decode()))
    for path, (status, body) in zip(paths, answers, strict=True):
        print(json.dumps({"path": path, "status": status, "body": body, "t0": t0, "t1": t1}))


if __name__ == "__main__":
    kind, base, *paths = sys.argv[1:]
    {"requests": with_requests, "httpx": with_httpx, "pipelined": pipelined}[kind](base, paths)
