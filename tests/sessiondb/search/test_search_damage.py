"""Fail-open: a damaged search index never costs a write (no canonical write
touches it: the indexer does, after the commit), the indexer that meets the
damage marks the index stale, search falls back, the marker is durable and
shared, and a guarded rebuild restores exact results."""
from __future__ import annotations

import multiprocessing as mp

import apsw
import pytest

from sessiondb import SearchRebuildRefused, SessionDB, StorageError, StoreCorrupt
from sessiondb.base.errors import SearchIndexCorrupt
from sessiondb.index.search_index import triggers_attached
from tests.helpers import search_workers
from tests.helpers.search_damage import junk_fts_blocks, junk_pages

QUERIES = ("alpha", "bravo", "charlie delta", '"echo foxtrot"', "gol*")


def fill(path, n: int = 300) -> None:
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    with SessionDB(path) as db:
        db.create_session("shared", source="test", title="Damage")
        for start in range(0, n, 10):  # indexed in several batches: several segments
            db.append_messages("shared", [
                {"role": "user" if i % 2 else "assistant",
                 "content": " ".join(words[(i * k) % len(words)] for k in range(1, 6)) + f" n{i}"}
                for i in range(start, min(start + 10, n))])
            db.catch_up_index()


def indexing_stopped(db: SessionDB) -> bool:
    """The indexer met the damage: the marker is set and it indexes no more."""
    backlog = db.index_backlog()
    return backlog is not None and backlog.stale and not backlog.work


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
    assert db.search_index_stale() is None  # the append never touched the index
    db.catch_up_index()                     # the indexer meets the damage
    stale = db.search_index_stale()
    assert stale is not None and stale["reason"].startswith("indexing failed")
    assert indexing_stopped(db)
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
    assert indexing_stopped(db)
    rid = db.append_message("shared", {"role": "user", "content": "zulu after detach"})
    db.catch_up_index()
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
    db.catch_up_index()
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
    db.catch_up_index()
    stale = db.search_index_stale()
    assert stale is not None and stale["sqlite_code"] == apsw.SQLITE_CORRUPT
    hits = db.search("alpha", limit=1000)
    assert rid in [h.message_id for h in hits] and all(h.fallback for h in hits)
    with pytest.raises(SearchIndexCorrupt, match="cannot be rebuilt in place"):
        db.rebuild_search_index()
    assert not db.quarantined  # the damage is the index's: canonical writes go on
    assert db.search_index_stale() == stale
    assert indexing_stopped(db)
    assert len(db.get_messages("shared")) == 301
    db.append_message("shared", {"role": "user", "content": "still writable"})
    assert len(db.get_messages("shared")) == 302


def test_canonical_damage_is_not_mistaken_for_index_damage(tmp_path, open_store):
    path = tmp_path / "s.db"
    fill(path)
    junk_pages(path, "messages")
    db = open_store(path)
    with pytest.raises(StoreCorrupt) as info:
        db.append_message("shared", {"role": "user", "content": "cannot land"})
    # structural: the guard quarantined the handle and the fail-open did not
    # retry (a retry would have met the quarantine refusal instead)
    assert db.quarantined
    assert isinstance(info.value.__cause__, apsw.CorruptError)
    assert "quarantined" not in str(info.value)
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
        db.catch_up_index()
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


def test_insert_inside_a_callers_transaction(tmp_path, open_store):
    """insert_encoded in someone else's transaction (compaction, imports):
    the damaged index is not touched, the caller's other writes commit, and
    the indexer marks the index stale afterwards."""
    from sessiondb.rows.codec import encode
    path = tmp_path / "s.db"
    fill(path, 40)
    junk_fts_blocks(path)
    db = open_store(path)
    with db.atomic() as conn:
        conn.execute("INSERT INTO state_meta(key, value) VALUES ('caller', 'kept')")
        (rid,) = db.insert_encoded(conn, "shared", [encode({"role": "user",
                                                           "content": "nested alpha"})])
    assert db.meta("caller") == "kept"
    assert rid in [h.message_id for h in db.search("nested")]
    db.catch_up_index()
    assert db.search_index_stale()["sqlite_code"] == apsw.SQLITE_CORRUPT_VTAB
    assert rid in [h.message_id for h in db.search("nested")]


