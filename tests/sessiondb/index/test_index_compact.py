"""The compact index shapes of m011: ``messages_in_order`` without the id
stored twice, and the trigram index without its per-document size table
(``columnsize=0``; m015 then replaced it by the term table, which has none
either). Search answers, snippets and bm25 scores are what the m010 shapes
gave, and an m010 store is upgraded in place."""
from __future__ import annotations

import shutil
from pathlib import Path

import apsw

from sessiondb import SessionDB
from sessiondb.index import search_index
from tests.helpers import legacy_index

M010_TRIGRAM = ("CREATE VIRTUAL TABLE messages_trigram USING fts5(text,"
                " content='messages_search_text', content_rowid='id',"
                " tokenize='trigram remove_diacritics 1', detail=none)")
M010_ORDER = "CREATE INDEX messages_in_order ON messages(session_id, position, id)"

TEXTS = ["a reconnection storm at dawn", "reconnect later, storms pass",
         "東京の天気は晴れ", "the storm, the storm, the storm again",
         "nothing to see", "Reconnection policy: exponential backoff",
         "a much longer message about a reconnection storm " + "filler " * 40]
QUERIES = ["storm", "reconn", "econnectio", "東京", "天気", "torm", "backoff", "the storm"]


def _corpus(db: SessionDB) -> list[int]:
    db.create_session("s", source="t", title="t")
    db.create_session("u", source="t", title="u")
    ids = db.append_messages("s", [{"role": "user", "content": t} for t in TEXTS])
    ids += db.append_messages("u", [{"role": "assistant", "content": t, "finish_reason": "stop"}
                                    for t in reversed(TEXTS)])
    return ids


def _answers(db: SessionDB) -> dict:
    return {(q, order): [(h.message_id, h.via, h.snippet, h.score)
                         for h in db.search(q, order=order, limit=50)]
            for q in QUERIES for order in ("rank", "newest", "oldest")}


def _as_m010(path: Path) -> None:
    """Turn a store back into what m010 left: the trigram index with its size
    table (filled, current) and the three-column order index, no m011 in the
    ledger (nor m015). Raw apsw on a closed store (what a previous release
    wrote)."""
    legacy_index.as_m014(path)
    conn = apsw.Connection(str(path))
    conn.execute("DROP TABLE messages_trigram")
    conn.execute(M010_TRIGRAM)
    conn.execute("INSERT INTO messages_trigram(rowid, text) SELECT id, text"
                 " FROM messages_search_text WHERE id <= (SELECT CAST(value AS INTEGER)"
                 " FROM state_meta WHERE key = 'fts_watermark')")
    conn.execute("DROP INDEX messages_in_order")
    conn.execute(M010_ORDER)
    conn.execute("DELETE FROM migrations WHERE name = 'm011_compact_indexes'")
    conn.close()


def _order_columns(conn: apsw.Connection) -> list[str]:
    return [r[2] for r in conn.execute("PRAGMA index_info('messages_in_order')")]


