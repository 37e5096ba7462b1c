"""ROS 2-style DDS peers on Cyclone DDS (the `cyclonedds` package), each role its own
process, talking RTPS over UDP on 127.0.0.1 only (unicast discovery, no multicast):

  python -m tests.integration.peers.dds_peer publisher --domain D [--topic chatter]
         [--count N] [--interval-ms M] [--size BYTES] [--subscribers K] [--summary-only]
  python -m tests.integration.peers.dds_peer subscriber --domain D [--topic chatter]
         [--count N] [--timeout S] [--summary-only]
  python -m tests.integration.peers.dds_peer big --domain D [--topic chatter] [--size 200000]
  python -m tests.integration.peers.dds_peer service-server --domain D [--service add_two_ints]
         [--count K] [--timeout S]
  python -m tests.integration.peers.dds_peer service-client --domain D [--service add_two_ints]
         [--count K] [--reply-timeout S]

Names and types are rmw_cyclonedds's: topic `chatter` is DDS topic `rt/chatter` of type
`std_msgs::msg::dds_::String_`; service `add_two_ints` is request topic
`rq/add_two_intsRequest` (`example_interfaces::srv::dds_::AddTwoInts_Request_`) and reply
topic `rr/add_two_intsReply` (`example_interfaces::srv::dds_::AddTwoInts_Response_`). As
rmw_cyclonedds does (serdata.hpp `cdds_request_header_t {uint64_t guid; int64_t seq;}`,
written raw ahead of the ROS fields by Serialization.cpp), each request and reply starts
with the client's request-writer instance handle (8 bytes) and a sequence number (8 bytes,
from 1); the server echoes both. Each participant also publishes `ros_discovery_info`
(`rmw_dds_common::msg::dds_::ParticipantEntitiesInfo_`), as every ROS 2 process does
(`--no-graph` leaves it out). QoS: reliable, keep-last 10, volatile (ROS defaults).

Every role prints JSON lines, wall-clock ns in "t" (time.time_ns()):
  {"event": "ready", "role", "pid", "domain", "participant": GUID, "since_start_ms"}
                                          entities created (ms since participant creation)
  {"event": "matched", "matched": n, "t", "since_start_ms"}          peers discovered
  {"event": "start", "t", "count"}        publisher/big, just before the first write
  {"event": "publish", "index", "t"}      publisher/big, one per write (not with --summary-only)
  {"event": "sample", "index", "len", "t", "source_t"}               subscriber, one per sample
  {"event": "request", "seq", "client_guid", "t"}                    service-server, per request
  {"event": "call", "seq", "client_guid", "a", "b", "sum", "t0", "t1"}  service-client, per call
  {"event": "done", ...counts...}        last line, always; publisher and subscriber add
                                          cpu_s, their CPU time while messages flowed
A publisher waits (bounded) for --subscribers matched readers, then --settle-ms (the readers
may match its writer a little later, and a volatile reader drops what comes before), before
its first write, and for their acknowledgements after its last; the service client does the
same with the server. Every wait is bounded in time and every loop in count.
Exit status: 0 when everything expected happened, 1 on a timeout, 2 when no peer matched.

Cyclone is configured through CYCLONEDDS_URI (`cyclone_config()`), set by each peer for
itself; `peer_env(domain)` gives the same environment to a caller, `pick_domain()` a domain
id whose discovery ports are free (1..101: its ports stay below Linux's ephemeral range).
"""

import argparse
import json
import os
import random
import socket
import sys
import time
from dataclasses import dataclass, field

# ------------------------------------------------------------------ configuration helpers

# RTPS port mapping (DDSI-RTPS 9.6.1.1, Cyclone's defaults): PB + DG * domain + offset
PORT_BASE, DOMAIN_GAIN, PARTICIPANT_GAIN = 7400, 250, 2
MAX_PARTICIPANT_INDEX = 9  # unicast SPDP goes to the ports of indexes 0..9 on 127.0.0.1
MAX_DOMAIN = 101  # 7400 + 250 * 101 + 11 + 2 * 9 < 32768, the start of the ephemeral ports


