"""The background indexer of one store handle: brings the search indexes to date.

Canonical writes never touch the FTS5 indexes (see search_index.py): rows
above the watermark and entries of the change log are what the index still
has to catch up on. After every commit the handle calls `notify()`, which
wakes a daemon thread; the thread reads the backlog (three cheap reads) and,
when there is work, runs batches of at most ``batch`` rows, each in its own
write transaction on the indexer's own connection (``write``: the core's
`index_write`). A batch holds the core's write gate, not the handle's
lock: in-process writers queue on the gate behind at most one short batch
(instead of polling SQLite's busy handler), and reads never wait for it.

Search never waits for the thread: it scans the not-yet-indexed tail (see
search_tail.py). A search that finds the tail longer than its bound runs
`catch_up()` itself, in its own thread, when the handle can write.

Failures: index damage met by a batch (the containment guard types it as
`fts_index`, nothing is quarantined) marks the index stale in a fresh
transaction and the indexer stops; search falls back to scanning until a
rebuild. A lock held by another process is retried with backoff. The
guard's quarantine halts the indexer (`halt()` waits for a batch in flight).
Errors in the thread are logged, never raised.

Processes: the thread starts on first need and ends after ``IDLE_EXIT_S``
without work. At a fork every live indexer's handle lock and gate are held
(no write and no batch in flight); the child forgets the parent's thread
and starts its own.
"""
from __future__ import annotations

import logging
import os
import threading
import time
from dataclasses import dataclass
from typing import Callable, ContextManager

import apsw

from ..base import Cause, ForkRegistry, StorageError, StoreLocked, ThreadOwner
from . import reclaim, search_index

log = logging.getLogger(__name__)

BATCH_ROWS = 500  # rows per indexing transaction (~2-5 ms of tokenizing for chat text)
# After a wake-up the thread lets commits gather this long, so one indexing
# commit (one more fsync in FULL mode) covers many appends; search scans the
# tail meanwhile, so this is a freshness lag of the index, not of search.
COALESCE_S = 0.02
IDLE_EXIT_S = 30.0
# At close a handle indexes what it left, up to this many rows, so a short
# process (a CLI command) leaves the index current; the rest waits for the
# next open.
CLOSE_ROWS = 5_000
BATCH_PATIENCE_S = 1.0  # a batch gives up on another process's lock after this
RETRY_FIRST_S, RETRY_LONGEST_S = 0.01, 1.0
THREAD_NAME = "hermes-indexer"

Write = Callable[..., ContextManager[apsw.Connection]]


@dataclass
class IndexerStats:
    """What this handle's indexer did (for tests, benches and doctor)."""

    batches: int = 0
    rows: int = 0  # rows indexed plus change-log entries applied
    foreground: int = 0  # batches run by a caller (search over a long tail, tests)
    failures: int = 0
    marked_stale: int = 0
    pages_returned: int = 0  # free pages given back at the end of catch-ups (reclaim.py)


