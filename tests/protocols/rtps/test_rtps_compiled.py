"""The compiled RTPS datagram reader (otel_ebpf/_fast/rtps.c) against the Python reference
(parse.parse_python): equal messages, submessage for submessage, for the recorded datagrams
and for random, cut and hand-built ones."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from otel_ebpf.protocols.rtps import parse as P

from otel_ebpf import _fast

from .test_rtps_fuzz import DATAGRAMS, datagram

FIXTURES = Path(__file__).parent / "fixtures"
pytestmark = pytest.mark.skipif(_fast.rtps is None, reason="built without the C extensions "
                                "(or OTEL_EBPF_PURE_PYTHON=1): only the reference runs")


def same(data: bytes | memoryview) -> None:
    want, got = P.parse_python(data), _fast.rtps.parse(data)
    assert got == want
    if want is not None:  # equal and of the same classes, field for field
        assert [type(s) for s in got.submessages] == [type(s) for s in want.submessages]
        assert type(got.truncated) is bool and got.carrier == {} and got.carrier is not \
            P.RTPSMessage().carrier


def test_the_agent_uses_it() -> None:
    assert P.parse is _fast.rtps.parse


@pytest.mark.parametrize("name", ["pubsub", "big", "service"])
def test_recorded_datagrams(name: str) -> None:
    rng = random.Random(name)
    for line in (FIXTURES / f"{name}.jsonl").read_text().splitlines():
        data = bytes.fromhex(json.loads(line)["hex"])
        same(data)
        same(memoryview(data))
        for _ in range(3):  # cut by the capture, and one octet changed
            same(data[: rng.randint(0, len(data))])
            flipped = bytearray(data)
            flipped[rng.randrange(len(data))] ^= 1 << rng.randrange(8)
            same(bytes(flipped))


def test_built_datagrams() -> None:
    for data in DATAGRAMS:
        for n in range(len(data) + 1):
            same(data[:n])


@settings(max_examples=2000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(datagram)
def test_random_datagrams(data: bytes) -> None:
    same(data)
