"""The review fork's loop: replay the snapshot, ask, dispatch whitelisted tools.

The fork is not an `Agent`: it has no store handle for the transcript and
no compactor, so it cannot write, compact, archive or end the session. It
sends the live agent's exact request prefix (same client, model,
max_tokens, system prompt and ``tools[]``: `Agent.request_kwargs`) so the
provider's prompt cache is warm, followed by the review prompt. Tool calls
are checked at dispatch: memory and skill tools run with the review's write
origin, read-only tools run as the parent's, everything else is refused
with an error result that says "do not retry".
"""
from __future__ import annotations

import json
import logging
import socket
import threading
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any, TYPE_CHECKING

from .. import wire
from ..memory import HomeTools, READ_TOOLS, WRITE_TOOLS
from ..silence import silenced
from ..tools import ToolOutcome, ToolRegistry
from ..usage import Usage
from .review_prompt import review_prompt

if TYPE_CHECKING:
    from ..host import ReviewHost

log = logging.getLogger(__name__)

PARENT_READ_TOOLS = ("session_search", "session_messages")
ALLOWED = (*WRITE_TOOLS, *READ_TOOLS, *PARENT_READ_TOOLS)
ASKS_USER = ("clarify", "ask_user", "request_user_input")


class ReviewStatus(StrEnum):
    """How a background review ended (a StrEnum: logs and JSON show the plain word)."""

    RUNNING = "running"
    DONE = "done"
    CANCELLED = "cancelled"
    MAX_STEPS = "max_steps"
    TOKEN_BUDGET = "token_budget"
    FAILED = "failed"


@dataclass
class ReviewResult:
    """How a review ended; ``actions`` are its saves ("Memory updated", ...)."""

    origin: str
    status: ReviewStatus = ReviewStatus.RUNNING
    actions: list[str] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    steps: int = 0
    error: str | None = None
    billed: bool = False


class ReviewCancelled(Exception):
    """The run's cancel event was set (control flow inside the fork)."""


class ReviewRun:
    """One review's run token: its cancel and done events and live stream."""

    def __init__(self, origin: str) -> None:
        self.cancel_event = threading.Event()
        self.done = threading.Event()
        self.result = ReviewResult(origin)
        self._stream: Any = None
        self._lock = threading.Lock()

    def cancel(self) -> None:
        """Ask the fork to stop; closes its in-flight stream so a blocked read
        returns now rather than at the next event."""
        self.cancel_event.set()
        with self._lock:
            stream = self._stream
        if stream is not None:
            abort_stream(stream)

    def attach(self, stream: Any) -> None:
        with self._lock:
            self._stream = stream
        if self.cancel_event.is_set():
            self.cancel()


def abort_stream(stream: Any) -> None:
    """Stop a stream another thread is reading, now: closing the response
    alone does not wake a read blocked in ``recv`` (a model that pauses
    between chunks), shutting the socket down does."""
    try:
        network = stream.response.extensions.get("network_stream")
        sock = network.get_extra_info("socket") if network is not None else None
        if sock is not None:
            sock.shutdown(socket.SHUT_RDWR)
    except Exception:  # noqa: BLE001 (best effort; the close below still runs)
        log.debug("could not shut the review's socket down", exc_info=True)
    try:
        stream.close()
    except Exception:  # noqa: BLE001 (closing a stream another thread reads)
        log.debug("closing the review's stream failed", exc_info=True)


def deny(name: str) -> ToolOutcome:
    if name in ASKS_USER:
        return ToolOutcome(f"{name} would ask the user, and no user is present in a "
                           "background review: denied. Do not retry this call.", True)
    return ToolOutcome(f"tool {name!r} is not available in a background review; allowed: "
                       f"{', '.join(ALLOWED)}. Do not retry this call.", True)


class ReviewFork:
    """Runs one review of ``snapshot`` for ``agent`` (in the caller's thread)."""

    def __init__(self, agent: "ReviewHost", snapshot: list[dict[str, Any]], run: ReviewRun, *,
                 focus: str | None, max_steps: int, max_input_tokens: int) -> None:
        self.agent, self.run, self.max_steps = agent, run, max_steps
        self.max_input_tokens = max_input_tokens
        self.messages = [*snapshot, {"role": "user", "content": review_prompt(focus)}]
        self.home_tools = HomeTools(agent.home, run.result.origin, agent.session_id,
                                    stage_edits=run.result.origin == "background_review")
        self.own = ToolRegistry(self.home_tools.tools())  # with the review's write origin

    def dispatch(self, name: str, args: Any) -> ToolOutcome:
        """The whitelist: the fork sees the parent's tools but may run only these."""
        if name in self.own.names():
            return self.own.call(name, args)
        if name in PARENT_READ_TOOLS and name in self.agent.tools.names():
            return self.agent.tools.call(name, args)
        return deny(name)

    def execute(self) -> ReviewResult:
        """The loop; the usage is snapshotted by the caller's ``finally``."""
        result = self.run.result
        with silenced():
            for _ in range(self.max_steps):
                if 0 < self.max_input_tokens <= result.usage.prompt_tokens:
                    result.status = ReviewStatus.TOKEN_BUDGET
                    return result
                self._check()
                result.steps += 1
                reply = self._step(result.usage)
                self.messages.append(reply)
                if not reply.get("tool_calls"):
                    result.status = ReviewStatus.DONE
                    return result
                for call in reply["tool_calls"]:
                    self._check()
                    self._tool(call, result)
            result.status = ReviewStatus.MAX_STEPS
        return result

    def _check(self) -> None:
        if self.run.cancel_event.is_set():
            raise ReviewCancelled()

    def _tool(self, call: dict[str, Any], result: ReviewResult) -> None:
        fn = call.get("function", {})
        name = fn.get("name", "")
        outcome = self.dispatch(name, wire.parse_args(fn.get("arguments")))
        message = {"role": "tool", "tool_call_id": call.get("id", ""), "name": name,
                   "content": outcome.text}
        if outcome.is_error:
            message["is_error"] = True
        self.messages.append(message)
        if not outcome.is_error and name in WRITE_TOOLS:
            done = _done_line(outcome.text)
            if done:
                result.actions.append(done)

    def _step(self, usage: Usage) -> dict[str, Any]:
        kwargs = self.agent.request_kwargs(self.messages)
        stream: Any = None
        try:
            with self.agent.client.messages.stream(**kwargs) as stream:
                self.run.attach(stream)
                for _event in stream:
                    self._check()
                # cancel() closes the stream, and a closed stream may end its
                # iteration cleanly: without this check a cancelled review
                # would finish on the partial message as DONE.
                self._check()
                final = stream.get_final_message()
        except Exception:
            _add_partial(usage, stream)  # a cut-short call still cost its input
            if self.run.cancel_event.is_set():
                raise ReviewCancelled() from None
            raise
        finally:
            self.run.attach(None)
        usage.add(final.usage)
        return wire.assistant_from_api(final)


def _add_partial(usage: Usage, stream: Any) -> None:
    """Count what a stream cut short had cost by then (its message_start usage)."""
    getter = getattr(stream, "_current_snapshot_or_none", None)
    snapshot = getter() if callable(getter) else None
    if snapshot is not None and getattr(snapshot, "usage", None) is not None:
        usage.add(snapshot.usage)


def _done_line(text: str) -> str | None:
    """The ``done`` line of a write tool's JSON result; None when malformed."""
    try:
        doc = json.loads(text)
    except ValueError:
        return None
    done = doc.get("done") if isinstance(doc, dict) else None
    return done if isinstance(done, str) and done else None
