"""Read llm's ``logs.db`` (Simon Willison's `llm` CLI) as import records.

llm logs each prompt/response pair as a row of ``responses`` (``id``,
``model``, ``prompt``, ``system``, ``response``, ``conversation_id``,
``datetime_utc``, and in newer versions ``input_tokens``/``output_tokens``),
grouped by ``conversations`` (``id``, ``name``, ``model``). The file is
opened read-only through sqlite-utils (stdlib sqlite3), which is fine
because it is not a live hermes store.

Mapping: one conversation becomes one session ``llm-<conversation id>``
(source ``llm``, title = conversation name, model = conversation model,
token usage summed). Each response becomes up to three messages in time
order: a ``system`` message when its system prompt differs from the last
one in that conversation, the ``user`` prompt, and the ``assistant``
response (carrying ``model`` and llm's ``response_id``). A response with no
conversation becomes a session of its own, ``llm-response-<id>``. Message
uids are ``llm:<response id>:<role>``, so importing the same logs.db again
adds only responses logged since. Attachments, fragments, tools and schemas
are not imported.

llm 0.36 logs to ``threads/turns/messages/parts`` instead (llm_threads.py);
a file upgraded from an older llm holds both. A conversation that has a
thread of the same id is read from the thread (its chain holds the whole
history), any other from its responses. The file is identified first and
read through a private copy (foreign_copy.py), never opened in place; a
file with no conversation at all is an error, not "0 imported".
"""
from __future__ import annotations

import sqlite3
from contextlib import contextmanager
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterator, TYPE_CHECKING

import sqlite_utils

from ..base import MessageState
from ..sqlitefile import LLM
from . import llm_threads
from .foreign_copy import connect_copy, foreign_copy, identify_source
from .importer import (ImportFileError, ImportResult, MessageIn, ProgressFor, Record, SessionIn,
                       import_records)
from .llm_threads import session_id_for

if TYPE_CHECKING:  # for type hints only
    from ..face import StoreFace

SOURCE = "llm"


@contextmanager
def open_logs(path: str | Path) -> Iterator[sqlite_utils.Database]:
    """An llm logs.db, identified, then read through a private copy."""
    p = Path(path)
    if not p.is_file():
        raise ImportFileError(f"{p} is not a file", path=str(p))
    ident = identify_source(p)
    if ident.kind != LLM:
        raise ImportFileError(f"{p} is {ident.label}, not an llm logs database",
                              path=str(p))
    with foreign_copy(p) as copy:
        db = sqlite_utils.Database(connect_copy(copy))
        try:
            if not ({"responses", "conversations"} <= set(db.table_names())
                    or llm_threads.has_threads(db.conn)):
                raise ImportFileError(f"{p} ({ident.label}) has neither responses nor "
                                      "threads tables", path=str(p))
            yield db
        except sqlite3.DatabaseError as e:
            raise ImportFileError(f"cannot read {p}: {e}", path=str(p)) from e
        finally:
            db.close()


def parse_time(value: Any) -> float:
    """llm's ``datetime_utc`` (ISO text, naive means UTC) as epoch seconds."""
    if not isinstance(value, str):
        raise ImportFileError(f"unreadable datetime_utc {value!r}")
    try:
        dt = datetime.fromisoformat(value.strip())
    except ValueError:
        raise ImportFileError(f"unreadable datetime_utc {value!r}") from None
    if dt.tzinfo is None:
        dt = dt.replace(tzinfo=timezone.utc)
    return dt.timestamp()


def _token_sums(db: sqlite_utils.Database) -> str:
    cols = set(db["responses"].columns_dict)
    parts = [(f"coalesce(sum(r.{c}), 0)" if c in cols else "0") + f" AS {c}"
             for c in ("input_tokens", "output_tokens")]
    return ", ".join(parts)


def _groups(db: sqlite_utils.Database) -> Iterator[dict[str, Any]]:
    if "responses" not in db.table_names():
        return
    threaded = set(llm_threads.thread_ids(db.conn)) if llm_threads.has_threads(db.conn) else set()
    for group in _response_groups(db):
        if group["cid"] is None or group["cid"] not in threaded:
            yield group


