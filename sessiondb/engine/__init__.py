"""The engine: one writer connection, the one write primitive, containment, the
checkpointer and the migrations.
"""
from . import checkpointer, containment, migrations
from .checkpointer import CheckpointStats
from .core import BUSY, StoreCore, begin_immediate, retry_busy, transaction
from .migrations import applied, apply_pending, pending, unknown

__all__ = [
    "BUSY",
    "CheckpointStats",
    "StoreCore",
    "applied",
    "apply_pending",
    "begin_immediate",
    "checkpointer",
    "containment",
    "migrations",
    "pending",
    "retry_busy",
    "transaction",
    "unknown",
]
