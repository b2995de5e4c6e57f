"""Real processes appending into one file while another reads throughout."""
from __future__ import annotations

import multiprocessing as mp
from collections import Counter

from sessiondb import SessionDB
from tests.helpers import workers

WRITERS, PER_WRITER = 4, 500


def test_four_writers_one_reader(tmp_path):
    path = str(tmp_path / "shared.db")
    with SessionDB(path) as db:
        db.create_session("shared", source="test")
    stop = tmp_path / "stop"
    ctx = mp.get_context("spawn")
    with ctx.Manager() as manager, ctx.Pool(WRITERS + 1) as pool:
        started = manager.Event()
        read = pool.apply_async(workers.reader, (path, "shared", str(stop), started))
        # the writers start once the reader reads, so it reads while they write
        assert started.wait(120), "the reader process never made its first read"
        writes = [pool.apply_async(workers.appender, (path, w, PER_WRITER, "shared"))
                  for w in range(WRITERS)]
        results = [w.get(timeout=240) for w in writes]
        stop.touch()
        read_result = read.get(timeout=60)
    assert [r["errors"] for r in results] == [[]] * WRITERS
    assert read_result["errors"] == []
    assert read_result["reads"] > 0
    with SessionDB(path) as db:
        msgs = db.get_messages("shared")
        seen = Counter((m["worker"], m["seq"]) for m in msgs)
        assert len(msgs) == WRITERS * PER_WRITER
        assert set(seen.values()) == {1}
        assert set(seen) == {(w, i) for w in range(WRITERS) for i in range(PER_WRITER)}
        # Each writer's own messages keep their order.
        for w in range(WRITERS):
            assert [m["seq"] for m in msgs if m["worker"] == w] == list(range(PER_WRITER))
        assert db.get_session("shared").message_count == WRITERS * PER_WRITER
        assert db.quick_check() == ["ok"]
        with db._read() as conn:
            assert conn.execute("PRAGMA integrity_check").fetchall() == [("ok",)]
            (dupes,) = conn.execute("SELECT count(*) FROM (SELECT position FROM messages "
                                    "GROUP BY session_id, position HAVING count(*) > 1)").fetchone()
            assert dupes == 0
