"""An import's search index: left to the off-commit indexer, then driven to date.

An import writes canonical rows only (see importer.py); every row it adds
gets an id above the index watermark (search_index.py), so the indexer
owes it and search covers it through the exact tail scan (search_tail.py)
the moment its chunk commits. After the last chunk the import drives the
indexer itself, through the store's public entry point
(`StoreFace.catch_up_index`): batches of the indexer's own size, each its
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

**Into an empty store the index is built in parallel instead**
(`ParallelIndex`): before the writing pass, when the store holds no
messages and its index is empty (today's shape, trusted, watermark 0, no
change-log entries, no setting that changes the on-disk format), builder
process (fts_build.py, the word index) starts following the committed
rows; after the last batch one write transaction, on a fresh connection
(FTS5's per-connection structure cache), copies its shadow tables over
the empty ones, fills the term table from the word index's vocabulary and
moves the watermark. The copy is exact only if the
store's rows are the rows the builders read: the transaction that found
the store empty read the writer's ``PRAGMA data_version``, and the copy
reads it again while it holds the write lock; it changes only when
another connection committed (this handle's own commits do not count), so
an unchanged value means nobody else wrote, indexed or edited anything
meanwhile. Anything else (another writer, a builder that failed or was
killed, a row the builders missed, a build too big to copy in one short
transaction) leaves the scratch unused and the import catches up in
batches as above: a shortcut that falls back, never a second source of
truth. The shadow tables replaced are empty ones; the store is never
taken offline.
"""
from __future__ import annotations

import logging
from pathlib import Path
from typing import Callable, TYPE_CHECKING

import apsw

from ..base import StorageError, one, policy
from ..engine import BUSY, StoreCore, begin_immediate, retry_busy, transaction
from ..index import ParallelBuild, cores, index_shadows, search_index

if TYPE_CHECKING:  # for type hints only
    from ..face import StoreFace

log = logging.getLogger(__name__)

#: rows per progress step; the indexer's batches inside a step are each their own
#: transaction (indexer.BATCH_ROWS rows)
STEP_ROWS = 5_000

Progress = Callable[[int], None]

# The copy is one write transaction (other writers wait for it): past about
# this many bytes of index it would hold the lock for seconds, so bigger
# imports index in batches (~0.9 KB of index a message of the scale export).
MAX_COPY_BYTES = 256 << 20
MAX_MESSAGES = 250_000  # imports planned bigger than this start no builders
# Below this the batches take about as long as starting two builder
# processes (~0.1-0.2 s of CPU each): small imports index in batches.
MIN_MESSAGES = 2_000
# After the last commit a builder still has its lag to index (seconds on an
# idle machine, minutes on a starved one); past this the import stops waiting.
BUILD_WAIT_S = 900.0
# The store's index config keys that leave the on-disk format alone: any other
# (pgsz, secure-delete, ...) and the scratch would not build the same index.
HARMLESS_CONFIG = frozenset({"version", "automerge", "crisismerge", "hashsize", "usermerge"})


def backlog_rows(db: "StoreFace") -> int:
    """Rows (and change-log entries) the index has not caught up on; 0 without an index."""
    backlog = db.index_backlog()
    return 0 if backlog is None else backlog.tail + backlog.changes


def state(db: "StoreFace") -> tuple[str, int]:
    """Where the index stands, without indexing (a dry run reports this)."""
    backlog = db.index_backlog()
    if backlog is None or backlog.empty:
        return "caught_up", 0
    return ("stale" if backlog.stale else "pending"), backlog.tail + backlog.changes


def catch_up(db: "StoreFace", progress: Progress | None = None) -> tuple[str, int]:
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


def _index_empty(conn: apsw.Connection) -> bool:
    """The search tables in today's shape, trusted, holding nothing,
    watermark 0, no change-log entries, and no config that changes the
    on-disk format."""
    if not search_index.has_current_shape(conn):
        return False
    backlog = search_index.backlog(conn)
    if backlog is None or backlog.stale or backlog.watermark != 0 or backlog.changes:
        return False
    for table in search_index.INDEXES:
        keys = {k for (k,) in conn.execute(f"SELECT k FROM {table}_config")}
        if not keys <= HARMLESS_CONFIG:
            return False
        for shadow in ("idx", "docsize"):
            if shadow not in index_shadows(conn, table):
                continue  # the term table has no _docsize
            if conn.execute(f"SELECT 1 FROM {table}_{shadow} LIMIT 1").fetchone():
                return False
    return True


