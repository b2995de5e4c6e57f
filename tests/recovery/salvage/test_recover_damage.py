"""Recovery of real damaged stores: verdict, exact counts, verification, source untouched.

Every case builds a real store through SessionDB, damages real pages by
writing bytes, and compares what `recover` wrote against the ground truth
read from the intact file's b-tree.
"""
from __future__ import annotations

import json
import random
import os
import stat
from pathlib import Path

import pytest

import hstate_recovery
from hstate_recovery.output.rebuild import PLACEHOLDER_SOURCE, QUARANTINE
from sessiondb import SessionDB
from tests.helpers import damage
from tests.helpers.damage import (TableTree, bundle_hashes, message_ids, pages_of, smash_page,
                                  sql)
from tests.helpers.damagevfs import ZeroingVFS, recover_on_failing_disk


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory):
    """One intact store (6 sessions x 100 messages, 1 KiB pages) and its trees."""
    path = tmp_path_factory.mktemp("pristine") / "state.db"
    truth = damage.build_store(path, per_session=100)
    return truth, TableTree(path, "messages"), TableTree(path, "sessions")


@pytest.fixture
def store(pristine, tmp_path: Path) -> Path:
    """A private copy of the pristine store for one test to damage."""
    return damage.private_copy(pristine[0].path, tmp_path)


def recover_checked(source: Path, tmp_path: Path, **kw) -> hstate_recovery.RecoveryReport:
    """Recover and assert the source bundle's bytes did not change."""
    before = bundle_hashes(source)
    report = hstate_recovery.recover(source, tmp_path / "new.db", **kw)
    assert bundle_hashes(source) == before
    return report


def test_healthy_store_recovers_everything_exit_0(pristine, store, tmp_path):
    truth, tree, _ = pristine
    assert hstate_recovery.inspect(store).verdict == "healthy"
    report = recover_checked(store, tmp_path)
    assert (report.outcome, report.exit_code, report.loss) == ("recovered", 0, False)
    assert report.output == str(tmp_path / "new.db")
    assert message_ids(tmp_path / "new.db") == set(truth.messages)
    assert report.verification["ok"] is True
    assert report.lanes_run == ["backup"]
    with SessionDB(tmp_path / "new.db") as db:
        s = db.get_session("s3")
        assert (s.title, s.message_count) == ("session 3", 100)
        got = [m["content"] for m in db.get_messages("s3")]
    assert got == truth.texts[300:400]
    assert stat.S_IMODE(os.stat(tmp_path / "new.db").st_mode) == 0o600


def test_messages_leaf_damage(pristine, store, tmp_path):
    truth, tree, _ = pristine
    leaf = tree.middle_leaf()
    smash_page(store, leaf)
    insp = hstate_recovery.inspect(store)
    assert insp.verdict == "structural"
    assert insp.table("messages").readable is False
    report = recover_checked(store, tmp_path)
    assert (report.outcome, report.exit_code) == ("partial", 3)
    assert not (tmp_path / "new.db").exists()
    out = tmp_path / "new.db.partial"
    assert report.output == str(out)
    expected = tree.reachable({leaf})
    assert message_ids(out) == expected
    assert len(expected) == len(truth.messages) - len(tree.leaves[leaf])
    lost = tree.leaves[leaf]
    assert report.tables["messages"].skipped_ranges == [[min(lost), max(lost)]]
    assert report.lane_stats["bisect"]["messages"]["rows_lost"] == len(lost)
    assert report.tables["sessions"].copied == 6 and not report.placeholders
    assert report.verification["ok"] is True


def test_allow_partial_puts_lossy_result_at_output(pristine, store, tmp_path):
    _, tree, _ = pristine
    smash_page(store, tree.middle_leaf())
    report = recover_checked(store, tmp_path, allow_partial=True)
    assert (report.outcome, report.exit_code) == ("partial", 3)
    assert report.output == str(tmp_path / "new.db")
    assert not (tmp_path / "new.db.partial").exists()


def attribution(path: Path) -> dict[int, str]:
    return dict(sql(path, "SELECT id, session_id FROM messages"))


