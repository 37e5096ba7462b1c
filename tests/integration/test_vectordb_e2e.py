"""A real vector DB end to end: Chroma's own server (`chroma run`) and `chromadb.HttpClient`
in separate processes, the real agent between them. The REST calls become DB spans."""

from __future__ import annotations

import pytest

from tests.support.chroma_peer import chroma_server, run_client, unavailable_reason

from .conftest import require_peer

pytestmark = pytest.mark.kernel

SERVER, CLIENT = 2, 3


@pytest.fixture
def chroma(tmp_path):
    require_peer(unavailable_reason())
    with chroma_server(tmp_path) as server:
        yield server


def test_chroma_add_and_query_give_db_spans(start_agent, chroma):
    agent = start_agent([chroma.port])
    ops = run_client(chroma.port)
    assert ops[-1]["ids"] == ["doc-1", "doc-2"]

    def queried(spans):
        return [s for s in spans if s.attrs.get("db.operation.name") == "query"]

    expected = {"create_collection docs", "add docs", "query docs"}

    def named(spans, kind):
        return {s.name for s in spans if s.kind == kind and "db.system.name" in s.attrs}

    # every span asserted below: the earlier operations' may come in a later export batch
    spans = agent.wait_for(lambda s: {x.kind for x in queried(s)} == {CLIENT, SERVER}
                           and all(expected <= named(s, k) for k in (CLIENT, SERVER)))
    for kind in (CLIENT, SERVER):
        (query,) = [s for s in queried(spans) if s.kind == kind]
        a = query.attrs
        assert a["db.system.name"] == "chroma"
        assert a["db.vector.query.top_k"] == 2
        # the data paths name the collection by id: its creation's answer named it "docs"
        assert a["db.collection.name"] == "docs" and query.name == "query docs"
        assert a["db.namespace"] == "default_tenant|default_database"
        assert a["db.response.returned_rows"] == 2
        assert a["http.response.status_code"] == 200
        assert expected <= named(spans, kind), named(spans, kind)
