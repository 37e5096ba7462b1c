"""The MCP layer's path match (one set lookup and one startswith per request) answers as
the definition does: the path is one of the configured paths, below one, or "/" is one."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st
from otel_ebpf.protocols.mcp import MCPLayer, _Under

segment = st.sampled_from(["", "mcp", "mcpx", "sse", "a", "messages"])
path = st.lists(segment, min_size=1, max_size=4).map(lambda parts: "/" + "/".join(parts))


def definition(p: str, paths: tuple[str, ...]) -> bool:
    return any(p == c or p.startswith(c + "/") or c == "/" for c in paths)


@given(path, st.lists(path, max_size=3).map(tuple))
def test_the_match_is_the_definition(p, paths):
    assert _Under(paths)(p) == definition(p, paths)


def test_wants_reads_the_configured_paths():
    layer = MCPLayer({"paths": ["/mcp"], "sse_paths": ["/sse"]})
    assert layer.wants("POST", "/mcp") and layer.wants("GET", "/mcp/?x=1")
    assert not layer.wants("POST", "/mcpx") and not layer.wants("PUT", "/mcp")
    assert layer.wants("GET", "/sse") and not layer.wants("POST", "/sse")
    assert layer.wants("POST", "/messages/?session_id=abc")
    assert not layer.wants("POST", "/messages/")
