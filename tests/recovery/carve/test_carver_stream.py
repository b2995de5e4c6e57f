"""carve_stream: the carver for recover, rows handed on in batches as pages
are mapped, and only the rows a caller still wants decoded."""
from __future__ import annotations

from pathlib import Path

from hstate_recovery.lanes.carve_stream import carve_stream
from hstate_recovery.carve.carver import carve
from tests.helpers.carving import build_store


def drain(gen):
    rows, lost = [], []
    while True:
        try:
            found, gone = next(gen)
        except StopIteration as stop:
            return rows, lost, stop.value
        rows += found
        lost += gone


def test_stream_finds_what_carve_finds_in_small_batches(tmp_path: Path):
    db = tmp_path / "state.db"
    build_store(db, sessions=3, per_session=50, big_every=10)
    whole = carve(db)
    rows, lost, stats = drain(carve_stream(db, batch=7))
    assert {(t, o.rowid) for t, _row, o in rows} == {
        (t, o.rowid) for t in whole.tables for _row, o in whole.rows(t)}
    assert stats.tree_damage == whole.stats.tree_damage and not lost


def test_only_wanted_rows_are_handed_on_and_the_schema_is_still_read(tmp_path: Path):
    db = tmp_path / "state.db"
    build_store(db, sessions=3, per_session=50)
    rows, _lost, stats = drain(carve_stream(db, want=lambda t, r: False))
    assert rows == [] and stats.tree_damage["messages"] == 0  # walked from its root
    wanted = {5, 17, 120}
    rows, _lost, _stats = drain(carve_stream(
        db, want=lambda t, r: t in (None, "messages") and r in wanted))
    assert sorted(o.rowid for t, _row, o in rows if t == "messages") == sorted(wanted)