def test_messages_interior_page_damage(pristine, store, tmp_path):
    """SQL cannot reach the leaves under a destroyed interior page; the
    carver reads them as orphans, and the intact index proves none is missing."""
    truth, tree, _ = pristine
    inner = tree.middle_interior()
    smash_page(store, inner)
    report = recover_checked(store, tmp_path)
    by_sql = tree.reachable({inner})
    assert 0 < len(by_sql) < len(truth.messages)
    assert (report.outcome, report.exit_code, report.loss) == ("recovered", 0, False)
    assert attribution(tmp_path / "new.db") == truth.messages  # every row, right session
    assert report.lane_stats["bisect"]["messages"]["rows_lost"] == len(truth.messages) - len(
        by_sql)  # what SQL alone could not read ...
    t = report.tables["messages"]
    assert t.lanes["carve"] == len(truth.messages) - len(by_sql)  # ... the carver found
    assert t.carved == {"orphan": len(truth.messages) - len(by_sql)}
    assert (t.skipped_ranges, t.rows_lost, t.unproven, t.from_wal) == ([], 0, False, 0)
    assert report.lane_stats["carve"]["tables"]["messages"]["walk"] == "damaged"
    assert report.verification["ok"] and report.lost_and_found == 0


def test_sessions_root_damage_rebuilds_sessions_from_indexes(pristine, store, tmp_path):
    truth, _, stree = pristine
    original = sql(store, "SELECT id, source, started_at, parent_session_id FROM sessions"
                          " ORDER BY id")
    smash_page(store, stree.root)
    report = recover_checked(store, tmp_path)
    out = tmp_path / "new.db.partial"
    assert message_ids(out) == set(truth.messages)
    assert report.placeholders == []
    assert sql(out, "SELECT id, source, started_at, parent_session_id FROM sessions"
                    " ORDER BY id") == original
    assert sql(out, "SELECT DISTINCT message_count, title FROM sessions") == [(100, None)]
    assert report.tables["sessions"].partial == 6
    assert report.tables["sessions"].skipped_ranges == [[1, 6]]
    assert report.lane_stats["index"]["sessions"] == {"rebuilt": 6, "unusable": 0}
    assert any("rebuilt from indexes" in r for r in report.loss_reasons)
    assert report.verification["ok"] and report.exit_code == 3


def test_sessions_root_damage_without_index_lane_gives_placeholders(pristine, store, tmp_path):
    truth, _, stree = pristine
    smash_page(store, stree.root)
    assert hstate_recovery.inspect(store).verdict == "structural"
    report = recover_checked(store, tmp_path, lanes=["backup", "rows", "bisect"])
    out = tmp_path / "new.db.partial"
    assert message_ids(out) == set(truth.messages)
    assert sorted(report.placeholders) == truth.sessions
    assert report.tables["sessions"].skipped_ranges == [[1, 6]]
    rows = sql(out, "SELECT id, source, started_at, message_count FROM sessions ORDER BY id")
    for i, (sid, source, started, count) in enumerate(rows):
        assert (sid, source, count) == (f"s{i}", PLACEHOLDER_SOURCE, 100)
        assert started == 1_700_000_000 + i * 1000  # its earliest message
    assert report.sessions["s2"] == {"messages_recovered": 100, "placeholder": True}
    assert report.verification["ok"] and report.exit_code == 3


@pytest.mark.parametrize("offset,data,fix", [
    (16, b"\xab\xcd\x7f\x7f\x00\x01\x02\x03", "page size -> 1024"),
    (0, b"\x00" * 16, "magic string"),
    (44, b"\x00\x00\x00\x09", "schema format -> 4"),
    # a reserved-bytes count the pages disprove, beside broken fractions
    (20, b"\xb2\x09\xef\x20", "reserved bytes -> 0 (the pages keep cells there)"),
], ids=["page-size-versions-fractions", "magic", "schema-format", "reserved-bytes"])
def test_page1_header_fields_damage_is_fixed_on_the_copy(pristine, store, tmp_path, offset,
                                                          data, fix):
    truth, _, _ = pristine
    damage.write_at(store, offset, data)
    insp = hstate_recovery.inspect(store)
    assert insp.verdict == "structural"
    assert fix in insp.header_fixes
    assert insp.header["problems"]
    assert insp.table("messages").rows == len(truth.messages)
    report = recover_checked(store, tmp_path)
    assert (report.outcome, report.exit_code) == ("recovered", 0)
    assert message_ids(tmp_path / "new.db") == set(truth.messages)


