"""Message round-trips, validation of bad input, idempotency and atomicity."""
from __future__ import annotations

import pytest

from sessiondb import (MARKER_KEY, UID_KEY, InvalidInput, InvalidMessage, SessionDB,
                       SessionNotFound, StorageError, strip_markers)

from tests.helpers.faults import fail_writes

pytestmark = pytest.mark.both_backends


def row_count(db: SessionDB) -> int:
    with db._read() as conn:
        return conn.execute("SELECT count(*) FROM messages").fetchone()[0]


ROUND_TRIP = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "héllo wörld 😀 — 日本語 \u200b"},
    {"role": "user", "content": "nul\x00inside\x00"},
    {"role": "assistant", "content": [{"type": "text", "text": "hi 👋"},
                                      {"type": "tool_use", "id": "t1", "name": "f",
                                       "input": {"a": [1, 2.5, None, True]}}]},
    {"role": "assistant", "content": None, "finish_reason": "tool_calls",
     "tool_calls": [{"id": "c1", "type": "function",
                     "function": {"name": "search", "arguments": "{\"q\": \"x\"}"}}]},
    {"role": "tool", "tool_call_id": "c1", "name": "search", "content": "result"},
    {"role": "assistant", "reasoning": {"steps": ["a", "b"]}, "extra": None},
    {"role": "user", "content": "", "timestamp": 1700000000.5, "token_count": 7},
    {"role": "assistant", "content": "flat", "score": 0.1, "ok": True, "big": 2 ** 70,
     "none": None, "neg": -0.0},
]


def test_round_trip_exact(db, sid):
    batch = [dict(m) for m in ROUND_TRIP]
    ids = db.append_messages(sid, batch)
    assert ids == sorted(ids) and len(set(ids)) == len(ids)
    loaded = db.get_messages(sid)
    assert strip_markers(loaded) == ROUND_TRIP
    assert [m[MARKER_KEY].id for m in loaded] == ids
    assert all(m[MARKER_KEY] == b[MARKER_KEY] for m, b in zip(loaded, batch))


def test_huge_content_round_trips(db, sid):
    big = ("abc\x00😀" * (4 * 1024 * 1024))[: 20 * 1024 * 1024]
    db.append_message(sid, {"role": "user", "content": big})
    (loaded,) = db.get_messages(sid)
    assert loaded["content"] == big


def test_reappending_the_same_dicts_writes_nothing(db, sid):
    batch = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]
    first = db.append_messages(sid, batch)
    again = db.append_messages(sid, batch)
    assert again == first
    assert row_count(db) == 2
    assert db.get_session(sid).message_count == 2


def test_batch_mixing_known_and_new_dicts_returns_each_rows_own_id(db, sid):
    # A known uid inside a batch must report its existing row, and the new
    # rows after it their own ids (not a stale "last inserted" id).
    known = {"role": "user", "content": "known"}
    (known_id,) = db.append_messages(sid, [known])
    batch = [{"role": "user", "content": "new 1"}, known,
             {"role": "assistant", "content": "new 2"}]
    ids = db.append_messages(sid, batch)
    assert ids[1] == known_id
    assert len({known_id, ids[0], ids[2]}) == 3 and ids[0] < ids[2]
    assert [m["content"] for m in strip_markers(db.get_messages(sid))] == [
        "known", "new 1", "new 2"]
    assert db.get_session(sid).message_count == 3


def test_uid_survives_a_new_handle(open_store, db, sid):
    msg = {"role": "user", "content": "once"}
    db.append_message(sid, msg)
    db.close()
    other = open_store()
    copy = dict(msg)
    copy.pop(MARKER_KEY)
    other.append_message(sid, copy)  # same _db_uid -> idempotent
    assert len(other.get_messages(sid)) == 1


@pytest.mark.parametrize("bad, field", [
    ("not a dict", None),
    ({"content": "no role"}, "role"),
    ({"role": "wizard", "content": "x"}, "role"),
    ({"role": "user", "content": object()}, "content"),
    ({"role": "user", "content": "x", "when": object()}, "when"),
    ({"role": "user", "content": "lone \ud800 surrogate"}, "content"),
    ({"role": "user", "content": [{"text": "lone \udfff"}]}, "content"),
    ({"role": "user", "content": [("tuple", 1)]}, "content"),
    ({"role": "user", "content": "x", "timestamp": float("nan")}, "timestamp"),
    ({"role": "user", "content": "x", "tool_calls": "nope"}, "tool_calls"),
    ({"role": "user", "content": 12}, "content"),
    ({"role": "user", "content": "x", "pair": (1, 2)}, "pair"),
    ({"role": "user", "content": "x", "score": float("inf")}, "score"),
])
def test_bad_messages_rejected_and_nothing_written(db, sid, bad, field):
    good = {"role": "user", "content": "fine"}
    with pytest.raises(InvalidMessage) as info:
        db.append_messages(sid, [good, bad])
    assert info.value.field == field
    assert info.value.index == 1
    assert row_count(db) == 0
    assert db.get_session(sid).message_count == 0
    assert MARKER_KEY not in good


def test_append_to_unknown_session(db):
    with pytest.raises(SessionNotFound):
        db.append_message("nope", {"role": "user", "content": "x"})
    assert row_count(db) == 0


@pytest.mark.parametrize("bad_id", ["a/b", "..", "a..b", "x\ny", "tab\t", "", "-lead",
                                    "a" * 129, "nul\x00", "../etc"])
def test_bad_session_ids_rejected(db, bad_id):
    with pytest.raises(InvalidInput):
        db.create_session(bad_id, source="test")
    assert db.list_sessions() == []


def test_batch_is_all_or_nothing_when_the_database_fails_mid_batch(db, sid):
    db.append_message(sid, {"role": "user", "content": "before"})
    # A real database failure on the third insert, after two rows of the batch
    # were written inside the transaction.
    fail_writes(db, when_content="explode")
    batch = [{"role": "user", "content": "one"}, {"role": "assistant", "content": "two"},
             {"role": "user", "content": "explode"}, {"role": "user", "content": "four"}]
    with pytest.raises(StorageError, match="injected"):
        db.append_messages(sid, batch)
    assert [m["content"] for m in db.get_messages(sid)] == ["before"]
    s = db.get_session(sid)
    assert s.message_count == 1
    assert not any(MARKER_KEY in m for m in batch)
    # The uids were assigned before the write, so a retry is still idempotent.
    assert all(UID_KEY in m for m in batch)


def test_get_messages_tail_and_unknown(db, sid):
    db.append_messages(sid, [{"role": "user", "content": str(i)} for i in range(10)])
    assert [m["content"] for m in db.get_messages(sid, tail=3)] == ["7", "8", "9"]
    with pytest.raises(SessionNotFound):
        db.get_messages("missing")


def test_nested_atomic_rolls_back_only_the_savepoint(db, sid):
    with db.atomic():
        db.append_message(sid, {"role": "user", "content": "outer"})
        with pytest.raises(InvalidMessage):
            with db.atomic():
                db.append_message(sid, {"role": "user", "content": "inner"})
                db.append_message(sid, {"role": "nobody"})
    assert [m["content"] for m in db.get_messages(sid)] == ["outer"]
