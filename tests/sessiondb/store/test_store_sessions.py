"""Sessions API: create/get/list/end/rename/delete, leases."""
from __future__ import annotations

import pytest

from sessiondb import InvalidInput, LeaseLost, SessionNotFound

pytestmark = pytest.mark.both_backends


def test_create_is_idempotent_and_never_nulls_known_values(db):
    sid = db.create_session("abc", source="cli", model="m1", title="first")
    assert db.create_session("abc", source="cli") == sid
    s = db.get_session(sid)
    assert (s.model, s.title, s.source) == ("m1", "first", "cli")
    db.create_session("abc", source="cli", model="m2")
    assert db.get_session(sid).model == "m2"
    assert len(db.list_sessions()) == 1


def test_generated_ids_are_unique_and_valid(db):
    ids = {db.create_session(source="cli") for _ in range(20)}
    assert len(ids) == 20


def test_parent_must_exist(db):
    with pytest.raises(SessionNotFound):
        db.create_session("child", source="cli", parent_session_id="ghost")
    db.create_session("parent", source="cli")
    db.create_session("child", source="cli", parent_session_id="parent")
    assert db.get_session("child").parent_session_id == "parent"
    db.delete_session("parent")
    assert db.get_session("child").parent_session_id is None


def test_list_orders_filters_and_pages(open_store):
    clock = iter(range(100, 200))
    db = open_store(clock=lambda: float(next(clock)))
    for i in range(5):
        db.create_session(f"s{i}", source="a" if i % 2 else "b")
    assert [s.id for s in db.list_sessions()] == ["s4", "s3", "s2", "s1", "s0"]
    assert [s.id for s in db.list_sessions(source="a")] == ["s3", "s1"]
    assert [s.id for s in db.list_sessions(limit=2)] == ["s4", "s3"]
    before = db.get_session("s3").started_at
    assert [s.id for s in db.list_sessions(before=before)] == ["s2", "s1", "s0"]


def test_end_rename_delete(db, sid):
    db.end_session(sid, "user_exit")
    db.set_title(sid, "Renamed")
    s = db.get_session(sid)
    assert s.end_reason == "user_exit" and s.ended_at is not None and s.title == "Renamed"
    db.append_messages(sid, [{"role": "user", "content": "x"}] * 1)
    assert db.delete_session(sid) == 1
    with pytest.raises(SessionNotFound):
        db.get_session(sid)
    with db._read() as conn:
        assert conn.execute("SELECT count(*) FROM messages").fetchone()[0] == 0
    for op in (lambda: db.end_session(sid), lambda: db.set_title(sid, "x"),
               lambda: db.delete_session(sid)):
        with pytest.raises(SessionNotFound):
            op()


def test_counters_track_messages_tool_calls_and_usage(db, sid):
    db.append_messages(sid, [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": None,
         "tool_calls": [{"id": "1"}, {"id": "2"}]},
    ])
    db.record_usage(sid, input_tokens=10, output_tokens=5, cache_read_tokens=3)
    s = db.get_session(sid)
    assert (s.message_count, s.tool_call_count, s.input_tokens, s.output_tokens,
            s.cache_read_tokens) == (2, 2, 10, 5, 3)


def test_source_is_required(db):
    with pytest.raises(InvalidInput):
        db.create_session("x", source="")


def test_leases(open_store):
    now = [1000.0]
    db = open_store(clock=lambda: now[0])
    sid = db.create_session("leased", source="agent")
    db.acquire_lease(sid, "a", 30)
    with pytest.raises(LeaseLost):
        db.acquire_lease(sid, "b", 30)
    db.append_message(sid, {"role": "user", "content": "ok"}, holder="a")
    with pytest.raises(LeaseLost):
        db.append_message(sid, {"role": "user", "content": "intruder"}, holder="b")
    now[0] += 31  # expired: writes refused, renewal by the owner allowed
    with pytest.raises(LeaseLost):
        db.append_message(sid, {"role": "user", "content": "late"}, holder="a")
    db.refresh_lease(sid, "a", 30)
    db.append_message(sid, {"role": "user", "content": "renewed"}, holder="a")
    assert [m["content"] for m in db.get_messages(sid)] == ["ok", "renewed"]
    assert db.release_lease(sid, "b") is False
    assert db.release_lease(sid, "a") is True
    with pytest.raises(LeaseLost):
        db.refresh_lease(sid, "a", 30)
    db.acquire_lease(sid, "b", 30)
