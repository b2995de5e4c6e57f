"""Recover takes the source's search index over as rows when that equals a rebuild.

The copy path and a re-index of the same output answer every query of a
corpus identically; a source whose index pages are damaged is re-indexed
(the fallback), as is one whose rows did not all come back; a source with
an indexing backlog (rows above its watermark, a change log) is copied and
then caught up, so the output's index is complete either way.
"""
from __future__ import annotations

import json
import shutil
import time
from pathlib import Path

import apsw
import pytest

from sessiondb.index.fts_build import PREFIX, cores
from hstate_recovery.output.bulk import fill_search
from hstate_recovery.salvage.pipeline import recover
from hstate_recovery.output.search_reuse import rebuild, take_over
from hstate_recovery.output.write_stats import WriteStats
from sessiondb import SessionDB
from sessiondb.index import search_index
from tests.helpers import damage

WORDS = ["kubernetes deployment rollback", "naïve café résumé", "東京の天気は晴れ",
         "segfault in libfoo.so at 0xdeadbeef", "quarterly revenue forecast"]
QUERIES = ["kubernetes", "rollback", "cafe", "résumé", "東京", "天気", "segfault",
           "deadbeef", "libfoo", "revenue forecast", "forecast", "dep", "nothing-here",
           "session 3", "lorem"]


def _corpus(path: Path, *, backlog: bool = False) -> None:
    """A store with varied text: plain, accented, CJK, JSON blocks, tool output."""
    with SessionDB(path, background_index=False) as db:
        for s in range(4):
            sid = db.create_session(f"s{s}", source="test", title=f"session {s}")
            batch = [{"role": "user" if i % 2 else "assistant",
                      "content": f"session {s} note {i}: {WORDS[(s + i) % len(WORDS)]}"}
                     for i in range(30)]
            batch.append({"role": "assistant", "content": [
                {"type": "text", "text": f"blocks of session {s} mention kubernetes"}]})
            batch.append({"role": "tool", "tool_call_id": f"t{s}",
                          "content": "segfault log line\n" * 50})
            db.append_messages(sid, batch)
        db.catch_up_index()
    if backlog:  # (after close, which catches the index up) a row above the watermark
        conn = apsw.Connection(str(path))  # and an edited row the index holds
        cols = [r[1] for r in conn.execute("PRAGMA table_info(messages)") if r[1] != "id"]
        picked = ", ".join({"uid": "'late-row'", "content": "'late revenue forecast'"}.get(c, c)
                           for c in cols)
        conn.execute(f"INSERT INTO messages({', '.join(cols)}) SELECT {picked} FROM messages "
                     "WHERE id = 1")
        conn.execute("UPDATE messages SET content = 'rewritten rollback text' WHERE id = 3")
        conn.close()


def _smash(path: Path, pages: list[int]) -> None:
    (size,) = damage.sql(path, "PRAGMA page_size")[0]
    for page in pages:
        damage.smash_page(path, page, size)


def _answers(path: Path) -> dict[str, list[int]]:
    with SessionDB(path, background_index=False) as db:
        return {q: sorted(h.message_id for h in db.search(q, limit=200)) for q in QUERIES}


def _recover(src: Path, out: Path, **kw) -> dict:
    report = recover(src, out, **kw)
    assert report.verification["ok"], report.verification
    return report.to_dict()


def test_copied_index_answers_like_a_reindex(tmp_path):
    src, out = tmp_path / "state.db", tmp_path / "out.db"
    _corpus(src)
    report = _recover(src, out)
    assert report["search_index"] == {"method": "copied", "reason": None}
    reindexed = tmp_path / "reindexed.db"
    shutil.copy(out, reindexed)
    rebuild(reindexed, lambda conn: fill_search(conn, lambda *_: None))
    copied, fresh = _answers(out), _answers(reindexed)
    assert copied == fresh
    assert copied["kubernetes"] and copied["東京"] and copied["cafe"]  # the corpus is searched
    assert copied == _answers(src)


