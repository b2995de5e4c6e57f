"""Claude Code's transcripts (``~/.claude/projects/<project>/<session>.jsonl``) as import records.

Each line is one JSON object with a ``type``. ``user`` and ``assistant``
lines are messages: ``uuid``, ``parentUuid``, ``sessionId``, ``timestamp``
(ISO 8601), ``cwd``, ``gitBranch``, ``version``, ``isSidechain``, and a
``message`` in the Messages API's shape (``content`` a string or a list of
``text``, ``thinking``, ``tool_use``, ``tool_result``, ``image`` blocks; an
assistant's ``model``, ``id``, ``stop_reason`` and ``usage``). One API
response is often written as several lines (one per content block) sharing
``message.id``. Other lines are not messages: ``summary`` (a title for the
conversation whose last message is ``leafUuid``), ``file-history-snapshot``,
``queue-operation``, ``system`` events, ``progress``.

Mapping (idempotent: uids are the lines' own ``uuid``):

- the file is a session ``claude-code-<file name>`` (source ``claude-code``),
  titled by the summary whose ``leafUuid`` is one of its lines, else by its
  first prompt; model, times and token totals from its lines; working
  directory, git branch and client version in ``state_meta`` under
  ``claude-code:session:<id>``;
- sidechain lines (a subagent's conversation: inline in older clients, in
  ``agent-<id>.jsonl`` files in newer ones) are a child session per agent
  (``agentId``; without one, per chain of ``parentUuid``), with the
  conversation's session as parent;
- an assistant line is an assistant message (text as its content,
  ``tool_use`` blocks as tool calls, thinking as ``reasoning``); a user
  line is a user message and each ``tool_result`` block a tool message;
- usage is counted once per API response (``message.id``) into the
  session's usage ledger, per model.
"""
from __future__ import annotations

import json
import json.encoder
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Callable, Iterator

from ..base import MessageState
from ..rows import usage as ledger
from .import_spill import encoded_from
from .importer import MessageIn, Record, SessionIn, encoded_ahead
from . import log_lines
from .log_lines import (HOLD_MESSAGES, LineReport, RecordFile, file_time, iso_time, open_log,
                        read_lines, safe_id, text_of, title_from)

SOURCE = "claude-code"
FILES = re.compile(r"[^.].*\.jsonl")
NOT_MESSAGES = frozenset({"summary", "file-history-snapshot", "queue-operation", "system",
                          "progress"})
_ACTIVE = MessageState.ACTIVE.value
_NOT_PROMPTS = ("<command-", "<local-command-", "Caveat:", "[Request interrupted")
_CONTEXT = (("cwd", "cwd"), ("gitBranch", "git_branch"), ("version", "version"))
_ASSISTANT_KEYS = (("model", "model"), ("stop_reason", "finish_reason"), ("id", "response_id"))
_USAGE = (("input_tokens", "input_tokens"), ("output_tokens", "output_tokens"),
          ("cache_read_input_tokens", "cache_read_tokens"),
          ("cache_creation_input_tokens", "cache_write_tokens"))


@dataclass
class _Group:
    """One session the file holds: the conversation, or one sidechain."""

    id: str
    parent: str | None = None
    #: sidechains only: their messages, held (a MessageIn) or where they
    #: are in the spill (an offset)
    offsets: list[Any] = field(default_factory=list)
    messages: int = 0
    first: float | None = None
    last: float | None = None
    prompt: str | None = None
    model: str | None = None
    context: dict[str, str] = field(default_factory=dict)
    usage: dict[str, dict[str, Any]] = field(default_factory=dict)
    responses: set[str] = field(default_factory=set)

    def saw(self, obj: dict[str, Any], kind: str, when: float) -> None:
        self.messages += 1
        if self.first is None or self.last is None:
            self.first = self.last = when
        elif when < self.first:
            self.first = when
        elif when > self.last:
            self.last = when
        get, context = obj.get, self.context
        for key, ours in _CONTEXT:
            value = get(key)
            if value and isinstance(value, str):
                context[ours] = value
        if kind == "assistant":
            self._count(obj["message"], when)
        elif self.prompt is None and not get("isMeta"):
            self.prompt = _prompt(obj["message"].get("content"))

    def _count(self, message: dict[str, Any], when: float) -> None:
        model = message.get("model")
        if not isinstance(model, str) or not model or model.startswith("<"):
            return
        self.model = model
        rid, usage = message.get("id"), message.get("usage")
        if not isinstance(usage, dict) or (isinstance(rid, str) and rid in self.responses):
            return
        if isinstance(rid, str):
            self.responses.add(rid)
        row = self.usage.get(model)
        if row is None:  # (setdefault would build this dict for every response)
            row = self.usage[model] = {"task": "turn", "model": model, "provider": "anthropic",
                                       "api_calls": 0, "first_at": when, "last_at": when}
        row["api_calls"] += 1
        if when > row["last_at"]:
            row["last_at"] = when
        for theirs, ours in _USAGE:
            n = usage.get(theirs)
            if isinstance(n, int) and not isinstance(n, bool) and n > 0:
                row[ours] = row.get(ours, 0) + n

    def session(self, source: str, title: str | None) -> SessionIn:
        totals = {k: sum(r.get(k, 0) for r in self.usage.values())
                  for _, k in _USAGE}
        first = self.first or 0.0
        return SessionIn({"id": self.id, "parent_session_id": self.parent, "source": source,
                          "model": self.model, "title": title or self.prompt,
                          "started_at": first, "updated_at": self.last or first,
                          "ended_at": None, "end_reason": None, "message_count": None,
                          "tool_call_count": None, **totals},
                         usage=ledger.check_ledger_rows(list(self.usage.values())))


