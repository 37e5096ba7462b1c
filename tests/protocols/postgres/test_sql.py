"""SQL text as spans carry it: literals out, comments out, operators and parameters kept;
operation, collection, summary and a nearest-neighbour query's LIMIT."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.postgres.sql import analyze, operation_of_tag, rows_of_tag


@pytest.mark.parametrize(("raw", "text"), [
    ("SELECT * FROM t WHERE a = 'x''y' AND b = 42", "SELECT * FROM t WHERE a = ? AND b = ?"),
    ("SELECT E'it\\'s', e'\\\\', B'101', X'ff', N'n', U&'d\\0061t'", "SELECT ?, ?, ?, ?, ?, ?"),
    ("SELECT $$a 'b' c$$, $fn$ x $$ y $fn$", "SELECT ?, ?"),
    ("SELECT 1.5e-3, .5, 0x1F, 1_000 -- secret comment\nFROM t", "SELECT ?, ?, ?, ? FROM t"),
    ("/* outer /* inner */ still */ SELECT t1.c2 FROM t1", "SELECT t1.c2 FROM t1"),
    ("SELECT \"weird 'name'\" FROM \"T\"", "SELECT \"weird 'name'\" FROM \"T\""),
    ("SELECT 'never closed secret", "SELECT ?"),
    ("SELECT $1, $2::int", "SELECT $1, $2::int"),
    ("SELECT id FROM items ORDER BY emb <#> '[1,2]' LIMIT 3",
     "SELECT id FROM items ORDER BY emb <#> ? LIMIT ?"),
    ("SELECT id FROM items ORDER BY emb <+> $1", "SELECT id FROM items ORDER BY emb <+> $1"),
])
def test_literals_and_comments_are_left_out(raw, text):
    assert analyze(raw).text == text


@pytest.mark.parametrize(("raw", "op", "collection"), [
    ("select * from public.users u join orders o on true", "SELECT", "public.users"),
    ("INSERT INTO logs (a) VALUES (1)", "INSERT", "logs"),
    ("UPDATE ONLY accounts SET n = 1", "UPDATE", "accounts"),
    ("DELETE FROM s.t WHERE x IN (SELECT y FROM z)", "DELETE", "s.t"),
    ("WITH w AS (SELECT 1 FROM a) INSERT INTO b SELECT * FROM w", "INSERT", "b"),
    ("SELECT (SELECT max(x) FROM inner_t) FROM outer_t", "SELECT", "outer_t"),
    ("SELECT 1", "SELECT", None),
    ("COPY items (id) FROM STDIN", "COPY", "items"),
    ("TRUNCATE TABLE t", "TRUNCATE", "t"),
    ("CREATE UNIQUE INDEX i ON ONLY t (a)", "CREATE", "t"),
    ("DROP TABLE IF EXISTS old", "DROP", "old"),
    ("BEGIN", "BEGIN", None),
    ("", None, None),
])
def test_operation_and_collection(raw, op, collection):
    s = analyze(raw)
    assert (s.operation, s.collection) == (op, collection)


def test_top_k_of_nearest_neighbour_queries():
    assert analyze("SELECT * FROM i ORDER BY e <-> '[1]' LIMIT 10").top_k == 10
    assert analyze("SELECT * FROM i ORDER BY e <=> $1 LIMIT $3").top_k == -3  # from the Bind
    assert analyze("SELECT * FROM i ORDER BY id LIMIT 10").top_k is None  # not a k-NN query
    assert analyze("SELECT * FROM (SELECT * FROM i ORDER BY e <-> $1 LIMIT 4) s").top_k is None


def test_tags():
    assert operation_of_tag("INSERT 0 5") == "INSERT" and rows_of_tag("INSERT 0 5") == 5
    assert operation_of_tag("CREATE TABLE") == "CREATE TABLE" and rows_of_tag("BEGIN") is None


SECRET = "Zq9secretZq9"


@settings(max_examples=300, deadline=None)
@given(st.sampled_from([
    "'{s}'", "E'{s}'", "$${s}$$", "$t${s}$t$", "-- {s}", "/* {s} */", "'{s}", "E'\\'{s}'",
    "U&'{s}'", "x'{s}'",
]), st.text(alphabet="abc ,()=<>+#", max_size=20), st.text(alphabet="abc ,()=", max_size=20))
def test_a_planted_literal_never_survives(form, before, after):
    raw = f"SELECT a FROM t WHERE {before} = {form.format(s=SECRET)} {after}"
    assert SECRET not in analyze(raw).text
