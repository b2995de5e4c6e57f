"""The background review's harness prompt, and how to recognise it.

Its opening line is how a harness row left in a session by an older build
is found and stripped on load, and how the local scripted model tells a
review's requests from the live turn's.
"""
from __future__ import annotations

from typing import Any

REVIEW_OPENING = "[background review] Look back over the conversation above."
REVIEW_PROMPT = (
    f"{REVIEW_OPENING}\n"
    "Is there anything worth keeping for later conversations? Use the memory tool for "
    "durable facts about the user (target user) or notes about the work (target memory); "
    "use skill_manage to create or patch a skill when a reusable procedure was worked out. "
    "Save only what will still matter later; if nothing does, reply 'Nothing to save.' "
    "Do not ask the user anything and do not repeat the conversation.")


def review_prompt(focus: str | None = None) -> str:
    """The prompt, with the user's focus (``/refine FOCUS``) appended."""
    focus = (focus or "").strip()
    return REVIEW_PROMPT + (f"\nFocus on: {focus}" if focus else "")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(b.get("text", "") for b in content if isinstance(b, dict))
    return ""


def is_review_prompt(message: dict[str, Any]) -> bool:
    return message.get("role") == "user" and _text(message.get("content")).lstrip() \
        .startswith(REVIEW_OPENING)


def strip_harness(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` without review prompts and the assistant reply right after
    each (rows an older build wrote into the session). The stored rows are
    left as they are; only what is loaded into the agent leaves them out."""
    out: list[dict[str, Any]] = []
    skip_reply = False
    for m in messages:
        if is_review_prompt(m):
            skip_reply = True
            continue
        if skip_reply and m.get("role") == "assistant":
            skip_reply = False
            continue
        skip_reply = False
        out.append(m)
    return out


def is_review_request(request: dict[str, Any]) -> bool:
    """Whether a Messages API request body comes from a review fork."""
    return any(is_review_prompt(m) for m in request.get("messages", []))
