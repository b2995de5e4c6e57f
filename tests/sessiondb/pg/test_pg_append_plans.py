"""Migration p013 (sessiondb/pg/plans.py): the one-message append is one
flat function whose answers are p011's, and no append reads the whole
messages table, even on a pooled connection that planned its statements
while the table was empty (PL/pgSQL keeps a plan per connection)."""
from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from sessiondb import LeaseLost, SessionDB, SessionNotFound
from sessiondb.rows.codec import encode
from sessiondb.pg import append


@pytest.fixture
def store(pg_db_url: str, hermes_home: Path):
    db = SessionDB.open(url=pg_db_url, pool_size=1)
    yield db
    db.close()


def _seq_scans_of_messages(raw: psycopg.Connection) -> int:
    """Sequential scans of ``messages`` in this connection's transaction."""
    return raw.execute("SELECT seq_scan FROM pg_stat_xact_user_tables"
                       " WHERE relname = 'messages'").fetchone()[0]


def test_appends_never_scan_the_messages_table(pg_db_url: str) -> None:
    # One transaction on one connection, from an empty table on: the plans
    # made in the first calls (when the table was empty) serve all later ones.
    with psycopg.connect(pg_db_url) as raw:
        raw.execute("INSERT INTO sessions (id, source, started_at, updated_at)"
                    " VALUES ('s', 't', 0, 0)")
        for i in range(40):
            enc = [encode({"role": "user", "content": f"m{i}"}, uid=f"u{i}")]
            status, ids, after, _, _ = append.call_append(raw, "s", None, 1.0, "message", enc,
                                                          1000, False)
            assert (status, after) == ("ok", i + 2) and len(ids) == 1
        batch = [encode({"role": "user", "content": f"b{i}"}, uid=f"b{i}")
                 for i in range(3)]
        for _ in range(10):
            status, ids, _, _, _ = append.call_append(raw, "s", None, 1.0, "message", batch,
                                                      1000, False)
        assert _seq_scans_of_messages(raw) == 0
        assert raw.execute("SELECT count(*), max(position) FROM messages").fetchone() == (43, 43)


def test_the_flat_one_message_append_answers_as_p011(store: SessionDB) -> None:
    sid = store.create_session("s", source="t")
    first = {"role": "user", "content": "one", "_db_uid": "u1"}
    [rid] = store.append_messages(sid, [first])
    again = {"role": "user", "content": "one", "_db_uid": "u1"}
    assert store.append_messages(sid, [again]) == [rid]  # idempotent by uid: the same row
    assert store.get_session(sid).message_count == 1
    calls = {"role": "assistant", "content": None,
             "tool_calls": [{"id": "c1", "type": "function",
                             "function": {"name": "f", "arguments": "{}"}}]}
    store.append_messages(sid, [calls])
    row = store.get_session(sid)
    assert (row.message_count, row.tool_call_count) == (2, 1)
    assert [m.get("content") for m in store.get_messages(sid)] == ["one", None]
    with pytest.raises(SessionNotFound):
        store.append_messages("nobody", [{"role": "user", "content": "x"}])
    store.acquire_lease(sid, "host-a", 60)
    with pytest.raises(LeaseLost):
        store.append_messages(sid, [{"role": "user", "content": "x"}], holder="host-b")
    store.append_messages(sid, [{"role": "user", "content": "leased"}], holder="host-a")
    with store.core.read() as conn:
        rows = conn.raw.execute("SELECT position, content FROM messages ORDER BY id").fetchall()
    assert rows == [(1, "one"), (2, None), (3, "leased")]
