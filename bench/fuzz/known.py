"""Findings of the sanitizer campaign (bench/fuzz/sanitize.py) that are known and not yet
fixed on main: each one's regression input stays in bench/fuzz/corpus/<target>/ and is
replayed as expected to fail (xfail: it must still fail the way its signature says, or
pass once the fix lands); while it is open the fuzz targets steer around it (its guard in
bench/fuzz/sanitized.py), so that a campaign is not stopped by it again and again, and a
report matching its signature is counted as this finding, not as a new one.

When main fixes one: set its `open` to False (or delete the entry). Its input then is an
ordinary regression input (it must pass), and its guard is off.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CORPUS = Path(__file__).resolve().parent / "corpus"


@dataclass(frozen=True)
class Known:
    id: str
    target: str  # the fuzz target (bench/fuzz/sanitized.py TARGETS) whose input it is
    input: str  # its file under corpus/<target>/
    signature: str  # a regular expression the failing replay's output matches
    what: str
    open: bool = True
    also: tuple[str, ...] = ()  # other targets that reach the same code (through the tracker)

    @property
    def path(self) -> Path:
        return CORPUS / self.target / self.input

    def matches(self, output: str) -> bool:
        return re.search(self.signature, output, re.S) is not None


KNOWN = (
    Known(
        id="rtps-number-set-overflow",
        target="rtps",
        input="known-rtps-number-set-overflow",
        signature=r"rtps/_parse\.c:\d+:\d+: runtime error: signed integer overflow",
        what="rtps/_parse.c number_set: members[n++] = *base + i overflows int64 for an ACKNACK "
             "whose bitmap base is near 2^63 (the 52-byte datagram in the input; the "
             "reference gives Python ints past 2^63). Fixed: both readers take a set whose "
             "members would pass 2^63 - 1 as malformed (MAX_SEQUENCE_NUMBER in "
             "protocols/rtps/parse.py); a regression input",
        also=("rtps_sockets", "table"),
        open=False),
    Known(
        id="otlp-time-overflow",
        target="otlp",
        input="known-otlp-time-overflow",
        signature=r"otlp\.c:\d+:\d+: runtime error: (signed|unsigned)? ?integer overflow"
                  r"|SUMMARY: UndefinedBehaviorSanitizer: .*otlp\.c"
                  r"|AssertionError.*otlp",
        what="otlp.c: the span's wall end as v->start + kend - v->kstart (signed 64 bits) "
             "overflowed for times at or past 2^62 ns. Fixed on main by 3ae128c (unsigned "
             "times, the end from wall_end_ns, events placed in 128 bits): the input, replayed "
             "on 3ae128c^'s otlp.c under UBSan, stops at otlp.c:273 'signed integer overflow'; "
             "on this tree it passes, and stays as a regression input",
        open=False),
    Known(
        id="http1-head-after-release",
        target="http1_head",
        input="known-http1-head-after-release",
        signature=r"AddressSanitizer: heap-use-after-free.*http1/_parse\.c",
        what="http1/_parse.c head(): PyBuffer_Release(&view) before the request target and reason "
             "(h.text, pointing into the buffer) are read by latin1(): a use after free for "
             "any exporter that frees or moves its memory on release (StrictBuffer). "
             "Fixed: head() releases the buffer after it has read the target and the "
             "reason out of it; a regression input",
        open=False),
    Known(
        id="otlp-nested-list-reference",
        target="otlp",
        input="known-otlp-nested-list-reference",
        signature=r"AssertionError: \('spans_to_otlp_(proto|json)'.*<class 'TypeError'>",
        what="found by this campaign: an attribute whose list holds a list (or tuple) makes "
             "both Python encoders raise TypeError (otlp_proto/otlp_json pair_cache_key "
             "puts the list's items in a dict key: unhashable), while otlp.c writes it as an "
             "ArrayValue of ArrayValues. Fixed: pair_cache_key gives None (not cached, "
             "written each time) for a sequence holding a sequence; a regression input",
        open=False),
    Known(
        id="otlp-pair-cache-conflation",
        target="otlp",
        input="known-otlp-pair-cache-conflation",
        signature=r"AssertionError: reference pair cache conflation",
        what="found by this campaign: the Python encoders' pair cache (otlp_proto/otlp_json "
             "_pairs, keyed by pair_cache_key) takes values that compare equal for values "
             "that encode differently: -0.0 after 0.0 under the same key (span or event "
             "attribute) is written as 0.0, a tuple (True,) after (1,) as intValue, (1.0,) "
             "after (1,) as intValue; the list key carries its items' types, the tuple and "
             "float keys do not. otlp.c (no cache) writes each value's own bytes: C and its "
             "reference disagree, the reference exports the wrong value. Fixed: pair_cache_key "
             "keys every item by its type and a float by its bits (float.hex), so -0.0 and "
             "0.0, True and 1 are separate entries; a regression input",
        open=False),
)


def open_ids() -> frozenset[str]:
    return frozenset(k.id for k in KNOWN if k.open)


def open_for(target: str) -> list[Known]:
    """The open findings whose input is the target's."""
    return [k for k in KNOWN if k.open and k.target == target]


def matching(target: str, output: str) -> Known | None:
    """The open known finding a failing run of `target` is (its own or one it reaches
    through the tracker), or None."""
    return next((k for k in KNOWN if k.open and target in (k.target, *k.also)
                 and k.matches(output)), None)
