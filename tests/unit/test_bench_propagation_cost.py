"""bench/propagation_cost.py reads the sock_ops program and its counters through bpftool's
JSON (the program lives in the agent's process, out of the bench's reach): the shapes below
are what bpftool v7.1 printed for a capture object attached to a cgroup. No root, no kernel:
bpftool is replaced by a table of its answers."""

from __future__ import annotations

import json

import pytest

from bench import propagation_cost as pc

CGROUP = "/sys/fs/cgroup/unified/nodes/a"
CGROUP_SHOW = [{"id": 38982, "attach_type": "cgroup_sock_ops", "attach_flags": "multi",
                "name": "prop_sockops", "attach_btf_name": "", "attach_btf_obj_id": 0,
                "attach_btf_id": 0}]
PROG = {"id": 38982, "type": "sock_ops", "name": "prop_sockops", "tag": "65f906315fde097a",
        "run_time_ns": 123_456, "run_cnt": 400, "map_ids": [24670, 24656, 24671]}
MAPS = {24670: {"id": 24670, "type": "ringbuf", "name": "events"},
        24656: {"id": 24656, "type": "percpu_array", "name": "counters"},
        24671: {"id": 24671, "type": "hash", "name": "prop_out"}}


def _raw(n: int, size: int) -> list[str]:
    return [f"0x{b:02x}" for b in n.to_bytes(size, "little")]


def _slot(key: int, per_cpu: list[int], formatted: bool) -> dict:
    entry = {"key": _raw(key, 4),
             "values": [{"cpu": i, "value": _raw(v, 8)} for i, v in enumerate(per_cpu)]}
    if formatted:  # with BTF, bpftool adds the decoded key and values
        entry["formatted"] = {"key": key, "values": [{"cpu": i, "value": v}
                                                     for i, v in enumerate(per_cpu)]}
    return entry


DUMP = [_slot(0, [5, 0], True), _slot(9, [300, 7], True), _slot(11, [0, 0], False),
        _slot(10, [1, 1], False)]


@pytest.fixture
def answers(monkeypatch):
    table = {("cgroup", "show", CGROUP): CGROUP_SHOW,
             ("cgroup", "show", "/empty"): None,  # bpftool prints nothing at all there
             ("prog", "show", "id", "38982"): PROG,
             ("map", "dump", "id", "24656"): DUMP}
    for mid, info in MAPS.items():
        table[("map", "show", "id", str(mid))] = info
    monkeypatch.setattr(pc, "bpftool", lambda *argv: json.loads(json.dumps(table[argv])))
    return table


def test_the_program_and_its_counters_are_found_by_the_cgroup(answers):
    prog = pc.SockOps.of_cgroup(CGROUP)
    assert (prog.prog_id, prog.counters_map) == (38982, 24656)
    assert prog.stats() == (400, 123_456)
    # the per-CPU slots summed; only the option's counters; raw little-endian bytes
    assert prog.counters() == {"prop_written": 307, "prop_received": 0, "prop_no_room": 2}


def test_no_program_on_the_cgroup_reads_as_none(answers):
    assert pc.SockOps.of_cgroup("/empty") is None


def test_other_programs_on_the_cgroup_are_not_taken_for_it(answers):
    answers[("cgroup", "show", CGROUP)] = [
        {"id": 1, "attach_type": "cgroup_inet_ingress", "name": "other"}, *CGROUP_SHOW]
    assert pc.SockOps.of_cgroup(CGROUP).prog_id == 38982
    answers[("cgroup", "show", CGROUP)] = CGROUP_SHOW * 2
    with pytest.raises(RuntimeError, match="2 sock_ops programs"):
        pc.SockOps.of_cgroup(CGROUP)


def test_stats_read_zero_before_the_kernel_counts(answers):
    del answers[("prog", "show", "id", "38982")]["run_cnt"]
    del answers[("prog", "show", "id", "38982")]["run_time_ns"]
    assert pc.SockOps.of_cgroup(CGROUP).stats() == (0, 0)


def _round(mode: str, index: int, scale: float) -> pc.Round:
    r = pc.Round(mode, index, requests=100, load_s=1.0,
                 cpu_s={"gateway": 0.2 * scale, "server": 0.1 * scale},
                 cgroup_s={"a": 0.5, "b": 0.1}, agent_cpu_s={"a": 0.1, "b": 0.1},
                 out_segs={"a": 1200, "b": 1000}, veth_tx={"a": 700, "b": 1000},
                 one_trace=100 if mode == "on" else 0)
    if mode == "on":
        r.runs, r.run_ns = {"a": 1500, "b": 160}, {"a": 450_000, "b": 96_000}
        r.options = {"a": {c: 0 for c in pc.PROP_COUNTERS} | {"prop_written": 105},
                     "b": {c: 0 for c in pc.PROP_COUNTERS} | {"prop_received": 100}}
    return r


