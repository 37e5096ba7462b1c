"""The Context probes follow processes: a service started after the agent has them from
its exec, a prefork server's worker from its fork, a process that only serves loses them
once it has copied `correlation.leaf_copies` Contexts, and a middle hop keeps them: its
outbound calls still find their requests (asyncio task evidence) after the leaf's came
off. Then the rules one by one on a loaded capture object: leaf, quiet process, many
processes of one interpreter, exit. Which processes are probed and registered is read from
the kernel maps (bpftool): one capture object is loaded in these tests at a time."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import httpx
import pytest

from otel_ebpf.kernel.abi import DataEvent
from otel_ebpf.kernel.asyncio_probes import QUIET_S
from otel_ebpf.kernel.libbpf import LibbpfLog
from otel_ebpf.kernel.socket_tracer import CaptureSettings, SocketTracer
from tests.support.ports import free_port
from tests.support.processes import stop_process

from .conftest import KEEP_ALIVE_S, REPO, VENV_BIN, read_metrics, require_kernel, wait_port

pytestmark = pytest.mark.kernel

SERVER, CLIENT = 2, 3
WAIT_S = 90.0  # bound on each wait for the agent to act on what it read


def map_pids(name: str) -> set[int]:
    """The tgids keyed in the agent's BPF map `name` (one agent runs in these tests)."""
    out = subprocess.run(["bpftool", "-j", "map", "dump", "name", name], capture_output=True,
                         text=True, check=True, timeout=30).stdout
    pids = set()
    for entry in json.loads(out or "[]"):
        if "formatted" in entry:
            pids.add(int(entry["formatted"]["key"]))
        else:
            pids.add(int.from_bytes(bytes(int(b, 16) for b in entry["key"]), "little"))
    return pids


def pid_serving(port: int) -> int:
    """The uvicorn test server's pid, by its command line."""
    for proc in os.listdir("/proc"):
        try:
            argv = open(f"/proc/{proc}/cmdline", "rb").read().split(b"\0")
        except OSError:
            continue
        if b"tests.integration.peers.http_app:app" in argv and str(port).encode() in argv:
            return int(proc)
    raise LookupError(f"no test server on port {port}")


def wait_until(what: str, predicate, timeout_s: float = WAIT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout_s:.0f} s: {what}")
        time.sleep(0.2)


def start_hop(tmp_path, port: int, upstream: int, args: list[str] | None = None,
              stdin=None) -> subprocess.Popen:
    log = (tmp_path / f"hop-{port}.log").open("w")
    cmd = args or [str(VENV_BIN / "uvicorn"), "bench.apps.fastapi_app:app", "--host",
                   "127.0.0.1", "--port", str(port), "--no-access-log",
                   "--timeout-keep-alive", str(KEEP_ALIVE_S)]
    # a session of its own: the forking peer's child is stopped with its group
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE if stdin else log,
                            stderr=log, stdin=stdin, text=True, start_new_session=True,
                            env={**os.environ, "OTEL_BENCH_UPSTREAM": f"http://127.0.0.1:{upstream}"})


def get_items(port: int, ids: range) -> None:
    with httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30) as client:
        for i in ids:
            assert client.get(f"/hop/items/{i}").status_code == 200


def assert_task_parents(spans, ids: range) -> None:
    """Each hop request's outbound call is the child of that request's SERVER span, found
    by its asyncio task (Context) evidence."""
    for i in ids:
        server = [s for s in spans if s.kind == SERVER and s.attrs.get("url.path") == f"/hop/items/{i}"]
        call = [s for s in spans if s.kind == CLIENT and s.attrs.get("url.path") == f"/items/{i}"]
        assert len(server) == 1 and len(call) == 1, (i, server, call)
        assert call[0].parent_span_id == server[0].span_id, (i, call)
        assert call[0].attrs["otel_ebpf.correlation"] == "task", call[0].attrs


def test_leaf_loses_its_probes_and_a_hop_keeps_them(tmp_path, start_agent, uvicorn_server):
    leaf, hop_port = uvicorn_server, free_port()
    agent = start_agent([leaf, hop_port], overrides={
        "receivers": {"ebpf": {"correlation": {"leaf_copies": 60}}}})
    hop = start_hop(tmp_path, hop_port, leaf)  # after the agent: probed from its exec
    try:
        wait_port(hop_port, hop, tmp_path / f"hop-{hop_port}.log")
        wait_until("the hop probed", lambda: hop.pid in map_pids("py_ctx_probed"))
        leaf_pid = pid_serving(leaf)
        assert leaf_pid in map_pids("py_ctx_probed")  # at the agent's start: it had sockets
        get_items(hop_port, range(1, 101))  # the leaf: ~3 copies per request
        wait_until("the leaf's probes off", lambda: leaf_pid not in map_pids("py_ctx_probed"))
        assert leaf_pid not in map_pids("py_ctx_procs")  # its socket calls read no Context
        assert hop.pid in map_pids("py_ctx_probed")  # it calls out: kept
        get_items(hop_port, range(101, 121))
        spans = agent.wait_for(lambda s: sum(1 for x in s if x.kind == SERVER and
                                             x.attrs.get("url.path", "").startswith("/hop/")) >= 120)
        assert_task_parents(spans, range(1, 121))
        # the agent's own metrics say so (exported every second)
        wait_until("the retired process counted", lambda: read_metrics(agent.traces).get(
            "otel_ebpf.context_probes.retired", 0) >= 1)
    finally:
        stop_process(hop, group=True)


