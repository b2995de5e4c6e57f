"""Import Hermes Agent's ``state.db`` (NousResearch/hermes-agent) into a store of ours.

The source is identified first (it must be a Hermes Agent file) and read
through a private copy (foreign_copy.py): the user's file is never opened.
Columns are read by name, so files of every schema version work: Hermes
Agent adds columns one by one, and an upgraded file has them in the order
they were added.

Mapping (idempotent: re-importing adds nothing):

- a session keeps its id, ``parent_session_id`` lineage, source, model,
  title, start/end times, end reason and token counts; ``updated_at`` is
  its latest activity. Its other non-empty columns (cwd, git, billing and
  cost, ``reasoning_tokens``, ...), its system prompt and its raw
  ``session_model_usage`` rows go to ``state_meta`` under
  ``hermes-agent:session:<id>``; the usage rows also become the session's
  usage ledger rows (task ``''`` -> ``turn``), written once, while the
  session's ledger is empty;
- a message keeps its order (Hermes' row id), role, content (text, or a
  block list when the text is one), tool calls, tool call id, tool name,
  finish reason, token count and timestamp; reasoning fields
  (``reasoning``, ``reasoning_content``, ``reasoning_details``, codex items)
  and other non-empty columns become extra keys of the message dict;
- ``active=1`` is live, ``compacted=1`` (absorbed by compression) is our
  ``archived``, inactive and not compacted (rewound) is our ``rewound``;
  ``_compressed_summary`` rows are our ``rolling_summary`` rows.

Message uids are ``hermes-agent:<row id>``. What is not carried over (gateway
and lease state, Hermes' own settings, its FTS index, messages whose role is
not a chat role) is counted in the result with the reason.
"""
from __future__ import annotations

import json
import re
import sqlite3
from pathlib import Path
from typing import Any, Callable, Iterator, TYPE_CHECKING

from ..base import InvalidMessage, MessageState
from ..rows import ROLES, encode, usage
from ..sqlitefile import HERMES_AGENT, SHADOW_SUFFIXES
from .foreign_copy import connect_copy, foreign_copy, identify_source
from .importer import (ImportFileError, ImportResult, MessageIn, ProgressFor, Record, SessionIn,
                       import_records)

if TYPE_CHECKING:  # for type hints only
    from ..face import StoreFace

SOURCE_FORMAT = "hermes-agent"
META_PREFIX = "hermes-agent:session:"
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:@+=-]")

_SESSION_COLUMNS = ("id", "parent_session_id", "source", "model", "title", "started_at",
                    "ended_at", "end_reason", "input_tokens", "output_tokens",
                    "cache_read_tokens", "cache_write_tokens")
_SESSION_DERIVED = ("message_count", "tool_call_count", "system_prompt_hash", "system_prompt")
_MESSAGE_TYPED = ("role", "content", "tool_calls", "tool_call_id", "tool_name",
                  "finish_reason", "token_count")
# Hermes' bookkeeping: mapped to our state and kind, or derived for its own display.
_MESSAGE_FLAGS = ("id", "session_id", "timestamp", "active", "compacted",
                  "_compressed_summary", "display_order", "display_identity")
_JSON_EXTRAS = ("reasoning_details", "codex_reasoning_items", "codex_message_items",
                "display_metadata", "api_content")
CARRIED = ("sessions", "messages", "session_model_usage", "system_prompts")
NOT_CARRIED = {
    "schema_version": "Hermes Agent's own schema version",
    "state_meta": "Hermes Agent's own settings and markers",
    "gateway_routing": "routing state of a running gateway, not transcript data",
    "gateway_hygiene_state": "gateway state, not transcript data",
    "gateway_heartbeats": "liveness of running processes",
    "conversation_generations": "gateway prompt-cache counters",
    "compression_locks": "locks of running processes",
    "session_turn_leases": "turn leases of running processes",
    "async_delegations": "delegation task state, not transcript data",
}


