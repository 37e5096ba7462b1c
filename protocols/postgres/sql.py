"""SQL text as spans may carry it: literals replaced by `?`, comments left out, and what
the statement is (operation, collection, summary, a nearest-neighbour query's LIMIT)."""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

# One token per match, tried in order. Strings (with E'', B'', X'', N'', U&'' prefixes)
# and numbers are literals; `$1` is a parameter and stays; `$tag$` opens a dollar-quoted
# string, whose end is searched for by hand (the tag must repeat). An unterminated string
# or comment runs to the end: a query cut by the capture still hides its tail.
_TOKEN = re.compile(
    r"""(?P<ws>\s+)
    |(?P<lc>--[^\n]*)
    |(?P<bc>/\*)
    |(?P<estr>[eE]'(?:[^'\\]|\\.|'')*(?:'|\Z))
    |(?P<str>(?:[bBxXnN]|[uU]&)?'(?:[^']|'')*(?:'|\Z))
    |(?P<param>\$\d+)
    |(?P<dollar>\$(?:[A-Za-z_\x80-\uffff][A-Za-z_0-9\x80-\uffff]*)?\$)
    |(?P<qid>(?:[uU]&)?"(?:[^"]|"")*(?:"|\Z))
    |(?P<num>0[xX][0-9a-fA-F_]+|0[oO][0-7_]+|0[bB][01_]+
        |(?:\d[\d_]*(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?)
    |(?P<word>[A-Za-z_\x80-\uffff][A-Za-z_0-9$\x80-\uffff]*)
    |(?P<op>[+\-*/<>=~!@#%^&|`?]+)
    |(?P<other>.)""",
    re.S | re.X,
)

# pgvector's distance operators (L2, cosine, negative inner product, L1) and the
# bit/Hamming and Jaccard ones: an ORDER BY on one of them with a LIMIT is a k-NN query
DISTANCE_OPERATORS = frozenset({"<->", "<=>", "<#>", "<+>", "<~>", "<%>"})

# statements whose first keyword names the operation and the word(s) after which the
# collection follows
_TARGET_AFTER = {
    "SELECT": ("FROM",), "INSERT": ("INTO",), "DELETE": ("FROM",), "MERGE": ("INTO",),
    "UPDATE": (), "COPY": (), "TRUNCATE": (), "TABLE": (),
}
_DDL = frozenset({"CREATE", "DROP", "ALTER"})
_SKIP = frozenset({"ONLY", "TABLE", "IF", "NOT", "EXISTS", "UNLOGGED", "TEMP", "TEMPORARY",
                   "LATERAL", "CONCURRENTLY"})
_QUERY_KEYWORDS = frozenset({"SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "VALUES",
                             "TABLE"})
MAX_SUMMARY = 255  # semconv: a summary is short


@dataclass(frozen=True, slots=True)
class Statement:
    """What one SQL text is, once sanitized. `top_k` is the LIMIT of a nearest-neighbour
    query: an int, or -n when it is the bound parameter $n (read from the Bind)."""

    text: str  # literals replaced by ?, comments out, whitespace collapsed
    operation: str | None
    collection: str | None
    summary: str | None
    count: int  # statements in the text (a simple query may carry several)
    top_k: int | None


def _scan(text: str) -> tuple[list[tuple[str, str]], str]:
    """The tokens but whitespace and comments, literals as ('lit', '?'); and the text
    with each literal replaced by ?, comments left out and whitespace collapsed."""
    tokens: list[tuple[str, str]] = []
    out: list[str] = []
    pos, end = 0, len(text)
    match = _TOKEN.match
    while pos < end:
        m = match(text, pos)
        if m is None:  # unreachable: `other` takes any character
            break
        kind = m.lastgroup
        pos = m.end()
        if kind == "ws" or kind == "lc":
            out.append(" ")
            continue
        if kind == "bc":  # nested /* */ comments
            depth = 1
            while depth and pos < end:
                close, open_ = text.find("*/", pos), text.find("/*", pos)
                if close < 0:
                    pos = end
                    break
                if 0 <= open_ < close:
                    depth, pos = depth + 1, open_ + 2
                else:
                    depth, pos = depth - 1, close + 2
            out.append(" ")
            continue
        if kind == "dollar":
            tag = m.group()
            close = text.find(tag, pos)
            pos = end if close < 0 else close + len(tag)
            kind = "str"
        if kind == "num":  # kept in the tokens (a LIMIT is read from them), not in the text
            tokens.append(("num", m.group()))
            out.append("?")
        elif kind in ("str", "estr"):
            tokens.append(("lit", "?"))
            out.append("?")
        else:
            value = m.group()
            tokens.append((kind, value))  # type: ignore[arg-type]
            out.append(value)
    return tokens, _SPACES.sub(" ", "".join(out)).strip()


_SPACES = re.compile(r"\s{2,}")


def _name(tokens: list[tuple[str, str]], i: int) -> str | None:
    """A possibly qualified name (schema.table, "Quoted") starting at token i."""
    names: list[str] = []
    while i < len(tokens):
        kind, value = tokens[i]
        if kind == "word":
            names.append(value)
        elif kind == "qid":
            names.append(value[value.index('"') + 1 : -1].replace('""', '"')
                         if value.endswith('"') else value)
        else:
            break
        if i + 1 < len(tokens) and tokens[i + 1][1] == ".":
            i += 2
            continue
        break
    return ".".join(names) or None


