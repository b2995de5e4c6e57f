"""Maintenance and export: prune, pin and optimize, the store's statistics, and
export to JSONL and Markdown.
"""
from . import lifecycle, stats
from .export import (EXPORT_FORMAT, EXPORT_VERSION, ExportSummary, FORMATS, export_sessions,
                     export_to_path, message_window)
from .graph_prune import CheckpointPrune, prune_checkpoints
from .lifecycle import PruneFilter, PrunePlan, WHY, parse_age, parse_size, refuse_if_held
from .render import render_text
from .stats import STATES

__all__ = [
    "CheckpointPrune",
    "EXPORT_FORMAT",
    "EXPORT_VERSION",
    "ExportSummary",
    "FORMATS",
    "PruneFilter",
    "PrunePlan",
    "STATES",
    "WHY",
    "export_sessions",
    "export_to_path",
    "lifecycle",
    "message_window",
    "parse_age",
    "parse_size",
    "prune_checkpoints",
    "refuse_if_held",
    "render_text",
    "stats",
]
