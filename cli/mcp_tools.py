"""The read-only tools `hermes mcp serve` offers, without the MCP SDK.

Four tools over the home's store: ``search_sessions``, ``list_sessions``,
``read_session`` and ``session_stats``. Each takes a JSON object of
arguments, checks every one (unknown names, wrong types and out-of-range
values are refused), opens the store read-only (``read_only=True``: never
created, migrated, reindexed or written; see sessiondb/engine/readonly.py),
calls one library function and returns a JSON
document an assistant can quote. Answers are bounded: a message's text is
cut at ``TEXT_CHARS`` and a whole answer at ``max_bytes``, and the answer
says what was cut. No tool takes a path: the store is the one the server
was started on, so a client cannot point it at any other file. Typed
storage errors become `ToolError` with the explanation the CLI prints.

The MCP wiring (mcp_server.py) turns a `ToolError` into a tool result
with ``isError`` set.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Any, Callable

from sessiondb import InvalidInput, StorageError, StoreFace, StoreLocked
from sessiondb.base import Cause, describe_error, validate_session_id
from sessiondb.maintenance import render_text

from .context import AppContext
from .params import parse_when

#: characters of one message's text in an answer (the rest is cut, and said so)
TEXT_CHARS = 2_000
#: bytes of one answer, by default (`hermes mcp serve --max-bytes`)
MAX_BYTES = 32_768
ROLES = ("system", "developer", "user", "assistant", "tool")


class ToolError(Exception):
    """A tool refused its arguments or the store could not answer; the text says why."""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    schema: dict[str, Any]
    run: Callable[[StoreFace, dict[str, Any]], dict[str, Any]]
    list_key: str | None  # the list an over-long answer is cut from


# -- arguments --------------------------------------------------------------------

def _str(maxlen: int = 200, **extra: Any) -> dict[str, Any]:
    return {"type": "string", "minLength": 1, "maxLength": maxlen, **extra}


def _int(lo: int, hi: int, default: int | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"type": "integer", "minimum": lo, "maximum": hi}
    if default is not None:
        spec["default"] = default
    return spec


WHEN = _str(40, description="A date (2026-01-31), a date-time (2026-01-31T14:00, local "
                            "time unless an offset is given) or an age (30m, 12h, 7d, 2w).")


def _schema(props: dict[str, Any], required: tuple[str, ...] = ()) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": list(required),
            "additionalProperties": False}


def check_args(schema: dict[str, Any], args: Any) -> dict[str, Any]:
    """The arguments checked against the tool's schema (the subset it uses),
    defaults filled in; raises ToolError naming the first bad one."""
    if args is None:
        args = {}
    if not isinstance(args, dict):
        raise ToolError("arguments must be a JSON object")
    props = schema["properties"]
    unknown = sorted(set(args) - set(props))
    if unknown:
        raise ToolError(f"unknown argument {unknown[0]!r}; this tool takes: "
                        f"{', '.join(props) or 'no arguments'}")
    for name in schema["required"]:
        if name not in args:
            raise ToolError(f"argument {name!r} is required")
    out = {k: spec.get("default") for k, spec in props.items()}
    for name, value in args.items():
        out[name] = _check(name, props[name], value)
    return out


def _check(name: str, spec: dict[str, Any], value: Any) -> Any:
    kind = spec["type"]
    if kind == "string":
        if not isinstance(value, str) or not spec["minLength"] <= len(value) <= spec["maxLength"]:
            raise ToolError(f"argument {name!r} must be a string of {spec['minLength']}-"
                            f"{spec['maxLength']} characters")
        if "enum" in spec and value not in spec["enum"]:
            raise ToolError(f"argument {name!r} must be one of {', '.join(spec['enum'])}")
    elif kind == "integer":
        if isinstance(value, bool) or not isinstance(value, int) \
                or not spec["minimum"] <= value <= spec["maximum"]:
            raise ToolError(f"argument {name!r} must be an integer from {spec['minimum']} "
                            f"to {spec['maximum']}")
    elif kind == "boolean" and not isinstance(value, bool):
        raise ToolError(f"argument {name!r} must be true or false")
    return value


def _when(args: dict[str, Any], name: str) -> float | None:
    if args.get(name) is None:
        return None
    try:
        return parse_when(args[name])
    except ValueError:
        raise ToolError(f"argument {name!r}: {args[name]!r} is not a date: use 2026-01-31, "
                        "2026-01-31T14:00 or an age such as 7d") from None


def _session_id(value: str) -> str:
    try:
        return validate_session_id(value)
    except InvalidInput as e:
        raise ToolError(str(e)) from None


def iso(t: float | None) -> str | None:
    if t is None:
        return None
    return datetime.fromtimestamp(t, timezone.utc).isoformat(timespec="seconds")


def _cut(text: str, limit: int = TEXT_CHARS) -> tuple[str, bool]:
    return (text, False) if len(text) <= limit else (text[:limit] + "…", True)


# -- the tools ------------------------------------------------------------------------

def _session_doc(s: Any) -> dict[str, Any]:
    return {"id": s.id, "title": s.title, "source": s.source, "model": s.model,
            "parent_session_id": s.parent_session_id, "started": iso(s.started_at),
            "updated": iso(s.updated_at), "ended": iso(s.ended_at),
            "message_count": s.message_count}


def search_sessions(db: StoreFace, args: dict[str, Any]) -> dict[str, Any]:
    if not args["query"].strip():
        raise ToolError("the query is empty; give a word or a \"quoted phrase\"")
    hits = db.search(args["query"], session_id=args["session_id"] and
                     _session_id(args["session_id"]), role=args["role"], source=args["source"],
                     since=_when(args, "since"), until=_when(args, "until"),
                     order=args["order"], include_archived=args["include_archived"],
                     limit=args["limit"])
    stale = db.search_index_stale() is not None
    return {"hits": [{"session_id": h.session_id, "message_id": h.message_id, "role": h.role,
                      "time": iso(h.timestamp), "session_title": h.session_title,
                      "snippet": _cut(" ".join(h.snippet.split()), 600)[0], "state": h.state}
                     for h in hits],
            "index_stale": stale,
            "how_to_read": "read_session with session_id and around_message_id=message_id"}


def list_sessions(db: StoreFace, args: dict[str, Any]) -> dict[str, Any]:
    found = db.list_sessions(source=args["source"], limit=args["limit"],
                             since=_when(args, "since"), before=_when(args, "before"))
    doc: dict[str, Any] = {"sessions": [_session_doc(s) for s in found]}
    if len(found) == args["limit"]:  # maybe more: the next page starts before the last one
        doc["next_page"] = {"before": datetime.fromtimestamp(
            found[-1].started_at, timezone.utc).isoformat()}
    return doc


def _message_doc(m: Any) -> dict[str, Any]:
    text, cut = _cut(render_text(m.message))
    doc: dict[str, Any] = {"id": m.key[1], "position": m.key[0], "role": m.message.get("role"),
                           "time": iso(m.timestamp), "text": text}
    if cut:
        doc["text_truncated"] = True
    if m.state != "active":
        doc["state"] = m.state
    if m.message.get("tool_call_id"):
        doc["tool_call_id"] = m.message["tool_call_id"]
    return doc


def read_session(db: StoreFace, args: dict[str, Any]) -> dict[str, Any]:
    sid = _session_id(args["session_id"])
    around, before, after = (args["around_message_id"], args["before_position"],
                             args["after_position"])
    if around is not None and (before is not None or after is not None):
        raise ToolError("give around_message_id, or before_position/after_position, not both")
    if before is not None and after is not None:
        raise ToolError("give before_position or after_position, not both")
    session = db.get_session(sid)
    archived = args["include_archived"]
    if around is not None:
        rows = db.messages_around(sid, around, context=args["context"],
                                  include_archived=archived)
        page: dict[str, Any] | None = None
    else:
        window = db.message_window(sid, limit=args["limit"], before=before, after=after,
                                   include_archived=archived)
        rows = window.rows
        page = {"total": window.total, "more_before": window.more_before,
                "more_after": window.more_after}
    doc = {"session": _session_doc(session), "messages": [_message_doc(m) for m in rows]}
    if page is not None:
        doc["page"] = page
    return doc


def session_stats(db: StoreFace, args: dict[str, Any]) -> dict[str, Any]:
    stats = db.store_stats()
    keep = ("backend", "sessions", "messages", "messages_by_state", "fts", "usage")
    return {k: stats[k] for k in keep if k in stats}


_ORDER = _str(10, enum=["rank", "newest", "oldest"], default="rank")
TOOLS = {t.name: t for t in (
    Tool("search_sessions",
         "Search the text of stored agent sessions: words, \"quoted phrases\", word* for "
         "prefixes (punctuation is searched as text). Returns hits with session id, message "
         "id, role, time and a snippet; open one with read_session(around_message_id).",
         _schema({"query": _str(1000), "session_id": _str(128), "source": _str(64),
                  "role": _str(16, enum=list(ROLES)), "since": WHEN, "until": WHEN,
                  "order": _ORDER, "include_archived": {"type": "boolean", "default": False},
                  "limit": _int(1, 50, 10)}, ("query",)),
         search_sessions, "hits"),
    Tool("list_sessions",
         "List stored sessions, newest first (id, title, source, model, times, message "
         "count). Page back with 'before' set to the answer's next_page.before.",
         _schema({"limit": _int(1, 200, 20), "source": _str(64), "since": WHEN,
                  "before": WHEN}),
         list_sessions, "sessions"),
    Tool("read_session",
         "Read one session's messages a page at a time: the newest page, the page before "
         "before_position or after after_position, or a search hit with context messages "
         "around around_message_id. Long texts are cut and marked.",
         _schema({"session_id": _str(128), "around_message_id": _int(1, 2**63 - 1),
                  "context": _int(0, 20, 3), "before_position": _int(0, 2**63 - 1),
                  "after_position": _int(0, 2**63 - 1), "limit": _int(1, 100, 20),
                  "include_archived": {"type": "boolean", "default": False}},
                 ("session_id",)),
         read_session, "messages"),
    Tool("session_stats",
         "Count the store's sessions and messages (by state), its search index and the "
         "model usage it recorded.",
         _schema({}), session_stats, None),
)}


# -- one call ---------------------------------------------------------------------------

def bounded(doc: dict[str, Any], list_key: str | None, max_bytes: int) -> str:
    """``doc`` as JSON of at most ``max_bytes`` bytes: items are dropped from the
    end of its list (and the answer says how many) until it fits."""
    text = json.dumps(doc, ensure_ascii=False)
    if len(text.encode()) <= max_bytes or list_key is None or not doc.get(list_key):
        return text
    items = doc[list_key]
    sizes = [len(json.dumps(i, ensure_ascii=False).encode()) + 2 for i in items]
    budget = max_bytes - (len(text.encode()) - sum(sizes)) - 120  # room for the note
    keep = 0
    while keep < len(items) and sizes[keep] <= budget:
        budget -= sizes[keep]
        keep += 1
    cut = {**doc, list_key: items[:keep], "truncated": True,
           "omitted": len(items) - keep,
           "note": f"answer cut to {max_bytes} bytes; ask for fewer or page on"}
    if isinstance(doc.get("page"), dict) and keep:  # read_session: where the next page starts
        cut["page"] = {**doc["page"], "more_after": True}
        cut["next_page"] = {"after_position": items[keep - 1]["position"]}
    return json.dumps(cut, ensure_ascii=False)


def explain(err: StorageError, app: AppContext) -> str:
    """A storage error as the CLI explains it: its line, what it means, what to run."""
    line = " ".join(str(err).split())
    if err.cause in (Cause.NOT_FOUND, Cause.INVALID_INPUT) or not err.concerns_store:
        return line
    failure = describe_error(err, home=app.home, profile=app.profile)
    parts = [line, failure.summary]
    if failure.actions:
        parts.append(f"Next: {failure.actions[0]}")
    return "\n".join(parts)


def call(app: AppContext, name: str, arguments: Any, *, max_bytes: int = MAX_BYTES) -> str:
    """Run tool ``name``; its answer as JSON text, or ToolError."""
    tool = TOOLS.get(name)
    if tool is None:
        raise ToolError(f"no tool {name!r}; the tools are {', '.join(TOOLS)}")
    args = check_args(tool.schema, arguments)
    try:
        doc = _run(app, tool, args)
    except InvalidInput as e:
        raise ToolError(" ".join(str(e).split())) from None
    except StorageError as e:
        raise ToolError(explain(e, app)) from None
    return bounded(doc, tool.list_key, max_bytes)


def _run(app: AppContext, tool: Tool, args: dict[str, Any]) -> dict[str, Any]:
    """The tool on a read-only handle, opened per call so a long-lived server
    holds nothing between calls. Read again once after `locked`: a store read
    without locks that a writer changed meanwhile says so (engine/readonly.py)."""
    for attempt in (1, 2):
        try:
            with app.open_store(read_only=True) as db:
                return tool.run(db, args)
        except StoreLocked:
            if attempt == 2:
                raise
    raise AssertionError("not reached")