def surviving(tree: TableTree, gone: set[int]) -> set[int]:
    """Rowids whose leaf page is undamaged (what carving can bring back)."""
    return {r for leaf, rows in tree.leaves.items() if leaf not in gone for r in rows}


def test_truncated_file(pristine, store, tmp_path):
    truth, tree, stree = pristine
    pages = damage.page_count(store)
    cut = int(pages * 0.7)
    # Whether the loss is countable depends on whether a full (not partial)
    # index of messages, which lists every rowid, lies wholly before the cut.
    indexes = [r[0] for r in sql(store, "SELECT name FROM sqlite_schema WHERE type = 'index'"
                                        " AND tbl_name = 'messages'"
                                        " AND coalesce(sql, '') NOT LIKE '% WHERE %'")]
    countable = any(max(pages_of(store, i) or [0]) <= cut for i in indexes)
    os.truncate(store, cut * damage.PAGE_SIZE)
    gone = set(range(cut + 1, pages + 1))
    assert hstate_recovery.inspect(store).verdict == "structural"
    report = recover_checked(store, tmp_path)
    expected = surviving(tree, gone)
    assert 0 < len(expected) < len(truth.messages)
    out = tmp_path / "new.db.partial"
    assert attribution(out) == {r: truth.messages[r] for r in expected}
    assert report.tables["sessions"].copied == len(surviving(stree, gone))
    t = report.tables["messages"]
    if countable:  # the surviving index says exactly which rows are gone
        assert (t.recovered, t.rows_lost, t.unproven) == (
            len(expected), len(truth.messages) - len(expected), False)
        assert any(r.startswith("table messages: ") and " could not be read: " in r
                   for r in report.loss_reasons)
    else:  # rows on cut-off pages cannot be counted; known gaps are still named
        assert (t.recovered, t.rows_lost, t.unproven) == (len(expected), None, True)
        assert any(r.startswith("tables messages") or (r.startswith("table messages: ")
                   and " could not be read: " in r) for r in report.loss_reasons), \
            report.loss_reasons
    assert report.verification["ok"] and report.exit_code == 3


def test_fts_shadow_damage_is_fts_only_and_rebuilt(pristine, store, tmp_path):
    truth, _, _ = pristine
    damage.add_fts(store)  # a no-op since m004 creates both indexes
    smash_page(store, pages_of(store, "messages_fts_data", "leaf")[0])
    insp = hstate_recovery.inspect(store)
    assert insp.verdict == "fts_only"
    assert insp.quick_check["derived_only"] is True
    # only the word index was hit; the term table checks clean
    assert {f.name: f.integrity_ok for f in insp.fts} == {"messages_fts": False,
                                                         "messages_terms": True}
    report = recover_checked(store, tmp_path)
    assert (report.outcome, report.exit_code) == ("recovered", 0)
    assert message_ids(tmp_path / "new.db") == set(truth.messages)
    assert "messages_fts_data" not in report.tables  # derived data is never copied


def test_fts_stale_marker_is_fts_only_and_not_carried_over(pristine, store, tmp_path):
    sql(store, "INSERT INTO state_meta(key, value) VALUES ('fts_stale', '1')")
    insp = hstate_recovery.inspect(store)
    assert (insp.verdict, insp.fts_stale) == ("fts_only", True)
    recover_checked(store, tmp_path)
    assert sql(tmp_path / "new.db", "SELECT value FROM state_meta WHERE key='fts_stale'") == []


