"""A registry of the state-database formats recovery knows, as data.

Each `Format` says how a file of it is recognised (tables and the columns
they must have), the tables it writes (their CREATE TABLE statements, run
by SQLite itself to learn columns, types, NOT NULL and defaults), the other
physical column orders its tables take across versions (Hermes Agent adds
columns one by one with ``ALTER TABLE ... ADD COLUMN``, so a file upgraded
from v1 keeps them in the order they were added, and its early rows are
short records), and plausibility checks the carver scores records with
(id shapes, role sets, JSON columns, timestamps).

Sources: Hermes Agent's hermes_state_common.py (SCHEMA_SQL, schema v31),
llm 0.36's migrations, the OpenAI Agents SDK's SQLiteSession and
LangGraph's SqliteSaver (their CREATE TABLE statements). Our own store's
layouts stay in `hstate_recovery.schema.layouts` (`KNOWN_LAYOUTS`); it is listed here
for identification only.

To teach recovery a format, add a `Format` to `FORMATS`.
"""
from __future__ import annotations

import json
import re
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any, Callable

import apsw

from .layouts import (ANY, Column, INT, Layout, REAL, TEXT, default_literal, json_shape, non_empty,
                      non_negative, one_of, timestamp_shape)

Check = Callable[[Any], bool]

OURS, EMPTY, GENERIC = "hermes-state", "empty", "sqlite"
_HEX64 = re.compile(r"^[0-9a-f]{64}$")
_ISO = re.compile(r"^\d{4}-\d{2}-\d{2}[T ]\d{2}:\d{2}(:\d{2}(\.\d+)?)?([+-]\d{2}:?\d{2}|Z)?$")
_IDENT = re.compile(r"^[A-Za-z0-9_.:@/+=-]{1,200}$")
_HERMES_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:@+=-]{0,127}$")
_UUID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def iso_time(v: Any) -> bool:
    return isinstance(v, str) and bool(_ISO.match(v))


def ident(v: Any) -> bool:
    return isinstance(v, str) and bool(_IDENT.match(v))


def hex64(v: Any) -> bool:
    return isinstance(v, str) and bool(_HEX64.match(v))


def hermes_id(v: Any) -> bool:
    return isinstance(v, str) and bool(_HERMES_ID.match(v))


def uuid_text(v: Any) -> bool:
    return isinstance(v, str) and bool(_UUID.match(v))


def json_object(v: Any) -> bool:
    return json_shape(v) and v.lstrip().startswith("{")


