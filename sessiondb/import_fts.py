"""An import's search index built beside the store, in parallel, for an empty index.

Tokenizing is most of an import's cost (about three quarters of the CPU
at 100k messages: ~45 us a message for the word index, ~100-125 us for the
trigram index, against ~110 us for checking and writing the rows). When
the store holds no messages and its index is empty, the import builds both
indexes in scratch files instead of through the store's indexer: one
thread per index, each with its own read-only connection to the store and
its own scratch file, reading the rows as the import's batches commit
(sqlite releases the GIL, so on two cores the indexes are built while the
rows are still being written). The scratch indexes load without merging
(`LOAD_SETTINGS`), in few transactions, and are optimized to one segment
at the end. Then one write transaction on a connection of its own copies
their FTS5 shadow tables (``_data``, ``_idx``, ``_docsize``; the store's
``_config`` stays) over the store's empty ones and moves the watermark.

The copy is exact only if the store's rows are the rows the builders read.
The transaction that checks the store is empty reads the writer's
``PRAGMA data_version``; the copy transaction reads it again while it holds
the write lock. It changes only when another connection committed (this
handle's own commits do not count), so an unchanged value means nobody
else wrote, indexed or edited anything meanwhile. Anything else (another
writer, another indexer, a row the builders missed, a failed thread)
leaves the scratch unused and the import catches up through the store's
indexer as before (import_index.py): this path is a shortcut that falls
back, never a second source of truth. The store is never taken offline
and nothing is dropped: the shadow tables replaced are empty ones.

The scratch directory is private (0700), named with doctor's scratch
prefix (a leftover is found and removed) and deleted however the import
ends.
"""
from __future__ import annotations

import json
import logging
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import apsw

from . import policy, search_index
from .core import BUSY, StoreCore, begin_immediate, retry_busy, transaction
from .paths import create_private_file
from .rows import one

if TYPE_CHECKING:  # for type hints only
    from .store import SessionDB

log = logging.getLogger(__name__)

# Starts with recovery.liveread.SCRATCH_PREFIX, which doctor --fix cleans up.
PREFIX = ".hermes-scratch-importfts-"
SHADOWS = ("data", "idx", "docsize")  # external content: no _content; _config stays
# FTS5 while a scratch index loads: no merging as it goes, a larger
# pending-terms buffer (bounded: 16 MB a thread), one segment at the end.
LOAD_SETTINGS = (("automerge", 0), ("crisismerge", 2000), ("hashsize", 16 << 20))
# The store's index config keys that leave the on-disk format alone: any other
# (pgsz, secure-delete, ...) and the scratch would not build the same index.
HARMLESS_CONFIG = frozenset({"version", "automerge", "crisismerge", "hashsize", "usermerge"})
READ_ROWS = 1_000  # rows a builder reads from the store at a time
COMMIT_ROWS = 50_000  # rows per scratch transaction (each commit flushes a segment)
# The copy is one write transaction (other writers wait for it): past about
# this many bytes of index it would hold the lock for seconds, so bigger
# imports index in batches (~0.9 KB of index a message of the scale
# export: ~250k messages; 18 MB took 0.26 s to copy at load 9).
MAX_COPY_BYTES = 256 << 20
MAX_MESSAGES = 250_000  # imports planned bigger than this do not start the builders
POLL_S = 0.05  # a builder with nothing to read waits this long for a commit
# After the last commit a builder still has its lag to index (seconds at the
# bound, minutes on a starved machine); past this the import stops waiting.
BUILD_WAIT_S = 900.0
STOP_WAIT_S = 10.0  # a stopped builder ends within a read batch; past this it is killed


def build(store: Path, table: str, scratch: Path, final: threading.Event,
          stop: threading.Event) -> int:
    """One index from the store's committed rows into ``scratch`` until
    ``final`` is set and every row is read (or ``stop``); returns the
    highest row id indexed. What a builder process runs (`main`)."""
    src = apsw.Connection(str(store), flags=apsw.SQLITE_OPEN_READONLY)
    create_private_file(scratch)
    dst = apsw.Connection(str(scratch))
    try:
        policy.apply_policy(src, policy.READER_POLICY)
        dst.execute("PRAGMA journal_mode=OFF")  # a scratch file: a crash only loses it
        dst.execute("PRAGMA synchronous=OFF")
        dst.execute(search_index.fts_ddl(
            table, f", content='{search_index.TEXT_VIEW}', content_rowid='id'"))
        _settings(dst, table, LOAD_SETTINGS)
        top, finished = 0, False
        while not (finished or stop.is_set()):
            with transaction(dst, lambda: begin_immediate(dst)):  # each commit: a segment
                top, finished = _load(src, dst, table, top, final, stop)
        if not stop.is_set():
            dst.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
        return top
    finally:
        src.close()
        dst.close()


