"""Build state databases that other programs write, with their ground truth.

Each builder makes a real SQLite file in the schema its program writes and
returns a `GroundTruth`: the kind name (shared with sessiondb/sqlitefile/identity.py),
the rows per table and their rowids, the virtual tables. Schemas come from
the programs themselves where they install from the registry (llm's own
migrations, the Agents SDK's `SQLiteSession`, LangGraph's `SqliteSaver`);
Hermes Agent's `state.db` is transcribed from its published source
(hermes_state_common.py `SCHEMA_SQL`, `FTS_SQL`, `FTS_TRIGRAM_SQL`,
`DEFERRED_INDEX_SQL`; schema_version 31, FTS storage layout 3).

Hermes Agent adds columns by diffing its declared schema against the live
table and running ``ALTER TABLE ... ADD COLUMN`` for each missing one, in
declaration order (`_reconcile_columns`). ``upgraded=True`` builds a file
born with the early (v1) tables, writes some rows, then upgrades it that
way: its columns sit in a different physical order than a fresh file's, and
its early rows are short records.

`wal_tail` (every builder) leaves the last rows of the main table only in
the ``-wal`` with no ``-shm``, as a copy taken of a live file would be.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import sqlite3
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import apsw

KINDS = ("hermes-state", "empty", "hermes-agent", "llm", "openai-agents", "langgraph", "sqlite")
T0 = 1_767_225_600.0  # 2026-01-01 UTC


@dataclass
class GroundTruth:
    """What a freshly built foreign file holds."""

    path: Path
    kind: str
    rowids: dict[str, set[int]] = field(default_factory=dict)  # data table -> rowids
    virtual: list[str] = field(default_factory=list)  # virtual tables (derived)
    main_table: str = ""  # the table the damage tests aim at (most rows)
    layout: str = ""  # e.g. "v31", "v1+reconciled", "threads", "responses"

    @property
    def counts(self) -> dict[str, int]:
        return {t: len(r) for t, r in self.rowids.items()}

    @property
    def total(self) -> int:
        return sum(self.counts.values())


def _text(i: int, words: int = 12) -> str:
    return f"row {i} " + " ".join(("lorem", "ipsum", "dolor", "sit", "amet")[(i + k) % 5]
                                  for k in range(words))


def _prepare(path: Path, page_size: int) -> None:
    if path.exists():
        raise FileExistsError(path)
    conn = apsw.Connection(str(path))
    conn.execute(f"PRAGMA page_size={page_size}; CREATE TABLE _t(x); DROP TABLE _t;")
    conn.close()
    os.chmod(path, 0o600)


def _finish(truth: GroundTruth, wal_tail: int,
            write_tail: Callable[[apsw.Connection], None]) -> GroundTruth:
    """Read the truth (through the live connection when a tail stays in the WAL)."""
    if wal_tail:
        return _leave_tail_in_wal(truth, write_tail)
    conn = apsw.Connection(str(truth.path))
    try:
        return _truth_from(conn, truth)
    finally:
        conn.close()


def _truth_from(conn: apsw.Connection, truth: GroundTruth) -> GroundTruth:
    """Rowids of every rowid table that is not internal, virtual or a shadow."""
    rows = conn.execute("SELECT name, sql FROM sqlite_master WHERE type='table'").fetchall()
    virtual = [n for n, s in rows if s and s.upper().startswith("CREATE VIRTUAL")]
    truth.virtual = virtual
    for name, sql in rows:
        if (name.startswith("sqlite_") or name in virtual
                or any(name.startswith(v + "_") for v in virtual)
                or "WITHOUT ROWID" in (sql or "").upper()):
            continue
        q = '"' + name.replace('"', '""') + '"'
        truth.rowids[name] = {r[0] for r in conn.execute(f"SELECT rowid FROM {q}")}
    if not truth.main_table:
        truth.main_table = max(truth.rowids, key=lambda t: len(truth.rowids[t]))
    return truth


def _leave_tail_in_wal(truth: GroundTruth,
                       write_tail: Callable[[apsw.Connection], None]) -> GroundTruth:
    """Write the tail through a WAL connection and keep the db and -wal as a
    copy taken while it was open (no checkpoint, no -shm)."""
    path = truth.path
    conn = apsw.Connection(str(path))
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
    with conn:
        write_tail(conn)
    _truth_from(conn, truth)
    scratch = path.with_name(path.name + ".live")
    shutil.copyfile(path, scratch)
    shutil.copyfile(f"{path}-wal", f"{scratch}-wal")
    conn.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    os.replace(scratch, path)
    os.replace(f"{scratch}-wal", f"{path}-wal")
    os.chmod(path, 0o600)
    os.chmod(f"{path}-wal", 0o600)
    return truth


# -- Hermes Agent state.db --------------------------------------------------

HERMES_SCHEMA_VERSION = 31
HERMES_FTS_STORAGE_VERSION = 3

# sessions and messages as v1 created them; later columns came by ALTER TABLE.
_HERMES_V1 = """
CREATE TABLE schema_version (version INTEGER NOT NULL);
CREATE TABLE sessions (
    id TEXT PRIMARY KEY, source TEXT NOT NULL, user_id TEXT, model TEXT, model_config TEXT,
    system_prompt TEXT, parent_session_id TEXT, started_at REAL NOT NULL, ended_at REAL,
    end_reason TEXT, message_count INTEGER DEFAULT 0, tool_call_count INTEGER DEFAULT 0,
    input_tokens INTEGER DEFAULT 0, output_tokens INTEGER DEFAULT 0,
    FOREIGN KEY (parent_session_id) REFERENCES sessions(id));
