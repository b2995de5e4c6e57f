"""The lane plug point: merging rows from several lanes, gaps, partial rows."""
from __future__ import annotations

import shutil


import hstate_recovery
from hstate_recovery.schema.catalog import PARTIAL_KEY, ROWID_KEY, TableSpec
from hstate_recovery.lanes import LANES
from hstate_recovery.lanes.context import (EVERYTHING, LaneContext, LaneResult, TableState,
                            merge_ranges, runs, subtract_rowids)
from hstate_recovery.output.rebuild import StoreSink
from tests.helpers import damage


def test_merge_and_subtract_ranges():
    assert merge_ranges([(5, 6), (1, 2), (3, 3), (10, 12), (11, 20)]) == [(1, 3), (5, 6),
                                                                          (10, 20)]
    assert subtract_rowids([(1, 10), (20, 20)], [1, 5, 20, 30]) == [(2, 4), (6, 10)]
    assert subtract_rowids([(1, 10)], [10, 9, 9, 2]) == [(1, 1), (3, 8)]
    # the carver hands back whole tables: one pass, not one scan per rowid
    assert subtract_rowids([EVERYTHING], range(1, 200_001)) == [(EVERYTHING[0], 0),
                                                                  (200_001, EVERYTHING[1])]
    assert runs([7, 3, 4, 5, 9, 8]) == [(3, 5), (7, 9)] and runs([]) == []


def _message(rowid: int, uid: str) -> dict:
    return {ROWID_KEY: rowid, "id": rowid, "session_id": "s", "uid": uid, "position": rowid,
            "role": "user", "content_kind": "text", "content": "hi", "timestamp": 1.0,
            "fingerprint": "f"}


def _sink(tmp_path, name: str) -> tuple[StoreSink, TableState]:
    state = TableState(TableSpec(name, []))
    return StoreSink(tmp_path / "out.db", {}, {name: state}), state


def test_rows_are_deduplicated_by_rowid_and_session_uid(tmp_path):
    """The output's own keys resolve a row two lanes found: nothing is held."""
    sink, state = _sink(tmp_path, "messages")
    try:
        assert sink.add("messages", "rows", [_message(1, "a"), _message(2, "b")]) == 2
        again = [_message(2, "b"),   # same rowid
                 _message(9, "a"),   # same (session, uid)
                 _message(3, "c")]
        assert sink.add("messages", "carve", again) == 1
        assert [r for (r,) in sink.conn.execute("SELECT id FROM messages ORDER BY id")] == \
            [1, 2, 3]
        assert state.by_lane == {"rows": 2, "carve": 1} and state.recovered == 3
        assert sink.present("messages", [1, 2, 3, 9]) == {1, 2, 3}
    finally:
        sink.close()


def test_whole_row_replaces_partial_row(tmp_path):
    sink, state = _sink(tmp_path, "sessions")
    whole = {ROWID_KEY: 1, "id": "s", "source": "cli", "started_at": 1.0, "updated_at": 1.0}
    try:
        sink.add("sessions", "index", [{**whole, PARTIAL_KEY: ["title"]}])
        assert state.partial == 1 and sink.present("sessions", [1]) == {1}
        sink.add("sessions", "carve", [{**whole, "title": "T"}])
        sink.finish()
        assert list(sink.conn.execute("SELECT id, title FROM sessions")) == [("s", "T")]
        assert state.by_lane == {"carve": 1} and state.partial == 0  # counted for the lane
    finally:                                                         # that has it whole
        sink.close()


def test_a_later_lane_plugs_in_and_fills_the_gap(tmp_path, monkeypatch):
    """A last lane (put in the carver's place) that returns the lost rows,
    plus a duplicate under another rowid: the output ends up complete."""
    src = tmp_path / "src"
    src.mkdir()
    truth = damage.build_store(src / "state.db", sessions=2, per_session=60)
    pristine = tmp_path / "pristine.db"
    shutil.copyfile(truth.path, pristine)
    tree = damage.TableTree(truth.path, "messages")
    leaf = tree.middle_leaf()
    damage.smash_page(truth.path, leaf)
    spec_cols = [c for (c,) in damage.sql(pristine,
                                          "SELECT name FROM pragma_table_info('messages')")]

    def carve(ctx: LaneContext) -> LaneResult:
        assert [s.spec.name for s in ctx.pending()] == ["messages"]
        lost = ",".join(str(r) for r in tree.leaves[leaf])
        rows = [dict(zip(spec_cols, r), **{ROWID_KEY: r[0]}) for r in damage.sql(
            pristine, f"SELECT * FROM messages WHERE id IN ({lost}) OR id = 1")]
        rows[-1] = {**rows[-1], ROWID_KEY: 999, "id": 999}  # id 1 again, other rowid
        orphan = {"page": 7, "cell": 0, "values": [1, "who knows", b"\x00\xff"]}
        return LaneResult(rows={"messages": rows}, lost_and_found=[orphan],
                          stats={"found": len(rows)})

    monkeypatch.setitem(LANES, "carve", carve)
    report = hstate_recovery.recover(truth.path, tmp_path / "new.db")
    assert report.lanes_run == ["backup", "rows", "bisect", "index", "carve"]
    assert report.tables["messages"].lanes["carve"] == len(tree.leaves[leaf])
    assert report.tables["messages"].skipped_ranges == []
    assert (report.outcome, report.exit_code) == ("recovered", 0)
    assert {r[0] for r in damage.sql(tmp_path / "new.db", "SELECT id FROM messages")} \
        == set(truth.messages)
    assert report.lost_and_found == 1
    assert damage.sql(tmp_path / "new.db", "SELECT lane, item FROM lost_and_found") == [
        ("carve", '{"cell": 0, "page": 7, "values": [1, "who knows", "00ff"]}')]
