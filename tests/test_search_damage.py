"""Fail-open: a damaged search index never costs a write, search falls back,
the marker is durable and shared, and a guarded rebuild restores exact results."""
from __future__ import annotations

import multiprocessing as mp

import apsw
import pytest

from sessiondb import SearchRebuildRefused, SessionDB, StorageError, StoreCorrupt
from sessiondb.search_index import triggers_attached
from tests.helpers import search_workers
from tests.helpers.search_damage import junk_fts_blocks, junk_pages

QUERIES = ("alpha", "bravo", "charlie delta", '"echo foxtrot"', "gol*")


def fill(path, n: int = 300) -> None:
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    with SessionDB(path) as db:
        db.create_session("shared", source="test", title="Damage")
        db.append_messages("shared", [
            {"role": "user" if i % 2 else "assistant",
             "content": " ".join(words[(i * k) % len(words)] for k in range(1, 6)) + f" n{i}"}
            for i in range(n)])


def results(db: SessionDB) -> dict[str, list[int]]:
    return {q: sorted(h.message_id for h in db.search(q, limit=1000)) for q in QUERIES}


def canonical(db: SessionDB, q: str) -> list[int]:
    """Ground truth from the rows themselves: a phrase must appear as
    adjacent words, a trailing * matches word prefixes, words are AND-ed."""
    def matches(text: str) -> bool:
        words = text.split()
        if q.startswith('"'):
            return f" {q.strip(chr(34))} " in f" {text} "
        if q.endswith("*"):
            return any(w.startswith(q[:-1]) for w in words)
        return all(w in words for w in q.split())
    return sorted(m["_db_persisted"].id for m in db.get_messages("shared")
                  if matches(m["content"]))


def test_on_disk_block_damage_fails_open_then_rebuild_is_exact(tmp_path, open_store):
    path = tmp_path / "s.db"
    fill(path)
    assert junk_fts_blocks(path) > 0
    db = open_store(path)
    rid = db.append_message("shared", {"role": "user", "content": "alpha after the damage"})
    stale = db.search_index_stale()
    assert stale is not None and stale["reason"].startswith("write failed")
    with db._read() as conn:
        assert not triggers_attached(conn)
    assert db.get_messages("shared")[-1]["content"] == "alpha after the damage"
    hits = db.search("alpha", limit=1000)
    assert hits and all(h.fallback and h.via == "fallback" for h in hits)
    assert rid in [h.message_id for h in hits]
    assert sorted(h.message_id for h in hits) == canonical(db, "alpha")
    assert db.search("alpha", session_id="nope") == []
    health = db.search_health()
    assert not health.ok and health.stale is not None
    assert health.indexes[0].integrity != "ok"

    stats = db.rebuild_search_index()
    assert stats["was_stale"] is True and stats["messages"] == 301
    assert db.search_index_stale() is None
    assert db.search_health().ok
    assert all(h.via == "fts" for h in db.search("alpha"))
    assert results(db) == {q: canonical(db, q) for q in QUERIES}
    later = db.append_message("shared", {"role": "user", "content": "bravo indexed again"})
    assert later in [h.message_id for h in db.search("bravo", order="newest", limit=1)]


def test_leaf_damage_is_found_by_search_and_detaches(tmp_path, open_store):
    path = tmp_path / "s.db"
    fill(path)
    assert junk_fts_blocks(path, leaves_only=True) > 0
    db = open_store(path)
    hits = db.search("alpha", limit=1000)
    assert hits and all(h.fallback for h in hits)
    stale = db.search_index_stale()
    assert stale is not None and stale["reason"].startswith("search failed")
    with db._read() as conn:
        assert not triggers_attached(conn)
    rid = db.append_message("shared", {"role": "user", "content": "zulu after detach"})
    with db._read() as conn:
        (n,) = conn.execute("SELECT count(*) FROM messages_fts_docsize WHERE id = ?",
                            (rid,)).fetchone()
    assert n == 0                      # the index is no longer written to
    assert [h.message_id for h in db.search("zulu")] == [rid]
    db.rebuild_search_index()
    assert results(db) == {q: canonical(db, q) for q in QUERIES}
    assert [(h.message_id, h.via) for h in db.search("zulu")] == [(rid, "fts")]