def session_id_for(raw: Any) -> str:
    """Hermes ids are already safe names; anything else is made one."""
    return _UNSAFE.sub("_", str(raw))[:128] or "hermes-agent-session"


def _loads(value: Any) -> Any:
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except ValueError:
        return value


def _content(value: Any) -> Any:
    """Text, or the block list the text is (a JSON list of typed dicts)."""
    if isinstance(value, str) and value.startswith("[{"):
        blocks = _loads(value)
        if isinstance(blocks, list) and blocks and all(
                isinstance(b, dict) and isinstance(b.get("type"), str) for b in blocks):
            return blocks
    return value


def _state(row: sqlite3.Row, cols: set[str]) -> str:
    """The plain value: records go through the import spill's marshal."""
    if "active" not in cols or row["active"] in (None, 1):
        return MessageState.ACTIVE.value
    state = MessageState.ARCHIVED if "compacted" in cols and row["compacted"] else \
        MessageState.REWOUND
    return state.value


def message_dict(row: sqlite3.Row, cols: set[str]) -> dict[str, Any]:
    """One Hermes message row as our message dict (typed fields, then extras)."""
    msg: dict[str, Any] = {"role": row["role"], "content": _content(row["content"])}
    calls = _loads(row["tool_calls"]) if "tool_calls" in cols else None
    if calls:
        msg["tool_calls"] = calls if isinstance(calls, list) else [calls]
    for key, ours in (("tool_call_id", "tool_call_id"), ("tool_name", "name"),
                      ("finish_reason", "finish_reason"), ("token_count", "token_count")):
        if key in cols and row[key] is not None:
            msg[ours] = row[key]
    for key in sorted(cols - set(_MESSAGE_TYPED) - set(_MESSAGE_FLAGS)):
        value = row[key]
        if value is None or value == "" or isinstance(value, bytes):
            continue
        if key == "observed" and value == 0:
            continue
        msg[key] = _loads(value) if key in _JSON_EXTRAS else value
    return msg


class _Reader:
    """The record stream of one copy; counts what it leaves out and why."""

    def __init__(self, conn: sqlite3.Connection) -> None:
        self.conn = conn
        self.scols = _columns(conn, "sessions")
        self.mcols = _columns(conn, "messages")
        self.skipped: dict[str, int] = {}

    def records(self) -> Iterator[Record]:
        self.skipped = {}
        order = "started_at, id" if "started_at" in self.scols else "id"
        for s in self.conn.execute(f"SELECT * FROM sessions ORDER BY {order}"):
            sid = session_id_for(s["id"])
            yield SessionIn(self._session_row(s, sid))
            yield from self._messages(s["id"], sid)

    def _session_row(self, s: sqlite3.Row, sid: str) -> dict[str, Any]:
        get = (lambda k: s[k] if k in self.scols else None)
        last = self.conn.execute("SELECT max(timestamp) FROM messages WHERE session_id = ?",
                                 (s["id"],)).fetchone()[0]
        started = float(get("started_at") or last or 0.0)
        times = [t for t in (started, get("ended_at"), last, get("last_activity_at"))
                 if isinstance(t, (int, float))]
        parent = get("parent_session_id")
        return {"id": sid, "parent_session_id": session_id_for(parent) if parent else None,
                "source": get("source") or "hermes-agent", "model": get("model"),
                "title": get("title"), "started_at": started, "updated_at": max(times),
                "ended_at": get("ended_at"), "end_reason": get("end_reason"),
                "message_count": None, "tool_call_count": None,
                **{k: int(get(k) or 0) for k in ("input_tokens", "output_tokens",
                                                  "cache_read_tokens", "cache_write_tokens")}}

    def _messages(self, raw_sid: Any, sid: str) -> Iterator[MessageIn]:
        for m in self.conn.execute("SELECT * FROM messages WHERE session_id = ? ORDER BY id",
                                   (raw_sid,)):
            if m["role"] not in ROLES:
                self._skip(f"role {m['role']!r} is not a chat role")
                continue
            msg, uid = message_dict(m, self.mcols), f"hermes-agent:{m['id']}"
            try:
                encode(msg, uid=uid)
            except InvalidMessage as e:
                self._skip(f"not a valid message: {e}")
                continue
            summary = "_compressed_summary" in self.mcols and m["_compressed_summary"]
            yield MessageIn(sid, uid, float(m["timestamp"]), _state(m, self.mcols), None,
                            "rolling_summary" if summary else "message", msg)

    def _skip(self, why: str) -> None:
        self.skipped[why] = self.skipped.get(why, 0) + 1