def json_bytes(v: Any) -> bool:
    """LangGraph's metadata: JSON stored as a BLOB."""
    if isinstance(v, bytes):
        try:
            json.loads(v.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            return False
        return True
    return json_shape(v)


def small_version(v: Any) -> bool:
    return isinstance(v, int) and 1 <= v <= 10_000


ROLES = one_of("user", "assistant", "tool", "system", "developer", "function")


@dataclass(frozen=True, eq=False)  # hashed by identity (cached layouts)
class FormatTable:
    """One table of a format: its statement, checks by column, and other
    physical column orders (name, columns in order, oldest record width)."""

    name: str
    sql: str
    checks: dict[str, Check] = field(default_factory=dict)
    orders: tuple[tuple[str, tuple[str, ...], int], ...] = ()
    min_columns: int | None = None  # oldest record width of the statement's own order
    orphan_min: float = 0.75


@dataclass(frozen=True)
class Versions:
    """The versions of a format the registry knows: where a file records its
    version (``sql`` gives one row per recorded version) and every version
    whose tables the registry's statements and column orders describe,
    oldest first."""

    sql: str
    known: tuple[str, ...]
    name: str = "schema v{}"  # how a version is named in a message

    def named(self, version: str) -> str:
        return self.name.format(version)


@dataclass(frozen=True, eq=False)
class Format:
    """A program's state database: how to recognise it and what it holds."""

    kind: str
    label: str
    signature: dict[str, tuple[str, ...]]  # table -> columns it must have
    tables: tuple[FormatTable, ...] = ()
    version_sql: str | None = None  # a query for the schema version, if it keeps one
    commands: tuple[str, ...] = ("recover",)
    versions: Versions | None = None  # None: the program records no version

    def table(self, name: str) -> FormatTable | None:
        return next((t for t in self.tables if t.name == name), None)


# -- Hermes Agent state.db (schema v31) -------------------------------------

HERMES_AGENT_NEWEST = 31  # hermes_state_common.py's SCHEMA_VERSION the statements are from

_HERMES_SESSIONS = (
    "id TEXT PRIMARY KEY, source TEXT NOT NULL, created_source TEXT, user_id TEXT, "
    "session_key TEXT, chat_id TEXT, chat_type TEXT, thread_id TEXT, display_name TEXT, "
    "origin_json TEXT, expiry_finalized INTEGER DEFAULT 0, model TEXT, model_config TEXT, "
    "system_prompt TEXT, system_prompt_hash TEXT, parent_session_id TEXT, "
    "started_at REAL NOT NULL, ended_at REAL, end_reason TEXT, message_count INTEGER DEFAULT 0,"
    " tool_call_count INTEGER DEFAULT 0, input_tokens INTEGER DEFAULT 0, "
    "output_tokens INTEGER DEFAULT 0, cache_read_tokens INTEGER DEFAULT 0, "
    "cache_write_tokens INTEGER DEFAULT 0, reasoning_tokens INTEGER DEFAULT 0, cwd TEXT, "
    "git_branch TEXT, git_repo_root TEXT, git_metadata_generation INTEGER NOT NULL DEFAULT 0, "
    "billing_provider TEXT, billing_base_url TEXT, billing_mode TEXT, estimated_cost_usd REAL,"
    " actual_cost_usd REAL, cost_status TEXT, cost_source TEXT, pricing_version TEXT, "
    "title TEXT, title_source TEXT, last_activity_at REAL, last_activity_description TEXT, "
    "last_activity_provenance TEXT, api_call_count INTEGER DEFAULT 0, handoff_state TEXT, "
    "handoff_platform TEXT, handoff_error TEXT, compression_failure_cooldown_until REAL, "
    "compression_failure_error TEXT, compression_fallback_streak INTEGER NOT NULL DEFAULT 0, "
    "compression_ineffective_count INTEGER NOT NULL DEFAULT 0, "
    "compression_recovery_deadline REAL, compression_overload_streak INTEGER NOT NULL "
    "DEFAULT 0, profile_name TEXT, transport_profile TEXT, rewind_count INTEGER NOT NULL "
    "DEFAULT 0, archived INTEGER NOT NULL DEFAULT 0, pinned INTEGER NOT NULL DEFAULT 0, "
    "hidden INTEGER NOT NULL DEFAULT 0, last_read_at REAL, tool_names TEXT, "
    "FOREIGN KEY (parent_session_id) REFERENCES sessions(id), "
    "FOREIGN KEY (system_prompt_hash) REFERENCES system_prompts(hash)")
_HERMES_MESSAGES = (
    "id INTEGER PRIMARY KEY AUTOINCREMENT, session_id TEXT NOT NULL REFERENCES sessions(id), "
    "role TEXT NOT NULL, content TEXT, tool_call_id TEXT, tool_calls TEXT, tool_name TEXT, "
    "effect_disposition TEXT, timestamp REAL NOT NULL, token_count INTEGER, "
    "finish_reason TEXT, reasoning TEXT, reasoning_content TEXT, reasoning_details TEXT, "
    "codex_reasoning_items TEXT, codex_message_items TEXT, platform_message_id TEXT, "
    "observed INTEGER DEFAULT 0, _compressed_summary INTEGER NOT NULL DEFAULT 0, "
    "active INTEGER NOT NULL DEFAULT 1, compacted INTEGER NOT NULL DEFAULT 0, "
    "api_content TEXT, display_kind TEXT, display_metadata TEXT, display_identity BLOB, "
    "display_order INTEGER")
# v1's columns; the reconciler appended every other one in declaration order.
_HERMES_SESSIONS_V1 = ("id", "source", "user_id", "model", "model_config", "system_prompt",
                       "parent_session_id", "started_at", "ended_at", "end_reason",
                       "message_count", "tool_call_count", "input_tokens", "output_tokens")
_HERMES_MESSAGES_V1 = ("id", "session_id", "role", "content", "tool_call_id", "tool_calls",
                       "tool_name", "timestamp", "token_count")


def _names(columns_sql: str) -> tuple[str, ...]:
    parts = [p.strip().split()[0] for p in columns_sql.split(", ")]
    return tuple(p for p in parts if p.upper() not in ("FOREIGN", "PRIMARY"))


def _reconciled(columns_sql: str, v1: tuple[str, ...]) -> tuple[str, ...]:
    return v1 + tuple(n for n in _names(columns_sql) if n not in v1)


_SESSION_CHECKS: dict[str, Check] = {
    "id": hermes_id, "source": non_empty, "started_at": timestamp_shape,
    "ended_at": timestamp_shape, "parent_session_id": hermes_id,
    "model_config": json_object, "message_count": non_negative,
    "tool_call_count": non_negative, "input_tokens": non_negative,
    "output_tokens": non_negative}
_MESSAGE_CHECKS: dict[str, Check] = {
    "session_id": hermes_id, "role": ROLES, "timestamp": timestamp_shape,
    "tool_calls": json_shape, "token_count": non_negative,
    "active": one_of(0, 1), "compacted": one_of(0, 1)}

HERMES_AGENT = Format(
    "hermes-agent", "Hermes Agent state.db",
    {"sessions": ("id", "source", "started_at"),
     "messages": ("session_id", "role", "timestamp"), "schema_version": ("version",)},
    (
        FormatTable("schema_version", "CREATE TABLE schema_version (version INTEGER NOT NULL)",
                    {"version": small_version}, orphan_min=1.0),
        FormatTable("system_prompts", "CREATE TABLE system_prompts (hash TEXT PRIMARY KEY, "
                    "prompt TEXT NOT NULL)", {"hash": lambda v: isinstance(v, str)
                                              and bool(re.match(r"^[0-9a-f]{16,128}$", v))},
                    orphan_min=1.0),
        FormatTable("sessions", f"CREATE TABLE sessions ({_HERMES_SESSIONS})", _SESSION_CHECKS,
                    (("v1+reconciled", _reconciled(_HERMES_SESSIONS, _HERMES_SESSIONS_V1),
                      len(_HERMES_SESSIONS_V1)),)),
        FormatTable("messages", f"CREATE TABLE messages ({_HERMES_MESSAGES})", _MESSAGE_CHECKS,
                    (("v1+reconciled", _reconciled(_HERMES_MESSAGES, _HERMES_MESSAGES_V1),
                      len(_HERMES_MESSAGES_V1)),)),
        FormatTable("session_model_usage", (
            "CREATE TABLE session_model_usage (session_id TEXT NOT NULL REFERENCES sessions(id)"
            " ON DELETE CASCADE, model TEXT NOT NULL, billing_provider TEXT NOT NULL DEFAULT "
            "'', billing_base_url TEXT NOT NULL DEFAULT '', billing_mode TEXT NOT NULL DEFAULT"
            " '', task TEXT NOT NULL DEFAULT '', api_call_count INTEGER NOT NULL DEFAULT 0, "
            "input_tokens INTEGER NOT NULL DEFAULT 0, output_tokens INTEGER NOT NULL DEFAULT 0,"
            " cache_read_tokens INTEGER NOT NULL DEFAULT 0, cache_write_tokens INTEGER NOT "
            "NULL DEFAULT 0, reasoning_tokens INTEGER NOT NULL DEFAULT 0, estimated_cost_usd "
            "REAL NOT NULL DEFAULT 0, actual_cost_usd REAL NOT NULL DEFAULT 0, cost_status "
            "TEXT, cost_source TEXT, first_seen REAL, last_seen REAL, PRIMARY KEY (session_id,"
            " model, billing_provider, billing_base_url, billing_mode, task))"),
            {"session_id": hermes_id, "model": non_empty, "api_call_count": non_negative,
             "input_tokens": non_negative, "output_tokens": non_negative,
             "first_seen": timestamp_shape, "last_seen": timestamp_shape}),
        FormatTable("state_meta", "CREATE TABLE state_meta (key TEXT PRIMARY KEY, value TEXT)",
                    {"key": lambda v: isinstance(v, str) and bool(re.match(r"^[a-z_]+$", v))},
                    orphan_min=1.0),
        FormatTable("gateway_heartbeats", (
            "CREATE TABLE gateway_heartbeats (backend_id TEXT PRIMARY KEY, pid INTEGER NOT "
            "NULL, started_at REAL NOT NULL, last_heartbeat REAL NOT NULL, profile TEXT NOT "
            "NULL DEFAULT '', host TEXT NOT NULL DEFAULT '')"),
            {"pid": non_negative, "started_at": timestamp_shape,
             "last_heartbeat": timestamp_shape}),
        FormatTable("compression_locks", (
            "CREATE TABLE compression_locks (session_id TEXT PRIMARY KEY, holder TEXT NOT NULL,"
            " acquired_at REAL NOT NULL, expires_at REAL NOT NULL)"),
            {"session_id": hermes_id, "acquired_at": timestamp_shape,
             "expires_at": timestamp_shape}, orphan_min=1.0),
    ),
    version_sql="SELECT max(version) FROM schema_version",
    commands=("recover", "import --from hermes-agent"),
    # v31's statements, and v1's tables with the later columns appended in
    # declaration order (how Hermes Agent upgrades a file): every version up to v31
    versions=Versions("SELECT version FROM schema_version",
                      tuple(str(v) for v in range(1, HERMES_AGENT_NEWEST + 1))))

# -- llm logs.db -------------------------------------------------------------

_LLM_CONVERSATIONS = FormatTable(
    "conversations", 'CREATE TABLE "conversations" ("id" TEXT PRIMARY KEY, "name" TEXT, '
    '"model" TEXT)', {"id": ident}, orphan_min=1.0)
_LLM_RESPONSES = FormatTable(
    "responses", 'CREATE TABLE "responses" ("id" TEXT PRIMARY KEY, "model" TEXT, '
    '"prompt" TEXT, "system" TEXT, "prompt_json" TEXT, "options_json" TEXT, "response" TEXT, '
    '"response_json" TEXT, "conversation_id" TEXT REFERENCES "conversations"("id"), '
    '"duration_ms" INTEGER, "datetime_utc" TEXT, "input_tokens" INTEGER, "output_tokens" '
    'INTEGER, "token_details" TEXT, "schema_id" TEXT REFERENCES "schemas"("id"), '
    '"resolved_model" TEXT, "reasoning" TEXT)',
    {"id": ident, "prompt_json": json_shape, "options_json": json_shape,
     "response_json": json_shape, "conversation_id": ident, "duration_ms": non_negative,
     "datetime_utc": iso_time}, min_columns=15)
_LLM_MIGRATIONS = FormatTable(
    "_llm_migrations", 'CREATE TABLE "_llm_migrations" ("name" TEXT PRIMARY KEY, '
    '"applied_at" TEXT)', {"name": lambda v: isinstance(v, str) and bool(
        re.match(r"^m\d{3}_\w+$", v)), "applied_at": iso_time}, orphan_min=1.0)

# llm 0.36's migrations, in the order it applies them (its _llm_migrations
# ledger names them); the layouts below are the tables they leave.
LLM_MIGRATIONS = (
    "m001_initial", "m002_id_primary_key", "m003_chat_id_foreign_key", "m004_column_order",
    "m004_drop_provider", "m005_debug", "m006_new_logs_table", "m007_finish_logs_table",
    "m008_reply_to_id_foreign_key", "m008_fix_column_order_in_logs",
    "m009_delete_logs_table_if_empty", "m010_create_new_log_tables", "m011_fts_for_responses",
    "m012_attachments_tables", "m013_usage", "m014_schemas", "m015_fragments_tables",
    "m016_fragments_table_pks", "m017_tools_tables", "m017_tools_plugin",
    "m018_tool_instances", "m019_resolved_model", "m020_tool_results_attachments",
    "m021_tool_results_exception", "m022_response_reasoning", "m023_message_store",
    "m024_tool_instance_references", "m025_turn_tools_instance_backfill",
    "m026_message_tree_view", "m027_turns_response_json")
LLM_VERSIONS = Versions("SELECT name FROM _llm_migrations", LLM_MIGRATIONS, "migration {}")

LLM_THREADS = Format(
    "llm", "llm logs.db (threads/turns)",
    {"threads": ("id", "tip_message_hash"), "turns": ("id", "thread_id"),
     "messages": ("hash", "parent_hash", "role"), "parts": ("message_hash", "position")},
    (
        _LLM_MIGRATIONS, _LLM_CONVERSATIONS, _LLM_RESPONSES,
        FormatTable("messages", 'CREATE TABLE "messages" ("hash" TEXT PRIMARY KEY, '
                    '"parent_hash" TEXT REFERENCES "messages"("hash"), "role" TEXT, '
                    '"provider_metadata" TEXT)',
                    {"hash": hex64, "parent_hash": hex64, "role": ROLES,
                     "provider_metadata": json_shape}),
        FormatTable("parts", 'CREATE TABLE "parts" ("id" INTEGER PRIMARY KEY, "message_hash" '
                    'TEXT REFERENCES "messages"("hash"), "position" INTEGER, "type" TEXT, '
                    '"tool_name" TEXT, "text" TEXT, "payload" TEXT)',
                    {"message_hash": hex64, "position": non_negative,
                     "type": one_of("text", "tool_call", "tool_result", "reasoning",
                                    "attachment", "image", "file"), "payload": json_shape}),
        FormatTable("threads", 'CREATE TABLE "threads" ("id" TEXT PRIMARY KEY, "name" TEXT, '
                    '"tip_message_hash" TEXT REFERENCES "messages"("hash"), "forked_from" TEXT '
                    'REFERENCES "threads"("id"), "datetime_utc" TEXT)',
                    {"id": ident, "tip_message_hash": hex64, "datetime_utc": iso_time}),
        FormatTable("turns", 'CREATE TABLE "turns" ("id" TEXT PRIMARY KEY, "thread_id" TEXT '
                    'REFERENCES "threads"("id"), "parent_message_hash" TEXT REFERENCES '
                    '"messages"("hash"), "tip_message_hash" TEXT REFERENCES "messages"("hash"),'
                    ' "model" TEXT, "resolved_model" TEXT, "options_json" TEXT, "schema_id" '
                    'TEXT REFERENCES "schemas"("id"), "input_tokens" INTEGER, "output_tokens" '
                    'INTEGER, "token_details" TEXT, "duration_ms" INTEGER, "datetime_utc" TEXT,'
                    ' "response_json" TEXT)',
                    {"id": ident, "thread_id": ident, "parent_message_hash": hex64,
                     "tip_message_hash": hex64, "options_json": json_shape,
                     "datetime_utc": iso_time}, min_columns=13),
        FormatTable("turn_search", 'CREATE TABLE "turn_search" ("id" INTEGER PRIMARY KEY, '
                    '"turn_id" TEXT REFERENCES "turns"("id"), "prompt" TEXT, "response" TEXT)',
                    {"turn_id": ident}),
    ),
    commands=("recover", "import --from llm"), versions=LLM_VERSIONS)

LLM_RESPONSES = Format(
    "llm", "llm logs.db (responses/conversations)",
    {"responses": ("id", "model", "prompt", "response", "conversation_id"),
     "conversations": ("id", "name", "model")},
    (_LLM_MIGRATIONS, _LLM_CONVERSATIONS, _LLM_RESPONSES),
    commands=("recover", "import --from llm"), versions=LLM_VERSIONS)

# -- OpenAI Agents SDK SQLiteSession, LangGraph SqliteSaver ------------------

OPENAI_AGENTS = Format(
    "openai-agents", "OpenAI Agents SDK SQLiteSession",
    {"agent_sessions": ("session_id", "created_at", "updated_at"),
     "agent_messages": ("id", "session_id", "message_data", "created_at")},
    (
        FormatTable("agent_sessions", "CREATE TABLE agent_sessions (session_id TEXT PRIMARY "
                    "KEY, created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, updated_at TIMESTAMP "
                    "DEFAULT CURRENT_TIMESTAMP)",
                    {"session_id": ident, "created_at": iso_time, "updated_at": iso_time},
                    orphan_min=1.0),
        FormatTable("agent_messages", "CREATE TABLE agent_messages (id INTEGER PRIMARY KEY "
                    "AUTOINCREMENT, session_id TEXT NOT NULL, message_data TEXT NOT NULL, "
                    "created_at TIMESTAMP DEFAULT CURRENT_TIMESTAMP, FOREIGN KEY (session_id) "
                    "REFERENCES agent_sessions (session_id) ON DELETE CASCADE)",
                    {"session_id": ident, "message_data": json_object,
                     "created_at": iso_time}),
    ))

LANGGRAPH = Format(
    "langgraph", "LangGraph SqliteSaver",
    {"checkpoints": ("thread_id", "checkpoint_ns", "checkpoint_id", "checkpoint"),
     "writes": ("thread_id", "checkpoint_id", "task_id", "idx", "channel")},
    (
        FormatTable("checkpoints", "CREATE TABLE checkpoints (thread_id TEXT NOT NULL, "
                    "checkpoint_ns TEXT NOT NULL DEFAULT '', checkpoint_id TEXT NOT NULL, "
                    "parent_checkpoint_id TEXT, type TEXT, checkpoint BLOB, metadata BLOB, "
                    "PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id))",
                    {"checkpoint_id": uuid_text, "parent_checkpoint_id": uuid_text,
                     "type": non_empty, "metadata": json_bytes}),
        FormatTable("writes", "CREATE TABLE writes (thread_id TEXT NOT NULL, checkpoint_ns "
                    "TEXT NOT NULL DEFAULT '', checkpoint_id TEXT NOT NULL, task_id TEXT NOT "
                    "NULL, task_path TEXT NOT NULL DEFAULT '', idx INTEGER NOT NULL, channel "
                    "TEXT NOT NULL, type TEXT, value BLOB, PRIMARY KEY (thread_id, "
                    "checkpoint_ns, checkpoint_id, task_id, idx))",
                    {"checkpoint_id": lambda v: isinstance(v, str) and v != "",
                     "task_id": non_empty, "channel": non_empty, "type": non_empty}),
    ))

OUR_STORE = Format(OURS, "a hermes-state store",
                   {"messages": ("uid", "fingerprint", "content_kind"),
                    "migrations": ("name", "applied_at")})

# Most specific first: identification takes the first whose signature fits.
FORMATS: tuple[Format, ...] = (OUR_STORE, HERMES_AGENT, LLM_THREADS, LLM_RESPONSES,
                               OPENAI_AGENTS, LANGGRAPH)


# -- identification ----------------------------------------------------------

@dataclass(frozen=True)
class Identification:
    """What a file is: a registered format's kind and label, ours, empty, or
    a generic SQLite database named by its tables."""

    kind: str
    label: str
    version: int | None = None
    commands: tuple[str, ...] = ()
    version_check: dict[str, Any] | None = None  # `VersionCheck.to_dict`, registered formats

    @property
    def ours(self) -> bool:
        return self.kind == OURS

    @property
    def registered(self) -> bool:
        return format_named(self.label) is not None and not self.ours

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "label": self.label, "version": self.version,
                "commands": list(self.commands), "version_check": self.version_check}


