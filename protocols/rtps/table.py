"""The parser's bounded tables, looked up several times per sample: the least recently used
entry goes past the bound, counted in `evicted`, as in protocols.common.BoundedTable (the
same entries kept, the same evictions), on an OrderedDict, whose reads and moves are C.

Reads through `get` and writes through `put` (or `table[key] = value`) count as use; `in`
and `pop` do not. Iteration follows use, not insertion: tables whose order matters (the
service calls, kept in the order they began) stay BoundedTable."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any

_MISSING = object()


class LruTable(OrderedDict):
    """A mapping of at most `limit` entries; past it the least recently used goes."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a table of at most {limit} entries holds nothing")
        super().__init__()
        self.limit = limit
        self.evicted = 0

    def get(self, key: Hashable, default: Any = None) -> Any:
        value = OrderedDict.get(self, key, _MISSING)
        if value is _MISSING:
            return default
        self.move_to_end(key)
        return value

    def put(self, key: Hashable, value: Any) -> None:
        if key in self:
            OrderedDict.__setitem__(self, key, value)
            self.move_to_end(key)
            return
        OrderedDict.__setitem__(self, key, value)
        if len(self) > self.limit:
            self.popitem(last=False)
            self.evicted += 1

    __setitem__ = put
