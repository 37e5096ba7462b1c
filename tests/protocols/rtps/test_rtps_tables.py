"""The parser's per-sample tables (rtps/table.py's LruTable) against the reference they
replace (protocols.common.BoundedTable): the same entries kept and evicted for any sequence
of reads and writes, and the same spans and counters for the recorded traffic, with limits
small enough that the tables evict."""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

import pytest
from cachetools import Cache
from hypothesis import given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.common import BoundedTable
from otel_ebpf.protocols.rtps import RTPSParser
from otel_ebpf.protocols.rtps.table import LruTable

from .test_rtps_fixtures import drive

FIXTURES = Path(__file__).parent / "fixtures"
SHARED_TABLES = ("sent", "received", "nacked", "loss", "prefixes")

ops = st.lists(st.tuples(st.sampled_from(["get", "put", "set", "in", "pop"]),
                         st.integers(0, 12), st.integers()), max_size=200)


@settings(max_examples=500, deadline=None)
@given(st.integers(1, 6), ops)
def test_same_entries_as_the_reference(limit: int, steps) -> None:
    fast, ref = LruTable(limit), BoundedTable(limit)
    for op, key, value in steps:
        if op == "get":
            assert fast.get(key) == ref.get(key)
            assert fast.get(key, "none") == ref.get(key, "none")
        elif op == "put":
            fast.put(key, value)
            ref.put(key, value)
        elif op == "set":
            fast[key] = value
            ref[key] = value
        elif op == "in":
            assert (key in fast) == (key in ref)
        else:
            assert fast.pop(key, None) == ref.pop(key, None)
        # read as the tables hold them: a BoundedTable's own reads would count as use
        assert dict(OrderedDict.items(fast)) == {k: Cache.__getitem__(ref, k) for k in ref}
        assert fast.evicted == ref.evicted and len(fast) <= limit


def test_nothing_held_is_refused() -> None:
    with pytest.raises(ValueError):
        LruTable(0)


class ReferenceParser(RTPSParser):
    """The parser with every table it looks up per sample a BoundedTable again."""

    def __init__(self, options=None) -> None:
        super().__init__(options)
        shared, limit = self.shared, self.limits.max_tracked
        for name in SHARED_TABLES:
            setattr(shared, name, BoundedTable(limit))
        discovery = shared.discovery
        discovery.endpoints = BoundedTable(discovery.max_entries)
        discovery.participants = BoundedTable(discovery.max_entries)

    def new_state(self, conn):
        state = super().new_state(conn)
        state.completed = BoundedTable(state.completed.limit)
        return state


def replay(parser: RTPSParser, name: str) -> tuple[list, dict]:
    drivers = drive(parser, FIXTURES / f"{name}.jsonl")
    spans = [(s.name, s.kind, s.start_ns, s.end_ns, s.conn.pid, s.attributes, s.status,
              s.message_id, s.measurements)
             for driver in drivers for s in driver.spans()]
    return spans, parser.shared.drain()


@pytest.mark.parametrize("name", ["pubsub", "big", "service"])
@pytest.mark.parametrize("options", [{}, {"max_tracked": 16, "discovery_max_entries": 3},
                                     {"max_tracked": 16, "discovery_max_entries": 1}])
def test_same_spans_as_the_reference(name: str, options: dict) -> None:
    want = replay(ReferenceParser(options), name)
    got = replay(RTPSParser(options), name)
    assert want[0] and got == want
