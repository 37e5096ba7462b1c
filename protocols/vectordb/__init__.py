"""The vector-database layer: Chroma, Qdrant, Weaviate and Milvus REST calls inside HTTP,
as database spans (db.system.name, db.collection.name, db.operation.name...).

Options (`receivers.ebpf.protocols.vectordb`):
  system: chroma | qdrant | weaviate | milvus: recognise only that vendor's paths (when
    another vendor's path shape would claim requests that are not its own).

Chroma's data paths name a collection by its id; the name comes in the answer to creating
or fetching it. The layer remembers the last COLLECTION_NAMES of those pairs it saw, so a
query says `db.collection.name: docs`, not a UUID (which stays when the pair was not seen:
the collection was opened before the agent started).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..base import Instrument, NeutralSpan
from ..common import BoundedTable
from ..layers import HTTPExchange, HTTPLayer
from ..options import Schema, Text
from . import spans
from .bodies import read_request, read_response
from .routes import SYSTEMS, Routes

CAPTURE_PREFIXES = (
    "/api/v1/collections/",
    "/api/v2/tenants/",
    "/collections/",
    "/v1/graphql",
    "/v1/batch/objects",
    "/v1/objects",
    "/v2/vectordb/entities/",
)


COLLECTION_NAMES = 4096  # Chroma collection ids -> names remembered


class VectorDBLayer(HTTPLayer):
    name: ClassVar[str] = "vectordb"
    instruments: ClassVar[Mapping[str, Instrument]] = spans.INSTRUMENTS

    default_enabled = True
    default_rank = 20
    option_schema: ClassVar[Schema] = {
        "system": Text(None, "the one database every request goes to (else from the path)",
                       choices=SYSTEMS),
    }

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.routes = Routes(self.options["system"])
        # Chroma collection ids -> names; the least recently used go
        self.collection_names = BoundedTable(COLLECTION_NAMES)

    def wants(self, method: str, target: str) -> bool:
        return self.routes.target(method, target) is not None

    def capture_prefixes(self) -> tuple[str, ...]:
        # query responses (documents, vectors) and upserts are large; rows are counted
        # only in a whole response
        return CAPTURE_PREFIXES

    def enrich(self, exchange: HTTPExchange, span: NeutralSpan) -> None:
        target = self.routes.target(exchange.method, exchange.target)
        if target is None:
            return
        call = read_request(target, exchange.request_body)
        read_response(target, exchange.status, exchange.response_body, call)
        self._name_collection(call)
        spans.enrich(exchange, span, target, call)

    def _name_collection(self, call) -> None:
        names = self.collection_names
        if call.collection_id and call.collection:
            names[call.collection_id] = call.collection
        elif call.collection in names:
            call.collection = names[call.collection]


__all__ = ["VectorDBLayer"]