def _data_version(conn: apsw.Connection) -> int:
    """Changes only when another connection commits to the file."""
    (version,) = one(conn.execute("PRAGMA data_version"))
    return int(version)


class ParallelIndex:
    """The import's builder (fts_build.ParallelBuild, the word index,
    following the rows) and the guarded copy of what it built."""

    def __init__(self, db: "StoreFace", core: StoreCore, version: int) -> None:
        self.db, self.core, self.version = db, core, version  # core: db.core, narrowed
        self.build = ParallelBuild(db.path, search_index.TEXT_INDEXES, follow=True)
        self.copy_seconds = 0.0

    @classmethod
    def start_if_empty(cls, db: "StoreFace", messages: int) -> "ParallelIndex | None":
        """Builders for an import of ``messages`` (planned; MIN_MESSAGES to
        MAX_MESSAGES) into a store with no messages and an empty index,
        through a handle without a background indexer (the CLI's import has
        none), on a machine with a second core; SQLite only. None
        otherwise: the import indexes in batches."""
        if not MIN_MESSAGES <= messages <= MAX_MESSAGES:
            return None
        core = getattr(db, "core", None)
        if not isinstance(core, StoreCore) or core.indexer is None or core.indexer.background:
            return None  # (a background indexer would index the rows itself, meanwhile)
        if cores() < 2:
            return None  # the builders would only take turns with the rows
        # In the writer's own write transaction: nobody commits between the
        # look and the version it is compared with at the copy.
        with db.atomic() as conn:
            if conn.execute("SELECT 1 FROM messages LIMIT 1").fetchone() or \
                    not _index_empty(conn):
                return None
            version = _data_version(conn)
        try:
            return cls(db, core, version)
        except OSError as e:  # no process to spare: batches do it
            log.info("no parallel index build: %s", e)
            return None

    def install(self) -> bool:
        """Wait for the builders, then copy their indexes in if the store is
        still exactly what they read; False when it is not (or a builder
        failed): the caller catches up in batches."""
        top = self.build.finish(BUILD_WAIT_S)
        if top is None:
            log.info("the parallel index build failed; indexing in batches")
            return False
        size = self.build.scratch_bytes()
        if size > MAX_COPY_BYTES:
            log.info("the parallel index is %d bytes, too big to copy in one short "
                     "transaction; indexing in batches", size)
            return False
        try:
            return self._copy(top)
        except BUSY as e:  # another process writes: its commit would fail the check anyway
            log.info("the parallel index could not be copied in (%s); indexing in batches", e)
            return False

    def _copy(self, top: int) -> bool:
        core = self.core
        conn = apsw.Connection(str(self.db.path), flags=apsw.SQLITE_OPEN_READWRITE
                               | apsw.SQLITE_OPEN_URI)  # fresh: no cached index structure
        try:
            policy.apply_policy(conn, policy.INDEXER_POLICY)
            with self.build.attached(conn), transaction(conn, lambda: self._begin(conn)):
                core.guard.check_other(conn)  # still our file, not one put in its place
                with core.lock:  # the writer, idle: the version as of our write lock
                    unchanged = _data_version(core.writer) == self.version
                (last,) = one(conn.execute("SELECT coalesce(max(id), 0) FROM messages"))
                if not (unchanged and last == top and _index_empty(conn)):
                    log.info("the store changed during the import; indexing in batches")
                    return False
                self.build.copy(conn)
                search_index.fill_terms(conn)
                search_index.set_watermark(conn, top)
            return True
        finally:
            conn.close()

    def _begin(self, conn: apsw.Connection) -> None:
        """BEGIN IMMEDIATE within the handle's patience (a lock held past it
        raises apsw's BusyError: `install` then falls back)."""
        def give_up(e: apsw.Error) -> None:
            raise e
        retry_busy(lambda: begin_immediate(conn), self.core.patience, give_up)

    @property
    def scratch_dir(self) -> Path:
        return self.build.dir

    def close(self) -> None:
        self.build.close()

    def __enter__(self) -> "ParallelIndex":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
