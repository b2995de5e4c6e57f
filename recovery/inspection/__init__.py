"""inspect-only: what a file is, how damaged, and the next command."""
from . import examine
from .examine import (InspectReport, QUICK_CHECK_SECONDS, advice, bounded_quick_check,
                      complete_quick_check, inspect, inspect_snapshot, open_copy, store_place)
from .inspect_fts import fts_health, match_probe, sampled_health
from .integrity import integrity_lines, virtual_tables
from .schema_source import fallback_catalog

__all__ = [
    "InspectReport",
    "QUICK_CHECK_SECONDS",
    "advice",
    "bounded_quick_check",
    "complete_quick_check",
    "examine",
    "fallback_catalog",
    "fts_health",
    "inspect",
    "inspect_snapshot",
    "integrity_lines",
    "match_probe",
    "open_copy",
    "sampled_health",
    "store_place",
    "virtual_tables",
]
