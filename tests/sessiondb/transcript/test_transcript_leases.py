"""Turn leases between two real processes: the loser's writes never land."""
from __future__ import annotations

import multiprocessing as mp

from sessiondb import SessionDB
from tests.helpers import transcript_workers as workers
import pytest

pytestmark = pytest.mark.both_backends

ROUNDS = 100


def test_two_processes_only_the_lease_holder_writes(tmp_path):
    path = str(tmp_path / "leases.db")
    with SessionDB(path) as db:
        sid = db.create_session("contested", source="test")
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(2) as pool:
        go, done, taken_over = manager.Event(), manager.Event(), manager.Event()
        a = pool.apply_async(workers.lease_holder, (path, sid, ROUNDS, go, done, taken_over))
        # B's clock runs two hours ahead: A's one-hour lease looks expired to
        # it only when it tries to take over, after its refused attempts.
        b = pool.apply_async(workers.lease_challenger,
                             (path, sid, ROUNDS, go, done, taken_over, 7200.0))
        ra, rb = a.get(timeout=120), b.get(timeout=120)
    assert ra["errors"] == [] and rb["errors"] == []
    assert ra["flushed"] == ROUNDS
    assert (rb["refused"], rb["accepted"]) == (2 * ROUNDS, 0)
    assert rb["took_over"]
    # A still believed it held the lease; its flush was refused in the transaction.
    assert ra["refused_after_takeover"] and ra["unwritten"] == ["A-late-0"]
    with SessionDB(path) as db:
        everything = db.get_messages(sid, include_archived=True)
        assert [m["content"] for m in everything] == \
            [f"A-{i}" for i in range(ROUNDS)] + ["B-owner-0"]
        assert db.get_session(sid).message_count == ROUNDS + 1
        with db._read() as conn:
            assert conn.execute("SELECT holder FROM leases").fetchall() == [("B",)]