def format_named(label: str) -> Format | None:
    return next((f for f in FORMATS if label.startswith(f.label)), None)


def matching_format(columns: dict[str, list[str]]) -> Format | None:
    """The first registered format whose signature the tables fit."""
    for fmt in FORMATS:
        if all(t in columns and set(cols) <= set(columns[t])
               for t, cols in fmt.signature.items()):
            return fmt
    return None


def identify(columns: dict[str, list[str]], version: int | None = None) -> Identification:
    """Identify a file from its tables' columns (sqlite_ tables excluded by
    the caller) and, for formats that keep one, its schema version."""
    fmt = matching_format(columns)
    if fmt is not None:
        label = fmt.label + (f", schema v{version}" if version is not None else "")
        return Identification(fmt.kind, label, version, fmt.commands)
    if not columns:
        return Identification(EMPTY, "an empty SQLite database")
    names = sorted(columns)
    shown = ", ".join(names[:8]) + (f" and {len(names) - 8} more" if len(names) > 8 else "")
    return Identification(GENERIC, f"an SQLite database with tables {shown}",
                          commands=("recover",))


def schema_version(conn: apsw.Connection, columns: dict[str, list[str]]) -> int | None:
    """The version a registered format records in the file, if it keeps one."""
    fmt = matching_format(columns)
    if fmt is None or fmt.version_sql is None:
        return None
    try:
        row = conn.execute(fmt.version_sql).fetchone()
    except (apsw.Error, UnicodeDecodeError):
        return None
    return row[0] if row and isinstance(row[0], int) else None


