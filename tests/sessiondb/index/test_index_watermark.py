"""The search index off the commit: watermark, change log, indexer, exact tail.

A message is found the moment its commit returns, whatever the indexer's
lag; results equal a full re-index's after any sequence of writes; a kill
mid-indexing loses nothing; index damage never fails a write.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import apsw
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sessiondb import SessionDB
from sessiondb.search import hits as search, search_tail
from sessiondb.index import search_index
from tests.helpers.search_damage import junk_fts_blocks
from tests.reliability.checks import fts_integrity, store_findings

ROOT = Path(__file__).resolve().parents[3]


def hits(db: SessionDB, q: str, **kw) -> list[tuple[int, str, str]]:
    return [(h.message_id, h.via, h.snippet) for h in db.search(q, limit=1000, **kw)]


def test_new_store_has_the_change_log_and_no_sync_triggers(tmp_path: Path, open_store):
    db = open_store(tmp_path / "s.db")
    with db._read() as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
        assert search_index.watermark(conn) == 0
    assert set(search_index.TRIGGERS) <= names and search_index.CHANGES in names
    assert not set(search_index.LEGACY_TRIGGERS) & names


def test_m006_upgrades_a_store_kept_by_sync_triggers(tmp_path: Path, open_store):
    """A store as m004/m005 left it: the index is complete, kept by triggers."""
    path = tmp_path / "s.db"
    with SessionDB(path) as db:
        db.create_session("s", source="t")
        rid = db.append_message("s", {"role": "user", "content": "older words"})
    conn = apsw.Connection(str(path))
    for name in search_index.TRIGGERS:
        conn.execute(f"DROP TRIGGER {name}")
    conn.execute("DROP TABLE search_changes")
    conn.execute("DELETE FROM state_meta WHERE key = 'fts_watermark'")
    conn.execute("DELETE FROM migrations WHERE name = 'm006_index_watermark'")
    conn.execute("CREATE TRIGGER messages_search_ai AFTER INSERT ON messages BEGIN SELECT 1; END")
    conn.close()
    db = open_store(path)
    assert db.pending_migrations() == []
    with db._read() as conn:
        assert search_index.watermark(conn) == rid  # the triggers had indexed every row
        assert search_index.triggers_attached(conn)
        assert conn.execute("SELECT count(*) FROM sqlite_master WHERE name = "
                            "'messages_search_ai'").fetchone()[0] == 0
    assert db.search_health().ok and hits(db, "older")[0][:2] == (rid, "fts")


def test_found_the_moment_the_commit_returns_with_the_indexer_paused(tmp_path: Path,
                                                                     open_store):
    db = open_store(tmp_path / "s.db", background_index=False)
    db.create_session("s", source="t")
    old = db.append_message("s", {"role": "user", "content": "walrus first"})
    db.catch_up_index()
    new = db.append_message("s", {"role": "user", "content": "walrus second"})
    assert db.index_backlog().tail == 1
    got = db.search("walrus", order="newest")
    assert [h.message_id for h in got] == [new, old] and not got.partial
    assert got[0].snippet == "**walrus** second" and got[0].via == "fts"
    assert [h.message_id for h in db.search("lrus sec")] == [new]  # trigram tail too
    with db.atomic() as conn:  # an edit of an indexed row: the change log
        conn.execute("UPDATE messages SET content = 'narwhal now' WHERE id = ?", (old,))
    assert db.index_backlog().changes == 1
    assert [h.message_id for h in db.search("walrus")] == [new]
    assert [h.message_id for h in db.search("narwhal")] == [old]
    assert db.catch_up_index() == 2 and db.index_backlog().empty
    assert [h.message_id for h in db.search("walrus")] == [new]
    assert db.search_health().ok


def test_a_tail_past_the_bound_is_indexed_by_the_search(tmp_path: Path, open_store,
                                                        monkeypatch):
    monkeypatch.setattr(search_tail, "TAIL_ROWS", 50)
    db = open_store(tmp_path / "s.db", background_index=False)
    db.create_session("s", source="t")
    db.append_messages("s", [{"role": "user", "content": f"tapir {i}"} for i in range(120)])
    assert db.index_backlog().tail == 120
    got = db.search("tapir", limit=1000)
    assert len(got) == 120 and not got.partial
    assert db.index_backlog().empty and db.indexer_stats.foreground >= 1


def test_a_tail_past_the_bound_that_cannot_be_indexed_is_flagged(tmp_path: Path,
                                                                 open_store, monkeypatch):
    monkeypatch.setattr(search_tail, "TAIL_ROWS", 50)
    path = tmp_path / "s.db"
    db = open_store(path, background_index=False)
    db.create_session("s", source="t")
    db.append_messages("s", [{"role": "user", "content": f"tapir {i}"} for i in range(120)])
    with db.atomic():  # inside its own transaction the handle cannot run batches
        got = db.search("tapir", limit=1000)
    assert got.partial and "behind" in got.reason and len(got) == 50


@pytest.mark.parametrize("rows", [1, 700])
def test_rowid_reuse_after_a_delete_is_indexed(tmp_path: Path, open_store, rows):
    """SQLite reuses the highest rowid after it is deleted: the new row sits
    at or below the watermark and must still be indexed."""
    db = open_store(tmp_path / "s.db", background_index=False)
    db.create_session("s", source="t")
    ids = db.append_messages("s", [{"role": "user", "content": f"gone {i}"}
                                   for i in range(rows)])
    db.catch_up_index()
    with db.atomic() as conn:
        conn.execute("DELETE FROM messages WHERE id = ?", (ids[-1],))
    db.catch_up_index()
    again = db.append_message("s", {"role": "user", "content": "reborn row"})
    assert again == ids[-1]
    assert [h.message_id for h in db.search("reborn")] == [again]
    db.catch_up_index()
    assert [(h.message_id, h.via) for h in db.search("reborn")] == [(again, "fts")]
    assert db.search_health().ok
    with db.atomic() as conn:  # integrity-check is an INSERT command
        assert fts_integrity(conn) == []


# -- equal to a full re-index, whatever happened ------------------------------

WORDS = ("alpha", "bravo", "charlie", "delta", "echo")
QUERIES = ("alpha", "bravo delta", "cha*", '"delta echo"', "lph", "harli", "echo")
texts = st.lists(st.sampled_from(WORDS), min_size=1, max_size=4).map(" ".join)
ops = st.lists(st.one_of(
    st.tuples(st.just("append"), st.integers(0, 1), texts),
    st.tuples(st.just("edit"), st.integers(0, 50), texts),
    st.tuples(st.just("rewind"), st.integers(0, 50), st.just("")),
    st.tuples(st.just("compact"), st.integers(0, 1), texts),
    st.tuples(st.just("delete_last"), st.integers(0, 1), st.just("")),
    st.tuples(st.just("delete_session"), st.integers(0, 1), st.just("")),
    st.tuples(st.just("index"), st.integers(1, 6), st.just("")),
), min_size=1, max_size=25)


def _live(db: SessionDB, sid: str) -> list[int]:
    return [m["_db_persisted"].id for m in db.get_messages(sid)]


def _apply(db: SessionDB, op: str, n: int, text: str) -> None:
    sid = f"s{n % 2}"
    with db._read() as conn:
        every = [r[0] for r in conn.execute("SELECT id FROM messages ORDER BY id")]
    if op == "append":
        db.create_session(sid, source="t")
        db.append_message(sid, {"role": "user" if n else "assistant", "content": text})
    elif op == "edit" and every:
        with db.atomic() as conn:
            conn.execute("UPDATE messages SET content = ? WHERE id = ?",
                         (text, every[n % len(every)]))
    elif op == "rewind" and every:
        with db.atomic() as conn:
            conn.execute("UPDATE messages SET state = 'rewound' WHERE id = ?",
                         (every[n % len(every)],))
    elif op == "compact":
        db.create_session(sid, source="t")
        live = _live(db, sid)
        if len(live) >= 2:
            db.archive_and_compact(sid, live[:2], {"role": "user", "content": text})
    elif op == "delete_last" and every:
        with db.atomic() as conn:
            conn.execute("DELETE FROM messages WHERE id = ?", (every[-1],))
    elif op == "delete_session":
        db.create_session(sid, source="t")
        db.delete_session(sid)
    elif op == "index":
        db.catch_up_index(max_rows=n)


def _answers(db: SessionDB) -> dict:
    out = {}
    for q in QUERIES:
        for order in ("newest", "oldest"):
            out[q, order] = hits(db, q, order=order, include_archived=True)
        out[q, "rank"] = sorted(hits(db, q))
    return out


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ops=ops, batch=st.integers(1, 4))
def test_results_equal_a_full_reindex_after_any_writes(ops, batch):
    with tempfile.TemporaryDirectory() as tmp:
        with SessionDB(Path(tmp) / "s.db", background_index=False) as db:
            db._indexer.batch = batch  # small batches: every partial state is reached
            for op, n, text in ops:
                _apply(db, op, n, text)
            during = _answers(db)
            db.rebuild_search_index(force=True)
            assert db.index_backlog().empty and db.search_health().ok
            assert during == _answers(db)


# -- crashes and damage --------------------------------------------------------

KILLED_INDEXER = """
import sys
from sessiondb import SessionDB
db = SessionDB(sys.argv[1], background_index=False)
db._indexer.batch = 50
while db.catch_up_index(max_rows=50):
    print(db.index_backlog().watermark, flush=True)
