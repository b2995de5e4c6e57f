"""Bisection steered by the b-tree's interior pages (`hstate_recovery.carve.tree_map`).

Real stores built through SessionDB, real pages overwritten; the ground
truth is the intact file's b-tree (`tests.helpers.damage.TableTree`).
"""
from __future__ import annotations

from pathlib import Path

import apsw
import pytest

import hstate_recovery
from hstate_recovery.carve import tree_map
from sessiondb.sqlitefile.fileformat import parse_cell, parse_page_header
from hstate_recovery.lanes.context import batches
from sessiondb import SessionDB
from tests.helpers import damage
from tests.helpers.damage import (PAGE_SIZE, TableTree, bundle_hashes, message_ids, smash_page,
                                  sql)


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory):
    path = tmp_path_factory.mktemp("pristine") / "state.db"
    truth = damage.build_store(path, per_session=100)
    return truth, TableTree(path, "messages")


@pytest.fixture
def store(pristine, tmp_path: Path) -> Path:
    return damage.private_copy(pristine[0].path, tmp_path)


def the_map(path: Path) -> tree_map.TreeMap:
    found = tree_map.open_map(path, damage.root_page(path, "messages"))
    assert found is not None
    return found


def spread_leaves(tree: TableTree, n: int) -> list[int]:
    leaves = sorted(tree.leaves, key=lambda p: tree.leaves[p][0])
    return [leaves[(i + 1) * len(leaves) // (n + 1)] for i in range(n)]


def test_the_map_names_the_leaf_of_every_rowid(pristine):
    truth, tree = pristine
    found = the_map(truth.path)
    try:
        assert 0 < len(found) < len(tree.leaves)  # pages above the leaves, not the leaves
        for leaf, rowids in tree.leaves.items():
            for rowid in rowids:
                span = found.span(rowid)
                assert (span.pgno, span.sound) == (leaf, True)
                assert span.lo <= min(rowids) and max(rowids) <= span.hi
    finally:
        found.image.close()


def test_the_map_marks_destroyed_leaves_and_interior_pages_unsound(pristine, store):
    _truth, tree = pristine
    leaf, inner = tree.middle_leaf(), tree.middle_interior()
    smash_page(store, leaf)
    smash_page(store, inner)
    found = the_map(store)
    try:
        for rowid in tree.leaves[leaf]:
            assert (found.span(rowid).pgno, found.span(rowid).sound) == (leaf, False)
        under = tree.rowids() - tree.reachable({inner})
        assert under and all(found.span(r).sound is False for r in under)
        sound = tree.reachable({leaf, inner})
        assert all(found.span(r).sound for r in sound)
    finally:
        found.image.close()


def test_bisection_steps_over_damaged_leaves_without_spending_its_budget(pristine, store,
                                                                         tmp_path):
    """No index left to list the rowids: bisection used to halve its way
    around each damaged leaf; with the map it steps over each in a query."""
    truth, tree = pristine
    bad = set(spread_leaves(tree, 6))
    for index in ("messages_in_order", "sqlite_autoindex_messages_1"):
        smash_page(store, damage.root_page(store, index))
    for page in bad:
        smash_page(store, page)
    before = bundle_hashes(store)
    report = hstate_recovery.recover(store, tmp_path / "new.db", lanes=["rows", "bisect"])
    assert bundle_hashes(store) == before
    assert message_ids(tmp_path / "new.db.partial") == tree.reachable(bad)
    stats = report.lane_stats["bisect"]["messages"]
    assert stats["tree_map"] > 0 and stats["budget_exhausted"] is False
    assert stats["queries"] <= 3 * len(bad) + 4
    lost = sorted(r for p in bad for r in tree.leaves[p])
    assert [r for lo, hi in report.tables["messages"].skipped_ranges
            for r in range(lo, hi + 1)] == lost
    assert (report.outcome, report.verification["ok"]) == ("partial", True)


def test_rows_under_a_destroyed_interior_page_are_left_to_the_carver(pristine, store,
                                                                     tmp_path):
    truth, tree = pristine
    inner = tree.middle_interior()
    smash_page(store, inner)
    report = hstate_recovery.recover(store, tmp_path / "new.db")
    assert message_ids(tmp_path / "new.db") == set(truth.messages)
    t = report.tables["messages"]
    by_sql = tree.reachable({inner})
    assert t.lanes["carve"] == len(truth.messages) - len(by_sql)  # nothing read twice
    assert report.lane_stats["bisect"]["messages"]["queries"] <= 8


def test_a_read_error_hands_on_the_rows_read_before_it():
    def rows():
        for i in range(5):
            yield {"rowid": i, "text": "x"}
        raise apsw.CorruptError("database disk image is malformed")

    got = []
    with pytest.raises(apsw.CorruptError):
        for batch in batches(rows()):
            got.append([r["rowid"] for r in batch])
    assert got == [[0, 1, 2, 3, 4]]


def big_store(path: Path) -> dict[int, str]:
    """A store whose messages each take two overflow pages (1 KiB pages),
    several messages to a leaf."""
    pre = apsw.Connection(str(path))
    pre.execute(f"PRAGMA page_size={PAGE_SIZE}; CREATE TABLE t(x); DROP TABLE t;")
    pre.close()
    texts = {}
    with SessionDB(path, background_index=False) as db:
        sid = db.create_session("big", source="test")
        batch = [{"role": "user", "content": f"message {i:03d} " + "overflowing " * 174}
                 for i in range(80)]
        for rid, m in zip(db.append_messages(sid, batch), batch):
            texts[rid] = m["content"]
        db.catch_up_index()
    return texts


def middle_rows(path: Path, tree: TableTree, n: int) -> list[tuple[int, int]]:
    """(rowid, first overflow page) of the middle row of ``n`` leaves spread
    over the table (each with rows before and after it on its page)."""
    data = path.read_bytes()
    out = []
    for leaf in spread_leaves(tree, n):
        rowids = tree.leaves[leaf]
        assert len(rowids) >= 3
        raw = data[(leaf - 1) * PAGE_SIZE:leaf * PAGE_SIZE]
        cell = parse_cell(raw, parse_page_header(raw, leaf, PAGE_SIZE), len(rowids) // 2,
                          PAGE_SIZE)
        assert cell.overflow_page
        out.append((cell.rowid, cell.overflow_page))
    return out


def test_broken_overflow_chains_lose_their_rows_not_their_neighbours(tmp_path):
    """A row whose overflow chain breaks stops SQL on a sound leaf: the rows
    after it on that leaf are read on their own, the ones after the leaf by
    stepping over it, so only the broken rows are lost (and named)."""
    src = tmp_path / "src"
    src.mkdir(mode=0o700)
    store = src / "state.db"
    texts = big_store(store)
    broken = middle_rows(store, TableTree(store, "messages"), 3)
    for _rowid, overflow in broken:
        smash_page(store, overflow)
    before = bundle_hashes(store)
    report = hstate_recovery.recover(store, tmp_path / "new.db", allow_partial=True)
    assert bundle_hashes(store) == before
    out = tmp_path / "new.db"
    lost = sorted(r for r, _ in broken)
    assert message_ids(out) == set(texts) - set(lost)
    kept = dict(sql(out, "SELECT id, content FROM messages"))
    assert all(kept[r] == texts[r] for r in kept)  # every kept row whole and right
    t = report.tables["messages"]
    assert t.skipped_ranges == [[r, r] for r in lost] and t.rows_lost == len(lost)
    assert t.lanes["bisect"] > 0  # the rows between the first and last break
    assert report.lane_stats["bisect"]["messages"]["queries"] <= 40
    assert (report.outcome, report.verification["ok"]) == ("partial", True)
