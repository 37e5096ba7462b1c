"""A real Redis end to end: Debian's redis-server and redis-py in separate processes, the
real agent between them. Commands plain and pipelined, a transaction, pub/sub, over RESP2
and RESP3, become one span per command at both ends; planted keys and values never leave."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from .conftest import REPO

pytestmark = pytest.mark.kernel

SERVER, CLIENT = 2, 3
PLANTED_KEY, PLANTED_VALUE = "planted-key-7f3a", "planted-value-91c2"

# the client, run as its own process: argv = port, protocol, database index
CLIENT_CODE = f"""
import json, sys, time
import redis

port, protocol, db = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
r = redis.Redis(host="127.0.0.1", port=port, db=db, protocol=protocol)
r.set({PLANTED_KEY!r}, {PLANTED_VALUE!r})
assert r.get({PLANTED_KEY!r}) == {PLANTED_VALUE!r}.encode()
r.set("str", "x")
pipe = r.pipeline(transaction=False)
pipe.set("n", 1).get("n").incr("n").lpush("str", "y").get({PLANTED_KEY!r})
replies = pipe.execute(raise_on_error=False)
assert replies[2] == 2 and isinstance(replies[3], redis.ResponseError), replies
tx = r.pipeline(transaction=True)
tx.incr("n").set("t", {PLANTED_VALUE!r})
assert tx.execute() == [3, True]
p = r.pubsub()
p.subscribe("news")
deadline = time.monotonic() + 10
while p.get_message(timeout=0.5) is None and time.monotonic() < deadline:
    pass
r.publish("news", {PLANTED_VALUE!r})
got = None
while got is None and time.monotonic() < deadline:
    got = p.get_message(timeout=0.5)
assert got and got["type"] == "message", got
p.unsubscribe("news")
got = None
while (got is None or got["type"] != "unsubscribe") and time.monotonic() < deadline:
    got = p.get_message(timeout=0.5)
assert got and got["type"] == "unsubscribe", got
p.close()
assert r.dbsize() >= 3
print(json.dumps({{"ok": True}}))
"""


def run_redis_client(port: int, protocol: int, db: int) -> None:
    out = subprocess.run([sys.executable, "-c", CLIENT_CODE, str(port), str(protocol), str(db)],
                         cwd=REPO, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-3000:]
    assert json.loads(out.stdout.strip().splitlines()[-1]) == {"ok": True}


def test_redis_commands_give_db_spans_at_both_ends(start_agent, redis_server):
    agent = start_agent([redis_server])
    run_redis_client(redis_server, 2, 1)
    run_redis_client(redis_server, 3, 2)

    def redis(spans):
        return [s for s in spans if s.attrs.get("db.system.name") == "redis"]

    def complete(spans):
        seen = {(s.kind, s.attrs.get("db.namespace"), s.name) for s in redis(spans)}
        # DBSIZE is the client's last command, on another connection than UNSUBSCRIBE's:
        # both must be in before the spans are read
        return all((kind, db, name) in seen for kind in (CLIENT, SERVER)
                   for db in ("1", "2") for name in ("UNSUBSCRIBE", "DBSIZE"))

    spans = redis(agent.wait_for(complete, timeout_s=40))
    assert complete(spans), sorted({(s.kind, s.name) for s in spans})
    for kind in (CLIENT, SERVER):
        for db in ("1", "2"):
            mine = sorted((s for s in spans if s.kind == kind and s.attrs.get("db.namespace") == db),
                          key=lambda s: s.start)
            names = [s.name for s in mine]
            # the pipeline's five commands, one span each, in order
            at = names.index("LPUSH")
            assert names[at - 3:at + 2] == ["SET", "GET", "INCRBY", "LPUSH", "GET"], names
            (lpush,) = [s for s in mine if s.name == "LPUSH"]
            assert lpush.attrs["db.response.status_code"] == "WRONGTYPE"
            assert lpush.attrs["error.type"] == "WRONGTYPE" and lpush.status.get("code") == 2
            (exec_,) = [s for s in mine if s.name == "EXEC"]
            assert exec_.attrs["db.operation.batch.size"] == 2
            queued = [s for s in mine if s.attrs.get("otel_ebpf.redis.queued")]
            assert [s.name for s in queued] == ["INCRBY", "SET"]
            assert {"MULTI", "SUBSCRIBE", "PUBLISH", "DBSIZE"} <= set(names), names
            # pub/sub's message is a push: no span for it, no command left unanswered
            assert all("error.type" not in s.attrs for s in mine if s.name != "LPUSH"), \
                [(s.name, s.attrs.get("error.type")) for s in mine]
            for s in mine:
                assert s.attrs["db.operation.name"] == s.name
                assert s.attrs["network.peer.address"] == "127.0.0.1"
                assert s.attrs["server.port"] == redis_server
        # the RESP3 client said HELLO 3 first; the RESP2 one did not
        assert "HELLO" in {s.name for s in spans if s.kind == kind}
    # nothing planted leaves the host: no value ever, no key without capture_keys
    for s in spans:
        text = json.dumps(s.attrs)
        assert PLANTED_VALUE not in text and PLANTED_KEY not in text, s
    assert {s.attrs["db.query.text"] for s in spans if s.name == "SET"} >= {"SET ? ?"}


def test_capture_keys_shows_keys_and_still_no_value(start_agent, redis_server):
    agent = start_agent([redis_server], overrides={
        "receivers": {"ebpf": {"protocols": {"redis": {"capture_keys": True}}}}})
    run_redis_client(redis_server, 3, 4)
    wanted = f"SET {PLANTED_KEY} ?"

    def keyed(spans):
        return {s.kind for s in spans if s.attrs.get("db.query.text") == wanted}

    def got(spans):
        return any(s.attrs.get("db.query.text") == f"GET {PLANTED_KEY}" for s in spans)

    # the GET comes after the SET: its spans may be exported in a later batch
    spans = agent.wait_for(lambda s: keyed(s) == {CLIENT, SERVER} and got(s), timeout_s=40)
    assert keyed(spans) == {CLIENT, SERVER}
    assert got(spans)
    for s in spans:
        assert PLANTED_VALUE not in json.dumps(s.attrs), s