CREATE TABLE messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id),
    role TEXT NOT NULL, content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT,
    timestamp REAL NOT NULL, token_count INTEGER);
CREATE INDEX idx_sessions_source ON sessions(source);
CREATE INDEX idx_sessions_parent ON sessions(parent_session_id);
CREATE INDEX idx_sessions_started ON sessions(started_at DESC);
CREATE INDEX idx_messages_session ON messages(session_id, timestamp);
"""

# (name, declaration) in the order hermes_state_common.SCHEMA_SQL declares them.
HERMES_SESSIONS_COLUMNS = (
    ("id", "TEXT PRIMARY KEY"), ("source", "TEXT NOT NULL"), ("created_source", "TEXT"),
    ("user_id", "TEXT"), ("session_key", "TEXT"), ("chat_id", "TEXT"), ("chat_type", "TEXT"),
    ("thread_id", "TEXT"), ("display_name", "TEXT"), ("origin_json", "TEXT"),
    ("expiry_finalized", "INTEGER DEFAULT 0"), ("model", "TEXT"), ("model_config", "TEXT"),
    ("system_prompt", "TEXT"), ("system_prompt_hash", "TEXT"), ("parent_session_id", "TEXT"),
    ("started_at", "REAL NOT NULL"), ("ended_at", "REAL"), ("end_reason", "TEXT"),
    ("message_count", "INTEGER DEFAULT 0"), ("tool_call_count", "INTEGER DEFAULT 0"),
    ("input_tokens", "INTEGER DEFAULT 0"), ("output_tokens", "INTEGER DEFAULT 0"),
    ("cache_read_tokens", "INTEGER DEFAULT 0"), ("cache_write_tokens", "INTEGER DEFAULT 0"),
    ("reasoning_tokens", "INTEGER DEFAULT 0"), ("cwd", "TEXT"), ("git_branch", "TEXT"),
    ("git_repo_root", "TEXT"), ("git_metadata_generation", "INTEGER NOT NULL DEFAULT 0"),
    ("billing_provider", "TEXT"), ("billing_base_url", "TEXT"), ("billing_mode", "TEXT"),
    ("estimated_cost_usd", "REAL"), ("actual_cost_usd", "REAL"), ("cost_status", "TEXT"),
    ("cost_source", "TEXT"), ("pricing_version", "TEXT"), ("title", "TEXT"),
    ("title_source", "TEXT"), ("last_activity_at", "REAL"),
    ("last_activity_description", "TEXT"), ("last_activity_provenance", "TEXT"),
    ("api_call_count", "INTEGER DEFAULT 0"), ("handoff_state", "TEXT"),
    ("handoff_platform", "TEXT"), ("handoff_error", "TEXT"),
    ("compression_failure_cooldown_until", "REAL"), ("compression_failure_error", "TEXT"),
    ("compression_fallback_streak", "INTEGER NOT NULL DEFAULT 0"),
    ("compression_ineffective_count", "INTEGER NOT NULL DEFAULT 0"),
    ("compression_recovery_deadline", "REAL"),
    ("compression_overload_streak", "INTEGER NOT NULL DEFAULT 0"), ("profile_name", "TEXT"),
    ("transport_profile", "TEXT"), ("rewind_count", "INTEGER NOT NULL DEFAULT 0"),
    ("archived", "INTEGER NOT NULL DEFAULT 0"), ("pinned", "INTEGER NOT NULL DEFAULT 0"),
    ("hidden", "INTEGER NOT NULL DEFAULT 0"), ("last_read_at", "REAL"), ("tool_names", "TEXT"),
)
HERMES_MESSAGES_COLUMNS = (
    ("id", "INTEGER PRIMARY KEY AUTOINCREMENT"),
    ("session_id", "TEXT NOT NULL REFERENCES sessions(id)"), ("role", "TEXT NOT NULL"),
    ("content", "TEXT"), ("tool_call_id", "TEXT"), ("tool_calls", "TEXT"), ("tool_name", "TEXT"),
    ("effect_disposition", "TEXT"), ("timestamp", "REAL NOT NULL"), ("token_count", "INTEGER"),
    ("finish_reason", "TEXT"), ("reasoning", "TEXT"), ("reasoning_content", "TEXT"),
    ("reasoning_details", "TEXT"), ("codex_reasoning_items", "TEXT"),
    ("codex_message_items", "TEXT"), ("platform_message_id", "TEXT"),
    ("observed", "INTEGER DEFAULT 0"), ("_compressed_summary", "INTEGER NOT NULL DEFAULT 0"),
    ("active", "INTEGER NOT NULL DEFAULT 1"), ("compacted", "INTEGER NOT NULL DEFAULT 0"),
    ("api_content", "TEXT"), ("display_kind", "TEXT"), ("display_metadata", "TEXT"),
    ("display_identity", "BLOB"), ("display_order", "INTEGER"),
)


def _create(table: str, cols: tuple[tuple[str, str], ...], tail: str = "") -> str:
    body = ",\n    ".join(f"{n} {d}" for n, d in cols)
    return f"CREATE TABLE IF NOT EXISTS {table} (\n    {body}{tail}\n);\n"


HERMES_TABLES_SQL = (
    "CREATE TABLE IF NOT EXISTS schema_version (version INTEGER NOT NULL);\n"
    "CREATE TABLE IF NOT EXISTS system_prompts (hash TEXT PRIMARY KEY, prompt TEXT NOT NULL);\n"
    + _create("sessions", HERMES_SESSIONS_COLUMNS,
              ",\n    FOREIGN KEY (parent_session_id) REFERENCES sessions(id),\n"
              "    FOREIGN KEY (system_prompt_hash) REFERENCES system_prompts(hash)")
    + _create("messages", HERMES_MESSAGES_COLUMNS)
    + """
