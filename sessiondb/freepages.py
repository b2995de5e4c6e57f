"""Free pages given back to the filesystem when a store closes.

The search indexer's FTS5 merges free the pages of the segments they merge;
later writes reuse them, but a store at rest keeps whatever the last merges
freed (0-25 bytes a message on the B1 corpus, docs/benchmarks.md). New
files are created with ``auto_vacuum=INCREMENTAL`` (policy.py), so the
closing handle can move pages from the end of the file into those holes
and truncate it, in one short write transaction, without a VACUUM.

A file made before that (``auto_vacuum`` NONE) is left as it is: its mode
changes only with a VACUUM, and `hermes sessions optimize` returns its free
pages. The work at close is bounded (`CLOSE_PAGES` a close) and never waits
on another process's lock: a busy store keeps its free pages for next time.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from .errors import StorageError
from .rows import one

if TYPE_CHECKING:
    from .core import StoreCore

log = logging.getLogger(__name__)

INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL
CLOSE_PAGES = 4096  # at most this many pages moved a close (8 MiB at 2 KiB pages)


def reclaim_on_close(core: "StoreCore") -> int:
    """Give back up to CLOSE_PAGES free pages of an incremental-vacuum file;
    returns how many were free before. Never raises: a close must not fail
    for want of a tidy-up."""
    try:
        conn = core.writer
        if int(one(conn.execute("PRAGMA auto_vacuum"))[0]) != INCREMENTAL:
            return 0
        (free,) = one(conn.execute("PRAGMA freelist_count"))
        if not free:
            return 0
        with core.write(patience=0.0) as conn:
            conn.execute(f"PRAGMA incremental_vacuum({CLOSE_PAGES})").fetchall()
        return int(free)
    except StorageError as e:
        log.debug("free pages kept at close: %s", e)
        return 0
