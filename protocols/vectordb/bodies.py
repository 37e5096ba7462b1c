"""What vector-database request and response bodies add to a call: the collection when the
path lacks it, the query's top-k, batch sizes, rows returned, errors inside a 200.

Whole bodies are parsed with orjson. A request cut by the capture (many vectors) is
scanned at both ends for the few small fields we read; row counts need a whole response.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson

from ..layers import Body
from ..llm import scan
from .routes import CHROMA, MILVUS, QDRANT, WEAVIATE, Target

BATCH = "BATCH "


@dataclass(slots=True)
class Call:
    operation: str
    collection: str | None = None
    namespace: str | None = None
    top_k: int | None = None
    batch_size: int | None = None
    returned_rows: int | None = None
    error_type: str | None = None  # an error the body reports under a 2xx status
    collection_id: str | None = None  # Chroma: the id a collection's answer gave its name

    @classmethod
    def of(cls, target: Target) -> Call:
        return cls(target.operation, target.collection, target.namespace)


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def _dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _whole(body: Body | None) -> Any:
    if body is None or not body.complete or not body.pieces:
        return None
    try:
        return orjson.loads(body.contiguous())
    except orjson.JSONDecodeError:
        return None


# requests ---------------------------------------------------------------------------------

_GRAPHQL_ROOT = re.compile(r"\{\s*(Get|Aggregate|Explore)\s*(?:\{\s*([A-Za-z_]\w*))?")
_GRAPHQL_SEARCH = re.compile(r"\b(?:near[A-Z]\w*|hybrid|bm25)\s*:")
_GRAPHQL_LIMIT = re.compile(r"\blimit\s*:\s*(\d+)")


def _weaviate_graphql(doc: dict[str, Any], call: Call) -> None:
    query = _str(doc.get("query"))
    match = _GRAPHQL_ROOT.search(query) if query else None
    if match is None:
        return
    call.operation = match[1].lower()
    call.collection = match[2]
    # a limit is a top-k only where it bounds a similarity search, not a plain listing
    if _GRAPHQL_SEARCH.search(query):
        limit = _GRAPHQL_LIMIT.search(query)
        call.top_k = int(limit[1]) if limit else None


def _weaviate_request(doc: dict[str, Any], call: Call, target: Target) -> None:
    if "query" in doc:
        _weaviate_graphql(doc, call)
    elif isinstance(doc.get("objects"), list):  # /v1/batch/objects
        classes = {_str(_dict(o).get("class")) for o in doc["objects"]} - {None}
        call.collection = ", ".join(sorted(classes)) or None  # semconv: a comma-separated list
        call.batch_size = len(doc["objects"])
    elif isinstance(doc.get("match"), dict):  # batch delete: one delete by filter
        call.collection = _str(doc["match"].get("class"))
    elif call.collection is None:
        call.collection = _str(doc.get("class"))


def _qdrant_request(doc: dict[str, Any], call: Call, target: Target) -> None:
    searches = doc.get("searches")
    if isinstance(searches, list):
        call.batch_size = len(searches)


def _milvus_request(doc: dict[str, Any], call: Call, target: Target) -> None:
    call.collection = _str(doc.get("collectionName"))
    call.namespace = _str(doc.get("dbName"))


def _no_request(doc: dict[str, Any], call: Call, target: Target) -> None:
    return None


_REQUESTS: dict[str, Callable[[dict[str, Any], Call, Target], None]] = {
    CHROMA: _no_request,
    QDRANT: _qdrant_request,
    WEAVIATE: _weaviate_request,
    MILVUS: _milvus_request,
}


def read_request(target: Target, body: Body | None) -> Call:
    call = Call.of(target)
    doc = _whole(body)
    if isinstance(doc, dict):
        _REQUESTS[target.system](doc, call, target)
        if target.top_k_field is not None:
            call.top_k = _int(doc.get(target.top_k_field))
            if call.top_k is None and target.system == QDRANT:  # its older name for limit
                call.top_k = _int(doc.get("top"))
    elif body is not None and body.pieces:
        _scan_request(target, body, call)
    _batch_name(target, call)
    return call


def _scan_request(target: Target, body: Body, call: Call) -> None:
    head, tail = body.contiguous(), body.tail()
    if target.top_k_field is not None:
        value = scan.number(target.top_k_field, head, tail)
        call.top_k = value if isinstance(value, int) else None
    if target.system == MILVUS:
        call.collection = scan.string("collectionName", head, tail)
        call.namespace = scan.string("dbName", head, tail)


def _batch_name(target: Target, call: Call) -> None:
    """semconv: a batch of two or more like operations is "BATCH <op>"; one is not a batch."""
    if call.batch_size is not None and call.batch_size < 2:
        call.operation = call.operation.removeprefix(BATCH)
        call.batch_size = None


# responses --------------------------------------------------------------------------------


def _chroma_response(doc: Any, call: Call) -> None:
    if call.operation in ("create_collection", "get_collection"):
        call.collection = _str(_dict(doc).get("name")) or call.collection
        call.collection_id = _str(_dict(doc).get("id"))
        return
    ids = _dict(doc).get("ids")
    if call.operation == "query":  # one list of ids per query embedding
        call.returned_rows = sum(len(inner) for inner in _list(ids) if isinstance(inner, list))
    elif call.operation == "get" and isinstance(ids, list):
        call.returned_rows = len(ids)


def _qdrant_rows(result: Any) -> int | None:
    if isinstance(result, list):
        if result and all(isinstance(item, list) for item in result):  # batch: per search
            return sum(len(item) for item in result)
        if result and all(isinstance(_dict(item).get("points"), list) for item in result):
            return sum(len(item["points"]) for item in result)  # batch query
        return len(result)
    points = _dict(result).get("points")
    if isinstance(points, list):  # query, scroll
        return len(points)
    groups = _dict(result).get("groups")
    if isinstance(groups, list):
        return sum(len(_list(_dict(g).get("hits"))) for g in groups)
    return None


_QDRANT_READS = {
    "get",
    "search",
    "query",
    "recommend",
    "discover",
    "scroll",
    "BATCH search",
    "BATCH query",
    "search_groups",
    "query_groups",
}


def _qdrant_response(doc: Any, call: Call) -> None:
    if call.operation in _QDRANT_READS:
        call.returned_rows = _qdrant_rows(_dict(doc).get("result"))


_MILVUS_READS = {"search", "hybrid_search", "advanced_search", "query", "get"}


def _milvus_response(doc: Any, call: Call) -> None:
    doc = _dict(doc)
    code = _int(doc.get("code"))
    if code:  # Milvus answers errors with HTTP 200 and a non-zero code
        call.error_type = str(code)
        return
    if call.operation in _MILVUS_READS and isinstance(doc.get("data"), list):
        call.returned_rows = len(doc["data"])


def _weaviate_response(doc: Any, call: Call) -> None:
    doc = _dict(doc)
    if _list(doc.get("errors")):  # GraphQL reports errors with HTTP 200
        call.error_type = "graphql_error"
    data = _dict(doc.get("data"))
    if data and call.collection:
        root = _dict(data.get(call.operation.capitalize()))
        rows = root.get(call.collection)
        call.returned_rows = len(rows) if isinstance(rows, list) else None
    elif isinstance(doc.get("objects"), list) and call.operation == "get":
        call.returned_rows = len(doc["objects"])


_RESPONSES: dict[str, Callable[[Any, Call], None]] = {
    CHROMA: _chroma_response,
    QDRANT: _qdrant_response,
    WEAVIATE: _weaviate_response,
    MILVUS: _milvus_response,
}


def read_response(target: Target, status: int | None, body: Body | None, call: Call) -> None:
    if status is None or status >= 400:
        return
    doc = _whole(body)
    if doc is not None:
        _RESPONSES[target.system](doc, call)
