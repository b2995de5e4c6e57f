"""The carver on damaged stores: exact counts against ground truth.

Every case damages a copy of one pristine store written by SessionDB, and
computes what must come back from which pages it damaged: rows whose leaf
and overflow pages are intact come back exactly, rows whose overflow chain
crossed a damaged page land in lost_and_found, deleted rows stay deleted.
"""
from __future__ import annotations

import json
import os
import random
import shutil
from pathlib import Path

import pytest

from hstate_recovery.carve.carver import FREELIST, ORPHAN, TREE, carve, estimate
from sessiondb.sqlitefile.fileformat import parse_cell, parse_header, parse_page_header, walk_freelist
from tests.helpers.carving import (Truth, build_store, carved_by_key, expected_after_damage,
                                   patch, randomize_page, read_truth, zero_page)


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Truth, list[str]]:
    """Six sessions of 250 messages, some overflowing, the first session deleted."""
    base = tmp_path_factory.mktemp("damage")
    path = base / "state.db"
    ids = build_store(path, sessions=6, per_session=250, delete_sessions=1, big_every=7,
                      before_delete=base / "before.db")
    return path, read_truth(path), ids


@pytest.fixture(scope="module")
def undeleted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Truth]:
    """A store with no freelist, for random damage (see test_random_page_damage)."""
    path = tmp_path_factory.mktemp("random") / "state.db"
    build_store(path, sessions=5, per_session=300, big_every=7)
    return path, read_truth(path)


def _copy(src: Path, tmp_path: Path) -> Path:
    dst = tmp_path / "damaged.db"
    shutil.copyfile(src, dst)
    return dst


def _assert_exact(result, truth: Truth, damaged: set[int]) -> None:
    """Whole rows exactly as SQLite had them, partial rows in lost_and_found."""
    lost_rowids = {r.rowid for r in result.lost_and_found}
    for table in truth.rows:
        whole, partial = expected_after_damage(truth, table, damaged)
        got = carved_by_key(result, table)
        assert set(got) == whole, table
        assert all(got[k] == truth.rows[table][k] for k in whole), table
        assert partial <= lost_rowids, table


def test_page1_zeroed(store, tmp_path: Path) -> None:
    path, truth, ids = store
    damaged = _copy(path, tmp_path)
    zero_page(damaged, 1, truth.page_size)
    result = carve(damaged)
    assert result.stats.page_size == truth.page_size
    assert result.stats.page_size_source == "probe" and not result.stats.schema_readable
    assert carved_by_key(result, "messages") == truth.rows["messages"]
    assert carved_by_key(result, "sessions") == truth.rows["sessions"]
    # every message attributed to its session; the deleted session stays deleted
    assert {m["session_id"] for m in result.tables["messages"]} == set(ids[1:])
    assert all(o.lane == ORPHAN for _, o in result.rows("messages"))
    assert estimate(damaged).rows["messages"] == len(truth.rows["messages"])


def test_sessions_root_destroyed(store, tmp_path: Path) -> None:
    path, truth, ids = store
    damaged = _copy(path, tmp_path)
    root = truth.roots["sessions"]
    randomize_page(damaged, root, truth.page_size, random.Random(7))
    result = carve(damaged)
    assert result.stats.bad_pages.keys() == {root}
    _assert_exact(result, truth, {root})
    assert "sessions" not in result.tables  # its only page is gone
    by_id = carved_by_key(result, "messages")
    assert {k: m["session_id"] for k, m in by_id.items()} == {
        k: m["session_id"] for k, m in truth.rows["messages"].items()}
    earliest: dict[str, float] = {}
    for m in truth.rows["messages"].values():
        earliest[m["session_id"]] = min(earliest.get(m["session_id"], m["timestamp"]),
                                        m["timestamp"])
    assert result.orphaned_sessions() == earliest == {
        sid: earliest[sid] for sid in ids[1:]}


