"""Codex CLI's rollouts (``~/.codex/sessions/YYYY/MM/DD/rollout-*.jsonl``) as import records.

A rollout line is ``{"timestamp", "type", "payload"}``: ``session_meta``
(``id``, ``timestamp``, ``cwd``, ``cli_version``, ``originator``,
``model_provider``, ``git``), ``turn_context`` (``model``, ``cwd``, policies),
``response_item`` (the Responses API's items: ``message`` with
``input_text``/``output_text`` parts, ``reasoning`` with a ``summary``,
``function_call``/``custom_tool_call``/``local_shell_call``/
``web_search_call`` and their ``*_output``), ``event_msg`` (UI events, among
them ``token_count`` with the running ``total_token_usage``) and
``compacted``. Older clients wrote the session's meta as a bare first line
(``{"id", "timestamp", "instructions"}``), then bare response items and
``{"record_type": "state"}`` lines; both layouts are read.

Mapping: a file is a session ``codex-<session id>`` (source ``codex``,
titled by its first prompt that is not injected context; model from the
last ``turn_context``; working directory, branch and client version in
``state_meta`` under ``codex:session:<id>``). Each response item is one
message with uid ``codex:<line number>`` (rollouts are only appended to, so
a line keeps its number): messages keep their role, a tool call is an
assistant message with ``tool_calls``, its output a ``tool`` message with
the same ``tool_call_id``, a reasoning summary an assistant message whose
``reasoning`` holds it. The last ``token_count`` totals go to the usage
ledger (cached input as cache reads). ``event_msg`` lines repeat what the
items hold and are counted, not imported.
"""
from __future__ import annotations

import json
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from ..base import MessageState
from ..rows import ROLES
from ..rows import usage as ledger
from .import_spill import encoded_from
from .importer import MessageIn, Record, SessionIn, encoded_ahead
from . import log_lines
from .log_lines import (HOLD_MESSAGES, LineReport, RecordFile, file_time, iso_time, open_log,
                        read_lines, safe_id, text_of, title_from)

SOURCE = "codex"
FILES = re.compile(r"rollout-.*\.jsonl")
NOT_MESSAGES = frozenset({"event_msg", "turn_context", "session_meta", "compacted", "state"})
_ACTIVE = MessageState.ACTIVE.value
_TEXTS = ("input_text", "output_text", "text", "summary_text", "reasoning_text")
_CALLS = ("function_call", "custom_tool_call", "local_shell_call", "web_search_call")
_OUTPUTS = ("function_call_output", "custom_tool_call_output")
ITEMS = frozenset({"message", "reasoning", *_CALLS, *_OUTPUTS})
_INJECTED = ("<environment_context>", "<user_instructions>", "# AGENTS.md", "<permissions",
             "<user_shell_command>")


@dataclass
class _Scan:
    """What the first pass learns: the session row's fields."""

    meta: dict[str, Any] = field(default_factory=dict)
    model: str | None = None
    cwd: str | None = None
    first: float | None = None
    last: float | None = None
    prompt: str | None = None
    messages: int = 0
    totals: dict[str, Any] | None = None
    calls: int = 0

    def saw(self, when: float) -> None:
        self.first = when if self.first is None else min(self.first, when)
        self.last = when if self.last is None else max(self.last, when)


def _item(obj: dict[str, Any]) -> dict[str, Any] | None:
    """The response item of a line (enveloped or, from older clients, bare)."""
    if obj.get("type") == "response_item" and isinstance(obj.get("payload"), dict):
        return obj["payload"]
    if "payload" not in obj and obj.get("type") in ITEMS:
        return obj
    return None


