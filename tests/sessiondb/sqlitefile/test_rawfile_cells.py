"""The raw page reader (identify's) on a schema leaf whose cells are garbage:
a typed StoreCorrupt, never a struct error escaping as a traceback. Found
when a test's damage (at the wrong page size) landed on half a schema page."""
from __future__ import annotations

from pathlib import Path

import apsw
import pytest

from sessiondb import SessionDB, StoreCorrupt
from sessiondb.sqlitefile.identity import identify
from tests.helpers.damage import write_at


def test_a_schema_leaf_with_garbage_cells_is_store_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    with SessionDB(path) as db:
        db.create_session("s", source="t")
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    (size,) = conn.execute("PRAGMA page_size").fetchone()
    leaves = [p for (p,) in conn.execute("SELECT pageno FROM dbstat WHERE name = 'sqlite_schema'"
                                         " AND pagetype = 'leaf' AND pageno > 1")]
    conn.close()
    assert leaves
    before = path.read_bytes()
    # the cell content area sits at the end of the page: its second half
    write_at(path, (leaves[0] - 1) * size + size // 2, b"\xde\xad\xbe\xef" * (size // 8))
    damaged = path.read_bytes()
    assert damaged != before
    with pytest.raises(StoreCorrupt, match="schema is unreadable"):
        identify(path)
    assert path.read_bytes() == damaged  # identify changed nothing
