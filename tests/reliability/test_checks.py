"""The shared whole-store checks see what they claim to see, including the
FTS5 integrity check that runs whenever the search tables exist."""
from __future__ import annotations

from pathlib import Path

from tests.helpers import damage
from tests.reliability.checks import fts_tables, store_findings


def test_clean_store_with_fts_has_no_findings(tmp_path: Path):
    path = tmp_path / "state.db"
    damage.build_store(path, sessions=2, per_session=10)
    damage.add_fts(path)
    assert store_findings(path) == []


def test_fts_out_of_step_with_its_content_is_found(tmp_path: Path):
    path = tmp_path / "state.db"
    damage.build_store(path, sessions=2, per_session=10)
    damage.add_fts(path)
    conn_rows = damage.sql(path, "SELECT name FROM sqlite_schema WHERE name = 'messages_fts'")
    assert conn_rows == [("messages_fts",)]
    # Delete a row behind the index's back (the helper's index has no trigger).
    damage.sql(path, "PRAGMA foreign_keys=OFF")
    damage.sql(path, "DROP TRIGGER IF EXISTS messages_search_log_ad")  # the change log's
    damage.sql(path, "DELETE FROM messages WHERE id = 3")
    found = store_findings(path)
    assert any(f.startswith("messages_fts: 20 indexed documents for 19 message rows")
               for f in found), found


def test_counter_drift_is_found(tmp_path: Path):
    path = tmp_path / "state.db"
    damage.build_store(path, sessions=2, per_session=10)
    damage.sql(path, "UPDATE sessions SET message_count = message_count + 1 WHERE id = 's1'")
    assert store_findings(path) == [
        "session s1: message_count 11 but 10 rows, tool_call_count 0 but 0"]


def test_fts_tables_listed_only_when_present(tmp_path: Path):
    import apsw
    path = tmp_path / "state.db"
    damage.build_store(path, sessions=1, per_session=2)
    conn = apsw.Connection(str(path))
    try:
        before = fts_tables(conn)
    finally:
        conn.close()
    damage.add_fts(path)
    conn = apsw.Connection(str(path))
    try:
        assert "messages_fts" in fts_tables(conn)
        assert "messages_fts" not in before or before == fts_tables(conn)
    finally:
        conn.close()
