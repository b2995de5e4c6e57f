"""Search: query translation, ranked answers over the index and its tail, and
the index's health and rebuild.
"""
from . import hits, search_maintenance
from .hits import (Filters, MARK_CLOSE, MARK_OPEN, RANK_WINDOW, SCAN_BUDGET_S, SCAN_WINDOW,
                   SNIPPET_TOKENS, SearchHit, SearchResults, check_args, scan_snippet)
from .search_maintenance import SearchHealth, health_on
from .search_query import Plan, clean, plan, split_terms

__all__ = [
    "Filters",
    "MARK_CLOSE",
    "MARK_OPEN",
    "Plan",
    "RANK_WINDOW",
    "SCAN_BUDGET_S",
    "SCAN_WINDOW",
    "SNIPPET_TOKENS",
    "SearchHealth",
    "SearchHit",
    "SearchResults",
    "check_args",
    "clean",
    "health_on",
    "hits",
    "plan",
    "scan_snippet",
    "search_maintenance",
    "split_terms",
]
