"""The compiled RTPS datagram reader (protocols/rtps/_parse.c) against the Python reference
(parse.parse_python): equal messages, submessage for submessage, for the recorded datagrams
and for random, cut and hand-built ones."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from otel_ebpf.protocols.rtps import parse as P

from .test_rtps_fuzz import DATAGRAMS, datagram

FIXTURES = Path(__file__).parent / "fixtures"
pytestmark = pytest.mark.skipif(P.compiled is None, reason="built without the C extensions "
                                "(or OTEL_EBPF_PURE_PYTHON=1): only the reference runs")


def same(data: bytes | memoryview) -> None:
    want, got = P.parse_python(data), P.compiled.parse(data)
    assert got == want
    if want is not None:  # equal and of the same classes, field for field
        assert [type(s) for s in got.submessages] == [type(s) for s in want.submessages]
        assert type(got.truncated) is bool and got.carrier == {} and got.carrier is not \
            P.RTPSMessage().carrier


def test_the_agent_uses_it() -> None:
    assert P.parse is P.compiled.parse


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


# ACKNACK and GAP sets whose members would pass the largest sequence number (2**63 - 1): the
# compiled reader overflowed a signed 64-bit sum there (found by the sanitizer fuzzing);
# both say now that such a set is malformed
SET_PAST_THE_LAST = [bytes.fromhex(
    "525450530203010f00000000000000000000000006011c000000000000000000ffffff7fffffffff"
    "02000000000000c001000000")]


@pytest.mark.parametrize("data", SET_PAST_THE_LAST)
def test_a_sequence_number_set_past_the_last_number(data: bytes) -> None:
    same(data)
    assert P.parse_python(data).submessages == []  # the malformed ACKNACK is left out


def test_a_set_ending_at_the_last_number_is_kept() -> None:
    """Base 2**63 - 2 with two members: exactly up to the largest sequence number."""
    data = bytearray(SET_PAST_THE_LAST[0])
    # the set's base (high, low) and its one 32-bit bitmap word, little-endian (flags E)
    base = 2**63 - 2
    at = data.index(bytes.fromhex("ffffff7fffffffff"))
    data[at:at + 8] = (base >> 32).to_bytes(4, "little") + (base & 0xFFFFFFFF).to_bytes(4,
                                                                                        "little")
    data[at + 8:at + 12] = (2).to_bytes(4, "little")  # two bits
    data[at + 12:at + 16] = (0xC0000000).to_bytes(4, "little")
    same(bytes(data))
    sub = P.parse_python(bytes(data)).submessages[0]
    assert sub.missing == (base, base + 1)
