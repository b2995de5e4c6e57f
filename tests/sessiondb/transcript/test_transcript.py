"""The flush-scan cursor and the transcript edit operations."""
from __future__ import annotations

import pytest

from sessiondb import (MARKER_KEY, UID_KEY, InvalidInput, InvalidMessage, LeaseLost,
                       Persisted, SessionDB, SessionNotFound, StorageError, TranscriptWriter,
                       strip_markers)

from tests.helpers import faults

pytestmark = pytest.mark.both_backends


def user(text: str) -> dict:
    return {"role": "user", "content": text}


def all_rows(db: SessionDB) -> list[tuple]:
    """Every message row with its state, for 'nothing changed' checks."""
    with db._read() as conn:
        return conn.execute("SELECT id, uid, position, content, fingerprint, state"
                            " FROM messages ORDER BY id").fetchall()


def states(db: SessionDB, sid: str) -> list[tuple[str, str]]:
    return [(m["content"], m["_db_state"]) for m in db.get_messages(sid, include_archived=True)]


def fail_writes(db: SessionDB) -> None:
    """A real database failure for any insert or update of a message row."""
    faults.fail_writes(db, ops=("INSERT", "UPDATE"), message="injected failure")


def heal(db: SessionDB) -> None:
    faults.heal(db, ops=("INSERT", "UPDATE"))


@pytest.fixture
def writer(db, sid) -> TranscriptWriter:
    return TranscriptWriter(db, sid)


def test_flush_marks_and_second_flush_writes_nothing(db, sid, writer):
    msgs = [user("a"), {"role": "assistant", "content": "b", "finish_reason": "stop"}]
    first = writer.flush(msgs)
    assert (first.inserted, first.updated, first.scanned, first.skipped) == (2, 0, 2, 0)
    assert all(isinstance(m[MARKER_KEY], Persisted) for m in msgs)
    before = all_rows(db)
    again = writer.flush(msgs)
    assert (again.inserted, again.updated, again.scanned, again.skipped) == (0, 0, 1, 1)
    assert all_rows(db) == before
    assert strip_markers(db.get_messages(sid)) == strip_markers(msgs)
    assert writer.verify(msgs) == []
    assert db.get_session(sid).message_count == 2


def test_cursor_scans_only_the_new_message_of_10000(db, sid, writer):
    msgs = [user(f"m{i}") for i in range(10_000)]
    assert writer.flush(msgs).inserted == 10_000
    msgs.append(user("new"))
    result = writer.flush(msgs)
    # It looks at the cursor's boundary dict and the new one, nothing else.
    assert (result.inserted, result.updated, result.scanned, result.skipped) == (1, 0, 2, 9_999)
    assert db.get_messages(sid, tail=1)[0]["content"] == "new"


def test_new_writer_rescans_once_and_never_duplicates(db, sid, writer):
    msgs = [user(str(i)) for i in range(20)]
    writer.flush(msgs)
    # A crash after the commit but before the markers were set: uids remain.
    for m in msgs[10:]:
        del m[MARKER_KEY]
    fresh = TranscriptWriter(db, sid)
    result = fresh.flush(msgs)
    assert (result.inserted, result.updated, result.scanned) == (0, 0, 20)
    assert len(all_rows(db)) == 20
    assert fresh.flush(msgs).scanned == 1
    assert fresh.verify(msgs) == []


def test_a_different_list_object_is_rescanned(db, sid, writer):
    msgs = [user("a"), user("b")]
    writer.flush(msgs)
    copy = msgs + [user("c")]
    result = writer.flush(copy)
    assert (result.inserted, result.scanned, result.skipped) == (1, 3, 0)


def test_update_rewrites_the_row_and_scans_from_the_edit(db, sid, writer):
    msgs = [user(str(i)) for i in range(10)]
    writer.flush(msgs)
    row_id = msgs[7][MARKER_KEY].id
    edited = writer.update(msgs, 7, content="seven", note="edited")
    assert edited is msgs[7] and MARKER_KEY not in edited
    result = writer.flush(msgs)
    assert (result.inserted, result.updated, result.scanned, result.skipped) == (0, 1, 4, 6)
    assert msgs[7][MARKER_KEY].id == row_id
    assert writer.verify(msgs) == []
    assert len(all_rows(db)) == 10


def test_bad_update_changes_nothing(db, sid, writer):
    msgs = [user("a")]
    writer.flush(msgs)
    marker = msgs[0][MARKER_KEY]
    with pytest.raises(InvalidMessage) as info:
        writer.update(msgs, 0, content=object())
    assert info.value.field == "content"
    with pytest.raises(InvalidInput):
        writer.update(msgs, 0, _db_persisted=None)
    with pytest.raises(InvalidInput):
        writer.update(msgs, 5, content="x")
    assert msgs[0] == {"role": "user", "content": "a", UID_KEY: msgs[0][UID_KEY],
                       MARKER_KEY: marker}
    assert writer.flush(msgs).scanned == 1


