"""Query values redacted on every span before any exporter sees it: url.query and the query
of url.full, whatever the protocol; and the rule that says which names are secret-looking.

The parsers already replace values of some secret-looking parameters (api_key, token, sig);
this step adds a default list of credential names (password, key, secret, auth...) so no
protocol forgets one, plus the names a deployment configures (`session`, `email`), or every
value (`"*"`), for URLs whose parameters are personal data rather than credentials.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable

from otel_ebpf.protocols.base import NeutralSpan

REDACTED = "REDACTED"  # the value semconv's url.query redaction uses
ALL = "*"

# words that make a name (query parameter, option, header, variable) secret-looking, once
# the name is cut into words at `-`, `_`, `.`, spaces and camelCase humps: `X-Api-Key`,
# `AWS_SECRET_ACCESS_KEY`, `hfToken`, `--db-password`; whole words, so `keyboard`,
# `tokenizer` and `max_tokens` are not secrets
SECRET_WORDS = frozenset({
    "key", "apikey", "token", "secret", "password", "passwd", "pwd", "pass", "passphrase",
    "auth", "authorization", "cookie", "credential", "credentials", "session", "sessionid",
    "sid", "signature", "sig", "bearer", "jwt", "otp", "privatekey", "accesskey",
    "secretkey", "apitoken", "authtoken", "accesstoken", "refreshtoken", "clientsecret",
    "awsaccesskeyid",
})
# ... or a word that ends like one glued from two (`xauthtoken`, `clientsecret`, `mypassword`)
_SECRET_SUFFIXES = ("token", "secret", "password", "passwd", "apikey")
_WORDS = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


@functools.lru_cache(maxsize=4096)  # names repeat: decide each once
def is_secret_name(name: str) -> bool:
    """Whether a parameter, option, header or variable called `name` may hold a secret."""
    for word in _WORDS.findall(name):
        word = word.lower()
        if word in SECRET_WORDS or word.endswith(_SECRET_SUFFIXES):
            return True
    return False


class QueryRedactor:
    """Replaces the values of secret-looking query parameters (is_secret_name), and of the
    configured ones (case-insensitive, exact names; "*": every value)."""

    def __init__(self, names: Iterable[str] = ()) -> None:
        self.names = frozenset(n.lower() for n in names)
        self.all = ALL in self.names

    def _secret(self, key: str) -> bool:
        return key.lower() in self.names or is_secret_name(key)

    def query(self, query: str) -> str:
        params = query.split("&")
        for i, param in enumerate(params):
            key, eq, value = param.partition("=")
            # a parameter without "=" is a bare word: with "*" it may itself be the secret
            if self.all and (value or not eq) and param and value != REDACTED:
                params[i] = f"{key}={REDACTED}" if eq else REDACTED
            elif eq and value and value != REDACTED and self._secret(key):
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
