"""A NUL character in a message: the words after it are searchable (word and
substring plans, indexed rows, the not-yet-indexed tail, the fallback scan),
the message round-trips exactly, and m014 re-indexes a store whose index
holds such rows cut at the NUL (one transaction; a kill leaves the old form
and the next open finishes; FTS5's integrity-check, doctor and repair agree
afterwards)."""
from __future__ import annotations

import json
import os
from pathlib import Path

import apsw
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB
from sessiondb.index import search_index
from tests.helpers import legacy_index
from tests.helpers.damage import sql_read
from tests.helpers.stores import mark_stale

NUL_MESSAGES = [
    {"role": "user", "content": "alpha\x00bravo charlie"},
    {"role": "assistant", "content": "\x00\x00leading zulu"},
    {"role": "user", "content": [{"type": "text", "text": "delta\x00echo foxtrot"}]},
    {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t",
                                  "content": "golf\x00hotel"}]},
    {"role": "tool", "tool_call_id": "t", "content": "india\x00juliet\x00kilo"},
    {"role": "user", "content": "literal \\u0000 lima\x00mike"},
]
PLAIN = [{"role": "user", "content": "plain november text"}]
# word -> the message (index in NUL_MESSAGES) that holds it only after a NUL
AFTER_NUL = {"bravo": 0, "charlie": 0, "zulu": 1, "echo": 2, "foxtrot": 2, "hotel": 3,
             "juliet": 4, "kilo": 4, "mike": 5}
SUBSTRINGS = {"ravo": 0, "oxtro": 2, "ulie": 4}


def build(path: Path, *, index: bool = True) -> None:
    with SessionDB(path, background_index=False) as db:
        db.create_session("s", source="test", title="t")
        db.append_messages("s", [dict(m) for m in NUL_MESSAGES + PLAIN])
        if index:
            db.catch_up_index()


def found(path: Path) -> dict[str, list[int]]:
    """Which message (by its place in NUL_MESSAGES) each after-NUL term finds."""
    with SessionDB(path, background_index=False) as db:
        ids = [m["_db_persisted"].id for m in db.get_messages("s")]
        return {q: sorted(ids.index(h.message_id) for h in db.search(q))
                for q in [*AFTER_NUL, *SUBSTRINGS, "u0000"]}


EXPECTED = {**{q: [i] for q, i in {**AFTER_NUL, **SUBSTRINGS}.items()}, "u0000": [5]}


