"""The import's bulk path: spilled checked records, executemany per chunk, and
the search index left to the off-commit indexer, which the import then drives
in short batches (search exact at every point)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sessiondb import SessionDB
from sessiondb.maintenance.export import export_to_path
from sessiondb.importers.importer import ImportFileError, import_export_file
from sessiondb.importers.import_spill import PREFIX

pytestmark = pytest.mark.both_backends


def make_export(tmp_path: Path, sessions: int = 3, per: int = 1200) -> Path:
    with SessionDB(tmp_path / "src" / "state.db") as src:
        for s in range(sessions):
            sid = src.create_session(f"s{s}", source="bench")
            src.append_messages(sid, [{"role": "user" if i % 2 else "assistant",
                                       "content": f"alpha{s} word{i} text"} for i in range(per)])
        src.end_session("s0")
        out = tmp_path / "e.jsonl"
        export_to_path(src.core, None, "jsonl", out)
    return out


def test_fresh_store_gets_rows_counters_and_a_caught_up_index(open_store, tmp_path):
    out = make_export(tmp_path)
    db = open_store(tmp_path / "new" / "state.db")
    result = import_export_file(db, out)
    assert result.messages_added == 3600 and result.search_index == "caught_up"
    # a handle with a background indexer: it indexes the rows itself (import_index.ParallelIndex)
    assert result.index_build == "batches"
    backlog = db.index_backlog()  # None on PostgreSQL: the insert writes its index
    assert result.index_backlog == 0 and (backlog is None or backlog.empty)
    assert db.search_index_stale() is None
    assert len(db.search("alpha1", limit=1000)) == 1000
    assert {h.session_id for h in db.search("word1199", limit=10)} == {"s0", "s1", "s2"}
    s = db.get_session("s0")
    assert s.message_count == 1200 and s.ended_at is not None
    assert [m["content"] for m in db.get_messages("s2", tail=2)] == \
        ["alpha2 word1198 text", "alpha2 word1199 text"]
    assert not list((tmp_path / "new").glob(PREFIX + "*"))  # the spill is gone
    again = import_export_file(db, out)
    assert (again.messages_added, again.messages_skipped) == (0, 3600)


@pytest.mark.sqlite_only("the SQLite FTS index, detached and rebuilt by the import")
def test_bigger_store_keeps_the_index_row_by_row(open_store, tmp_path):
    out = make_export(tmp_path, sessions=1, per=50)
    db = open_store(tmp_path / "new" / "state.db")
    db.create_session("mine", source="x")
    db.append_messages("mine", [{"role": "user", "content": f"m{i}"} for i in range(100)])
    result = import_export_file(db, out)
    assert result.search_index == "caught_up" and result.messages_added == 50
    assert len(db.search("alpha0", limit=100)) == 50


@pytest.mark.sqlite_only("a second process holding the SQLite file while the FTS index catches up")
def test_under_a_holder_the_index_still_catches_up(open_store, tmp_path):
    out = make_export(tmp_path, sessions=1, per=50)
    path = tmp_path / "new" / "state.db"
    db = open_store(path)
    reader = subprocess.Popen(  # a real second process with the store open, idle
        [sys.executable, "-c", "import apsw, sys; c = apsw.Connection(sys.argv[1], "
         "flags=apsw.SQLITE_OPEN_READONLY); c.execute('select count(*) from messages')"
         ".fetchall(); print('open', flush=True); sys.stdin.readline()", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert reader.stdout.readline().strip() == "open"
        result = import_export_file(db, out)
    finally:
        reader.communicate("\n", timeout=30)
    assert result.search_index == "caught_up" and result.messages_added == 50
    assert len(db.search("alpha0", limit=100)) == 50


def test_a_file_bad_at_its_end_changes_nothing_and_leaves_no_spill(open_store, tmp_path):
    out = make_export(tmp_path)
    lines = out.read_text().splitlines()
    end = json.loads(lines[-1])
    end["messages"] += 1
    out.write_text("\n".join(lines[:-1] + [json.dumps(end)]) + "\n")
    db = open_store(tmp_path / "new" / "state.db")
    with pytest.raises(ImportFileError, match="end record counts"):
        import_export_file(db, out)
    assert db.count_messages() == 0 and db.list_sessions(archived=None) == []
    assert db.search_index_stale() is None
    assert not list((tmp_path / "new").glob(PREFIX + "*"))


@pytest.mark.sqlite_only("the SQLite index's watermark and tail; a server indexes in the insert")
def test_search_is_exact_the_moment_the_rows_commit(open_store, tmp_path):
    """Before the import drives the index (its "indexing" progress starts), the
    rows are committed above the watermark and searched through the exact tail."""
    out = make_export(tmp_path, sessions=1, per=1500)  # within search_tail.TAIL_ROWS
    db = open_store(tmp_path / "new" / "state.db", background_index=False)
    seen = {}

    def progress_for(total, label="importing"):
        if label == "indexing":
            seen["backlog"] = db.index_backlog().tail
            seen["hits"] = len(db.search("alpha0", limit=1000))
            seen["one"] = [h.message_id for h in db.search("word1234", limit=5)]
            seen["indexed"] = db.indexer_stats.rows
        return None

    result = import_export_file(db, out, progress_for=progress_for)
    assert seen["backlog"] == 1500 and seen["indexed"] == 0
    assert seen["hits"] == 1000 and len(seen["one"]) == 1
    assert result.search_index == "caught_up" and db.index_backlog().empty
    assert [h.message_id for h in db.search("word1234", limit=5)] == seen["one"]


@pytest.mark.sqlite_only("another process holding the SQLite write lock during the index catch-up")
def test_a_held_write_lock_leaves_the_index_pending_and_search_still_exact(open_store,
                                                                          tmp_path):
    """Another process takes the write lock after the rows committed: the
    catch-up gives up (the rows stay), the result says what is left, and a
    search afterwards (lock released) catches up itself and finds every row."""
    from tests.helpers.stores import held_by_another_process
    out = make_export(tmp_path, sessions=2, per=1500)  # 3,000 rows: past the tail bound
    path = tmp_path / "new" / "state.db"
    db = open_store(path, background_index=False, patience=0.3)
    holding = []

    def progress_for(total, label="importing"):
        if label == "indexing":
            holding.append(held_by_another_process(path))
            holding[0].__enter__()
        return None

    try:
        result = import_export_file(db, out, progress_for=progress_for)
    finally:
        if holding:
            holding[0].__exit__(None, None, None)
    assert result.messages_added == 3000 and db.count_messages() == 3000
    assert (result.search_index, result.index_backlog) == ("pending", 3000)
    # a search past the tail bound catches up itself first, then finds every row
    assert {h.session_id for h in db.search("word1499", limit=10)} == {"s0", "s1"}
    assert db.index_backlog().empty