def test_backlog_of_the_source_is_indexed_after_the_copy(tmp_path):
    src, out = tmp_path / "state.db", tmp_path / "out.db"
    _corpus(src, backlog=True)
    (changes,) = damage.sql(src, "SELECT count(*) FROM search_changes")[0]
    assert changes == 1
    report = _recover(src, out)
    assert report["search_index"]["method"] == "copied"
    (w,), (top,), (left,) = (damage.sql(out, q)[0] for q in (
        "SELECT CAST(value AS INTEGER) FROM state_meta WHERE key = 'fts_watermark'",
        "SELECT max(id) FROM messages", "SELECT count(*) FROM search_changes"))
    assert (w, left) == (top, 0)
    answers = _answers(out)
    assert 3 in answers["rollback"] and top in answers["forecast"]
    ids = [r[0] for r in damage.sql(out, "SELECT rowid FROM messages_fts WHERE messages_fts "
                                         "MATCH 'rewritten'")]
    assert ids == [3]


def test_damaged_source_index_is_rebuilt(tmp_path):
    src, out = tmp_path / "state.db", tmp_path / "out.db"
    _corpus(src)
    _smash(src, [damage.pages_of(src, name, "leaf")[0]
                 for name in ("messages_fts_data", "messages_terms_data")])
    report = _recover(src, out)
    assert report["search_index"]["method"] == "rebuilt"
    assert "not sound" in report["search_index"]["reason"]
    assert report["tables"]["messages"]["recovered"] == 4 * 32
    # on two cores the word index came from a second process: the same answers
    # as one built in this one
    assert report["search_index"]["processes"] == (2 if cores() >= 2 else 1)
    assert not list(tmp_path.glob(PREFIX + "*"))  # the builder's scratch is gone
    assert _answers(out) == _answers_via_rebuild(out, tmp_path)
    assert _answers(out)["kubernetes"]


def test_take_over_refuses_an_unreadable_index_and_leaves_it_empty(tmp_path):
    """Straight at the primitive: a source whose index pages cannot be read
    (inspect would have said so; here nothing stops the attempt) gives a
    reason, and the output's index is left empty for the rebuild."""
    src, out = tmp_path / "state.db", tmp_path / "out.db"
    _corpus(src)
    _recover(src, out)
    _smash(src, damage.pages_of(src, "messages_fts_data", "leaf"))
    conn = apsw.Connection(str(out), flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_URI)
    try:
        reason = take_over(conn, src, WriteStats(), lambda *_: None)
        assert reason is not None
        assert damage_free(conn)
    finally:
        conn.close()


def damage_free(conn: apsw.Connection) -> bool:
    """The word index and the term table empty, nothing logged, the watermark at 0."""
    rows = [search_index.document_count(conn, "messages_fts"),
            conn.execute("SELECT count(*) FROM messages_terms").fetchone()[0]]
    w = conn.execute("SELECT value FROM state_meta WHERE key = 'fts_watermark'").fetchone()[0]
    logged = conn.execute("SELECT count(*) FROM search_changes").fetchone()[0]
    return rows == [0, 0] and str(w) == "0" and logged == 0


def test_rows_not_all_read_whole_are_reindexed(tmp_path):
    """Messages carved from pages may differ from what the source indexed:
    the index is rebuilt from what came back."""
    src, out = tmp_path / "state.db", tmp_path / "out.db"
    truth = damage.build_store(src, sessions=3, per_session=60)
    damage.smash_page(src, damage.pages_of(src, "messages", "leaf")[2])
    report = recover(src, out, allow_partial=True).to_dict()
    assert report["verification"]["ok"]
    assert report["search_index"]["method"] == "rebuilt"
    assert report["tables"]["messages"]["recovered"] < len(truth.messages)
    with SessionDB(Path(report["output"]), background_index=False) as db:
        assert db.search("lorem", limit=500)


def test_report_json_names_the_method(tmp_path):
    src, out = tmp_path / "state.db", tmp_path / "out.db"
    _corpus(src)
    rep = tmp_path / "r.json"
    recover(src, out, report_path=rep)
    assert json.loads(rep.read_text())["search_index"]["method"] == "copied"


