"""The derived search index, kept off the commit: its tables and triggers, the
indexer that catches it up, the builder that fills it in parallel.
"""
from . import search_index
from .fts_build import ParallelBuild, cores
from .indexer import Indexer, IndexerStats
from .search_copy import IndexNotCopyable, attach_readonly, copy_search_index, index_shadows
from .search_index import (CHANGES, FTS_TABLE, INDEXES, INDEX_META_KEYS, LEGACY_TRIGRAM_TABLE,
                           TERMS_TABLE, TEXT_CAP, TEXT_INDEXES, TEXT_VIEW, TOOL_TEXT_CAP,
                           TRIGGERS, attach_triggers, corruption_is_index_only,
                           drop_triggers, fill_terms, fts_structures_damaged, index_batch,
                           set_watermark, stale_marker, term_held, triggers_attached)

__all__ = [
    "CHANGES",
    "FTS_TABLE",
    "INDEXES",
    "INDEX_META_KEYS",
    "IndexNotCopyable",
    "Indexer",
    "IndexerStats",
    "ParallelBuild",
    "LEGACY_TRIGRAM_TABLE",
    "TERMS_TABLE",
    "TEXT_CAP",
    "TEXT_INDEXES",
    "TEXT_VIEW",
    "TOOL_TEXT_CAP",
    "TRIGGERS",
    "attach_readonly",
    "attach_triggers",
    "copy_search_index",
    "cores",
    "corruption_is_index_only",
    "drop_triggers",
    "fill_terms",
    "fts_structures_damaged",
    "index_batch",
    "index_shadows",
    "search_index",
    "set_watermark",
    "stale_marker",
    "term_held",
    "triggers_attached",
]