def _prompt(content: Any) -> str | None:
    text = text_of(content)
    if text is None or text.lstrip().startswith(_NOT_PROMPTS):
        return None
    return title_from(text)


def _message_line(obj: dict[str, Any]) -> bool:
    """A user or assistant line in the shape this reader knows."""
    message = obj.get("message")
    return (isinstance(obj.get("uuid"), str) and bool(obj["uuid"])
            and isinstance(message, dict)
            and isinstance(message.get("content"), (str, list)))


class ClaudeCodeReader:
    """The record stream of one transcript file, and what it left out."""

    source_format = SOURCE

    def __init__(self, path: Path) -> None:
        self.path = path
        self.report = LineReport(str(path))
        self.stem = safe_id(path.stem)
        self.groups: dict[str, _Group] = {}
        self.title: str | None = None
        self._side_roots: dict[str, str] = {}  # sidechain line uuid -> its group key
        #: lines the store refused (see log_import.py): left out of the next attempt
        self.refused: set[int] = set()
        self._scanned: tuple[RecordFile, RecordFile] | None = None  # see `adopt`
        #: the conversation's messages held between the passes (see HOLD_BYTES)
        self._held: list[MessageIn] = []
        #: encode each message during the scan (a worker's, see `prescan`)
        self.encode = False

    def records(self) -> Iterator[Record]:
        """One pass over the file learns each session's row (title, model,
        times, usage) and keeps its messages, already mapped (the file's
        bulk, such as ``toolUseResult``, is left behind): those of its first
        HOLD_BYTES of lines in memory, the rest spilled to private temporary
        files (marshal), so a large file costs no more memory than a small
        one; then each session's row and its messages are yielded, the
        conversation first. A file another process scanned (`adopt`) is only
        yielded."""
        scanned, self._scanned = self._scanned, None
        if scanned is None:
            scanned = RecordFile(), RecordFile()
            try:
                self.scan(*scanned)
            except BaseException:
                for rf in scanned:
                    rf.__exit__()
                raise
        with scanned[0] as main, scanned[1] as sides:
            yield from self._emit(main, sides)
        self._held = []
        for g in self.groups.values():  # a run of many files keeps only the rows' facts
            g.offsets, g.responses = [], set()

    def scan(self, main: RecordFile, sides: RecordFile) -> None:
        """The first pass: the file's sessions learnt, its messages spilled."""
        self.report, self.groups, self.title, self._side_roots = (
            LineReport(str(self.path)), {}, None, {})
        with open_log(self.path) as f:
            self._scan(f, main, sides)
        self._side_roots = {}

    def prescan(self, directory: str) -> list[str]:
        """`scan` into named record files in ``directory`` (in a worker
        process, log_prescan.py); returns their names."""
        files = RecordFile(directory), RecordFile(directory)
        self.encode = True  # the import's check then finds the rows made
        try:
            self.scan(*files)
        finally:
            names = [rf.handed_over() for rf in files]
        return names

    def adopt(self, scanned: "ClaudeCodeReader", names: list[str]) -> None:
        """Take the first pass another process made of this file (`prescan`)."""
        self.report, self.groups, self.title = scanned.report, scanned.groups, scanned.title
        main, sides = (RecordFile.adopt(n) for n in names)
        self._scanned = main, sides

    def meta(self) -> Iterator[tuple[str, dict[str, Any]]]:
        """(session id, working directory, branch, client version, file) per session."""
        for g in self.groups.values():
            if g.messages:
                yield g.id, {**g.context, "path": str(self.path)}

    def lineage(self) -> list[tuple[str, str]]:
        """(child, parent) of each sidechain session."""
        return [(g.id, g.parent) for g in self.groups.values()
                if g.parent is not None and g.messages]

    def conversations(self) -> list[str]:
        """The file's own conversation (not a sidechain), if it has one."""
        main = self.groups.get("")
        return [main.id] if main is not None and main.messages else []

    # -- first pass -----------------------------------------------------------

    def _scan(self, f: BinaryIO, main: RecordFile, sides: RecordFile) -> None:
        summaries: dict[str, str] = {}
        when = file_time(self.path)
        held: list[MessageIn] = []
        self._held = held
        # a worker's pass (`encode`) hands everything over in files
        hold, kept = 0 if self.encode else log_lines.HOLD_BYTES, 0
        for line in read_lines(f, self.report):
            obj = line.obj
            kind = obj.get("type")
            if kind == "user" or kind == "assistant":
                if not _message_line(obj):
                    self.report.skip(line.number, f"a {kind} line without a uuid and message")
                    continue
                when = iso_time(obj.get("timestamp")) or when
                group = self._group_of(obj)
                group.saw(obj, kind, when)
                side = group.parent is not None
                if line.offset < hold and kept < HOLD_MESSAGES:
                    recs = messages_of(group.id, obj, when, line.number)
                    kept += len(recs)
                    (group.offsets if side else held).extend(recs)
                else:
                    for rec in messages_of(group.id, obj, when, line.number):
                        row = spilled(rec, self.encode)
                        if side:
                            group.offsets.append(sides.write(row))
                        else:
                            main.write(row)
                if self.title is None and obj["uuid"] in summaries:
                    self.title = summaries[obj["uuid"]]
            elif kind == "summary" and isinstance(obj.get("summary"), str):
                summaries[str(obj.get("leafUuid"))] = title_from(obj["summary"]) or ""
                self.report.not_messages[kind] += 1
            elif isinstance(kind, str) and kind in NOT_MESSAGES:
                self.report.not_messages[kind] += 1
            elif isinstance(kind, str):
                self.report.unknown_types[kind] += 1
            else:
                self.report.skip(line.number, "not a known shape (no 'type')")

    def _group_of(self, obj: dict[str, Any]) -> _Group:
        if not obj.get("isSidechain"):
            group = self.groups.get("")
            if group is None:
                group = self.groups[""] = _Group(f"claude-code-{self.stem}")
            return group
        main = f"claude-code-{self.stem}"
        conversation = obj.get("sessionId")
        parent = (f"claude-code-{safe_id(conversation)}" if isinstance(conversation, str)
                  and conversation else main)
        agent = obj.get("agentId")
        if isinstance(agent, str) and agent:
            key = f"agent-{safe_id(agent)}"
        else:  # an older client: one sidechain per chain of parentUuid
            key = self._side_roots.get(str(obj.get("parentUuid")), f"sidechain-{obj['uuid']}")
            self._side_roots[obj["uuid"]] = key
        if key not in self.groups:
            self.groups[key] = _Group(safe_id(f"{parent}-{key}"), parent=parent)
        return self.groups[key]

    # -- second pass ----------------------------------------------------------

    def _emit(self, main: RecordFile, sides: RecordFile) -> Iterator[Record]:
        conversation = self.groups.get("")
        refused = self.refused
        if conversation is not None:
            yield conversation.session(SOURCE, self.title)
            for m in self._held:
                if m.line not in refused:
                    yield m
            for rec in main:
                if rec[7] not in refused:
                    yield unspilled(rec)
        for key, group in self.groups.items():
            if not key:
                continue
            yield group.session(SOURCE, None)
            for at in group.offsets:
                m = at if isinstance(at, MessageIn) else unspilled(sides.at(at))
                if m.line not in refused:
                    yield m


