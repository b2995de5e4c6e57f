"""Tool registry: name, description, JSON schema and the function to call.

Adding a tool is one function plus `registry.register(...)` or the
`@registry.tool(...)` decorator. A tool that raises becomes an error result
(`is_error`), never a crashed turn.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, Callable

log = logging.getLogger(__name__)
MAX_RESULT_CHARS = 20_000


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    input_schema: dict[str, Any]
    fn: Callable[..., Any]

    def to_api(self) -> dict[str, Any]:
        return {"name": self.name, "description": self.description,
                "input_schema": self.input_schema}


@dataclass(frozen=True)
class ToolOutcome:
    """The text sent back to the model, and whether it reports a failure."""

    text: str
    is_error: bool


class ToolRegistry:
    def __init__(self, tools: list[Tool] | None = None) -> None:
        self._tools: dict[str, Tool] = {}
        for t in tools or []:
            self.register(t)

    def register(self, tool: Tool) -> Tool:
        if tool.name in self._tools:
            raise ValueError(f"a tool named {tool.name!r} is already registered")
        self._tools[tool.name] = tool
        return tool

    def tool(self, name: str, description: str,
             schema: dict[str, Any]) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
        """Decorator form of `register`."""
        def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
            self.register(Tool(name, description, schema, fn))
            return fn
        return wrap

    def names(self) -> list[str]:
        return list(self._tools)

    def to_api(self) -> list[dict[str, Any]]:
        return [t.to_api() for t in self._tools.values()]

    def call(self, name: str, args: Any) -> ToolOutcome:
        """Run a tool; unknown tools, bad arguments and exceptions are error results."""
        tool = self._tools.get(name)
        if tool is None:
            return ToolOutcome(f"unknown tool {name!r}", True)
        if not isinstance(args, dict):
            return ToolOutcome("tool input must be a JSON object", True)
        try:
            result = tool.fn(**args)
        except Exception as e:  # the model gets the error; the turn goes on
            log.info("tool %s raised", name, exc_info=True)
            return ToolOutcome(f"{type(e).__name__}: {e}", True)
        text = result if isinstance(result, str) else json.dumps(result, ensure_ascii=False,
                                                                 default=str)
        if len(text) > MAX_RESULT_CHARS:
            text = text[:MAX_RESULT_CHARS] + f"\n[truncated {len(text) - MAX_RESULT_CHARS} chars]"
        return ToolOutcome(text, False)
