"""bench/sqlite_floor.py measures the store's real work: its rows are valid
store rows in the store's own schema, and its search indexes are exactly the
indexes of those rows (the store's own index health check: FTS5's
integrity-check, coverage of every row up to the watermark, a MATCH probe),
with the watermark where the indexer would leave it."""
from __future__ import annotations

import sys
from pathlib import Path

import apsw
import pytest

from sessiondb import SessionDB
from sessiondb.index import search_index
from sessiondb.index.search_index import watermark
from sessiondb.search.search_maintenance import health_on

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import common  # noqa: E402  (bench/common.py)
import sqlite_floor  # noqa: E402  (bench/sqlite_floor.py)

N = 300


@pytest.fixture
def small(monkeypatch):
    monkeypatch.setattr(sqlite_floor, "N", N)


def test_append_floor_index_is_exactly_the_rows_index(tmp_path, small):
    figures = sqlite_floor.append_floor(tmp_path)
    assert figures["rows_us"] > 0 and figures["index_us"] > 0
    conn = apsw.Connection(str(tmp_path / "store.db"))
    try:
        assert watermark(conn) == N
        health = health_on(conn)
        assert [(i.name, i.integrity, i.probe) for i in health.indexes] == \
            [(t, "ok", "ok") for t in search_index.INDEXES]
        assert health.pending == 0
        # the rows are in the store's own stored form (m012), as an append writes them
        assert conn.execute("SELECT DISTINCT role, meta, kind FROM messages ORDER BY 1"
                            ).fetchall() == [("a", "", ""), ("u", "", "")]
    finally:
        conn.close()


def test_append_floor_rows_read_back_through_the_store(tmp_path, small):
    sqlite_floor.append_floor(tmp_path)
    db = SessionDB(tmp_path / "store.db")
    try:
        got = [(m["role"], m["content"], m.get("finish_reason")) for m in db.get_messages("b1")]
        want = [(m["role"], m["content"], m.get("finish_reason"))
                for m in (common.message(i) for i in range(N))]
        assert got == want
        assert len(db.search("lorem", limit=N + 10)) == N
        assert [h.message_id for h in db.search("299", limit=5)] == [N]
    finally:
        db.close()


def test_index_floor_reads_a_store_without_writing_it(tmp_path):
    db = SessionDB(tmp_path / "s.db")
    db.create_session("s", source="t")
    db.append_messages("s", [common.message(i) for i in range(50)])
    db.close()
    before = (tmp_path / "s.db").read_bytes()
    work = tmp_path / "work"
    work.mkdir()
    figures = sqlite_floor.index_floor(tmp_path / "s.db", work)
    assert figures["messages"] == 50 and figures["text_mb"] > 0
    assert all(figures[f"{t}_cpu_s"] >= 0 for t in sqlite_floor.INDEXES)
    assert (tmp_path / "s.db").read_bytes() == before