@pytest.mark.parametrize("with_shm", [True, False], ids=["with-shm", "without-shm"])
def test_wal_with_uncheckpointed_commits(pristine, store, tmp_path, with_shm):
    truth, _, _ = pristine
    with SessionDB(store) as db:
        db.create_session("late", source="test")
        db.append_messages("late", [{"role": "user", "content": f"late {i}"} for i in range(40)])
        crashed = damage.copy_open_bundle(db, tmp_path / "crash", with_shm=with_shm)
    assert Path(f"{crashed}-wal").stat().st_size > 0
    insp = hstate_recovery.inspect(crashed)
    assert (insp.verdict, insp.shm_present) == ("healthy", with_shm)
    wal = insp.wal
    assert wal["frames"] > 0 and wal["valid_frames"] == wal["frames"]
    assert wal["last_commit_frame"] == wal["frames"]
    report = recover_checked(crashed, tmp_path)
    assert report.exit_code == 0
    ids = message_ids(tmp_path / "new.db")
    assert len(ids) == len(truth.messages) + 40
    assert sql(tmp_path / "new.db", "SELECT count(*) FROM messages WHERE session_id='late'") \
        == [(40,)]


@pytest.mark.parametrize("content,verdict", [
    (b"\x00" * 8192, "empty"),
    (b"name,value\n" * 500, "not_a_database"),
], ids=["zero-filled", "not-a-database"])
def test_nothing_to_recover(tmp_path, content, verdict):
    source = tmp_path / "state.db"
    source.write_bytes(content)
    insp = hstate_recovery.inspect(source)
    assert (insp.verdict, insp.next_command) == (verdict, None)
    report = recover_checked(source, tmp_path)
    assert (report.outcome, report.exit_code, report.output) == ("not_recoverable", 4, None)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.db"]


def test_malformed_json_is_quarantined_never_reported(pristine, store, tmp_path):
    sql(store, "UPDATE messages SET meta = '{\"secret-value: broken' WHERE id = 7")
    report = recover_checked(store, tmp_path, report_path=tmp_path / "r.json")
    out = Path(report.output)
    assert report.quarantined_values == 1 and report.exit_code == 3
    assert sql(out, "SELECT meta FROM messages WHERE id = 7") == [("",)]  # {} coded (m012)
    assert sql(out, f"SELECT table_name, row_key, column_name, value FROM {QUARANTINE}") == [
        ("messages", "7", "meta", '{"secret-value: broken')]
    text = (tmp_path / "r.json").read_text()
    assert "secret-value" not in text and "lorem ipsum" not in text
    assert json.loads(text)["quarantined_values"] == 1


def test_unknown_extra_table_is_copied(pristine, store, tmp_path):
    sql(store, "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL);"
               "INSERT INTO notes(body) VALUES ('a'), ('b'), ('c')")
    report = recover_checked(store, tmp_path)
    assert report.exit_code == 0
    assert sql(tmp_path / "new.db", "SELECT id, body FROM notes") == [(1, "a"), (2, "b"),
                                                                       (3, "c")]
    assert report.tables["notes"].copied == 3


def test_failed_verification_keeps_unverified_exit_5(pristine, store, tmp_path):
    vfs = ZeroingVFS("zero-after-page-1", from_offset=4096)
    try:
        report = recover_checked(store, tmp_path, vfs="zero-after-page-1")
    finally:
        vfs.unregister()
    assert (report.outcome, report.exit_code) == ("unverified", 5)
    assert report.output == str(tmp_path / "new.db.unverified")
    assert Path(report.output).exists() and not (tmp_path / "new.db").exists()
    assert report.verification["ok"] is False and report.verification["findings"]


def test_progress_reports_rows_per_table(pristine, store, tmp_path):
    _, tree, _ = pristine
    smash_page(store, tree.middle_leaf())
    seen: list[tuple[str, int]] = []
    recover_checked(store, tmp_path, chunk=100, progress=lambda w, d, t: seen.append((w, d)))
    counts = [d for w, d in seen if w == "copying messages"]
    assert counts == sorted(counts) and len(counts) >= 3
    assert ("writing messages", len(tree.rowids()) - len(tree.leaves[tree.middle_leaf()])) \
        in seen


