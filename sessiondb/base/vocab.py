"""The store's fixed words: the states a message row can be in.

A `StrEnum`, so a member is its string: rows, JSON exports and reports
keep the plain values, and a state read back from SQLite (a plain str)
compares equal to its member. SQL text keeps the literal (`state =
'active'`); the schema's CHECK constraint is pinned to this enum by
tests/sessiondb/base/test_vocab.py.
"""
from __future__ import annotations

from enum import StrEnum


class MessageState(StrEnum):
    """A message row's state: live, archived by a compaction, or rewound."""

    ACTIVE = "active"
    ARCHIVED = "archived"
    REWOUND = "rewound"
