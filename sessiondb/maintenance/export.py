"""Streaming export of sessions as JSONL, JSON or Markdown.

Sessions and their messages are read a page at a time (see `pages`) and
written as they are read, so memory stays bounded however large the store
or a transcript is. JSONL is the interchange format `importer` reads back:

    {"type": "header", "format": "hermes-export", "version": 1, "exported_at": ISO}
    {"type": "session", "session": {<every Session field>},
     "usage": [{<a usage ledger row: task, model, provider, counters, cost, times>}]}
    {"type": "message", "session_id", "uid", "timestamp", "state",
     "compaction_id", "kind", "message": {<the message dict, no markers>}}
    ... (each session's messages follow its session line, in order)
    {"type": "graph_checkpoint" | "graph_blob" | "graph_write", "session_id",
     "row": {<the row's columns but id and session_id; bytes as base64>}}
    ... (a LangGraph thread's rows follow its session's messages)
    {"type": "end", "sessions": N, "messages": M,
     "graph_rows": {"graph_checkpoints": C, "graph_blobs": B, "graph_writes": W}}

JSON is one document with the messages nested per session (no graph rows);
Markdown is for reading only. ``usage`` (the session's usage ledger rows)
and the graph records (with the end record's ``graph_rows``) were added
within version 1: a file without them imports as before, an older reader
ignores ``usage`` and ``graph_rows``, and a file with graph records is
refused by an older reader as an unknown record type (nothing imported).
"""
from __future__ import annotations

import base64
import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, IO, Iterator, TYPE_CHECKING

from ..base import InvalidInput, SessionNotFound, check_output, private_output, validate_session_id
from ..rows import Session, StoredMessage, checkpoints, pages, sessions, usage
from .render import markdown_message, markdown_session_header

if TYPE_CHECKING:  # for type hints only
    from ..base import Core

FORMATS = ("jsonl", "json", "markdown")
EXPORT_FORMAT = "hermes-export"
EXPORT_VERSION = 1
SESSION_PAGE = 200
MESSAGE_PAGE = 500
#: Graph rows per read (a row may hold a whole graph state).
GRAPH_PAGE = 50

Progress = Callable[[int], None]


@dataclass(frozen=True)
class ExportSummary:
    """What an export wrote."""

    format: str
    sessions: int
    messages: int
    output: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"format": self.format, "sessions": self.sessions, "messages": self.messages,
                "output": self.output}


def _dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, sort_keys=True, separators=(",", ":"))


def iso_utc(ts: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(ts))


def _session(core: "Core", session_id: str) -> Session:
    with core.read() as conn:
        return sessions.get(conn, session_id)


def selected_sessions(core: "Core", session_ids: list[str] | None) -> Iterator[Session]:
    """The named sessions in the order given, or every session oldest first."""
    if session_ids is not None:
        for sid in session_ids:
            yield _session(core, sid)
        return
    after = None
    while True:
        with core.read() as conn:
            page = pages.session_page(conn, after=after, limit=SESSION_PAGE)
        yield from page
        if len(page) < SESSION_PAGE:
            return
        after = (page[-1].started_at, page[-1].id)


def session_messages(core: "Core", session_id: str, *,
                     include_archived: bool = True) -> Iterator[StoredMessage]:
    """Every message row of a session in order, one bounded page at a time."""
    after: pages.MessageKey | None = None
    while True:
        with core.read() as conn:
            if after is None:
                sessions.require(conn, session_id)
            page = pages.message_page(conn, session_id, after=after, limit=MESSAGE_PAGE,
                                      include_archived=include_archived)
        yield from page
        if len(page) < MESSAGE_PAGE:
            return
        after = page[-1].key


def message_window(core: "Core", session_id: str, message_id: int, *, context: int = 3,
                   include_archived: bool = False) -> list[StoredMessage]:
    """A search hit in its place: message ``message_id`` of the session with
    ``context`` messages either side. Raises SessionNotFound when the session
    does not hold that message."""
    if isinstance(context, bool) or not isinstance(context, int) or context < 0:
        raise InvalidInput("context must be a non-negative integer")
    with core.read() as conn:
        window = pages.message_window(conn, session_id, message_id, context=context,
                                      include_archived=include_archived)
    if window is None:
        _session(core, session_id)  # an unknown session says so first
        raise SessionNotFound(f"session {session_id!r} has no message {message_id}")
    return window


def session_record(core: "Core", session: Session) -> dict[str, Any]:
    """The session's row and its usage ledger rows."""
    with core.read() as conn:
        rows = usage.ledger_rows(conn, session.id)
    return {"session": session.to_dict(), "usage": rows}


def message_record(session_id: str, m: StoredMessage) -> dict[str, Any]:
    """The per-message fields an export carries (the row key stays private)."""
    return {"session_id": session_id, "uid": m.uid, "timestamp": m.timestamp,
            "state": m.state, "compaction_id": m.compaction_id, "kind": m.kind,
            "message": m.message}