def spilled(rec: MessageIn, encode: bool) -> tuple[Any, ...]:
    """A message as spilled between the passes: its fields, and with
    ``encode`` its checked row instead of its dict (None: the import's check
    refuses it and names the line)."""
    row = encoded_ahead(rec) if encode else None
    return (*rec[:6], rec.message if row is None else None, rec.line, row)


def unspilled(rec: tuple[Any, ...]) -> MessageIn:
    return MessageIn._make((*rec[:8], None if rec[8] is None else encoded_from(rec[8])))


# -- one line as our messages ---------------------------------------------------

def _extras(obj: dict[str, Any], msg: dict[str, Any]) -> dict[str, Any]:
    get = obj.get
    parent = get("parentUuid")
    if isinstance(parent, str):
        msg["parent_uid"] = "claude-code:" + parent
    if get("isMeta"):
        msg["is_meta"] = True
    if get("isCompactSummary"):
        msg["is_compact_summary"] = True
    return msg


def messages_of(sid: str, obj: dict[str, Any], when: float,
                number: int | None = None) -> list[MessageIn]:
    """The messages of one user or assistant line (uid ``claude-code:<uuid>``;
    a user line's tool results ``claude-code:<uuid>:<n>``)."""
    uid = "claude-code:" + obj["uuid"]
    if obj["type"] == "assistant":
        return [MessageIn(sid, uid, when, _ACTIVE, None, "message",
                          _extras(obj, assistant_message(obj["message"])), number)]
    content = obj["message"]["content"]
    if isinstance(content, str):
        return [MessageIn(sid, uid, when, _ACTIVE, None, "message",
                          _extras(obj, {"role": "user", "content": content}), number)]
    texts: list[str] = []
    others: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    rest = False  # any block that is not a tool result
    for block in content:
        if isinstance(block, dict):
            kind = block.get("type")
            if kind == "tool_result":
                results.append(block)
                continue
            rest = True
            if kind == "text":
                text = block.get("text")
                if isinstance(text, str):
                    texts.append(text)
                continue
        rest = True
        others.append(_block_ref(block))
    out = []
    if rest or not results:
        msg: dict[str, Any] = {"role": "user", "content": "\n".join(texts) if texts else None}
        if others:
            msg["attachments"] = others
        out.append(MessageIn(sid, uid, when, _ACTIVE, None, "message", _extras(obj, msg), number))
    for n, block in enumerate(results):
        tool: dict[str, Any] = {"role": "tool", "content": text_of(block.get("content")) or "",
                                "tool_call_id": str(block.get("tool_use_id") or "")}
        if block.get("is_error"):
            tool["is_error"] = True
        out.append(MessageIn(sid, f"{uid}:{n}", when, _ACTIVE, None, "message",
                             _extras(obj, tool), number))
    return out


