"""The benchmark floor writes into exactly the store's schema (tables,
indexes and triggers), so a floor-vs-ours ratio compares like with like."""
from __future__ import annotations

import sys
from pathlib import Path

import apsw

from sessiondb import SessionDB

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "bench"))

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
