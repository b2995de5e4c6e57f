"""Import of llm's logs.db (conversations + responses), built here with sqlite-utils."""
from __future__ import annotations

import hashlib
from pathlib import Path

import pytest
import sqlite_utils

from sessiondb.maintenance.export import session_messages
from sessiondb.importers.importer import ImportFileError
from sessiondb.importers.llm_import import import_llm_logs, parse_time


def make_logs(path: Path, *, with_tokens: bool = True) -> sqlite_utils.Database:
    """A logs.db with llm's table layout (columns as llm's migrations create them)."""
    db = sqlite_utils.Database(path)
    db["conversations"].create({"id": str, "name": str, "model": str}, pk="id")
    columns = {"id": str, "model": str, "prompt": str, "system": str, "prompt_json": str,
               "options_json": str, "response": str, "response_json": str,
               "conversation_id": str, "duration_ms": int, "datetime_utc": str}
    if with_tokens:
        columns.update({"input_tokens": int, "output_tokens": int})
    db["responses"].create(columns, pk="id", foreign_keys=[("conversation_id",
                                                            "conversations", "id")])
    db["conversations"].insert_all([
        {"id": "01j0aaaaaaaaaaaaaaaaaaaaaa", "name": "Cheesecake names", "model": "gpt-4o-mini"},
        {"id": "01j0bbbbbbbbbbbbbbbbbbbbbb", "name": "Pelicans", "model": "claude-3.5"},
    ])
    rows = [
        ("r1", "01j0aaaaaaaaaaaaaaaaaaaaaa", "Ten names for cheesecakes", "Be funny",
         "1. Cheesy McCakeface", "2024-05-01T10:00:00.123456"),
        ("r2", "01j0aaaaaaaaaaaaaaaaaaaaaa", "Five more", "Be funny", "6. Quarky",
         "2024-05-01T10:01:00+00:00"),
        ("r3", "01j0bbbbbbbbbbbbbbbbbbbbbb", "Describe a pelican", None, "A big bill.",
         "2024-05-02 08:00:00"),
        ("r4", None, "One-off question", "Short answers", "Yes.", "2024-05-03T00:00:00"),
    ]
    for rid, cid, prompt, system, response, when in rows:
        row = {"id": rid, "model": "gpt-4o-mini", "prompt": prompt, "system": system,
               "response": response, "conversation_id": cid, "duration_ms": 1000,
               "datetime_utc": when}
        if with_tokens:
            row.update({"input_tokens": 10, "output_tokens": 5})
        db["responses"].insert(row)
    return db


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_llm_logs_become_sessions_and_messages(open_store, tmp_path):
    logs = tmp_path / "logs.db"
    make_logs(logs).close()
    before = digest(logs)
    db = open_store()
    result = import_llm_logs(db, logs)
    assert (result.sessions_created, result.messages_added) == (3, 10)
    assert digest(logs) == before  # read-only: llm's file is untouched
    cheese = db.get_session("llm-01j0aaaaaaaaaaaaaaaaaaaaaa")
    assert (cheese.source, cheese.title, cheese.model) == ("llm", "Cheesecake names",
                                                          "gpt-4o-mini")
    assert (cheese.input_tokens, cheese.output_tokens, cheese.message_count) == (20, 10, 5)
    assert cheese.started_at == parse_time("2024-05-01T10:00:00.123456")
    msgs = [m.message for m in session_messages(db.core, cheese.id)]
    # The repeated system prompt is stored once.
    assert [m["role"] for m in msgs] == ["system", "user", "assistant", "user", "assistant"]
    assert msgs[2] == {"role": "assistant", "content": "1. Cheesy McCakeface",
                       "response_id": "r1", "model": "gpt-4o-mini"}
    assert db.get_session("llm-response-r4").title is None
    assert [m.message["role"] for m in session_messages(
        db.core, "llm-01j0bbbbbbbbbbbbbbbbbbbbbb")] \
        == ["user", "assistant"]


def test_llm_reimport_adds_only_new_responses(open_store, tmp_path):
    logs = tmp_path / "logs.db"
    make_logs(logs, with_tokens=False).close()
    db = open_store()
    import_llm_logs(db, logs)
    again = import_llm_logs(db, logs)
    assert (again.sessions_created, again.messages_added, again.messages_skipped) == (0, 0, 10)
    live = sqlite_utils.Database(logs)
    live["responses"].insert({"id": "r5", "model": "claude-3.5", "prompt": "And a heron?",
                              "system": None, "response": "Long legs.",
                              "conversation_id": "01j0bbbbbbbbbbbbbbbbbbbbbb",
                              "datetime_utc": "2024-05-04T00:00:00"})
    live.close()
    plan = import_llm_logs(db, logs, dry_run=True)
    assert (plan.messages_added, plan.messages_skipped) == (2, 10)
    done = import_llm_logs(db, logs)
    assert done.messages_added == 2
    texts = [m.message["content"]
             for m in session_messages(db.core, "llm-01j0bbbbbbbbbbbbbbbbbbbbbb")]
    assert texts[-2:] == ["And a heron?", "Long legs."]


def test_not_an_llm_database_is_refused(open_store, tmp_path):
    other = tmp_path / "other.db"
    sqlite_utils.Database(other)["dogs"].insert({"name": "Cleo"})
    db = open_store()
    with pytest.raises(ImportFileError, match="with tables dogs, not an llm logs database"):
        import_llm_logs(db, other)
    text = tmp_path / "notes.txt"
    text.write_text("hello" * 200)
    with pytest.raises(ImportFileError, match="cannot read .* as SQLite"):
        import_llm_logs(db, text)
    assert db.session_page() == []