def test_forked_worker_gets_its_own_probes(tmp_path, start_agent, uvicorn_server):
    leaf, port = uvicorn_server, free_port()
    agent = start_agent([leaf, port])
    parent = start_hop(tmp_path, port, leaf, stdin=subprocess.PIPE, args=[
        sys.executable, "-m", "tests.integration.peers.forking_hop", str(port)])
    try:
        wait_until("the parent probed", lambda: parent.pid in map_pids("py_ctx_probed"))
        parent.stdin.write("fork\n")
        parent.stdin.flush()
        child = int(parent.stdout.readline())
        # the child's copy of the code lost the parent's probes; the fork event brings its own
        wait_until("the forked worker probed", lambda: child in map_pids("py_ctx_probed"))
        wait_port(port, parent, tmp_path / f"hop-{port}.log")
        get_items(port, range(1, 21))
        spans = agent.wait_for(lambda s: sum(1 for x in s if x.kind == SERVER and
                                             x.attrs.get("url.path", "").startswith("/hop/")) >= 20)
        assert_task_parents(spans, range(1, 21))
    finally:
        stop_process(parent, group=True)


# A Python process that copies Contexts on demand: "N" on its stdin -> N copies, then "ok"
COPIER = """
import contextvars, socket, sys
if sys.argv[1:2] == ["listen"]:
    server = socket.create_server(("127.0.0.1", 0))
print("ready", flush=True)
if sys.argv[1:2] == ["connect"]:  # once probed: a copy registers it, then it connects
    sys.stdin.readline()
    contextvars.copy_context()
    out = socket.create_connection(("127.0.0.1", int(sys.argv[2])))
    print("connected", flush=True)
for line in sys.stdin:
    for _ in range(int(line)):
        contextvars.copy_context()
    print("ok", flush=True)
"""


@pytest.fixture
def selected():
    """A listening socket on the one port the capture object traces, held from before the
    object loads to the test's end: a port only picked, then bound minutes later (at
    collection, as this was), can meanwhile be taken as another test's ephemeral port."""
    with socket.create_server(("127.0.0.1", 0)) as server:
        yield server


@pytest.fixture
def probes(selected):
    """The Context probes of a loaded capture object, driven directly."""
    require_kernel()
    tracer = SocketTracer(CaptureSettings(ports=(selected.getsockname()[1],)), LibbpfLog())
    yield tracer.asyncio
    tracer.close()


def copier(*args: str) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, "-c", COPIER, *args], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    return proc


def copy(proc: subprocess.Popen, n: int) -> None:
    proc.stdin.write(f"{n}\n")
    proc.stdin.flush()
    assert proc.stdout.readline().strip() == "ok"


def test_a_leaf_is_retired_after_its_copies_and_one_calling_out_is_kept(probes):
    probes.leaf_copies = 500
    leaf, caller = copier(), copier()
    try:
        assert probes.scan([leaf.pid, caller.pid]) == 2
        probes.calling_out(caller.pid)
        for proc in (leaf, caller):
            copy(proc, 499)
        assert probes.retire(connected={leaf.pid, caller.pid}) == 0  # 499 < 500
        assert map_pids("py_ctx_procs") >= {leaf.pid, caller.pid}  # both registered
        for proc in (leaf, caller):
            copy(proc, 2)  # the first copy registered the process, uncounted
        assert probes.retire(connected={leaf.pid, caller.pid}) == 1
        assert map_pids("py_ctx_probed") == {caller.pid}
        assert leaf.pid not in map_pids("py_ctx_procs")  # unregistered: no Context reads
        assert probes.scan([leaf.pid]) == 0  # retired: not probed again at a connection
        probes.calling_out(leaf.pid)  # ... until it calls out
        assert map_pids("py_ctx_probed") == {caller.pid, leaf.pid}
    finally:
        for proc in (leaf, caller):
            stop_process(proc)


