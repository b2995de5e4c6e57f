"""Token usage of model calls, counted per turn, per compaction, per review."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    api_calls: int = 0

    def add(self, u: Any) -> None:
        """Count one API call's usage (an SDK ``Usage`` object)."""
        self.api_calls += 1
        self.input_tokens += getattr(u, "input_tokens", 0) or 0
        self.output_tokens += getattr(u, "output_tokens", 0) or 0
        self.cache_read_tokens += getattr(u, "cache_read_input_tokens", 0) or 0
        self.cache_write_tokens += getattr(u, "cache_creation_input_tokens", 0) or 0

    @property
    def prompt_tokens(self) -> int:
        """Every input token sent, cached or not (what an input budget counts)."""
        return self.input_tokens + self.cache_read_tokens + self.cache_write_tokens

    def ledger(self) -> dict[str, int]:
        """The counters as `SessionDB.record_auxiliary_usage` takes them."""
        return {"input_tokens": self.input_tokens, "output_tokens": self.output_tokens,
                "cache_read_tokens": self.cache_read_tokens,
                "cache_write_tokens": self.cache_write_tokens, "api_calls": self.api_calls}