def _tables(conn: apsw.Connection) -> set[str]:
    return {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def test_a_new_store_has_the_compact_shapes(tmp_path: Path, open_store) -> None:
    db = open_store(tmp_path / "s.db")
    with db._read() as conn:
        tables = _tables(conn)
        assert "messages_terms_docsize" not in tables and "messages_trigram" not in tables
        assert "messages_fts_docsize" in tables  # the word index keeps its sizes
        assert _order_columns(conn) == ["session_id", "position"]
        assert search_index.has_current_shape(conn)
    assert "m011_compact_indexes" not in db.pending_migrations()


def test_order_plans_use_the_index_without_sorting(tmp_path: Path, open_store) -> None:
    """The rowid ends every index entry, so ``ORDER BY position, id`` is the
    index's own order: no temporary b-tree, as with the m001 index."""
    db = open_store(tmp_path / "s.db")
    with db._read() as conn:
        for sql in ("SELECT id FROM messages WHERE session_id = ? ORDER BY position, id",
                    "SELECT id FROM messages WHERE session_id = ? AND (position, id) > (?, ?)"
                    " ORDER BY position, id LIMIT 5",
                    "SELECT id FROM messages WHERE session_id = ?"
                    " ORDER BY position DESC, id DESC LIMIT 5"):
            plan = " ".join(r[3] for r in conn.execute(
                "EXPLAIN QUERY PLAN " + sql, ("s", 1, 1)[:sql.count("?")]))
            assert "messages_in_order" in plan and "TEMP B-TREE" not in plan, plan


def test_substring_scores_are_the_word_index_bm25_over_the_terms(tmp_path: Path,
                                                                  open_store) -> None:
    """A ranked substring is scored by the word index's bm25 over the terms
    holding its run (m015; the trigram index's bm25 before)."""
    db = open_store(tmp_path / "s.db", background_index=False)
    _corpus(db)
    db.catch_up_index()
    for q in ("reconn", "torm", "東京の"):
        hits = db.search(q, limit=50)
        assert hits and all(h.via == "terms" for h in hits)
        with db._read() as conn:
            terms = search_index.terms_holding(conn, q.lower(), 500)
            expr = " OR ".join(f'"{t}"' for t in terms)
            want = dict(conn.execute("SELECT rowid, bm25(messages_fts) FROM messages_fts"
                                     " WHERE messages_fts MATCH ?", (expr,)))
        assert {h.message_id: h.score for h in hits} == {rid: want[rid] for rid in
                                                          (h.message_id for h in hits)}


def test_m011_upgrades_an_m010_store_and_answers_stay_the_same(tmp_path: Path,
                                                               open_store) -> None:
    """The upgrade runs with work the indexer has not applied (an edit, a
    delete of an indexed row, rows above the watermark): the refilled
    trigram index must hold exactly the word index's documents, or applying
    the change log afterwards (deletes by old text) would corrupt it."""
    path, control = tmp_path / "s.db", tmp_path / "control.db"
    with SessionDB(path, background_index=False) as db:
        ids = _corpus(db)
        db.catch_up_index()
        db.append_messages("s", [{"role": "user", "content": "a fresh storm report"}])
        with db.atomic() as conn:
            conn.execute("UPDATE messages SET content = 'calm now' WHERE id = ?", (ids[0],))
            conn.execute("DELETE FROM messages WHERE id = ?", (ids[3],))
            (logged,) = conn.execute("SELECT count(*) FROM search_changes").fetchone()
        assert logged == 2
    shutil.copy(path, control)  # the same store, never downgraded
    with SessionDB(control, background_index=False) as db:
        db.catch_up_index()
        want = _answers(db)
    _as_m010(path)
    db = open_store(path, background_index=False)
    assert db.pending_migrations() == []
    db.catch_up_index()
    with db._read() as conn:
        assert "messages_trigram" not in _tables(conn)  # (m015 followed)
        assert _order_columns(conn) == ["session_id", "position"]
        assert search_index.has_current_shape(conn)
        assert search_index.terms_missing(conn) == 0
    assert db.search_health().ok and db.index_backlog().empty
    assert _answers(db) == want
    db.rebuild_search_index(force=True)
    assert _answers(db) == want  # equal to a full re-index


def test_m011_resets_a_stale_index(tmp_path: Path, open_store) -> None:
    path = tmp_path / "s.db"
    with SessionDB(path, background_index=False) as db:
        _corpus(db)
        db.catch_up_index()
        want = _answers(db)
        with db.atomic() as conn:
            search_index.mark_stale(conn, "test", None)
    _as_m010(path)
    db = open_store(path, background_index=False)
    with db._read() as conn:
        assert search_index.watermark(conn) == 0 and search_index.stale_marker(conn) is None
    db.catch_up_index()
    assert db.search_health().ok
    assert _answers(db) == want


def test_a_ranked_substring_search_over_logged_rows_stays_on_the_index(tmp_path: Path,
                                                                       open_store) -> None:
    """A deleted or edited row the indexer has not applied is still a document
    of the word index (and its old terms stay in the term table). Such rows
    are left out of the ranked window (the tail answers for them): the index
    stays trusted and the answer is the one after catching up."""
    db = open_store(tmp_path / "s.db", background_index=False)
    ids = _corpus(db)
    db.catch_up_index()
    db._indexer.halt()  # the change log stays as it is while we search
    with db.atomic() as conn:
        conn.execute("DELETE FROM messages WHERE id = ?", (ids[0],))
        conn.execute("UPDATE messages SET content = 'calm reconnection' WHERE id = ?", (ids[1],))
    for q in ("onn", "reconn"):
        hits = db.search(q)
        assert {h.via for h in hits} == {"terms"}, q
        found = [h.message_id for h in hits]
        assert ids[0] not in found and ids[1] in found, q
    with db._read() as conn:
        assert search_index.stale_marker(conn) is None
        (logged,) = conn.execute("SELECT count(*) FROM search_changes").fetchone()
    assert logged == 2