def test_text_that_is_not_utf8_is_kept_and_its_bytes_quarantined(pristine, store, tmp_path):
    truth, _, _ = pristine
    sql(store, "UPDATE messages SET content = CAST(x'68656c6cff6f' AS TEXT) WHERE id = 9")
    insp = hstate_recovery.inspect(store)
    assert insp.verdict == "structural" and insp.table("messages").readable is False
    report = recover_checked(store, tmp_path)
    out = Path(report.output)
    assert message_ids(out) == set(truth.messages)
    assert sql(out, "SELECT content FROM messages WHERE id = 9") == [("hell\ufffdo",)]
    assert sql(out, f"SELECT row_key, column_name, reason, value FROM {QUARANTINE}") == [
        ("9", "content", "invalid UTF-8", b"hell\xffo")]
    assert report.quarantined_values == 1 and report.exit_code == 3


def test_wal_with_a_torn_last_frame(pristine, store, tmp_path):
    truth, _, _ = pristine
    with SessionDB(store) as db:
        db.create_session("late", source="test")
        db.append_messages("late", [{"role": "user", "content": f"late {i}"} for i in range(5)])
        crashed = damage.copy_open_bundle(db, tmp_path / "crash", with_shm=False)
    with open(f"{crashed}-wal", "ab") as f:  # half-written frame after the last commit
        f.write(b"\x00\x00\x00\x02" + b"\x5a" * (24 + damage.PAGE_SIZE - 4))
    wal = hstate_recovery.inspect(crashed).wal
    assert wal["valid_frames"] == wal["frames"] - 1 == wal["last_commit_frame"]
    recover_checked(crashed, tmp_path)
    assert len(message_ids(tmp_path / "new.db")) == len(truth.messages) + 5


def test_quick_check_is_bounded_in_time(pristine, store):
    report = hstate_recovery.inspect(store, quick_seconds=0)
    assert report.quick_check["timed_out"] is True
    assert report.verdict == "healthy"  # every table still read to the end


def late_fts_tables(path: Path) -> int:
    """Add fts5 tables (derived data) after the data until one of their root
    pages lies beyond every page of the schema and of the data; returns the
    last page those need. However many tables the schema has, and wherever
    SQLite puts a page the schema grows by, cutting the file after that page
    leaves the schema and every row whole but a root page past the end."""
    for n in range(20):
        damage.sql(path, f"CREATE VIRTUAL TABLE late_fts{n} USING fts5(body)")
        late = {f"late_fts{i}" for i in range(n + 1)}
        rows = damage.sql(path, "SELECT name, pageno FROM dbstat")
        keep = max(p for name, p in rows if not name.startswith(tuple(late)))
        roots = [r for (r,) in damage.sql(path, "SELECT rootpage FROM sqlite_master WHERE "
                                                "name LIKE 'late_fts%' AND rootpage > 0")]
        if max(roots) > keep:
            return keep
    raise AssertionError("no fts root page was ever placed after the schema")


def test_truncation_that_cuts_off_schema_roots(tmp_path):
    """Root pages past the end make SQLite refuse the whole schema; the copy
    is read with the bad entries skipped and every message still comes back."""
    truth = damage.build_store(tmp_path / "state.db", sessions=2, per_session=60,
                               page_size=4096)
    store = truth.path
    keep = late_fts_tables(store)
    os.truncate(store, keep * 4096)
    insp = hstate_recovery.inspect(store)
    assert insp.verdict == "structural"
    assert "invalid rootpage" in insp.schema_error
    assert insp.table("messages").rows == 120
    report = recover_checked(store, tmp_path)
    assert (report.outcome, report.exit_code) == ("recovered", 0)
    assert message_ids(tmp_path / "new.db") == set(truth.messages)


def test_write_failure_leaves_nothing_behind(pristine, store, tmp_path):
    before = bundle_hashes(store)
    error = recover_on_failing_disk(store, tmp_path / "new.db", tmp_path, name="fail-writes",
                                    after=20)
    assert error.cause.value == "io_error"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["src"]  # no output, no temp, no work
    assert bundle_hashes(store) == before


