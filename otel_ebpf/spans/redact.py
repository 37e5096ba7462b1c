"""Query values redacted by config (receivers.ebpf.redaction.query_params), on every span
before any exporter sees it: url.query and the query of url.full, whatever the protocol.

The parsers already replace values of secret-looking parameters (api_key, token, sig...);
this adds the names a deployment knows are sensitive (`session`, `email`), or every value
(`"*"`), for URLs whose parameters are personal data rather than credentials.
"""

from __future__ import annotations

from collections.abc import Iterable

from otel_ebpf.protocols.base import NeutralSpan

REDACTED = "REDACTED"  # the value semconv's url.query redaction uses
ALL = "*"


class QueryRedactor:
    """Replaces the values of the configured query parameters (case-insensitive)."""

    def __init__(self, names: Iterable[str]) -> None:
        self.names = frozenset(n.lower() for n in names)
        self.all = ALL in self.names

    def __bool__(self) -> bool:
        return bool(self.names)

    def query(self, query: str) -> str:
        params = query.split("&")
        for i, param in enumerate(params):
            key, eq, value = param.partition("=")
            # a parameter without "=" is a bare word: with "*" it may itself be the secret
            if self.all and (value or not eq) and param and value != REDACTED:
                params[i] = f"{key}={REDACTED}" if eq else REDACTED
            elif eq and value and key.lower() in self.names:
                params[i] = f"{key}={REDACTED}"
        return "&".join(params)

    def url(self, url: str) -> str:
        head, mark, rest = url.partition("?")
        if not mark:
            return url
        query, hash_mark, fragment = rest.partition("#")
        return f"{head}?{self.query(query)}{hash_mark}{fragment}"

    def apply(self, spans: Iterable[NeutralSpan]) -> None:
        for span in spans:
            attrs = span.attributes
            query = attrs.get("url.query")
            if isinstance(query, str) and query:
                attrs["url.query"] = self.query(query)
            full = attrs.get("url.full")
            if isinstance(full, str) and "?" in full:
                attrs["url.full"] = self.url(full)
