"""`sessions import --from hermes-agent|llm`: foreign files copied into a store of ours.

Ground truth is read from the source file with plain SQL (on a copy, after
the import ran against the original), then compared with our own JSONL
export of the imported store: sessions, lineage, messages in order, their
states and kinds. The source and its sidecars must stay byte-identical.
"""
from __future__ import annotations

import io
import json
import shutil
from pathlib import Path

import apsw
import pytest
from click.testing import CliRunner

from hstate_cli.main import cli
from sessiondb import SessionDB
from sessiondb.maintenance.export import export_sessions
from sessiondb.importers.hermes_agent_import import META_PREFIX, import_hermes_agent
from sessiondb.importers.importer import ImportFileError
from sessiondb.importers.llm_import import import_llm_logs
from tests.helpers import foreign_dbs as f
from tests.sessiondb.sqlitefile.test_foreign_files import snapshot


def _exported(db: SessionDB) -> tuple[dict[str, dict], dict[str, list[dict]]]:
    out = io.StringIO()
    export_sessions(db.core, None, "jsonl", out)
    sessions, messages = {}, {}
    for line in out.getvalue().splitlines():
        rec = json.loads(line)
        if rec["type"] == "session":
            sessions[rec["session"]["id"]] = rec["session"]
        elif rec["type"] == "message":
            messages.setdefault(rec["session_id"], []).append(rec)
    return sessions, messages


def _query(path: Path, sql: str, args: tuple = ()) -> list[dict]:
    work = path.parent / "truth"
    work.mkdir(exist_ok=True)
    for suffix in ("", "-wal"):
        if Path(f"{path}{suffix}").exists():
            shutil.copyfile(f"{path}{suffix}", work / f"t.db{suffix}")
    conn = apsw.Connection(str(work / "t.db"))
    try:
        cur = conn.execute(sql, args)
        names = [d[0] for d in cur.getdescription()]
        return [dict(zip(names, row)) for row in cur]
    finally:
        conn.close()
        shutil.rmtree(work)


