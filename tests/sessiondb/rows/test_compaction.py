"""Micro-compaction archival: archive, summary in place, supersede, restore."""
from __future__ import annotations

import multiprocessing as mp

import pytest

from sessiondb import (MARKER_KEY, UID_KEY, CompactionError, CompactionNotFound, InvalidInput,
                       LeaseLost, Persisted, SessionDB, StorageError, TranscriptWriter,
                       apply_compaction, strip_markers)
from tests.helpers import transcript_workers as workers
from tests.helpers.faults import fail_writes

pytestmark = pytest.mark.both_backends


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def summary(text: str) -> dict:
    return {"role": "user", "content": text, "summary": True}


def all_rows(db: SessionDB) -> list[tuple]:
    with db._read() as conn:
        return conn.execute("SELECT id, session_id, position, content, state, compaction_id,"
                            " kind FROM messages ORDER BY id").fetchall()


def contents(db: SessionDB, sid: str) -> list[str]:
    return [m["content"] for m in db.get_messages(sid)]


def seeded(db: SessionDB, sid: str, n: int) -> list[int]:
    return db.append_messages(sid, [user(f"m{i}") for i in range(n)])


def test_compaction_archives_and_puts_summary_in_place(db, sid):
    ids = seeded(db, sid, 6)
    s = summary("S1")
    result = db.archive_and_compact(sid, ids[1:4], s)
    assert contents(db, sid) == ["m0", "S1", "m4", "m5"]
    assert s[MARKER_KEY] == Persisted(result.summary_id, s[MARKER_KEY].fingerprint)
    assert result.absorbed_ids == tuple(ids[1:4]) and result.superseded_ids == ()
    everything = db.get_messages(sid, include_archived=True)
    assert [(m["content"], m["_db_state"], m["_db_compaction_id"]) for m in everything] == [
        ("m0", "active", None), ("m1", "archived", result.compaction_id),
        ("S1", "active", None), ("m2", "archived", result.compaction_id),
        ("m3", "archived", result.compaction_id), ("m4", "active", None),
        ("m5", "active", None)]
    with db._read() as conn:
        assert conn.execute("SELECT kind FROM messages WHERE id = ?",
                            (result.summary_id,)).fetchone() == ("rolling_summary",)
    assert len(all_rows(db)) == 7  # nothing deleted


def test_supersede_only_archives_compaction_summaries(db, sid):
    ids = seeded(db, sid, 6)
    # An ordinary message that merely looks like a summary is never superseded.
    db.append_message(sid, summary("not a rolling summary"))
    first = db.archive_and_compact(sid, ids[0:2], summary("S1"))
    second = db.archive_and_compact(sid, ids[3:5], summary("S2"))
    assert second.superseded_ids == (first.summary_id,)
    assert contents(db, sid) == ["m2", "S2", "m5", "not a rolling summary"]
    kept = db.archive_and_compact(sid, [ids[5]], summary("S3"), supersede_previous=False)
    assert kept.superseded_ids == ()
    assert contents(db, sid) == ["m2", "S2", "S3", "not a rolling summary"]


def test_absorbing_the_previous_summary(db, sid):
    ids = seeded(db, sid, 4)
    first = db.archive_and_compact(sid, ids[:2], summary("S1"))
    second = db.archive_and_compact(sid, [first.summary_id, ids[2]], summary("S2"))
    assert second.superseded_ids == ()  # it was absorbed, not superseded
    assert contents(db, sid) == ["S2", "m3"]


@pytest.mark.parametrize("case", ["other_session", "archived", "rewound", "missing", "empty",
                                  "bool", "duplicate"])