def test_figures_per_request_and_the_share_of_packets():
    f = pc.figures(_round("on", 0, 1.0))
    assert f["app_us"] == pytest.approx(3000)
    assert f["share"] == pytest.approx(105 / 700)
    assert f["written"] == pytest.approx(1.05) and f["received"] == pytest.approx(1.0)
    assert f["ns_run_a"] == pytest.approx(300) and f["ns_req_b"] == pytest.approx(960)
    off = pc.figures(_round("off", 0, 1.0))
    assert off["share"] is None and off["ns_run_a"] is None


def test_report_gives_medians_spreads_and_ratios():
    rounds = [_round(m, i, s) for i, (s_off, s_on) in enumerate([(1.0, 1.1), (1.2, 1.2),
                                                                (0.9, 1.0)])
              for m, s in (("off", s_off), ("on", s_on))]
    text = pc.report(rounds)
    row = next(ln for ln in text.splitlines() if ln.startswith("| gateway + server"))
    # off 2700, 3000, 3600; on 3000, 3300, 3600: medians 3000 and 3300
    assert row.split(" | ")[1:4] == ["3000 [2700–3600]", "3300 [3000–3600]", "1.100"]
    assert "one trace: off 0 of 300, on 300 of 300" in text
    share = next(ln for ln in text.splitlines() if ln.startswith("| share"))
    assert share.split(" | ")[1:3] == ["–", "0.150 [0.150–0.150]"]


def test_an_on_round_whose_contexts_did_not_reach_node_b_is_flagged():
    good, short = _round("on", 0, 1.0), _round("on", 1, 1.0)
    short.options["b"]["prop_received"] = 8
    short.contexts = {"a": {"sent": 32, "unsent": 68}}
    assert good.took and not short.took and _round("off", 0, 1.0).took
    flag = "propagation did not take: agent A's contexts {'sent': 32, 'unsent': 68}"
    assert flag in pc.line(short)
    text = pc.report([_round("off", 0, 1.0), good, _round("off", 1, 1.0), short])
    assert text.splitlines()[-1].endswith("node B (their option and sock_ops figures are "
                                          "short): 2")


def test_the_agents_programs_are_summed_from_its_fdinfo(tmp_path):
    fdinfo = tmp_path / "42" / "fdinfo"
    fdinfo.mkdir(parents=True)
    prog = "pos:\t0\nflags:\t02000002\nprog_type:\t5\nprog_id:\t{id}\nrun_time_ns:\t{ns}\n" \
           "run_cnt:\t{n}\nrecursion_misses:\t0\n"
    (fdinfo / "3").write_text(prog.format(id=1, ns=1000, n=10))
    (fdinfo / "4").write_text(prog.format(id=2, ns=250, n=5))
    # a link names its program too, and a map has no run counts: neither is counted
    (fdinfo / "5").write_text("link_type:\tperf\nlink_id:\t9\nprog_id:\t1\n")
    (fdinfo / "6").write_text("map_type:\t2\nmap_id:\t7\n")
    (fdinfo / "7").write_text("pos:\t0\nflags:\t02\n")
    (fdinfo / "8").write_text(prog.format(id=3, ns=50, n=1))
    names = {1: "enter_sendto", 2: "prop_sockops"}
    assert pc.agent_bpf(42, names, proc=str(tmp_path)) == {
        "enter_sendto": 1000, "prop_sockops": 250, "id 3": 50}


def test_programs_are_listed_where_the_modes_differ():
    rounds = [_round(m, i, 1.0) for i in range(2) for m in ("off", "on")]
    for r in rounds:  # per round, for 100 requests: 10 µs and 2 µs per request off
        r.bpf_ns = {"a": {"exit_recvfrom": 1_000_000, "enter_sendto": 200_000},
                    "b": {"exit_recvfrom": 1_000_000}}
        if r.mode == "on":
            r.bpf_ns["a"] |= {"enter_sendto": 350_000, "prop_sockops": 400_000}
            r.bpf_ns["b"] |= {"prop_sockops": 100_000}
    assert pc.program_report(rounds).splitlines()[2:] == [
        "| A | prop_sockops | 0.00 | 4.00 | +4.00 |",
        "| A | enter_sendto | 2.00 | 3.50 | +1.50 |",
        "| B | prop_sockops | 0.00 | 1.00 | +1.00 |"]
    assert pc.figures(rounds[1])["bpf_a_us"] == pytest.approx(17.5)


def test_the_gateway_and_the_server_are_found_by_their_argv():
    from types import SimpleNamespace as NS

    server = NS(argv=["python", "-m", "bench.two_nodes", "server"])
    gateway = NS(argv=["python", "-m", "bench.two_nodes", "gateway", "--gateway", "async"])
    grpc = NS(argv=["python", "-m", "bench.two_nodes", "grpc-server"])
    assert pc._programs(NS(procs=[server, grpc, gateway])) == (gateway, server)
