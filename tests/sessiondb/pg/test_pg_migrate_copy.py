"""The COPY path of `hermes sessions migrate --to` (sessiondb/pg/bulk.py):
the same rows as the statement-per-row path, idempotent reruns, search by
the indexes the rows went through. (test_pg_migrate.py's kill -9 test
covers resumption on this path.)"""
from __future__ import annotations

import json

import psycopg

from sessiondb import SessionDB
from sessiondb.maintenance import lifecycle as maintenance
from sessiondb.base.paths import store_path
from sessiondb.pg.transfer import PgSide, SqliteSide, TransferResult, connect, transfer
from sessiondb.pg.search_schema import INDEXES
from tests.sessiondb.pg.test_pg_migrate import duplicates, fill, run

TABLES = {"sessions": "id", "session_flags": "session_id", "messages": "id",
          "compactions": "id", "usage_ledger": "session_id, task, model, provider"}


def _store(open_store) -> str:
    db = open_store()
    fill(db, sessions=3, per=60)
    db.append_message("s1", {"role": "user", "content": [
        {"type": "text", "text": "blocks über deploy"},
        {"type": "tool_result", "content": [{"type": "text", "text": "tool said 日本語"}]}]})
    maintenance.pin(db.core, ["s2"])
    db.close()
    return str(store_path())


def _copy(path: str, url: str, *, use_copy: bool) -> TransferResult:
    conn = connect(url)
    src = SqliteSide(path)
    try:
        return transfer(src, PgSide(conn, url, bulk=use_copy))
    finally:
        src.close()
        conn.close()


def _rows(url: str) -> dict[str, list[tuple]]:
    """Every row of every copied table, ids and the generated search column included."""
    with psycopg.connect(url) as conn:
        out = {t: conn.execute(f"SELECT * FROM {t} ORDER BY {k}").fetchall()
               for t, k in TABLES.items()}
        out["state_meta"] = conn.execute("SELECT * FROM state_meta ORDER BY key").fetchall()
    return out


def _indexes(url: str) -> dict[str, tuple]:
    """Each search index's (oid, valid); absent ones are missing."""
    with psycopg.connect(url) as conn:
        return {name: (oid, ok) for name, oid, ok in conn.execute(
            "SELECT c.relname, c.oid, i.indisvalid FROM pg_index AS i JOIN pg_class AS c"
            " ON c.oid = i.indexrelid WHERE c.relname = ANY(%s)", (list(INDEXES),))}


def test_copy_path_equals_the_statement_path(open_store, pg_databases):
    path = _store(open_store)
    slow_url, fast_url = pg_databases.create(), pg_databases.create()
    slow, fast = _copy(path, slow_url, use_copy=False), _copy(path, fast_url, use_copy=True)
    assert slow.verified and fast.verified and fast.copied == slow.copied
    assert fast.copied["messages"] == 3 * 61 + 2
    assert _rows(fast_url) == _rows(slow_url)  # same ids, uids, text, search vectors
    assert all(ok for _, ok in _indexes(fast_url).values()) and len(_indexes(fast_url)) == 2
    with SessionDB.open(url=fast_url) as pg:
        hit = pg.search("über", limit=5)  # the JSON blocks' text, found by the rebuilt index
        assert [h.session_id for h in hit] == ["s1"]
        assert [h.session_id for h in pg.search("日本語", limit=5)] == ["s1"]


def test_rerun_without_checkpoint_adds_nothing(open_store, pg_db_url):
    path = _store(open_store)
    assert _copy(path, pg_db_url, use_copy=True).verified
    before = _rows(pg_db_url)
    again = json.loads(run("sessions", "migrate", "--to", pg_db_url, "--json").output)
    assert again["verified"] and again["copied"]["messages"] == 0 and again["resumed_after"]
    with psycopg.connect(pg_db_url) as conn:  # as if the checkpoint were lost: every row again
        conn.execute("DELETE FROM state_meta WHERE key LIKE 'migrated_from:%'")
    redo = _copy(path, pg_db_url, use_copy=True)
    assert redo.verified and redo.copied["messages"] == 3 * 61 + 2 and redo.resumed_after == 0
    assert _rows(pg_db_url) == before and duplicates(pg_db_url) == []
