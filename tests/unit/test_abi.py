"""bpf/include/abi.h and otel_ebpf/kernel/abi.py must agree on every size and offset:
compile the header with the host compiler and compare."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from otel_ebpf.kernel import abi
from tests.support.c_layout import c_layout as build_and_read

REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
#include <stdio.h>
#include <stddef.h>
#include <linux/types.h>
#include "abi.h"
#define S(t) printf(#t " %zu\n", sizeof(struct t))
#define O(t, f) printf(#t "." #f " %zu\n", offsetof(struct t, f))
int main(void) {
    S(event_header); S(conn_key); S(addr); S(conn_open_event); S(conn_close_event);
    S(data_event); S(proc_exit_event); S(agent_config); S(task_event);
    O(conn_open_event, key); O(conn_open_event, local); O(conn_open_event, remote);
    O(conn_open_event, role); O(conn_open_event, comm);
    O(data_event, exit_ns); O(data_event, pos); O(data_event, msg_len);
    O(data_event, tcp_seq); O(data_event, direction); O(data_event, peer);
    O(data_event, task); O(task_event, task); O(task_event, parent);
    O(task_event, entered); O(task_event, entered_ns);
    O(conn_close_event, bytes_sent); O(data_event, tail_len);
    O(agent_config, wide_capture); O(agent_config, wide_keys);
    printf("ABI_VERSION %d\nMAX_CAPTURE %d\nCOMM_LEN %d\nCNT_MAX %d\nMAX_TARGETS %d\n",
           ABI_VERSION, MAX_CAPTURE, COMM_LEN, CNT_MAX, MAX_TARGETS);
    printf("MAX_WIDE_KEYS %d\nCNT_WIDENED %d\n", MAX_WIDE_KEYS, CNT_WIDENED);
    printf("EV %d %d %d %d %d %d\n", EV_CONN_OPEN, EV_CONN_CLOSE, EV_DATA, EV_PROC_EXIT,
           EV_TASK_NEW, EV_PROC_EXEC);
    printf("F %d %d %d %d %d %d %d %d %d\n", CONN_F_STREAM, CONN_F_UNIX, CONN_F_TCP,
           CONN_F_PREEXISTING, DATA_F_TRUNCATED, DATA_F_HAS_PEER, DATA_F_WIDE, DATA_F_TLS,
           DATA_F_NO_SEQ);
    printf("CNT_TLS_UNBOUND %d\n", CNT_TLS_UNBOUND);
    printf("CONN_F_PIPE %d\n", CONN_F_PIPE);
    O(agent_config, pipes); O(agent_config, wakeup_step);
    S(prop_key); S(prop_slot); S(prop_pending); S(prop_net); S(context_in_event);
    O(prop_key, remote); O(prop_key, local_port); O(prop_key, remote_port); O(prop_key, family);
    O(prop_slot, seq); O(prop_slot, order); O(prop_slot, flags); O(prop_net, addr);
    O(context_in_event, conn); O(context_in_event, seq); O(context_in_event, flags);
    O(context_in_event, trace_id);
    S(context_out_event); O(context_out_event, conn); O(context_out_event, pos);
    O(context_out_event, seq); O(context_out_event, flags); O(context_out_event, trace_id);
    O(context_out_event, origin); O(context_out_event, origin_pos); O(agent_config, propagate);
    O(agent_config, exec_by_argv);
    printf("CNT_PROP_SEND %d %d %d\n", EV_CONTEXT_OUT, CNT_PROP_AT_SEND, CNT_PROP_SLOTS_FULL);
    printf("PROP %d %d %d %d %d %d %d %d\n", EV_CONTEXT_IN, PROP_OPT_KIND, PROP_EXID,
           PROP_OPT_LEN, PROP_F_SAMPLED, PROP_SLOTS, PROP_MAX_CONNS, PROP_MAX_NETS);
    printf("CNT_PROP %d %d %d %d %d\n", CNT_PROP_WRITTEN, CNT_PROP_NO_ROOM, CNT_PROP_RECEIVED,
           CNT_PROP_REFUSED, CNT_PROP_UNTRUSTED_DST);
    return 0;
}
"""


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory) -> dict[str, str]:
    return build_and_read(PROBE, tmp_path_factory.mktemp("abi"))


