"""The background WAL checkpointer of one `SessionDB` handle.

SQLite's automatic checkpoint runs inside whichever commit pushes the WAL
past its threshold, so that commit pays for copying ~1000 pages back into
the database file. The store turns that off on its writer (policy
`set_wal_autocheckpoint_off`) and checkpoints itself, the way litestream
does: a WAL hook on the writer, called after every commit with the WAL's
page count, wakes a daemon thread each time ``threshold`` new pages are
waiting, and the thread copies them back with a PASSIVE checkpoint (it
never waits on, nor blocks, readers or writers) through its own
connection, outside the GIL, on another core. Pages short of a threshold
are copied after a quiet spell (``QUIET_S``), so a burst of commits
followed by a pause leaves the WAL fully copied back.

Only the writer can restart the WAL from its start, and only at a commit
that begins with every frame copied back; under a steady stream of commits
the thread is always some frames behind, so the WAL would grow without end
(and each growth of the file costs an fsync of its metadata in FULL mode).
So at ``RESET_FACTOR`` times the threshold the commit that sees it runs one
PASSIVE checkpoint inline: it copies only what the thread has not copied
yet, and the next commit restarts the WAL (``journal_size_limit`` applies
there, as before). If the thread is mid-pass the next commit tries again,
and after another reset span one waits for that pass to end. When a reader
keeps the WAL from restarting, the catch-up comes again every threshold.
Such a reader (Litestream holds one between its syncs) also stops every
PASSIVE pass at its read mark, so the thread is woken again only once a
threshold of frames has arrived past what its last pass looked at, not by
every commit (measured beside Litestream: 55 times fewer passes).
The same inline checkpoint is the backstop when the thread cannot run (its
connection will not open, it keeps failing, it is starved): then it copies
everything, as SQLite's own would, but RESET_FACTOR times less often.

Containment: no checkpoint is started once the handle is quarantined, when
the process latch names the file, or when the path no longer names the file
and stamp the handle opened (`containment.Guard.checkpoint_allowed`); the
guard calls `halt()` when it quarantines, which waits for a checkpoint in
flight, so none runs afterwards. The thread's connection never
checkpoints at close. Errors in the thread are logged, never raised.

Processes: the thread starts on first need and ends after a quiet spell
(``IDLE_EXIT_S``), so a fork seldom meets one; at a fork every
checkpointer's gate is held (no checkpoint in flight inside SQLite), and
the child forgets the parent's thread and connection and starts its own
when it needs one.
"""
from __future__ import annotations

import logging
import os
import threading
from dataclasses import dataclass
from typing import Callable

import apsw

from ..base import ForkRegistry, InvalidInput, ThreadOwner, policy
from .containment import Guard

log = logging.getLogger(__name__)

RESET_FACTOR = 4
QUIET_S = 0.1  # frames short of a threshold are copied back this long after the last pass
IDLE_EXIT_S = 30.0  # a quiet thread closes its connection and ends
RETRY_FIRST_S, RETRY_LONGEST_S = 0.01, 1.0  # after a failure, before the next try
THREAD_NAME = "hermes-checkpointer"


@dataclass
class CheckpointStats:
    """What this handle's checkpointer did (for tests, benches and doctor)."""

    background: int = 0  # checkpoints run by the thread
    background_frames: int = 0  # frames the thread copied back
    inline: int = 0  # catch-up or backstop checkpoints run by a commit
    inline_frames: int = 0  # frames left to those (not yet copied by the thread)
    restarts: int = 0  # WAL restarts seen by the writer
    busy: int = 0  # PASSIVE attempts that met another checkpoint
    failures: int = 0  # thread errors (opening or checkpointing), logged
    last: tuple[int, int] | None = None  # (WAL frames, frames copied back)


def check_threshold(pages: object) -> None:
    """The threshold is a positive page count (checked before any I/O)."""
    if isinstance(pages, bool) or not isinstance(pages, int) or pages < 1:
        raise InvalidInput(f"checkpoint_pages must be a positive number of pages, not {pages!r}")


def connector(path: str, vfs: str | None) -> Callable[[], apsw.Connection]:
    """Opens the checkpointer's connection: same file, same VFS as the writer."""
    def connect() -> apsw.Connection:
        flags = apsw.SQLITE_OPEN_READWRITE
        conn = (apsw.Connection(path, flags=flags, vfs=vfs) if vfs
                else apsw.Connection(path, flags=flags))
        try:
            policy.apply_policy(conn, policy.CHECKPOINTER_POLICY)
            # A connection that has read nothing may not know the file is in
            # WAL mode yet; its checkpoints would then do nothing (-1, -1).
            conn.execute("SELECT 1 FROM sqlite_schema LIMIT 1").fetchall()
        except BaseException:
            conn.close()
            raise
        return conn
    return connect