def cyclone_config(max_participant_index: int = MAX_PARTICIPANT_INDEX) -> str:
    """Cyclone DDS 11 configuration: the loopback interface only, multicast off, unicast
    discovery to the participant indexes 0..max_participant_index on 127.0.0.1.

    With multicast off, Cyclone (a) picks the first free participant index (ports
    7410 + 250 * domain + 2 * index for discovery, +1 for user data) and (b) sends SPDP to
    every index's port at the Peers. Its receive sockets bind 0.0.0.0 (Cyclone has no option
    to bind them to the interface address), but every locator it announces and every address
    it sends to is 127.0.0.1, and it sends from a socket bound to 127.0.0.1."""
    return (
        '<CycloneDDS><Domain id="any"><General><Interfaces>'
        '<NetworkInterface address="127.0.0.1"/></Interfaces>'
        "<AllowMulticast>false</AllowMulticast></General>"
        "<Discovery><ParticipantIndex>auto</ParticipantIndex>"
        f"<MaxAutoParticipantIndex>{max_participant_index}</MaxAutoParticipantIndex>"
        '<Peers><Peer address="127.0.0.1"/></Peers></Discovery>'
        "</Domain></CycloneDDS>"
    )


def peer_env(domain: int, base: dict | None = None) -> dict[str, str]:
    """The environment a DDS peer (ours or another Cyclone program) runs with."""
    env = dict(os.environ if base is None else base)
    env["CYCLONEDDS_URI"] = cyclone_config()
    env["ROS_DOMAIN_ID"] = str(domain)
    return env


def discovery_ports(domain: int, indexes: int = MAX_PARTICIPANT_INDEX + 1) -> list[int]:
    """The unicast discovery and user-data ports of participant indexes 0..indexes-1."""
    base = PORT_BASE + DOMAIN_GAIN * domain + 10
    return [base + PARTICIPANT_GAIN * i + k for i in range(indexes) for k in (0, 1)]


def pick_domain(tries: int = 50) -> int:
    """A random domain id in 1..MAX_DOMAIN whose discovery ports nobody holds now, so that
    parallel runs do not discover each other."""
    for _ in range(tries):
        domain = random.randint(1, MAX_DOMAIN)
        try:
            socks = []
            for port in discovery_ports(domain):
                s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
                socks.append(s)
                s.bind(("0.0.0.0", port))
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
        return domain
    raise RuntimeError(f"no free DDS domain found in {tries} tries")


# Cyclone reads CYCLONEDDS_URI when the first participant is created (main() sets it), not
# on import: importing this module for the helpers above leaves the caller's Cyclone alone.
from cyclonedds.core import InstanceState, ReadCondition, SampleState, ViewState, WaitSet  # noqa: E402
from cyclonedds.domain import DomainParticipant  # noqa: E402
from cyclonedds.idl import IdlStruct  # noqa: E402
from cyclonedds.idl import types as t  # noqa: E402
from cyclonedds.pub import DataWriter  # noqa: E402
from cyclonedds.qos import Policy, Qos  # noqa: E402
from cyclonedds.sub import DataReader  # noqa: E402
from cyclonedds.topic import Topic  # noqa: E402
from cyclonedds.util import duration  # noqa: E402

# ------------------------------------------------------------------ ROS 2 types, as DDS sees them


@dataclass
class String_(IdlStruct, typename="std_msgs::msg::dds_::String_"):  # noqa: N801
    data: str


@dataclass
class AddTwoIntsRequest(IdlStruct, typename="example_interfaces::srv::dds_::AddTwoInts_Request_"):
    # rmw_cyclonedds's cdds_request_header_t, written ahead of the ROS fields
    client_guid: t.uint64
    seq: t.int64
    a: t.int64
    b: t.int64


@dataclass
class AddTwoIntsResponse(IdlStruct,
                         typename="example_interfaces::srv::dds_::AddTwoInts_Response_"):
    client_guid: t.uint64
    seq: t.int64
    sum: t.int64


@dataclass
class Gid(IdlStruct, typename="rmw_dds_common::msg::dds_::Gid_"):
    data: t.array[t.uint8, 16]  # rmw_dds_common (Iron and later): uint8[16]


@dataclass
class NodeEntitiesInfo(IdlStruct, typename="rmw_dds_common::msg::dds_::NodeEntitiesInfo_"):
    node_namespace: t.bounded_str[256]
    node_name: t.bounded_str[256]
    reader_gid_seq: t.sequence[Gid] = field(default_factory=list)
    writer_gid_seq: t.sequence[Gid] = field(default_factory=list)


@dataclass
class ParticipantEntitiesInfo(IdlStruct,
                              typename="rmw_dds_common::msg::dds_::ParticipantEntitiesInfo_"):
    gid: Gid
    node_entities_info_seq: t.sequence[NodeEntitiesInfo] = field(default_factory=list)