def test_bad_absorbed_ids_change_nothing(db, sid, case):
    ids = seeded(db, sid, 4)
    other = db.create_session("s2", source="test")
    foreign = db.append_message(other, user("elsewhere"))
    first = db.archive_and_compact(sid, [ids[0]], summary("S1"))
    writer = TranscriptWriter(db, sid)
    msgs = db.get_messages(sid)
    writer.rewind(msgs, 1)  # ids[3] is now rewound
    bad = {"other_session": [ids[1], foreign], "archived": [ids[0], ids[1]],
           "rewound": [ids[2], ids[3]], "missing": [ids[1], 999_999], "empty": [],
           "bool": [True], "duplicate": [ids[1], ids[1]]}[case]
    before = all_rows(db)
    s = summary("S2")
    with pytest.raises(CompactionError) as info:
        db.archive_and_compact(sid, bad, s)
    offending = {"other_session": [foreign], "archived": [ids[0]], "rewound": [ids[3]],
                 "missing": [999_999], "bool": [True]}.get(case, [])
    assert info.value.ids == offending
    assert all_rows(db) == before
    assert MARKER_KEY not in s
    assert contents(db, sid) == ["S1", "m1", "m2"]
    assert first.summary_id in [m[MARKER_KEY].id for m in db.get_messages(sid)]


def test_restore_undoes_one_compaction_in_order(db, sid):
    ids = seeded(db, sid, 6)
    first = db.archive_and_compact(sid, ids[0:2], summary("S1"))
    second = db.archive_and_compact(sid, ids[2:4], summary("S2"))
    with pytest.raises(CompactionError, match="no longer live"):
        db.restore_compaction(first.compaction_id)  # S1 was superseded by the second
    restored = db.restore_compaction(second.compaction_id)
    assert sorted(restored.restored_ids) == sorted([first.summary_id, ids[2], ids[3]])
    assert contents(db, sid) == ["S1", "m2", "m3", "m4", "m5"]
    with pytest.raises(CompactionError, match="already restored"):
        db.restore_compaction(second.compaction_id)
    db.restore_compaction(first.compaction_id)
    assert contents(db, sid) == [f"m{i}" for i in range(6)]
    assert [c["restored_at"] is not None for c in db.list_compactions(sid)] == [True, True]
    assert len(all_rows(db)) == 8
    with pytest.raises(CompactionNotFound):
        db.restore_compaction("nope")
    with pytest.raises(InvalidInput):
        db.restore_compaction(None)  # type: ignore[arg-type]


def test_compaction_and_restore_check_the_lease(db, sid):
    ids = seeded(db, sid, 3)
    db.acquire_lease(sid, "owner", 60)
    before = all_rows(db)
    with pytest.raises(LeaseLost):
        db.archive_and_compact(sid, ids[:2], summary("S"), holder="intruder")
    assert all_rows(db) == before
    result = db.archive_and_compact(sid, ids[:2], summary("S"), holder="owner")
    with pytest.raises(LeaseLost):
        db.restore_compaction(result.compaction_id, holder="intruder")
    assert contents(db, sid) == ["S", "m2"]


def test_in_memory_helper_leaves_nothing_for_the_next_flush(db, sid):
    writer = TranscriptWriter(db, sid)
    msgs = [user(f"m{i}") for i in range(8)]
    writer.flush(msgs)
    absorbed = msgs[2:5]
    s = summary("S")
    result = db.archive_and_compact(sid, [m[MARKER_KEY].id for m in absorbed], s)
    assert apply_compaction(msgs, result, s) == 2
    assert msgs[2] is s
    assert all(MARKER_KEY not in m and UID_KEY not in m for m in absorbed)
    flushed = writer.flush(msgs)
    assert (flushed.inserted, flushed.updated) == (0, 0)
    assert writer.verify(msgs) == []
    with pytest.raises(InvalidInput):
        apply_compaction(msgs, result, summary("another dict"))