def for_writer(writer: apsw.Connection, guard: Guard, path: str, vfs: str | None,
               threshold: int) -> "Checkpointer":
    """A checkpointer hooked to ``writer`` that stops when ``guard`` quarantines."""
    ckpt = Checkpointer(connector(path, vfs), guard.checkpoint_allowed, threshold=threshold)
    guard.on_quarantine.append(ckpt.halt)
    ckpt.attach(writer)
    return ckpt


class Checkpointer(ThreadOwner):
    """Background PASSIVE checkpoints for one writer connection.

    ``connect`` opens a read-write connection to the same file through the
    same VFS as the writer; ``allowed`` says whether the file may be written
    now (the handle's containment guard)."""

    def __init__(self, connect: Callable[[], apsw.Connection], allowed: Callable[[], bool],
                 *, threshold: int = policy.WAL_CHECKPOINT_PAGES) -> None:
        check_threshold(threshold)
        self.threshold = threshold
        self.reset_pages = threshold * RESET_FACTOR
        self.stats = CheckpointStats()
        self._connect, self._allowed = connect, allowed
        self._next_inline = self.reset_pages
        self._last_pages = 0
        self._generation = 0  # WAL restarts seen by the hook
        self._done = (0, 0)  # (generation, frames) the thread's last pass left copied
        self._seen = (0, 0)  # (generation, WAL frames) the thread's last pass looked at
        self._halted = self._stopping = False
        self._pending = False  # frames past the threshold the thread has not seen
        self._new_process_state()
        _live.add(self)

    def _new_process_state(self) -> None:
        """Locks, wake-up and thread of the current process (again after a fork)."""
        self._pid = os.getpid()
        self._gate = threading.RLock()  # held for each checkpoint and connection change
        self._state = threading.Lock()  # guards _thread against lost wake-ups
        self._wake = threading.Event()
        self._quit = threading.Event()  # set by close and halt; ends a back-off
        self._thread: threading.Thread | None = None
        self._conn: apsw.Connection | None = None

    # -- the writer's side -------------------------------------------------

    def attach(self, writer: apsw.Connection) -> None:
        """Install the WAL hook (it replaces SQLite's automatic checkpoint)."""
        writer.set_wal_hook(self._on_commit)

    def _on_commit(self, conn: apsw.Connection, dbname: str, pages: int) -> int:
        """SQLite's WAL hook: runs in the committing thread after each commit.

        It must not raise: an error here would make a COMMIT that did happen
        report failure."""
        if pages < self._last_pages:  # the WAL was restarted from its start
            self._generation += 1
            self.stats.restarts += 1
            self._next_inline = self.reset_pages
        self._last_pages = pages
        if pages >= self.threshold:
            try:
                self._past_threshold(conn, pages)
            except Exception:  # never into the caller's write
                log.warning("checkpoint scheduling failed", exc_info=True)
        return apsw.SQLITE_OK

    def _past_threshold(self, conn: apsw.Connection, pages: int) -> None:
        if self._halted or self._stopping:
            return
        if pages >= self._next_inline:
            # Past a second reset span the commit waits for the thread's pass
            # in flight; before that it tries again at the next commit.
            wait = pages >= self._next_inline + self.reset_pages
            if self._inline(conn, pages, wait):
                # The next commit restarts the WAL (and resets this); if a
                # reader holds on to it, catch up again a threshold later.
                self._next_inline = pages + self.threshold
            return
        self._pending = True
        if pages - self._looked_at() >= self.threshold or self._thread is None:
            self._signal()

    def _backfilled(self) -> int:
        """Frames of the current WAL the thread has copied back."""
        generation, frames = self._done
        return frames if generation == self._generation else 0

    def _looked_at(self) -> int:
        """Frames of the current WAL the thread's last pass copied or found it
        could not copy: a reader (Litestream holds one between its syncs)
        stops a PASSIVE pass at its read mark, and passing again before
        another threshold of frames arrives would find the same mark."""
        generation, frames = self._seen
        return max(self._backfilled(), frames if generation == self._generation else 0)

    def _inline(self, conn: apsw.Connection, pages: int, wait: bool) -> bool:
        """The catch-up and backstop: one PASSIVE checkpoint on the writer
        (after the thread's pass in flight if ``wait``). False when another
        checkpoint was running."""
        if not self._allowed():
            return True
        behind = pages - self._backfilled()
        try:
            if wait:
                with self._gate:
                    self.stats.last = policy.checkpoint_passive(conn)
            else:
                self.stats.last = policy.checkpoint_passive(conn)
        except apsw.BusyError:
            self.stats.busy += 1
            with self._state:  # let the thread's pass in flight be its last
                if not self._quit.is_set():
                    self._wake.clear()
            return False
        except apsw.Error:
            log.warning("inline checkpoint failed", exc_info=True)
            return True
        self.stats.inline += 1
        self.stats.inline_frames += behind
        if behind >= self.threshold:  # the thread is starved or failing
            log.info("the background checkpoint was %d of %d WAL pages behind; "
                     "a commit copied them back", behind, pages)
        return True

    def _signal(self) -> None:
        self._wake_thread(THREAD_NAME, self._run, self._new_process_state)

    # -- the thread --------------------------------------------------------

    def _run(self) -> None:
        failures = 0
        try:
            while self._next_round(failures):
                failures = 0 if self._checkpoint_once() else failures + 1
        finally:
            with self._gate:
                self._close_connection()

    def _next_round(self, failures: int) -> bool:
        """Wait for a wake-up (a threshold of new frames), or a quiet spell
        with frames left over; False when the thread should end."""
        if failures:  # back off; a stop or halt still ends the wait at once
            self._quit.wait(min(RETRY_FIRST_S * 2 ** min(failures, 10), RETRY_LONGEST_S))
        woke = self._wake.wait(QUIET_S if self._pending else IDLE_EXIT_S)
        with self._state:
            idle = not woke and not self._wake.is_set() and not self._pending
            if self._stopping or self._halted or idle:
                with self._gate:  # before a new thread can be started
                    self._close_connection()
                self._thread = None
                return False
            # Cleared before the pass: what commits add during it is left
            # for the next round.
            self._wake.clear()
            self._pending = False
        return True

    def _checkpoint_once(self) -> bool:
        """One PASSIVE checkpoint under the gate; False after a failure."""
        try:
            conn = self._connection()
            with self._gate:
                if conn is None or self._halted or self._stopping:
                    return True
                if not self._allowed():
                    self._halted = True  # quarantined or replaced: never again
                    return True
                generation, before = self._generation, self._backfilled()
                try:
                    self.stats.last = policy.checkpoint_passive(conn)
                except apsw.BusyError:
                    self.stats.busy += 1  # another connection is checkpointing
                    return True
                copied = max(self.stats.last[1], 0)  # -1: the file is not in WAL mode
                self._done = (generation, copied)
                self._seen = (generation, max(self.stats.last[0], 0))
                self.stats.background += 1
                self.stats.background_frames += max(copied - before, 0)
        except Exception:
            with self._gate:
                self._failed()
            return False
        return True

    def _connection(self) -> apsw.Connection | None:
        """The thread's connection, opened outside the gate (opening may be
        slow, and a halt must not wait for it); None once halted."""
        if self._conn is None:
            conn = self._connect()
            conn.config(apsw.SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, 1)
            with self._gate:
                self._conn = conn
                if self._halted or self._stopping:
                    self._close_connection()
        return self._conn

    def _failed(self) -> None:
        self.stats.failures += 1
        n = self.stats.failures
        if n & (n - 1) == 0:  # the 1st, 2nd, 4th, 8th... so a stuck failure cannot flood
            log.warning("background checkpoint failed (%d so far); the WAL is checkpointed "
                        "inline if it keeps growing", n, exc_info=True)
        self._close_connection()  # a fresh connection next time

    def _close_connection(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.close()
            except apsw.Error:
                log.debug("closing the checkpointer connection failed", exc_info=True)

    # -- stopping ----------------------------------------------------------

    def halt(self) -> None:
        """Never checkpoint again (the handle is quarantined); waits for a
        checkpoint in flight, so none runs after this returns."""
        self._halted = True
        if os.getpid() == self._pid:
            self._quit.set()
            with self._state:
                self._wake.set()
            with self._gate:
                pass  # a checkpoint in flight has finished

    def close(self) -> None:
        """Stop the thread, join it and close its connection (before the
        writer closes)."""
        if not self._stop_thread():
            return  # the thread and connection belong to the parent process
        with self._gate:
            self._close_connection()
        _live.discard(self)

    # -- fork --------------------------------------------------------------

    def _before_fork(self) -> None:
        self._gate.acquire()

    def _after_fork_parent(self) -> None:
        self._gate.release()

    def _after_fork_child(self) -> None:
        # The parent's thread does not exist here and its connection is not
        # ours to use or close; start afresh on the next need.
        self._new_process_state()


_live: ForkRegistry["Checkpointer"] = ForkRegistry()  # see forksafe.py
