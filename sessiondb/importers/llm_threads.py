"""llm 0.36's message store (``threads/turns/messages/parts``) as import records.

From migration m023 on, llm logs a model call as a ``turns`` row of a
``threads`` row; messages are content-addressed (``messages.hash``, chained
by ``parent_hash``) and made of ordered ``parts`` (text, reasoning,
tool_call, tool_result, attachment; text in ``parts.text`` or, when it
borrows fragments, as a ``text_ref`` list in ``parts.payload``). A
thread's transcript is the chain from its ``tip_message_hash`` back to the
root. Messages carry no time of their own: each gets the time of the first
turn that added it (walking back from that turn's tip), else the thread's.

Mapping: thread -> session ``llm-<thread id>`` (title = thread name, model
and token usage from its turns, ``forked_from`` -> parent session). Each
message -> one message dict, uid ``llm:<hash>``: text parts joined as its
content, reasoning parts as ``reasoning``, tool_call parts as
``tool_calls``; each tool_result part becomes a ``tool`` message of its own
(uid ``llm:<hash>:<position>``). Attachment parts keep only their
reference (``attachments``), not their bytes.
"""
from __future__ import annotations

import json
import re
import sqlite3
from datetime import datetime, timezone
from typing import Any, Iterator

from ..base import MessageState
from ..rows import ROLES
from .importer import MessageIn, Record, SessionIn

SOURCE = "llm"
_MAX_CHAIN = 1_000_000
_UNSAFE = re.compile(r"[^A-Za-z0-9_.:@+=-]")


def session_id_for(conversation_id: str | None, response_id: Any) -> str:
    """One id scheme for both of llm's layouts (llm_import's responses too)."""
    raw = f"llm-{conversation_id}" if conversation_id else f"llm-response-{response_id}"
    return _UNSAFE.sub("_", raw)[:128]


def has_threads(conn: sqlite3.Connection) -> bool:
    names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    return {"threads", "turns", "messages", "parts"} <= names


def parse_time(value: Any) -> float | None:
    if not isinstance(value, str):
        return None
    try:
        dt = datetime.fromisoformat(value.strip())
    except ValueError:
        return None
    return (dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt).timestamp()


def thread_ids(conn: sqlite3.Connection) -> list[str]:
    return [r[0] for r in conn.execute("SELECT id FROM threads ORDER BY datetime_utc, id")]


def _chain(conn: sqlite3.Connection, tip: str | None) -> list[str]:
    """Hashes from the root to ``tip``."""
    out: list[str] = []
    seen: set[str] = set()
    while tip is not None and tip not in seen and len(out) < _MAX_CHAIN:
        seen.add(tip)
        out.append(tip)
        row = conn.execute("SELECT parent_hash FROM messages WHERE hash = ?", (tip,)).fetchone()
        tip = row[0] if row else None
    return out[::-1]


def _times(conn: sqlite3.Connection, tid: str, chain: list[str],
           default: float) -> tuple[dict[str, float], dict[str, str]]:
    """Each message's time and model: from the first turn that added it."""
    when: dict[str, float] = {}
    model: dict[str, str] = {}
    for turn in conn.execute("SELECT tip_message_hash, parent_message_hash, model,"
                             " datetime_utc FROM turns WHERE thread_id = ?"
                             " ORDER BY datetime_utc, id", (tid,)):
        t = parse_time(turn[3]) or default
        for h in _chain(conn, turn[0])[::-1]:
            if h in when:
                break
            when[h] = t
            if turn[2]:
                model[h] = turn[2]
    return {h: when.get(h, default) for h in chain}, model