def _block_ref(block: Any) -> dict[str, Any]:
    """A non-text block by its type and media type (never its bytes)."""
    if not isinstance(block, dict):
        return {"type": type(block).__name__}
    ref = {"type": str(block.get("type"))}
    source = block.get("source")
    if isinstance(source, dict) and isinstance(source.get("media_type"), str):
        ref["media_type"] = source["media_type"]
    return ref


def _arguments_json() -> Callable[[Any], str]:
    """``json.dumps`` with its default options, as one C encoder made once:
    ``json.dumps`` builds a new one each call, which cost as much as the
    rest of an assistant line's mapping. Without circular-reference markers:
    the values come from parsed JSON, which cannot hold a cycle."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:  # no C accelerator: json.dumps itself
        return json.dumps
    encoder = make(None, json.JSONEncoder().default, json.encoder.encode_basestring_ascii,
                   None, ": ", ", ", False, False, True)
    return lambda value: "".join(encoder(value, 0))


_arguments = _arguments_json()


def _call(block: dict[str, Any]) -> dict[str, Any]:
    """A ``tool_use`` block as one of our tool calls."""
    return {"id": str(block.get("id") or ""), "type": "function",
            "function": {"name": str(block.get("name") or ""),
                         "arguments": _arguments(block.get("input", {}))}}


def assistant_message(message: dict[str, Any]) -> dict[str, Any]:
    """An assistant ``message`` (Messages API shape) as our message dict:
    one pass over its blocks (text, thinking, tool calls, the rest by type)."""
    content = message.get("content")
    msg: dict[str, Any] = {"role": "assistant", "content": content}
    if not isinstance(content, str):
        texts: list[str] = []
        thinking: list[str] = []
        calls: list[dict[str, Any]] = []
        others: list[dict[str, Any]] = []
        redacted = False
        for block in content if isinstance(content, list) else ():
            kind = block.get("type") if isinstance(block, dict) else None
            if kind == "text":
                if isinstance(block.get("text"), str):
                    texts.append(block["text"])
            elif kind == "thinking":
                if isinstance(block.get("thinking"), str):
                    thinking.append(block["thinking"])
            elif kind == "tool_use" or kind == "server_tool_use":
                calls.append(_call(block))
            elif kind == "redacted_thinking":
                redacted = True
            else:
                others.append(_block_ref(block))
        msg["content"] = "\n".join(texts) if texts else None
        if thinking:
            msg["reasoning"] = "\n".join(thinking)
        if redacted:
            msg["reasoning_redacted"] = True
        if calls:
            msg["tool_calls"] = calls
        if others:
            msg["other_blocks"] = others
    for key, ours in _ASSISTANT_KEYS:
        value = message.get(key)
        if isinstance(value, str):
            msg[ours] = value
    return msg
