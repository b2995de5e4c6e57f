"""`hermes sessions optimize`: give a store's free space back and merge its search index.

Never an in-place VACUUM on a live store. The steps, all but the last on
private files in a 0700 scratch directory beside the store:

1. refuse while another process holds the store (the promotion needs it
   alone; see sessiondb/maintenance/lifecycle.py for which operations run online);
2. copy the live store with the backup API from a read-only connection and
   take the digest of its canonical rows in the same read;
3. on the copy: FTS5 ``optimize`` on both search indexes (merges their
   segments into one), then ``VACUUM INTO`` a second scratch file, which
   rewrites every b-tree without free pages;
4. verify that file as repair verifies its copies (integrity_check, no
   pending migrations, the same canonical rows, a healthy search index);
5. promote it with repair's promotion path: under the exclusive lock, and
   only if the live store's canonical rows still hash the same, the backup
   API writes it over the live file in one transaction; then a TRUNCATE
   checkpoint (nobody else has the file open) folds the WAL back so the
   file shrinks on disk.

A crash before step 5 leaves the live store untouched (and a scratch
directory that `doctor --fix` removes); a crash inside it leaves the old
or the new content, never a mix, because the backup commits once.
"""
from __future__ import annotations

import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Callable

import apsw

from sessiondb.recovery_api import (INDEXES, STORE_NAME, StoreNotFound, WHY, check_before_open,
                                    one, profile_dir, refuse_if_held, resolve_home)

from ..source import liveread
# repair's verification and promotion, reused as they are (one promotion path).
from ..source import check_space, source_bytes
from .inplace import promote_copy, verify_copy

Seam = Callable[[str], None]


@dataclass
class OptimizeReport:
    """Bytes of the store's files (database plus -wal) before and after."""

    db_path: str
    bytes_before: int
    bytes_after: int
    freelist_bytes_before: int
    search_bytes_before: int | None
    search_bytes_after: int | None
    seconds: float
    steps: dict[str, float]

    @property
    def bytes_freed(self) -> int:
        return self.bytes_before - self.bytes_after

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "bytes_freed": self.bytes_freed}


def _bundle_bytes(db_path: Path) -> int:
    return sum(os.stat(p).st_size for p in (db_path, Path(f"{db_path}-wal")) if p.exists())


def _pragma(conn: apsw.Connection, name: str) -> int:
    return int(one(conn.execute(f"PRAGMA {name}"))[0])


def _search_bytes(conn: apsw.Connection) -> int | None:
    try:
        (n,) = one(conn.execute(
            "SELECT sum(pgsize) FROM dbstat WHERE aggregate = 1 AND ("
            + " OR ".join(f"name LIKE '{t}%'" for t in INDEXES) + ")"))
    except apsw.SQLError:  # no dbstat in this build
        return None
    return n or 0


def _merge_search(copy: Path) -> None:
    """FTS5 'optimize' on each search index of the private copy."""
    conn = apsw.Connection(str(copy))
    try:
        tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
        with conn:
            for table in INDEXES:
                if table in tables:
                    conn.execute(f"INSERT INTO {table}({table}) VALUES ('optimize')")
    finally:
        conn.close()


def _vacuum_into(copy: Path, dest: Path) -> None:
    conn = apsw.Connection(str(copy))
    try:
        conn.execute("VACUUM INTO ?", (str(dest),))
    finally:
        conn.close()
    os.chmod(dest, 0o600)


def _fold_wal(db_path: Path) -> None:
    """TRUNCATE checkpoint after the promotion: nobody else has the file open
    (checked before), so the WAL the backup filled goes back into the file
    and the file is cut to its new size."""
    conn = apsw.Connection(str(db_path), flags=apsw.SQLITE_OPEN_READWRITE)
    try:
        conn.set_busy_timeout(liveread.BUSY_MS)
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    finally:
        conn.close()


def optimize(home: str | os.PathLike[str] | None = None, profile: str | None = None, *,
             seam: Seam | None = None) -> OptimizeReport:
    """Merge the search index and compact the store into a verified copy,
    promoted over the live file; see the module docstring.

    ``seam(step)`` runs after each step (a seam for crash tests)."""
    started = time.monotonic()
    root = resolve_home(home)
    pdir = profile_dir(root, profile)
    db_path = pdir / STORE_NAME
    if not db_path.is_file():
        raise StoreNotFound(f"no store at {db_path}", path=str(db_path))
    # another program's file: ForeignStore, before anything reads or copies it
    check_before_open(db_path, create=False, home=root, profile=profile)
    refuse_if_held(db_path, "optimize", WHY["optimize"])
    check_space({pdir: source_bytes(db_path) * 2})
    before = _bundle_bytes(db_path)
    steps: dict[str, float] = {}
    mark = [time.monotonic()]

    def step(name: str) -> None:
        now = time.monotonic()
        steps[name] = round(now - mark[0], 3)
        mark[0] = now
        if seam is not None:
            seam(name)

    work = liveread.scratch_dir(pdir)
    try:
        conn = liveread.open_readonly(db_path)
        try:
            conn.execute("BEGIN")  # the digest and the copy see the same snapshot
            free_before = _pragma(conn, "freelist_count") * _pragma(conn, "page_size")
            search_before = _search_bytes(conn)
            digest = liveread.canonical_digest(conn)
            conn.execute("COMMIT")
            liveread.copy_live(conn, work / "copy.db")
        finally:
            conn.close()
        step("copy")
        _merge_search(work / "copy.db")
        step("merge_search")
        final = work / STORE_NAME
        _vacuum_into(work / "copy.db", final)
        (work / "copy.db").unlink()
        step("vacuum_into")
        verify_copy(final, digest)
        step("verify")
        refuse_if_held(db_path, "optimize", WHY["optimize"])
        promote_copy(db_path, final, digest)
        step("promote")
        _fold_wal(db_path)
        step("checkpoint")
    finally:
        shutil.rmtree(work, ignore_errors=True)
    conn = liveread.open_readonly(db_path)
    try:
        search_after = _search_bytes(conn)
    finally:
        conn.close()
    return OptimizeReport(str(db_path), before, _bundle_bytes(db_path), free_before,
                          search_before, search_after,
                          round(time.monotonic() - started, 3), steps)
