"""The benchmark floor writes into exactly the store's schema (tables,
indexes and triggers), so a floor-vs-ours ratio compares like with like."""
from __future__ import annotations

import sys
from pathlib import Path

import apsw

from sessiondb import SessionDB

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import common  # noqa: E402  (bench/common.py)


def schema(path: Path) -> list[tuple]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        (page_size,) = conn.execute("PRAGMA page_size").fetchone()
        return [("page_size", page_size)] + list(conn.execute(
            "SELECT type, name, tbl_name, sql FROM sqlite_schema ORDER BY type, name"))
    finally:
        conn.close()


def test_floor_schema_is_the_stores_schema(tmp_path):
    SessionDB(tmp_path / "store.db").close()
    floor = common.Floor(tmp_path / "floor.db", "NORMAL")
    floor.append([common.message(0), common.message(1)])
    floor.close()
    assert schema(tmp_path / "floor.db") == schema(tmp_path / "store.db")
    assert any(t == "index" for t, *_ in schema(tmp_path / "floor.db"))


def test_floor_rows_load_through_the_store(tmp_path):
    # The floor's rows are valid store rows: the store reads them back whole.
    floor = common.Floor(tmp_path / "floor.db", "NORMAL", "s1")
    floor.append([common.message(i) for i in range(3)])
    floor.close()
    with SessionDB(tmp_path / "floor.db") as db:
        loaded = [{k: v for k, v in m.items() if not k.startswith("_db_")}
                  for m in db.get_messages("s1")]
    assert loaded == [common.message(i) for i in range(3)]


def test_the_floor_reads_the_stores_rows_as_the_store_does(tmp_path):
    # B3 times the floor's load on the store's own file: it must decode coded
    # roles, meta stored as '' and finish_reason kept in its column.
    with SessionDB(tmp_path / "store.db") as db:
        db.create_session("s1", source="test")
        db.append_messages("s1", [common.message(i) for i in range(4)]
                           + [{"role": "tool", "content": "x", "tool_call_id": "c1"}])
        stored = [{k: v for k, v in m.items() if not k.startswith("_db_")}
                  for m in db.get_messages("s1")]
    conn = apsw.Connection(str(tmp_path / "store.db"), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        assert common.floor_load(conn, "s1") == stored
        assert common.floor_load(conn, "s1", 2) == stored[-2:]
    finally:
        conn.close()


def test_ours_counts_a_session_past_the_whole_load_limit(tmp_path):
    # B2's writers append more than a whole load may return; its check of
    # "stored == acked" counts the session instead of failing.
    import subjects  # noqa: E402  (bench/subjects.py)
    from sessiondb.rows.messages import LOAD_LIMIT

    ours = subjects.Ours()
    ours.open(tmp_path / "store.db", "NORMAL", "w0")
    try:
        for start in range(0, LOAD_LIMIT + 7, 1000):
            ours.append([common.message(i) for i in range(start, min(start + 1000,
                                                                     LOAD_LIMIT + 7))])
        assert ours.load() == LOAD_LIMIT + 7
        assert ours.load(50) == 50
    finally:
        ours.close()


def test_salvage_summary_claims_no_lead_without_a_peer():
    import run_all  # noqa: E402  (bench/run_all.py)
    classes = [{"class": "a", "ours": 5, "recover": 0}, {"class": "b", "ours": 3, "recover": 4}]
    alone = run_all.salvage_line(classes, compared=False)
    assert "not compared" in alone and "ahead" not in alone
    assert "equal or ahead on 1/2" in run_all.salvage_line(classes, compared=True)
