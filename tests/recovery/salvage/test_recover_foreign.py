"""`recover` on files other programs wrote: their own schema, exact rows.

Each format's file is built by its program (tests/helpers/foreign_dbs.py)
with ground truth, damaged as a class of real damage, recovered through the
library, and the output compared row by row (rowids per table) with what
the damage allows: rows on destroyed leaves are lost, every other row is in
its own table. The source bundle stays byte-identical every time.
"""
from __future__ import annotations

import os
import random
from pathlib import Path
from typing import Callable

import apsw
import pytest

from hstate_recovery.salvage.pipeline import recover
from tests.helpers import foreign_dbs as f
from tests.helpers.damage import TableTree, bundle_hashes, pages_of, sql, write_at

PS = 1024
CASES: dict[str, Callable[[Path], f.GroundTruth]] = {
    "hermes-agent": lambda p: f.build_hermes_agent(p, sessions=12, messages=30, page_size=PS),
    "hermes-agent-upgraded": lambda p: f.build_hermes_agent(p, sessions=12, messages=30,
                                                            page_size=PS, upgraded=True),
    "llm": lambda p: f.build_llm(p, conversations=12, responses=6, page_size=PS),
    "llm-responses": lambda p: f.build_llm(p, conversations=12, responses=8, page_size=PS,
                                           layout="responses"),
    "openai-agents": lambda p: f.build_openai_agents(p, sessions=8, items=40, page_size=PS),
    "langgraph": lambda p: f.build_langgraph(p, threads=6, checkpoints=10, page_size=PS),
}
WITH_FTS = ("hermes-agent", "hermes-agent-upgraded", "llm", "llm-responses")


def _rowids(path: Path, tables: list[str]) -> dict[str, set[int]]:
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    try:
        have = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        return {t: ({r[0] for r in conn.execute(f'SELECT rowid FROM "{t}"')}
                    if t in have else set()) for t in tables}
    finally:
        conn.close()


def _leaves(truth: f.GroundTruth) -> dict[str, TableTree]:
    return {t: TableTree(truth.path, t) for t in truth.rowids}


def _lost_with(trees: dict[str, TableTree], bad: set[int]) -> dict[str, set[int]]:
    """Rows on destroyed leaves (an interior page lost loses no row: the
    carver reads the leaves under it)."""
    return {t: {r for leaf, rows in tree.leaves.items() if leaf in bad for r in rows}
            for t, tree in trees.items()}


def _recover(truth: f.GroundTruth, tmp: Path, **kw) -> tuple[object, dict[str, set[int]]]:
    before = bundle_hashes(truth.path)
    out = tmp / "out.db"
    rep = recover(truth.path, out, allow_partial=True, work_dir=tmp, **kw)
    assert bundle_hashes(truth.path) == before  # the source bundle is never changed
    assert rep.output == str(out), (rep.outcome, rep.verification, rep.loss_reasons)
    assert rep.verification["ok"], rep.verification
    return rep, _rowids(out, list(truth.rowids))


def _expect(got: dict[str, set[int]], truth: f.GroundTruth,
            lost: dict[str, set[int]] | None = None) -> None:
    for table, ids in truth.rowids.items():
        want = ids - (lost or {}).get(table, set())
        assert got[table] == want, (table, len(got[table]), len(want))


def _schema(path: Path) -> set[tuple]:
    return set(sql(path, "SELECT type, name, tbl_name, sql FROM sqlite_master "
                         "WHERE name NOT LIKE 'sqlite_%'"))


def _build(case: str, tmp: Path, **kw) -> f.GroundTruth:
    src = tmp / "src"
    src.mkdir()
    return CASES[case](src / "state.db") if not kw else kw["builder"](src / "state.db")