def test_sizes(c_layout):
    assert int(c_layout["event_header"]) == abi.HEADER.size
    assert int(c_layout["conn_key"]) == abi.KEY.size
    assert int(c_layout["addr"]) == abi.ADDR.size
    assert int(c_layout["conn_open_event"]) == abi.CONN_OPEN.size
    assert int(c_layout["conn_close_event"]) == abi.CONN_CLOSE.size
    assert int(c_layout["data_event"]) == abi.DATA.size
    assert int(c_layout["proc_exit_event"]) == abi.PROC_EXIT.size
    assert int(c_layout["agent_config"]) == abi.AGENT_CONFIG.size
    assert int(c_layout["task_event"]) == abi.TASK_NEW.size


def test_offsets(c_layout):
    h, k, a = abi.HEADER.size, abi.KEY.size, abi.ADDR.size
    assert int(c_layout["conn_open_event.key"]) == h
    assert int(c_layout["conn_open_event.local"]) == h + k
    assert int(c_layout["conn_open_event.remote"]) == h + k + a
    assert int(c_layout["conn_open_event.role"]) == h + k + 2 * a
    assert int(c_layout["conn_open_event.comm"]) == h + k + 2 * a + 8
    assert int(c_layout["conn_close_event.bytes_sent"]) == h + k
    assert int(c_layout["data_event.exit_ns"]) == h + k
    assert int(c_layout["data_event.pos"]) == h + k + 8
    assert int(c_layout["data_event.msg_len"]) == h + k + 16
    assert int(c_layout["data_event.tcp_seq"]) == h + k + 24
    assert int(c_layout["data_event.direction"]) == h + k + 28
    assert int(c_layout["data_event.tail_len"]) == h + k + 30
    assert int(c_layout["agent_config.wide_capture"]) == 8 * 4
    assert int(c_layout["agent_config.wide_keys"]) == 16 * 4
    assert int(c_layout["data_event.peer"]) == abi.DATA.size - a - 8
    assert int(c_layout["data_event.task"]) == abi.DATA.size - 8
    assert int(c_layout["task_event.task"]) == h + 8
    assert int(c_layout["task_event.parent"]) == h + 16
    assert int(c_layout["task_event.entered"]) == h + 24
    assert int(c_layout["task_event.entered_ns"]) == h + 32


def test_constants(c_layout):
    assert int(c_layout["ABI_VERSION"]) == abi.ABI_VERSION
    assert int(c_layout["MAX_CAPTURE"]) == abi.MAX_CAPTURE
    assert int(c_layout["COMM_LEN"]) == abi.COMM_LEN
    assert int(c_layout["CNT_MAX"]) == abi.CNT_MAX
    assert int(c_layout["MAX_TARGETS"]) == abi.MAX_TARGETS
    assert c_layout["EV"].split() == [str(v) for v in (abi.EV_CONN_OPEN, abi.EV_CONN_CLOSE,
                                                       abi.EV_DATA, abi.EV_PROC_EXIT,
                                                       abi.EV_TASK_NEW, abi.EV_PROC_EXEC)]
    assert c_layout["F"].split() == [str(v) for v in (
        abi.CONN_F_STREAM, abi.CONN_F_UNIX, abi.CONN_F_TCP, abi.CONN_F_PREEXISTING,
        abi.DATA_F_TRUNCATED, abi.DATA_F_HAS_PEER, abi.DATA_F_WIDE, abi.DATA_F_TLS,
        abi.DATA_F_NO_SEQ)]
    assert abi.COUNTER_NAMES[int(c_layout["CNT_TLS_UNBOUND"])] == "tls_unbound"
    assert int(c_layout["CONN_F_PIPE"]) == abi.CONN_F_PIPE
    assert int(c_layout["agent_config.pipes"]) == 11 * 4  # the 12th u32 of AGENT_CONFIG
    assert int(c_layout["agent_config.wakeup_step"]) == 12 * 4  # the 13th
    assert int(c_layout["MAX_WIDE_KEYS"]) == abi.MAX_WIDE_KEYS
    assert abi.COUNTER_NAMES[int(c_layout["CNT_WIDENED"])] == "widened"