# -- the file's version against the registry ----------------------------------

#: What a version or columns the registry does not know mean for recovery.
UNKNOWN_MEANS = ("Recovery keeps the columns it does not know, from the file's own schema; "
                 "if the schema page is lost, carving uses the registry's layouts, which "
                 "lack them, and may miss or misread the rows that hold them.")


@dataclass(frozen=True)
class VersionCheck:
    """A registered file's version against the versions the registry knows.
    ``status``: known, unversioned (the program records none; the tables
    have the registry's columns), unrecorded (the format records one, the
    file holds none), newer (a version the registry does not know), or
    unknown_columns (a registered table has columns the registry lacks)."""

    status: str
    version: str | None
    message: str
    unknown_columns: tuple[str, ...] = ()

    @property
    def warns(self) -> bool:
        return self.status in ("newer", "unknown_columns")

    def to_dict(self) -> dict[str, Any]:
        return {"status": self.status, "version": self.version, "message": self.message,
                "unknown_columns": list(self.unknown_columns), "warns": self.warns}


def _recorded(conn: apsw.Connection, versions: Versions) -> list[str]:
    try:
        return [str(r[0]) for r in conn.execute(versions.sql) if r[0] is not None]
    except (apsw.Error, UnicodeDecodeError):
        return []


def _extra_columns(fmt: Format, columns: dict[str, list[str]]) -> tuple[str, ...]:
    out = []
    for t in fmt.tables:
        known = {c[0] for c in parse_columns(t.name, t.sql)}
        out += [f"{t.name}.{c}" for c in columns.get(t.name, []) if known and c not in known]
    return tuple(out)