def graph_records(core: "Core", session_id: str) -> Iterator[dict[str, Any]]:
    """The session's LangGraph rows as export records, table by table, one
    bounded page at a time."""
    for kind, table in checkpoints.RECORD_TYPES.items():
        columns = checkpoints.EXPORT_COLUMNS[table]
        after = 0
        while True:
            with core.read() as conn:
                page = checkpoints.session_page(conn, table, session_id, after, GRAPH_PAGE)
            for rid, *values in page:
                row = {c: _b64(v) if c in checkpoints.BYTES_COLUMNS else v
                       for c, v in zip(columns, values)}
                yield {"type": kind, "session_id": session_id, "row": row}
            if len(page) < GRAPH_PAGE:
                break
            after = page[-1][0]


def _b64(value: Any) -> str | None:
    return None if value is None else base64.b64encode(bytes(value)).decode("ascii")


class _Counter:
    def __init__(self, progress: Progress | None) -> None:
        self.sessions = self.messages = 0
        self.graph_rows = dict.fromkeys(checkpoints.TABLES, 0)
        self._progress = progress

    def tick(self, n: int = 1) -> None:
        self.messages += n
        if self._progress is not None:
            self._progress(n)


def _write_jsonl(core: "Core", ids: list[str] | None, out: IO[str], count: _Counter) -> None:
    out.write(_dumps({"type": "header", "format": EXPORT_FORMAT, "version": EXPORT_VERSION,
                      "exported_at": iso_utc(time.time())}) + "\n")
    for session in selected_sessions(core, ids):
        count.sessions += 1
        out.write(_dumps({"type": "session", **session_record(core, session)}) + "\n")
        for m in session_messages(core, session.id):
            out.write(_dumps({"type": "message", **message_record(session.id, m)}) + "\n")
            count.tick()
        for record in graph_records(core, session.id):
            out.write(_dumps(record) + "\n")
            count.graph_rows[checkpoints.RECORD_TYPES[record["type"]]] += 1
    end: dict[str, Any] = {"type": "end", "sessions": count.sessions,
                           "messages": count.messages}
    if any(count.graph_rows.values()):
        end["graph_rows"] = count.graph_rows
    out.write(_dumps(end) + "\n")


def _write_json(core: "Core", ids: list[str] | None, out: IO[str], count: _Counter) -> None:
    head = _dumps({"format": EXPORT_FORMAT, "version": EXPORT_VERSION,
                   "exported_at": iso_utc(time.time())})
    out.write(head[:-1] + ',"sessions":[')
    for session in selected_sessions(core, ids):
        out.write(("," if count.sessions else "") + "\n")
        count.sessions += 1
        out.write(_dumps(session_record(core, session))[:-1] + ',"messages":[')
        first = True
        for m in session_messages(core, session.id):
            record = message_record(session.id, m)
            del record["session_id"]
            out.write(("" if first else ",") + "\n" + _dumps(record))
            first = False
            count.tick()
        out.write("]}")
    out.write("\n]," + _dumps({"totals": {"sessions": count.sessions,
                                          "messages": count.messages}})[1:] + "\n")


def _write_markdown(core: "Core", ids: list[str] | None, out: IO[str], count: _Counter) -> None:
    for session in selected_sessions(core, ids):
        out.write(("\n" if count.sessions else "") + markdown_session_header(session))
        count.sessions += 1
        for m in session_messages(core, session.id):
            out.write(markdown_message(m))
            count.tick()


_WRITERS = {"jsonl": _write_jsonl, "json": _write_json, "markdown": _write_markdown}


def check_format(fmt: str) -> None:
    if fmt not in FORMATS:
        raise InvalidInput(f"unknown export format {fmt!r}; use one of {', '.join(FORMATS)}")


def check_sessions(core: "Core", session_ids: list[str] | None) -> None:
    """Every named session is well-formed (InvalidInput) and exists (SessionNotFound)."""
    for sid in session_ids or ():
        validate_session_id(sid)
    for sid in session_ids or ():
        _session(core, sid)


def export_sessions(core: "Core", session_ids: list[str] | None, fmt: str, out: IO[str], *,
                    progress: Progress | None = None) -> ExportSummary:
    """Write the named sessions (``None``: all) to ``out`` in ``fmt``, streaming."""
    check_format(fmt)
    check_sessions(core, session_ids)
    count = _Counter(progress)
    _WRITERS[fmt](core, session_ids, out, count)
    return ExportSummary(fmt, count.sessions, count.messages, None)


def export_to_path(core: "Core", session_ids: list[str] | None, fmt: str,
                   path: str | os.PathLike[str], *,
                   force: bool = False, progress: Progress | None = None) -> ExportSummary:
    """Export into a new private file at ``path`` (crash-safe; see `outfile`)."""
    target = Path(path)
    check_format(fmt)
    check_output(target, force=force)
    check_sessions(core, session_ids)
    with private_output(target, force=force) as out:
        summary = export_sessions(core, session_ids, fmt, out, progress=progress)
    return ExportSummary(fmt, summary.sessions, summary.messages, str(target))