class Indexer(ThreadOwner):
    """Catch-up batches for one handle; ``write`` opens one indexing
    transaction, ``lock`` is the gate it takes, ``peek`` reads the backlog
    without a transaction, ``fork_locks`` are held across a fork."""

    def __init__(self, write: Write, lock: "threading.RLock",
                 peek: Callable[[], search_index.Backlog | None], *,
                 batch: int = BATCH_ROWS, background: bool = True,
                 fork_locks: tuple["threading.RLock", ...] = ()) -> None:
        self.batch = batch
        self.background = background
        self.stats = IndexerStats()
        self._write, self._lock, self._peek = write, lock, peek
        self._fork_locks = fork_locks or (lock,)
        self._halted = self._stopping = self._in_batch = self._paused = False
        self._new_process_state()
        _live.add(self)

    def _new_process_state(self) -> None:
        self._pid = os.getpid()
        self._state = threading.Lock()
        self._wake = threading.Event()
        self._quit = threading.Event()
        self._thread: threading.Thread | None = None

    # -- the writer's side -------------------------------------------------

    def notify(self) -> None:
        """After a commit: wake the thread (starting it if needed). Cheap."""
        if (not self.background or self._halted or self._stopping or self._in_batch
                or self._paused):
            return  # (a commit inside a batch is the batch's own)
        if self._thread is not None and os.getpid() == self._pid:
            if not self._wake.is_set():
                self._wake.set()
            return
        self._start()

    def _start(self) -> None:
        self._wake_thread(THREAD_NAME, self._run, self._new_process_state)

    def catch_up(self, max_rows: int | None = None) -> int:
        """Run batches in the caller's thread until the index is caught up
        (or ``max_rows`` were done, or it is stale or halted); returns the
        rows done. Raises what a batch raises, except index damage, which
        marks the index stale."""
        done = 0
        while not self._halted and (max_rows is None or done < max_rows):
            n = self._batch(patience=None)
            if not n:
                break
            done += n
            self.stats.foreground += 1
        return done

    # -- one batch ---------------------------------------------------------

    def _batch(self, patience: float | None) -> int:
        """One batch in its own transaction; 0 when there was nothing to do."""
        backlog = self._peek()
        if backlog is None or not backlog.work:
            return 0
        try:
            self._in_batch = True
            with self._write(patience=patience) as conn:
                before = search_index.watermark(conn)
                n = search_index.index_batch(conn, self.batch)
                # only a catch-up that indexed new rows (FTS5 merges as the
                # index grows): pages a delete freed (prune) stay for
                # `sessions optimize` and later writes, as before
                caught_up = (bool(n) and search_index.watermark(conn) != before
                             and self._caught_up(conn, n))
            if caught_up:  # the merges' free pages go back (reclaim.py)
                self._return_free_pages(patience)
        except StorageError as e:
            self._in_batch = False
            if e.cause is not Cause.FTS_INDEX:
                raise
            self._mark_stale(e)
            return 0
        finally:
            self._in_batch = False
        self.stats.batches += 1
        self.stats.rows += n
        return n

    def _return_free_pages(self, patience: float | None) -> None:
        """After the commit of a catch-up's last batch, in a transaction of
        its own: FTS5 writes its pending terms and runs its merges when a
        transaction commits, so the pages a merge frees are only free then."""
        with self._write(patience=patience) as conn:
            self.stats.pages_returned += reclaim.return_free_pages(conn)

    def _caught_up(self, conn: apsw.Connection, n: int) -> bool:
        """Whether the batch just run (``n`` rows) left nothing to index."""
        if n < self.batch:
            return True
        left = search_index.backlog(conn)
        return left is None or not left.work

    def _mark_stale(self, err: StorageError) -> None:
        """Index damage: record it so search scans, and stop indexing."""
        self.stats.marked_stale += 1
        with self._write() as conn:
            if search_index.stale_marker(conn) is None:
                search_index.mark_stale(conn, f"indexing failed: {err}",
                                        search_index.code_of(err.__cause__))
        log.warning("full-text index damaged (%s); search falls back to scanning until "
                    "`hermes sessions repair` rebuilds it", err)

    # -- the thread --------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        while self._next_round(failures):
            if not failures:
                self._quit.wait(COALESCE_S)
            failures = self._drain(failures)

    def _drain(self, failures: int) -> int:
        """Batches until caught up; returns the failure count for backoff."""
        try:
            while (not (self._halted or self._stopping or self._paused)
                   and self._batch(BATCH_PATIENCE_S)):
                pass
        except StoreLocked:
            return failures + 1  # another process holds the lock; try again soon
        except Exception as e:
            self.stats.failures += 1
            n = self.stats.failures
            if isinstance(e, StorageError) and e.cause in (Cause.CORRUPT, Cause.REPLACED):
                self._halted = True  # the guard quarantined the handle
            if n & (n - 1) == 0:
                log.warning("background indexing failed (%d so far); search scans the "
                            "unindexed tail meanwhile", n, exc_info=True)
            return failures + 1
        return 0

    def _next_round(self, failures: int) -> bool:
        if failures:
            self._quit.wait(min(RETRY_FIRST_S * 2 ** min(failures, 10), RETRY_LONGEST_S))
            self._wake.set()  # try again even without a new commit
        woke = self._wake.wait(IDLE_EXIT_S)
        with self._state:
            if self._stopping or self._halted or (not woke and not self._wake.is_set()):
                self._thread = None
                return False
            self._wake.clear()  # commits during the round wake the next one
        return True

    def pause(self) -> None:
        """Stop background batches (a batch in flight finishes first): for
        tests and benches that need to know no indexing commit happens."""
        with self._lock:
            self._paused = True

    def resume(self) -> None:
        self._paused = False
        self.notify()

    # -- stopping ----------------------------------------------------------

    def halt(self) -> None:
        """Never index again (quarantine); waits for a batch in flight."""
        self._halted = True
        if os.getpid() == self._pid:
            self._quit.set()
            with self._state:
                self._wake.set()

    def close(self) -> None:
        """Stop the thread and join it (before the writer closes). What is
        left is caught up by the next open, or by search meanwhile."""
        _live.discard(self)
        if not self._stop_thread():
            return
        try:
            if not self._halted:
                self.catch_up(CLOSE_ROWS)
        except StorageError as e:  # never fails the close; the next open catches up
            log.info("indexing at close stopped: %s", e)

    def wait_idle(self, timeout: float = 10.0) -> bool:
        """Wait until the backlog is empty (tests and benches); False on timeout."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with self._lock:
                backlog = self._peek()
            if backlog is None or not backlog.work:
                return True
            self.notify()
            time.sleep(0.001)
        return False

    # -- fork --------------------------------------------------------------

    def _before_fork(self) -> None:
        for lock in self._fork_locks:  # the order every writer takes them in
            lock.acquire()

    def _after_fork_parent(self) -> None:
        for lock in reversed(self._fork_locks):
            lock.release()

    def _after_fork_child(self) -> None:
        for lock in reversed(self._fork_locks):
            lock.release()
        self._new_process_state()


_live: ForkRegistry["Indexer"] = ForkRegistry()  # see forksafe.py