def _newest_of(recorded: list[str]) -> str:
    """The newest of the recorded versions: the highest number, or the last recorded."""
    if all(v.lstrip("-").isdigit() for v in recorded):
        return max(recorded, key=int)
    return recorded[-1]


def check_version(conn: apsw.Connection, fmt: Format,
                  columns: dict[str, list[str]]) -> VersionCheck:
    """The file's recorded version (and its registered tables' columns)
    against what the registry knows of ``fmt``."""
    extra = _extra_columns(fmt, columns)
    v = fmt.versions
    recorded = _recorded(conn, v) if v is not None else []
    if v is not None and any(r not in v.known for r in recorded):
        newest = _newest_of([r for r in recorded if r not in v.known])
        return VersionCheck("newer", newest, f"{v.named(newest)} is newer than any version "
                            f"of {fmt.label} the registry knows ({v.named(v.known[0])} to "
                            f"{v.named(v.known[-1])}). {UNKNOWN_MEANS}", extra)
    if extra:
        shown = ", ".join(extra[:6]) + (f" and {len(extra) - 6} more" if len(extra) > 6 else "")
        return VersionCheck("unknown_columns", _newest_of(recorded) if recorded and v else
                            None, f"columns the registry's {fmt.label} does not have: {shown}"
                            f" (a newer version of the program, or another variant). "
                            f"{UNKNOWN_MEANS}", extra)
    if v is None:
        return VersionCheck("unversioned", None, f"{fmt.label} records no version; its "
                            "tables have the columns the registry knows")
    if not recorded:
        return VersionCheck("unrecorded", None, f"the file records no {fmt.label} version; "
                            "its tables have the columns the registry knows")
    newest = _newest_of(recorded)
    return VersionCheck("known", newest, f"{v.named(newest)} is a version the registry "
                        f"knows ({v.named(v.known[0])} to {v.named(v.known[-1])})")


