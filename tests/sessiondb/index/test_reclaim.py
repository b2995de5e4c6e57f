"""Free pages given back by the indexer at the end of a catch-up
(sessiondb/index/reclaim.py): only in files made with incremental auto-vacuum,
only when the freelist is large, never by a handle with nothing to index."""
from __future__ import annotations

import hashlib
from pathlib import Path

import apsw

from sessiondb import SessionDB
from sessiondb.index import reclaim


def pragma(path: Path, name: str) -> int:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(conn.execute(f"PRAGMA {name}").fetchone()[0])
    finally:
        conn.close()


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_new_stores_are_made_with_incremental_auto_vacuum(tmp_path: Path) -> None:
    SessionDB(tmp_path / "state.db").close()
    assert pragma(tmp_path / "state.db", "auto_vacuum") == reclaim.INCREMENTAL


def test_the_end_of_a_catch_up_gives_the_free_pages_back(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path, background_index=False) as db:
        db.create_session("big", source="test")
        db.create_session("keep", source="test")
        db.append_messages("big", [{"role": "user", "content": f"big {i} " + "x" * 300}
                                   for i in range(600)])
        db.append_messages("keep", [{"role": "user", "content": "kept words"}])
        db.catch_up_index()
        db.delete_session("big")  # its rows' pages are free now ...
        with db.atomic() as conn:
            free = conn.execute("PRAGMA freelist_count").fetchone()[0]
            assert free >= reclaim.MIN_PAGES
        db.append_messages("keep", [{"role": "assistant", "content": "more words"}])
        db.catch_up_index()  # ... and the catch-up's last batch gives them back
        assert db.indexer_stats is not None and db.indexer_stats.pages_returned >= free - 1
        assert [h.role for h in db.search("words")] == ["assistant", "user"]
    assert pragma(path, "freelist_count") < reclaim.MIN_PAGES
    conn = apsw.Connection(str(path))
    assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
    conn.close()


def test_a_handle_with_nothing_to_index_writes_nothing(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="test")
        db.append_messages("s", [{"role": "user", "content": "indexed"}])
    conn = apsw.Connection(str(path))  # free pages the index knows nothing about
    conn.execute("CREATE TABLE junk(x); WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL"
                 " SELECT i + 1 FROM n WHERE i < 200) INSERT INTO junk SELECT zeroblob(3000)"
                 " FROM n; DROP TABLE junk")
    conn.close()
    free = pragma(path, "freelist_count")
    assert free >= reclaim.MIN_PAGES
    before = digest(path)
    with SessionDB(path) as db:  # open, search, close: no index work, so no vacuum
        assert [h.role for h in db.search("indexed")] == ["user"]
    assert digest(path) == before and pragma(path, "freelist_count") == free


def test_a_file_without_incremental_auto_vacuum_keeps_its_free_pages(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA page_size=4096; CREATE TABLE t(x); DROP TABLE t")  # not empty: mode 0
    conn.close()
    with SessionDB(path, background_index=False) as db:
        assert db._writer.execute("PRAGMA auto_vacuum").fetchone()[0] == 0
        db.create_session("big", source="test")
        db.append_messages("big", [{"role": "user", "content": f"big {i} " + "x" * 300}
                                   for i in range(600)])
        db.catch_up_index()
        db.delete_session("big")
        db.create_session("keep", source="test")
        db.append_messages("keep", [{"role": "user", "content": "kept"}])
        db.catch_up_index()
        assert db.indexer_stats is not None and db.indexer_stats.pages_returned == 0
    assert pragma(path, "freelist_count") >= reclaim.MIN_PAGES
