"""Schema awareness: FTS shadow tables ignored, tables and columns that
later migrations add, index b-trees, and the layout scores themselves."""
from __future__ import annotations

import shutil
from pathlib import Path

import apsw
import pytest

from hstate_recovery.carve.carver import carve, estimate
from sessiondb.sqlitefile.fileformat import (INDEX_INTERIOR, INDEX_LEAF, decode_record, parse_cell,
                                 parse_header, parse_page_header, read_overflow)
from hstate_recovery.schema.layouts import KNOWN_LAYOUTS, MESSAGES, best_fit, layout_from_sql
from sessiondb import SessionDB
from tests.helpers.carving import build_store, carved_by_key, message, read_truth, zero_page

@pytest.fixture(scope="module")
def fts_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Our store with its FTS5 tables: the word index's and the term table's
    shadows hold data, the WITHOUT ROWID ones (``_idx``, ``_config``, index
    b-trees) included, and the term table's ``_content`` (a rowid table of
    terms)."""
    path = tmp_path_factory.mktemp("fts") / "state.db"
    build_store(path, sessions=3, per_session=120, big_every=8)
    conn = apsw.Connection(str(path))
    try:
        # the term table has no _docsize (columnsize=0)
        for index, shadows in (("messages_fts", ("data", "idx", "docsize", "config")),
                               ("messages_terms", ("data", "idx", "config", "content"))):
            for shadow in shadows:
                n = conn.execute(f"SELECT count(*) FROM {index}_{shadow}").fetchone()[0]
                assert n > 0, f"{index}_{shadow} is empty"
        without_rowid = conn.execute("SELECT count(*) FROM sqlite_schema WHERE type='table'"
                                     " AND sql LIKE '%WITHOUT ROWID'").fetchone()[0]
        assert without_rowid == 4
    finally:
        conn.close()
    return path


def test_fts_shadow_tables_are_never_mapped(fts_store: Path, tmp_path: Path) -> None:
    truth = read_truth(fts_store)
    result = carve(fts_store)
    assert set(result.tables) == {t for t, rows in truth.rows.items() if rows}
    assert result.lost_and_found == []
    for table, rows in truth.rows.items():
        assert carved_by_key(result, table) == rows
    blind_path = tmp_path / "blind.db"
    shutil.copyfile(fts_store, blind_path)
    zero_page(blind_path, 1, truth.page_size)
    blind = carve(blind_path)
    assert blind.lost_and_found == [] and blind.stats.derived_records > 0
    assert carved_by_key(blind, "messages") == truth.rows["messages"]


def test_unknown_table_from_the_schema(tmp_path: Path) -> None:
    """A table the carver has no layout for is carved by the layout its own
    CREATE TABLE gives, while page 1 is readable."""
    path = tmp_path / "state.db"
    build_store(path, sessions=1, per_session=5)
    conn = apsw.Connection(str(path))
    conn.execute("CREATE TABLE extra_notes (id TEXT PRIMARY KEY, session_id TEXT NOT NULL,"
                 " created_at REAL NOT NULL, absorbed INTEGER NOT NULL)")
    rows = [(f"c{i}", "s", 1.7e9 + i, i) for i in range(10)]
    conn.executemany("INSERT INTO extra_notes VALUES (?, ?, ?, ?)", rows)
    conn.close()
    result = carve(path)
    got = [(r["id"], r["session_id"], r["created_at"], r["absorbed"])
           for r in result.tables["extra_notes"]]
    assert got == rows
    assert all(o.confidence <= 0.4 for _, o in result.rows("extra_notes"))
    # without page 1 nothing says what these records are: kept, unattributed
    zero_page(path, 1, 4096)
    blind = carve(path)
    assert "extra_notes" not in blind.tables and len(blind.tables["messages"]) == 5
    lost = sorted((r.rowid, tuple(r.values)) for r in blind.lost_and_found)
    assert lost == [(i + 1, row) for i, row in enumerate(rows)]
    assert len({r.page for r in blind.lost_and_found}) == 1
    assert sorted(r.cell for r in blind.lost_and_found) == list(range(10))


def test_columns_added_by_a_later_migration(tmp_path: Path) -> None:
    """Rows written before ALTER TABLE ADD COLUMN have fewer columns; the
    schema's default fills them. Without page 1 the known layout still fits."""
    path = tmp_path / "state.db"
    ids = build_store(path, sessions=1, per_session=10)
    conn = apsw.Connection(str(path))
    conn.execute("ALTER TABLE messages ADD COLUMN generation TEXT NOT NULL DEFAULT 'g0'")
    conn.close()
    with SessionDB(path) as db:
        db.append_messages(ids[0], [message(100 + i) for i in range(5)])
    truth = read_truth(path)
    assert {row["generation"] for row in truth.rows["messages"].values()} == {"g0"}
    result = carve(path)
    assert carved_by_key(result, "messages") == truth.rows["messages"]
    zero_page(path, 1, truth.page_size)
    blind = carve(path)
    expect = {k: {c: v for c, v in row.items() if c != "generation"}
              for k, row in truth.rows["messages"].items()}
    assert carved_by_key(blind, "messages") == expect
    assert blind.stats.unknown_columns == 5  # the rows written after the ALTER