class CodexReader:
    """The record stream of one rollout file, and what it left out."""

    source_format = SOURCE

    def __init__(self, path: Path) -> None:
        self.path = path
        self.report = LineReport(str(path))
        self.scan = _Scan()
        #: lines the store refused (see log_import.py): left out of the next attempt
        self.refused: set[int] = set()
        self._scanned: RecordFile | None = None  # see `adopt`
        #: the first messages, held between the passes (log_lines.HOLD_BYTES)
        self._held: list[tuple[Any, ...]] = []
        #: encode each message during the scan (a worker's, see `prescan`)
        self.encode = False

    @property
    def session_id(self) -> str:
        raw = self.scan.meta.get("id")
        return safe_id(f"codex-{raw if isinstance(raw, str) and raw else self.path.stem}")

    def records(self) -> Iterator[Record]:
        """One pass over the file learns the session's row and keeps its
        messages, already mapped: the first in memory, the rest spilled to a
        private temporary file (marshal; see log_lines.HOLD_BYTES); then the
        row and the messages are yielded."""
        scanned, self._scanned = self._scanned, None
        if scanned is None:
            scanned = RecordFile()
            try:
                self.first_pass(scanned)
            except BaseException:
                scanned.__exit__()
                raise
        with scanned as spill:
            if self.scan.messages:
                yield self._session()
                yield from self._emit(spill)
        self._held = []

    def first_pass(self, spill: RecordFile) -> None:
        """The session learnt, its messages spilled."""
        self.report, self.scan = LineReport(str(self.path)), _Scan()
        with open_log(self.path) as f:
            self._scan(f, spill)

    def prescan(self, directory: str) -> list[str]:
        """`first_pass` into a named record file (in a worker process,
        log_prescan.py); returns its name."""
        spill = RecordFile(directory)
        self.encode = True  # the import's check then finds the rows made
        try:
            self.first_pass(spill)
        finally:
            name = spill.handed_over()
        return [name]

    def adopt(self, scanned: "CodexReader", names: list[str]) -> None:
        """Take the first pass another process made of this file (`prescan`)."""
        self.report, self.scan = scanned.report, scanned.scan
        self._scanned = RecordFile.adopt(names[0])

    def meta(self) -> Iterator[tuple[str, dict[str, Any]]]:
        if not self.scan.messages:
            return
        m, git = self.scan.meta, self.scan.meta.get("git")
        doc = {"cwd": self.scan.cwd or m.get("cwd"), "version": m.get("cli_version"),
               "originator": m.get("originator"), "path": str(self.path)}
        if isinstance(git, dict):
            doc.update({"git_branch": git.get("branch"), "git_commit": git.get("commit_hash"),
                        "git_repository": git.get("repository_url")})
        yield self.session_id, {k: v for k, v in doc.items() if isinstance(v, str) and v}

    def lineage(self) -> list[tuple[str, str]]:
        return []  # a rollout is one session

    def conversations(self) -> list[str]:
        return [self.session_id] if self.scan.messages else []

    # -- first pass -----------------------------------------------------------

    def _scan(self, f: BinaryIO, spill: RecordFile) -> None:
        scan, when = self.scan, file_time(self.path)
        held: list[tuple[Any, ...]] = []
        self._held = held
        hold = 0 if self.encode else log_lines.HOLD_BYTES  # a worker's pass: all in files
        for line in read_lines(f, self.report):
            obj = line.obj
            when = iso_time(obj.get("timestamp")) or when
            item = _item(obj)
            if item is not None:
                msg = message_dict(item)
                if msg is None:
                    self._unknown(line.number, item)
                    continue
                # without the session id: the meta line naming it may come later
                row = None
                if self.encode:  # the session id is not needed to encode it
                    row = encoded_ahead(MessageIn("", f"codex:{line.number}", when, _ACTIVE,
                                                  None, "message", msg, line.number))
                rec = (f"codex:{line.number}", when, _ACTIVE, None, "message",
                       msg if row is None else None, line.number, row)
                if line.offset < hold and len(held) < HOLD_MESSAGES:
                    held.append(rec)
                else:
                    spill.write(rec)
                scan.messages += 1
                scan.saw(when)
                if scan.prompt is None and item.get("type") == "message" \
                        and item.get("role") == "user":
                    scan.prompt = _prompt(item.get("content"))
            else:
                self._other(line.number, obj, when)

    def _unknown(self, number: int, item: dict[str, Any]) -> None:
        kind = item.get("type")
        if item.get("type") == "reasoning":
            self.report.not_messages["reasoning (no readable text)"] += 1
        elif isinstance(kind, str) and kind not in ITEMS:
            self.report.unknown_types[f"response_item:{kind}"] += 1
        else:
            self.report.skip(number, f"a {kind} item not in a known shape")

    def _other(self, number: int, obj: dict[str, Any], when: float) -> None:
        kind, payload = obj.get("type"), obj.get("payload")
        payload = payload if isinstance(payload, dict) else {}
        if kind == "session_meta" or (number == 1 and kind is None and "id" in obj):
            if not self.scan.meta:  # the file's own; later ones are sessions it resumed
                self.scan.meta = payload if kind else obj
                self.scan.saw(iso_time(self.scan.meta.get("timestamp")) or when)
            self.report.not_messages["session_meta"] += 1
        elif kind == "turn_context":
            self.scan.model = payload.get("model") if isinstance(payload.get("model"), str) \
                else self.scan.model
            self.scan.cwd = payload.get("cwd") if isinstance(payload.get("cwd"), str) \
                else self.scan.cwd
            self.report.not_messages[kind] += 1
        elif kind == "event_msg":
            self._event(payload)
            self.report.not_messages[kind] += 1
        elif kind in NOT_MESSAGES or obj.get("record_type") == "state":
            self.report.not_messages[kind if isinstance(kind, str) else "state"] += 1
        elif isinstance(kind, str):
            self.report.unknown_types[kind] += 1
        else:
            self.report.skip(number, "not a known shape (no 'type')")

    def _event(self, payload: dict[str, Any]) -> None:
        info = payload.get("info") if payload.get("type") == "token_count" else None
        if isinstance(info, dict) and isinstance(info.get("total_token_usage"), dict):
            self.scan.totals = info["total_token_usage"]
            self.scan.calls += 1

    # -- the session row and the second pass ----------------------------------

    def _usage(self) -> tuple[dict[str, int], tuple[dict[str, Any], ...]]:
        t = self.scan.totals or {}
        n = {k: v if isinstance(v, int) and not isinstance(v, bool) and v > 0 else 0
             for k, v in t.items()}
        cached = min(n.get("cached_input_tokens", 0), n.get("input_tokens", 0))
        counters = {"input_tokens": n.get("input_tokens", 0) - cached,
                    "output_tokens": n.get("output_tokens", 0), "cache_read_tokens": cached,
                    "cache_write_tokens": 0}
        if not any(counters.values()):
            return counters, ()
        provider = self.scan.meta.get("model_provider")
        row = {"task": "turn", "model": self.scan.model or "",
               "provider": provider if isinstance(provider, str) else "openai",
               "reasoning_tokens": n.get("reasoning_output_tokens", 0),
               "api_calls": self.scan.calls, "first_at": self.scan.first,
               "last_at": self.scan.last, **counters}
        return counters, ledger.check_ledger_rows([row])

    def _session(self) -> SessionIn:
        counters, ledger = self._usage()
        first = self.scan.first or 0.0
        return SessionIn({"id": self.session_id, "parent_session_id": None, "source": SOURCE,
                          "model": self.scan.model, "title": self.scan.prompt,
                          "started_at": first, "updated_at": self.scan.last or first,
                          "ended_at": None, "end_reason": None, "message_count": None,
                          "tool_call_count": None, **counters}, usage=ledger)

    def _emit(self, spill: RecordFile) -> Iterator[Record]:
        sid = self.session_id
        for rec in itertools.chain(self._held, spill):
            if rec[6] not in self.refused:
                yield MessageIn._make((sid, *rec[:7],
                                       None if rec[7] is None else encoded_from(rec[7])))