@pytest.mark.parametrize("case", sorted(CASES))
def test_healthy_file_is_recovered_whole_in_its_own_schema(tmp_path: Path, case: str) -> None:
    truth = _build(case, tmp_path)
    rep, got = _recover(truth, tmp_path)
    assert rep.outcome == "recovered" and not rep.loss_reasons
    assert rep.identification["kind"] == truth.kind
    _expect(got, truth)
    out = Path(rep.output)
    assert _schema(out) == _schema(truth.path)  # tables, indexes, views, triggers, vtables
    for table in truth.rowids:  # columns in the same physical order
        assert sql(out, f'PRAGMA table_info("{table}")') == sql(
            truth.path, f'PRAGMA table_info("{table}")')
    for pragma in ("application_id", "user_version", "page_size"):
        assert sql(out, f"PRAGMA {pragma}") == sql(truth.path, f"PRAGMA {pragma}")
    assert not {"migrations", "recovery_quarantine", "lost_and_found"} & {
        n for (_k, n, _t, _s) in _schema(out)} - {n for (_k, n, _t, _s) in
                                                  _schema(truth.path)}
    for vt in truth.virtual:  # refilled from their content tables
        assert rep.virtual_tables[vt].startswith("rebuilt from")
        assert sql(out, f"INSERT INTO {vt}({vt}) VALUES('integrity-check')") == []


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_destroyed_leaf_loses_exactly_its_rows(tmp_path: Path, case: str) -> None:
    truth = _build(case, tmp_path)
    trees = _leaves(truth)
    leaf = trees[truth.main_table].middle_leaf()
    os.chmod(truth.path, 0o600)
    write_at(truth.path, (leaf - 1) * PS, b"\xde\xad\xbe\xef" * (PS // 4))
    rep, got = _recover(truth, tmp_path)
    lost = _lost_with(trees, {leaf})
    assert lost[truth.main_table]
    _expect(got, truth, lost)
    assert rep.outcome == "partial"


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_destroyed_interior_page_loses_nothing(tmp_path: Path, case: str) -> None:
    truth = _build(case, tmp_path)
    tree = TableTree(truth.path, truth.main_table)
    inner = [p for p in tree.interior if p != tree.root] or tree.interior
    assert inner, "the main table needs an interior page"
    write_at(truth.path, (inner[0] - 1) * PS, b"\xde\xad\xbe\xef" * (PS // 4))
    _rep, got = _recover(truth, tmp_path)
    _expect(got, truth)


@pytest.mark.parametrize("case", sorted(CASES))
def test_random_pages(tmp_path: Path, case: str) -> None:
    truth = _build(case, tmp_path)
    trees = _leaves(truth)
    schema = set(pages_of(truth.path, "sqlite_schema"))
    n = os.stat(truth.path).st_size // PS
    bad = set(random.Random(16).sample([p for p in range(2, n + 1) if p not in schema], 4))
    for p in bad:
        write_at(truth.path, (p - 1) * PS, b"\xde\xad\xbe\xef" * (PS // 4))
    _rep, got = _recover(truth, tmp_path)
    _expect(got, truth, _lost_with(trees, bad))


@pytest.mark.parametrize("case", sorted(CASES))
def test_truncated_file(tmp_path: Path, case: str) -> None:
    truth = _build(case, tmp_path)
    trees = _leaves(truth)
    n = os.stat(truth.path).st_size // PS
    keep = int(n * 0.7)
    os.truncate(truth.path, keep * PS)
    _rep, got = _recover(truth, tmp_path)
    _expect(got, truth, _lost_with(trees, set(range(keep + 1, n + 1))))


@pytest.mark.parametrize("case", sorted(CASES))
def test_page_one_zeroed_with_a_template(tmp_path: Path, case: str) -> None:
    truth = _build(case, tmp_path)
    template = tmp_path / "template.db"
    CASES[case.replace("-upgraded", "")](template)
    write_at(truth.path, 0, bytes(PS))
    before = bundle_hashes(template)
    rep, got = _recover(truth, tmp_path, template=template)
    assert bundle_hashes(template) == before
    assert rep.schema_source == "template"
    _expect(got, truth)


@pytest.mark.parametrize("case", sorted(CASES))
def test_page_one_zeroed_without_a_template(tmp_path: Path, case: str) -> None:
    truth = _build(case, tmp_path)
    write_at(truth.path, 0, bytes(PS))
    rep, got = _recover(truth, tmp_path)
    assert rep.schema_source in ("registry", "harvested+registry")
    assert rep.identification["kind"] == truth.kind
    _expect(got, truth)


@pytest.mark.parametrize("case", WITH_FTS)
def test_fts_pages_only(tmp_path: Path, case: str) -> None:
    truth = _build(case, tmp_path)
    fts = [p for vt in truth.virtual for shadow in ("_data", "_idx")
           for p in pages_of(truth.path, vt + shadow)]
    assert fts
    for p in fts:
        write_at(truth.path, (p - 1) * PS, b"\xde\xad\xbe\xef" * (PS // 4))
    rep, got = _recover(truth, tmp_path)
    assert rep.outcome == "recovered"
    _expect(got, truth)


@pytest.mark.parametrize("case", sorted(CASES))
def test_wal_copied_live_without_shm(tmp_path: Path, case: str) -> None:
    builders = {"hermes-agent": lambda p: f.build_hermes_agent(
        p, sessions=6, messages=20, page_size=PS, wal_tail=15),
        "hermes-agent-upgraded": lambda p: f.build_hermes_agent(
            p, sessions=6, messages=20, page_size=PS, upgraded=True, wal_tail=15),
        "llm": lambda p: f.build_llm(p, conversations=6, page_size=PS, wal_tail=15),
        "llm-responses": lambda p: f.build_llm(p, conversations=6, page_size=PS,
                                               layout="responses", wal_tail=15),
        "openai-agents": lambda p: f.build_openai_agents(p, sessions=4, page_size=PS,
                                                         wal_tail=15),
        "langgraph": lambda p: f.build_langgraph(p, threads=4, page_size=PS, wal_tail=15)}
    truth = _build(case, tmp_path, builder=builders[case])
    assert Path(f"{truth.path}-wal").exists() and not Path(f"{truth.path}-shm").exists()
    rep, got = _recover(truth, tmp_path)
    assert rep.outcome == "recovered"
    _expect(got, truth)
    assert not Path(f"{truth.path}-shm").exists()