CREATE TABLE IF NOT EXISTS session_model_usage (
    session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
    model TEXT NOT NULL, billing_provider TEXT NOT NULL DEFAULT '',
    billing_base_url TEXT NOT NULL DEFAULT '', billing_mode TEXT NOT NULL DEFAULT '',
    task TEXT NOT NULL DEFAULT '', api_call_count INTEGER NOT NULL DEFAULT 0,
    input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,
    cache_read_tokens INTEGER NOT NULL DEFAULT 0, cache_write_tokens INTEGER NOT NULL DEFAULT 0,
    reasoning_tokens INTEGER NOT NULL DEFAULT 0, estimated_cost_usd REAL NOT NULL DEFAULT 0,
    actual_cost_usd REAL NOT NULL DEFAULT 0, cost_status TEXT, cost_source TEXT,
    first_seen REAL, last_seen REAL,
    PRIMARY KEY (session_id, model, billing_provider, billing_base_url, billing_mode, task));
CREATE TABLE IF NOT EXISTS state_meta (key TEXT PRIMARY KEY, value TEXT);
CREATE TABLE IF NOT EXISTS gateway_routing (
    scope TEXT NOT NULL DEFAULT '', session_key TEXT NOT NULL, entry_json TEXT NOT NULL,
    updated_at REAL NOT NULL, PRIMARY KEY (scope, session_key));
CREATE TABLE IF NOT EXISTS gateway_hygiene_state (
    session_key TEXT PRIMARY KEY, failure_streak INTEGER NOT NULL DEFAULT 0);
CREATE TABLE IF NOT EXISTS conversation_generations (
    source TEXT NOT NULL, session_key TEXT NOT NULL, generation INTEGER NOT NULL DEFAULT 0,
    PRIMARY KEY (source, session_key));
CREATE TABLE IF NOT EXISTS gateway_heartbeats (
    backend_id TEXT PRIMARY KEY, pid INTEGER NOT NULL, started_at REAL NOT NULL,
    last_heartbeat REAL NOT NULL, profile TEXT NOT NULL DEFAULT '',
    host TEXT NOT NULL DEFAULT '');