def _prompt(content: Any) -> str | None:
    text = text_of(content, _TEXTS)
    if text is None or text.lstrip().startswith(_INJECTED):
        return None
    return title_from(text)


def _call(item: dict[str, Any]) -> dict[str, Any]:
    kind = item["type"]
    if kind == "function_call":
        name, args = item.get("name"), item.get("arguments")
    elif kind == "custom_tool_call":
        name, args = item.get("name"), item.get("input")
    else:  # local shell and web search: the action is the call
        name, args = kind.removesuffix("_call"), json.dumps(item.get("action") or {})
    return {"id": str(item.get("call_id") or item.get("id") or ""), "type": "function",
            "function": {"name": str(name or ""),
                         "arguments": args if isinstance(args, str) else json.dumps(args)}}


def _output(value: Any) -> str:
    """A tool output's text: a string, the ``content`` of an older client's
    object, or the text items of a list (its images become attachments)."""
    if isinstance(value, dict):  # older clients: {"content": ..., "metadata": ...}
        value = value.get("content", value)
    text = text_of(value, _TEXTS)
    if text is not None:
        return text
    if value is None or _images(value):
        return ""
    return json.dumps(value)


def message_dict(item: dict[str, Any]) -> dict[str, Any] | None:
    """A response item as our message dict (None: not one we import)."""
    kind = item.get("type")
    if kind == "message" and item.get("role") in ROLES:
        content = item.get("content")
        msg: dict[str, Any] = {"role": item["role"], "content": text_of(content, _TEXTS)}
        images = _images(content)
        if images:
            msg["attachments"] = images
        return msg
    if kind == "reasoning":
        text = text_of(item.get("summary"), _TEXTS) or text_of(item.get("content"), _TEXTS)
        return None if text is None else {"role": "assistant", "content": None,
                                          "reasoning": text}
    if kind in _CALLS:
        return {"role": "assistant", "content": None, "tool_calls": [_call(item)]}
    if kind in _OUTPUTS:
        output = item.get("output")
        msg = {"role": "tool", "content": _output(output),
               "tool_call_id": str(item.get("call_id") or "")}
        images = _images(output)
        if images:
            msg["attachments"] = images
        return msg
    return None


def _images(content: Any) -> list[dict[str, str]]:
    """The images of a list of content items, by type (never their bytes)."""
    if not isinstance(content, list):
        return []
    return [{"type": "input_image"} for c in content
            if isinstance(c, dict) and c.get("type") == "input_image"]
