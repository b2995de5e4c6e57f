"""The lanes in the order recover runs them, gentle to forceful: adding a
lane is one entry here."""
from __future__ import annotations

from .backup_lane import backup_lane
from .carve_lane import carve_lane
from .context import Lane
from .index_lane import index_lane
from .sql_lanes import bisect_lane, row_copy_lane

LANES: dict[str, Lane] = {
    "backup": backup_lane,
    "rows": row_copy_lane,
    "bisect": bisect_lane,
    "index": index_lane,
    "carve": carve_lane,
}