def test_propagation_layouts(c_layout):
    """The trace-context option's map keys and values, and its ring record."""
    h = abi.HEADER.size
    assert int(c_layout["prop_key"]) == abi.PROP_KEY.size == 40
    assert (int(c_layout["prop_key.remote"]), int(c_layout["prop_key.local_port"]),
            int(c_layout["prop_key.remote_port"]), int(c_layout["prop_key.family"])) == (
                16, 32, 34, 36)
    assert int(c_layout["prop_slot"]) == abi.PROP_SLOT.size == 32
    assert (int(c_layout["prop_slot.seq"]), int(c_layout["prop_slot.order"]),
            int(c_layout["prop_slot.flags"])) == (16, 20, 24)
    assert int(c_layout["prop_pending"]) == abi.PROP_PENDING.size == abi.PROP_SLOTS * 32
    assert int(c_layout["prop_net"]) == abi.PROP_NET.size
    assert int(c_layout["prop_net.addr"]) == 4
    assert int(c_layout["context_in_event"]) == abi.CONTEXT_IN.size
    assert int(c_layout["context_in_event.conn"]) == h
    assert int(c_layout["context_in_event.seq"]) == h + abi.PROP_KEY.size
    assert int(c_layout["context_in_event.flags"]) == h + abi.PROP_KEY.size + 4
    assert int(c_layout["context_in_event.trace_id"]) == h + abi.PROP_KEY.size + 8
    assert c_layout["PROP"].split() == [str(v) for v in (
        abi.EV_CONTEXT_IN, abi.PROP_OPT_KIND, abi.PROP_EXID, abi.PROP_OPT_LEN,
        abi.PROP_F_SAMPLED, abi.PROP_SLOTS, abi.PROP_MAX_CONNS, abi.PROP_MAX_NETS)]
    assert [abi.COUNTER_NAMES[int(i)] for i in c_layout["CNT_PROP"].split()] == [
        "prop_written", "prop_no_room", "prop_received", "prop_refused", "prop_untrusted_dst"]
    # the context a call's first write queued
    assert int(c_layout["context_out_event"]) == abi.CONTEXT_OUT.size
    k = abi.KEY.size
    assert [int(c_layout[f"context_out_event.{f}"]) for f in (
        "conn", "pos", "seq", "flags", "trace_id", "origin", "origin_pos")] == [
            h, h + k, h + k + 8, h + k + 12, h + k + 16, h + k + 32, h + 2 * k + 32]
    assert int(c_layout["agent_config.propagate"]) == 13 * 4
    assert int(c_layout["agent_config.exec_by_argv"]) == 14 * 4  # the 15th
    ev, at_send, full = c_layout["CNT_PROP_SEND"].split()
    assert int(ev) == abi.EV_CONTEXT_OUT
    assert (abi.COUNTER_NAMES[int(at_send)], abi.COUNTER_NAMES[int(full)]) == (
        "prop_at_send", "prop_slots_full")


def test_context_out_decodes():
    """An EV_CONTEXT_OUT record -> ContextOut, by abi.decode and by the batch path."""
    trace = bytes(range(16))
    rec = abi.CONTEXT_OUT.pack(abi.EV_CONTEXT_OUT, 7, 5000, 10, 4, 99, 1234, 0xFFFFFFF0, 1,
                               trace, 10, 3, 55, 0)
    ev = abi.decode(rec)
    assert ev == abi.ContextOut(ts_ns=5000, key=(10, 4, 99), pos=1234, seq=0xFFFFFFF0, flags=1,
                                trace_id=trace, origin=(10, 3, 55), origin_pos=0)
    events, bad = abi.decode_batch([rec])
    assert (events, bad) == ([ev], 0)


def test_context_in_decodes_both_ways():
    """An EV_CONTEXT_IN record -> ContextIn, by abi.decode and by the batch path (the
    compiled decoder hands records it does not know back as bytes)."""
    mapped = bytes(10) + b"\xff\xff"
    rec = abi.CONTEXT_IN.pack(abi.EV_CONTEXT_IN, 0, 5000, mapped + bytes([10, 0, 0, 2]),
                              mapped + bytes([10, 0, 0, 1]), 8080, 40000, 2, 0xDEADBEEF,
                              abi.PROP_F_SAMPLED, bytes(range(16)))
    want = abi.ContextIn(ts_ns=5000, family=2, local_addr="10.0.0.2", local_port=8080,
                         remote_addr="10.0.0.1", remote_port=40000, seq=0xDEADBEEF,
                         flags=abi.PROP_F_SAMPLED, trace_id=bytes(range(16)))
    assert abi.decode(rec) == want and want.sampled
    v6 = abi.CONTEXT_IN.pack(abi.EV_CONTEXT_IN, 0, 1, bytes(15) + b"\x01",
                             b"\xfd\x77" + bytes(13) + b"\x01", 443, 5, 10, 7, 0, b"t" * 16)
    ev = abi.decode(v6)
    assert (ev.local_addr, ev.remote_addr, ev.family, ev.sampled) == ("::1", "fd77::1", 10,
                                                                      False)
    events, bad = abi.decode_batch([rec, v6, rec[:40]])
    assert events == [want, ev] and bad == 1
    with pytest.raises(dataclasses.FrozenInstanceError):
        want.seq = 1  # type: ignore[misc]


