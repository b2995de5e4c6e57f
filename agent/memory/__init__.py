"""Memories and skills: the home's files, crash-safe and private."""
from .memory import MemoryStore, TARGETS
from .memory_pending import PendingChanges
from .memory_snapshot import MemoryConfig, load_memory_config, take_snapshot, with_snapshot
from .memory_tools import HomeTools, READ_TOOLS, WRITE_TOOLS
from .skills import SkillStore

__all__ = [
    "HomeTools",
    "MemoryConfig",
    "MemoryStore",
    "PendingChanges",
    "READ_TOOLS",
    "SkillStore",
    "TARGETS",
    "WRITE_TOOLS",
    "load_memory_config",
    "take_snapshot",
    "with_snapshot",
]
