"""The lanes, gentle to forceful: backup, row copy, bisection, index, carving.
"""
from .backup_lane import BACKUP_IMAGE
from .context import (Budget, DEFAULT_BUDGET, DEFAULT_CHUNK, EVERYTHING, ImageRows, LOST,
                      LaneContext, LaneResult, PRESENT_CHUNK, Progress, TableState,
                      subtract_rowids)
from .registry import LANES

__all__ = [
    "BACKUP_IMAGE",
    "Budget",
    "DEFAULT_BUDGET",
    "DEFAULT_CHUNK",
    "EVERYTHING",
    "ImageRows",
    "LANES",
    "LOST",
    "LaneContext",
    "LaneResult",
    "PRESENT_CHUNK",
    "Progress",
    "TableState",
    "subtract_rowids",
]
