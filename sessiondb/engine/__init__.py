"""The engine: one writer connection, the one write primitive, containment, the
checkpointer and the migrations.
"""
from . import checkpointer, containment, migrations
from .damage_record import DamageRecord, clear_damage, read_record, record_damage
from .checkpointer import CheckpointStats
from .core import BUSY, StoreCore, begin_immediate, retry_busy, transaction
from .migrations import applied, apply_pending, pending, unknown

__all__ = [
    "BUSY",
    "CheckpointStats",
    "DamageRecord",
    "StoreCore",
    "applied",
    "apply_pending",
    "begin_immediate",
    "checkpointer",
    "clear_damage",
    "containment",
    "migrations",
    "pending",
    "read_record",
    "record_damage",
    "retry_busy",
    "transaction",
    "unknown",
]