def fts_integrity(path: Path) -> None:
    """FTS5's integrity-check of both indexes (rank 0: FTS5 cannot read a
    content view that uses json_each), and the stronger check that each
    index holds exactly what it should: its vocabulary (term, document,
    count) equals that of an index built afresh from the view's text of
    the rows it covers, and the logged old text of rows the change log
    holds (what the indexer will delete them by), and so do its totals."""
    conn = apsw.Connection(str(path))
    try:
        if search_index.TERMS_TABLE in {n for (n,) in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table'")}:
            assert search_index.terms_missing(conn) == 0  # every term of the word index
        for table in legacy_index.text_tables(conn):
            conn.execute(f"INSERT INTO {table}({table}, rank) VALUES ('integrity-check', 0)")
            ddl = search_index.fts_ddl(table).replace(f"TABLE {table}", "TABLE temp.fresh")
            conn.execute(ddl)
            conn.execute(f"INSERT INTO temp.fresh(rowid, text) SELECT id, text FROM"
                         f" {search_index.TEXT_VIEW} AS v WHERE id <= (SELECT CAST(value AS"
                         " INTEGER) FROM state_meta WHERE key = 'fts_watermark') AND NOT EXISTS"
                         " (SELECT 1 FROM search_changes AS c WHERE c.message_id = v.id)"
                         " UNION ALL SELECT message_id, old_text FROM search_changes"
                         " WHERE indexed = 1")
            conn.execute(f"CREATE VIRTUAL TABLE temp.v_main USING fts5vocab(main, {table}, row)")
            conn.execute("CREATE VIRTUAL TABLE temp.v_fresh USING fts5vocab(temp, fresh, row)")
            held = conn.execute("SELECT term, doc, cnt FROM temp.v_main ORDER BY 1").fetchall()
            want = conn.execute("SELECT term, doc, cnt FROM temp.v_fresh ORDER BY 1").fetchall()
            assert held == want, (table, set(held) ^ set(want))
            # the averages record: documents and tokens (a delete by the wrong text
            # whose tokens the right one's include leaves the vocabulary right)
            totals = [conn.execute(f"SELECT block FROM {name}_data WHERE id = 1").fetchone()
                      for name in (f"main.{table}", "temp.fresh")]
            assert totals[0] == totals[1], (table, totals)
            conn.execute("DROP TABLE temp.v_main; DROP TABLE temp.v_fresh;"
                         " DROP TABLE temp.fresh")
    finally:
        conn.close()


def test_words_after_a_nul_are_found_and_the_message_round_trips(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build(path, index=False)
    assert found(path) == EXPECTED  # the not-yet-indexed tail
    with SessionDB(path, background_index=False) as db:
        db.catch_up_index()
        stored = [m["content"] for m in db.get_messages("s")][:len(NUL_MESSAGES)]
    assert stored == [m["content"] for m in NUL_MESSAGES]
    assert found(path) == EXPECTED  # the indexes
    fts_integrity(path)
    mark_stale(path)
    assert found(path) == EXPECTED  # the fallback scan


def test_editing_and_deleting_nul_rows_keeps_the_index_true(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build(path)
    conn = apsw.Connection(str(path))  # another tool's writes: the triggers log them
    with conn:
        conn.execute("UPDATE messages SET content = 'oscar' || char(0) || 'papa' WHERE id = 1")
        conn.execute("DELETE FROM messages WHERE id = 5")
    conn.close()
    with SessionDB(path, background_index=False) as db:
        db.catch_up_index()
        assert [h.message_id for h in db.search("papa")] == [1]
        assert db.search("bravo") == [] and db.search("juliet") == []
    fts_integrity(path)


# -- m014 on a store the previous schema wrote --------------------------------

def as_m013(path: Path) -> None:
    """Put a store back the way m013 left it: the trigram index instead of
    the term table, the text view and change-log triggers cut text at a
    NUL, both indexes hold that text for the NUL rows, and no m014 (nor
    m015) in the ledger."""
    legacy_index.as_m014(path)
    old, new = (search_index.text_expr("m", nul_rule=False), search_index.text_expr("m"))
    conn = apsw.Connection(str(path))
    with conn:
        rows = conn.execute(f"SELECT m.id, {old}, {new} FROM messages AS m"
                            f" WHERE {old} IS NOT {new}").fetchall()
        assert len(rows) == len(NUL_MESSAGES)
        for mid, before, after in rows:
            for t in legacy_index.text_tables(conn):
                conn.execute(f"INSERT INTO {t}({t}, rowid, text) VALUES ('delete', ?, ?)",
                             (mid, after))
                conn.execute(f"INSERT INTO {t}(rowid, text) VALUES (?, ?)", (mid, before))
        triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
                                " AND tbl_name = 'messages'").fetchall()
        for name, _ in triggers:
            conn.execute(f"DROP TRIGGER {name}")
        for row in ("old", "new"):
            triggers = [(n, sql.replace(search_index.text_expr(row),
                                        search_index.text_expr(row, nul_rule=False)))
                        for n, sql in triggers]
        (version,) = conn.execute("PRAGMA schema_version").fetchone()
        conn.execute("PRAGMA writable_schema=ON")  # in place, as update_text_view does
        conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = ?",
                     (f"CREATE VIEW {search_index.TEXT_VIEW} AS SELECT m.id AS id, {old}"
                      " AS text FROM messages AS m", search_index.TEXT_VIEW))
        conn.execute(f"PRAGMA schema_version={version + 1}")
        conn.execute("PRAGMA writable_schema=OFF")
        for _, sql in triggers:
            conn.execute(sql)
        conn.execute("DELETE FROM migrations WHERE name = 'm014_nul_text'")
    conn.close()
    assert "char(0)" not in " ".join(r[0] for r in sql_read(path, "SELECT sql FROM sqlite_master"
                                                          " WHERE sql IS NOT NULL"))


def previous_schema_store(tmp_path: Path) -> Path:
    """A home whose store m013 wrote, NUL rows indexed cut at the NUL, and
    one of them edited by another tool after (a change-log entry whose old
    text is the cut one)."""
    home = tmp_path / "home"
    home.mkdir(mode=0o700)
    path = home / "state.db"
    build(path)
    as_m013(path)
    fts_integrity(path)  # consistent as the previous schema left it
    conn = apsw.Connection(str(path))
    with conn:
        conn.execute("UPDATE messages SET content = 'quebec' || char(0) || 'romeo' WHERE id = 2")
    conn.close()
    assert sql_read(path, "SELECT count(*) FROM search_changes") == [(1,)]
    return home


def test_m014_reindexes_nul_rows_of_a_previous_schema_store(tmp_path: Path) -> None:
    home = previous_schema_store(tmp_path)
    path = home / "state.db"
    expected = {**EXPECTED, "zulu": [], "romeo": [1]}
    with SessionDB(path, background_index=False) as db:
        assert "m014_nul_text" in [r[0] for r in sql_read(path, "SELECT name FROM migrations")]
        assert db.search("bravo") != []
        db.catch_up_index()  # the logged row: deleted by its logged (cut) text
    with SessionDB(path, background_index=False) as db:
        ids = [m["_db_persisted"].id for m in db.get_messages("s")]
        got = {q: sorted(ids.index(h.message_id) for h in db.search(q)) for q in expected}
    assert got == expected
    fts_integrity(path)
    runner = CliRunner()
    check = runner.invoke(cli, ["--home", str(home), "sessions", "repair", "--check-only",
                                "--json"])
    assert check.exit_code == 0 and json.loads(check.output)["status"] == "healthy", check.output
    doc = json.loads(runner.invoke(cli, ["--home", str(home), "doctor", "--full",
                                         "--json"]).output)
    index = [f for f in doc["findings"] if f["id"] in ("search_index", "fts_stale")]
    assert index and all(f["severity"] == "ok" for f in index), index


_KILLED_IN_M014 = """
import os, signal, sys
from sessiondb.index import search_index
real = search_index.reindex_nul_text
def dying(conn):
    real(conn)  # the view, the triggers and the rows are rewritten in the transaction ...
    os.kill(os.getpid(), signal.SIGKILL)  # ... and the process dies before the commit
search_index.reindex_nul_text = dying
from sessiondb import SessionDB
SessionDB(sys.argv[1], background_index=False)
"""


def test_a_kill_during_m014_leaves_the_old_form_and_the_next_open_finishes(
        tmp_path: Path) -> None:
    path = previous_schema_store(tmp_path) / "state.db"
    legacy_index.killed_inside(path, _KILLED_IN_M014, "m014_nul_text")
    fts_integrity(path)  # the old index, true to the old view
    assert sql_read(path, "SELECT count(*) FROM search_changes") == [(1,)]
    with SessionDB(path, background_index=False) as db:
        db.catch_up_index()
        assert db.search("kilo") != [] and db.search("romeo") != []
    fts_integrity(path)
    assert os.path.exists(path)
