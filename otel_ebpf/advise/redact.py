"""What is sent to a model is redacted first: secret-looking assignments in source lines
(by the agent's own rule for secret names), bearer tokens and API keys, URL user info,
and secret query parameters."""

from __future__ import annotations

import re

from otel_ebpf.spans.redact import REDACTED, QueryRedactor, is_secret_name

# name = "value", name: 'value', name="value" (a keyword argument), "name": "value"
_ASSIGN = re.compile(r"""(["']?)([A-Za-z_][\w-]*)\1(\s*[:=]\s*)(["'])(.*?)\4""")
_TOKENS = re.compile(r"\b(sk-[A-Za-z0-9_-]{16,}|ghp_[A-Za-z0-9]{20,}|AKIA[0-9A-Z]{16}|"
                     r"xox[bp]-[A-Za-z0-9-]{10,}|eyJ[\w-]{10,}\.[\w-]{10,}\.[\w-]{10,})")
_BEARER = re.compile(r"(?i)\b(bearer|basic)\s+[A-Za-z0-9._~+/=-]{8,}")
_USERINFO = re.compile(r"(\w+://)[^/\s:@]+:[^/\s@]+@")
_QUERY = re.compile(r"(\?)([^\s#\"']+)")
_queries = QueryRedactor()


def redact(text: str) -> str:
    def assign(m: re.Match) -> str:
        if not is_secret_name(m.group(2)):
            return m.group(0)
        return f"{m.group(1)}{m.group(2)}{m.group(1)}{m.group(3)}{m.group(4)}{REDACTED}{m.group(4)}"

    text = _ASSIGN.sub(assign, text)
    text = _TOKENS.sub(REDACTED, text)
    text = _BEARER.sub(lambda m: f"{m.group(1)} {REDACTED}", text)
    text = _USERINFO.sub(lambda m: f"{m.group(1)}{REDACTED}@", text)
    return _QUERY.sub(lambda m: m.group(1) + _queries.query(m.group(2)), text)