CREATE TABLE IF NOT EXISTS compression_locks (
    session_id TEXT PRIMARY KEY, holder TEXT NOT NULL, acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS session_turn_leases (
    conversation_id TEXT PRIMARY KEY, holder TEXT NOT NULL, acquired_at REAL NOT NULL,
    expires_at REAL NOT NULL);
CREATE TABLE IF NOT EXISTS async_delegations (
    delegation_id TEXT PRIMARY KEY, origin_session TEXT NOT NULL,
    origin_ui_session_id TEXT NOT NULL DEFAULT '', parent_session_id TEXT,
    state TEXT NOT NULL, dispatched_at REAL NOT NULL, completed_at REAL,
    updated_at REAL NOT NULL, event_json TEXT, result_json TEXT,
    delivery_state TEXT NOT NULL DEFAULT 'pending',
    delivery_attempts INTEGER NOT NULL DEFAULT 0, delivered_at REAL, owner_pid INTEGER,
    owner_started_at INTEGER, task_json TEXT, delivery_claim TEXT, delivery_claimed_at REAL,
    origin_session_id TEXT NOT NULL DEFAULT '');
CREATE INDEX IF NOT EXISTS idx_sessions_source ON sessions(source);
CREATE INDEX IF NOT EXISTS idx_sessions_source_id ON sessions(source, id);
CREATE INDEX IF NOT EXISTS idx_sessions_parent ON sessions(parent_session_id);
CREATE INDEX IF NOT EXISTS idx_sessions_started ON sessions(started_at DESC);
CREATE INDEX IF NOT EXISTS idx_messages_session ON messages(session_id, timestamp);
CREATE INDEX IF NOT EXISTS idx_messages_session_id ON messages(session_id, id);
CREATE INDEX IF NOT EXISTS idx_messages_assistant_calls_by_session ON messages(session_id)
    WHERE role = 'assistant' AND tool_calls IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_compression_locks_expires ON compression_locks(expires_at);
CREATE INDEX IF NOT EXISTS idx_session_turn_leases_expires ON session_turn_leases(expires_at);
CREATE INDEX IF NOT EXISTS idx_session_model_usage_session ON session_model_usage(session_id);
CREATE INDEX IF NOT EXISTS idx_session_model_usage_model ON session_model_usage(model);
CREATE INDEX IF NOT EXISTS idx_async_delegations_delivery
    ON async_delegations(delivery_state, completed_at);
""")

HERMES_DEFERRED_SQL = """
CREATE INDEX IF NOT EXISTS idx_messages_platform_msg_id ON messages(session_id,
    platform_message_id) WHERE platform_message_id IS NOT NULL;
CREATE INDEX IF NOT EXISTS idx_messages_session_active ON messages(session_id, active, timestamp);
CREATE INDEX IF NOT EXISTS idx_messages_display_page
    ON messages(session_id, display_order, active DESC, id DESC) WHERE active = 1 OR compacted = 1;
CREATE TRIGGER IF NOT EXISTS messages_display_order_insert
AFTER INSERT ON messages WHEN new.display_order IS NULL
BEGIN
    UPDATE messages SET display_order = COALESCE((
        SELECT display_order FROM messages
        WHERE session_id = new.session_id AND id <> new.id AND (active = 1 OR compacted = 1)
          AND display_identity = new.display_identity AND display_order IS NOT NULL
        ORDER BY display_order LIMIT 1), new.id) WHERE id = new.id;
END;
CREATE INDEX IF NOT EXISTS idx_messages_active_null ON messages(active) WHERE active IS NULL;
CREATE INDEX IF NOT EXISTS idx_sessions_session_key ON sessions(session_key, started_at DESC);
CREATE INDEX IF NOT EXISTS idx_sessions_system_prompt_hash ON sessions(system_prompt_hash);
CREATE INDEX IF NOT EXISTS idx_sessions_effective_activity
    ON sessions(COALESCE(last_activity_at, started_at) DESC, started_at DESC);
CREATE UNIQUE INDEX IF NOT EXISTS idx_sessions_title_unique ON sessions(title)
    WHERE title IS NOT NULL;
"""

HERMES_MESSAGE_UID_SQL = """
ALTER TABLE messages ADD COLUMN message_uid TEXT;
CREATE TRIGGER IF NOT EXISTS messages_mint_uid AFTER INSERT ON messages
WHEN new.message_uid IS NULL
BEGIN
    UPDATE messages SET message_uid = lower(hex(randomblob(16))) WHERE id = new.id;
END;
"""

_GATE = """(%s.id > COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                         WHERE key = 'fts_rebuild_high_water'), -1)
   OR %s.id <= COALESCE((SELECT CAST(value AS INTEGER) FROM state_meta
                          WHERE key = 'fts_rebuild_progress'), -1))"""
_TOOL_PREFIX = ("CASE WHEN %s.role = 'tool' THEN substr(COALESCE(%s.content, ''), 1, 8192) "
                "ELSE %s.content END")
_TRIGRAM_SESSION = ("source NOT IN ('cron', 'subagent') AND json_extract(CASE WHEN "
                    "json_valid(model_config) THEN model_config ELSE json_object() END, "
                    "'$._delegate_from') IS NULL")


def _fts_sql() -> str:
    new, old = _TOOL_PREFIX % (("new",) * 3), _TOOL_PREFIX % (("old",) * 3)
    return f"""