def test_deletes_and_content_edits_fail_open_too(tmp_path, open_store):
    """Content edits and session deletes are canonical writes too: they land,
    and the change log carries them to the indexer, which marks the index stale."""
    path = tmp_path / "s.db"
    fill(path, 40)
    db = open_store(path)
    db.create_session("gone", source="test")
    db.append_message("gone", {"role": "user", "content": "alpha to be deleted"})
    db.close()
    junk_fts_blocks(path)
    db = open_store(path)
    assert db.delete_session("gone") == 1
    db.catch_up_index()
    assert db.search_index_stale() is not None
    first = db.get_messages("shared")[0]["_db_persisted"].id
    with db.atomic() as conn:
        conn.execute("UPDATE messages SET content = 'edited yankee' WHERE id = ?", (first,))
    assert db.get_messages("shared")[0]["content"] == "edited yankee"
    assert [h.message_id for h in db.search("yankee")] == [first]
    db.rebuild_search_index()
    assert [(h.message_id, h.via) for h in db.search("yankee")] == [(first, "fts")]
    assert db.search("deleted") == []


def test_content_edit_on_a_damaged_index_marks_it_stale(tmp_path, open_store):
    path = tmp_path / "s.db"
    fill(path, 40)
    junk_fts_blocks(path)
    db = open_store(path)
    first = db.get_messages("shared")[0]["_db_persisted"].id
    with db.atomic() as conn:
        conn.execute("UPDATE messages SET content = 'edited zebra' WHERE id = ?", (first,))
    assert [h.message_id for h in db.search("zebra")] == [first]  # the change log's row
    db.catch_up_index()
    assert db.search_index_stale()["sqlite_code"] == apsw.SQLITE_CORRUPT_VTAB
    assert [h.message_id for h in db.search("zebra")] == [first]


def test_term_table_damage_alone_also_fails_open(tmp_path, open_store):
    path = tmp_path / "s.db"
    fill(path, 40)
    assert junk_fts_blocks(path, table="messages_terms") > 0
    db = open_store(path)
    rid = db.append_message("shared", {"role": "user", "content": "東京タワー after damage"})
    db.catch_up_index()
    assert db.search_index_stale() is not None
    hits = db.search("東京タワー")
    assert [(h.message_id, h.via) for h in hits] == [(rid, "fallback")]
    db.rebuild_search_index()
    assert [(h.message_id, h.via) for h in db.search("東京タワー")] == [(rid, "terms")]


def _damage(path, kind: str) -> None:
    if kind == "blocks":    # FTS5 finds it: SQLITE_CORRUPT_VTAB
        assert junk_fts_blocks(path) > 0
    else:                   # b-tree pages: plain SQLITE_CORRUPT
        assert junk_pages(path, "messages_fts_data")


@pytest.mark.parametrize("kind", ["blocks", "pages"])
def test_transcript_flush_and_compaction_fail_open(tmp_path, open_store, kind):
    """A TranscriptWriter flush on a damaged index: the flush lands, nothing
    is spooled or quarantined, and the fallback search finds it."""
    from sessiondb import TranscriptWriter
    path = tmp_path / "s.db"
    fill(path, 40)
    _damage(path, kind)
    db = open_store(path)
    writer = TranscriptWriter(db, "shared")
    msgs = db.get_messages("shared")
    msgs += [{"role": "user", "content": "xylophone after the damage"},
             {"role": "assistant", "content": "xylophone answered"}]
    result = writer.flush(msgs)
    assert result.inserted == 2 and writer.unwritten == ()
    assert not db.quarantined and not (tmp_path / "spool").exists()
    db.catch_up_index()
    stale = db.search_index_stale()
    assert stale is not None and stale["reason"].startswith("indexing failed")
    assert writer.verify(msgs) == []
    new_ids = [m["_db_persisted"].id for m in msgs[-2:]]
    hits = db.search("xylophone", limit=10)
    assert sorted(h.message_id for h in hits) == sorted(new_ids)
    assert all(h.via == "fallback" for h in hits)
    # compaction inserts an (indexed) summary row: it lands as well
    absorbed = [m["_db_persisted"].id for m in msgs[:5]]
    writer.compact(msgs, absorbed, {"role": "user", "content": "summary quetzal"})
    assert writer.verify(msgs) == []
    assert [h.via for h in db.search("quetzal")] == ["fallback"]


@pytest.mark.parametrize("kind", ["blocks", "pages"])
def test_import_fails_open(tmp_path, open_store, kind):
    """An export imported into a store whose index is damaged: every message
    lands, and the fallback search finds the imported text."""
    from sessiondb.maintenance.export import export_to_path
    from sessiondb.importers.importer import import_export_file
    source = open_store(tmp_path / "src.db")
    source.create_session("incoming", source="test", title="Incoming")
    source.append_messages("incoming", [{"role": "user", "content": f"walrus number {i}"}
                                        for i in range(7)])
    export = tmp_path / "export.jsonl"
    export_to_path(source.core, None, "jsonl", export)
    path = tmp_path / "s.db"
    fill(path, 40)
    _damage(path, kind)
    db = open_store(path)
    result = import_export_file(db, export)
    assert result.messages_added == 7
    db.catch_up_index()
    assert not db.quarantined and db.search_index_stale() is not None
    assert [m["content"] for m in db.get_messages("incoming")] == [
        f"walrus number {i}" for i in range(7)]
    hits = db.search("walrus", limit=20)
    assert len(hits) == 7 and {h.session_id for h in hits} == {"incoming"}
    assert all(h.via == "fallback" for h in hits)


