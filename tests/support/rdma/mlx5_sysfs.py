"""A sysfs tree laid out as the kernel lays out an mlx5 device with two RoCE ports, for
the RDMA port-counter tests (unit and agent)."""

from __future__ import annotations

from pathlib import Path

# The files of /sys/class/infiniband/mlx5_0/ports/N/counters (the IB PMA, every driver) and
# hw_counters (mlx5_ib's Q counters, congestion and retransmission counters; `lifespan`
# is a setting in ms, not a counter), as a ConnectX-6 Dx in RoCE mode shows them.
PMA = ["VL15_dropped", "excessive_buffer_overrun_errors", "link_downed", "link_error_recovery",
       "local_link_integrity_errors", "multicast_rcv_packets", "multicast_xmit_packets",
       "port_rcv_constraint_errors", "port_rcv_data", "port_rcv_errors", "port_rcv_packets",
       "port_rcv_remote_physical_errors", "port_rcv_switch_relay_errors",
       "port_xmit_constraint_errors", "port_xmit_data", "port_xmit_discards",
       "port_xmit_packets", "port_xmit_wait", "symbol_error", "unicast_rcv_packets",
       "unicast_xmit_packets"]
HW = ["duplicate_request", "implied_nak_seq_err", "lifespan", "local_ack_timeout_err",
      "np_cnp_sent", "np_ecn_marked_roce_packets", "out_of_buffer", "out_of_sequence",
      "packet_seq_err", "req_cqe_error", "req_cqe_flush_error", "req_remote_access_errors",
      "req_remote_invalid_request", "resp_cqe_error", "resp_cqe_flush_error",
      "resp_local_length_error", "resp_remote_access_errors", "rnr_nak_retry_err",
      "roce_adp_retrans", "roce_adp_retrans_to", "roce_slow_restart", "roce_slow_restart_cnps",
      "roce_slow_restart_trans", "rp_cnp_handled", "rp_cnp_ignored", "rx_atomic_requests",
      "rx_dct_connect", "rx_icrc_encapsulated", "rx_read_requests", "rx_write_requests"]
NETDEVS = {1: "ens1f0np0", 2: "ens1f1np1"}


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text + "\n")


def make_mlx5(root: Path) -> Path:
    """/sys/class/infiniband/mlx5_0 with ports 1 (ACTIVE) and 2 (DOWN); every counter 0."""
    dev = root / "class" / "infiniband" / "mlx5_0"
    for name, text in {"node_type": "1: CA", "hca_type": "MT4125", "fw_ver": "22.39.1002",
                       "node_guid": "0c42:a103:0065:2c4e", "board_id": "MT_0000000359",
                       "sys_image_guid": "0c42:a103:0065:2c4e"}.items():
        write(dev / name, text)
    for port, netdev in NETDEVS.items():
        p = dev / "ports" / str(port)
        write(p / "link_layer", "Ethernet")
        write(p / "state", "4: ACTIVE" if port == 1 else "1: DOWN")
        write(p / "phys_state", "5: LinkUp" if port == 1 else "3: Disabled")
        write(p / "rate", "100 Gb/sec (2X HDR)" if port == 1 else "40 Gb/sec (4X QDR)")
        write(p / "lid", "0x0")
        write(p / "cap_mask", "0x00010000")
        write(p / "gids" / "0", f"fe80:0000:0000:0000:0e42:a1ff:fe65:2c4{port - 1}")
        write(p / "gid_attrs" / "types" / "0", "IB/RoCE v1")
        write(p / "gid_attrs" / "ndevs" / "0", netdev)
        for name in PMA:
            write(p / "counters" / name, "0")
        for name in HW:
            write(p / "hw_counters" / name, "10" if name == "lifespan" else "0")
        write(dev / "device" / "net" / netdev / "dev_port", str(port - 1))
    return dev


def set_counters(dev: Path, port: int, **values: int) -> None:
    for name, value in values.items():
        where = "counters" if name in PMA else "hw_counters"
        write(dev / "ports" / str(port) / where / name, str(value))