def test_a_pipe_open_names_the_pipe_by_inode():
    rec = abi.CONN_OPEN.pack(abi.EV_CONN_OPEN, 43, 1000, 42, 0, 9, (123456).to_bytes(16, "little"),
                             0, 0, bytes(16), 0, 0, 0,
                             abi.CONN_F_STREAM | abi.CONN_F_PIPE | abi.CONN_F_PREEXISTING,
                             b"mcp-host".ljust(16, b"\0"))
    ev = abi.decode(rec)
    assert ev.local_addr == "pipe:[123456]" and ev.remote_addr == "" and ev.comm == "mcp-host"
    assert abi.AGENT_CONFIG.unpack(abi.pack_agent_config(
        agent_pid=1, capture_max=1, filter_pids=False, filter_comms=False, filter_ports=False,
        wakeup_bytes=1, pipes=True))[11] == 1
    assert abi.AGENT_CONFIG.unpack(abi.pack_agent_config(
        agent_pid=1, capture_max=1, filter_pids=False, filter_comms=False, filter_ports=False,
        wakeup_bytes=1, wakeup_step=4096))[12] == 4096


def test_decode_roundtrip():
    key = (42, 7, 123456789)
    open_rec = abi.CONN_OPEN.pack(abi.EV_CONN_OPEN, 43, 1000, *key,
                                  bytes([127, 0, 0, 1]) + bytes(12), 5555, 2,
                                  bytes(15) + b"\x01", 80, 10, 1, abi.CONN_F_STREAM | abi.CONN_F_TCP,
                                  b"curl".ljust(16, b"\0"))
    ev = abi.decode(open_rec)
    assert isinstance(ev, abi.ConnOpen)
    assert ev.key == key and ev.local_addr == "127.0.0.1" and ev.local_port == 5555
    assert ev.remote_addr == "::1" and ev.remote_port == 80 and ev.comm == "curl"

    payload = b"GET / HTTP/1.1\r\n"
    data_rec = abi.DATA.pack(abi.EV_DATA, 44, 2000, *key, 2100, 10, 100, len(payload), 99, 0,
                             abi.DATA_F_TRUNCATED, 0, bytes(16), 0, 0, 0xABC) + payload
    ev = abi.decode(data_rec)
    assert isinstance(ev, abi.DataEvent)
    assert ev.payload == payload and ev.msg_len == 100 and ev.truncated and ev.pos == 10
    assert ev.peer is None and ev.tcp_seq == 99 and ev.task == 0xABC and ev.tail == b""

    # a wide message: its prefix, then its last bytes
    tail = b'"model":"m"}'
    wide = abi.DATA.pack(abi.EV_DATA, 44, 2000, *key, 2100, 0, 5000, len(payload) + len(tail),
                         0, 0, abi.DATA_F_TRUNCATED | abi.DATA_F_WIDE, len(tail), bytes(16), 0,
                         0, 0) + payload + tail
    ev = abi.decode(wide)
    assert ev.payload == payload and ev.tail == tail and ev.truncated and not ev.tls

    # TLS plaintext whose TCP sequence number is unknown
    tls = abi.DATA.pack(abi.EV_DATA, 44, 2000, *key, 2100, 0, len(payload), len(payload),
                        77, 0, abi.DATA_F_TLS | abi.DATA_F_NO_SEQ, 0, bytes(16), 0, 0, 0
                        ) + payload
    ev = abi.decode(tls)
    assert ev.tls and ev.tcp_seq is None and ev.payload == payload


@pytest.mark.parametrize("record", [b"", b"\x7f" + bytes(100), b"\x03" + bytes(10),
                                    b"\x09" + bytes(20)])
def test_decode_rejects_bad_records(record):
    with pytest.raises(abi.BadRecord):
        abi.decode(record)


def test_wakeup_step_is_a_quarter_of_the_room_above_the_threshold_per_cpu():
    from otel_ebpf.kernel.socket_tracer import wakeup_step

    ring = 16 << 20
    assert wakeup_step(ring, ring // 2, 2) == ring // 16  # 2 CPUs: half of the room each, / 4
    assert wakeup_step(ring, ring // 2, 64) * 64 <= (ring - ring // 2) // 4
    assert wakeup_step(ring, ring, 8) == 0  # no room above: the fill is looked at every record