def test_interior_pages_destroyed(store, tmp_path: Path) -> None:
    path, truth, _ = store
    damaged = _copy(path, tmp_path)
    interior = set(truth.interior["messages"])
    assert interior
    for pgno in interior:
        randomize_page(damaged, pgno, truth.page_size, random.Random(pgno))
    result = carve(damaged)
    _assert_exact(result, truth, interior)
    assert {o.lane for _, o in result.rows("messages")} == {ORPHAN}
    assert {o.lane for _, o in result.rows("sessions")} == {TREE}


@pytest.mark.parametrize("fraction,seed", [(0.01, 1), (0.05, 2), (0.05, 3)])
def test_random_page_damage(undeleted, tmp_path: Path, fraction: float, seed: int) -> None:
    path, truth = undeleted
    damaged = _copy(path, tmp_path)
    rng = random.Random(seed)
    count = os.path.getsize(path) // truth.page_size
    hit = set(rng.sample(range(2, count + 1), max(1, round(count * fraction))))
    for pgno in hit:
        randomize_page(damaged, pgno, truth.page_size, rng)
    result = carve(damaged)
    _assert_exact(result, truth, hit)
    assert set(result.stats.bad_pages) <= hit


def test_truncated_file(store, tmp_path: Path) -> None:
    path, truth, _ = store
    damaged = _copy(path, tmp_path)
    pages = os.path.getsize(path) // truth.page_size
    keep = pages * 6 // 10
    os.truncate(damaged, keep * truth.page_size)
    result = carve(damaged)
    gone = set(range(keep + 1, pages + 1))
    _assert_exact(result, truth, gone)
    assert any(r.startswith("missing") for r in result.stats.bad_pages.values())


def _leaf_with_overflow(path: Path, truth: Truth, min_pages: int) -> tuple[int, list[int]]:
    for rowid, pages in truth.overflow_of["messages"].items():
        if len(pages) >= min_pages:
            return rowid, pages
    raise AssertionError("no row with a long enough overflow chain")


def test_cell_pointer_outside_page(store, tmp_path: Path) -> None:
    path, truth, _ = store
    damaged = _copy(path, tmp_path)
    ps = truth.page_size
    rowid = sorted(truth.leaf_of["messages"])[40]
    leaf = truth.leaf_of["messages"][rowid]
    data = path.read_bytes()[(leaf - 1) * ps:leaf * ps]
    page = parse_page_header(data, leaf, ps)
    index = next(i for i in range(page.cell_count)
                 if parse_cell(data, page, i, ps).rowid == rowid)
    patch(damaged, (leaf - 1) * ps + 8 + 2 * index, (0xFFF0).to_bytes(2, "big"))
    result = carve(damaged)
    got = carved_by_key(result, "messages")
    assert set(got) == set(truth.rows["messages"]) - {rowid}
    assert result.stats.bad_cells == 1


def test_broken_overflow_link(store, tmp_path: Path) -> None:
    path, truth, _ = store
    damaged = _copy(path, tmp_path)
    rowid, pages = _leaf_with_overflow(path, truth, 2)
    patch(damaged, (pages[0] - 1) * truth.page_size, (0xFFFFFF00).to_bytes(4, "big"))
    result = carve(damaged)
    assert set(carved_by_key(result, "messages")) == set(truth.rows["messages"]) - {rowid}
    (lost,) = result.lost_and_found
    assert lost.rowid == rowid and lost.reason == (
        "broken overflow chain: link to page 4294967040")
    assert lost.values[1] == truth.rows["messages"][rowid]["session_id"]


def test_overflow_cycle(store, tmp_path: Path) -> None:
    path, truth, _ = store
    damaged = _copy(path, tmp_path)
    rowid, pages = _leaf_with_overflow(path, truth, 3)
    patch(damaged, (pages[1] - 1) * truth.page_size, pages[0].to_bytes(4, "big"))
    result = carve(damaged)
    assert set(carved_by_key(result, "messages")) == set(truth.rows["messages"]) - {rowid}
    (lost,) = result.lost_and_found
    assert lost.rowid == rowid and lost.reason.startswith("broken overflow chain: cycle")