INDEX_DIGITS = 8  # a String_ sample is "%08d " % index, padded with "x" to --size bytes
MATCH_TIMEOUT_S = 10.0
ACK_TIMEOUT_S = 10.0
SETTLE_MS = 200.0


def ros_qos() -> Qos:
    return Qos(Policy.Reliability.Reliable(duration(milliseconds=100)),
               Policy.History.KeepLast(10), Policy.Durability.Volatile)


def emit(event: str, **fields) -> None:
    print(json.dumps({"event": event, **fields}), flush=True)


def gid_of(entity) -> Gid:
    return Gid(list(entity.guid.bytes))


def client_service_id(dp, counter: int) -> bytes:
    """rmw_cyclonedds's get_unique_csid + csid_to_string: the participant's GUID prefix
    and a big-endian counter, hex bytes joined by dots; the endpoints' user data then says
    "clientid=<it>;" or "serviceid=<it>;" (how a server finds the client's reply reader)."""
    raw = dp.guid.bytes[:12] + counter.to_bytes(4, "big")
    return ".".join(f"{b:x}" for b in raw).encode()


class Node:
    """A DomainParticipant that behaves like one ROS 2 node under rmw_cyclonedds."""

    def __init__(self, domain: int, name: str, graph: bool = True) -> None:
        self.name = name
        self.t_created = time.monotonic()  # discovery times count from here
        self.dp = DomainParticipant(domain, qos=Qos(Policy.Userdata(b"enclave=/;")))
        self.readers: list[DataReader] = []
        self.writers: list[DataWriter] = []
        self.graph = None
        if graph:
            qos = Qos(Policy.Reliability.Reliable(duration(milliseconds=100)),
                      Policy.History.KeepLast(1), Policy.Durability.TransientLocal)
            topic = Topic(self.dp, "ros_discovery_info", ParticipantEntitiesInfo, qos=qos)
            self.graph = DataWriter(self.dp, topic, qos=qos)
            self.graph_reader = DataReader(self.dp, topic, qos=qos)

    def writer(self, name: str, typ, userdata: bytes = b"") -> DataWriter:
        qos = ros_qos()
        if userdata:
            qos = Qos(*qos, Policy.Userdata(userdata))
        w = DataWriter(self.dp, Topic(self.dp, name, typ, qos=ros_qos()), qos=qos)
        self.writers.append(w)
        return w

    def reader(self, name: str, typ, userdata: bytes = b"") -> DataReader:
        qos = ros_qos()
        if userdata:
            qos = Qos(*qos, Policy.Userdata(userdata))
        r = DataReader(self.dp, Topic(self.dp, name, typ, qos=ros_qos()), qos=qos)
        self.readers.append(r)
        return r

    def announce(self, role: str, domain: int) -> None:
        """Publish the node's entities on ros_discovery_info (as rmw does on every change),
        then say it is ready."""
        if self.graph is not None:
            self.graph.write(ParticipantEntitiesInfo(gid_of(self.dp), [NodeEntitiesInfo(
                "/", self.name, [gid_of(r) for r in self.readers],
                [gid_of(w) for w in self.writers])]))
        emit("ready", role=role, pid=os.getpid(), domain=domain, participant=str(self.dp.guid),
             since_start_ms=round((time.monotonic() - self.t_created) * 1000, 1))


def wait_matched(count_fn, want: int, timeout_s: float) -> int:
    """Poll count_fn() until it reaches `want` or the time runs out; the last count."""
    deadline = time.monotonic() + timeout_s
    n = count_fn()
    while n < want and time.monotonic() < deadline:
        time.sleep(0.002)
        n = count_fn()
    return n


def emit_matched(node: Node, n: int) -> None:
    """Matched n peers: since_start_ms counts from the participant's creation (discovery)."""
    emit("matched", matched=n, t=time.time_ns(),
         since_start_ms=round((time.monotonic() - node.t_created) * 1000, 1))


def cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


def make_text(index: int, size: int) -> str:
    head = f"{index:0{INDEX_DIGITS}d} "
    return head + "x" * max(0, size - len(head))


def parse_index(text: str) -> int:
    try:
        return int(text[:INDEX_DIGITS])
    except ValueError:
        return -1


# ------------------------------------------------------------------ roles


