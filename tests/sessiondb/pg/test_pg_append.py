"""Appends on PostgreSQL as one server-side call (sessiondb/pg/append.py,
migration p011): the round trips a commit costs, seen in libpq's own
protocol trace; ids, positions and counters for batches mixing known,
repeated and new uids; appends inside a caller's transaction; the relaxed
durability option. The behaviour both backends share is tested by the
both_backends modules (test_store_messages.py, test_store_sessions.py)."""
from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Callable

import pytest

from sessiondb import InvalidInput, SessionDB, SessionNotFound

_ROUND_TRIP = re.compile(r"^\S+ \S+\tF\t\d+\t(Sync|Query)\b", re.M)


@pytest.fixture
def store(pg_db_url: str, hermes_home: Path):
    db = SessionDB.open(url=pg_db_url, pool_size=1)  # one connection: the traced one
    yield db
    db.close()


def traced(db: SessionDB, tmp_path: Path, body: Callable[[], Any]) -> int:
    """Round trips (Sync or simple Query messages the client sent) of ``body()``."""
    with db.core.read() as conn:
        raw = conn.raw
    trace = tmp_path / "libpq.trace"
    with trace.open("w") as f:
        raw.pgconn.trace(f.fileno())
        try:
            body()
        finally:
            raw.pgconn.untrace()
    return len(_ROUND_TRIP.findall(trace.read_text(errors="replace")))


def test_an_append_outside_a_transaction_is_one_round_trip(store, tmp_path) -> None:
    sid = store.create_session("s", source="t")
    store.append_message(sid, {"role": "user", "content": "warm"})
    assert traced(store, tmp_path, lambda: store.append_message(
        sid, {"role": "user", "content": "one"})) == 1
    assert traced(store, tmp_path, lambda: store.append_messages(
        sid, [{"role": "user", "content": f"b{i}"} for i in range(50)])) == 1
    store.acquire_lease(sid, "host-a", 60)  # the lease is checked inside that one statement
    assert traced(store, tmp_path, lambda: store.append_message(
        sid, {"role": "user", "content": "leased"}, holder="host-a")) == 1
    assert [m["content"] for m in store.get_messages(sid)][-1] == "leased"


def test_known_repeated_and_new_uids_in_one_batch(store) -> None:
    sid = store.create_session("s", source="t")
    known = {"role": "user", "content": "known"}
    store.append_message(sid, known)
    twice = {"role": "assistant", "content": "twice", "_db_uid": "u-twice"}
    again = {"role": "assistant", "content": "twice", "_db_uid": "u-twice"}
    fresh = {"role": "user", "content": "fresh"}
    ids = store.append_messages(sid, [known, twice, fresh, again])
    assert ids[0] == known["_db_persisted"].id and ids[1] == ids[3] != ids[2]
    rows = store.get_messages(sid)
    assert [m["content"] for m in rows] == ["known", "twice", "fresh"]
    with store.core.read() as conn:
        positions = [r[0] for r in conn.execute(
            "SELECT position FROM messages WHERE session_id = ? ORDER BY position", (sid,))]
    assert positions == [1, 2, 3]
    assert store.get_session(sid).message_count == 3
    assert store.append_messages(sid, [twice, fresh]) == [ids[1], ids[2]]
    assert store.get_session(sid).message_count == 3  # nothing new: counters unchanged


def test_an_append_inside_a_transaction_rolls_back_with_it(store) -> None:
    sid = store.create_session("s", source="t")
    with pytest.raises(RuntimeError):
        with store.atomic():
            store.append_message(sid, {"role": "user", "content": "gone"})
            raise RuntimeError("the caller fails after the append")
    assert store.get_messages(sid) == [] and store.get_session(sid).message_count == 0
    with store.atomic():
        store.append_message(sid, {"role": "user", "content": "kept"})
        with pytest.raises(SessionNotFound):
            store.append_message("nobody", {"role": "user", "content": "x"})
    assert [m["content"] for m in store.get_messages(sid)] == ["kept"]


def test_relaxed_durability_turns_off_synchronous_commit_per_write(pg_db_url,
                                                                     hermes_home) -> None:
    with pytest.raises(InvalidInput, match="durability must be one of durable, relaxed"):
        SessionDB.open(url=pg_db_url, durability="fast")
    for durability, expected in (("durable", "on"), ("relaxed", "off")):
        db = SessionDB.open(url=pg_db_url, durability=durability)
        try:
            with db.atomic() as conn:
                (inside,) = conn.execute("SHOW synchronous_commit").fetchone()
            with db.core.read() as conn:
                (outside,) = conn.execute("SHOW synchronous_commit").fetchone()
            sid = db.create_session(f"s-{durability}", source="t")
            db.append_message(sid, {"role": "user", "content": durability})
            assert db.get_messages(sid)[0]["content"] == durability
        finally:
            db.close()
        assert (inside, outside) == (expected, "on")