def _operation(tokens: list[tuple[str, str]]) -> tuple[str | None, str | None]:
    """The statement's operation and its first collection."""
    if not tokens or tokens[0][0] != "word":
        if tokens and tokens[0][1] == "(":  # (SELECT ...) UNION ...
            inner = [t for t in tokens if t[0] == "word"]
            if inner and inner[0][1].upper() == "SELECT":
                tokens = tokens[1:]
            else:
                return None, None
        else:
            return None, None
    op = tokens[0][1].upper()
    start = 1
    if op == "WITH":  # the statement after the CTEs, at depth 0
        depth = 0
        for j in range(1, len(tokens)):
            value = tokens[j][1]
            if value == "(":
                depth += 1
            elif value == ")":
                depth -= 1
            elif depth == 0 and tokens[j][0] == "word" and value.upper() in _QUERY_KEYWORDS:
                op, start = value.upper(), j + 1
                break
        else:
            return "WITH", None
    if op in _DDL:
        # CREATE [UNIQUE] INDEX ... ON t; CREATE/DROP/ALTER TABLE [IF [NOT] EXISTS] t
        words = [(j, tokens[j][1].upper()) for j in range(start, min(len(tokens), start + 12))
                 if tokens[j][0] == "word"]
        kinds = [w for _, w in words]
        if "INDEX" in kinds and "ON" in kinds:
            j = next(j for j, w in words if w == "ON") + 1
            while j < len(tokens) and tokens[j][0] == "word" and tokens[j][1].upper() in _SKIP:
                j += 1
            return op, _name(tokens, j)
        if kinds and kinds[0] in ("TABLE", "UNLOGGED", "TEMP", "TEMPORARY"):
            j = start
            while j < len(tokens) and tokens[j][0] == "word" and tokens[j][1].upper() in _SKIP:
                j += 1
            return op, _name(tokens, j)
        return op, None
    after = _TARGET_AFTER.get(op)
    if after is None:
        return op, None
    j = start
    if after:  # the first keyword of `after` at depth 0
        depth = 0
        while j < len(tokens):
            kind, value = tokens[j]
            if value == "(":
                depth += 1
            elif value == ")":
                depth -= 1
            elif depth == 0 and kind == "word" and value.upper() in after:
                j += 1
                break
            j += 1
        else:
            return op, None
    while j < len(tokens) and tokens[j][0] == "word" and tokens[j][1].upper() in _SKIP:
        j += 1
    if j < len(tokens) and tokens[j][1] == "(":  # FROM (subquery), COPY (query)
        return op, None
    return op, _name(tokens, j)


def _top_k(tokens: list[tuple[str, str]]) -> int | None:
    """LIMIT of `ORDER BY <column> <distance operator> <vector> ... LIMIT k` at depth 0:
    k, or -n for `LIMIT $n`."""
    depth, ordered = 0, False
    for j, (kind, value) in enumerate(tokens):
        if value == "(":
            depth += 1
        elif value == ")":
            depth -= 1
        elif depth == 0 and kind == "word" and value.upper() == "ORDER":
            ordered = False
            k = j + 2
            while k < len(tokens) and tokens[k][1] != ";":
                word = tokens[k][1].upper() if tokens[k][0] == "word" else ""
                if word in ("LIMIT", "OFFSET", "FETCH", "FOR"):
                    break
                if tokens[k][0] == "op" and tokens[k][1] in DISTANCE_OPERATORS:
                    ordered = True
                k += 1
        elif ordered and depth == 0 and kind == "word" and value.upper() == "LIMIT":
            if j + 1 < len(tokens):
                nkind, nvalue = tokens[j + 1]
                if nkind == "param":
                    return -int(nvalue[1:]) if nvalue[1:].isdigit() else None
                if nkind == "num" and nvalue.isdigit() and len(nvalue) <= 9:
                    return int(nvalue)  # not a secret: it is what top_k reports
            return None
    return None


def _split(tokens: list[tuple[str, str]]) -> list[list[tuple[str, str]]]:
    parts: list[list[tuple[str, str]]] = [[]]
    for token in tokens:
        if token[1] == ";":
            parts.append([])
        else:
            parts[-1].append(token)
    return [p for p in parts if p]


@functools.lru_cache(maxsize=2048)  # statements repeat (prepared, or the same text): once each
def analyze(raw: str) -> Statement:
    tokens, text = _scan(raw)
    statements = _split(tokens)
    if not statements:
        return Statement(text, None, None, None, 0, None)
    ops = [_operation(s) for s in statements]
    summaries = [" ".join(x for x in op if x) for op in ops if op[0]]
    summary = "; ".join(summaries)[:MAX_SUMMARY] or None
    top_k = None
    if len(statements) == 1:
        op, collection = ops[0]
        top_k = _top_k(statements[0])
    else:
        names = {o for o, _ in ops if o}
        collections = {c for _, c in ops}
        op = ("BATCH " + names.pop()) if len(names) == 1 else "BATCH"
        collection = collections.pop() if len(collections) == 1 else None
    return Statement(text, op, collection, summary, len(statements), top_k)


def operation_of_tag(tag: str) -> str | None:
    """The command of a CommandComplete tag (`SELECT 5`, `INSERT 0 1`, `CREATE TABLE`)."""
    words = tag.split()
    while words and words[-1].isdigit():
        words.pop()
    return " ".join(words) or None


def rows_of_tag(tag: str) -> int | None:
    """The row count a CommandComplete tag ends with (SELECT, INSERT, UPDATE, DELETE,
    MERGE, FETCH, MOVE, COPY)."""
    last = tag.rpartition(" ")[2]
    return int(last) if last.isdigit() and len(last) <= 18 else None
