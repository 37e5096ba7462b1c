"""A PostgreSQL exchange as a database span (semantic conventions for SQL databases):
sanitized text, operation and collection, rows returned, SQLSTATE on error. Bind
parameters and error texts never leave the parser (they carry values)."""

from __future__ import annotations

from ..base import ConnInfo, NeutralSpan, Role, SpanKind, StatusCode
from ..common import network_attributes, server_attributes
from .pair import PgRecord
from .sql import operation_of_tag, rows_of_tag

SYSTEM = "postgresql"
_COUNTED = frozenset({"SELECT", "FETCH"})  # tags whose count is rows returned


def to_spans(record: PgRecord, conn: ConnInfo) -> list[NeutralSpan]:
    request, response = record.request, record.response
    attrs = network_attributes(conn, SYSTEM)
    server_attributes(conn, attrs=attrs)
    attrs["db.system.name"] = SYSTEM
    if record.database:
        attrs["db.namespace"] = record.database
    statement = request.statement
    operation = collection = summary = None
    if statement is not None:
        operation, collection, summary = (statement.operation, statement.collection,
                                          statement.summary)
        if statement.text:
            attrs["db.query.text"] = statement.text
        if statement.count > 1:
            attrs["db.operation.batch.size"] = statement.count
    elif request.kind == "E":
        attrs["postgresql.statement.unknown"] = True  # prepared before capture began
    if request.statement_name:
        attrs["postgresql.statement.name"] = request.statement_name
    tag_op = operation_of_tag(record.tags[0]) if record.tags else None
    if operation is None and tag_op:
        operation = tag_op
    if operation:
        attrs["db.operation.name"] = operation
    if collection:
        attrs["db.collection.name"] = collection
    if summary:
        attrs["db.query.summary"] = summary
    rows = record.rows
    if not rows and len(record.tags) == 1 and tag_op in _COUNTED:
        rows = rows_of_tag(record.tags[0]) or 0
    if rows or tag_op in _COUNTED:
        attrs["db.response.returned_rows"] = rows
    if request.top_k is not None and request.top_k >= 0:
        attrs["db.vector.query.top_k"] = request.top_k
    status = StatusCode.UNSET
    if record.code:
        attrs["db.response.status_code"] = record.code
        attrs["error.type"] = record.code
        status = StatusCode.ERROR
    elif record.error:
        attrs["error.type"] = record.error
        status = StatusCode.ERROR
    if summary:
        name = summary
    elif operation:
        name = f"{operation} {collection}" if collection else operation
    else:
        name = SYSTEM
    end = (response or request).end_ns
    return [NeutralSpan(
        name=name, kind=SpanKind.SERVER if conn.role == Role.SERVER else SpanKind.CLIENT,
        start_ns=request.start_ns, end_ns=max(end, request.start_ns), conn=conn,
        attributes=attrs, status=status, protocol="postgres")]
