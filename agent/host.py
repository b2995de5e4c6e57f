"""The agent as its helpers see it: what micro-compaction and the
background review use of the `Agent` they work for.

They name these protocols, not `Agent`: the loop builds its compactor and
its reviewer, so importing the loop from them would be an import cycle,
and a protocol says exactly which parts of the agent each one touches."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Callable, Protocol, TYPE_CHECKING

if TYPE_CHECKING:  # for type hints only
    import anthropic

    from sessiondb import StoreFace

    from .persist import TurnPersistence
    from .tools import ToolRegistry
    from .usage import Usage


class SessionHost(Protocol):
    """An agent's session: its store, id, model and transcript."""

    db: StoreFace  # auxiliary model calls are billed to its usage ledger
    session_id: str
    model: str
    messages: list[dict[str, Any]]


class CompactionHost(SessionHost, Protocol):
    """What `MicroCompactor` uses: the summarizer call and the turn's
    persistence, which stores a compaction."""

    store: TurnPersistence

    def complete(self, system: str, text: str, usage: Usage) -> str: ...


class ReviewHost(SessionHost, Protocol):
    """What `Reviewer` and `ReviewFork` use: the home (memories, skills), the
    parent's tools and client, its exact request prefix, and its interrupt."""

    home: Path
    tools: ToolRegistry
    client: anthropic.Anthropic

    def request_kwargs(self, messages: list[dict[str, Any]]) -> dict[str, Any]: ...

    def add_interrupt_target(self, cancel: Callable[[], None]) -> None: ...

    def remove_interrupt_target(self, cancel: Callable[[], None]) -> None: ...