def test_the_copy_keeps_its_wal_for_later_lanes(pristine, store, tmp_path, monkeypatch):
    with SessionDB(store) as db:
        db.create_session("late", source="test")
        db.append_messages("late", [{"role": "user", "content": "late"}])
        crashed = damage.copy_open_bundle(db, tmp_path / "crash", with_shm=False)
    wal_bytes = Path(f"{crashed}-wal").read_bytes()
    seen = {}

    def look(ctx):
        seen["wal"] = Path(f"{ctx.copy_path}-wal").read_bytes()
        return hstate_recovery.LaneResult()

    monkeypatch.setitem(hstate_recovery.LANES, "look", look)
    hstate_recovery.recover(crashed, tmp_path / "new.db", lanes=["look"])
    assert seen["wal"] == wal_bytes


def test_bisection_without_any_index_finds_rows_between_two_damaged_leaves(
        pristine, store, tmp_path):
    truth, tree, _ = pristine
    leaves = sorted(tree.leaves, key=lambda p: tree.leaves[p][0])
    bad = {leaves[len(leaves) // 4], leaves[3 * len(leaves) // 4]}
    for index in ("messages_in_order", "sqlite_autoindex_messages_1"):
        bad.add(damage.root_page(store, index))
    for page in bad:
        smash_page(store, page)
    report = recover_checked(store, tmp_path)
    expected = tree.reachable(bad)
    assert message_ids(tmp_path / "new.db.partial") == expected
    stats = report.lane_stats["bisect"]["messages"]
    assert stats["rowids_from_index"] is False and stats["budget_exhausted"] is False
    assert report.tables["messages"].lanes["bisect"] > 0  # the middle came from bisection
    lost = sorted(r for p in bad if p in tree.leaves for r in tree.leaves[p])
    assert [r for lo, hi in report.tables["messages"].skipped_ranges
            for r in range(lo, hi + 1)] == lost


def test_sound_but_empty_store_recovers_to_an_empty_store(tmp_path, open_store):
    open_store(tmp_path / "state.db").close()
    report = recover_checked(tmp_path / "state.db", tmp_path)
    assert (report.outcome, report.exit_code) == ("recovered", 0)
    assert sql(tmp_path / "new.db", "SELECT count(*) FROM sessions") == [(0,)]


# -- the carve lane: what SQL cannot reach, read from the pages --------------

def sessions_of(path: Path) -> list[tuple]:
    return sql(path, "SELECT id, source, title, started_at, message_count FROM sessions"
                     " ORDER BY id")


def test_page1_zeroed_recovers_every_row_by_shape(pristine, store, tmp_path):
    """No header, no schema: SQLite reads nothing, the carver finds our
    tables by their layouts and every message keeps its session."""
    truth, _, _ = pristine
    original = sessions_of(store)
    damage.write_at(store, 0, b"\x00" * damage.PAGE_SIZE)
    insp = hstate_recovery.inspect(store)
    assert (insp.verdict, insp.schema_readable) == ("structural", False)
    assert insp.carve_estimate["rows"]["messages"] == len(truth.messages)
    report = recover_checked(store, tmp_path, report_path=tmp_path / "r.json")
    out = tmp_path / "new.db.partial"
    assert attribution(out) == truth.messages
    assert sessions_of(out) == original and report.placeholders == []
    for name, count in (("messages", len(truth.messages)), ("sessions", 6)):
        t = report.tables[name]
        assert (t.recovered, t.lanes, t.carved, t.unproven) == (
            count, {"carve": count}, {"orphan": count}, True)
    # state_meta is never carved; the schema page itself is the loss
    assert "table state_meta: no row could be read" in report.loss_reasons
    assert report.lane_stats["carve"]["tables"]["state_meta"]["skipped"]
    assert report.verification["ok"] and report.exit_code == 3
    assert "lorem ipsum" not in (tmp_path / "r.json").read_text()


def test_sessions_root_destroyed_leaves_are_carved_whole(tmp_path):
    """With a sessions tree of several leaves, a destroyed root loses no
    session: the index lane's partial rows are replaced by carved whole rows."""
    (tmp_path / "src").mkdir()
    truth = damage.build_store(tmp_path / "src" / "state.db", sessions=60, per_session=5)
    stree = TableTree(truth.path, "sessions")
    assert len(stree.leaves) >= 3
    original = sessions_of(truth.path)
    smash_page(truth.path, stree.root)
    report = recover_checked(truth.path, tmp_path)
    out = tmp_path / "new.db"
    assert (report.outcome, report.exit_code, report.loss_reasons) == ("recovered", 0, [])
    assert sessions_of(out) == original and report.placeholders == []
    assert attribution(out) == truth.messages
    t = report.tables["sessions"]
    assert (t.partial, t.lanes, t.carved, t.rows_lost) == (0, {"carve": 60}, {"orphan": 60}, 0)


def test_lost_schema_page_tables_found_by_shape(pristine, store, tmp_path):
    """A destroyed leaf of a multi-page sqlite_schema makes SQLite refuse the
    whole schema; tables whose entries survive are walked from their roots,
    the others found by shape, and every row comes back."""
    truth, _, _ = pristine
    leaves = pages_of(store, "sqlite_schema", "leaf")
    assert leaves and 1 not in leaves
    data = store.read_bytes()

    def holds(page: int, table: str) -> bool:
        start = (page - 1) * damage.PAGE_SIZE
        return f"CREATE TABLE {table} (".encode() in data[start:start + damage.PAGE_SIZE]

    hit = next(p for p in leaves if holds(p, "messages"))
    original = sessions_of(store)
    smash_page(store, hit)
    assert hstate_recovery.inspect(store).schema_readable is False
    report = recover_checked(store, tmp_path)
    out = Path(report.output)
    assert attribution(out) == truth.messages and sessions_of(out) == original
    walked = report.lane_stats["carve"]["tables"]
    assert walked["messages"]["walk"] == "none"  # its root is unknown: found by shape
    assert walked["sessions"]["walk"] == ("none" if holds(hit, "sessions") else "clean")
    assert report.tables["messages"].unproven is True
    assert report.verification["ok"] and report.exit_code == 3


def test_forced_carve_lane_counts_rows_from_the_wal(pristine, store, tmp_path):
    truth, _, _ = pristine
    with SessionDB(store) as db:
        db.create_session("late", source="test")
        db.append_messages("late", [{"role": "user", "content": f"late {i}"} for i in range(40)])
        crashed = damage.copy_open_bundle(db, tmp_path / "crash", with_shm=False)
    report = recover_checked(crashed, tmp_path, lanes=["carve"])
    out = Path(report.output)
    got = attribution(out)
    assert len(got) == len(truth.messages) + 40
    assert {k: v for k, v in got.items() if k in truth.messages} == truth.messages
    assert sorted(v for k, v in got.items() if k not in truth.messages) == ["late"] * 40
    t = report.tables["messages"]
    assert t.lanes == {"carve": len(got)} and t.carved["tree"] == len(got)
    assert 40 <= t.from_wal < len(got)  # the late rows' pages exist only in the WAL
    assert report.tables["sessions"].from_wal >= 1
    assert report.lane_stats["carve"]["frames_applied"] > 0
    # carving alone never reads state_meta: reported, never silently dropped
    assert report.loss_reasons == ["table state_meta: no row could be read"]


def test_include_freelist_brings_back_deleted_rows_marked(pristine, store, tmp_path):
    truth, _, _ = pristine
    with SessionDB(store) as db:
        db.delete_session("s5")
    deleted = {r for r, s in truth.messages.items() if s == "s5"}
    (tmp_path / "plain").mkdir()
    plain = recover_checked(store, tmp_path / "plain", lanes=["carve"])
    assert not set(attribution(Path(plain.output))) & deleted  # deleted rows stay deleted
    report = recover_checked(store, tmp_path, lanes=["carve"], include_freelist=True)
    out = Path(report.output)
    back = {r for r, s in attribution(out).items() if s == "s5"}
    assert back and back <= deleted
    assert sql(out, "SELECT table_name, mark, count(*) FROM recovery_marked_rows "
                    "GROUP BY 1, 2") == [("messages", "freelist", len(back))]
    assert {r for (r,) in sql(out, "SELECT source_rowid FROM recovery_marked_rows")} == back
    assert report.tables["messages"].carved["freelist"] == len(back)
    assert report.placeholders == ["s5"]  # its session row was deleted, not on a free page
    assert report.verification["ok"]


def test_unattributed_records_go_to_lost_and_found_never_the_report(pristine, store,
                                                                      tmp_path):
    sql(store, "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT NOT NULL);"
               "INSERT INTO notes(body) VALUES ('secret-note-1'), ('secret-note-2')")
    damage.write_at(store, 0, b"\x00" * damage.PAGE_SIZE)
    report = recover_checked(store, tmp_path, report_path=tmp_path / "r.json")
    out = Path(report.output)
    rows = sql(out, "SELECT lane, page, cell, source_rowid, item FROM lost_and_found")
    assert [(lane, rowid) for lane, _p, _c, rowid, _i in rows] == [("carve", 1), ("carve", 2)]
    assert all(page > 1 and cell is not None for _l, page, cell, _r, _i in rows)
    assert [json.loads(item)["values"] for *_, item in rows] == [[None, "secret-note-1"],
                                                                  [None, "secret-note-2"]]
    assert report.lost_and_found == 2
    assert "secret-note" not in (tmp_path / "r.json").read_text()


def test_a_cell_sqlite_steps_over_is_counted_lost_not_dropped(pristine, store, tmp_path):
    """A cell pointer aimed outside its page: SQLite's lookups and range scans
    can step over that row without any error. The intact index says it
    existed, so it is reported lost (exactly), and the carver still reads
    the leaf's other cells."""
    truth, tree, _ = pristine
    leaf = tree.middle_leaf()
    damage.write_at(store, (leaf - 1) * damage.PAGE_SIZE + 8, (0xFFF0).to_bytes(2, "big"))
    lost = tree.leaves[leaf][0]  # cell 0
    report = recover_checked(store, tmp_path)
    out = tmp_path / "new.db.partial"
    assert attribution(out) == {r: s for r, s in truth.messages.items() if r != lost}
    t = report.tables["messages"]
    assert (t.skipped_ranges, t.rows_lost) == ([[lost, lost]], 1)
    assert report.verification["ok"] and report.exit_code == 3


@pytest.mark.parametrize("fraction,seed", [(0.01, 1), (0.05, 2)], ids=["1pct", "5pct"])
def test_random_page_damage_recovers_every_surviving_leaf(pristine, store, tmp_path,
                                                           fraction, seed):
    """Random pages (never page 1) overwritten with random bytes: exactly the
    messages and sessions whose leaf survived come back, each attributed to
    its own session; a session whose row was lost gets a placeholder."""
    truth, tree, stree = pristine
    rng = random.Random(seed)
    pages = damage.page_count(store)
    hit = set(rng.sample(range(2, pages + 1), max(2, round(pages * fraction))))
    # Most pages now belong to the search indexes; make sure messages lose one.
    hit.add(rng.choice(sorted(tree.leaves)))
    for page in hit:
        damage.write_at(store, (page - 1) * damage.PAGE_SIZE, rng.randbytes(damage.PAGE_SIZE))
    report = recover_checked(store, tmp_path, allow_partial=True)
    out = Path(report.output)
    expected = surviving(tree, hit)
    assert len(tree.reachable(hit)) <= len(expected) < len(truth.messages)
    assert "carve" in report.lanes_run
    assert attribution(out) == {r: truth.messages[r] for r in expected}
    kept = {truth.sessions[r - 1] for r in surviving(stree, hit)}
    got = dict(sql(out, "SELECT id, source FROM sessions"))
    assert {s for s, src in got.items() if src != PLACEHOLDER_SOURCE} == kept
    assert set(report.placeholders) == {truth.messages[r] for r in expected} - kept
    assert report.verification["ok"]