@pytest.fixture
def hermes_file(tmp_path: Path) -> Path:
    """A Hermes Agent v31 file with compaction, a rewind, a summary and a non-chat row."""
    src = tmp_path / "agent" / "state.db"
    src.parent.mkdir()
    f.build_hermes_agent(src, sessions=8, messages=8)
    conn = apsw.Connection(str(src))
    ids = [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY started_at")]
    with conn:
        first = [r[0] for r in conn.execute(
            "SELECT id FROM messages WHERE session_id = ? ORDER BY id LIMIT 3", (ids[1],))]
        conn.execute(f"UPDATE messages SET active = 0, compacted = 1 WHERE id IN "
                     f"({','.join(map(str, first))})")
        conn.execute("UPDATE messages SET active = 0, compacted = 0 WHERE id = "
                     "(SELECT max(id) FROM messages WHERE session_id = ?)", (ids[2],))
        conn.execute("UPDATE messages SET _compressed_summary = 1 WHERE id = "
                     "(SELECT min(id) FROM messages WHERE session_id = ?)", (ids[7],))
        conn.execute("INSERT INTO messages (session_id, role, content, timestamp) "
                     "VALUES (?, 'session_meta', '{}', 1.0)", (ids[3],))
    conn.close()
    return src


def _state(row: dict) -> str:
    if row["active"]:
        return "active"
    return "archived" if row["compacted"] else "rewound"


def test_hermes_agent_round_trips_to_our_export(tmp_path: Path, hermes_file: Path) -> None:
    before = snapshot(hermes_file.parent)
    with SessionDB(tmp_path / "ours" / "state.db") as db:
        result = import_hermes_agent(db, hermes_file)
        sessions, messages = _exported(db)
        usage_key = META_PREFIX + next(iter(sessions))
        meta = json.loads(db.meta(usage_key))
    assert snapshot(hermes_file.parent) == before
    truth = _query(hermes_file, "SELECT * FROM sessions")
    assert (result.sessions_created, len(sessions)) == (8, 8)
    for s in truth:
        ours = sessions[s["id"]]
        assert (ours["source"], ours["model"], ours["title"], ours["parent_session_id"],
                ours["started_at"], ours["ended_at"], ours["end_reason"]) == \
            (s["source"], s["model"], s["title"], s["parent_session_id"], s["started_at"],
             s["ended_at"], s["end_reason"])
        assert (ours["input_tokens"], ours["output_tokens"], ours["cache_read_tokens"]) == \
            (s["input_tokens"], s["output_tokens"], s["cache_read_tokens"] or 0)
        rows = _query(hermes_file, "SELECT * FROM messages WHERE session_id = ? AND role <> "
                      "'session_meta' ORDER BY id", (s["id"],))
        got = messages[s["id"]]
        assert [m["uid"] for m in got] == [f"hermes-agent:{r['id']}" for r in rows]
        for r, m in zip(rows, got):
            msg = m["message"]
            assert (msg["role"], msg["content"], m["timestamp"], m["state"]) == \
                (r["role"], r["content"], r["timestamp"], _state(r))
            assert m["kind"] == ("rolling_summary" if r["_compressed_summary"] else "message")
            assert msg.get("tool_call_id") == r["tool_call_id"]
            assert msg.get("tool_calls") == (json.loads(r["tool_calls"]) if r["tool_calls"]
                                             else None)
            assert msg.get("reasoning") == r["reasoning"]
            assert msg.get("name") == r["tool_name"]
    assert {m["state"] for ms in messages.values() for m in ms} == \
        {"active", "archived", "rewound"}
    assert result.messages_added == sum(len(v) for v in messages.values())
    assert {"table": "messages", "rows": 1,
            "why": "role 'session_meta' is not a chat role"} in result.not_carried
    assert result.tables["session_model_usage"] == 8
    assert meta["model_usage"] and meta["model_usage"][0]["model"]


def test_hermes_agent_import_is_idempotent_and_dry_run_writes_nothing(
        tmp_path: Path, hermes_file: Path) -> None:
    home = tmp_path / "ours"
    with SessionDB(home / "state.db") as db:
        plan = import_hermes_agent(db, hermes_file, dry_run=True)
        assert plan.dry_run and db.list_sessions() == []
        done = import_hermes_agent(db, hermes_file)
        assert (plan.messages_added, plan.sessions_created) == \
            (done.messages_added, done.sessions_created)
        again = import_hermes_agent(db, hermes_file)
        assert (again.sessions_created, again.messages_added) == (0, 0)
        assert again.messages_skipped == done.messages_added


def test_upgraded_hermes_agent_file_imports(tmp_path: Path) -> None:
    src = tmp_path / "up.db"
    truth = f.build_hermes_agent(src, sessions=6, messages=5, upgraded=True, wal_tail=2)
    with SessionDB(tmp_path / "ours" / "state.db") as db:
        result = import_hermes_agent(db, src)
    assert result.sessions_created == truth.counts["sessions"]
    assert result.messages_added == truth.counts["messages"]


def test_cli_import_from_hermes_agent(tmp_path: Path, hermes_file: Path) -> None:
    home = tmp_path / "ours"
    before = snapshot(hermes_file.parent)
    args = ["--home", str(home), "sessions", "import", "--from", "hermes-agent",
            str(hermes_file), "--json"]
    res = CliRunner().invoke(cli, args)
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert (doc["source_format"], doc["sessions_created"]) == ("hermes-agent", 8)
    assert any(x["table"] == "gateway_heartbeats" for x in doc["not_carried"])
    assert snapshot(hermes_file.parent) == before
    wrong = CliRunner().invoke(cli, ["--home", str(home), "sessions", "import", "--from",
                                     "hermes-agent", str(home / "state.db")])
    assert wrong.exit_code == 1
    assert wrong.output.strip() == (f"Error: {home / 'state.db'} is a hermes-state store, "
                                    "not a Hermes Agent state.db")


def test_llm_threads_layout_imports(tmp_path: Path) -> None:
    src = tmp_path / "logs.db"
    f.build_llm(src, conversations=4, responses=3, wal_tail=0)
    before = snapshot(tmp_path)
    with SessionDB(tmp_path / "ours" / "state.db") as db:
        result = import_llm_logs(db, src)
        sessions, messages = _exported(db)
        again = import_llm_logs(db, src)
    threads = _query(src, "SELECT * FROM threads ORDER BY id")
    assert sorted(sessions) == sorted(f"llm-{t['id']}" for t in threads)
    for t in threads:
        parts = _query(src, "SELECT p.text, m.role FROM turns t JOIN messages m ON m.hash IN "
                       "(t.tip_message_hash) JOIN parts p ON p.message_hash = m.hash "
                       "WHERE t.thread_id = ? ORDER BY t.datetime_utc", (t["id"],))
        got = [m["message"] for m in messages[f"llm-{t['id']}"]]
        assert [g["content"] for g in got if g["role"] == "assistant"] == \
            [p["text"] for p in parts]
        assert [g["role"] for g in got] == ["user", "assistant"] * 3
        assert sessions[f"llm-{t['id']}"]["title"] == t["name"]
    assert (again.sessions_created, again.messages_added) == (0, 0)
    assert result.messages_added == 4 * 3 * 2
    assert {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("ours")} == before


def test_llm_responses_layout_still_imports(tmp_path: Path) -> None:
    src = tmp_path / "logs.db"
    f.build_llm(src, conversations=3, responses=2, layout="responses")
    with SessionDB(tmp_path / "ours" / "state.db") as db:
        result = import_llm_logs(db, src)
    assert (result.sessions_created, result.messages_added) == (3, 3 * 2 * 2)


def test_llm_file_without_conversations_exits_1(tmp_path: Path) -> None:
    src = tmp_path / "logs.db"
    f.build_llm(src, conversations=0)
    home = tmp_path / "ours"
    res = CliRunner().invoke(cli, ["--home", str(home), "sessions", "import", "--from", "llm",
                                   str(src)])
    assert res.exit_code == 1
    assert res.output == (f"Error: {src} holds no conversations (llm logged nothing yet); "
                          "nothing was imported\n")
    with SessionDB(home / "state.db") as db, pytest.raises(ImportFileError):
        import_llm_logs(db, src, dry_run=True)


def test_a_source_that_keeps_changing_is_refused_and_leaves_no_copy(tmp_path: Path) -> None:
    import tempfile

    from sessiondb.importers.foreign_copy import CopyUnstable, foreign_copy
    src = tmp_path / "logs.db"
    f.build_llm(src, conversations=1, responses=1, layout="responses")
    writer = apsw.Connection(str(src))
    n = iter(range(100))

    def another_program_writes() -> None:
        writer.execute("INSERT INTO conversations VALUES (?, 'x', 'echo')", (f"c{next(n)}",))

    leftovers = set(Path(tempfile.gettempdir()).glob("hermes-import-*"))
    with pytest.raises(CopyUnstable, match="kept changing while it was copied"):
        with foreign_copy(src, after_copy=another_program_writes):
            pass
    writer.close()
    assert set(Path(tempfile.gettempdir()).glob("hermes-import-*")) == leftovers


def test_hermes_agent_model_usage_becomes_our_usage_ledger_once(tmp_path: Path,
                                                                hermes_file: Path) -> None:
    truth = _query(hermes_file, "SELECT * FROM session_model_usage ORDER BY session_id")
    with SessionDB(tmp_path / "ours" / "state.db") as db:
        import_hermes_agent(db, hermes_file)
        first = {t["session_id"]: db.session_usage(t["session_id"]) for t in truth}
        import_hermes_agent(db, hermes_file)
        again = {t["session_id"]: db.session_usage(t["session_id"]) for t in truth}
    assert first == again  # re-importing adds no usage
    for t in truth:
        (row,) = first[t["session_id"]]
        assert (row.task, row.model, row.provider) == \
            ("turn" if not t["task"] else t["task"], t["model"], t["billing_provider"])
        assert (row.input_tokens, row.output_tokens, row.api_calls) == \
            (t["input_tokens"], t["output_tokens"], t["api_call_count"])