def test_stale_source_index_is_rebuilt(tmp_path):
    src, out = tmp_path / "state.db", tmp_path / "out.db"
    _corpus(src)
    damage.sql(src, "INSERT INTO state_meta(key, value) VALUES ('fts_stale', '{}')")
    report = _recover(src, out)
    assert report["search_index"]["method"] == "rebuilt"
    assert _answers(out) == _answers_via_rebuild(out, tmp_path)


def _answers_via_rebuild(out: Path, tmp_path: Path) -> dict[str, list[int]]:
    again = tmp_path / "again.db"
    shutil.copy(out, again)
    rebuild(again, lambda conn: fill_search(conn, lambda *_: None))
    return _answers(again)


def _rebuilt_with_builder(out: Path, *, kill: bool) -> tuple[int, dict[str, float]]:
    """The output's index emptied on a connection (as a failed take-over
    does) and rebuilt by recover's path there, with a word-index builder
    (sessiondb.index.fts_build, shared with the import), killed -9 or not."""
    import os
    import signal
    from hstate_recovery.output import bulk, search_reuse
    from sessiondb.index.fts_build import ParallelBuild
    from sessiondb.index.search_index import FTS_TABLE
    conn = apsw.Connection(str(out), flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_URI)
    try:
        search_reuse._empty(conn)  # this connection has now read both search tables
        with ParallelBuild(out, (FTS_TABLE,), follow=False) as builder:
            if kill:
                for p in builder.procs.values():
                    os.kill(p.pid, signal.SIGKILL)  # our own child, by its pid
            timings: dict[str, float] = {}
            return bulk._rebuild(conn, lambda *_: None, timings, builder), timings
    finally:
        conn.close()


def test_recover_rebuild_with_a_builder_or_a_killed_one_answers_like_a_rebuild(tmp_path):
    src, out = tmp_path / "state.db", tmp_path / "out.db"
    _corpus(src)
    _recover(src, out)
    expected = _answers_via_rebuild(out, tmp_path)
    processes, timings = _rebuilt_with_builder(out, kill=False)
    assert processes == 2 and timings["search_builder_cpu_s"] > 0
    assert _answers(out) == expected
    integrity = apsw.Connection(str(out))
    for table in ("messages_fts", "messages_terms"):
        integrity.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 0)")
    assert search_index.terms_missing(integrity) == 0
    integrity.close()
    processes, timings = _rebuilt_with_builder(out, kill=True)
    assert processes == 1 and "search_builder_cpu_s" not in timings  # built here instead
    assert _answers(out) == expected
    assert not list(tmp_path.glob(PREFIX + "*"))


def test_a_refused_take_over_rebuilds_with_a_builder_and_leaves_no_scratch(tmp_path):
    """bulk's search step when the source's index cannot be taken over (here
    its index is marked stale): rebuilt, on two cores with a builder that
    is closed again, and the answers are a rebuild's."""
    from hstate_recovery.output import bulk
    src, out = tmp_path / "state.db", tmp_path / "out.db"
    _corpus(src)
    _recover(src, out)
    expected = _answers_via_rebuild(out, tmp_path)
    stale = tmp_path / "stale.db"
    shutil.copy(src, stale)
    damage.sql(stale, "INSERT INTO state_meta(key, value) VALUES ('fts_stale', 'test')")
    conn = apsw.Connection(str(out), flags=apsw.SQLITE_OPEN_READWRITE | apsw.SQLITE_OPEN_URI)
    stats = WriteStats()
    try:
        bulk._search(conn, stats, lambda *_: None, stale, None, None)
    finally:
        conn.close()
    assert stats.search_index["method"] == "rebuilt"
    assert "stale" in stats.search_index["reason"]
    assert stats.search_index["processes"] == (2 if cores() >= 2 else 1)
    assert not list(tmp_path.glob(PREFIX + "*"))
    assert _answers(out) == expected