def _response_groups(db: sqlite_utils.Database) -> Iterator[dict[str, Any]]:
    tokens = _token_sums(db)
    yield from db.query(
        f"SELECT r.conversation_id AS cid, NULL AS rid, c.name AS name,"
        f" coalesce(c.model, max(r.model)) AS model, min(r.datetime_utc) AS first,"
        f" max(r.datetime_utc) AS last, {tokens} FROM responses r"
        f" LEFT JOIN conversations c ON c.id = r.conversation_id"
        f" WHERE r.conversation_id IS NOT NULL GROUP BY r.conversation_id"
        f" ORDER BY first, cid")
    yield from db.query(
        f"SELECT NULL AS cid, r.id AS rid, NULL AS name, r.model AS model,"
        f" r.datetime_utc AS first, r.datetime_utc AS last, {tokens} FROM responses r"
        f" WHERE r.conversation_id IS NULL GROUP BY r.id ORDER BY first, rid")


def _session(group: dict[str, Any]) -> SessionIn:
    row = {"id": session_id_for(group["cid"], group["rid"]), "parent_session_id": None,
           "source": SOURCE, "model": group["model"], "title": group["name"],
           "started_at": parse_time(group["first"]), "updated_at": parse_time(group["last"]),
           "ended_at": None, "end_reason": None, "message_count": None,
           "tool_call_count": None, "input_tokens": int(group["input_tokens"] or 0),
           "output_tokens": int(group["output_tokens"] or 0), "cache_read_tokens": 0,
           "cache_write_tokens": 0}
    return SessionIn(row)


def _responses(db: sqlite_utils.Database, group: dict[str, Any]) -> Iterator[dict[str, Any]]:
    cols = "id, model, prompt, system, response, datetime_utc"
    if group["cid"] is not None:
        yield from db.query(f"SELECT {cols} FROM responses WHERE conversation_id = ?"
                            " ORDER BY datetime_utc, id", [group["cid"]])
    else:
        yield from db.query(f"SELECT {cols} FROM responses WHERE id = ?", [group["rid"]])


def _messages(sid: str, r: dict[str, Any], last_system: str | None) -> Iterator[MessageIn]:
    ts = parse_time(r["datetime_utc"])
    rid = r["id"]
    if r["system"] and r["system"] != last_system:
        yield MessageIn(sid, f"llm:{rid}:system", ts, MessageState.ACTIVE.value, None, "message",
                        {"role": "system", "content": r["system"]})
    if r["prompt"] is not None:
        yield MessageIn(sid, f"llm:{rid}:user", ts, MessageState.ACTIVE.value, None, "message",
                        {"role": "user", "content": r["prompt"]})
    if r["response"] is not None:
        reply = {"role": "assistant", "content": r["response"], "response_id": str(rid)}
        if r["model"]:
            reply["model"] = r["model"]
        yield MessageIn(sid, f"llm:{rid}:assistant", ts, MessageState.ACTIVE.value, None, "message",
                        reply)


def read_llm_logs(logs: sqlite_utils.Database) -> Iterator[Record]:
    """Sessions and messages of an opened logs.db: the responses layout's
    conversations, then llm 0.36's threads."""
    for group in _groups(logs):
        session = _session(group)
        yield session
        last_system = None
        for r in _responses(logs, group):
            yield from _messages(session.id, r, last_system)
            last_system = r["system"] or last_system
    if llm_threads.has_threads(logs.conn):
        for tid in llm_threads.thread_ids(logs.conn):
            yield from llm_threads.read_thread(logs.conn, tid)


_COUNTED = ("conversations", "responses", "threads", "turns", "messages", "parts")
_LEFT = {"attachments": "attachment bytes (messages keep their references)",
         "fragments": "fragment texts are inlined into the messages that use them",
         "tools": "tool definitions", "tool_calls": "the responses layout's tool calls",
         "tool_results": "the responses layout's tool results", "schemas": "JSON schemas"}


def _survey(logs: sqlite_utils.Database) -> tuple[dict[str, int], list[dict[str, Any]]]:
    names = set(logs.table_names())
    counts = {n: logs[n].count for n in _COUNTED + tuple(_LEFT) if n in names}
    left = [{"table": n, "rows": counts[n], "why": why} for n, why in _LEFT.items()
            if counts.get(n)]
    return counts, left


def import_llm_logs(db: StoreFace, path: str | Path, *, dry_run: bool = False,
                    progress_for: ProgressFor | None = None) -> ImportResult:
    """Import an llm logs.db into the store, idempotent by response and message
    id; a file without a conversation raises ImportFileError."""
    with open_logs(path) as logs:
        result = import_records(db, lambda: read_llm_logs(logs), source_format="llm",
                                path=str(path), dry_run=dry_run, require_end=False,
                                progress_for=progress_for)
        result.tables, result.not_carried = _survey(logs)
    if result.sessions_in_file == 0:
        raise ImportFileError(f"{path} holds no conversations (llm logged nothing yet); "
                              "nothing was imported", path=str(path))
    return result