def publisher(args, big: bool = False) -> int:
    node = Node(args.domain, "talker", not args.no_graph)
    w = node.writer("rt/" + args.topic, String_)
    node.announce("big" if big else "publisher", args.domain)
    n = wait_matched(lambda: len(w.get_matched_subscriptions()), args.subscribers,
                     args.match_timeout)
    emit_matched(node, n)
    if n == 0:
        emit("done", published=0, acked=False)
        return 2
    # Discovery is two one-way matches: this writer may know a reader before that reader
    # knows this writer, and a volatile reader drops samples from writers it does not know
    # yet (they are not resent). Let the other side catch up before the first write.
    time.sleep(args.settle_ms / 1000)
    count = 1 if big else args.count
    interval_ns = int(args.interval_ms * 1e6)
    emit("start", t=time.time_ns(), count=count)
    cpu0, start = cpu_seconds(), time.monotonic_ns()
    for i in range(count):
        due = start + i * interval_ns
        now = time.monotonic_ns()
        if due > now:
            time.sleep((due - now) / 1e9)
        text = make_text(i, args.size)
        t = time.time_ns()
        w.write(String_(text))
        if not args.summary_only:
            emit("publish", index=i, t=t, len=len(text))
    elapsed = (time.monotonic_ns() - start) / 1e9
    acked = w.wait_for_acks(duration(seconds=args.ack_timeout))
    # cpu_s: this process's user+system CPU from the first write to the last acknowledgement
    emit("done", published=count, acked=acked, elapsed_s=round(elapsed, 3),
         rate=round(count / elapsed, 1) if elapsed > 0 else None, matched=n,
         cpu_s=round(cpu_seconds() - cpu0, 3))
    time.sleep(args.linger_ms / 1000)
    return 0 if acked else 1


def subscriber(args) -> int:
    node = Node(args.domain, "listener", not args.no_graph)
    r = node.reader("rt/" + args.topic, String_)
    node.announce("subscriber", args.domain)
    waitset = WaitSet(node.dp)
    cond = ReadCondition(r, ViewState.Any | InstanceState.Any | SampleState.NotRead)
    waitset.attach(cond)
    got, indexes = 0, set()
    deadline = time.monotonic() + args.timeout
    matched_said = False
    cpu0 = t_first = t_last = None
    while got < args.count and time.monotonic() < deadline:
        # short waits until a writer matched, so the match time is the discovery time
        waitset.wait(duration(milliseconds=100 if matched_said else 2))
        if not matched_said and r.get_matched_publications():
            emit_matched(node, len(r.get_matched_publications()))
            matched_said = True
        for s in r.take(N=256, condition=cond):
            t = time.time_ns()
            if not s.sample_info.valid_data:  # the writer went away (unregister/dispose)
                continue
            got += 1
            if cpu0 is None:
                cpu0, t_first = cpu_seconds(), time.monotonic()
            t_last = time.monotonic()
            i = parse_index(s.data)
            indexes.add(i)
            if not args.summary_only:
                emit("sample", index=i, len=len(s.data), t=t,
                     source_t=s.sample_info.source_timestamp)
    # cpu_s: user+system CPU from the first sample to the end
    emit("done", received=got, distinct=len(indexes),
         elapsed_s=round(t_last - t_first, 3) if got else None,
         cpu_s=round(cpu_seconds() - cpu0, 3) if got else None)
    return 0 if got >= args.count else 1


def service_server(args) -> int:
    node = Node(args.domain, "add_two_ints_server", not args.no_graph)
    ud = b"serviceid=" + client_service_id(node.dp, 1) + b";"
    req = node.reader(f"rq/{args.service}Request", AddTwoIntsRequest, ud)
    rep = node.writer(f"rr/{args.service}Reply", AddTwoIntsResponse, ud)
    node.announce("service-server", args.domain)
    waitset = WaitSet(node.dp)
    cond = ReadCondition(req, ViewState.Any | InstanceState.Any | SampleState.NotRead)
    waitset.attach(cond)
    served = 0
    deadline = time.monotonic() + args.timeout
    while served < args.count and time.monotonic() < deadline:
        waitset.wait(duration(milliseconds=100))
        for s in req.take(N=64, condition=cond):
            if not s.sample_info.valid_data:
                continue
            emit("request", seq=s.seq, client_guid=s.client_guid, t=time.time_ns())
            # rmw_send_response waits (100 ms there) for the client's reply reader to match
            wait_matched(lambda: len(rep.get_matched_subscriptions()), 1, 1.0)
            rep.write(AddTwoIntsResponse(s.client_guid, s.seq, s.a + s.b))
            served += 1
    acked = rep.wait_for_acks(duration(seconds=args.ack_timeout))
    time.sleep(args.linger_ms / 1000)
    emit("done", served=served, acked=acked)
    return 0 if served >= args.count else 1