def test_replace_takes_over_the_row(db, sid, writer):
    msgs = [user("a"), user("b"), user("c")]
    writer.flush(msgs)
    old = msgs[1]
    row_id = old[MARKER_KEY].id
    new = writer.replace(msgs, -2, {"role": "assistant", "content": "B", MARKER_KEY: "junk"})
    assert msgs[1] is new and MARKER_KEY not in new and UID_KEY not in old
    result = writer.flush(msgs)
    assert (result.inserted, result.updated) == (0, 1)
    assert new[MARKER_KEY].id == row_id
    assert [m["content"] for m in db.get_messages(sid)] == ["a", "B", "c"]


def test_fill_tail(db, sid, writer):
    msgs = [user("q"), {"role": "assistant", "content": None}]
    writer.flush(msgs)
    writer.fill_tail(msgs, "answer", finish_reason="stop")
    result = writer.flush(msgs)
    assert (result.updated, result.scanned) == (1, 2)
    (row,) = db.get_messages(sid, tail=1)
    assert strip_markers([row]) == [{"role": "assistant", "content": "answer",
                                     "finish_reason": "stop"}]
    with pytest.raises(InvalidInput):
        writer.fill_tail(msgs, "again")  # the tail is no longer empty
    with pytest.raises(InvalidInput):
        writer.fill_tail([], "x")


def test_rewind_keeps_rows_on_disk_as_rewound(db, sid, writer):
    msgs = [user(str(i)) for i in range(5)]
    writer.flush(msgs)
    writer.update(msgs, 4, content="four, edited but not flushed")
    msgs.append(user("never flushed"))
    removed = writer.rewind(msgs, 3)
    assert [m["content"] for m in removed] == ["3", "four, edited but not flushed",
                                               "never flushed"]
    assert all(MARKER_KEY not in m and UID_KEY not in m for m in removed)
    assert [m["content"] for m in msgs] == ["0", "1", "2"]
    assert states(db, sid) == [("0", "active"), ("1", "active"), ("2", "active"),
                               ("3", "rewound"), ("4", "rewound")]
    assert writer.flush(msgs).scanned == 1  # the cursor was pulled back, not dropped
    assert writer.verify(msgs) == []
    msgs.append(removed[0])  # re-adding a removed dict makes a new message
    assert writer.flush(msgs).inserted == 1
    assert len(all_rows(db)) == 6
    with pytest.raises(InvalidInput):
        writer.rewind(msgs, 99)


def test_failed_flush_raises_store_error_and_rescans_next_time(db, sid, writer):
    msgs = [user("a"), user("b")]
    writer.flush(msgs)
    writer.update(msgs, 0, content="A")
    msgs.append(user("c"))
    before = all_rows(db)
    fail_writes(db)
    with pytest.raises(StorageError, match="injected failure") as info:
        writer.flush(msgs)
    assert type(info.value) is StorageError  # the store's typed error, unchanged
    assert all_rows(db) == before
    assert [m["content"] for m in writer.unwritten] == ["A", "c"]
    assert MARKER_KEY not in msgs[0] and MARKER_KEY not in msgs[2]
    assert UID_KEY in msgs[2]  # given before the write: the retry is idempotent
    heal(db)
    result = writer.flush(msgs)
    assert (result.inserted, result.updated, result.scanned, result.skipped) == (1, 1, 3, 0)
    assert writer.unwritten == ()
    assert writer.verify(msgs) == []


def test_new_message_before_a_stored_one_is_refused(db, sid, writer):
    msgs = [user("a"), user("b")]
    writer.flush(msgs)
    writer.update(msgs, 1, content="B")
    msgs.insert(1, user("sneaked in"))
    before = all_rows(db)
    with pytest.raises(InvalidInput, match="only be added at the end"):
        writer.flush(msgs)
    assert all_rows(db) == before


def test_new_message_before_unchanged_stored_ones_is_refused(db, sid, writer):
    """The stored dicts after it need no write, so only their markers show
    that the new one would be stored out of order."""
    msgs = [user("a"), user("b"), user("c")]
    writer.flush(msgs)
    msgs.insert(1, user("sneaked in"))
    before = all_rows(db)
    with pytest.raises(InvalidInput, match="only be added at the end"):
        writer.flush(msgs)
    assert all_rows(db) == before
    del msgs[1]
    assert writer.flush(msgs).inserted == 0
    assert writer.verify(msgs) == []


def test_same_dict_twice_is_refused(db, sid, writer):
    m = user("a")
    with pytest.raises(InvalidInput, match="same dict"):
        writer.flush([m, m])
    assert all_rows(db) == []


def test_flush_with_holder_checks_the_lease(db, sid, writer):
    msgs = [user("a")]
    with pytest.raises(LeaseLost):
        writer.flush(msgs, holder="me")
    assert all_rows(db) == [] and writer.unwritten == tuple(msgs)
    db.acquire_lease(sid, "other", 60)
    with pytest.raises(LeaseLost):
        writer.flush(msgs, holder="me")
    assert all_rows(db) == []
    db.release_lease(sid, "other")
    db.acquire_lease(sid, "me", 60)
    held = TranscriptWriter(db, sid, holder="me")
    assert held.flush(msgs).inserted == 1
    held.update(msgs, 0, content="b")
    db.release_lease(sid, "me")
    with pytest.raises(LeaseLost):
        held.rewind(msgs, 1)
    assert [m["content"] for m in msgs] == ["b"]


