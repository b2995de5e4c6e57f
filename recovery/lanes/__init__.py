"""The lanes, gentle to forceful: backup, row copy, bisection, index, carving.
"""
from .backup_lane import BACKUP_IMAGE
from .registry import LANES
from .context import (Budget, DEFAULT_BUDGET, DEFAULT_CHUNK, EVERYTHING, ImageRows, LOST,
                    LaneContext, LaneResult, PRESENT_CHUNK, Progress, TableState, subtract_rowids)

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