def test_fallback_keeps_filters_and_shape(tmp_path, open_store):
    path = tmp_path / "s.db"
    fill(path, 40)
    junk_fts_blocks(path)
    db = open_store(path)
    db.create_session("other", source="elsewhere", title="Other")
    db.append_message("other", {"role": "user", "content": "alpha elsewhere", "timestamp": 5})
    assert db.search_index_stale() is not None
    hits = db.search("alpha", source="elsewhere")
    assert [(h.session_id, h.session_title, h.role, h.timestamp) for h in hits] == [
        ("other", "Other", "user", 5.0)]
    assert hits[0].snippet == "**alpha** elsewhere"
    assert db.search("alpha", role="tool") == []
    assert db.search("alpha", until=6, include_archived=True)[0].session_id == "other"
    with pytest.raises(StorageError, match="raw FTS5"):
        db.search("alpha OR bravo", raw=True)


def test_btree_page_damage_fails_open_and_rebuild_leaves_it_to_recovery(tmp_path, open_store):
    """Junk over whole b-tree pages of the index: writes and search still work;
    the pages cannot even be freed, so rebuild fails typed and changes nothing."""
    path = tmp_path / "s.db"
    fill(path)
    junk_pages(path, "messages_fts_data")
    db = open_store(path)
    rid = db.append_message("shared", {"role": "user", "content": "alpha despite pages"})
    stale = db.search_index_stale()
    assert stale is not None and stale["sqlite_code"] == apsw.SQLITE_CORRUPT
    hits = db.search("alpha", limit=1000)
    assert rid in [h.message_id for h in hits] and all(h.fallback for h in hits)
    with pytest.raises(StoreCorrupt):
        db.rebuild_search_index()
    assert db.search_index_stale() == stale
    with db._read() as conn:
        assert not triggers_attached(conn)
    assert len(db.get_messages("shared")) == 301
    db.append_message("shared", {"role": "user", "content": "still writable"})
    assert len(db.get_messages("shared")) == 302


def test_canonical_damage_is_not_mistaken_for_index_damage(tmp_path, open_store):
    path = tmp_path / "s.db"
    fill(path)
    junk_pages(path, "messages")
    db = open_store(path)
    with pytest.raises(StoreCorrupt):
        db.append_message("shared", {"role": "user", "content": "cannot land"})
    with pytest.raises(StoreCorrupt):
        db.search("alpha", limit=1000)
    assert db.meta("fts_stale") is None
    with db._read() as conn:
        assert triggers_attached(conn)


def test_two_processes_one_detaches_the_other_follows(tmp_path, open_store):
    path = tmp_path / "shared.db"
    fill(path, 50)
    ctx = mp.get_context("spawn")
    ready, go, done = ctx.Event(), ctx.Event(), ctx.Event()
    queue = ctx.Queue()
    proc = ctx.Process(target=search_workers.second_holder,
                       args=(str(path), ready, go, done, queue))
    proc.start()
    try:
        assert ready.wait(120)
        db = open_store(path)
        raw = apsw.Connection(str(path))
        raw.execute("UPDATE messages_fts_data SET block = randomblob(length(block))")
        raw.close()
        rid = db.append_message("shared", {"role": "user", "content": "alpha from the first"})
        assert db.search_index_stale()["pid"] > 0
        with pytest.raises(SearchRebuildRefused) as refused:
            db.rebuild_search_index()
        assert refused.value.holders == [proc.pid]
        fresh = open_store(path)            # not alone: no rebuild on open
        assert fresh.search_index_stale() is not None
        go.set()
        report = queue.get(timeout=120)
        assert report["error"] is None
        assert report["stale"] is not None
        assert report["hits"] == [(report["rid"], "fallback")]
        with db._read() as conn:
            (n,) = conn.execute("SELECT count(*) FROM messages_fts_docsize WHERE id = ?",
                                (report["rid"],)).fetchone()
        assert n == 0
    finally:
        done.set()
        proc.join(120)
    assert proc.exitcode == 0
    with SessionDB(path) as alone:          # only holder now: rebuilt on open
        assert alone.search_index_stale() is None
        assert [h.message_id for h in alone.search("kilowatt")] == [report["rid"]]
        assert rid in [h.message_id for h in alone.search("first")]
        assert alone.search_health().ok


def test_guard_inside_a_callers_transaction(tmp_path, open_store):
    """insert_encoded in someone else's transaction (compaction, imports):
    FTS5-level damage is handled in place and the caller's other writes commit."""
    from sessiondb.codec import encode
    path = tmp_path / "s.db"
    fill(path, 40)
    junk_fts_blocks(path)
    db = open_store(path)
    with db.atomic() as conn:
        conn.execute("INSERT INTO state_meta(key, value) VALUES ('caller', 'kept')")
        (rid,) = db.insert_encoded(conn, "shared", [encode({"role": "user",
                                                           "content": "nested alpha"})])
    assert db.meta("caller") == "kept"
    assert db.search_index_stale()["sqlite_code"] == apsw.SQLITE_CORRUPT_VTAB
    assert rid in [h.message_id for h in db.search("nested")]
