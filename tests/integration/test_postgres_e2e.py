"""A real PostgreSQL end to end: Debian's server (initdb + postgres, run as the `postgres`
user, since initdb refuses root) and two real clients, psycopg 3 (simple query, extended
protocol, server-side prepared statements, pipeline mode) and asyncpg (named prepared
statements, binary parameters), each in its own process, the real agent between them.
Literals of simple queries and bind parameters are planted and never exported.

pgvector is not packaged for offline installs here; the nearest-neighbour queries use
PostgreSQL's own `<->` distance on points (a GiST k-NN scan), which the parser treats as
it treats pgvector's operators.

Run as a client: python -m tests.integration.test_postgres_e2e psycopg|asyncpg PORT
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.ports import free_port
from tests.support.processes import stop_process

from .conftest import require_peer

pytestmark = pytest.mark.kernel

SERVER, CLIENT = 2, 3
REPO = Path(__file__).resolve().parents[2]
USER = "postgres"
DB = "shop"
PLANTED_LITERAL = "planted-literal-4f1c"
PLANTED_BIND = "planted-bind-9d27"
START_TIMEOUT_S = 60.0
CLIENT_TIMEOUT_S = 60.0


def _bin() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"))
    return Path(found[-1]).parent if found else None


def _unavailable() -> str | None:
    if _bin() is None:
        return "PostgreSQL is not installed (apt-get install postgresql; make deps does)"
    if shutil.which("setpriv") is None:
        return "setpriv (util-linux) is missing"
    try:
        import asyncpg  # noqa: F401
        import psycopg  # noqa: F401
    except ImportError as e:
        return f"{e.name} is missing (pyproject's test extra)"
    return None


def _as_postgres(cmd: list[str]) -> list[str]:
    return ["setpriv", f"--reuid={USER}", f"--regid={USER}", "--init-groups", *cmd]


@contextlib.contextmanager
def postgres_server() -> Iterator[int]:
    """A fresh cluster on a free 127.0.0.1 port, database `shop`; stopped after."""
    bindir = _bin()
    assert bindir is not None
    work = Path(tempfile.mkdtemp(prefix="otel-ebpf-pg-"))
    shutil.chown(work, USER, USER)
    data = work / "data"
    log = work / "server.log"
    subprocess.run(_as_postgres([str(bindir / "initdb"), "-D", str(data), "-U", USER,
                                 "--auth=trust", "-E", "UTF8", "--locale=C"]),
                   check=True, capture_output=True, timeout=120)
    port = free_port()
    proc = subprocess.Popen(
        _as_postgres([str(bindir / "postgres"), "-D", str(data), "-h", "127.0.0.1",
                      "-p", str(port), "-k", str(work), "-c", "fsync=off"]),
        stdout=log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
    try:
        deadline = time.monotonic() + START_TIMEOUT_S
        while True:
            ready = subprocess.run([str(bindir / "pg_isready"), "-h", "127.0.0.1", "-p",
                                    str(port)], capture_output=True, timeout=30)
            if ready.returncode == 0:
                break
            if proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"postgres did not start:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        subprocess.run(_as_postgres([str(bindir / "createdb"), "-h", "127.0.0.1", "-p",
                                     str(port), "-U", USER, DB]),
                       check=True, capture_output=True, timeout=60)
        yield port
    finally:
        stop_process(proc, group=True)
        shutil.rmtree(work, ignore_errors=True)


def run_client(kind: str, port: int) -> dict:
    proc = subprocess.run([sys.executable, "-m", "tests.integration.test_postgres_e2e", kind,
                           str(port)], cwd=REPO, capture_output=True, text=True,
                          timeout=CLIENT_TIMEOUT_S)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture
def postgres():
    require_peer(_unavailable())
    with postgres_server() as port:
        yield port


def _db(spans, kind):
    return [s for s in spans if s.kind == kind and s.attrs.get("db.system.name") == "postgresql"]


def test_psycopg_and_asyncpg_give_postgres_spans(start_agent, postgres, tmp_path):
    agent = start_agent([postgres])
    got = run_client("psycopg", postgres)
    assert got == {"nearest": [1, 2], "pipeline": [3, 1], "prepared": 5, "error": "42P01"}
    got = run_client("asyncpg", postgres)
    assert got == {"nearest": [3, 2, 1], "rows": 3}

    def ready(spans):
        names = {s.name for s in _db(spans, CLIENT)} & {s.name for s in _db(spans, SERVER)}
        return {"SELECT items", "UPDATE items", "SELECT missing", "INSERT items"} <= names \
            and sum(s.attrs.get("db.vector.query.top_k") == 3 for s in _db(spans, CLIENT)) >= 1

    spans = agent.wait_for(ready, timeout_s=30)
    client, server = _db(spans, CLIENT), _db(spans, SERVER)
    (tmp_path / "postgres-spans.txt").write_text("\n".join(  # what to read when this fails
        f"{s.kind} {s.name} {s.status} {s.attrs}" for s in client + server))
    assert ready(spans), sorted({(s.kind, s.name) for s in client + server})
    for side in (client, server):
        assert all(s.attrs["db.namespace"] == DB for s in side)
        # the simple query's literals are gone, the distance operator stays
        (nn,) = [s for s in side if s.attrs.get("db.vector.query.top_k") == 2]
        assert nn.attrs["db.query.text"] == (
            "SELECT id FROM items WHERE note <> ? ORDER BY pos <-> point ? LIMIT ?")
        assert nn.attrs["db.response.returned_rows"] == 2 and nn.name == "SELECT items"
        # extended protocol: the LIMIT a parameter bound (psycopg text, asyncpg binary)
        bound = [s for s in side if s.attrs.get("db.query.text", "").endswith("LIMIT $2")]
        assert {s.attrs.get("db.vector.query.top_k") for s in bound} == {1, 3}, bound
        err = [s for s in side if s.name == "SELECT missing"]
        assert err and all(s.attrs["error.type"] == "42P01" and s.status.get("code") == 2
                           for s in err)
        updates = [s for s in side if s.name == "UPDATE items"]
        assert updates and all(s.attrs["db.query.text"] == "UPDATE items SET note = $1 WHERE id = $2"
                               for s in updates)
        # psycopg's prepared statement ran 5 times under its own name
        named = [s for s in side if s.attrs.get("postgresql.statement.name", "").startswith("_pg3")]
        assert len(named) >= 1
        # asyncpg's prepared statements ran under theirs
        assert any(s.attrs.get("postgresql.statement.name", "").startswith("__asyncpg")
                   for s in side)
    # a client span and its server span share the trace
    c = next(s for s in client if s.name == "SELECT missing")
    s = next(s for s in server if s.name == "SELECT missing")
    assert c.trace_id == s.trace_id
    exported = agent.traces.read_text()
    assert PLANTED_LITERAL not in exported and PLANTED_BIND not in exported


# ---- the clients, each run in its own process -------------------------------------

SETUP = (
    "CREATE TABLE items (id int PRIMARY KEY, pos point, note text);"
    "CREATE INDEX ON items USING gist (pos);"
    "INSERT INTO items VALUES (1, '(0,0)', 'a'), (2, '(1,1)', 'b'), (3, '(5,5)', 'c')"
)


def _psycopg(port: int) -> dict:
    import psycopg
    out: dict = {}
    dsn = f"host=127.0.0.1 port={port} user={USER} dbname={DB} sslmode=prefer"
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(SETUP)  # no parameters: the simple query protocol, three statements
        rows = conn.execute(
            f"SELECT id FROM items WHERE note <> '{PLANTED_LITERAL}' "
            "ORDER BY pos <-> point '(0.1,0.1)' LIMIT 2").fetchall()
        out["nearest"] = [r[0] for r in rows]
        with conn.pipeline():
            cur1 = conn.execute("SELECT id FROM items ORDER BY pos <-> %s::point LIMIT %s",
                                ("(4,4)", 1))
            conn.execute("UPDATE items SET note = %s WHERE id = %s", (PLANTED_BIND, 1))
            cur2 = conn.execute("SELECT count(*) FROM items WHERE note = %s", (PLANTED_BIND,))
        out["pipeline"] = [cur1.fetchone()[0], cur2.fetchone()[0]]
        total = 0
        for i in range(5):  # prepared on the server under a name psycopg picks
            total += conn.execute("SELECT id FROM items WHERE id = %s", (1,),
                                  prepare=True).fetchone()[0] + i - i
        out["prepared"] = total
        try:
            conn.execute("SELECT * FROM missing")
        except psycopg.errors.UndefinedTable as e:
            out["error"] = e.sqlstate
    return out


def _asyncpg(port: int) -> dict:
    import asyncio

    import asyncpg

    async def main() -> dict:
        conn = await asyncpg.connect(host="127.0.0.1", port=port, user=USER, database=DB,
                                     ssl="prefer")
        try:
            stmt = await conn.prepare(
                "SELECT id FROM items ORDER BY pos <-> $1::point LIMIT $2")
            rows = await stmt.fetch(asyncpg.Point(6, 6), 3)
            await conn.execute("UPDATE items SET note = $1 WHERE id = $2", PLANTED_BIND, 2)
            await conn.execute("INSERT INTO items VALUES ($1, $2, $3)", 4,
                               asyncpg.Point(9, 9), PLANTED_BIND)
            count = await conn.fetchval("SELECT count(*) FROM items WHERE id < $1", 4)
            with contextlib.suppress(asyncpg.UndefinedTableError):
                await conn.fetch("SELECT * FROM missing")
            return {"nearest": [r["id"] for r in rows], "rows": count}
        finally:
            await conn.close()

    return asyncio.run(main())


if __name__ == "__main__":
    kind, port = sys.argv[1], int(sys.argv[2])
    os.environ.setdefault("PGCONNECT_TIMEOUT", "20")
    print(json.dumps(_psycopg(port) if kind == "psycopg" else _asyncpg(port)))
