"""Appends skip the position query only while nothing else committed.

After a committed append, the handle remembers the session's next position
with the writer's data version; the next append to that session reuses it
only if the version is unchanged (no commit by anyone since). Every other
writer, our own other transactions and a caller's open transaction must
make it ask the database again."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from sessiondb import LeaseLost, SessionDB, SessionNotFound
from sessiondb.rows.codec import encode
from sessiondb.transcript import TranscriptWriter

SEEK = "SELECT (SELECT max(position)"
OTHER_PROCESS = """
import sys
from sessiondb import SessionDB
with SessionDB(sys.argv[1]) as db:
    if sys.argv[2] == "append":
        db.append_message("s1", {"role": "assistant", "content": "from another process"})
    else:
        db.delete_session("s1")
"""


def other_process(path: Path, action: str) -> None:
    subprocess.run([sys.executable, "-c", OTHER_PROCESS, str(path), action], check=True,
                   timeout=60, cwd=Path(__file__).resolve().parents[3])


def positions(db: SessionDB, sid: str = "s1") -> list[int]:
    with db._read() as conn:
        return [r[0] for r in conn.execute(
            "SELECT position FROM messages WHERE session_id = ? ORDER BY id", (sid,))]


def append(db: SessionDB, text: str, sid: str = "s1", **kw) -> list[str]:
    """The statements the append ran."""
    seen: list[str] = []
    db._writer.exec_trace = lambda _c, sql, _b: seen.append(sql) or True
    try:
        db.append_message(sid, {"role": "user", "content": text}, **kw)
    finally:
        db._writer.exec_trace = None
    return seen


def seeks(statements: list[str]) -> int:
    return sum(s.startswith(SEEK) for s in statements)


@pytest.fixture
def store(tmp_path: Path, open_store) -> SessionDB:
    db = open_store(tmp_path / "state.db")
    db._indexer.pause()  # its batches are commits too; these tests count commits
    db.create_session("s1", source="test")
    return db


def test_back_to_back_appends_seek_once(store):
    assert seeks(append(store, "a")) == 1
    assert seeks(append(store, "b")) == 0
    assert seeks(append(store, "c")) == 0
    assert positions(store) == [1, 2, 3]


def test_another_process_appending_is_noticed(store, tmp_path):
    append(store, "a")
    other_process(tmp_path / "state.db", "append")
    assert seeks(append(store, "b")) == 1
    assert positions(store) == [1, 2, 3]


def test_another_handle_appending_is_noticed(store, tmp_path, open_store):
    other = open_store(tmp_path / "state.db")
    append(store, "a")
    other.append_message("s1", {"role": "assistant", "content": "other"})
    assert seeks(append(store, "b")) == 1
    assert positions(store) == [1, 2, 3]


def test_session_deleted_by_another_process_is_not_found(store, tmp_path):
    append(store, "a")
    other_process(tmp_path / "state.db", "delete")
    with pytest.raises(SessionNotFound):
        append(store, "b")
    assert positions(store) == []


def test_own_delete_and_recreate_starts_again_at_one(store):
    append(store, "a")
    append(store, "b")
    store.delete_session("s1")
    store.create_session("s1", source="test")
    assert seeks(append(store, "fresh")) == 1
    assert positions(store) == [1]


def test_other_sessions_and_failed_appends(store):
    store.create_session("s2", source="test")
    append(store, "a")
    assert seeks(append(store, "x", sid="s2")) == 1
    assert seeks(append(store, "b")) == 1  # the tail now belongs to s2
    store.acquire_lease("s1", "me", 60)
    with pytest.raises(LeaseLost):
        append(store, "refused", holder="someone-else")
    assert seeks(append(store, "c", holder="me")) == 1  # the lease commit moved the version
    assert positions(store) == [1, 2, 3]
    assert positions(store, "s2") == [1]


def test_inside_a_callers_transaction_the_database_is_asked(store):
    append(store, "a")
    with store.atomic() as conn:
        store.insert_encoded(conn, "s1", [encode({"role": "user", "content": "b"})])
        assert seeks(append(store, "c")) == 1  # sees b, uncommitted, not the tail
    assert seeks(append(store, "d")) == 1
    assert positions(store) == [1, 2, 3, 4]
    assert [m["content"] for m in store.get_messages("s1")] == ["a", "b", "c", "d"]


def test_flushes_and_appends_share_the_tail(store, tmp_path, open_store):
    writer = TranscriptWriter(store, "s1")
    msgs = [{"role": "user", "content": "a"}]
    writer.flush(msgs)
    assert seeks(append(store, "b")) == 0  # the flush left the tail
    other = open_store(tmp_path / "state.db")
    other.append_message("s1", {"role": "assistant", "content": "c"})
    msgs.append({"role": "user", "content": "d"})
    writer.flush(msgs)  # must seek: another handle committed
    assert positions(store) == [1, 2, 3, 4]
    assert [m["content"] for m in store.get_messages("s1")] == ["a", "b", "c", "d"]