def _load(src: apsw.Connection, dst: apsw.Connection, table: str, top: int,
          final: threading.Event, stop: threading.Event) -> tuple[int, bool]:
    """Up to COMMIT_ROWS rows above ``top`` into the scratch; (new top, whether
    the import's last commit has been read)."""
    loaded = 0
    while loaded < COMMIT_ROWS and not stop.is_set():
        done = final.is_set()  # read first: a read after it sees every commit
        rows: list[tuple[Any, ...]] = src.execute(
            f"SELECT id, text FROM {search_index.TEXT_VIEW} WHERE id > ? ORDER BY id LIMIT ?",
            (top, READ_ROWS)).fetchall()
        if rows:
            dst.executemany(f"INSERT INTO {table}(rowid, text) VALUES (?, ?)", rows)
            top = int(rows[-1][0])
            loaded += len(rows)
        elif done:
            return top, True
        else:
            final.wait(POLL_S)
    return top, False


def _settings(conn: apsw.Connection, table: str, settings: tuple[tuple[str, int], ...]) -> None:
    for key, value in settings:
        conn.execute(f"INSERT INTO {table}({table}, rank) VALUES (?, ?)", (key, value))


def _index_empty(conn: apsw.Connection) -> bool:
    """Both indexes in today's shape, trusted, holding nothing, watermark 0,
    no change-log entries, and no config that changes the on-disk format."""
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
            if conn.execute(f"SELECT 1 FROM {table}_{shadow} LIMIT 1").fetchone():
                return False
    return True