def test_a_damaged_source_is_indexed_by_a_builder_following_the_lanes(tmp_path):
    """A source whose messages and index pages are damaged: the lanes write
    rows out of id order (bisection, then the carver below), and the
    word-index builder that followed them gives a rebuild's answers."""
    src, out = tmp_path / "state.db", tmp_path / "out.db"
    _corpus(src)
    leaves = damage.pages_of(src, "messages", "leaf")
    _smash(src, [leaves[len(leaves) // 2], damage.pages_of(src, "messages_fts_data", "leaf")[0]])
    report = recover(src, out, allow_partial=True).to_dict()
    assert report["verification"]["ok"], report["verification"]
    assert report["search_index"]["method"] == "rebuilt"
    assert report["search_index"].get("followed") is (True if cores() >= 2 else None)
    assert not list(tmp_path.glob(PREFIX + "*"))
    assert _answers(out) == _answers_via_rebuild(out, tmp_path)
    assert _answers(out)["kubernetes"]


def _insert_rows(conn: apsw.Connection, rows: list[tuple], cols: list[str]) -> None:
    with conn:
        conn.executemany(f"INSERT INTO messages({', '.join(cols)}) VALUES "
                         f"({', '.join('?' * len(cols))})", rows)


def test_a_following_builder_reads_rows_in_any_order_and_refuses_a_changed_one(tmp_path):
    from sessiondb.index.fts_build import ParallelBuild
    from sessiondb.index.search_index import FTS_TABLE
    src, out = tmp_path / "state.db", tmp_path / "out.db"
    _corpus(src)
    shutil.copy(src, out)
    conn = apsw.Connection(str(out))
    cols = [r[1] for r in conn.execute("PRAGMA table_info(messages)")]
    rows = conn.execute("SELECT * FROM messages ORDER BY id").fetchall()
    search_index.drop_triggers(conn)  # rows come and go as the lanes write them
    with conn:
        conn.execute("DELETE FROM messages")
        conn.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('delete-all')")
    expected = {q: ids for q, ids in _answers_via_rebuild(src, tmp_path).items()}
    for changed in (False, True):
        with ParallelBuild(out, (FTS_TABLE,), follow=True, track=True) as builder:
            # the tail and the head in one commit, read before the middle comes
            for part in (rows[-20:] + rows[:40], rows[40:-20]):
                _insert_rows(conn, part, cols)
                # the builder polls every 50 ms; if it reads later than this the
                # test loses its edge (test_gaps_... below keeps it), never passes wrongly
                time.sleep(0.5)
            assert builder.finish(60) == rows[-1][0]  # it has read every row
            if changed:  # then one changes (FTS5 would need its old text to drop it)
                conn.execute("UPDATE messages SET content = 'changed later' WHERE id = 7")
            counted = builder.stale_rows()  # (on its own connection: recover's other thread)
            assert counted == int(changed)
            fresh = apsw.Connection(str(out), flags=apsw.SQLITE_OPEN_READWRITE
                                    | apsw.SQLITE_OPEN_URI)
            with builder.attached(fresh), fresh:
                (read,) = fresh.execute(f"SELECT count(*) FROM built_{FTS_TABLE}.indexed"
                                        ).fetchone()
                assert read == len(rows)  # every row by the builder, none left to correct
                builder.copy(fresh)
                # counted here when not changed, taken from stale_rows when changed
                corrected = builder.correct(fresh, counted if changed else None)
            fresh.close()
        assert corrected is not changed
        if not changed:
            with conn:
                search_index.fill_terms(conn)
                search_index.set_watermark(conn, rows[-1][0])
            got = _answers(out)
            assert {q: got[q] for q in ("dep", "libfoo", "deadbeef", "東京")} == \
                {q: expected[q] for q in ("dep", "libfoo", "deadbeef", "東京")}
            with conn:
                conn.execute("DELETE FROM messages")
                conn.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('delete-all')")
    conn.close()


def test_gaps_keep_the_ids_between_two_runs_open():
    """The following builder's bookkeeping, without timing: one read that
    returned the head and the tail leaves the middle to be read (the first
    version took every id from the first to the last as read)."""
    from sessiondb.index.fts_build import MAX_ROWID, MIN_ROWID, _Gaps
    gaps = _Gaps()
    gaps.read(list(range(1, 41)) + list(range(109, 129)))
    assert gaps.open() == [(MIN_ROWID, 0), (41, 108), (129, MAX_ROWID)]
    gaps.read(list(range(41, 109)))
    assert gaps.open() == [(MIN_ROWID, 0), (129, MAX_ROWID)]


def test_a_following_builder_reads_only_the_holes_rows_came_into(tmp_path):
    """One statement tells which holes below the rows read have rows now: the
    others are not read again this pass (each cost an empty query), the open
    top always is, and a hole with a row, at either end of the id space, is."""
    from sessiondb.index.fts_build import MAX_ROWID, MIN_ROWID, _worth_reading
    src = tmp_path / "state.db"
    _corpus(src)
    damage.sql(src, "DELETE FROM messages WHERE id NOT IN (3, 50, 51, 90)")
    conn = apsw.Connection(str(src), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        holes = [(MIN_ROWID, 3), (4, 49), (52, 60), (61, 89)]
        top = [(100, MAX_ROWID)]
        assert _worth_reading(conn, holes + top) == [(MIN_ROWID, 3)] + top
        assert _worth_reading(conn, [(MIN_ROWID, -1), (4, 49), (50, 50), (52, 90)]) == \
            [(50, 50), (52, 90)]  # no open top: every id above was read
        assert _worth_reading(conn, top) == top
        assert _worth_reading(conn, []) == []
    finally:
        conn.close()


def _wait_until_reading(builder, timeout: float = 30.0) -> None:
    """Until the builder has made its scratch index, the step just before its
    first read of the store's committed rows (its process start is what
    varies, from tenths of a second to seconds on a loaded machine), then
    the few milliseconds that read takes, with a margin."""
    deadline = time.monotonic() + timeout
    while builder.scratch_bytes() == 0:
        assert time.monotonic() < deadline, "the builder never started"
        time.sleep(0.01)
    time.sleep(0.2)


def test_a_row_changed_after_the_following_builder_read_it_is_caught_beside_the_word_index(
        tmp_path):
    """recover's `_rebuild`: the builder is told the rows are final and its rows
    are checked; a row changed after the builder read it (as linking may
    quarantine one) is counted there, so the builder's index is refused and
    the word index is built in place."""
    from hstate_recovery.output.bulk import _rebuild
    from sessiondb.index.fts_build import ParallelBuild
    from sessiondb.index.search_index import FTS_TABLE
    if cores() < 2:
        pytest.skip("recover starts no search builder on one core: nothing to check")
    src, out = tmp_path / "state.db", tmp_path / "out.db"
    _corpus(src)
    expected = _answers_via_rebuild(src, tmp_path)
    shutil.copy(src, out)
    conn = apsw.Connection(str(out))
    search_index.drop_triggers(conn)
    with conn:
        conn.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('delete-all')")
        conn.execute("DELETE FROM messages_terms")
    for changed in (False, True):
        search_index.drop_triggers(conn)  # (opening the store to search put them back)
        with ParallelBuild(out, (FTS_TABLE,), follow=True, track=True) as builder:
            _wait_until_reading(builder)  # (a first read after the change below would
            # index the changed text: nothing stale, and the changed case would fail)
            if changed:
                with conn:
                    conn.execute("UPDATE messages SET content = content || ' libfoo' "
                                 "WHERE id = 7")
            timings: dict[str, float] = {}
            processes = _rebuild(conn, lambda *_: None, timings, builder)
        assert processes == (1 if changed else 2)
        if changed:  # (the rebuild copies the file alone: the change checkpointed into it)
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
            (tmp_path / "again").mkdir()
            expected = _answers_via_rebuild(out, tmp_path / "again")
            assert 7 in expected["libfoo"]
        assert _answers(out) == expected
        with conn:
            conn.execute(f"INSERT INTO {FTS_TABLE}({FTS_TABLE}) VALUES ('delete-all')")
            conn.execute("DELETE FROM messages_terms")
    conn.close()
