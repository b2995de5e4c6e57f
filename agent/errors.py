"""Typed errors of the agent package (memory and skill files)."""
from __future__ import annotations


class AgentError(Exception):
    """Base of the agent's own typed errors; ``path`` names the file concerned."""

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message)
        self.path = path


class MemoryEditError(AgentError):
    """A memory operation cannot be done (bad input, no match, full)."""


class MemoryFull(MemoryEditError):
    """The entry would take the file over its size cap."""

    def __init__(self, message: str, *, path: str | None = None, used: int = 0,
                 cap: int = 0) -> None:
        super().__init__(message, path=path)
        self.used, self.cap = used, cap


class SkillError(AgentError):
    """A skill cannot be created, patched or read (bad name or frontmatter, no match)."""


class HomeFileError(AgentError):
    """A memory or skill file cannot be read or written (the OS said no)."""