"""


def test_kill_9_mid_indexing_loses_nothing_and_the_next_open_catches_up(tmp_path: Path):
    path = tmp_path / "s.db"
    with SessionDB(path, background_index=False) as db:
        db._indexer.halt()  # leave the whole index to the child
        db.create_session("s", source="t")
        ids = db.append_messages("s", [{"role": "user", "content": f"kiwi number {i}"}
                                       for i in range(3_000)])
    proc = subprocess.Popen([sys.executable, "-c", KILLED_INDEXER, str(path)],
                            stdout=subprocess.PIPE, text=True, cwd=ROOT)
    try:
        assert proc.stdout is not None
        first = int(proc.stdout.readline())
        assert 0 < first < ids[-1]
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
        proc.stdout.close()
    assert store_findings(path) == []  # the part indexed is exact, the rest pending
    with SessionDB(path) as db:
        assert db._indexer.wait_idle(60)
        assert db.index_backlog().empty and db.search_health().ok
        got = db.search("kiwi", limit=1000, order="oldest")
        assert len(got) == 1000 and all(h.via == "fts" for h in got)
        assert db.count_messages() == 3_000


def test_index_damage_met_by_the_background_indexer_never_fails_an_append(tmp_path: Path,
                                                                           open_store):
    path = tmp_path / "s.db"
    with SessionDB(path) as db:
        db.create_session("s", source="t")
        for start in range(0, 200, 20):
            db.append_messages("s", [{"role": "user", "content": f"alpha {i}"}
                                     for i in range(start, start + 20)])
            db.catch_up_index()
    assert junk_fts_blocks(path) > 0
    db = open_store(path)  # background indexing on
    written = [db.append_message("s", {"role": "user", "content": f"yak {i}"})
               for i in range(50)]
    assert db._indexer.wait_idle(30)
    assert db.search_index_stale() is not None and not db.quarantined
    assert db.indexer_stats.marked_stale == 1
    got = db.search("yak", limit=100)
    assert sorted(h.message_id for h in got) == written and {h.via for h in got} == {"fallback"}


# -- hostile text --------------------------------------------------------------

def test_many_hits_in_one_message_get_a_scan_snippet(tmp_path: Path, open_store):
    db = open_store(tmp_path / "s.db")
    db.create_session("s", source="t")
    rid = db.append_message("s", {"role": "user", "content": "Z" * 20_000})
    for _ in range(2):  # in the tail, then indexed
        got = db.search("ZZZZ")
        assert [h.message_id for h in got] == [rid]
        assert got[0].snippet.startswith("**ZZZZ**") and len(got[0].snippet) < 200
        db.catch_up_index()
    few = db.append_message("s", {"role": "user", "content": "zebra zebra crossing"})
    assert db.search("crossing")[0].snippet == "zebra zebra **crossing**"
    assert few


def test_a_scan_past_its_budget_returns_partial_results(tmp_path: Path, open_store,
                                                        monkeypatch):
    db = open_store(tmp_path / "s.db")
    db.create_session("s", source="t")
    db.append_messages("s", [{"role": "user", "content": "x" * 5_000 + " q"}
                             for _ in range(300)])
    assert len(db.search("q", limit=1000)) == 300  # a one-letter query scans
    monkeypatch.setattr(search, "SCAN_BUDGET_S", 0.0)
    got = db.search("q", limit=1000)
    assert got.partial and "scan stopped" in got.reason and len(got) < 300


def test_index_batches_leave_the_handles_durability_as_it_was(tmp_path: Path, open_store):
    """Batches commit at NORMAL (derived data); the writer's FULL comes back."""
    db = open_store(tmp_path / "s.db", background_index=False)
    db._writer.execute("PRAGMA synchronous=FULL")
    db.create_session("s", source="t")
    db.append_messages("s", [{"role": "user", "content": f"okapi {i}"} for i in range(20)])
    assert db.catch_up_index() == 20
    assert db._writer.execute("PRAGMA synchronous").fetchone()[0] == 2
    assert [h.via for h in db.search("okapi", limit=50)] == ["fts"] * 20