def test_index_cells_match_sqlite(tmp_path: Path) -> None:
    """Index leaf and interior cells hold every entry exactly once."""
    path = tmp_path / "state.db"
    build_store(path, sessions=2, per_session=150, page_size=1024)
    truth = read_truth(path)
    conn = apsw.Connection(str(path), flags=apsw.SQLITE_OPEN_READONLY)
    pages = [p for (p,) in conn.execute(
        "SELECT pageno FROM dbstat WHERE name='messages_in_order' AND pagetype!='overflow'")]
    conn.close()
    data = path.read_bytes()
    hdr = parse_header(data[:100])
    ps = hdr.page_size
    page_of = lambda n: data[(n - 1) * ps:n * ps]  # noqa: E731
    entries = []
    kinds = set()
    for pgno in pages:
        page = parse_page_header(page_of(pgno), pgno, ps)
        kinds.add(page.page_type)
        for i in range(page.cell_count):
            cell = parse_cell(page_of(pgno), page, i, ps)
            ov = read_overflow(cell, page_of, ps, hdr.page_count)
            entries.append(tuple(decode_record(ov.payload, cell.payload_size).values))
    assert kinds == {INDEX_INTERIOR, INDEX_LEAF}
    # messages_in_order is (session_id, position) and the rowid (m011: not the id twice)
    expect = sorted((row["session_id"], row["position"], rowid)
                    for rowid, row in truth.rows["messages"].items())
    assert sorted(entries) == expect


def test_layout_scores() -> None:
    row = {"id": None, "session_id": "s1", "uid": "u", "position": 1, "role": "user",
           "content_kind": "text", "content": "hi", "tool_calls": None, "tool_call_id": None,
           "tool_name": None, "finish_reason": None, "timestamp": 1.7e9, "token_count": None,
           "meta": "{}", "fingerprint": "0" * 24, "state": "active", "compaction_id": None,
           "kind": "message"}
    values = list(row.values())
    classes = ["null", "text", "text", "integer", "text", "text", "text", "null", "null",
               "null", "null", "real", "null", "text", "text", "text", "null", "text"]
    layout, score = best_fit(values, classes, KNOWN_LAYOUTS)
    assert layout is MESSAGES and 0.5 < score < 1.0  # wrong fingerprint: not certain
    bad_role = values.copy()
    bad_role[4] = "wizard"
    assert MESSAGES.score(bad_role, classes) < score
    as_int = classes.copy()
    as_int[1] = "integer"  # a session id can never be stored as an integer
    assert MESSAGES.score(values, as_int) == 0.0
    assert layout_from_sql("t", "CREATE TABLE t(a) WITHOUT ROWID") is None
    assert layout_from_sql("t", "not sql") is None
    # schema text from a damaged file runs as one statement, never more
    evil = "CREATE TABLE t(a); ATTACH DATABASE 'x.db' AS x"
    assert layout_from_sql("t", evil) is None
    assert [c.name for c in layout_from_sql("t", "CREATE TABLE t(a, b)").columns] == ["a", "b"]


def test_compactions_are_carved_without_page_1(tmp_path: Path) -> None:
    """Every table our migrations create has a known layout (FTS excluded):
    compaction rows come back by shape even when the schema page is gone,
    and none of them is mistaken for another table or lost."""
    path = tmp_path / "state.db"
    sids = build_store(path, sessions=2, per_session=30)
    with SessionDB(path) as db:
        for n, sid in enumerate(sids):
            ids = [m["_db_persisted"].id for m in db.get_messages(sid)]
            done = [db.archive_and_compact(sid, ids[5 * k:5 * k + 4],
                                           {"role": "system", "content": f"summary {n}.{k}"})
                    for k in range(3)]
        db.restore_compaction(done[-1].compaction_id)
        db.checkpoint()
    truth = read_truth(path)
    rows = apsw.Connection(str(path)).execute("SELECT rowid, * FROM compactions").fetchall()
    assert len(rows) == 6 and sum(r[6] is not None for r in rows) == 1
    zero_page(path, 1, truth.page_size)
    blind = carve(path)
    got = sorted((o.rowid, *row.values()) for row, o in blind.rows("compactions"))
    assert got == sorted(tuple(r) for r in rows)
    assert blind.lost_and_found == []
    assert carved_by_key(blind, "messages") == truth.rows["messages"]
    est = estimate(path)
    assert est.rows["compactions"] == 6 and est.unattributed == 0