# -- layouts -----------------------------------------------------------------

_AFFINITY = (("INT", INT), ("CHAR", TEXT), ("CLOB", TEXT), ("TEXT", TEXT),
             ("REAL", REAL), ("FLOA", REAL), ("DOUB", REAL))


def _classes(decl: str) -> tuple[str, ...]:
    upper = (decl or "").upper()
    return next((classes for needle, classes in _AFFINITY if needle in upper), ANY)


@lru_cache(maxsize=256)
def parse_columns(table: str, sql: str) -> tuple[tuple[str, str, int, Any, int], ...]:
    """(name, declared type, notnull, default SQL, pk) of a CREATE TABLE,
    parsed by SQLite in a private in-memory database; () if it fails."""
    conn = apsw.Connection(":memory:")
    try:
        conn.execute(sql)
        return tuple(conn.execute("SELECT name, type, \"notnull\", dflt_value, pk "
                                  "FROM pragma_table_info(?)", (table,)))
    except (apsw.Error, UnicodeDecodeError):
        return ()
    finally:
        conn.close()


def _layout(fmt: Format, t: FormatTable, order: tuple[str, ...] | None,
            min_columns: int | None) -> Layout:
    cols = parse_columns(t.name, t.sql)
    pks = [c for c in cols if c[4]]
    alias = pks[0][0] if len(pks) == 1 and pks[0][1].upper() == "INTEGER" else None
    by_name = {c[0]: c for c in cols}
    columns = []
    for name in order or [c[0] for c in cols]:
        _n, decl, notnull, dflt, pk = by_name[name]
        columns.append(Column(name, INT if name == alias else _classes(decl),
                              nullable=not (notnull or pk) or name == alias,
                              check=t.checks.get(name), default=default_literal(dflt)))
    return Layout(t.name, tuple(columns), rowid_column=alias, min_columns=min_columns,
                  orphan_min=t.orphan_min, fmt=fmt.kind)


