"""An HTTP span made a database span (DB semantic conventions, vector-database page), and
the db.client.operation.duration measurement of CLIENT spans.

error.type: the HTTP status code for 4xx/5xx answers; for errors a database reports under
a 200, Milvus's numeric `code` and "graphql_error" for Weaviate GraphQL `errors`.
"""

from __future__ import annotations

from collections.abc import Mapping

from ..base import AttributeValue, Instrument, Measurement, NeutralSpan, SpanKind, StatusCode
from ..layers import HTTPExchange
from .bodies import Call
from .routes import Target

# semconv-advised bucket boundaries (database-metrics.md)
DURATION_BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 10.0)
CLIENT_DURATION = "db.client.operation.duration"
INSTRUMENTS: Mapping[str, Instrument] = {
    CLIENT_DURATION: Instrument("s", "Duration of database client operations.", DURATION_BUCKETS),
}
_METRIC_KEYS = (
    "db.system.name",
    "db.collection.name",
    "db.namespace",
    "db.operation.name",
    "db.response.status_code",
    "error.type",
    "server.address",
    "server.port",
)


def enrich(exchange: HTTPExchange, span: NeutralSpan, target: Target, call: Call) -> None:
    attrs = span.attributes
    values: dict[str, AttributeValue | None] = {
        "db.system.name": target.system,
        "db.operation.name": call.operation,
        "db.collection.name": call.collection,
        "db.namespace": call.namespace,
        "db.vector.query.top_k": call.top_k,
        "db.operation.batch.size": call.batch_size,
        "db.response.returned_rows": call.returned_rows,
        # the vector-database page: the HTTP status is the database's status code
        "db.response.status_code": str(exchange.status) if exchange.status is not None else None,
    }
    attrs.update({key: value for key, value in values.items() if value is not None})
    if exchange.status is not None and exchange.status >= 400:
        attrs["error.type"] = str(exchange.status)
    elif call.error_type is not None:
        attrs["error.type"] = call.error_type
        span.status = StatusCode.ERROR
    if "server.address" not in attrs and exchange.server_address:
        attrs["server.address"] = exchange.server_address
    if "server.port" not in attrs and exchange.server_port:
        attrs["server.port"] = exchange.server_port
    # semconv: "{db.operation.name} {db.collection.name}", the operation alone without one
    span.name = f"{call.operation} {call.collection}" if call.collection else call.operation
    if span.kind == SpanKind.CLIENT:
        metric = {key: attrs[key] for key in _METRIC_KEYS if key in attrs}
        span.measurements.append(
            Measurement(CLIENT_DURATION, (span.end_ns - span.start_ns) / 1e9, metric)
        )