def service_client(args) -> int:
    node = Node(args.domain, "add_two_ints_client", not args.no_graph)
    ud = b"clientid=" + client_service_id(node.dp, 1) + b";"
    req = node.writer(f"rq/{args.service}Request", AddTwoIntsRequest, ud)
    rep = node.reader(f"rr/{args.service}Reply", AddTwoIntsResponse, ud)
    node.announce("service-client", args.domain)
    # rmw_service_server_is_available: the request writer and the reply reader both matched
    n = wait_matched(
        lambda: min(len(req.get_matched_subscriptions()), len(rep.get_matched_publications())),
        1, args.match_timeout)
    emit_matched(node, n)
    if n == 0:
        emit("done", calls=0, answered=0)
        return 2
    time.sleep(args.settle_ms / 1000)  # as for the publisher: let the server match us too
    # what rmw_send_request puts in cdds_request_header_t.guid (the binding may hand the
    # uint64 handle back as a negative int64)
    guid = req.instance_handle & 0xFFFF_FFFF_FFFF_FFFF
    waitset = WaitSet(node.dp)
    cond = ReadCondition(rep, ViewState.Any | InstanceState.Any | SampleState.NotRead)
    waitset.attach(cond)
    answered = 0
    for seq in range(1, args.count + 1):
        a, b = seq, 100 * seq
        t0 = time.time_ns()
        req.write(AddTwoIntsRequest(guid, seq, a, b))
        reply = None
        deadline = time.monotonic() + args.reply_timeout
        while reply is None and time.monotonic() < deadline:
            waitset.wait(duration(milliseconds=50))
            for s in rep.take(N=16, condition=cond):
                # rmw_take_response keeps only replies to this client (its guid)
                if s.sample_info.valid_data and s.client_guid == guid and s.seq == seq:
                    reply = s
        t1 = time.time_ns()
        answered += reply is not None
        emit("call", seq=seq, client_guid=guid, a=a, b=b,
             sum=reply.sum if reply else None, t0=t0, t1=t1)
        if args.interval_ms:
            time.sleep(args.interval_ms / 1000)
    acked = req.wait_for_acks(duration(seconds=args.ack_timeout))
    time.sleep(args.linger_ms / 1000)
    emit("done", calls=args.count, answered=answered, acked=acked)
    return 0 if answered == args.count else 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("role", choices=["publisher", "subscriber", "big", "service-server",
                                     "service-client"])
    ap.add_argument("--domain", type=int, default=int(os.environ.get("ROS_DOMAIN_ID", "0")))
    ap.add_argument("--topic", default="chatter")
    ap.add_argument("--service", default="add_two_ints")
    ap.add_argument("--count", type=int, default=None,
                    help="messages to publish/receive, requests to send/serve (default 10)")
    ap.add_argument("--interval-ms", type=float, default=None,
                    help="between publishes (default 10) or calls (default 0)")
    ap.add_argument("--size", type=int, default=None,
                    help="bytes of each String_.data (default 64; big: 200000)")
    ap.add_argument("--subscribers", type=int, default=1,
                    help="publisher: matched readers to wait for before the first write")
    ap.add_argument("--match-timeout", type=float, default=MATCH_TIMEOUT_S)
    ap.add_argument("--settle-ms", type=float, default=SETTLE_MS,
                    help="after matching, before the first write")
    ap.add_argument("--ack-timeout", type=float, default=ACK_TIMEOUT_S)
    ap.add_argument("--timeout", type=float, default=30.0,
                    help="subscriber/service-server: give up after this many seconds")
    ap.add_argument("--reply-timeout", type=float, default=5.0)
    ap.add_argument("--linger-ms", type=float, default=200.0,
                    help="stay this long after the last acknowledgement")
    ap.add_argument("--summary-only", action="store_true",
                    help="no per-message lines (load runs)")
    ap.add_argument("--no-graph", action="store_true", help="no ros_discovery_info")
    args = ap.parse_args(argv)
    big = args.role == "big"
    if args.count is None:
        args.count = 1 if big else 10
    if args.size is None:
        args.size = 200_000 if big else 64
    if args.interval_ms is None:
        args.interval_ms = 0.0 if args.role == "service-client" else 10.0
    args.count = max(0, min(args.count, 10_000_000))
    os.environ["CYCLONEDDS_URI"] = cyclone_config()  # this peer's own, whatever was set
    if args.role in ("publisher", "big"):
        return publisher(args, big)
    return {"subscriber": subscriber, "service-server": service_server,
            "service-client": service_client}[args.role](args)


if __name__ == "__main__":
    sys.exit(main())
