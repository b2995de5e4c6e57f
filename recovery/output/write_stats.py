"""What went into a recovered store of ours: the names of its side tables
and the counts the report is built from (never row values)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

PLACEHOLDER_SOURCE = "recovered"
PLACEHOLDER_TITLE = "Recovered messages (the original session row was lost)"
QUARANTINE = "recovery_quarantine"
LOST_AND_FOUND = "lost_and_found"
MARKED = "recovery_marked_rows"
NOT_COPIED = {"leases": "turn leases belong to processes of the damaged store; not carried over"}


@dataclass
class TableWrite:
    """What went into the output for one table."""

    inserted: int = 0
    quarantined: int = 0
    note: str | None = None


@dataclass
class WriteStats:
    tables: dict[str, TableWrite] = field(default_factory=dict)
    placeholders: list[str] = field(default_factory=list)
    parent_links_dropped: int = 0
    quarantined_values: int = 0
    per_session: dict[str, int] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)  # finish's steps, seconds
    # how the search index was made: {"method": "copied" | "rebuilt", "reason": why not copied}
    search_index: dict[str, Any] = field(default_factory=dict)

    def table(self, name: str) -> TableWrite:
        return self.tables.setdefault(name, TableWrite())