CREATE VIEW IF NOT EXISTS messages_fts_src AS
    SELECT id, {_TOOL_PREFIX % ('messages', 'messages', 'messages')} AS content,
           tool_name, tool_calls FROM messages;
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts USING fts5(
    content, tool_name, tool_calls, content='messages_fts_src', content_rowid='id');
CREATE TRIGGER IF NOT EXISTS messages_fts_insert AFTER INSERT ON messages
WHEN {_GATE % ('new', 'new')}
BEGIN
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
    VALUES (new.id, {new}, new.tool_name, new.tool_calls);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_delete AFTER DELETE ON messages
WHEN {_GATE % ('old', 'old')}
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, {old}, old.tool_name, old.tool_calls);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_update
AFTER UPDATE OF content, tool_name, tool_calls, role ON messages
WHEN (old.content IS NOT new.content OR old.tool_name IS NOT new.tool_name
      OR old.tool_calls IS NOT new.tool_calls OR old.role IS NOT new.role)
  AND {_GATE % ('old', 'old')}
BEGIN
    INSERT INTO messages_fts(messages_fts, rowid, content, tool_name, tool_calls)
    VALUES ('delete', old.id, {old}, old.tool_name, old.tool_calls);
    INSERT INTO messages_fts(rowid, content, tool_name, tool_calls)
    VALUES (new.id, {new}, new.tool_name, new.tool_calls);
END;
CREATE VIEW IF NOT EXISTS messages_fts_trigram_src AS
    SELECT m.id, m.role, m.content, m.tool_name FROM messages AS m
    JOIN sessions AS s ON s.id = m.session_id
    WHERE m.role <> 'tool' AND s.{_TRIGRAM_SESSION.replace('model_config', 's.model_config')};
CREATE VIRTUAL TABLE IF NOT EXISTS messages_fts_trigram USING fts5(
    content, tool_name, content='messages_fts_trigram_src', content_rowid='id',
    tokenize='trigram');
CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_insert AFTER INSERT ON messages
WHEN new.role <> 'tool'
  AND EXISTS (SELECT 1 FROM sessions WHERE id = new.session_id AND {_TRIGRAM_SESSION})
  AND {_GATE % ('new', 'new')}
BEGIN
    INSERT INTO messages_fts_trigram(rowid, content, tool_name)
    VALUES (new.id, new.content, new.tool_name);
END;
CREATE TRIGGER IF NOT EXISTS messages_fts_trigram_delete AFTER DELETE ON messages
WHEN old.role <> 'tool'
  AND EXISTS (SELECT 1 FROM sessions WHERE id = old.session_id AND {_TRIGRAM_SESSION})
  AND {_GATE % ('old', 'old')}
BEGIN
    INSERT INTO messages_fts_trigram(messages_fts_trigram, rowid, content, tool_name)
    VALUES ('delete', old.id, old.content, old.tool_name);