def test_deleted_rows_only_on_request(store, tmp_path: Path) -> None:
    path, truth, ids = store
    before = read_truth(path.with_name("before.db"))
    default = carve(path)
    assert carved_by_key(default, "messages") == truth.rows["messages"]
    opted = carve(path, include_freelist=True)
    extra = {o.rowid: row for row, o in opted.rows("messages") if o.lane == FREELIST}
    assert extra, "the deleted session's leaf pages are on the freelist"
    assert {row["session_id"] for row in extra.values()} == {ids[0]}
    assert all(before.rows["messages"][k] == row for k, row in extra.items())
    kept = {o.rowid for _, o in opted.rows("messages") if o.lane != FREELIST}
    assert kept == set(truth.rows["messages"])


def test_page1_zeroed_keeps_deleted_rows_deleted_at_other_sizes(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    ids = build_store(path, sessions=4, per_session=80, page_size=1024, delete_sessions=2,
                      big_every=5)
    truth = read_truth(path)
    assert parse_header(path.read_bytes()[:100]).freelist_count > 0
    zero_page(path, 1, 1024)
    result = carve(path)
    assert result.stats.page_size == 1024
    assert carved_by_key(result, "messages") == truth.rows["messages"]
    assert {m["session_id"] for m in result.tables["messages"]} == set(ids[2:])


def test_estimate_matches_carve(store) -> None:
    path, truth, _ = store
    est = estimate(path)
    assert est.schema_readable and est.unattributed == 0
    assert {t: n for t, n in est.rows.items() if n} == {
        t: len(rows) for t, rows in truth.rows.items() if rows}


def test_missing_file_is_a_typed_error(tmp_path: Path) -> None:
    from hstate_recovery.carve.carver import CarveError
    with pytest.raises(CarveError) as info:
        carve(tmp_path / "nope.db")
    assert info.value.path == str(tmp_path / "nope.db")


def test_zero_filled_file_yields_nothing(tmp_path: Path) -> None:
    path = tmp_path / "zero.db"
    path.write_bytes(bytes(64 * 1024))
    result = carve(path)
    assert result.tables == {} and result.lost_and_found == []
    assert result.stats.notes


def test_wrong_page_size_in_header(store, tmp_path: Path) -> None:
    path, truth, _ = store
    damaged = _copy(path, tmp_path)
    patch(damaged, 16, (1024).to_bytes(2, "big"))
    result = carve(damaged)
    assert (result.stats.page_size, result.stats.page_size_source) == (4096, "probe")
    assert result.stats.schema_readable
    for table, rows in truth.rows.items():
        assert carved_by_key(result, table) == rows


def test_summary_counts_without_text(store, tmp_path: Path) -> None:
    path, truth, _ = store
    damaged = _copy(path, tmp_path)
    rowid, pages = _leaf_with_overflow(path, truth, 2)
    patch(damaged, (pages[0] - 1) * truth.page_size, (0xFFFFFF00).to_bytes(4, "big"))
    summary = carve(damaged).summary()
    assert summary["rows"]["messages"] == {"tree": len(truth.rows["messages"]) - 1, "wal": 0}
    assert summary["lost_and_found"] == {"broken overflow chain": 1}
    text = json.dumps(summary)
    uid = truth.rows["messages"][rowid]["uid"]  # 16 bytes (m010): its hex must not show
    assert uid.hex() not in text and str(uid) not in text and "lorem" not in text


def test_damaged_freelist_trunk_chain(tmp_path: Path) -> None:
    """The header's freelist head is gone: the trunks are found by shape, so
    the deleted sessions' leaves still stay deleted."""
    path = tmp_path / "state.db"
    ids = build_store(path, sessions=5, per_session=120, page_size=1024, delete_sessions=3,
                      big_every=5)
    truth = read_truth(path)
    hdr = parse_header(path.read_bytes()[:100])
    assert hdr.freelist_count > 0
    patch(path, 32, (0).to_bytes(4, "big"))  # first freelist trunk pointer
    result = carve(path)
    assert carved_by_key(result, "messages") == truth.rows["messages"]
    assert {m["session_id"] for m in result.tables["messages"]} == set(ids[3:])


def test_pointer_map_knows_free_pages(tmp_path: Path) -> None:
    """Incremental auto_vacuum keeps free pages and marks them in the pointer
    map: with the freelist trunks destroyed, deleted rows still stay deleted."""
    path = tmp_path / "state.db"
    ids = build_store(path, sessions=4, per_session=100, page_size=1024, auto_vacuum=2,
                      delete_sessions=2, big_every=5)
    truth = read_truth(path)
    data = path.read_bytes()
    hdr = parse_header(data[:100])
    assert hdr.auto_vacuum and hdr.incremental_vacuum and hdr.freelist_count > 0
    fl = walk_freelist(hdr.first_freelist_trunk, lambda n: data[(n - 1) * 1024:n * 1024],
                       1024, hdr.page_count)
    for trunk in fl.trunks:
        zero_page(path, trunk, 1024)
    patch(path, 32, bytes(8))  # first trunk and freelist count
    result = carve(path)
    assert carved_by_key(result, "messages") == truth.rows["messages"]
    assert {m["session_id"] for m in result.tables["messages"]} == set(ids[2:])


@pytest.mark.parametrize("content", [
    bytes(random.Random(3).getrandbits(8) for _ in range(96 * 1024)),
    b'{"not": "a database"}\n' * 3000,
    b"",
], ids=["random", "text", "empty"])
def test_not_a_database(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "other.db"
    path.write_bytes(content)
    result = carve(path)
    assert result.tables == {} and not result.stats.schema_readable
    assert estimate(path).total == 0


def test_a_live_row_wins_over_an_older_copy_on_a_free_page(store, tmp_path: Path) -> None:
    """A free leaf holding an older version of a live row (as a page freed
    after the row was rewritten elsewhere does): the tree's copy is taken
    and a note says so, with the freelist read or not."""
    path, truth, _ = store
    dst = _copy(path, tmp_path)
    data = bytearray(dst.read_bytes())
    head = parse_header(bytes(data[:100]))
    size = head.page_size
    free = walk_freelist(head.first_freelist_trunk,
                         lambda p: bytes(data[(p - 1) * size:p * size]), size,
                         len(data) // size).leaves
    live = next(o.page for _, o in carve(path).rows("messages") if o.lane == TREE)
    old = bytearray(data[(live - 1) * size:live * size])
    page = parse_page_header(bytes(old), live, size)
    cell = parse_cell(bytes(old), page, 0, size)
    sid = truth.rows["messages"][cell.rowid]["session_id"].encode()
    at = bytes(old).index(sid, page.cell_pointers[0])
    # the older version of that row: another session (a column the freelist
    # lane's content check does not cover), the same length
    old[at:at + len(sid)] = sid[:-1] + (b"9" if sid[-1:] != b"9" else b"8")
    data[(free[0] - 1) * size:free[0] * size] = old
    dst.write_bytes(bytes(data))
    result = carve(dst, include_freelist=True)
    live_rows = {o.rowid: row for row, o in result.rows("messages") if o.lane != FREELIST}
    assert live_rows == truth.rows["messages"]  # (the deleted session's rows are FREELIST)
    assert result.stats.differing_copies >= 1
    assert any(f"rowid {cell.rowid}: took the tree copy on page {live} over a different "
               f"freelist copy on page {free[0]}" in n for n in result.stats.notes)
