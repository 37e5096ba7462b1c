"""The agent's spans reach a real OTLP receiver (rotel) over gRPC and over HTTP/protobuf."""

from __future__ import annotations

import uuid

import pytest

from tests.support.rotel import Rotel

from .conftest import run_client

pytestmark = pytest.mark.kernel


@pytest.fixture
def collector(tmp_path):
    c = Rotel(tmp_path)
    yield c
    c.stop()


@pytest.mark.parametrize("kind", ["otlp", "otlphttp"])
def test_spans_arrive_at_rotel(kind, start_agent, uvicorn_server, collector):
    port = uvicorn_server
    endpoint = (f"127.0.0.1:{collector.grpc_port}" if kind == "otlp"
                else f"http://127.0.0.1:{collector.http_port}")
    settings = {"endpoint": endpoint, "timeout": "5s"}
    if kind == "otlp":
        settings["tls"] = {"insecure": True}
    # the collector's ports are selected too: the agent must still not trace its own exports
    agent = start_agent([port, collector.grpc_port, collector.http_port],
                        exporters={kind: settings})
    path = f"/items/{uuid.uuid4().hex[:12]}"
    run_client("requests", port, [path])
    # rotel prints every span it received; both sides of the request must be there
    text = collector.wait_for(path, "SPAN_KIND_CLIENT", "SPAN_KIND_SERVER", "test-http-app")
    assert text.count(path) >= 2
    assert "http.response.status_code" in text
    assert agent.stop() == 0
    assert not [s for s in agent.spans() if s.attrs.get("url.path", "").startswith("/v1/")]
