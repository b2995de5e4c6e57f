"""HTTP side of the local model: JSON replies, SSE streams and errors."""
from __future__ import annotations

import json
import time
import uuid
from http.server import BaseHTTPRequestHandler
from typing import Any


def count_tokens(payload: Any) -> int:
    """A rough, deterministic token estimate: ~4 characters per token."""
    return max(1, len(json.dumps(payload, ensure_ascii=False)) // 4)


def build_message(reply: Any, request: dict[str, Any]) -> dict[str, Any]:
    """The Messages API response object for a scripted reply."""
    return {"id": f"msg_{uuid.uuid4().hex[:24]}", "type": "message", "role": "assistant",
            "model": request.get("model", "local"), "content": reply.blocks,
            "stop_reason": reply.stop_reason, "stop_sequence": None,
            "usage": {"input_tokens": count_tokens(request.get("messages", [])),
                      "output_tokens": count_tokens(reply.blocks),
                      "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0}}


class MessagesHandler(BaseHTTPRequestHandler):
    """Answers POST /v1/messages from ``owner.script``."""

    owner: Any = None
    protocol_version = "HTTP/1.0"  # one response per connection; SSE ends at close

    def log_message(self, *_args: Any) -> None:  # keep test output quiet
        return

    def do_POST(self) -> None:  # noqa: N802 (http.server naming)
        if self.path.split("?")[0] != "/v1/messages":
            return self._error(404, "not_found_error", "unknown path")
        length = int(self.headers.get("content-length", "0"))
        body = self.rfile.read(length)
        try:
            request = json.loads(body or b"{}")
        except json.JSONDecodeError:
            return self._error(400, "invalid_request_error", "body is not JSON")
        self.owner.raw_requests.append(body)  # the bytes as sent (prompt-cache prefix tests)
        self.owner.requests.append(request)
        reply = self.owner.script(request)
        if reply.status != 200:
            return self._error(reply.status, reply.error_type or "api_error",
                               "scripted error", reply.retry_after)
        message = build_message(reply, request)
        if request.get("stream"):
            return self._stream(message, reply.chunk_delay)
        self._send_json(200, message)

    def _send_json(self, status: int, body: dict[str, Any],
                   headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.send_header("request-id", "req_local")
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def _error(self, status: int, kind: str, text: str, retry_after: float | None = None) -> None:
        headers = {"retry-after": f"{retry_after:g}"} if retry_after is not None else {}
        self._send_json(status, {"type": "error", "error": {"type": kind, "message": text}},
                        headers)

    def _event(self, name: str, data: dict[str, Any]) -> None:
        self.wfile.write(f"event: {name}\ndata: {json.dumps(data)}\n\n".encode())
        self.wfile.flush()

    def _stream(self, message: dict[str, Any], delay: float) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.end_headers()
        try:
            self._stream_events(message, delay)
        except (BrokenPipeError, ConnectionResetError):
            return  # the client cancelled the stream (interrupt)

    def _stream_events(self, message: dict[str, Any], delay: float) -> None:
        start = dict(message, content=[], stop_reason=None)
        start["usage"] = dict(message["usage"], output_tokens=1)
        self._event("message_start", {"type": "message_start", "message": start})
        for index, block in enumerate(message["content"]):
            self._stream_block(index, block, delay)
        self._event("message_delta", {"type": "message_delta",
                                      "delta": {"stop_reason": message["stop_reason"],
                                                "stop_sequence": None},
                                      "usage": {"output_tokens": message["usage"]["output_tokens"]}})
        self._event("message_stop", {"type": "message_stop"})

    def _stream_block(self, index: int, block: dict[str, Any], delay: float) -> None:
        if block["type"] == "text":
            self._event("content_block_start", {"type": "content_block_start", "index": index,
                                                "content_block": {"type": "text", "text": ""}})
            text = block["text"]
            for i in range(0, max(len(text), 1), 16):
                if delay:
                    time.sleep(delay)
                self._event("content_block_delta", {
                    "type": "content_block_delta", "index": index,
                    "delta": {"type": "text_delta", "text": text[i:i + 16]}})
        else:
            self._event("content_block_start", {
                "type": "content_block_start", "index": index,
                "content_block": {"type": "tool_use", "id": block["id"], "name": block["name"],
                                  "input": {}}})
            self._event("content_block_delta", {
                "type": "content_block_delta", "index": index,
                "delta": {"type": "input_json_delta", "partial_json": json.dumps(block["input"])}})
        self._event("content_block_stop", {"type": "content_block_stop", "index": index})
