"""Kept for imports of ``sessiondb.txn.Atomic``: the write primitive lives in
sessiondb/core.py with the state it changes."""
from .core import Atomic

__all__ = ["Atomic"]
