"""Free pages given back to the filesystem by the indexer, not by close.

FTS5 merges segments as the indexer writes: a merge frees the pages of the
segments it replaced, and a store that stops growing keeps them as free
pages (up to ~20 bytes a message on the B1 corpus, docs/benchmarks.md).
New stores are created with ``auto_vacuum=INCREMENTAL`` (`policy`), so
``PRAGMA incremental_vacuum`` can move and truncate them inside an ordinary
write transaction. The indexer runs it at the end of a catch-up that
indexed new rows, in a transaction of its own right after the last batch
commits (FTS5 writes and merges at commit), when the freelist is large
(`free_pages_worth_returning`): it is already a writer on its own
connection, so no other handle writes for it. Pages freed by deletes
alone (`sessions prune`) stay for `sessions optimize` and later writes,
as before, unless a later catch-up of new rows finds them. Never at close
(dry runs, read-only and quarantined handles, a close under another
process's lock must write nothing), never from a read-only handle. A file
without incremental auto-vacuum (every store created before m012) is left
as it is.
"""
from __future__ import annotations

import apsw

from ..base import one

INCREMENTAL = 2  # PRAGMA auto_vacuum's value for INCREMENTAL
MIN_PAGES = 8
# Free pages below this share of the file are left for later writes to
# reuse (the next merge or append takes them): returning them would only
# make the file grow again.
SHARE = 128


def free_pages_worth_returning(conn: apsw.Connection) -> int:
    """How many free pages the file would give back now (0: not worth it,
    or the file cannot: no incremental auto-vacuum)."""
    if one(conn.execute("PRAGMA auto_vacuum"))[0] != INCREMENTAL:
        return 0
    (free,) = one(conn.execute("PRAGMA freelist_count"))
    (pages,) = one(conn.execute("PRAGMA page_count"))
    return int(free) if free >= max(MIN_PAGES, pages // SHARE) else 0


def return_free_pages(conn: apsw.Connection) -> int:
    """In the caller's write transaction: give the free pages back when
    there are enough (see `free_pages_worth_returning`); returns how many."""
    if not free_pages_worth_returning(conn):
        return 0
    (before,) = one(conn.execute("PRAGMA freelist_count"))
    conn.execute("PRAGMA incremental_vacuum").fetchall()
    (after,) = one(conn.execute("PRAGMA freelist_count"))
    return int(before) - int(after)