END;
"""


def _hermes_session(i: int) -> dict:
    sid = f"2026010{1 + i % 9}_{i:06d}_{(i * 2654435761) % 16**6:06x}"
    return {"id": sid, "source": ("cli", "telegram", "discord", "cron")[i % 4],
            "user_id": f"user{i % 3}", "model": "anthropic/claude-sonnet-4",
            "model_config": json.dumps({"max_iterations": 60, "reasoning": "medium"}),
            "parent_session_id": None, "started_at": T0 + i * 3600.0,
            "ended_at": T0 + i * 3600.0 + 1800.5, "end_reason": "user_exit",
            "message_count": 0, "tool_call_count": 0, "input_tokens": 1000 + i,
            "output_tokens": 200 + i}


def _hermes_message(sid: str, i: int, k: int, t: float) -> dict:
    role = ("user", "assistant", "tool", "assistant")[k % 4]
    m = {"session_id": sid, "role": role, "content": _text(i * 1000 + k),
         "tool_call_id": None, "tool_calls": None, "tool_name": None,
         "timestamp": t + k * 7.25, "token_count": 20 + k}
    if k % 4 == 1:
        m["tool_calls"] = json.dumps([{"id": f"call_{i}_{k}", "type": "function",
                                       "function": {"name": "terminal",
                                                    "arguments": "{\"command\": \"ls\"}"}}])
    if role == "tool":
        m["tool_call_id"], m["tool_name"] = f"call_{i}_{k - 1}", "terminal"
    return m


def _insert(conn: apsw.Connection, table: str, row: dict) -> int:
    cols = ", ".join(row)
    conn.execute(f"INSERT INTO {table} ({cols}) VALUES ({', '.join('?' * len(row))})",
                 tuple(row.values()))
    return conn.last_insert_rowid()


def _hermes_upgrade(conn: apsw.Connection) -> None:
    """What `_reconcile_columns` does to a v1 file: ADD every missing
    column in declaration order (types as PRAGMA table_info reconstructs them)."""
    conn.execute(HERMES_TABLES_SQL)
    for table, cols in (("sessions", HERMES_SESSIONS_COLUMNS),
                        ("messages", HERMES_MESSAGES_COLUMNS)):
        live = {r[1] for r in conn.execute(f"PRAGMA table_info({table})")}
        for name, decl in cols:
            if name not in live:
                conn.execute(f'ALTER TABLE "{table}" ADD COLUMN "{name}" '
                             + decl.replace(" REFERENCES sessions(id)", ""))


def build_hermes_agent(path: Path, sessions: int = 40, messages: int = 30, *,
                       page_size: int = 4096, upgraded: bool = False,
                       wal_tail: int = 0, message_uid: bool = False) -> GroundTruth:
    """A Hermes Agent state.db at schema v31 with ``sessions`` sessions of
    ``messages`` messages each (plus system prompts, per-model usage, meta).

    ``upgraded``: born at v1 with the first half of the sessions written,
    then upgraded column by column to v31 (see the module docstring).
    ``message_uid``: messages end with a ``message_uid`` column that an AFTER
    INSERT trigger mints, so every row is rewritten in the transaction that
    inserts it (a column the registry does not list)."""
    assert not (upgraded and message_uid), "message_uid comes after v31's columns"
    path = Path(path)
    _prepare(path, page_size)
    conn = apsw.Connection(str(path))
    early = sessions // 2 if upgraded else 0
    conn.execute(_HERMES_V1 if upgraded else HERMES_TABLES_SQL)
    if message_uid:
        conn.execute(HERMES_MESSAGE_UID_SQL)
    ids = []
    with conn:
        for i in range(early):
            ids.append(_hermes_write_session(conn, i, messages, v1=True))
    if upgraded:
        _hermes_upgrade(conn)
    conn.execute(HERMES_DEFERRED_SQL + _fts_sql())
    with conn:
        conn.execute("INSERT INTO schema_version (version) VALUES (?)", (HERMES_SCHEMA_VERSION,))
        conn.execute("INSERT INTO state_meta VALUES ('fts_storage_version', ?)",
                     (str(HERMES_FTS_STORAGE_VERSION),))
        conn.execute("INSERT INTO messages_fts(messages_fts) VALUES('rebuild')")
        conn.execute("INSERT INTO messages_fts_trigram(messages_fts_trigram) VALUES('rebuild')")
        for i in range(early, sessions):
            ids.append(_hermes_write_session(conn, i, messages, v1=False))
        _hermes_side_tables(conn, ids)
    tail_session = ids[-1] if ids else None
    conn.close()
    truth = GroundTruth(path, "hermes-agent", main_table="messages",
                        layout="v1+reconciled" if upgraded else "v31")
    return _finish(truth, wal_tail, lambda c: [
        _insert(c, "messages", _hermes_message(tail_session, sessions, 1000 + k, T0 + 9e6))
        for k in range(wal_tail)])


def _hermes_write_session(conn: apsw.Connection, i: int, messages: int, *, v1: bool) -> str:
    s = _hermes_session(i)
    if not v1:
        s.update(title=f"Session {i}", cache_read_tokens=50 * i, billing_provider="anthropic",
                 estimated_cost_usd=0.01 * i, last_activity_at=s["ended_at"],
                 session_key=f"hstate_agent:main:{s['source']}:dm:{i}")
        if i % 5 == 0:
            s["system_prompt_hash"] = f"{i:064x}"
            conn.execute("INSERT INTO system_prompts VALUES (?, ?)",
                         (s["system_prompt_hash"], "You are Hermes. " + _text(i, 40)))
    if i and i % 7 == 0:
        s["parent_session_id"] = _hermes_session(i - 1)["id"]
        s["end_reason"] = "compression"
    s["message_count"] = messages
    s["tool_call_count"] = messages // 4
    _insert(conn, "sessions", s)
    for k in range(messages):
        m = _hermes_message(s["id"], i, k, s["started_at"])
        if not v1 and k % 4 == 3:
            m["reasoning"] = "thinking about " + _text(k, 4)
            m["finish_reason"] = "stop"
        _insert(conn, "messages", m)
    return s["id"]


def _hermes_side_tables(conn: apsw.Connection, ids: list[str]) -> None:
    for n, sid in enumerate(ids):
        _insert(conn, "session_model_usage", {
            "session_id": sid, "model": "anthropic/claude-sonnet-4",
            "billing_provider": "anthropic", "task": "" if n % 3 else "title_generation",
            "api_call_count": 3 + n, "input_tokens": 1000 + n, "output_tokens": 200 + n,
            "first_seen": T0 + n, "last_seen": T0 + n + 60})
    conn.execute("INSERT INTO gateway_heartbeats VALUES ('hstate_cli-1', 4242, ?, ?, '', 'host')",
                 (T0, T0 + 30))


# -- llm logs.db -------------------------------------------------------------

def _llm_db(path: Path, upto: str | None):
    import llm.migrations as migrations  # the real package: its own DDL
    import sqlite_utils

    db = sqlite_utils.Database(str(path))
    migrations.ensure_migrations_table(db)
    for fn in migrations.MIGRATIONS:
        if upto is not None and fn.__name__ == upto:
            break
        fn(db)
        db["_llm_migrations"].insert({"name": fn.__name__,
                                      "applied_at": "2026-01-01 00:00:00+00:00"})
    return db


def build_llm(path: Path, conversations: int = 20, responses: int = 6, *,
              layout: str = "threads", page_size: int = 4096, wal_tail: int = 0) -> GroundTruth:
    """An llm logs.db. ``layout="threads"``: llm 0.36 (every migration, rows
    in threads/turns/messages/parts and the responses log); ``"responses"``:
    the layout before m023_message_store (conversations/responses only)."""
    path = Path(path)
    _prepare(path, page_size)
    db = _llm_db(path, None if layout == "threads" else "m023_message_store")
    with db.conn:
        for c in range(conversations):
            cid = f"01j{c:023d}"
            db.conn.execute("INSERT INTO conversations VALUES (?, ?, ?)",
                            (cid, f"conversation {c}", "echo"))
            for r in range(responses):
                _llm_response(db.conn, cid, c, r)
                if layout == "threads":
                    _llm_turn(db.conn, cid, c, r)
    db.conn.close()
    truth = GroundTruth(path, "llm", main_table="responses", layout=layout)
    return _finish(truth, wal_tail, lambda conn: [
        conn.execute("INSERT INTO responses (id, model, prompt, response, conversation_id, "
                     "datetime_utc) VALUES (?, 'echo', 'tail', 'tail', ?, ?)",
                     (f"tail{k:022d}", f"01j{0:023d}", "2026-02-01T00:00:00"))
        for k in range(wal_tail)])


def _llm_response(conn: sqlite3.Connection, cid: str, c: int, r: int) -> None:
    conn.execute(
        "INSERT INTO responses (id, model, prompt, system, prompt_json, options_json, response, "
        "response_json, conversation_id, duration_ms, datetime_utc, input_tokens, output_tokens) "
        "VALUES (?, 'echo', ?, NULL, ?, '{}', ?, '{}', ?, ?, ?, ?, ?)",
        (f"01r{c:011d}{r:012d}", _text(c * 100 + r), json.dumps({"messages": []}),
         "echo: " + _text(c * 100 + r), cid, 12 + r, f"2026-01-{1 + c % 28:02d}T10:{r:02d}:00",
         10 + r, 20 + r))


def _llm_turn(conn: sqlite3.Connection, cid: str, c: int, r: int) -> None:
    if r == 0:
        conn.execute("INSERT INTO threads (id, name, datetime_utc) VALUES (?, ?, ?)",
                     (cid, f"conversation {c}", f"2026-01-{1 + c % 28:02d}T10:00:00"))
    parent = None if r == 0 else f"{c:08x}{r - 1:04x}b".ljust(64, "0")
    user, bot = f"{c:08x}{r:04x}a".ljust(64, "0"), f"{c:08x}{r:04x}b".ljust(64, "0")
    conn.execute("INSERT INTO messages VALUES (?, ?, 'user', NULL)", (user, parent))
    conn.execute("INSERT INTO messages VALUES (?, ?, 'assistant', '{}')", (bot, user))
    for h, text in ((user, _text(c * 100 + r)), (bot, "echo: " + _text(c * 100 + r))):
        conn.execute("INSERT INTO parts (message_hash, position, type, text) "
                     "VALUES (?, 0, 'text', ?)", (h, text))
    tid = f"01t{c:011d}{r:012d}"
    conn.execute("INSERT INTO turns (id, thread_id, parent_message_hash, tip_message_hash, model,"
                 " input_tokens, output_tokens, duration_ms, datetime_utc) "
                 "VALUES (?, ?, ?, ?, 'echo', 10, 20, 12, ?)",
                 (tid, cid, parent, bot, f"2026-01-{1 + c % 28:02d}T10:{r:02d}:00"))
    conn.execute("UPDATE threads SET tip_message_hash = ? WHERE id = ?", (bot, cid))
    conn.execute("INSERT INTO turn_search (turn_id, prompt, response) VALUES (?, ?, ?)",
                 (tid, _text(c * 100 + r), "echo: " + _text(c * 100 + r)))


# -- OpenAI Agents SDK SQLiteSession ------------------------------------------

def build_openai_agents(path: Path, sessions: int = 20, items: int = 30, *,
                        page_size: int = 4096, wal_tail: int = 0) -> GroundTruth:
    """A file written by the Agents SDK's own `SQLiteSession`."""
    from agents.memory import SQLiteSession

    path = Path(path)
    _prepare(path, page_size)
    for s in range(sessions):
        session = SQLiteSession(f"conv_{s:04d}", str(path))
        batch = [_agents_item(s, k) for k in range(items)]
        asyncio.run(session.add_items(batch))
        session.close()
    truth = GroundTruth(path, "openai-agents", main_table="agent_messages",
                        layout="sqlite-session")
    return _finish(truth, wal_tail, lambda conn: [
        conn.execute("INSERT INTO agent_messages (session_id, message_data) VALUES (?, ?)",
                     ("conv_0000", json.dumps(_agents_item(0, 10_000 + k))))
        for k in range(wal_tail)])


