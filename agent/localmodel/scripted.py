"""A scripted conversation for the compaction measurement and tests.

Each user turn gets a tool call, then a long answer; summary requests (the
compactor's system prompt) get a short summary. Deterministic.
"""
from __future__ import annotations

from typing import Any

from ..compact import SUMMARY_SYSTEM
from ..tools import ToolRegistry
from .server import Reply, last_tool_results, last_user_text

FILLER = ("The measurements agree with the earlier run; the variance stays small and the "
          "remaining differences come from warm-up effects. ") * 4


def exchange_script(request: dict[str, Any]) -> Reply:
    if request.get("system") == SUMMARY_SYSTEM:
        text = last_user_text(request)
        return Reply.text(f"Summary of earlier work ({len(text)} chars folded): steps were "
                          "computed with the calculator and reported.")
    if last_tool_results(request):
        return Reply.text(f"Result noted. {FILLER}")
    return Reply.tool("calc", {"expression": last_user_text(request)[-20:]},
                      text="Let me compute that.")


def calc_registry() -> ToolRegistry:
    reg = ToolRegistry()

    @reg.tool("calc", "Evaluate a short expression.", {
        "type": "object", "properties": {"expression": {"type": "string"}}})
    def calc(expression: str) -> str:
        return f"value of {expression!r} = {len(expression) * 7}"
    return reg
