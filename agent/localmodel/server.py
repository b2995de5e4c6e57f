"""A local, scripted model that speaks the Anthropic Messages API on 127.0.0.1.

This is NOT a language model. It answers ``POST /v1/messages`` (JSON or SSE
streaming, text and tool_use blocks, usage, and scripted errors such as 429
with ``retry-after``) from a *script*: a callable that looks at the request
and returns the reply. Tests use it so the real anthropic SDK runs over real
HTTP; ``hermes chat --offline`` and ``hermes demo`` use the rule-based
script below so anyone can try the tool without an API key.
"""
from __future__ import annotations

import json
import threading
import uuid
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable

from ..review import REVIEW_OPENING, is_review_request
from .localmodel_http import MessagesHandler

LABEL = "local scripted model (offline, not a language model)"


@dataclass
class Reply:
    """What the scripted model answers: content blocks or an HTTP error."""

    blocks: list[dict[str, Any]] = field(default_factory=list)
    stop_reason: str = "end_turn"
    status: int = 200
    error_type: str = ""
    retry_after: float | None = None
    chunk_delay: float = 0.0  # seconds between streamed text chunks

    @classmethod
    def text(cls, text: str, **kw: Any) -> "Reply":
        return cls([{"type": "text", "text": text}], **kw)

    @classmethod
    def tool(cls, name: str, args: dict[str, Any], text: str = "") -> "Reply":
        blocks: list[dict[str, Any]] = [{"type": "text", "text": text}] if text else []
        blocks.append({"type": "tool_use", "id": f"toolu_{uuid.uuid4().hex[:20]}",
                       "name": name, "input": args})
        return cls(blocks, stop_reason="tool_use")

    @classmethod
    def error(cls, status: int, error_type: str, retry_after: float | None = None) -> "Reply":
        return cls(status=status, error_type=error_type, retry_after=retry_after)


Script = Callable[[dict[str, Any]], Reply]


def last_user_text(request: dict[str, Any]) -> str:
    """The text of the last user message (strings or text blocks)."""
    for message in reversed(request.get("messages", [])):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        return " ".join(b.get("text", "") for b in content if b.get("type") == "text")
    return ""


def last_tool_results(request: dict[str, Any]) -> list[dict[str, Any]]:
    """tool_result blocks of the last message, if it carries any."""
    messages = request.get("messages", [])
    if not messages or not isinstance(messages[-1].get("content"), list):
        return []
    return [b for b in messages[-1]["content"] if b.get("type") == "tool_result"]


def review_reply(request: dict[str, Any]) -> Reply:
    """A review request: save what the user asked to be remembered, once."""
    if last_tool_results(request):
        return Reply.text("Saved.")
    asked = []
    for m in request.get("messages", []):
        content = m.get("content")
        text = content if isinstance(content, str) else " ".join(
            b.get("text", "") for b in content or [] if b.get("type") == "text")
        if m.get("role") == "user" and "remember" in text.lower() \
                and not text.startswith(REVIEW_OPENING):
            asked.append(text)
    if not asked or "memory" not in {t["name"] for t in request.get("tools", [])}:
        return Reply.text("Nothing to save.")
    note = asked[-1].split(";")[0].strip().rstrip(".")
    return Reply.tool("memory", {"action": "add", "target": "user",
                                 "content": f"The user said: {note}."})


def rule_based(request: dict[str, Any]) -> Reply:
    """The offline demo's script: search when asked, summarize when asked,
    and in a background review, remember what the user asked to be remembered."""
    if is_review_request(request):
        return review_reply(request)
    results = last_tool_results(request)
    if results:
        body = results[0].get("content")
        text = body if isinstance(body, str) else json.dumps(body)
        return Reply.text(f"Here is what I found: {text[:400]}")
    text = last_user_text(request)
    tools = {t["name"] for t in request.get("tools", [])}
    lowered = text.lower()
    if "summarize" in lowered or "summary" in str(request.get("system", "")).lower():
        return Reply.text(f"Summary: {text[:200]}")
    if lowered.startswith("search ") and "session_search" in tools:
        return Reply.tool("session_search", {"query": text[7:].strip()},
                          text="Let me search past sessions.")
    return Reply.text(f"({LABEL}) You said: {text}")


class LocalModelServer:
    """An HTTP server on 127.0.0.1 that answers from a script.

    Use as a context manager; ``base_url`` is what the SDK needs. Every
    request body received is kept in ``requests`` for inspection.
    """

    def __init__(self, script: Script = rule_based, port: int = 0) -> None:
        self.script = script
        self.requests: list[dict[str, Any]] = []
        self.raw_requests: list[bytes] = []
        self._httpd = ThreadingHTTPServer(("127.0.0.1", port), _handler_for(self))
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"http://{str(host)}:{port}"  # str already; typeshed allows bytes

    def start(self) -> "LocalModelServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> "LocalModelServer":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def queue_script(*replies: Reply) -> Script:
    """A script that answers with ``replies`` in order (tests)."""
    pending = list(replies)
    lock = threading.Lock()

    def script(_request: dict[str, Any]) -> Reply:
        with lock:
            if not pending:
                return Reply.error(500, "api_error")
            return pending.pop(0)
    return script


def _handler_for(server: LocalModelServer) -> type[BaseHTTPRequestHandler]:
    class Handler(MessagesHandler):
        owner = server
    return Handler