def _columns(conn: sqlite3.Connection, table: str) -> set[str]:
    return {r[1] for r in conn.execute(f'PRAGMA table_info("{table}")')}


def _survey(conn: sqlite3.Connection) -> tuple[dict[str, int], list[dict[str, Any]]]:
    """Rows per table, and the tables not carried over with the reason."""
    names = [r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND name NOT LIKE 'sqlite_%'"
        " ORDER BY name")]
    virtual = {r[0] for r in conn.execute(
        "SELECT name FROM sqlite_master WHERE type='table' AND sql LIKE 'CREATE VIRTUAL%'")}
    counts, left = {}, []
    for name in names:
        if any(name.startswith(v + "_") and name[len(v):] in SHADOW_SUFFIXES
               for v in virtual):
            continue  # an FTS shadow table, counted with its index
        n = 0 if name in virtual else conn.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0]
        if name in virtual:
            left.append({"table": name, "rows": None, "why": "Hermes Agent's search index; "
                         "hermes-state builds its own from the messages"})
        elif name not in CARRIED:
            counts[name] = n
            if n:
                left.append({"table": name, "rows": n, "why": NOT_CARRIED.get(
                    name, "not session or message data hermes-state knows")})
        else:
            counts[name] = n
    return counts, left


def _session_meta(conn: sqlite3.Connection, scols: set[str]) -> Iterator[tuple[str, str]]:
    """(state_meta key, JSON) per session: the columns we have no place for,
    its system prompt and its per-model usage rows."""
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    extra = sorted(scols - set(_SESSION_COLUMNS) - {"message_count", "tool_call_count"})
    for s in conn.execute("SELECT * FROM sessions ORDER BY id"):
        doc: dict[str, Any] = {"columns": {k: s[k] for k in extra
                                           if s[k] not in (None, "") and k != "system_prompt"}}
        doc["system_prompt"] = _system_prompt(conn, s, scols, tables)
        if "session_model_usage" in tables:
            doc["model_usage"] = [dict(r) for r in conn.execute(
                "SELECT * FROM session_model_usage WHERE session_id = ? ORDER BY rowid",
                (s["id"],))]
        yield META_PREFIX + session_id_for(s["id"]), json.dumps(doc, sort_keys=True)


def _system_prompt(conn: sqlite3.Connection, s: sqlite3.Row, scols: set[str],
                   tables: set[str]) -> str | None:
    if "system_prompt" in scols and s["system_prompt"]:
        return s["system_prompt"]
    if "system_prompt_hash" in scols and s["system_prompt_hash"] and "system_prompts" in tables:
        row = conn.execute("SELECT prompt FROM system_prompts WHERE hash = ?",
                           (s["system_prompt_hash"],)).fetchone()
        return row[0] if row else None
    return None


def _write_meta(db: StoreFace, pairs: Iterator[tuple[str, str]], chunk: int = 500) -> int:
    written, batch = 0, []
    for pair in pairs:
        batch.append(pair)
        if len(batch) >= chunk:
            written += _upsert(db, batch)
            batch = []
    return written + (_upsert(db, batch) if batch else 0)


def _upsert(db: StoreFace, batch: list[tuple[str, str]]) -> int:
    with db.atomic() as conn:
        for key, value in batch:
            conn.execute("INSERT INTO state_meta(key, value) VALUES (?, ?) ON CONFLICT(key)"
                         " DO UPDATE SET value = excluded.value", (key, value))
    return len(batch)


