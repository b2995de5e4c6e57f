"""Connection policy: the SQLite version gate and one function per pragma.

Each setting is a small function with a docstring that says why; they are
collected in WRITER_POLICY / READER_POLICY and applied in one place.
"""
from __future__ import annotations

import logging
import random
import time
from typing import Callable

import apsw

from .errors import StorageError, UnsafeSQLiteVersion
from .onerow import one

log = logging.getLogger(__name__)

BUSY_TIMEOUT_MS = 100
JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024
WAL_CHECKPOINT_PAGES = 1000  # SQLite's default autocheckpoint threshold
PAGE_SIZE = 2048
WAL_HEADER_BYTES = (2, 2)  # file header offsets 18/19 say "WAL" when both are 2


def sqlite_library_version() -> str:
    """The version of the SQLite library apsw runs (tests monkeypatch this)."""
    return apsw.sqlite_lib_version()


def parse_version(text: str) -> tuple[int, int, int]:
    parts = [int(p) for p in text.split(".")[:3]]
    while len(parts) < 3:
        parts.append(0)
    return parts[0], parts[1], parts[2]


def in_wal_reset_band(version: str) -> bool:
    """True for SQLite builds affected by the WAL-reset corruption bug.

    Affected: 3.7.0 through 3.51.2, except the backports 3.44.6+ on the
    3.44 line and 3.50.7+ on the 3.50 line.
    """
    v = parse_version(version)
    if v < (3, 7, 0) or v >= (3, 51, 3):
        return False
    if v[:2] == (3, 44) and v[2] >= 6:
        return False
    if v[:2] == (3, 50) and v[2] >= 7:
        return False
    return True


def check_sqlite_version() -> str:
    """Refuse to run a live store on a SQLite build in the WAL-reset band."""
    version = sqlite_library_version()
    if in_wal_reset_band(version):
        raise UnsafeSQLiteVersion(
            f"SQLite {version} has the WAL-reset corruption bug; "
            "upgrade apsw to a build with SQLite >= 3.51.3 (pip install -U apsw)")
    return version


def file_says_wal(conn: apsw.Connection) -> bool:
    """Whether the database header records WAL mode (read through SQLite)."""
    mode = one(conn.execute("PRAGMA journal_mode"))[0]
    return str(mode).lower() == "wal"


def set_page_size(conn: apsw.Connection) -> None:
    """New files use PAGE_SIZE-byte pages (existing files keep theirs).

    2 KiB. It was chosen while both FTS5 indexes were fed by triggers inside
    every commit (a one-message commit dirtied ~18 pages, so a smaller page
    halved what each commit wrote). With the index written after the commit
    (sessiondb/index/indexer.py) the page size is a packing
    question, and it was measured again with m012's coded rows
    (docs/benchmarks.md, "B1 durable append"): 4 KiB pages bring the B1
    corpus (~240 characters a message) from ~515 to 492-498 B/msg, but the
    scale corpus (200 B - 4 KB texts, bench/scale_data.py) packs worst at
    4 KiB: its messages table is 235 MB at 2 KiB, 263 MB at 4 KiB (+11%),
    236 MB at 8 KiB. A store's size in the field follows its real messages,
    so the page stays at 2 KiB."""
    conn.execute(f"PRAGMA page_size={PAGE_SIZE}")


def set_auto_vacuum_incremental(conn: apsw.Connection) -> None:
    """A new file is created with incremental auto-vacuum, so the indexer
    can give the free pages of FTS5 merges back at the end of a catch-up
    (sessiondb/index/reclaim.py; a pointer-map page per ~400 pages of 2 KiB). Only
    on an empty file: an existing one keeps its mode (changing it would
    need a VACUUM, and FULL must never become INCREMENTAL behind a tool)."""
    if one(conn.execute("PRAGMA page_count"))[0] == 0:
        conn.execute("PRAGMA auto_vacuum=INCREMENTAL")


def set_journal_wal(conn: apsw.Connection) -> None:
    """WAL lets readers run beside the one writer and makes commits cheap."""
    mode = one(conn.execute("PRAGMA journal_mode=WAL"))[0]
    if str(mode).lower() != "wal":
        raise StorageError(
            f"could not enable WAL mode (SQLite kept {mode!r}); use "
            "journal_mode='delete' explicitly for filesystems without shared memory")


def set_journal_delete(conn: apsw.Connection) -> None:
    """Rollback journal, only where WAL cannot work (network filesystems).

    A file that is already in WAL mode is never silently downgraded: that
    would strand a live -wal written by another process.
    """
    if file_says_wal(conn):
        raise StorageError("this store is in WAL mode; refusing to downgrade it to DELETE")
    conn.execute("PRAGMA journal_mode=DELETE")


