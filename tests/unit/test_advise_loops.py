"""advise names a per-character loop only where the source shows one: what the loop walks
(text by annotation, literal or string method) or what its body does with each item (ord,
a one-character comparison, str.isdigit), never the loop variable's name."""

from __future__ import annotations

import textwrap

import pytest

from otel_ebpf.advise.loops import char_loop_line


def numbered(code: str, first: int = 10) -> list[tuple[int, str]]:
    return [(first + i, line) for i, line in enumerate(textwrap.dedent(code).splitlines())]


@pytest.mark.parametrize("code, line", [
    # the planted checksum: an annotated str walked with ord
    ('''
     def checksum(text: str) -> int:
         total = 0
         for ch in text:
             total = (total * 31 + ord(ch)) & 0xFFFFFFFF
         return total''', 13),
    # no annotation: the body's ord() says it
    ('''
     def checksum(text):
         total = 0
         for b in text:
             total += ord(b)
         return total''', 13),
    # decoded bytes, enumerated
    ('''
     def count(body):
         n = 0
         for i, c in enumerate(body.decode()):
             n += i
         return n''', 13),
    # a name assigned text, then a one-character comparison inside a comprehension
    ('''
     def commas(raw):
         line = raw.strip()
         return sum(1 for x in line if x == ",")''', 13),
    ('''
     def digits(s):
         out = []
         for piece in s:
             if piece.isdigit():
                 out.append(piece)
         return out''', 13),
    ('''
     def scan(payload: bytes) -> int:
         return sum(byte for byte in payload)''', 12),
], ids=["annotated", "ord", "enumerate-decode", "comprehension", "isdigit", "bytes"])
def test_loops_over_characters_are_named(code, line):
    assert char_loop_line(numbered(code)) == line


@pytest.mark.parametrize("code", [
    # the false positive this replaces: `b` over tensors
    '''
    def forward(x, biases):
        for b in biases:
            x = x + b
        return x''',
    '''
    def fill(df, columns):
        for c in columns:
            df[c] = df[c].fillna(0)
        return df''',
    '''
    def total(chunks):
        n = 0
        for ch in chunks:
            n += len(ch)
        return n''',
], ids=["tensors", "columns", "chunks"])
def test_other_loops_are_not(code):
    assert char_loop_line(numbered(code)) == 0


def test_source_cut_short_is_read_as_far_as_it_parses():
    code = numbered('''
        def checksum(text: str) -> int:
            total = 0
            for ch in text:
                total += ord(ch)
            if total > (
        ''')
    assert char_loop_line(code) == 13
    assert char_loop_line([]) == 0
    assert char_loop_line([(1, "def broken(:")]) == 0