@lru_cache(maxsize=None)
def table_layouts(fmt: Format, name: str) -> tuple[Layout, ...]:
    """Every physical layout a format's table takes: its statement's order
    first, then the orders of upgraded files."""
    t = fmt.table(name)
    if t is None or not parse_columns(t.name, t.sql):
        return ()
    out = [_layout(fmt, t, None, t.min_columns)]
    out += [_layout(fmt, t, order, oldest) for _label, order, oldest in t.orders]
    return tuple(out)


def format_layouts(fmt: Format) -> tuple[Layout, ...]:
    return tuple(lay for t in fmt.tables for lay in table_layouts(fmt, t.name))


def all_layouts() -> tuple[Layout, ...]:
    """Every layout of every registered foreign format (page 1 lost, no template)."""
    seen: dict[tuple, Layout] = {}
    for fmt in FORMATS:
        for lay in format_layouts(fmt):
            key = (lay.fmt, lay.table, tuple(c.name for c in lay.columns))
            seen.setdefault(key, lay)
    return tuple(seen.values())


def registry_layout(fmt: Format | None, table: str, columns: list[str]) -> Layout | None:
    """The registered layout of ``table`` whose column order is the file's own
    (a file's later columns beyond the registry's are accepted as extras)."""
    if fmt is None:
        return None
    for lay in table_layouts(fmt, table):
        names = [c.name for c in lay.columns]
        if names == list(columns):
            return lay
        if list(columns[:len(names)]) == names:
            return replace(lay, max_extra=len(columns) - len(names))
    return None


def registry_statements(fmt: Format) -> list[tuple[str, str, str, str]]:
    """(type, name, tbl_name, sql) of the tables a format writes, for an
    output whose source schema is lost (indexes, triggers, views and
    virtual tables are not in the registry: a template gives them)."""
    return [("table", t.name, t.name, t.sql) for t in fmt.tables]