def set_synchronous_normal(conn: apsw.Connection) -> None:
    """In WAL, NORMAL is durable against application crashes and never
    corrupts on power loss; it only may lose the last commits then."""
    conn.execute("PRAGMA synchronous=NORMAL")


def set_synchronous_full(conn: apsw.Connection) -> None:
    """Rollback-journal mode needs FULL to survive power loss intact."""
    conn.execute("PRAGMA synchronous=FULL")


def set_foreign_keys(conn: apsw.Connection) -> None:
    """Messages cascade with their session; SQLite leaves FKs off by default."""
    conn.execute("PRAGMA foreign_keys=ON")


def set_busy_timeout(conn: apsw.Connection) -> None:
    """A short SQLite-level wait per attempt (BUSY_TIMEOUT_MS in all); the
    store's own jittered retry loop enforces the per-call patience deadline
    on top of it.

    SQLite's built-in busy timeout sleeps 1, 2, 5, 10, 15... ms between
    tries, so a commit that collides with another writer's ~0.1 ms commit
    waits milliseconds; these sleeps start at 50 us and grow, jittered so
    two waiters do not retry in step."""
    conn.set_busy_handler(BusyWait(BUSY_TIMEOUT_MS / 1000))


class BusyWait:
    """A busy handler: short, growing, jittered sleeps until ``budget`` (s) is spent.

    SQLite calls it with the number of prior calls in this wait; returning
    False gives up and the statement fails with SQLITE_BUSY."""

    FIRST_S, LONGEST_S = 0.00005, 0.005

    def __init__(self, budget: float, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.budget, self.clock, self.sleep = budget, clock, sleep
        self.started = 0.0

    def __call__(self, prior_calls: int) -> bool:
        now = self.clock()
        if prior_calls == 0:
            self.started = now
        elif now - self.started >= self.budget:
            return False
        pause = min(self.FIRST_S * 1.6 ** min(prior_calls, 12), self.LONGEST_S)
        self.sleep(pause * random.uniform(0.5, 1.5))
        return True


def set_journal_size_limit(conn: apsw.Connection) -> None:
    """Keep a checkpointed -wal from lingering at its high-water size."""
    conn.execute(f"PRAGMA journal_size_limit={JOURNAL_SIZE_LIMIT}")


def set_wal_autocheckpoint_off(conn: apsw.Connection) -> None:
    """The writer never checkpoints inside a commit: with two FTS indexes
    every commit writes several pages, so SQLite's automatic checkpoint
    would land on a commit every few hundred; the store's background
    checkpointer (checkpointer.py) does it on another thread instead."""
    conn.execute("PRAGMA wal_autocheckpoint=0")


def set_trusted_schema_off(conn: apsw.Connection) -> None:
    """Functions in a damaged or foreign schema must not run with privileges."""
    conn.execute("PRAGMA trusted_schema=OFF")


WRITER_POLICY_WAL = (set_busy_timeout, set_trusted_schema_off, set_page_size,
                     set_auto_vacuum_incremental, set_journal_wal,
                     set_synchronous_normal, set_foreign_keys, set_journal_size_limit,
                     set_wal_autocheckpoint_off)
WRITER_POLICY_DELETE = (set_busy_timeout, set_trusted_schema_off, set_page_size,
                        set_auto_vacuum_incremental, set_journal_delete,
                        set_synchronous_full, set_foreign_keys)
READER_POLICY = (set_busy_timeout, set_trusted_schema_off, set_foreign_keys)
# The background checkpointer's own connection: it only runs checkpoints,
# with the writer's durability (a checkpoint syncs unless synchronous=OFF).
CHECKPOINTER_POLICY = (set_busy_timeout, set_trusted_schema_off, set_synchronous_normal,
                       set_journal_size_limit)


# The indexer's own connection (core.py): it writes only derived data, so it
# commits at NORMAL whatever the writer's level (a crash loses at most a batch
# and its watermark together); it never checkpoints inside a commit either.
INDEXER_POLICY = (set_busy_timeout, set_trusted_schema_off, set_synchronous_normal,
                  set_foreign_keys, set_journal_size_limit, set_wal_autocheckpoint_off)


def apply_policy(conn: apsw.Connection, policy: tuple) -> None:
    for setting in policy:
        setting(conn)


def checkpoint_passive(conn: apsw.Connection) -> tuple[int, int]:
    """Copy WAL frames back without waiting on readers or blocking writers."""
    return conn.wal_checkpoint(mode=apsw.SQLITE_CHECKPOINT_PASSIVE)
