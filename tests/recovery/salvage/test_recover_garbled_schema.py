"""A schema entry garbled in place (not zeroed) hides its table from SQLite.

Bytes of the `messages` entry of our store (or `sessions` of Hermes Agent's)
overwritten where they are: the type and name (SQLite no longer lists the
table; only its indexes and triggers still name it) or the middle of the
CREATE TABLE (the statement does not parse and is not UTF-8). recover takes
that table's columns from the reference schema of the format the rest of
the file is, and the carver brings every row back, where it used to
recover a file without the table (exit 5, "no such table").
"""
from __future__ import annotations

from pathlib import Path

import pytest

from hstate_recovery.salvage.pipeline import recover
from tests.helpers import foreign_dbs as f
from tests.helpers.damage import build_store, pages_of, sql

PS = 1024


def _found(data: bytearray, needle: bytes, pages: list[int]) -> list[int]:
    """Where ``needle`` is on the schema pages: every copy (an older copy
    of an entry lingers in free space, beside the live one)."""
    out = [i for p in pages for i in range((p - 1) * PS, p * PS)
           if data.startswith(needle, i)]
    assert out, f"{needle!r} not on the schema pages {pages}"
    return out


def _garble(path: Path, table: str, where: str) -> None:
    pages = pages_of(path, "sqlite_schema")
    data = bytearray(path.read_bytes())
    name = table.encode()
    if where == "type":  # "table" + name + tbl_name: the type and the name hit
        for at in _found(data, b"table" + name + name, pages):
            data[at + 3:at + 5] = b"gg"
            data[at + 6] = 0xBD
    else:  # inside the column list of the statement
        for at in _found(data, b"CREATE TABLE " + name + b" (", pages):
            data[at + 40:at + 46] = b"\x9c9T/\xff\x00"
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("where", ["type", "statement"])
@pytest.mark.parametrize("kind", ["ours", "hermes-agent"])
def test_a_garbled_table_entry_falls_back_to_the_reference_schema(
        tmp_path: Path, kind: str, where: str) -> None:
    src = tmp_path / "state.db"
    if kind == "ours":
        build_store(src, sessions=3, per_session=20, page_size=PS)
        table = "messages"
    else:
        f.build_hermes_agent(src, sessions=6, messages=10, page_size=PS)
        table = "sessions"
    cols = ", ".join(r[1] for r in sql(src, f"PRAGMA table_info({table})"))
    truth = sql(src, f"SELECT {cols} FROM {table} ORDER BY rowid")
    _garble(src, table, where)
    rep = recover(src, tmp_path / "new.db", work_dir=tmp_path, allow_partial=True)
    assert rep.exit_code in (0, 3), rep.loss_reasons
    assert rep.verification["ok"], rep.verification
    assert any("columns from the reference schema" in n for n in rep.schema_notes) or \
        where == "statement" and kind == "ours", rep.schema_notes
    # (by name: the reference declares a foreign table's columns in its own order)
    got = sql(Path(rep.output), f"SELECT {cols} FROM {table} ORDER BY rowid")
    assert got == truth
