"""HPACK (RFC 7541) header blocks, decoded against a dynamic table whose past may be unseen:
capture began mid-connection, or bytes were lost. A field that refers to that past is
unknown; it is never guessed, so a name or value we report is always the one that was sent.

Why not hpack.Decoder: it raises at the first index it cannot resolve, so the insertions
later in the same block are lost and every index after them would point one entry off (a
wrong name, not an unknown one); it also logs decoded values (secrets included) at debug
level. The table walk is ours; integers, Huffman strings and the static table are hpack's.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from hpack import HPACKDecodingError
from hpack.hpack import decode_integer
from hpack.huffman_table import decode_huffman
from hpack.table import HeaderTable

from ..common import is_secret

STATIC = tuple((n.decode("latin-1"), v.decode("latin-1")) for n, v in HeaderTable.STATIC_TABLE)
DEFAULT_TABLE_SIZE = 4096  # SETTINGS_HEADER_TABLE_SIZE's initial value (RFC 9113, section 6.5.2)
MAX_TABLE_SIZE = 65536  # we follow size updates up to this; a larger table is cut (safely)
# no index goes past a 128 KiB table (entries take at least 32 bytes): beyond, not HPACK
MAX_INDEX = len(STATIC) + (128 * 1024) // 32
ENTRY_OVERHEAD = 32  # RFC 7541, section 4.1
REDACTED = ""  # what a secret header's value becomes the moment it is decoded
# decoded blocks kept per decoder for reuse (see HeaderDecoder.decoded), and the largest kept
MAX_KEPT_BLOCKS, MAX_KEPT_BLOCK = 32, 256
_TOKEN = frozenset(b"!#$%&'*+-.^_`|~0123456789abcdefghijklmnopqrstuvwxyz")
_BAD_VALUE = frozenset(b"\x00\r\n")


class Field(NamedTuple):
    """One header field; None where the field referred to a table entry we never saw."""

    name: str | None
    value: str | None


class Block:
    """A decoded header block: its fields in order, those we know by name (the first of a
    repeated name), and how many we do not (they referred to entries we never saw).
    `derived` is its reader's: what it made of the fields, kept with a reused block."""

    __slots__ = ("fields", "known", "unknown", "derived")

    def __init__(self, fields: tuple[Field, ...], known: dict[str, str], unknown: int) -> None:
        self.fields, self.known, self.unknown = fields, known, unknown
        self.derived: object = None


STATIC_FIELDS = tuple(Field(n, v) for n, v in STATIC)
_STATIC_LEN = len(STATIC)
UNKNOWN = Field(None, None)


class Malformed(ValueError):
    """The bytes are not an HPACK block (or not one HTTP/2 allows): framing went wrong."""


