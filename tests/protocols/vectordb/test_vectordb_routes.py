"""Which requests the vector-database layer takes: vendors told apart by path shape."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.vectordb import VectorDBLayer
from otel_ebpf.protocols.vectordb.routes import Routes, Target


@pytest.mark.parametrize(
    ("method", "target", "expected"),
    [
        (
            "POST",
            "/api/v1/collections/5f0c/query",
            Target("chroma", "query", "5f0c", None, "n_results"),
        ),
        ("POST", "/api/v1/collections/5f0c/add", Target("chroma", "add", "5f0c")),
        ("POST", "/api/v1/collections/5f0c/upsert", Target("chroma", "upsert", "5f0c")),
        ("POST", "/api/v1/collections/5f0c/get", Target("chroma", "get", "5f0c")),
        ("POST", "/api/v1/collections/5f0c/delete", Target("chroma", "delete", "5f0c")),
        ("GET", "/api/v1/collections/5f0c/count", Target("chroma", "count", "5f0c")),
        (
            "POST",
            "/api/v2/tenants/default_tenant/databases/default_database/collections/c1/query",
            Target("chroma", "query", "c1", "default_tenant|default_database", "n_results"),
        ),
        (
            "POST",
            "/collections/docs/points/search",
            Target("qdrant", "search", "docs", None, "limit"),
        ),
        (
            "POST",
            "/collections/docs/points/query",
            Target("qdrant", "query", "docs", None, "limit"),
        ),
        ("POST", "/collections/docs/points/scroll", Target("qdrant", "scroll", "docs")),
        ("POST", "/collections/docs/points/delete?wait=true", Target("qdrant", "delete", "docs")),
        ("PUT", "/collections/docs/points?wait=true", Target("qdrant", "upsert", "docs")),
        ("POST", "/collections/docs/points", Target("qdrant", "get", "docs")),
        ("POST", "/collections/docs/points/search/batch", Target("qdrant", "BATCH search", "docs")),
        ("POST", "/v1/graphql", Target("weaviate", "query")),
        ("POST", "/v1/objects", Target("weaviate", "create")),
        ("GET", "/v1/objects?class=Article&limit=5", Target("weaviate", "get", "Article")),
        ("GET", "/v1/objects/Article/36ddd591", Target("weaviate", "get", "Article")),
        ("DELETE", "/v1/objects/Article/36ddd591", Target("weaviate", "delete", "Article")),
        ("PATCH", "/v1/objects/36ddd591", Target("weaviate", "update")),
        ("POST", "/v1/batch/objects", Target("weaviate", "BATCH create")),
        ("DELETE", "/v1/batch/objects", Target("weaviate", "delete")),
        ("POST", "/v2/vectordb/entities/search", Target("milvus", "search", None, None, "limit")),
        ("POST", "/v2/vectordb/entities/insert", Target("milvus", "insert")),
        ("POST", "/v2/vectordb/entities/query", Target("milvus", "query")),
        ("POST", "/v2/vectordb/entities/upsert", Target("milvus", "upsert")),
        ("POST", "/v2/vectordb/entities/delete", Target("milvus", "delete")),
    ],
)
def test_recognised(method, target, expected):
    assert Routes().target(method, target) == expected
    assert VectorDBLayer().wants(method, target) is True


@pytest.mark.parametrize(
    ("method", "target"),
    [
        ("GET", "/api/v1/collections/5f0c/query"),
        ("POST", "/api/v1/collections/5f0c/count"),
        ("GET", "/api/v1/heartbeat"),
        ("GET", "/collections/docs"),
        ("DELETE", "/collections/docs/points"),
        ("POST", "/collections/docs/points/payload"),
        ("POST", "/v1/objects/validate"),
        ("PUT", "/v1/objects"),
        ("GET", "/v1/objects/Article/1/references/x"),
        ("GET", "/v1/graphql"),
        ("GET", "/v2/vectordb/entities/search"),
        ("POST", "/v2/vectordb/collections/create"),
        ("POST", "/v1/chat/completions"),
        ("POST", "/api/chat"),
    ],
)
def test_not_recognised(method, target):
    assert VectorDBLayer().wants(method, target) is False


def test_system_option_restricts_to_one_vendor():
    layer = VectorDBLayer({"system": "qdrant"})
    assert layer.wants("POST", "/collections/docs/points/search") is True
    assert layer.wants("POST", "/api/v1/collections/5f0c/query") is False
    assert layer.wants("POST", "/v1/graphql") is False


def test_unknown_system_is_refused():
    with pytest.raises(ValueError, match="vectordb.system"):
        VectorDBLayer({"system": "pinecone"})


def test_escaped_collection_names_and_proxy_targets():
    assert Routes().target("POST", "/collections/my%20docs/points/search").collection == "my docs"
    assert (
        Routes().target("POST", "http://qdrant:6333/collections/d/points/search").system == "qdrant"
    )


def test_capture_prefixes_are_short():
    prefixes = VectorDBLayer().capture_prefixes()
    assert "/v2/vectordb/entities/" in prefixes and "/collections/" in prefixes
    assert len(prefixes) <= 16 and all(len(p.encode()) <= 31 for p in prefixes)
