"""Transcript dicts <-> Anthropic Messages API payloads.

The transcript keeps the usual chat shape (assistant `tool_calls`, `tool`
role results). The wire builder reads only the keys it knows, so store
markers (`_db_*`) can never reach the API.
"""
from __future__ import annotations

import json
from typing import Any


def _text_of(content: Any) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "".join(b.get("text", "") for b in content if isinstance(b, dict)
                   and b.get("type") == "text")


def _assistant_blocks(message: dict[str, Any]) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    text = _text_of(message.get("content"))
    if text:
        blocks.append({"type": "text", "text": text})
    for call in message.get("tool_calls") or []:
        fn = call.get("function", {})
        try:
            args = json.loads(fn.get("arguments") or "{}")
        except json.JSONDecodeError:
            args = {}
        blocks.append({"type": "tool_use", "id": call["id"], "name": fn.get("name", ""),
                       "input": args})
    return blocks


def _tool_result(message: dict[str, Any]) -> dict[str, Any]:
    block = {"type": "tool_result", "tool_use_id": message.get("tool_call_id", ""),
             "content": _text_of(message.get("content"))}
    if message.get("is_error"):
        block["is_error"] = True
    return block


def to_api(transcript: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(system prompt, messages) for the Messages API; consecutive same-role
    messages are merged so the user/assistant alternation always holds."""
    system: list[str] = []
    out: list[dict[str, Any]] = []
    for m in transcript:
        role = m.get("role")
        if role in ("system", "developer"):
            system.append(_text_of(m.get("content")))
            continue
        if role == "assistant":
            wire_role, blocks = "assistant", _assistant_blocks(m)
        elif role == "tool":
            wire_role, blocks = "user", [_tool_result(m)]
        else:
            wire_role, blocks = "user", [{"type": "text", "text": _text_of(m.get("content"))}]
        blocks = [b for b in blocks if b.get("type") != "text" or b["text"]]
        if not blocks:
            continue
        if out and out[-1]["role"] == wire_role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": wire_role, "content": blocks})
    return "\n\n".join(s for s in system if s), out


def assistant_from_api(message: Any) -> dict[str, Any]:
    """A transcript dict from an SDK `Message` (text and tool_use blocks)."""
    text = "".join(b.text for b in message.content if b.type == "text")
    calls = [{"id": b.id, "type": "function",
              "function": {"name": b.name, "arguments": json.dumps(b.input)}}
             for b in message.content if b.type == "tool_use"]
    out: dict[str, Any] = {"role": "assistant", "content": text,
                           "finish_reason": message.stop_reason or "end_turn"}
    if calls:
        out["tool_calls"] = calls
    return out


def assistant_text(message: dict[str, Any]) -> str:
    return _text_of(message.get("content")) if message.get("role") == "assistant" else ""


def pending_text(transcript: list[dict[str, Any]]) -> str:
    """The latest assistant text in the transcript (the user's answer so far)."""
    for m in reversed(transcript):
        text = assistant_text(m)
        if text:
            return text
    return ""


def parse_args(arguments: str | None) -> Any:
    """Tool-call arguments as sent by the model; None when not valid JSON."""
    try:
        return json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return None
