"""Micro-compaction: fold the oldest exchange into one rolling summary.

After a completed turn, while the active transcript is over the token
threshold, the oldest un-absorbed exchange (an assistant message and its
tool results) is summarized by a model call together with the previous
rolling summary, and `archive_and_compact` archives the exchange behind the
new summary (nothing is deleted). The head (system prompt, first user
message) and the tail (recent messages) are never absorbed. An exchange the
summarizer fails on is retried a bounded number of times, then skipped for
good so it cannot stall every turn.
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any, TYPE_CHECKING

from sessiondb import StorageError, UID_KEY, strip_markers

from .usage import Usage

if TYPE_CHECKING:
    from .host import CompactionHost

TASK = "compaction"  # the usage ledger's task for the summarizer's calls

log = logging.getLogger(__name__)

SUMMARY_KEY = "rolling_summary"  # public key that flags a summary dict in the transcript
SUMMARY_SYSTEM = ("You maintain a rolling summary of an agent's earlier work. Merge the "
                  "previous summary and the exchange below into one short summary that keeps "
                  "facts, decisions, tool findings and open questions. Reply with the summary "
                  "only.")


@dataclass(frozen=True)
class CompactionPolicy:
    """When and how much to compact. `enabled=False` is the off switch."""

    token_threshold: int = 3000
    keep_tail: int = 6
    max_attempts: int = 2
    max_per_turn: int = 4
    enabled: bool = True


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    """About four characters per token over what is sent to the model."""
    return sum(len(json.dumps(m, ensure_ascii=False, default=str)) for m in
               strip_markers(messages)) // 4


def protected_head(messages: list[dict[str, Any]]) -> int:
    """Index just past the system prompt(s) and the first user message."""
    for i, m in enumerate(messages):
        if m.get("role") == "user" and not m.get(SUMMARY_KEY):
            return i + 1
    return len(messages)


def next_exchange(messages: list[dict[str, Any]], keep_tail: int,
                  skipped: set[str]) -> tuple[int, int] | None:
    """[start, end) of the oldest absorbable exchange, or None."""
    limit = len(messages) - keep_tail
    i = protected_head(messages)
    while i < limit:
        m = messages[i]
        if m.get("role") == "assistant" and not m.get(SUMMARY_KEY) \
                and m.get(UID_KEY) not in skipped:
            end = i + 1
            while end < len(messages) and messages[end].get("role") == "tool":
                end += 1
            # Tool results that reach into the tail stay with their call.
            return (i, end) if end <= limit else None
        i += 1
    return None


def previous_summary(messages: list[dict[str, Any]]) -> str:
    for m in messages:
        if m.get(SUMMARY_KEY):
            return str(m.get("content") or "")
    return ""


def render_exchange(span: list[dict[str, Any]]) -> str:
    lines = []
    for m in strip_markers(span):
        text = m.get("content") if isinstance(m.get("content"), str) else json.dumps(
            m.get("content"))
        calls = ", ".join(c.get("function", {}).get("name", "?") for c in m.get("tool_calls") or [])
        lines.append(f"[{m['role']}{' calls ' + calls if calls else ''}] {text}")
    return "\n".join(lines)


class MicroCompactor:
    """Runs micro-compaction for one agent after its completed turns."""

    def __init__(self, agent: "CompactionHost", policy: CompactionPolicy) -> None:
        self.agent, self.policy = agent, policy
        self.skipped: set[str] = set()
        self.failures: dict[str, int] = {}
        self.compactions = 0

    def maybe_compact(self) -> int:
        """Compact while over the threshold; returns how many exchanges were folded.
        The summarizer's calls are billed to the session's usage ledger as
        task ``compaction``, never to the turn."""
        done = 0
        while (self.policy.enabled and done < self.policy.max_per_turn
               and estimate_tokens(self.agent.messages) > self.policy.token_threshold):
            span = next_exchange(self.agent.messages, self.policy.keep_tail, self.skipped)
            if span is None:
                break
            if self._fold(span):
                done += 1
        self.compactions += done
        return done

    def _fold(self, span: tuple[int, int]) -> bool:
        msgs = self.agent.messages
        absorbed = msgs[span[0]:span[1]]
        key = absorbed[0].get(UID_KEY, "")
        text = f"Previous summary:\n{previous_summary(msgs) or '(none)'}\n\nExchange:\n" \
               f"{render_exchange(absorbed)}"
        usage = Usage()
        try:
            summary = self.agent.complete(SUMMARY_SYSTEM, text, usage).strip()
            if not summary:
                raise ValueError("empty summary")
        except Exception as e:  # any summarizer failure counts; the turn is already done
            self._bill(usage)
            self.failures[key] = self.failures.get(key, 0) + 1
            log.warning("summary of exchange %s failed (%s)", key, e)
            if self.failures[key] >= self.policy.max_attempts:
                self.skipped.add(key)
            return False
        self._bill(usage)
        try:
            self.agent.store.compact(msgs, span, {"role": "assistant", "content": summary,
                                                  SUMMARY_KEY: True})
        except StorageError as e:  # the turn is done; compaction can wait for the next one
            log.warning("micro-compaction of %s not stored: %s", key, e)
            return False
        return True

    def _bill(self, usage: Usage) -> None:
        if usage.api_calls:
            self.agent.db.record_auxiliary_usage(self.agent.session_id, task=TASK,
                                                 model=self.agent.model,
                                                 provider="anthropic", **usage.ledger())