def test_expired_lease_of_the_same_holder_can_be_renewed(tmp_path):
    now = [1000.0]
    with SessionDB(tmp_path / "c.db", clock=lambda: now[0]) as db:
        sid = db.create_session("s", source="test")
        writer = TranscriptWriter(db, sid, holder="me")
        db.acquire_lease(sid, "me", 10)
        now[0] += 11
        with pytest.raises(LeaseLost, match="expired"):
            writer.flush([user("late")])
        db.refresh_lease(sid, "me", 10)
        assert writer.flush([user("late")]).inserted == 1


def test_flush_unknown_session_and_bad_input(db):
    writer = TranscriptWriter(db, "missing")
    with pytest.raises(SessionNotFound):
        writer.flush([user("a")])
    with pytest.raises(InvalidMessage):
        writer.flush("not a list")  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage) as info:
        writer.flush([user("a"), {"role": "wizard"}])
    assert info.value.index == 1
    with pytest.raises(InvalidInput):
        TranscriptWriter(db, "../etc")


def traced_flush(db: SessionDB, writer: TranscriptWriter, msgs: list) -> list[tuple]:
    """(sql, bindings) of every statement the flush ran, via apsw's exec tracer.
    The caller pauses the background indexer: its batches run on the same
    connection and are commits of their own."""
    seen: list[tuple] = []

    def tracer(_cursor, sql, bindings):
        seen.append((sql, bindings))
        return True

    db._writer.exec_trace = tracer
    try:
        writer.flush(msgs)
    finally:
        db._writer.exec_trace = None
    return seen


# What committed between the two flushes -> statements besides the inserts:
# BEGIN, [the guard's view check (PRAGMA application_id)], [the session check
# and next-position seek, one statement], counters, COMMIT. The view check runs
# only after another connection committed; the seek only after any commit
# other than this handle's last write to the session.
BETWEEN = {"nothing": 3, "own_commit": 4, "other_handle": 5}


@pytest.mark.sqlite_only("counts SQLite statements (apsw's tracer) and query plans")
@pytest.mark.parametrize("between", sorted(BETWEEN))
@pytest.mark.parametrize("new", [1, 5])
def test_flush_runs_statements_for_new_messages_only_and_never_scans(db, sid, writer, new,
                                                                     between, open_store):
    db._indexer.pause()  # an indexing batch would be a commit between the flushes
    msgs = [user(str(i)) for i in range(2_000)]
    writer.flush(msgs)
    if between == "own_commit":
        db.record_usage(sid, input_tokens=1)
    elif between == "other_handle":
        open_store(db.path).create_session("elsewhere", source="test")
    msgs.extend(user(f"new{i}") for i in range(new))
    statements = traced_flush(db, writer, msgs)
    inserts = [s for s, _ in statements if s.lstrip().upper().startswith("INSERT")]
    assert len(inserts) == new
    assert len(statements) == BETWEEN[between] + new
    seeks = [s for s, _ in statements if s.startswith("SELECT (SELECT max(position)")]
    assert len(seeks) == (between != "nothing")
    assert any(s == "PRAGMA application_id" for s, _ in statements) == (between == "other_handle")
    with db._read() as conn:
        for sql, bindings in statements:
            if sql.lstrip().upper().startswith(("SELECT", "UPDATE", "INSERT")):
                plan = " ".join(r[3] for r in conn.execute("EXPLAIN QUERY PLAN " + sql,
                                                           bindings or ()))
                assert "SCAN messages" not in plan, (sql, plan)
    assert [m["content"] for m in db.get_messages(sid)] == [m["content"] for m in msgs]
    with db._read() as conn:
        stored = [r[0] for r in conn.execute(
            "SELECT position FROM messages WHERE session_id = ? ORDER BY id", (sid,))]
    assert stored == list(range(1, len(msgs) + 1))


@pytest.mark.sqlite_only("counts SQLite statements (apsw's tracer)")
def test_edit_flush_touches_only_the_edited_row(db, sid, writer):
    db._indexer.pause()
    msgs = [user(str(i)) for i in range(2_000)]
    writer.flush(msgs)
    writer.update(msgs, 1_990, content="edited")
    statements = traced_flush(db, writer, msgs)
    updates = [s for s, _ in statements if s.lstrip().upper().startswith("UPDATE")]
    assert len(updates) == 1 and not any(s.lstrip().upper().startswith("INSERT")
                                         for s, _ in statements)
    # BEGIN, uid lookup, the UPDATE, COMMIT: nothing committed since the last
    # flush, so neither the view check nor the session seek runs (as above).
    assert len(statements) == 4
