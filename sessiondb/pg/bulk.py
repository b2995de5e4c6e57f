"""Messages into PostgreSQL by COPY: the fast path of `hermes sessions migrate --to`.

transfer.py's contract holds chunk by chunk: each chunk of ``COPY_CHUNK``
source rows is streamed (never held in a list) by ``COPY`` into a
temporary staging table of this connection, then moved into ``messages``
by one ``INSERT ... SELECT ... ORDER BY`` the source row id ``ON CONFLICT
DO NOTHING`` (idempotent by ``(session_id, uid)``; target row ids follow
the source order), and the checkpoint is saved, all in one transaction: a
``kill -9`` loses at most the chunk in flight, and a rerun resumes after
the last committed one. COPY saves the per-row protocol and planning cost
of an INSERT per message.

Search indexes: maintaining two GIN indexes row by row costs more than the
rows themselves. When the target holds no messages at all as the copy
starts (a new database: nobody searches it yet), both are dropped and
built once from the whole table at the end. A marker row in ``state_meta``
(written in the transaction that drops them) says so, so a rerun after an
interruption keeps loading without them and builds them at its end. A
target that already holds messages keeps its indexes (other hosts may be
searching it), and the rows pay the row-by-row price.
"""
from __future__ import annotations

from typing import Any, Callable, Iterable

from .search_schema import INDEXES, index_ddl

#: Source rows per committed chunk. Rows stream into COPY, so memory does
#: not grow with it; it bounds what a kill can take back (one chunk).
COPY_CHUNK = 5_000
STAGE = "hermes_migrate_stage"
#: state_meta key present while the search indexes are dropped by a bulk load.
DEFERRED_KEY = "search_indexes_deferred"
#: Memory for building a GIN index from the whole table (per statement).
BUILD_MEMORY = "256MB"


def defer_indexes(conn: Any, source_key: str) -> bool:
    """Drop the search indexes if the target holds no messages (or an
    interrupted bulk load already did); True while they are deferred."""
    with conn.transaction():
        if conn.execute("SELECT 1 FROM state_meta WHERE key = %s", (DEFERRED_KEY,)).fetchone():
            return True
        # Locks out concurrent writers between the emptiness check and the drop.
        conn.execute("LOCK TABLE messages IN SHARE ROW EXCLUSIVE MODE")
        if conn.execute("SELECT 1 FROM messages LIMIT 1").fetchone() is not None:
            return False
        for name in INDEXES:
            conn.execute(f"DROP INDEX IF EXISTS {name}")
        conn.execute("INSERT INTO state_meta (key, value) VALUES (%s, %s)",
                     (DEFERRED_KEY, source_key))
    return True


def build_indexes(conn: Any) -> None:
    """Build the deferred search indexes and clear the marker, in one
    transaction (a kill during the build leaves the marker for a rerun)."""
    with conn.transaction():
        conn.execute(f"SET LOCAL maintenance_work_mem = '{BUILD_MEMORY}'")
        for ddl in index_ddl().values():
            conn.execute(ddl)
        conn.execute("DELETE FROM state_meta WHERE key = %s", (DEFERRED_KEY,))
    conn.execute("ANALYZE messages")  # the planner's view of the new index, now


def _stage(conn: Any, cols: list[str]) -> None:
    """The staging table: the shared columns, typed as in ``messages``,
    plus the source row id; emptied by every commit."""
    conn.execute(f"CREATE TEMP TABLE IF NOT EXISTS {STAGE} ON COMMIT DELETE ROWS AS"
                 f" SELECT 0::bigint AS src_id, {', '.join(cols)} FROM messages WITH NO DATA")


def copy_messages(select: Callable[[int], Iterable[tuple]], conn: Any, cols: list[str],
                  key: str, after: int, progress: Callable[[int], None] | None) -> int:
    """Copy the rows ``select(after)`` yields ((source id, *cols) in source
    order, at most COPY_CHUNK) chunk by chunk until it yields none; returns
    the rows read (a row already in the target counts, as on the slow path)."""
    _stage(conn, cols)
    names = ", ".join(cols)
    move = (f"INSERT INTO messages ({names}) SELECT {names} FROM {STAGE} ORDER BY src_id"
            " ON CONFLICT DO NOTHING")
    save = ("INSERT INTO state_meta (key, value) VALUES (%s, %s)"
            " ON CONFLICT (key) DO UPDATE SET value = excluded.value")
    n = 0
    while True:
        with conn.transaction(), conn.cursor() as cur:
            got, last = 0, after
            with cur.copy(f"COPY {STAGE} (src_id, {names}) FROM STDIN") as cp:
                for row in select(after):
                    cp.write_row(row)
                    got, last = got + 1, row[0]
            if got:
                cur.execute(move)
                cur.execute(save, (key, str(last)))
        if not got:
            return n
        after, n = last, n + got
        if progress is not None:
            progress(got)
