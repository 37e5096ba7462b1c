"""Which requests are vector-database calls, by the shape of their path (ports tell nothing:
any of them may listen anywhere): the vendor, the operation and the collection."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from urllib.parse import parse_qs, unquote

CHROMA, QDRANT, WEAVIATE, MILVUS = "chroma", "qdrant", "weaviate", "milvus"
SYSTEMS = (CHROMA, QDRANT, WEAVIATE, MILVUS)


@dataclass(frozen=True, slots=True)
class Target:
    system: str  # db.system.name
    operation: str  # db.operation.name; bodies.py may refine it (Weaviate GraphQL)
    collection: str | None = None  # from the path or query; bodies.py may find it in the body
    namespace: str | None = None  # db.namespace (Chroma v2 "tenant|database")
    # the request field that is a query's top-k, when this operation has one
    top_k_field: str | None = None


_CHROMA_OPS = "add|upsert|update|get|query|delete|count"
_CHROMA_V1 = re.compile(rf"/api/v1/collections/(?P<c>[^/]+)/(?P<op>{_CHROMA_OPS})")
_CHROMA_V2 = re.compile(
    r"/api/v2/tenants/(?P<t>[^/]+)/databases/(?P<d>[^/]+)"
    rf"/collections/(?P<c>[^/]+)/(?P<op>{_CHROMA_OPS})"
)
_CHROMA_METHOD = {"count": "GET"}  # every other data operation is a POST


# creating or fetching a collection: its answer names the id the data paths use
_CHROMA_COLLECTION = re.compile(
    r"/api/v1/collections(?:/(?P<c>[^/]+))?"
    r"|/api/v2/tenants/(?P<t>[^/]+)/databases/(?P<d>[^/]+)/collections(?:/(?P<c2>[^/]+))?"
)


def _chroma_collection(method: str, path: str) -> Target | None:
    match = _CHROMA_COLLECTION.fullmatch(path)
    if match is None:
        return None
    name = match["c"] or match["c2"]
    namespace = f"{unquote(match['t'])}|{unquote(match['d'])}" if match["t"] else None
    if method == "POST" and name is None:
        return Target(CHROMA, "create_collection", None, namespace)
    if method == "GET" and name is not None:
        return Target(CHROMA, "get_collection", unquote(name), namespace)
    return None


def _chroma(method: str, path: str, query: str) -> Target | None:
    match = _CHROMA_V1.fullmatch(path) or _CHROMA_V2.fullmatch(path)
    if match is None:
        return _chroma_collection(method, path)
    op = match["op"]
    if method != _CHROMA_METHOD.get(op, "POST"):
        return None
    groups = match.groupdict()
    # semconv joins namespace components most general first, with "|"
    namespace = f"{unquote(groups['t'])}|{unquote(groups['d'])}" if groups.get("t") else None
    top_k = "n_results" if op == "query" else None
    return Target(CHROMA, op, unquote(match["c"]), namespace, top_k)


_QDRANT = re.compile(r"/collections/(?P<c>[^/]+)/points(?:/(?P<op>[a-z_]+(?:/[a-z_]+)?))?")
# (method, endpoint after /points) -> (operation, top-k field)
_QDRANT_OPS: Mapping[tuple[str, str | None], tuple[str, str | None]] = {
    ("PUT", None): ("upsert", None),
    ("POST", None): ("get", None),  # retrieve points by id
    ("POST", "search"): ("search", "limit"),
    ("POST", "query"): ("query", "limit"),
    ("POST", "recommend"): ("recommend", "limit"),
    ("POST", "discover"): ("discover", "limit"),
    # semconv names a batch of like operations "BATCH <operation>"
    ("POST", "search/batch"): ("BATCH search", None),
    ("POST", "query/batch"): ("BATCH query", None),
    ("POST", "search/groups"): ("search_groups", "limit"),
    ("POST", "query/groups"): ("query_groups", "limit"),
    ("POST", "scroll"): ("scroll", None),
    ("POST", "count"): ("count", None),
    ("POST", "delete"): ("delete", None),
}


def _qdrant(method: str, path: str, query: str) -> Target | None:
    match = _QDRANT.fullmatch(path)
    if match is None:
        return None
    found = _QDRANT_OPS.get((method, match["op"]))
    if found is None:
        return None
    return Target(QDRANT, found[0], unquote(match["c"]), None, found[1])


# Weaviate's REST object endpoints: method -> operation
_WEAVIATE_OBJECTS: Mapping[str, str] = {
    "POST": "create",
    "GET": "get",
    "PUT": "update",
    "PATCH": "update",
    "DELETE": "delete",
    "HEAD": "exists",
}
# a batch create is "BATCH create" (semconv); a batch delete is one delete by a filter
_WEAVIATE_BATCH: Mapping[str, str] = {"POST": "BATCH create", "DELETE": "delete"}


def _weaviate(method: str, path: str, query: str) -> Target | None:
    if path == "/v1/graphql":
        # the operation (Get, Aggregate...) and class are in the GraphQL text: bodies.py
        return Target(WEAVIATE, "query") if method == "POST" else None
    if path == "/v1/batch/objects":
        op = _WEAVIATE_BATCH.get(method)
        return Target(WEAVIATE, op) if op else None
    if path != "/v1/objects" and not path.startswith("/v1/objects/"):
        return None
    segments = path[len("/v1/objects/") :].split("/") if path != "/v1/objects" else []
    op = _WEAVIATE_OBJECTS.get(method)
    if op is None or len(segments) > 2:  # .../{class}/{id}/references/... is not data
        return None
    if method == "POST":  # creates at /v1/objects only (/v1/objects/validate writes nothing)
        return None if segments else Target(WEAVIATE, op)  # the class is in the body
    if not segments:  # the list: GET only, its class in the query
        if method != "GET":
            return None
        return Target(WEAVIATE, op, (parse_qs(query).get("class") or [None])[0])
    if len(segments) == 2:  # /v1/objects/{class}/{id}
        return Target(WEAVIATE, op, unquote(segments[0]))
    return Target(WEAVIATE, op)  # /v1/objects/{id}, the older form: no class in the path


_MILVUS = re.compile(
    r"/v2/vectordb/entities/(?P<op>search|hybrid_search|advanced_search|"
    r"query|get|insert|upsert|delete)"
)
_MILVUS_TOP_K = {"search": "limit", "hybrid_search": "limit", "advanced_search": "limit"}


def _milvus(method: str, path: str, query: str) -> Target | None:
    match = _MILVUS.fullmatch(path)
    if match is None or method != "POST":
        return None
    op = match["op"]
    # the collection is in the body ("collectionName")
    return Target(MILVUS, op, None, None, _MILVUS_TOP_K.get(op))


MATCHERS: Mapping[str, Callable[[str, str, str], Target | None]] = {
    CHROMA: _chroma,
    QDRANT: _qdrant,
    WEAVIATE: _weaviate,
    MILVUS: _milvus,
}


# every path a matcher above can take starts with one of these
_PREFIXES = ("/api/v1/collections", "/api/v2/tenants/", "/collections/", "/v1/graphql",
             "/v1/batch/objects", "/v1/objects", "/v2/vectordb/entities/")


class Routes:
    """Path recognition; `system` restricts it to one vendor (and so forces that vendor
    for every path of its shape)."""

    def __init__(self, system: str | None = None) -> None:
        if system is not None and system not in MATCHERS:
            raise ValueError(f"vectordb.system: expected one of {list(SYSTEMS)}, got {system!r}")
        self.matchers = [MATCHERS[system]] if system else list(MATCHERS.values())

    def target(self, method: str, target: str) -> Target | None:
        if target.startswith("/") and not target.startswith(_PREFIXES):
            return None  # the path (a prefix of the target) is none of the shapes above
        path, _, query = target.partition("?")
        if "://" in path and not path.startswith("/"):  # absolute form, sent to a proxy
            path = "/" + path.split("://", 1)[1].partition("/")[2]
        path = path.rstrip("/") or "/"
        for matcher in self.matchers:
            found = matcher(method, path, query)
            if found is not None:
                return found
        return None