def _child_env() -> dict[str, str]:
    """This process's environment, with the directory this package is
    imported from first on the path (a checkout run from elsewhere too)."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
    return env


def _data_version(conn: apsw.Connection) -> int:
    """Changes only when another connection commits to the file."""
    (version,) = one(conn.execute("PRAGMA data_version"))
    return int(version)


class ScratchIndex:
    """The builder processes of one import (one per index, see `main`), and
    the copy of what they built."""

    def __init__(self, db: "SessionDB", version: int) -> None:
        self.db, self.version = db, version
        self.dir = Path(tempfile.mkdtemp(prefix=PREFIX, dir=db.path.parent))
        self.files = [self.dir / f"{table}.db" for table in search_index.INDEXES]
        self.procs: list[subprocess.Popen[str]] = []
        try:
            for table, file in zip(search_index.INDEXES, self.files):
                self.procs.append(subprocess.Popen(
                    [sys.executable, "-m", __name__, str(db.path), table, str(file)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                    text=True, env=_child_env()))
        except BaseException:
            self.close()
            raise

    @classmethod
    def start_if_empty(cls, db: "SessionDB", messages: int) -> "ScratchIndex | None":
        """Builders for an import into a store with no messages and an empty
        index, through a handle without a background indexer (the CLI's
        import has none), of at most ``MAX_MESSAGES`` planned ``messages``;
        SQLite only. None otherwise: the store's indexer catches up."""
        if messages > MAX_MESSAGES:
            return None
        core = getattr(db, "core", None)
        if not isinstance(core, StoreCore) or core.indexer is None or core.indexer.background:
            return None  # (a background indexer would index the rows itself, meanwhile)
        # In the writer's own write transaction: nobody commits between the
        # look and the version it is compared with at the copy.
        with db.atomic() as conn:
            if conn.execute("SELECT 1 FROM messages LIMIT 1").fetchone() or \
                    not _index_empty(conn):
                return None
            version = _data_version(conn)
        try:
            return cls(db, version)
        except OSError as e:  # no process to spare: the store's indexer does it
            log.info("no parallel index build: %s", e)
            return None

    def install(self) -> bool:
        """Wait for the builders, then copy their indexes in if the store is
        still exactly what they read; False when it is not (or a builder
        failed): the caller catches up the usual way."""
        tops = set()
        for p in self.procs:
            assert p.stdin is not None
            p.stdin.write("final\n")
            p.stdin.flush()
        for p in self.procs:
            try:
                out, err = p.communicate(timeout=BUILD_WAIT_S)
            except subprocess.TimeoutExpired:
                log.info("an index builder still ran after %.0f s; indexing in batches",
                         BUILD_WAIT_S)
                return False  # (`close` stops and reaps it)
            try:
                report = json.loads(out)
                tops.add(int(report["top"]))
                log.debug("index builder done: %s", report)
            except (ValueError, KeyError, TypeError):
                log.info("the parallel index build failed (%s); indexing in batches",
                         (out or err).strip()[-300:])
                return False
        size = sum(f.stat().st_size for f in self.files)
        if size > MAX_COPY_BYTES:
            log.info("the parallel index is %d bytes, too big to copy in one short "
                     "transaction; indexing in batches", size)
            return False
        try:
            return len(tops) == 1 and self._copy(tops.pop())
        except BUSY as e:  # another process writes: its commit would fail the check anyway
            log.info("the parallel index could not be copied in (%s); indexing in batches", e)
            return False

    def _copy(self, top: int) -> bool:
        core: StoreCore = self.db.core
        conn = apsw.Connection(str(self.db.path), flags=apsw.SQLITE_OPEN_READWRITE)
        try:
            policy.apply_policy(conn, policy.INDEXER_POLICY)
            for i, file in enumerate(self.files):
                conn.execute(f"ATTACH ? AS scratch{i}", (str(file),))
            with transaction(conn, lambda: self._begin(conn)):
                core.guard.check_other(conn)  # still our file, not one put in its place
                with core.lock:  # the writer, idle: the version as of our write lock
                    unchanged = _data_version(core.writer) == self.version
                (last,) = one(conn.execute("SELECT coalesce(max(id), 0) FROM messages"))
                if not (unchanged and last == top and _index_empty(conn)):
                    log.info("the store changed during the import; indexing in batches")
                    return False
                for i, table in enumerate(search_index.INDEXES):
                    for shadow in SHADOWS:
                        name = f"{table}_{shadow}"
                        conn.execute(f"DELETE FROM main.{name}")
                        conn.execute(f"INSERT INTO main.{name} SELECT * FROM scratch{i}.{name}")
                search_index.set_watermark(conn, top)
            return True
        finally:
            conn.close()

    def _begin(self, conn: apsw.Connection) -> None:
        """BEGIN IMMEDIATE within the handle's patience (a lock held past it
        raises apsw's BusyError: `install` then falls back)."""
        def give_up(e: apsw.Error) -> None:
            raise e
        retry_busy(lambda: begin_immediate(conn), self.db.core.patience, give_up)

    def close(self) -> None:
        """Stop the builders still running (EOF on their stdin stops them) and
        remove the scratch files."""
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.communicate(timeout=STOP_WAIT_S)
                except subprocess.TimeoutExpired:
                    p.kill()  # our own child, by its handle
                    p.communicate()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> "ScratchIndex":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def main(argv: list[str]) -> int:
    """A builder process: ``STORE TABLE SCRATCH``. A line ``final`` on stdin
    says the import's last commit is in (the build then ends once it has
    read every row); EOF before it stops the build. On
    success one JSON line on stdout: the top row id and the peak RSS."""
    store, table, scratch = argv
    final, stop = threading.Event(), threading.Event()

    def listen() -> None:
        line = sys.stdin.readline()  # EOF first: the import failed or its process died
        (final if line.strip() == "final" else stop).set()

    threading.Thread(target=listen, daemon=True).start()
    try:
        top = build(Path(store), table, Path(scratch), final, stop)
    except (apsw.Error, OSError) as e:
        sys.stdout.write(json.dumps({"error": f"{type(e).__name__}: {e}"}) + "\n")
        return 1
    if stop.is_set():
        return 1
    sys.stdout.write(json.dumps({"top": top, "rss_kb": resource.getrusage(
        resource.RUSAGE_SELF).ru_maxrss}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
