"""Free pages go back to the filesystem when a store closes (freepages.py):
new files use ``auto_vacuum=INCREMENTAL``; a file made before keeps its
mode and its free pages (only `sessions optimize` returns those)."""
from __future__ import annotations

import os
from pathlib import Path

import apsw

from sessiondb import SessionDB, freepages


def _pragma(path: Path, name: str) -> int:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        return int(conn.execute(f"PRAGMA {name}").fetchone()[0])
    finally:
        conn.close()


def _fill_and_delete(db: SessionDB) -> None:
    db.create_session("a", source="t")
    db.create_session("b", source="t")
    db.append_messages("a", [{"role": "user", "content": f"bulk {i} " + "x" * 400}
                             for i in range(1500)])
    db.append_messages("b", [{"role": "user", "content": "kept message"}])
    db.catch_up_index()
    with db.atomic() as conn:
        conn.execute("DELETE FROM sessions WHERE id = 'a'")
    db.catch_up_index()


def test_a_new_store_gives_its_free_pages_back_at_close(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    db = SessionDB(path)
    _fill_and_delete(db)
    (free,) = db._writer.execute("PRAGMA freelist_count").fetchone()
    assert free > 300  # the deleted session's pages
    db.close()
    assert not Path(f"{path}-wal").exists()  # folded back and removed by the close
    assert os.path.getsize(path) < 200 * 2048
    assert _pragma(path, "auto_vacuum") == freepages.INCREMENTAL
    assert _pragma(path, "freelist_count") == 0
    with SessionDB(path) as db:
        assert [h.message_id for h in db.search("kept")] and db.search_health().ok
        assert len(db.get_messages("b")) == 1


def test_a_store_made_without_it_keeps_its_mode_and_pages(tmp_path: Path) -> None:
    """What an earlier release created: auto_vacuum NONE. Opening it with
    the incremental policy changes nothing (SQLite reads the mode from the
    header; only a VACUUM could change it)."""
    path = tmp_path / "state.db"
    with SessionDB(path):
        pass
    old = tmp_path / "old.db"
    raw = apsw.Connection(str(path))
    raw.execute("PRAGMA auto_vacuum=NONE")
    raw.execute(f"VACUUM INTO '{old}'")  # the same store as a NONE-mode file
    raw.close()
    assert _pragma(old, "auto_vacuum") == 0
    db = SessionDB(old)
    _fill_and_delete(db)
    (free,) = db._writer.execute("PRAGMA freelist_count").fetchone()
    db.close()
    assert free > 300
    assert _pragma(old, "auto_vacuum") == 0
    assert _pragma(old, "freelist_count") == free


def test_a_close_while_another_process_writes_keeps_the_pages(tmp_path: Path) -> None:
    """The tidy-up never waits for the write lock: held elsewhere, the close
    returns at once and the pages stay free for the next close."""
    path = tmp_path / "state.db"
    db = SessionDB(path)
    _fill_and_delete(db)
    other = apsw.Connection(str(path))
    other.execute("BEGIN IMMEDIATE")
    try:
        db.close()
    finally:
        other.execute("ROLLBACK")
        other.close()
    assert _pragma(path, "freelist_count") > 300
    with SessionDB(path):
        pass
    assert _pragma(path, "freelist_count") == 0