_TASK_UNSAFE = re.compile(r"[^a-z0-9_]")


def ledger_task(task: Any) -> str:
    """Hermes' usage task as our ledger's: '' (the conversation) is ``turn``."""
    name = _TASK_UNSAFE.sub("_", str(task or "").lower())[:40]
    return name if name[:1].isalpha() else usage.TASK_TURN if not name else f"t_{name}"[:40]


def _usage_rows(conn: sqlite3.Connection) -> Iterator[tuple[str, list[sqlite3.Row]]]:
    if "session_model_usage" not in {r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type='table'")}:
        return
    rows: dict[str, list[sqlite3.Row]] = {}
    for r in conn.execute("SELECT * FROM session_model_usage ORDER BY session_id, rowid"):
        rows.setdefault(session_id_for(r["session_id"]), []).append(r)
    yield from rows.items()


def _write_usage(db: StoreFace, conn: sqlite3.Connection) -> int:
    """``session_model_usage`` into our usage ledger, for sessions whose ledger
    is still empty (so a re-import, or a session used since, is not counted twice)."""
    written = 0
    for sid, rows in _usage_rows(conn):
        with db.atomic() as c:
            if not c.execute("SELECT 1 FROM sessions WHERE id = ?", (sid,)).fetchone() or \
                    c.execute("SELECT 1 FROM usage_ledger WHERE session_id = ?",
                              (sid,)).fetchone():
                continue
            for r in rows:
                written += _ledger_row(c, sid, r)
    return written


def _ledger_row(c: Any, sid: str, r: sqlite3.Row) -> int:
    keys = set(r.keys())
    get: Callable[[str], Any] = (lambda k: r[k] if k in keys else None)
    cost = get("actual_cost_usd") or get("estimated_cost_usd") or None
    last = get("last_seen") or get("first_seen") or 0.0
    task, provider = ledger_task(get("task")), get("billing_provider") or ""
    added = usage.add(c, sid, float(last), task=task, model=get("model"), provider=provider,
                      cost_usd=cost, api_calls=int(get("api_call_count") or 0),
                      **{k: int(get(k) or 0) for k in ("input_tokens", "output_tokens",
                                                       "cache_read_tokens",
                                                       "cache_write_tokens",
                                                       "reasoning_tokens")})
    if added and get("first_seen") is not None:
        c.execute("UPDATE usage_ledger SET first_at = min(first_at, ?) WHERE session_id = ?"
                  " AND task = ? AND model = ? AND provider = ?",
                  (float(get("first_seen")), sid, task, get("model") or "", provider))
    return int(added)


def import_hermes_agent(db: StoreFace, path: str | Path, *, dry_run: bool = False,
                        progress_for: ProgressFor | None = None) -> ImportResult:
    """Import a Hermes Agent state.db (read through a private copy), idempotently."""
    ident = identify_source(Path(path))
    if ident.kind != HERMES_AGENT:
        raise ImportFileError(f"{path} is {ident.label}, not a Hermes Agent state.db",
                              path=str(path))
    with foreign_copy(path) as copy:
        conn = connect_copy(copy)
        try:
            counts, left = _survey(conn)
            if not counts.get("sessions"):
                raise ImportFileError(f"{path} ({ident.label}) holds no sessions; "
                                      "nothing to import", path=str(path))
            reader = _Reader(conn)
            result = import_records(db, reader.records, source_format=SOURCE_FORMAT,
                                    path=str(path), dry_run=dry_run, require_end=False,
                                    progress_for=progress_for)
            if not dry_run:
                _write_meta(db, _session_meta(conn, reader.scols))
                _write_usage(db, conn)
        except sqlite3.DatabaseError as e:
            raise ImportFileError(f"cannot read {path}: {e}; try `sessions recover` on it "
                                  "first", path=str(path)) from e
        finally:
            conn.close()
    result.tables = counts
    result.not_carried = left + [{"table": "messages", "rows": n, "why": why}
                                 for why, n in sorted(reader.skipped.items())]
    return result