@pytest.mark.parametrize("op", ["import-spool", "delete"])
def test_spool_import_and_session_delete_fail_open(tmp_path, open_store, op):
    """import-spool and delete_session on b-tree damage in the index (each
    the first write after the damage): the spooled messages land and are
    found by the fallback; the delete goes through."""
    from sessiondb import Cause, StoreCorrupt
    from sessiondb.importers.spool_import import import_spool, spool_failed_write
    path = tmp_path / "s.db"
    fill(path, 40)
    db = open_store(path)
    db.create_session("doomed", source="test")
    db.append_message("doomed", {"role": "user", "content": "to be deleted"})
    spooled = [{"role": "user", "content": f"narwhal spooled {i}"} for i in range(3)]
    err = StoreCorrupt("disk was full", path=str(path))
    err.cause = Cause.DISK_FULL
    assert spool_failed_write(db.core, "shared", spooled, err) is not None
    db.close()
    _damage(path, "pages")
    db = open_store(path)
    if op == "import-spool":
        report = import_spool(db)
        assert report.imported == 3 and report.problems == []
        db.catch_up_index()
        assert [h.via for h in db.search("narwhal", limit=10)] == ["fallback"] * 3
    else:
        assert db.delete_session("doomed") == 1
        db.catch_up_index()
        assert db.search("deleted") == [] and len(db.get_messages("shared")) == 40
    assert not db.quarantined and db.search_index_stale() is not None


def test_search_on_index_and_canonical_damage_writes_nothing(tmp_path, open_store):
    """A search meets index damage, but a canonical table is damaged too: the
    same judgement as the containment guard calls that structural, so the
    search raises instead of writing the stale marker into a damaged file."""
    path = tmp_path / "s.db"
    fill(path, 40)
    junk_pages(path, "messages_fts_data")
    junk_pages(path, "leases")
    db = open_store(path)
    with pytest.raises(StoreCorrupt):
        db.search("alpha", limit=1000)
    assert db.meta("fts_stale") is None
    with db._read() as conn:
        assert triggers_attached(conn)


def test_flush_inside_a_callers_transaction_on_a_damaged_index(tmp_path, open_store):
    """A flush inside the caller's transaction on a damaged index: the
    caller's other writes commit; the indexer marks the index stale later."""
    from sessiondb import TranscriptWriter
    path = tmp_path / "s.db"
    fill(path, 40)
    junk_fts_blocks(path)
    db = open_store(path)
    writer = TranscriptWriter(db, "shared")
    msgs = db.get_messages("shared") + [{"role": "user", "content": "ocelot nested flush"}]
    with db.atomic() as conn:
        conn.execute("INSERT INTO state_meta(key, value) VALUES ('caller', 'kept')")
        assert writer.flush(msgs).inserted == 1
    assert db.meta("caller") == "kept" and writer.verify(msgs) == []
    db.catch_up_index()
    assert db.search_index_stale()["sqlite_code"] == apsw.SQLITE_CORRUPT_VTAB
    assert [h.via for h in db.search("ocelot")] == ["fallback"]


def test_fts_junk_that_reads_as_out_of_memory_fails_open(tmp_path, open_store):
    """FTS5 decoding junk blocks can read a garbage size and report SQLITE_NOMEM
    instead of corruption; the indexer must still mark the index stale."""
    import random
    path = tmp_path / "s.db"
    with SessionDB(path) as db:
        db.create_session("s", source="t")
        db.append_messages("s", [{"role": "user", "content": f"alpha beta {i}"}
                                 for i in range(50)])
    raw = apsw.Connection(str(path))
    rng = random.Random(13)  # a layout whose junk FTS5 reports as out of memory
    for rid, size in raw.execute("SELECT id, length(block) FROM messages_fts_data ORDER BY id"
                                 ).fetchall():
        raw.execute("UPDATE messages_fts_data SET block = ? WHERE id = ?",
                    (rng.randbytes(size), rid))
    with pytest.raises(apsw.NoMemError):
        raw.execute("INSERT INTO messages_fts(messages_fts, rank) VALUES ('integrity-check', 0)")
    raw.close()
    db = open_store(path)
    rid = db.append_message("s", {"role": "user", "content": "gamma after the junk"})
    db.catch_up_index()
    assert db.search_index_stale() is not None
    assert not db.quarantined
    hits = db.search("gamma")
    assert [(h.message_id, h.via) for h in hits] == [(rid, "fallback")]
