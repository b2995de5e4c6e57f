"""The agent loop: model -> tool calls -> tool results, persisted as it goes.

Every model response and every tool result is flushed through the store's
flush-scan cursor before the loop moves on, under a turn lease. When the
store fails, the turn fails closed: the user still gets the answer, the
unwritten messages are spooled, and the result names the cause with the
explanation from the store's one copy table.
"""
from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable

import anthropic

from sessiondb import SessionDB, StorageError

from . import wire
from .compact import CompactionPolicy, MicroCompactor
from .failure import NO_CREDENTIALS, NO_CREDENTIALS_FAILURE, TurnFailure, has_credentials
from .persist import PersistenceFailed, TurnPersistence
from .tools import ToolRegistry

log = logging.getLogger(__name__)

DEFAULT_MODEL = "claude-sonnet-5"


class TurnInterrupted(Exception):
    """Raised inside the loop when `interrupt()` was called (control flow)."""


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    def add(self, u: Any) -> None:
        self.input_tokens += getattr(u, "input_tokens", 0) or 0
        self.output_tokens += getattr(u, "output_tokens", 0) or 0
        self.cache_read_tokens += getattr(u, "cache_read_input_tokens", 0) or 0
        self.cache_write_tokens += getattr(u, "cache_creation_input_tokens", 0) or 0


@dataclass
class TurnResult:
    """How a turn ended. `completed` is false when interrupted or failed."""

    completed: bool
    interrupted: bool
    failed: bool
    final_response: str
    failure_reason: str | None = None
    explanation: TurnFailure | None = None  # why it failed (storage or model), one type
    usage: Usage = field(default_factory=Usage)
    steps: int = 0


class Agent:
    """A conversation with a model, persisted in a SessionDB session."""

    def __init__(self, db: SessionDB, *, session_id: str | None = None,
                 model: str = DEFAULT_MODEL, client: anthropic.Anthropic | None = None,
                 system_prompt: str | None = None, tools: ToolRegistry | None = None,
                 max_steps: int = 8, max_tokens: int = 1024,
                 micro_compact: CompactionPolicy | None = None, source: str = "agent") -> None:
        from .builtin_tools import default_registry
        self.db, self.model, self.max_steps, self.max_tokens = db, model, max_steps, max_tokens
        self.client = client or anthropic.Anthropic()
        self.session_id = db.create_session(session_id, source=source, model=model)
        self.tools = tools if tools is not None else default_registry(db, self.session_id)
        self.holder = f"agent-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.store = TurnPersistence(db, self.session_id, self.holder)
        self.messages: list[dict[str, Any]] = self.store.load()
        if not self.messages and system_prompt:
            self.messages.append({"role": "system", "content": system_prompt})
        self.compactor = MicroCompactor(self, micro_compact) if micro_compact else None
        self._interrupt = threading.Event()
        self._streamed = False

    def interrupt(self) -> None:
        """Cancel the in-flight stream and tool loop (thread-safe)."""
        self._interrupt.set()

    # -- the turn ----------------------------------------------------------

    def run_turn(self, user_text: str, *, on_text: Callable[[str], None] | None = None
                 ) -> TurnResult:
        """Run one user turn to its end, an interrupt, a failure, or max_steps.

        A client that cannot authenticate fails the turn before anything is
        written (failure_reason ``model_error:no_credentials``), never with
        the SDK's bare TypeError."""
        if not has_credentials(self.client):
            return TurnResult(False, False, True, "", failure_reason=NO_CREDENTIALS,
                              explanation=NO_CREDENTIALS_FAILURE)
        self._interrupt.clear()
        self._streamed = False  # text already passed to on_text in this turn
        usage, steps, answer = Usage(), 0, ""
        try:
            self.messages.append({"role": "user", "content": user_text,
                                  "timestamp": time.time()})
            self.store.begin_turn(self.messages)
            self.store.flush(self.messages)
            while steps < self.max_steps:
                steps += 1
                reply = self._model_step(on_text, usage)
                answer = wire.assistant_text(reply) or answer
                self._add(reply)
                if reply.get("finish_reason") == "interrupted":
                    return TurnResult(False, True, False, answer, usage=usage, steps=steps)
                if not reply.get("tool_calls"):
                    self._after_turn(usage)
                    return TurnResult(True, False, False, answer, usage=usage, steps=steps)
                self._run_tools(reply["tool_calls"])
            return TurnResult(False, False, True, answer, failure_reason="max_steps",
                              usage=usage, steps=steps)
        except TurnInterrupted:
            return TurnResult(False, True, False, answer, usage=usage, steps=steps)
        except PersistenceFailed as e:
            return TurnResult(False, False, True, answer or wire.pending_text(self.messages),
                              failure_reason=f"session_persistence_failed:{e.cause}",
                              explanation=TurnFailure.from_storage(e.failure), usage=usage,
                              steps=steps)
        except anthropic.APIError as e:
            reason = getattr(e, "type", None) or type(e).__name__
            code = f"model_error:{reason}"
            return TurnResult(False, False, True, answer, failure_reason=code,
                              explanation=TurnFailure.from_model_error(code, e), usage=usage,
                              steps=steps)
        finally:
            self.store.end_turn(usage)

    def _add(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        self.store.flush(self.messages)

    def _run_tools(self, calls: list[dict[str, Any]]) -> None:
        for call in calls:
            if self._interrupt.is_set():
                raise TurnInterrupted()
            fn = call.get("function", {})
            outcome = self.tools.call(fn.get("name", ""), wire.parse_args(fn.get("arguments")))
            result = {"role": "tool", "tool_call_id": call["id"], "name": fn.get("name", ""),
                      "content": outcome.text}
            if outcome.is_error:
                result["is_error"] = True
            self._add(result)

    def _model_step(self, on_text: Callable[[str], None] | None,
                    usage: Usage) -> dict[str, Any]:
        """Stream one model response; on interrupt keep what arrived so far."""
        system, wire_messages = wire.to_api(self.messages)
        kwargs: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens,
                                  "messages": wire_messages}
        if system:
            kwargs["system"] = system
        if self.tools.names():
            kwargs["tools"] = self.tools.to_api()
        parts: list[str] = []
        with self.client.messages.stream(**kwargs) as stream:
            for event in stream:
                if self._interrupt.is_set():
                    stream.close()
                    return {"role": "assistant", "content": "".join(parts),
                            "finish_reason": "interrupted"}
                if event.type == "text":
                    if on_text and self._streamed and not parts:
                        on_text("\n")  # a later step's text starts on its own line
                    parts.append(event.text)
                    self._streamed = True
                    if on_text:
                        on_text(event.text)
            final = stream.get_final_message()
        usage.add(final.usage)
        return wire.assistant_from_api(final)

    def _after_turn(self, usage: Usage) -> None:
        if self.compactor is not None:
            self.compactor.maybe_compact(usage)

    # -- used by the compactor ---------------------------------------------

    def complete(self, system: str, text: str, usage: Usage) -> str:
        """One non-streaming model call without tools (summaries)."""
        reply = self.client.messages.create(model=self.model, max_tokens=self.max_tokens,
                                            system=system,
                                            messages=[{"role": "user", "content": text}])
        usage.add(reply.usage)
        return "".join(b.text for b in reply.content if b.type == "text")


__all__ = ["Agent", "TurnResult", "Usage", "StorageError"]
