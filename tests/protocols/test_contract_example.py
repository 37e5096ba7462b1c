"""The worked example of docs/protocols.md, run as written: its parser, fuzz target and test
go through the contract (options, pair, the tracker's correlation fields, the test kit)."""

from __future__ import annotations

import random
import re
import sys
import types
from pathlib import Path

import pytest
from otel_ebpf.protocols.options import OptionError
from otel_ebpf.protocols.registry import PluginOptionsError, Registry, build
from otel_ebpf.protocols.testing import REQ, RESP, TICK, conn_info, run_exchange

DOC = Path(__file__).resolve().parents[2] / "docs" / "protocols.md"
PACKAGE = "otel_ebpf.protocols.lineproto"


@pytest.fixture(scope="module")
def example():
    """The doc's three Python blocks: the package, its fuzz.py, its test."""
    blocks = re.findall(r"```python\n(.*?)```", DOC.read_text(), re.S)
    assert len(blocks) == 3, "docs/protocols.md: the parser, fuzz.py and a test"
    package = types.ModuleType(PACKAGE)
    package.__path__ = []  # a package: fuzz.py imports the parser with `from . import`
    sys.modules[PACKAGE] = package
    exec(compile(blocks[0], f"{PACKAGE}/__init__.py", "exec"), package.__dict__)  # noqa: S102
    fuzz = types.ModuleType(PACKAGE + ".fuzz")
    fuzz.__package__ = PACKAGE
    sys.modules[fuzz.__name__] = fuzz
    exec(compile(blocks[1], f"{PACKAGE}/fuzz.py", "exec"), fuzz.__dict__)  # noqa: S102
    test = {}
    exec(compile(blocks[2], "test_lineproto.py", "exec"), test)  # noqa: S102
    yield package, fuzz, test
    del sys.modules[PACKAGE], sys.modules[fuzz.__name__]


def test_the_example_test_passes(example):
    _, _, test = example
    test["test_a_get_and_its_answer_in_any_split"]()


def test_options_are_typed_and_refused_with_their_key(example):
    package, _, _ = example
    parser = package.LineParser({"response_timeout": "250ms", "max_line": "2KiB",
                                 "correlation_headers": ["x-request-id"]})
    assert (parser.timeout_ns, parser.max_line) == (250_000_000, 2048)
    assert package.LineParser().options == {"response_timeout": 10.0, "max_line": 1024}
    with pytest.raises(PluginOptionsError) as info:
        build("lineproto", package.LineParser, {"response_timeout": "soon"})
    option = info.value.option
    assert isinstance(option, OptionError)
    assert (option.key, option.got) == ("lineproto.response_timeout", "'soon'")
    with pytest.raises(OptionError, match=r"lineproto\.max_lines: expected an option lineproto"):
        package.LineParser({"max_lines": 3})


def test_closed_and_timeouts_reach_pair_and_orphans_are_counted(example):
    package, _, _ = example
    parser = package.LineParser({"response_timeout": "1s"})
    driver = run_exchange(parser, conn_info(), [
        (RESP, b"+stray\r\n"), (REQ, b"GET a\r\n"), (TICK, 5 * 10**9), (REQ, b"DEL b\r\n"),
    ], "whole", b"")
    assert [r.error for r in driver.records] == ["timeout", "connection_closed"]
    assert parser.counters(driver.state) == {"orphan_responses": 1}
    spans = driver.spans()
    assert [s.attributes["error.type"] for s in spans] == ["timeout", "connection_closed"]


def test_correlation_fields_come_from_the_record_frames(example):
    package, _, _ = example
    server = conn_info(role=package.Role.SERVER)
    driver = run_exchange(package.LineParser(), server,
                          [(REQ, b"PING\r\n"), (RESP, b"+PONG\r\n"), (REQ, b"GET k\r\n"),
                           (RESP, b"-ERR none\r\n")], "bytes", b"")
    spans = driver.spans()  # as Connection.collect makes them: the tracker fills the fields
    for record, span in zip(driver.records, spans, strict=True):
        assert span.request_pos == record.request.stream_pos
        assert span.request_seq == record.request.tcp_seq is not None
        assert span.response_seq == record.response.tcp_seq
    assert [s.status for s in spans] == [0, 2]  # UNSET, ERROR (an -ERR answer)


def test_the_fuzz_target_runs_clean(example):
    atheris = pytest.importorskip("atheris")  # a declared test dependency
    _, fuzz, _ = example
    one = fuzz.TARGET.one()
    rng = random.Random(1)
    records = 0
    for _ in range(2000):
        data = bytes(rng.getrandbits(8) for _ in range(rng.randint(0, 300)))
        records += sum(len(d.records) for d in one(atheris.FuzzedDataProvider(data)))
    assert records > 0


def test_on_by_default_without_the_core_naming_it(example):
    package, _, _ = example
    registry = Registry([package.LineParser()])
    assert registry.parsers[0].default_enabled
