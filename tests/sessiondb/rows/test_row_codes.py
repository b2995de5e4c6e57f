"""Coded row fields (m012, docs/row-format.md): role as a one-character
code, kind 'message' as '', meta '{}' as ''. The API gives back exactly what
it did before; an m011 store is rewritten by m012 in one transaction (a kill
leaves the old form, the next open finishes); recovery gives coded rows."""
from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import apsw
import pytest

import hstate_recovery
from hstate_recovery.schema.layouts import MESSAGES
from sessiondb import SessionDB
from sessiondb.maintenance.export import export_sessions, export_to_path
from sessiondb.importers.importer import import_export_file
from sessiondb.rows.codec import ROLE_CODES, kind_key, kind_text, role_key, role_text, stored_meta
from sessiondb.index.search_index import CURRENT_TOOL_RULE, LEGACY_TOOL_RULE, TOOL_TEXT_CAP, text_expr
from tests.helpers import damage

LONG_TOOL = "tool output " * (TOOL_TEXT_CAP // 6)  # longer than a tool message's indexed head
MESSAGES_IN = [
    {"role": "system", "content": "be brief"},
    {"role": "developer", "content": "dev note"},
    {"role": "user", "content": "find the zebra"},
    {"role": "assistant", "content": "a zebra reply", "finish_reason": "stop"},
    {"role": "assistant", "content": None, "tool_calls": [{"id": "c1", "type": "function"}]},
    {"role": "tool", "content": LONG_TOOL + " tailword", "tool_call_id": "c1"},
    {"role": "user", "content": [{"type": "text", "text": "blocks zebra"}], "x": {"k": 1}},
    {"role": "assistant", "content": "", "finish_reason": "length", "extra": "y"},
]


def public(messages: list[dict]) -> str:
    """The dicts as text, key order included, markers (row id, uid) kept."""
    return json.dumps([{k: (list(v) if k == "_db_persisted" else v) for k, v in m.items()}
                       for m in messages], ensure_ascii=False)


def build(path: Path) -> None:
    with SessionDB(path, background_index=False) as db:
        db.create_session("s", source="test", title="t")
        db.append_messages("s", [dict(m) for m in MESSAGES_IN])
        live = db.get_messages("s")
        db.archive_and_compact("s", [m["_db_persisted"].id for m in live[2:4]],
                               {"role": "assistant", "content": "summary of zebra"})
        db.catch_up_index()


def snapshot(path: Path) -> dict:
    """Everything a reader sees: messages with archived ones, pages, an
    export, search hits (role filter included)."""
    with SessionDB(path, background_index=False) as db:
        out = {"live": public(db.get_messages("s")),
               "all": public(db.get_messages("s", include_archived=True)),
               "page": [(m.kind, m.state, json.dumps(m.message)) for m in
                        db.message_page("s", limit=50, include_archived=True)]}
        buf = io.StringIO()
        export_sessions(db.core, None, "jsonl", buf)
        out["export"] = [line for line in buf.getvalue().splitlines()
                         if '"exported_at"' not in line]
        for q, role in (("zebra", None), ("zebra", "assistant"), ("zebra", "user"),
                        ("tailword", None), ("output", "tool"), ("zebra", "u"),
                        ("zebra", "bogus"), ("brief", "system"), ("dev", "developer")):
            hits = db.search(q, role=role, include_archived=True)
            out[f"{q}/{role}"] = sorted((h.message_id, h.role, h.state) for h in hits)
    return out


def as_m011(path: Path) -> None:
    """Put a store back in the form m011 left it: role names, kind
    'message', meta '{}', the text view and change-log triggers with the
    old tool rule, and no m012 in the ledger."""
    conn = apsw.Connection(str(path))
    names = " ".join(f"WHEN '{c}' THEN '{r}'" for r, c in ROLE_CODES.items())
    old_rule = text_expr("m").replace("IN ('t', 'tool')", "= 'tool'")
    assert old_rule != text_expr("m")
    with conn:
        triggers = conn.execute("SELECT name, sql FROM sqlite_master WHERE type = 'trigger'"
                                " AND tbl_name = 'messages'").fetchall()
        for name, _ in triggers:
            conn.execute(f"DROP TRIGGER {name}")
        conn.execute(f"UPDATE messages SET role = CASE role {names} ELSE role END,"
                     " kind = CASE kind WHEN '' THEN 'message' ELSE kind END,"
                     " meta = CASE meta WHEN '' THEN '{}' ELSE meta END")
        (version,) = conn.execute("PRAGMA schema_version").fetchone()
        conn.execute("PRAGMA writable_schema=ON")  # in place: the view keeps its schema slot
        conn.execute("UPDATE sqlite_master SET sql = ? WHERE name = 'messages_search_text'",
                     (f"CREATE VIEW messages_search_text AS SELECT m.id AS id, {old_rule}"
                      " AS text FROM messages AS m",))
        conn.execute(f"PRAGMA schema_version={version + 1}")
        conn.execute("PRAGMA writable_schema=OFF")
        for _, sql in triggers:
            conn.execute(sql.replace("IN ('t', 'tool')", "= 'tool'"))
        conn.execute("DELETE FROM migrations WHERE name = 'm012_coded_rows'")
    conn.close()


def stored_forms(path: Path) -> set[tuple]:
    return set(damage.sql_read(path, "SELECT role, kind, meta = '' FROM messages"))


def test_codes_are_one_to_one() -> None:
    for role in ROLE_CODES:
        assert role_text(role_key(role)) == role and len(role_key(role)) == 1
    assert len(set(ROLE_CODES.values())) == len(ROLE_CODES)
    for kind in ("message", "rolling_summary", "x"):
        assert kind_text(kind_key(kind)) == kind
    assert kind_key("message") == "" and stored_meta("{}", None) == ""
    assert stored_meta('{"finish_reason":"stop"}', "stop") == ""


def test_new_rows_store_codes_and_read_back_exactly(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build(path)
    rows = damage.sql_read(path, "SELECT role, kind, meta FROM messages ORDER BY id")
    assert [r[0] for r in rows] == ["s", "d", "u", "a", "a", "t", "u", "a", "a"]
    assert [r[1] for r in rows] == [""] * 8 + ["rolling_summary"]
    assert rows[0][2] == "" and rows[3][2] == "" and rows[6][2] == '{"x":{"k":1}}'
    with SessionDB(path) as db:
        got = sorted(db.get_messages("s", include_archived=True),
                     key=lambda m: m["_db_persisted"].id)  # (the summary sits in the order)
    for given, m in zip(MESSAGES_IN, got):
        assert json.dumps({k: v for k, v in m.items() if not k.startswith("_db_")}) == \
            json.dumps(given)
    snap = snapshot(path)
    assert [h[1] for h in snap["zebra/assistant"]] == ["assistant"] * 2  # reply + summary
    assert {h[1] for h in snap["zebra/None"]} == {"user", "assistant"}
    assert snap["zebra/u"] == [] and snap["zebra/bogus"] == []  # a code is not a role name
    assert [h[1] for h in snap["output/tool"]] == ["tool"]
    assert snap["tailword/None"] == []  # past the tool head: the cap still applies
    assert [h[1] for h in snap["brief/system"]] == ["system"]
    for row in damage.sql_read(path, "SELECT * FROM messages"):
        assert MESSAGES.self_check([None, *row[1:]]) is True  # the carver proves coded rows


def test_export_import_round_trip(tmp_path: Path) -> None:
    src, dst = tmp_path / "a.db", tmp_path / "b.db"
    build(src)
    dump = tmp_path / "dump.jsonl"
    with SessionDB(src) as db:
        export_to_path(db.core, None, "jsonl", dump)
    with SessionDB(dst) as db:
        import_export_file(db, dump)
    a, b = snapshot(src), snapshot(dst)
    assert b["export"] == a["export"]  # (an export sorts keys: what it compares is exact)
    for q in ("zebra/assistant", "zebra/None", "output/tool"):  # (ids differ: import order)
        assert sorted(h[1:] for h in b[q]) == sorted(h[1:] for h in a[q])
    assert stored_forms(dst) == stored_forms(src)


def test_m011_store_is_rewritten_by_m012_and_reads_back_identically(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build(path)
    before = snapshot(path)
    coded = stored_forms(path)
    as_m011(path)
    assert ("user", "message", 0) in stored_forms(path)
    watermark = damage.sql_read(path, "SELECT value FROM state_meta WHERE key = 'fts_watermark'")
    assert snapshot(path) == before  # opening ran m012 ...
    assert stored_forms(path) == coded  # ... and every row is coded
    assert damage.sql_read(path, "SELECT count(*) FROM search_changes") == [(0,)]  # nothing to reindex
    assert damage.sql_read(path, "SELECT value FROM state_meta WHERE key = 'fts_watermark'") == watermark
    assert "IN ('t', 'tool')" in damage.sql_read(path, "SELECT sql FROM sqlite_master WHERE name ="
                                           " 'messages_search_text'")[0][0]
    order = [n for (n,) in damage.sql_read(path, "SELECT name FROM sqlite_master ORDER BY rowid")]
    # the view still precedes the indexes that read it (quick_check, update_text_view)
    assert order.index("messages_search_text") < order.index("messages_fts")
    conn = apsw.Connection(str(path))
    for table in ("messages_fts", "messages_terms"):  # the index matches the view's text
        conn.execute(f"INSERT INTO {table}({table}) VALUES ('integrity-check')")
    conn.close()


_KILLED_IN_M012 = """
import os, signal, sys
from sessiondb import SessionDB
from sessiondb.rows import messages
real = messages.compact_legacy_rows
def dying(conn, **kw):
    real(conn, **kw)  # the rows are rewritten inside the migration's transaction ...
    os.kill(os.getpid(), signal.SIGKILL)  # ... and the process dies before the commit
messages.compact_legacy_rows = dying
SessionDB(sys.argv[1])
"""


def test_kill_during_m012_keeps_the_old_form_and_the_next_open_finishes(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    build(path)
    before = snapshot(path)
    as_m011(path)
    old = damage.sql_read(path, "SELECT * FROM messages ORDER BY id")
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(_KILLED_IN_M012), str(path)],
                          cwd=Path(__file__).resolve().parents[3], capture_output=True)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    assert damage.sql_read(path, "SELECT * FROM messages ORDER BY id") == old  # rolled back whole
    assert not damage.sql_read(path, "SELECT 1 FROM migrations WHERE name = 'm012_coded_rows'")
    assert snapshot(path) == before
    assert damage.sql_read(path, "SELECT count(*) FROM messages WHERE role IN ('user', 'assistant')"
                     " OR kind = 'message'") == [(0,)]


@pytest.mark.parametrize("form", ["m011", "m012"])
@pytest.mark.parametrize("lane", ["rows", "carve"])
def test_recovery_gives_coded_rows(tmp_path: Path, form: str, lane: str) -> None:
    src = tmp_path / "src"
    src.mkdir(mode=0o700)
    path = src / "state.db"
    build(path)
    before = snapshot(path)
    coded = stored_forms(path)
    if form == "m011":
        as_m011(path)
    report = hstate_recovery.recover(path, tmp_path / "new.db", lanes=[lane], allow_partial=True)
    assert report.verification["ok"] is True
    out = tmp_path / "new.db"
    assert stored_forms(out) == coded
    got = snapshot(out)
    assert got["all"] == before["all"] and got["zebra/assistant"] == before["zebra/assistant"]


def test_carver_reads_coded_rows_under_a_destroyed_interior_page(tmp_path: Path) -> None:
    path = tmp_path / "state.db"
    truth = damage.build_store(path, per_session=100)
    with SessionDB(path) as db:
        before = {s: public(db.get_messages(s)) for s in truth.sessions}
    tree = damage.TableTree(path, "messages")
    damage.smash_page(path, tree.middle_interior())
    report = hstate_recovery.recover(path, tmp_path / "new.db")
    assert report.tables["messages"].lanes["carve"] > 0  # rows only the carver could read
    assert report.outcome == "recovered"
    assert set(damage.sql_read(tmp_path / "new.db", "SELECT DISTINCT role FROM messages")) == {("u",), ("a",)}
    with SessionDB(tmp_path / "new.db") as db:
        assert {s: public(db.get_messages(s)) for s in truth.sessions} == before
    assert not os.path.exists(tmp_path / "new.db.partial")


def test_an_m011_files_index_is_taken_over_by_its_recovery(tmp_path: Path) -> None:
    """The m011 view names the tool role only; for rows of either form it
    gives today's text, so recovery copies that index instead of rebuilding."""
    assert CURRENT_TOOL_RULE in text_expr("m") and LEGACY_TOOL_RULE not in text_expr("m")
    src = tmp_path / "src"
    src.mkdir(mode=0o700)
    path = src / "state.db"
    build(path)
    before, coded = snapshot(path), stored_forms(path)
    as_m011(path)
    report = hstate_recovery.recover(path, tmp_path / "new.db").to_dict()
    assert report["search_index"] == {"method": "copied", "reason": None}
    got = snapshot(tmp_path / "new.db")
    assert {k: v for k, v in got.items() if "/" in k} == {k: v for k, v in before.items()
                                                         if "/" in k}
    assert stored_forms(tmp_path / "new.db") == coded