def _session(conn: sqlite3.Connection, sid: str, thread: sqlite3.Row, started: float,
             updated: float) -> SessionIn:
    tokens = conn.execute("SELECT coalesce(sum(input_tokens), 0), coalesce(sum(output_tokens),"
                          " 0), max(model) FROM turns WHERE thread_id = ?",
                          (thread["id"],)).fetchone()
    parent = thread["forked_from"]
    return SessionIn({"id": sid, "parent_session_id": session_id(parent) if parent else None,
                      "source": SOURCE, "model": tokens[2], "title": thread["name"],
                      "started_at": started, "updated_at": updated, "ended_at": None,
                      "end_reason": None, "message_count": None, "tool_call_count": None,
                      "input_tokens": int(tokens[0]), "output_tokens": int(tokens[1]),
                      "cache_read_tokens": 0, "cache_write_tokens": 0})


def session_id(thread_id: str) -> str:
    return session_id_for(thread_id, None)


def read_thread(conn: sqlite3.Connection, tid: str) -> Iterator[Record]:
    thread = conn.execute("SELECT * FROM threads WHERE id = ?", (tid,)).fetchone()
    chain = _chain(conn, thread["tip_message_hash"])
    default = parse_time(thread["datetime_utc"]) or 0.0
    when, models = _times(conn, tid, chain, default)
    stamps = list(when.values()) or [default]
    sid = session_id(tid)
    yield _session(conn, sid, thread, min(stamps + [default]), max(stamps + [default]))
    for h in chain:
        yield from _messages(conn, sid, h, when[h], models.get(h))


def _fragments(conn: sqlite3.Connection, pieces: list[dict[str, Any]]) -> str:
    out = []
    for piece in pieces:
        if "literal" in piece:
            out.append(str(piece["literal"]))
        else:
            row = conn.execute("SELECT content FROM fragments WHERE id = ?",
                               (piece.get("fragment"),)).fetchone()
            out.append(row[0] if row and row[0] is not None else "")
    return "".join(out)


def _part(conn: sqlite3.Connection, row: sqlite3.Row) -> dict[str, Any]:
    payload = json.loads(row["payload"]) if row["payload"] else {}
    if row["text"] is not None:
        payload["text"] = row["text"]
    elif "text_ref" in payload:
        payload["text"] = _fragments(conn, payload.pop("text_ref"))
    payload["type"] = row["type"]
    return payload


def _messages(conn: sqlite3.Connection, sid: str, h: str, ts: float,
              model: str | None) -> Iterator[MessageIn]:
    role = conn.execute("SELECT role FROM messages WHERE hash = ?", (h,)).fetchone()[0]
    parts = [(r["position"], _part(conn, r)) for r in conn.execute(
        "SELECT * FROM parts WHERE message_hash = ? ORDER BY position", (h,))]
    msg: dict[str, Any] = {"role": role if role in ROLES else "user"}
    texts = [p["text"] for _, p in parts if p["type"] == "text"]
    msg["content"] = "".join(texts) if texts else None
    reasoning = [p.get("text", "") for _, p in parts if p["type"] == "reasoning"]
    if reasoning:
        msg["reasoning"] = "".join(reasoning)
    calls = [p for _, p in parts if p["type"] == "tool_call"]
    if calls:
        msg["tool_calls"] = [{"id": c.get("tool_call_id"), "type": "function",
                              "function": {"name": c.get("name"),
                                           "arguments": json.dumps(c.get("arguments", {}))}}
                             for c in calls]
    attachments = [p for _, p in parts if p["type"] == "attachment"]
    if attachments:
        msg["attachments"] = [a.get("attachment") for a in attachments]
    if role != msg["role"]:
        msg["llm_role"] = role
    if model and role == "assistant":
        msg["model"] = model
    results = [(pos, p) for pos, p in parts if p["type"] == "tool_result"]
    if msg["content"] is not None or len(msg) > 2 or not results:
        yield MessageIn(sid, f"llm:{h}", ts, MessageState.ACTIVE.value, None, "message", msg)
    for pos, r in results:
        tool = {"role": "tool", "content": r.get("output", ""),
                "tool_call_id": r.get("tool_call_id"), "name": r.get("name")}
        if r.get("exception") is not None:
            tool["exception"] = r["exception"]
        yield MessageIn(sid, f"llm:{h}:{pos}", ts, MessageState.ACTIVE.value, None, "message", tool)
