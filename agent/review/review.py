"""Background review: after a completed turn, a fork asks the model whether
anything should be saved to memory or the skill library.

This module owns when a review runs and how it is stopped: the gate
(completed turns, review enabled), one run at a time per agent (a run token
with cancel and done events; a finished run never clears a newer one),
registration where `Agent.interrupt()` fans out, cancellation by the next
live turn (which waits at most ``CANCEL_WAIT_S`` for the acknowledgement),
billing in a ``finally`` to the session's usage ledger (task
``background_review``), and the summary of what was saved. The fork's loop
is in review_fork.py; the configuration in review_config.py.
"""
from __future__ import annotations

import logging
import threading
import time
from typing import Callable, TYPE_CHECKING

from sessiondb import strip_markers

from .review_config import ReviewConfig
from .review_fork import ReviewCancelled, ReviewFork, ReviewResult, ReviewRun, ReviewStatus

if TYPE_CHECKING:
    from ..host import ReviewHost

log = logging.getLogger(__name__)

CANCEL_WAIT_S = 2.0
TASK = "background_review"
ORIGINS = ("background_review", "refine_review")


def format_summary(result: ReviewResult, mode: str) -> str | None:
    """The line(s) a user sees: ``on`` lists saves only, ``verbose`` also
    says when nothing was saved and how the run ended."""
    if mode == "off":
        return None
    lines = [f"[review] {a}" for a in result.actions]
    if mode == "verbose":
        lines.append(f"[review] {result.status}: {len(result.actions)} saved, "
                     f"{result.steps} steps, {result.usage.prompt_tokens} input tokens"
                     + (f" ({result.error})" if result.error else ""))
    return "\n".join(lines) or None


class Reviewer:
    """An agent's reviews: at most one in flight."""

    def __init__(self, agent: "ReviewHost", config: ReviewConfig,
                 on_summary: Callable[[str], None] | None = None) -> None:
        self.agent, self.config, self.on_summary = agent, config, on_summary
        self._lock = threading.Lock()
        self._current: ReviewRun | None = None
        self.last: ReviewResult | None = None
        self.threads: list[threading.Thread] = []

    @property
    def current(self) -> ReviewRun | None:
        with self._lock:
            return self._current

    def after_turn(self, completed: bool) -> ReviewRun | None:
        """The gate: a background review after a completed turn, when enabled."""
        if not (completed and self.config.enabled):
            return None
        return self.start(origin="background_review")

    def start(self, *, origin: str, focus: str | None = None,
              background: bool = True) -> ReviewRun:
        """Start a review of the transcript as it is now (replacing one in flight)."""
        if origin not in ORIGINS:
            raise ValueError(f"unknown review origin {origin!r}")
        self.cancel_and_wait()
        run = ReviewRun(origin)
        snapshot = strip_markers(self.agent.messages)
        with self._lock:
            self._current = run
        self.agent.add_interrupt_target(run.cancel)
        if not background:
            self._run(run, snapshot, focus)
            return run
        thread = threading.Thread(target=self._run, args=(run, snapshot, focus),
                                  name=f"review-{self.agent.session_id}", daemon=True)
        self.threads = [t for t in self.threads if t.is_alive()] + [thread]
        thread.start()
        return run

    def cancel_and_wait(self, timeout: float = CANCEL_WAIT_S) -> float:
        """Cancel the review in flight and wait for it to stop, at most
        ``timeout`` seconds; returns the seconds waited (0.0 when none ran)."""
        run = self.current
        if run is None or run.done.is_set():
            return 0.0
        t0 = time.perf_counter()
        run.cancel()
        if not run.done.wait(timeout):
            log.warning("the background review did not stop within %.1fs; the turn goes "
                        "on without waiting (its usage stays separate)", timeout)
        return time.perf_counter() - t0

    def wait(self, timeout: float | None = None) -> ReviewResult | None:
        """Wait for the review in flight to end by itself (e.g. before exiting)."""
        run = self.current
        if run is not None:
            run.done.wait(timeout)
        return self.last

    def _run(self, run: ReviewRun, snapshot: list, focus: str | None) -> None:
        result = run.result
        try:
            fork = ReviewFork(self.agent, snapshot, run, focus=focus,
                              max_steps=self.config.max_steps,
                              max_input_tokens=self.config.max_input_tokens)
            fork.execute()
        except ReviewCancelled:
            result.status = ReviewStatus.CANCELLED
        except Exception as e:  # noqa: BLE001 (a review never breaks the chat)
            result.status, result.error = ReviewStatus.FAILED, f"{type(e).__name__}: {e}"
            log.warning("background review failed: %s", result.error)
        finally:
            self._finish(run)

    def _finish(self, run: ReviewRun) -> None:
        """Bill, summarize, and clear the run token unless a newer one replaced it."""
        result = run.result
        try:
            if result.usage.api_calls:
                result.billed = self.agent.db.record_auxiliary_usage(
                    self.agent.session_id, task=TASK, model=self.agent.model,
                    provider="anthropic", **result.usage.ledger())
            self.last = result
            text = format_summary(result, self.config.summary)
            if text and self.on_summary is not None:
                self.on_summary(text)
        except Exception:  # noqa: BLE001 (a summary callback must not kill the thread)
            log.warning("review summary callback failed", exc_info=True)
        finally:
            self.agent.remove_interrupt_target(run.cancel)
            with self._lock:
                if self._current is run:
                    self._current = None
            run.done.set()
