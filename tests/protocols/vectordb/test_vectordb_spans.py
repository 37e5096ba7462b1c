"""VectorDBLayer.enrich: database spans with exact attributes and the duration measurement."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.base import Measurement, Role, SpanKind, StatusCode
from otel_ebpf.protocols.vectordb import VectorDBLayer
from otel_ebpf.protocols.vectordb.spans import DURATION_BUCKETS, INSTRUMENTS

from ..llm.build import (
    REQ_START,
    Lost,
    body,
    exchange,
    gapped,
    http_span,
    json_values,
    layer_attributes,
)

MS = 1_000_000


def enrich(
    method,
    target,
    request,
    response,
    *,
    status=200,
    role=Role.CLIENT,
    options=None,
    host="vectors:6333",
):
    ex = exchange(
        target,
        body(orjson.dumps(request)) if request is not None else None,
        body((orjson.dumps(response), 4 * MS)) if response is not None else None,
        status=status,
        role=role,
        method=method,
        host=host,
    )
    span = http_span(ex)
    http_before = dict(span.attributes)
    VectorDBLayer(options).enrich(ex, span)
    assert {k: span.attributes[k] for k in http_before} == http_before
    return span


def test_instrument_is_the_semconv_histogram():
    assert INSTRUMENTS["db.client.operation.duration"].unit == "s"
    assert DURATION_BUCKETS == (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)


def test_chroma_query():
    span = enrich(
        "POST",
        "/api/v1/collections/3c5e/query",
        {"query_embeddings": [[0.1, 0.2], [0.3, 0.4]], "n_results": 3, "include": ["distances"]},
        {"ids": [["a", "b", "c"], ["d", "e"]], "distances": [[0.1, 0.2, 0.3], [0.4, 0.5]]},
    )
    assert (span.name, span.kind, span.status) == ("query 3c5e", SpanKind.CLIENT, StatusCode.UNSET)
    assert layer_attributes(span) == {
        "db.system.name": "chroma",
        "db.operation.name": "query",
        "db.collection.name": "3c5e",
        "db.vector.query.top_k": 3,
        "db.response.returned_rows": 5,
        "db.response.status_code": "200",
    }
    assert span.measurements == [
        Measurement(
            "db.client.operation.duration",
            (4 * MS - REQ_START) / 1e9,
            {
                "db.system.name": "chroma",
                "db.collection.name": "3c5e",
                "db.operation.name": "query",
                "db.response.status_code": "200",
                "server.address": "vectors",
                "server.port": 8000,
            },
        )
    ]


def test_chroma_v2_add_and_get():
    span = enrich(
        "POST",
        "/api/v2/tenants/acme/databases/prod/collections/c9/add",
        {"ids": ["1", "2"], "embeddings": [[1.0], [2.0]]},
        True,
        status=201,
    )
    assert span.name == "add c9"
    assert span.attributes["db.namespace"] == "acme|prod"
    assert "db.response.returned_rows" not in span.attributes
    span = enrich(
        "POST",
        "/api/v1/collections/c9/get",
        {"ids": ["1", "2"], "limit": 10},
        {"ids": ["1", "2"], "documents": ["x", "y"]},
    )
    assert (span.name, span.attributes["db.response.returned_rows"]) == ("get c9", 2)
    assert "db.vector.query.top_k" not in span.attributes  # a page size, not a top-k


def test_qdrant_search_query_scroll_upsert():
    span = enrich(
        "POST",
        "/collections/docs/points/search",
        {"vector": [0.1, 0.9], "limit": 5},
        {
            "result": [{"id": 1, "score": 0.9}, {"id": 2, "score": 0.8}],
            "status": "ok",
            "time": 0.001,
        },
    )
    assert span.name == "search docs"
    assert layer_attributes(span) == {
        "db.system.name": "qdrant",
        "db.operation.name": "search",
        "db.collection.name": "docs",
        "db.vector.query.top_k": 5,
        "db.response.returned_rows": 2,
        "db.response.status_code": "200",
    }
    span = enrich(
        "POST",
        "/collections/docs/points/query",
        {"query": [0.1], "top": 4},
        {"result": {"points": [{"id": 1}]}, "status": "ok"},
    )
    assert (
        span.attributes["db.vector.query.top_k"],
        span.attributes["db.response.returned_rows"],
    ) == (4, 1)
    span = enrich(
        "POST",
        "/collections/docs/points/scroll",
        {"limit": 100},
        {"result": {"points": [{"id": 1}, {"id": 2}], "next_page_offset": None}},
    )
    assert (span.name, span.attributes["db.response.returned_rows"]) == ("scroll docs", 2)
    assert "db.vector.query.top_k" not in span.attributes
    span = enrich(
        "PUT",
        "/collections/docs/points?wait=true",
        {"points": [{"id": 1, "vector": [1]}]},
        {"result": {"operation_id": 7, "status": "completed"}, "status": "ok"},
    )
    assert span.name == "upsert docs"
    assert "db.response.returned_rows" not in span.attributes


def test_qdrant_batch_search():
    span = enrich(
        "POST",
        "/collections/docs/points/search/batch",
        {"searches": [{"vector": [1], "limit": 2}, {"vector": [2], "limit": 2}]},
        {"result": [[{"id": 1}, {"id": 2}], [{"id": 3}]]},
    )
    assert span.name == "BATCH search docs"
    assert (
        span.attributes["db.operation.batch.size"],
        span.attributes["db.response.returned_rows"],
    ) == (2, 3)
    span = enrich(
        "POST",
        "/collections/docs/points/search/batch",
        {"searches": [{"vector": [1], "limit": 2}]},
        {"result": [[{"id": 1}]]},
    )
    assert span.name == "search docs"  # one search is not a batch
    assert "db.operation.batch.size" not in span.attributes


def test_weaviate_graphql_get_near_vector():
    query = (
        "{ Get { Article(nearVector: {vector: [0.1, 0.2]}, limit: 3)"
        " { title _additional { distance } } } }"
    )
    span = enrich(
        "POST",
        "/v1/graphql",
        {"query": query},
        {"data": {"Get": {"Article": [{"title": "a"}, {"title": "b"}]}}},
        host="weaviate:8080",
    )
    assert span.name == "get Article"
    assert layer_attributes(span) == {
        "db.system.name": "weaviate",
        "db.operation.name": "get",
        "db.collection.name": "Article",
        "db.vector.query.top_k": 3,
        "db.response.returned_rows": 2,
        "db.response.status_code": "200",
    }


def test_weaviate_graphql_listing_and_errors():
    span = enrich(
        "POST",
        "/v1/graphql",
        {"query": "{ Aggregate { Article { meta { count } } } }"},
        {"data": {"Aggregate": {"Article": [{"meta": {"count": 9}}]}}},
    )
    assert (span.name, span.attributes.get("db.vector.query.top_k")) == ("aggregate Article", None)
    span = enrich(
        "POST",
        "/v1/graphql",
        {"query": "{ Get { Nope { x } } }"},
        {"data": {"Get": {"Nope": None}}, "errors": [{"message": "no class Nope"}]},
    )
    assert span.attributes["error.type"] == "graphql_error"
    assert span.status == StatusCode.ERROR
    assert span.measurements[0].attributes["error.type"] == "graphql_error"


def test_weaviate_objects_and_batch():
    span = enrich(
        "POST",
        "/v1/objects",
        {"class": "Article", "properties": {"title": "t"}},
        {"id": "36ddd591", "class": "Article"},
    )
    assert span.name == "create Article"
    span = enrich(
        "POST",
        "/v1/batch/objects",
        {"objects": [{"class": "Article"}, {"class": "Author"}, {"class": "Article"}]},
        [{"id": "1", "result": {}}],
    )
    assert span.name == "BATCH create Article, Author"
    assert span.attributes["db.operation.batch.size"] == 3
    span = enrich("DELETE", "/v1/batch/objects", {"match": {"class": "Article", "where": {}}}, {})
    assert span.name == "delete Article"
    span = enrich(
        "GET", "/v1/objects?class=Article", None, {"objects": [{"id": "1"}], "totalResults": 1}
    )
    assert (span.name, span.attributes["db.response.returned_rows"]) == ("get Article", 1)


def test_milvus_search_collection_from_the_body():
    span = enrich(
        "POST",
        "/v2/vectordb/entities/search",
        {
            "dbName": "default",
            "collectionName": "quick_setup",
            "data": [[0.3, -0.6]],
            "annsField": "vector",
            "limit": 3,
            "outputFields": ["color"],
        },
        {"code": 0, "cost": 0, "data": [{"id": 1, "distance": 0.9}, {"id": 2, "distance": 0.8}]},
        host="milvus:19530",
    )
    assert span.name == "search quick_setup"
    assert layer_attributes(span) == {
        "db.system.name": "milvus",
        "db.operation.name": "search",
        "db.collection.name": "quick_setup",
        "db.namespace": "default",
        "db.vector.query.top_k": 3,
        "db.response.returned_rows": 2,
        "db.response.status_code": "200",
    }


def test_milvus_error_code_under_200():
    span = enrich(
        "POST",
        "/v2/vectordb/entities/query",
        {"collectionName": "nope", "filter": "id > 0"},
        {"code": 100, "message": "collection not found[collection=nope]"},
    )
    assert (span.attributes["error.type"], span.status) == ("100", StatusCode.ERROR)
    assert span.name == "query nope"


def test_http_error_and_server_side():
    span = enrich(
        "POST",
        "/collections/nope/points/search",
        {"vector": [1], "limit": 1},
        {"status": {"error": "Not found: Collection `nope` doesn't exist!"}},
        status=404,
    )
    assert (span.attributes["error.type"], span.attributes["db.response.status_code"]) == (
        "404",
        "404",
    )
    assert "db.response.returned_rows" not in span.attributes
    server = enrich(
        "POST",
        "/collections/docs/points/search",
        {"vector": [1], "limit": 2},
        {"result": []},
        role=Role.SERVER,
    )
    assert (server.name, server.kind) == ("search docs", SpanKind.SERVER)
    assert server.attributes["db.response.returned_rows"] == 0
    assert server.measurements == []  # db.client.operation.duration is a client metric


def test_big_search_body_with_a_gap_keeps_top_k_from_the_tail():
    data = orjson.dumps({"vector": [0.123456] * 20_000, "limit": 7, "with_payload": True})
    ex = exchange(
        "/collections/docs/points/search",
        gapped(data, 4096, 64),
        body(orjson.dumps({"result": [{"id": 1}]})),
    )
    span = http_span(ex)
    VectorDBLayer().enrich(ex, span)
    assert span.attributes["db.vector.query.top_k"] == 7
    milvus = orjson.dumps({"collectionName": "big", "data": [[0.5] * 30_000], "limit": 9})
    ex = exchange("/v2/vectordb/entities/search", gapped(milvus, 4096, 64), None, status=None)
    span = http_span(ex)
    VectorDBLayer().enrich(ex, span)
    assert (span.name, span.attributes["db.vector.query.top_k"]) == ("search big", 9)


ROUTES = [
    ("POST", "/api/v1/collections/c/query"),
    ("POST", "/api/v1/collections/c/get"),
    ("POST", "/collections/d/points/search"),
    ("POST", "/collections/d/points/search/batch"),
    ("POST", "/collections/d/points/query"),
    ("PUT", "/collections/d/points"),
    ("POST", "/v1/graphql"),
    ("POST", "/v1/batch/objects"),
    ("GET", "/v1/objects"),
    ("POST", "/v2/vectordb/entities/search"),
    ("DELETE", "/v1/batch/objects"),
]
KEYS = [
    "n_results",
    "limit",
    "top",
    "searches",
    "query",
    "objects",
    "class",
    "match",
    "collectionName",
    "dbName",
    "ids",
    "result",
    "points",
    "groups",
    "hits",
    "code",
    "data",
    "errors",
    "Get",
    "Aggregate",
]
shapes = st.dictionaries(st.sampled_from(KEYS), json_values, max_size=5) | json_values


@settings(max_examples=400, deadline=None)
@given(
    route=st.sampled_from(ROUTES),
    request=shapes,
    response=shapes,
    status=st.sampled_from([None, 200, 500]),
    role=st.sampled_from([Role.CLIENT, Role.SERVER]),
    cut=st.booleans(),
    garbage=st.binary(max_size=64),
)
def test_never_raises(route, request, response, status, role, cut, garbage):
    method, target = route
    data = orjson.dumps(request)
    request_body = gapped(data + garbage, 3, 2) if cut and len(data) > 6 else body(data + garbage)
    response_body = body(orjson.dumps(response), Lost(3)) if cut else body(orjson.dumps(response))
    ex = exchange(target, request_body, response_body, status=status, role=role, method=method)
    span = http_span(ex)
    VectorDBLayer().enrich(ex, span)
    assert span.attributes["db.system.name"] in ("chroma", "qdrant", "weaviate", "milvus")
    assert span.name.startswith(span.attributes["db.operation.name"])
    for value in span.attributes.values():
        assert isinstance(value, str | bool | int | float | list)


def test_chroma_collection_ids_are_named_from_create_and_get_answers():
    layer = VectorDBLayer()
    prefix = "/api/v2/tenants/t/databases/d/collections"

    def call(method, target, request, response):
        ex = exchange(target, body(orjson.dumps(request)) if request is not None else None,
                      body((orjson.dumps(response), 4 * MS)), method=method)
        span = http_span(ex)
        layer.enrich(ex, span)
        return span

    before = call("POST", f"{prefix}/0f1e/query", {"n_results": 1}, {"ids": [["a"]]})
    assert before.attributes["db.collection.name"] == "0f1e"  # not named yet: the id stays
    created = call("POST", prefix, {"name": "docs", "get_or_create": True},
                   {"id": "0f1e", "name": "docs"})
    assert created.name == "create_collection docs"
    assert created.attributes["db.namespace"] == "t|d"
    query = call("POST", f"{prefix}/0f1e/query", {"n_results": 1}, {"ids": [["a"]]})
    assert query.name == "query docs" and query.attributes["db.collection.name"] == "docs"
    fetched = call("GET", f"{prefix}/notes", None, {"id": "77aa", "name": "notes"})
    assert fetched.name == "get_collection notes"
    assert call("POST", f"{prefix}/77aa/add", {"ids": ["x"]}, True).name == "add notes"
