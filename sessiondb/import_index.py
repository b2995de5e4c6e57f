"""An import's search index: left to the off-commit indexer, then driven to date.

An import writes canonical rows only (see importer.py); every row it adds
gets an id above the index watermark (search_index.py), so the indexer
owes it and search covers it through the exact tail scan (search_tail.py)
the moment its chunk commits. After the last chunk the import drives the
indexer itself, through the store's public entry point
(`SessionDB.catch_up_index`): batches of the indexer's own size, each its
own short write transaction, so another process's writes interleave and
the write lock is never held for the whole index build (a one-transaction
rebuild held it for 9 minutes at a million messages).

That keeps search's tail bound (``search_tail.TAIL_ROWS``): once this
returns "caught_up" the tail is empty. When it stops early (another
process holds the write lock past the indexer's patience, or the index is
stale), what is left is still searched exactly: a search on a writable
handle catches a long backlog up first, the next open's background
indexer finishes it, and a read-only search covers the oldest
``TAIL_ROWS`` of it and says it is partial.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Callable

from .errors import StorageError

if TYPE_CHECKING:  # for type hints only
    from .store import SessionDB

log = logging.getLogger(__name__)

#: rows per progress step; the indexer's batches inside a step are each their own
#: transaction (indexer.BATCH_ROWS rows)
STEP_ROWS = 5_000

Progress = Callable[[int], None]


def backlog_rows(db: "SessionDB") -> int:
    """Rows (and change-log entries) the index has not caught up on; 0 without an index."""
    backlog = db.index_backlog()
    return 0 if backlog is None else backlog.tail + backlog.changes


def state(db: "SessionDB") -> tuple[str, int]:
    """Where the index stands, without indexing (a dry run reports this)."""
    backlog = db.index_backlog()
    if backlog is None or backlog.empty:
        return "caught_up", 0
    return ("stale" if backlog.stale else "pending"), backlog.tail + backlog.changes


def catch_up(db: "SessionDB", progress: Progress | None = None) -> tuple[str, int]:
    """Index what the import left, in batches; returns (state, rows left):
    "caught_up", "pending" (stopped early: the background indexer or the
    next open finishes) or "stale" (the index was not trusted before: only
    `sessions reindex` or the next lone open rebuilds it)."""
    where = state(db)
    if where[0] != "pending":
        return where
    try:
        while True:
            done = db.catch_up_index(STEP_ROWS)
            if progress is not None and done:
                progress(done)
            if done < STEP_ROWS:
                break
    except StorageError as e:  # the rows are committed; the index waits for the indexer
        log.info("the import left the search index behind: %s", e)
    left = backlog_rows(db)
    return ("caught_up" if left == 0 else "pending"), left