class HeaderDecoder:
    """One direction's HPACK decoding context (the peer's encoder, mirrored).

    Entries are kept newest first, as HPACK numbers them. An index beyond the entries we
    hold is unknown. Our table may drop entries the encoder still has (unknown, never
    wrong) or keep entries it dropped (it never refers past its own table): only a missed
    insertion shifts indices, and every loss of bytes calls forget().
    """

    __slots__ = ("entries", "size", "max_size", "unknown_fields", "errors", "version",
                 "decoded")

    def __init__(self) -> None:
        self.entries: deque[tuple[str | None, str, int]] = deque()  # name, value, entry size
        self.size = 0
        self.max_size = DEFAULT_TABLE_SIZE
        self.unknown_fields = 0  # fields that referred to an entry we never saw
        self.errors = 0  # blocks that were not HPACK
        # the table's changes, counted: a block's fields depend on the block and the table
        self.version = 0
        # blocks that left the table as it was, by their bytes: (version, Block).
        # A connection repeats them (a gRPC method's request, its answer and trailers are
        # the same few indexed bytes every call once the table holds their fields).
        self.decoded: dict[bytes, tuple[int, Block]] = {}

    def forget(self) -> None:
        """Insertions may have been missed: no index can be trusted any more."""
        self.entries.clear()
        self.size = 0
        self.version += 1

    def decode(self, block: bytes) -> list[Field]:
        """The fields of one whole header block. Raises Malformed (after forgetting the
        table, whose insertions may now be missed) when the block is not HPACK."""
        return list(self.decode_block(block).fields)

    def decode_block(self, block: bytes) -> Block:
        """decode(), with the fields also by name and the unknown ones counted: a block
        kept for reuse (see `decoded`) is read once, so are its names. The Block is shared
        with later decodes of the same bytes: read it, never change it."""
        key = bytes(block)
        seen = self.decoded.get(key)
        if seen is not None and seen[0] == self.version:
            self.unknown_fields += seen[1].unknown
            return seen[1]
        version, unknown = self.version, self.unknown_fields
        try:
            fields = self._walk(memoryview(key))
        except (HPACKDecodingError, IndexError, ValueError) as exc:
            self.errors += 1
            self.forget()
            raise Malformed(str(exc)) from None
        # fields whose name and value we know, by name; the first of repeated names
        known = {fl.name: fl.value for fl in reversed(fields)
                 if fl.name is not None and fl.value is not None}
        decoded = Block(tuple(fields), known, self.unknown_fields - unknown)
        if self.version == version and len(key) <= MAX_KEPT_BLOCK:
            if len(self.decoded) >= MAX_KEPT_BLOCKS:
                self.decoded.clear()
            self.decoded[key] = (version, decoded)
        return decoded

    # ---- the walk (RFC 7541, section 6) --------------------------------------------

    def _walk(self, data: memoryview) -> list[Field]:
        fields: list[Field] = []
        pos, end = 0, len(data)
        regular = False  # pseudo-header fields must all come first (RFC 9113, section 8.3)
        while pos < end:
            first = data[pos]
            if first & 0x80:  # indexed field
                if first != 0xFF:  # the index fits its 7-bit prefix (the usual case)
                    index = first & 0x7F
                    pos += 1
                else:
                    index, used = decode_integer(data[pos:], 7)
                    pos += used
                field = self._entry(index)
            elif first & 0x40:  # literal, inserted into the table
                field, size, pos = self._literal(data, pos, 6)
                self._insert(field, size)
            elif first & 0x20:  # dynamic table size update
                if fields:
                    raise Malformed("table size update after a field")
                size, used = decode_integer(data[pos:], 5)
                pos += used
                self._resize(size)
                continue
            else:  # literal, not inserted (0000) or never inserted (0001)
                field, _, pos = self._literal(data, pos, 4)
            if field.name is None or field.value is None:
                self.unknown_fields += 1
            else:
                if field.name.startswith(":"):
                    if regular:
                        raise Malformed("pseudo-header after a regular field")
                else:
                    regular = True
            fields.append(field)
        return fields

    def _entry(self, index: int) -> Field:
        if index == 0 or index > MAX_INDEX:
            raise Malformed("index out of any table")
        if index <= _STATIC_LEN:
            return STATIC_FIELDS[index - 1]
        i = index - _STATIC_LEN - 1
        if i < len(self.entries):
            name, value, _ = self.entries[i]
            return Field(name, value)
        return UNKNOWN  # an entry inserted before we could see it

    def _literal(self, data: memoryview, pos: int, prefix: int) -> tuple[Field, int, int]:
        """The literal field at pos, the HPACK size of the entry it makes, the next pos."""
        index, used = decode_integer(data[pos:], prefix)
        pos += used
        if index:
            name = self._entry(index).name
        else:
            raw, pos = _string(data, pos)
            name = raw.decode("latin-1")
        raw, pos = _string(data, pos)
        value = raw.decode("latin-1")
        # An unknown name counts as empty: we may then keep an entry longer than the
        # encoder does, which is harmless (see the class docstring).
        size = ENTRY_OVERHEAD + (len(name) if name is not None else 0) + len(raw)
        if name is not None:
            _check(name, raw)  # table entries were checked as literals when inserted
            if is_secret(name):
                value = REDACTED  # dropped before it reaches a field or the table
        return Field(name, value), size, pos

    def _insert(self, field: Field, size: int) -> None:
        self.entries.appendleft((field.name, field.value, size))  # type: ignore[arg-type]
        self.size += size
        self.version += 1
        self._evict()

    def _resize(self, size: int) -> None:
        self.max_size = min(size, MAX_TABLE_SIZE)
        self.version += 1
        self._evict()

    def _evict(self) -> None:
        while self.size > self.max_size and self.entries:
            self.size -= self.entries.pop()[2]


def _string(data: memoryview, pos: int) -> tuple[bytes, int]:
    """An HPACK string literal (RFC 7541, section 5.2) at pos: its bytes and the position
    after it."""
    huffman = data[pos] & 0x80
    length, used = decode_integer(data[pos:], 7)
    pos += used
    if pos + length > len(data):
        raise Malformed("string runs past the block")
    raw = data[pos : pos + length]
    return (decode_huffman(raw) if huffman else raw.tobytes()), pos + length


def _check(name: str, value: bytes) -> None:
    """RFC 9113, section 8.2.1: lower-case token names (pseudo-headers after their colon), no
    NUL, CR or LF in values. Random bytes taken for a header block fail here."""
    body = name[1:] if name[:1] == ":" else name
    if not body or not _TOKEN.issuperset(body.encode("latin-1")):
        raise Malformed("bad field name")
    if not _BAD_VALUE.isdisjoint(value):
        raise Malformed("bad field value")
