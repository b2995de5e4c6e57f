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
from pathlib import Path
from typing import Any, Callable

import anthropic

from sessiondb import StorageError, StoreFace, new_session_id

from . import wire
from .compact import CompactionPolicy, MicroCompactor
from .failure import NO_CREDENTIALS, NO_CREDENTIALS_FAILURE, TurnFailure, has_credentials
from .memory import MemoryConfig, load_memory_config, take_snapshot, with_snapshot
from .persist import PersistenceFailed, TurnPersistence
from .review import ReviewConfig, ReviewResult, Reviewer, strip_harness
from .tools import ToolRegistry
from .usage import Usage

log = logging.getLogger(__name__)

DEFAULT_MODEL = "claude-sonnet-5"


class TurnInterrupted(Exception):
    """Raised inside the loop when `interrupt()` was called (control flow)."""


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
    review_wait_s: float = 0.0  # how long the turn waited for a review to stop
    #: The user's text when the turn failed before the model saw it: it was
    #: taken back out of the transcript, so the next turn does not resend it.
    withdrawn: str | None = None
    #: Messages saved nowhere (neither the store nor the spool could take them).
    unsaved: list[dict[str, Any]] = field(default_factory=list)


class Agent:
    """A conversation with a model, persisted in a session of a store.

    ``memory`` (default: the home's ``[memory]`` config) says whether the
    home's saved memories and skill list go into the system prompt, as a
    snapshot read once here (agent/memory/memory_snapshot.py)."""

    def __init__(self, db: StoreFace, *, session_id: str | None = None,
                 model: str = DEFAULT_MODEL, client: anthropic.Anthropic | None = None,
                 system_prompt: str | None = None, tools: ToolRegistry | None = None,
                 max_steps: int = 8, max_tokens: int = 1024,
                 micro_compact: CompactionPolicy | None = None, source: str = "agent",
                 review: ReviewConfig | None = None,
                 on_review: Callable[[str], None] | None = None,
                 home: Path | None = None, memory: MemoryConfig | None = None) -> None:
        from .builtin_tools import default_registry
        self.db, self.model, self.max_steps, self.max_tokens = db, model, max_steps, max_tokens
        self.client = client or anthropic.Anthropic()
        self.home = Path(home) if home is not None else db.path.parent  # memories, skills
        # Read once: the system prompt heads the cache prefix, so it stays
        # byte-identical for the whole session, reviews included.
        memory = memory if memory is not None else load_memory_config(self.home)
        self.memory_snapshot = take_snapshot(self.home) if memory.inject else ""
        # The row is written with the first turn (see TurnPersistence).
        self.session_id = session_id or new_session_id(time.time())
        self.tools = tools if tools is not None else default_registry(db, self.session_id,
                                                                      self.home)
        self.holder = f"hstate_agent-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.store = TurnPersistence(db, self.session_id, self.holder, source=source,
                                     model=model)
        # Review prompts and replies an older build stored are never read back.
        self.messages: list[dict[str, Any]] = strip_harness(self.store.load())
        if not self.messages and system_prompt:
            self.messages.append({"role": "system", "content": system_prompt})
        self.compactor = MicroCompactor(self, micro_compact) if micro_compact else None
        self._interrupt = threading.Event()
        self._interrupt_targets: list[Callable[[], None]] = []
        self._targets_lock = threading.Lock()
        self._streamed = False
        # Without a config, automatic review is off (library callers opt in);
        # `refine()` runs one on request either way.
        self.reviewer = Reviewer(self, review or ReviewConfig(enabled=False), on_review)

    def interrupt(self) -> None:
        """Cancel the in-flight stream and tool loop, and every registered
        target (a background review), thread-safely."""
        self._interrupt.set()
        with self._targets_lock:
            targets = list(self._interrupt_targets)
        for cancel in targets:
            cancel()

    def add_interrupt_target(self, cancel: Callable[[], None]) -> None:
        """Make `interrupt()` also call ``cancel`` (until removed)."""
        with self._targets_lock:
            self._interrupt_targets.append(cancel)

    def remove_interrupt_target(self, cancel: Callable[[], None]) -> None:
        with self._targets_lock:
            if cancel in self._interrupt_targets:
                self._interrupt_targets.remove(cancel)

    def refine(self, focus: str | None = None, *, background: bool = False) -> ReviewResult:
        """Run a review now (``/refine``), even when automatic review is off."""
        run = self.reviewer.start(origin="refine_review", focus=focus, background=background)
        if not background:
            run.done.wait()
        return run.result

    # -- the turn ----------------------------------------------------------

    def run_turn(self, user_text: str, *, on_text: Callable[[str], None] | None = None
                 ) -> TurnResult:
        """Run one user turn to its end, an interrupt, a failure, or max_steps.

        A review still running from the last turn is cancelled first (waiting
        at most 2 s for it to stop); after a completed turn the next review
        may start in the background (see agent/review/review.py). A client that
        cannot authenticate fails the turn before anything is written
        (failure_reason ``model_error:no_credentials``), never with the SDK's
        bare TypeError."""
        if not has_credentials(self.client):
            return TurnResult(False, False, True, "", failure_reason=NO_CREDENTIALS,
                              explanation=NO_CREDENTIALS_FAILURE)
        waited = self.reviewer.cancel_and_wait()
        result = self._run_turn(user_text, on_text)
        result.review_wait_s = waited
        self.reviewer.after_turn(result.completed)
        return result

    def _run_turn(self, user_text: str, on_text: Callable[[str], None] | None) -> TurnResult:
        self._interrupt.clear()
        self._streamed = False  # text already passed to on_text in this turn
        usage, steps, answer = Usage(), 0, ""
        user = {"role": "user", "content": user_text, "timestamp": time.time()}
        try:
            self.messages.append(user)
            self.store.begin_turn(self.messages)
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
            withdrawn = self._withdraw(user) if steps == 0 else None
            return TurnResult(False, False, True, answer or wire.pending_text(self.messages),
                              failure_reason=f"session_persistence_failed:{e.cause}",
                              explanation=TurnFailure.from_storage(e.failure), usage=usage,
                              steps=steps, withdrawn=withdrawn, unsaved=list(e.error.unsaved))
        except anthropic.APIError as e:
            reason = getattr(e, "type", None) or type(e).__name__
            code = f"model_error:{reason}"
            return TurnResult(False, False, True, answer, failure_reason=code,
                              explanation=TurnFailure.from_model_error(code, e), usage=usage,
                              steps=steps)
        finally:
            self.store.end_turn(usage, self.model)

    def _withdraw(self, user: dict[str, Any]) -> str | None:
        """Take back a user line the model never saw (its turn failed at the
        start), so it is not sent again, unannounced, with the next line."""
        if self.messages and self.messages[-1] is user:
            self.messages.pop()
            return str(user["content"])
        return None

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
        parts: list[str] = []
        with self.client.messages.stream(**self.request_kwargs(self.messages)) as stream:
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

    def request_kwargs(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        """The Messages API arguments for ``messages``; the review fork uses
        this too, so its request prefix is the live turn's, byte for byte."""
        system, wire_messages = wire.to_api(messages)
        system = with_snapshot(system, self.memory_snapshot)
        kwargs: dict[str, Any] = {"model": self.model, "max_tokens": self.max_tokens,
                                  "messages": wire_messages}
        if system:
            kwargs["system"] = system
        if self.tools.names():
            kwargs["tools"] = self.tools.to_api()
        return kwargs

    def _after_turn(self, usage: Usage) -> None:
        if self.compactor is not None:
            self.compactor.maybe_compact()

    # -- used by the compactor ---------------------------------------------

    def complete(self, system: str, text: str, usage: Usage) -> str:
        """One non-streaming model call without tools (summaries)."""
        reply = self.client.messages.create(model=self.model, max_tokens=self.max_tokens,
                                            system=system,
                                            messages=[{"role": "user", "content": text}])
        usage.add(reply.usage)
        return "".join(b.text for b in reply.content if b.type == "text")


__all__ = ["Agent", "TurnResult", "Usage", "StorageError"]
