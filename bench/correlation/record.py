"""The correlator's inputs and decisions, recorded, to explain a wrong or ambiguous parent.

    python -m bench.correlation.record AGENT_ARGS...     # the agent (`otel-ebpf` CLI), recording
    python -m bench.correlation.record --explain WORKDIR  # the records behind wrong parents

The first form runs the agent's CLI with its Correlator recording, to the file named by
BENCH_CORRELATION_RECORD, one JSON list per line:

  ["b", pid, tid, ts_ns, context, parent, read]   a Context copied (TaskNew); read: the
                                                  thread's last read [pid, fd, gen, pos,
                                                  end, ns, context] or null
  ["f", pid, fd, gen, role, direction, start_ns, end_ns, pos, seq, tid, context, exchange,
   local_addr, local_port, remote_addr, remote_port]   a frame as it completed
  ["d", span_id, pid, tid, context, start_ns, evidence, parent_span_id, task_read,
   candidates]                                   an outbound call's parent decision;
                                                  candidates: the open server requests
                                                  [span_id, fd, pos, tid, ready, done]

Nothing in the agent changes but these records (`run.py --record` starts it this way).
`--explain` prints, for every CLIENT span of the bench whose in-process parent is wrong or
left ambiguous, its decision and the history of its Context (every birth of that address
and of its ancestors, the frames written in it), so the cause can be read from evidence.
`inputs(load(path))` gives the recorded inputs back as `Correlator.observe` takes them.
"""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from pathlib import Path

from otel_ebpf.protocols.base import ConnInfo, Direction, Frame, Role

from otel_ebpf.correlate import joiner
from otel_ebpf.kernel.abi import TaskNew

ENV = "BENCH_CORRELATION_RECORD"


def _read(read) -> list | None:
    return None if read is None else [*read.key, read.pos, read.end, read.ns, read.context]


def install(path: str) -> None:
    """Patch joiner.Correlator so that it records to `path` (line-buffered JSON lines)."""
    out = open(path, "a", buffering=1)  # noqa: SIM115 (open for the process's life)
    cls = joiner.Correlator
    birth, frame, decide = cls._birth, cls._frame, cls._parent_in_process

    def _birth(self, b, read):
        out.write(json.dumps(["b", b.pid, b.tid, b.ts_ns, b.task, b.parent, _read(read)])
                  + "\n")
        return birth(self, b, read)

    def _frame(self, conn, f, now_ns):
        out.write(json.dumps([
            "f", conn.pid, conn.fd, conn.generation, int(conn.role), int(f.direction),
            f.start_ns, f.end_ns, f.stream_pos, f.tcp_seq, f.tid, f.task, f.exchange,
            conn.local_addr, conn.local_port, conn.remote_addr, conn.remote_port]) + "\n")
        return frame(self, conn, f, now_ns)

    def _parent_in_process(self, req):
        read = self.task_reads.get((req.pid, req.task)) if req.task else None
        cands = [[s.span_id.hex(), s.conn_key[1], s.stream_pos, s.tid, s.ready_ns, s.done_ns]
                 for s in self.open.get(req.pid, {}).values()]
        decide(self, req)
        out.write(json.dumps([
            "d", req.span_id.hex(), req.pid, req.tid, req.task, req.start_ns, req.evidence,
            req.parent.span_id.hex() if req.parent is not None else "", _read(read), cands])
            + "\n")

    cls._birth, cls._frame, cls._parent_in_process = _birth, _frame, _parent_in_process


def load(path: Path) -> list[list]:
    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def inputs(records: list[list]) -> list[tuple]:
    """The recorded inputs as the correlator's `observe` takes them."""
    from otel_ebpf.conntrack.table import LastRead

    out: list[tuple] = []
    for r in records:
        if r[0] == "b":
            _, pid, tid, ts, task, parent, read = r
            last = None if read is None else LastRead(tuple(read[:3]), *read[3:])
            out.append((TaskNew(pid=pid, tid=tid, ts_ns=ts, task=task, parent=parent), last))
        elif r[0] == "f":
            (_, pid, fd, gen, role, direction, start, end, pos, seq, tid, task, exchange,
             laddr, lport, raddr, rport) = r
            conn = ConnInfo(pid=pid, fd=fd, generation=gen, role=Role(role), transport="stream",
                            family="ipv4", local_addr=laddr, local_port=lport,
                            remote_addr=raddr, remote_port=rport)
            frame = Frame(direction=Direction(direction), start_ns=start, end_ns=end,
                          stream_pos=pos, tcp_seq=seq, tid=tid, task=task, exchange=exchange)
            out.append((conn, frame))
    return out


def explain(workdir: Path, limit: int = 20) -> int:
    """Print the evidence behind each wrong or ambiguous in-process parent under workdir
    (a run.py workdir: one c<level> folder per level, each with its records)."""
    from bench.correlation.evaluate import CLIENT, SERVER, read_spans
    from bench.correlation.topology import read_truth

    shown = 0
    for level in sorted(Path(workdir).glob("c*")):
        rec_path = level / "correlation.jsonl"
        if not rec_path.is_file():
            continue
        records = load(rec_path)
        spans = read_spans(level / "traces.jsonl")
        truth = {t["rid"]: t for t in read_truth(level / "truth")}
        server_of = {s.rid: s for s in spans if s.kind == SERVER}
        by_span = {s.span_id: s for s in spans}
        decisions = {r[1]: r for r in records if r[0] == "d"}
        births = defaultdict(list)  # (pid, context) -> records
        writes = defaultdict(list)
        for r in records:
            if r[0] == "b":
                births[(r[1], r[4])].append(r)
            elif r[0] == "f" and r[11]:
                writes[(r[1], r[11])].append(r)
        for s in spans:
            t = truth.get(s.rid or "")
            if s.kind != CLIENT or t is None or t.get("parent_rid") is None:
                continue
            want = server_of.get(t["parent_rid"])
            mark = s.attrs.get(joiner.ATTRIBUTE, "")
            wrong = bool(s.parent_id) and (want is None or s.parent_id != want.span_id)
            if not wrong and mark != "ambiguous":
                continue
            shown += 1
            if shown > limit:
                continue
            d = decisions.get(s.span_id)
            got = by_span.get(s.parent_id)
            print(f"\n== {level.name} {t['shape']} {t['service']}->{t['target']} "
                  f"{'WRONG' if wrong else 'ambiguous'}: span {s.span_id} evidence {mark!r}; "
                  f"parent {s.parent_id} (rid {got.rid if got else None}), "
                  f"want {want.span_id if want else None} (rid {t['parent_rid']})")
            if d is None:
                print("   no decision recorded")
                continue
            _, _, pid, tid, ctx, start, ev, parent, read, cands = d
            print(f"   decision: pid {pid} tid {tid} context {ctx:#x} start {start} -> "
                  f"{ev} {parent}; task read {read}; {len(cands)} open")
            seen, todo = set(), [ctx]
            while todo:
                c = todo.pop()
                if c in seen or not c:
                    continue
                seen.add(c)
                for b in births.get((pid, c), []):
                    print(f"   birth  {b}")
                    todo.append(b[5])
                for w in writes.get((pid, c), [])[-6:]:
                    print(f"   write  {w}")
    print(f"\n{shown} wrong or ambiguous in-process parents")
    return 0


def main(argv: list[str]) -> int:
    if argv[:1] == ["--explain"]:
        return explain(Path(argv[1]), int(argv[2]) if len(argv) > 2 else 20)
    install(os.environ[ENV])
    from otel_ebpf.cli import main as cli

    return cli(argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
