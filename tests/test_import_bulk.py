"""The import's bulk path: spilled checked records, executemany per chunk, the
search index built once at the end when that is cheaper."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from sessiondb import SessionDB
from sessiondb.export import export_to_path
from sessiondb.importer import ImportFileError, import_export_file
from sessiondb.import_spill import PREFIX

pytestmark = pytest.mark.both_backends


def make_export(tmp_path: Path, sessions: int = 3, per: int = 1200) -> Path:
    with SessionDB(tmp_path / "src" / "state.db") as src:
        for s in range(sessions):
            sid = src.create_session(f"s{s}", source="bench")
            src.append_messages(sid, [{"role": "user" if i % 2 else "assistant",
                                       "content": f"alpha{s} word{i} text"} for i in range(per)])
        src.end_session("s0")
        out = tmp_path / "e.jsonl"
        export_to_path(src, None, "jsonl", out)
    return out


@pytest.mark.sqlite_only("the SQLite FTS index, detached and rebuilt by the import")
def test_fresh_store_gets_rows_counters_and_a_rebuilt_index(open_store, tmp_path):
    out = make_export(tmp_path)
    db = open_store(tmp_path / "new" / "state.db")
    result = import_export_file(db, out)
    assert result.messages_added == 3600 and result.search_index == "rebuilt"
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
    assert result.search_index == "incremental" and result.messages_added == 50
    assert len(db.search("alpha0", limit=100)) == 50


@pytest.mark.sqlite_only("the SQLite FTS index, detached and rebuilt by the import")
def test_under_a_holder_the_index_is_not_detached(open_store, tmp_path):
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
    assert result.search_index == "incremental" and result.messages_added == 50
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