def _agents_item(s: int, k: int) -> dict:
    if k % 3 == 2:
        return {"type": "function_call_output", "call_id": f"call_{s}_{k}",
                "output": _text(s * 1000 + k)}
    return {"role": ("user", "assistant")[k % 3], "content": _text(s * 1000 + k)}


# -- LangGraph SqliteSaver ---------------------------------------------------

def build_langgraph(path: Path, threads: int = 10, checkpoints: int = 12, *,
                    page_size: int = 4096, wal_tail: int = 0) -> GroundTruth:
    """A checkpoint file written by LangGraph's own `SqliteSaver`."""
    from langgraph.checkpoint.base import empty_checkpoint
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = Path(path)
    _prepare(path, page_size)
    conn = sqlite3.connect(str(path), check_same_thread=False)
    saver = SqliteSaver(conn)
    saver.setup()
    for t in range(threads):
        config = {"configurable": {"thread_id": f"thread-{t}", "checkpoint_ns": ""}}
        for step in range(checkpoints):
            ck = empty_checkpoint()
            ck["channel_values"] = {"messages": [_text(t * 100 + step)]}
            config = saver.put(config, ck, {"source": "loop", "step": step}, {})
            saver.put_writes(config, [("messages", _text(step)), ("agent", step)], f"task-{step}")
    conn.close()
    truth = GroundTruth(path, "langgraph", main_table="writes", layout="sqlite-saver")
    return _finish(truth, wal_tail, lambda c: [
        c.execute("INSERT INTO writes VALUES ('thread-0', '', ?, 'tail', '', 0, 'messages', "
                  "'msgpack', x'81a161')", (f"tail-{k}",)) for k in range(wal_tail)])


BUILDERS: dict[str, Callable[..., GroundTruth]] = {
    "hermes-agent": build_hermes_agent,
    "llm": build_llm,
    "openai-agents": build_openai_agents,
    "langgraph": build_langgraph,
}
