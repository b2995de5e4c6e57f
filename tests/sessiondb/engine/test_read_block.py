"""`StoreCore.read`: the lock held for the block, typed errors, the writer
inside a transaction, and nothing left held after a failure."""
from __future__ import annotations

import threading

import pytest

from sessiondb import SessionDB, StorageError


def _locked_elsewhere(db: SessionDB) -> bool:
    """Whether another thread finds the handle's lock taken."""
    taken: list[bool] = []
    worker = threading.Thread(target=lambda: taken.append(not _try_release(db)))
    worker.start()
    worker.join(5)
    return taken == [True]


def _try_release(db: SessionDB) -> bool:
    if db.core.lock.acquire(timeout=0.2):
        db.core.lock.release()
        return True
    return False


def test_a_failing_statement_is_typed_and_leaves_nothing_held(tmp_path):
    with SessionDB(tmp_path / "s.db") as db:
        db.create_session("s1", source="test")
        with pytest.raises(StorageError):
            with db.core.read() as conn:
                assert _locked_elsewhere(db)
                conn.execute("SELECT * FROM no_such_table")
        assert not _locked_elsewhere(db) and db.core.reads == 0
        with db.core.read() as conn:  # the handle still reads
            assert conn.execute("SELECT count(*) FROM sessions").fetchall() == [(1,)]


def test_other_errors_pass_through_untouched(tmp_path):
    with SessionDB(tmp_path / "s.db") as db:
        with pytest.raises(KeyError):
            with db.core.read():
                raise KeyError("mine")
        assert not _locked_elsewhere(db) and db.core.reads == 0


def test_inside_a_write_the_block_sees_the_uncommitted_rows(tmp_path):
    with SessionDB(tmp_path / "s.db") as db:
        with db.atomic() as writing:
            db.create_session("s1", source="test")
            with db.core.read() as conn:
                assert conn is writing
                assert conn.execute("SELECT id FROM sessions").fetchall() == [("s1",)]
        with db.core.read() as conn:
            assert conn is not db.core.writer


def test_a_closed_handle_refuses_the_block(tmp_path):
    db = SessionDB(tmp_path / "s.db")
    db.close()
    with pytest.raises(StorageError, match="closed"):
        with db.core.read():
            pass