def test_writer_compact_keeps_its_cursor(db, sid):
    writer = TranscriptWriter(db, sid)
    msgs = [user(f"m{i}") for i in range(50)]
    writer.flush(msgs)
    writer.compact(msgs, [m[MARKER_KEY].id for m in msgs[:40]], summary("S"))
    assert len(msgs) == 11
    result = writer.flush(msgs)
    assert (result.inserted, result.updated, result.scanned, result.skipped) == (0, 0, 1, 10)
    assert writer.verify(msgs) == []
    msgs.append(user("unflushed"))
    with pytest.raises(CompactionError, match="flush first"):
        writer.compact(msgs, [msgs[-1].get(MARKER_KEY, Persisted(-1, "")).id], summary("x"))


def test_concurrent_append_between_summary_start_and_commit(open_store, db, sid):
    writer = TranscriptWriter(db, sid)
    msgs = [user(f"m{i}") for i in range(6)]
    writer.flush(msgs)
    absorbed = [m[MARKER_KEY].id for m in msgs[:4]]  # the agent starts summarising these
    other = open_store()  # another connection appends while the summary is produced
    other.append_messages(sid, [user("late1"), user("late2")])
    s = summary("S")
    writer.compact(msgs, absorbed, s)
    assert contents(db, sid) == ["S", "m4", "m5", "late1", "late2"]
    assert other.get_messages(sid, tail=2)[0]["content"] == "late1"


def test_compaction_while_another_process_appends(tmp_path):
    path = str(tmp_path / "busy.db")
    with SessionDB(path) as db:
        sid = db.create_session("busy", source="test")
        writer = TranscriptWriter(db, sid)
        msgs = [user(f"m{i}") for i in range(30)]
        writer.flush(msgs)
        ctx = mp.get_context("spawn")
        with ctx.Manager() as manager, ctx.Pool(1) as pool:
            started = manager.Event()
            job = pool.apply_async(workers.tagged_appender, (path, sid, "P", 300, started))
            assert started.wait(60)
            results = []
            for k in range(3):  # three compactions race the appender's commits
                live = [m[MARKER_KEY].id for m in msgs[1:9]]
                results.append(writer.compact(msgs, live, summary(f"S{k}")))
            assert job.get(timeout=120)["errors"] == []
        live = db.get_messages(sid)
        ours = [m["content"] for m in live if "tag" not in m]
        theirs = [m["seq"] for m in live if m.get("tag") == "P"]
        assert ours == ["m0", "S2"] + [f"m{i}" for i in range(23, 30)]
        assert theirs == list(range(300))
        assert [m["content"] for m in live[:2 + 7]] == ours  # appended rows come after ours
        assert len(db.get_messages(sid, include_archived=True)) == 30 + 300 + 3
        assert db.quick_check() == ["ok"]


def test_failed_compaction_changes_nothing(db, sid):
    ids = seeded(db, sid, 3)
    fail_writes(db, "compactions")
    before = all_rows(db)
    s = summary("S")
    with pytest.raises(StorageError, match="injected"):
        db.archive_and_compact(sid, ids[:2], s)
    assert all_rows(db) == before
    assert MARKER_KEY not in s


def test_helper_matches_by_row_id_when_a_uid_is_missing(db, sid):
    writer = TranscriptWriter(db, sid)
    msgs = [user("a"), user("b"), user("c")]
    writer.flush(msgs)
    del msgs[0][UID_KEY]  # a hand-made marker without its uid
    s = summary("S")
    result = db.archive_and_compact(sid, [msgs[0][MARKER_KEY].id, msgs[1][MARKER_KEY].id], s)
    assert apply_compaction(msgs, result, s) == 0
    assert [m["content"] for m in msgs] == ["S", "c"]
    assert writer.flush(msgs).inserted == 0
    assert writer.verify(msgs) == []


@pytest.mark.parametrize("bad", [[[1, 2]], "12", [], None])
def test_writer_compact_refuses_malformed_ids(db, sid, bad):
    writer = TranscriptWriter(db, sid)
    msgs = [user("a")]
    writer.flush(msgs)
    with pytest.raises(CompactionError):
        writer.compact(msgs, bad, summary("S"))
    assert contents(db, sid) == ["a"]