def test_without_rowid_trees_are_walked_as_index_trees(fts_store: Path, tmp_path: Path) -> None:
    """FTS5's WITHOUT ROWID shadows are index b-trees: walked cleanly (no
    page of theirs is bad), and damage to one is reported as that page only,
    with every canonical row still carved."""
    truth = read_truth(fts_store)
    assert carve(fts_store).stats.bad_pages == {}
    conn = apsw.Connection(str(fts_store))
    try:
        root = conn.execute("SELECT rootpage FROM sqlite_schema"
                            " WHERE name='messages_terms_idx'").fetchone()[0]
    finally:
        conn.close()
    data = fts_store.read_bytes()[(root - 1) * truth.page_size:root * truth.page_size]
    assert data[0] in (INDEX_INTERIOR, INDEX_LEAF)
    damaged = tmp_path / "damaged.db"
    shutil.copyfile(fts_store, damaged)
    zero_page(damaged, root, truth.page_size)
    result = carve(damaged)
    assert set(result.stats.bad_pages) == {root}
    assert result.lost_and_found == []
    for table, rows in truth.rows.items():
        assert carved_by_key(result, table) == rows, table


@pytest.fixture(scope="module")
def graph_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store with two LangGraph threads: checkpoints, channel values and
    pending writes, checkpointed into the file."""
    pytest.importorskip("langgraph")
    from langchain_core.messages import AIMessage
    from langgraph.graph import START, MessagesState, StateGraph

    from sessiondb.integrations.langgraph import HermesSaver
    path = tmp_path_factory.mktemp("graph") / "state.db"
    build_store(path, sessions=1, per_session=10)
    builder = StateGraph(MessagesState)
    builder.add_node("echo", lambda s: {"messages": [AIMessage(content="echo")]})
    builder.add_edge(START, "echo")
    with SessionDB(path, background_index=False) as db:
        graph = builder.compile(checkpointer=HermesSaver(db))
        for thread in ("graph-a", "graph-b"):
            for n in range(3):
                graph.invoke({"messages": [{"role": "user", "content": f"turn {n}"}]},
                             {"configurable": {"thread_id": thread}})
        db.checkpoint()
    return path


GRAPH_TABLES = ("graph_checkpoints", "graph_blobs", "graph_writes")


def _graph_truth(path: Path) -> dict[str, list[tuple]]:
    conn = apsw.Connection(str(path))
    try:
        return {t: conn.execute(f"SELECT rowid, * FROM {t} ORDER BY rowid").fetchall()
                for t in GRAPH_TABLES}
    finally:
        conn.close()


def test_graph_rows_are_carved_without_page_1(graph_store: Path, tmp_path: Path) -> None:
    """LangGraph's three tables have known layouts: with page 1 gone their
    records come back to their own tables, none lost and found."""
    truth = _graph_truth(graph_store)
    assert all(truth.values())
    blind_path = tmp_path / "blind.db"
    shutil.copyfile(graph_store, blind_path)
    zero_page(blind_path, 1, read_truth(graph_store).page_size)
    blind = carve(blind_path)
    assert blind.lost_and_found == []
    for table in GRAPH_TABLES:
        got = sorted((o.rowid, *row.values()) for row, o in blind.rows(table))
        assert got == truth[table], table


def test_graph_rows_are_recovered_with_every_schema_page_zeroed(graph_store: Path,
                                                                tmp_path: Path) -> None:
    """No CREATE TABLE left: recover still puts the checkpoints in their
    tables, and the saver reads them from the recovered store."""
    from hstate_recovery import recover
    from sessiondb.integrations.langgraph import HermesSaver
    from tests.helpers.damage import pages_of
    truth = _graph_truth(graph_store)
    src = tmp_path / "src.db"
    shutil.copyfile(graph_store, src)
    page_size = read_truth(graph_store).page_size
    for p in {1, *pages_of(src, "sqlite_schema")}:
        zero_page(src, p, page_size)
    rep = recover(src, tmp_path / "out.db", allow_partial=True, work_dir=tmp_path)
    assert rep.output and rep.schema_source == "reference"  # our schema, not the file's
    assert _graph_truth(Path(rep.output)) == truth
    with SessionDB(rep.output) as db:
        config = {"configurable": {"thread_id": "graph-b"}}
        got = HermesSaver(db).get_tuple(config)
        assert got is not None and len(got.checkpoint["channel_values"]["messages"]) == 6