def test_a_connection_out_the_agent_has_not_read_keeps_the_probes(probes, selected):
    """The kernel marks a registered process that connects out: under load the agent reads
    the connection later than the copies are counted, and must not retire it meanwhile."""
    probes.leaf_copies = 100
    proc = copier("connect", str(selected.getsockname()[1]))
    try:
        assert probes.scan([proc.pid]) == 1
        proc.stdin.write("go\n")
        proc.stdin.flush()
        selected.settimeout(30)
        selected.accept()[0].close()
        assert proc.stdout.readline().strip() == "connected"
        copy(proc, 200)
        assert probes.retire(connected={proc.pid}) == 0  # no ConnOpen read: the kernel's mark
        assert proc.pid in probes.calls_out and map_pids("py_ctx_probed") == {proc.pid}
    finally:
        stop_process(proc)


def test_a_quiet_process_loses_its_probes_until_its_first_connection(probes):
    """Quiet: no traced connection and no socket open. A server waiting for its first
    request (a listening socket) keeps its probes."""
    proc, server = copier(), copier("listen")
    try:
        assert probes.scan([proc.pid, server.pid]) == 2
        assert probes.retire(connected=set(), now=time.monotonic() + QUIET_S - 1) == 0
        assert probes.retire(connected=set(), now=time.monotonic() + QUIET_S + 1) == 1
        assert map_pids("py_ctx_probed") == {server.pid}
        assert probes.scan([proc.pid]) == 1  # its first connection
        assert map_pids("py_ctx_probed") == {server.pid, proc.pid}
    finally:
        stop_process(proc)
        stop_process(server)


def test_many_processes_of_one_interpreter_share_a_file_wide_probe(probes):
    probes.shared_after = 2
    procs = [copier() for _ in range(3)]
    try:
        assert probes.scan([p.pid for p in procs[:2]]) == 2
        assert map_pids("py_ctx_probed") == {p.pid for p in procs[:2]}
        assert probes.scan([procs[2].pid]) == 1  # the third: the file, for every process
        assert map_pids("py_ctx_probed") == set() and len(probes.shared) == 1
        for proc in procs:
            copy(proc, 1)  # registers each: the file-wide entry probe fires everywhere
        assert map_pids("py_ctx_procs") >= {p.pid for p in procs}
    finally:
        for proc in procs:
            stop_process(proc)


def test_exit_takes_a_process_probes_and_record_off(probes):
    proc = copier()
    assert probes.scan([proc.pid]) == 1
    copy(proc, 1)  # registers it
    assert proc.pid in map_pids("py_ctx_procs")
    stop_process(proc)
    probes.exited(proc.pid)
    assert map_pids("py_ctx_probed") == set() and not probes.processes
    # a process that gets its pid next reads no Context where this one's interpreter was
    assert proc.pid not in map_pids("py_ctx_procs")


SERVER_PEER = r"""
import contextvars, socket, sys
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", int(sys.argv[1]))); srv.listen()
print("ready", flush=True)
sys.stdin.readline()
for _ in range(3):
    contextvars.copy_context()
conn, _ = srv.accept()
print("accepted", flush=True)
for line in sys.stdin:
    conn.sendall(b"x" * 64)
    print("ok", flush=True)
"""


def test_a_retired_process_sends_without_its_context():
    """A registered process's socket calls carry the Context its thread runs in, read
    through the thread state each thread caches with the offsets it needs (no look at the
    process's record per call); once the record is taken out (a leaf retired), the cache
    gives way (py_ctx_epoch) and its calls carry none."""
    require_kernel()
    port = free_port()
    tracer = SocketTracer(CaptureSettings(ports=(port,)), LibbpfLog())
    tracer.asyncio.leaf_copies = 2  # the first copy registers, uncounted; two more counted
    proc = subprocess.Popen([sys.executable, "-c", SERVER_PEER, str(port)],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    client = None

    def sent_tasks() -> list[int]:
        """The Contexts carried by the peer's next send (its data events)."""
        proc.stdin.write("send\n")
        proc.stdin.flush()
        assert proc.stdout.readline().strip() == "ok"
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            tasks = [e.task for e in tracer.poll(100)
                     if isinstance(e, DataEvent) and e.key[0] == proc.pid]
            if tasks:
                return tasks
        pytest.fail("no data event from the peer's send")

    try:
        assert proc.stdout.readline().strip() == "ready"
        assert tracer.asyncio.scan([proc.pid]) == 1
        proc.stdin.write("go\n")
        proc.stdin.flush()
        client = socket.create_connection(("127.0.0.1", port))
        assert proc.stdout.readline().strip() == "accepted"
        assert all(sent_tasks()) and all(sent_tasks())  # the second from the thread's cache
        assert tracer.asyncio.retire(connected={proc.pid}) == 1
        assert set(sent_tasks()) == {0}
    finally:
        if client is not None:
            client.close()
        stop_process(proc)
        tracer.close()
