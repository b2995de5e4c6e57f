"""The page carver: records read from b-tree pages and WAL frames without
SQLite.
"""
from . import tree_map
from .carve_types import (CarveError, CarveResult, CarveStats, FREELIST, LostRecord, RowOrigin,
                          UNCOMMITTED)
from .carver import Carver, Resolver, Want, WantSpan, estimate, open_source
from .tree_map import TreeMap

__all__ = [
    "CarveError",
    "CarveResult",
    "CarveStats",
    "Carver",
    "FREELIST",
    "LostRecord",
    "Resolver",
    "RowOrigin",
    "TreeMap",
    "UNCOMMITTED",
    "Want",
    "WantSpan",
    "estimate",
    "open_source",
    "tree_map",
]
