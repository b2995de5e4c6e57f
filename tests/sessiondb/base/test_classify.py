"""classify(): causes from apsw classes and extended codes; the text fallback
checked against the messages real SQLite errors carry."""
from __future__ import annotations

import errno
import itertools
import os
from pathlib import Path

import apsw
import pytest

from sessiondb import Cause, SessionDB, StoreCorrupt, StoreLocked, StoreReplaced
from sessiondb.base.causes import classify, classify_text
from sessiondb.base.errors import from_apsw
from tests.helpers.faultvfs import FaultVFS

_names = itertools.count()


def _raise(conn: apsw.Connection, sql: str) -> apsw.Error:
    with pytest.raises(apsw.Error) as info:
        conn.execute(sql).fetchall()
    return info.value


def _corrupt_file(tmp_path: Path) -> apsw.Error:
    path = tmp_path / "c.db"
    conn = apsw.Connection(str(path))
    with conn:
        conn.execute("CREATE TABLE t(x)")
        conn.executemany("INSERT INTO t VALUES (zeroblob(500))", [()] * 50)
    (root,) = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name='t'").fetchone()
    conn.close()
    with open(path, "r+b") as f:
        f.seek((root - 1) * 4096)
        f.write(b"\xa5" * 4096)
    return _raise(apsw.Connection(str(path)), "SELECT count(*) FROM t")


def _fts_corrupt(tmp_path: Path) -> apsw.Error:
    conn = apsw.Connection(str(tmp_path / "f.db"))
    conn.execute("CREATE VIRTUAL TABLE ft USING fts5(x)")
    conn.execute("INSERT INTO ft VALUES ('hello world')")
    conn.execute("UPDATE ft_data SET block = zeroblob(length(block)) WHERE id > 10")
    return _raise(conn, "INSERT INTO ft(ft) VALUES ('integrity-check')")


def _not_a_db(tmp_path: Path) -> apsw.Error:
    path = tmp_path / "g.db"
    path.write_bytes(b"this is not sqlite" * 300)
    return _raise(apsw.Connection(str(path)), "SELECT * FROM sqlite_schema")


def _busy(tmp_path: Path) -> apsw.Error:
    path = str(tmp_path / "b.db")
    one, two = apsw.Connection(path), apsw.Connection(path)
    one.execute("CREATE TABLE t(x); BEGIN IMMEDIATE; INSERT INTO t VALUES (1)")
    return _raise(two, "BEGIN IMMEDIATE")


def _cant_open(tmp_path: Path) -> apsw.Error:
    with pytest.raises(apsw.Error) as info:
        apsw.Connection(str(tmp_path / "missing" / "x.db"))
    return info.value


def _page_limit(tmp_path: Path) -> apsw.Error:
    """SQLite's own SQLITE_FULL: the file reached max_page_count."""
    conn = apsw.Connection(str(tmp_path / "full.db"))
    conn.execute("CREATE TABLE t(x)")
    conn.execute("PRAGMA max_page_count = 3").fetchall()
    return _raise(conn, "INSERT INTO t VALUES (zeroblob(20000))")


def _read_only(tmp_path: Path) -> apsw.Error:
    """The file opened read-only, as SQLite does when it may not write it."""
    shim = FaultVFS(f"classify{os.getpid()}_{next(_names)}")
    try:
        path = str(tmp_path / "ro.db")
        apsw.Connection(path).execute("CREATE TABLE t(x)")
        shim.faults.readonly = True
        conn = apsw.Connection(path, vfs=shim.name)
        err = _raise(conn, "INSERT INTO t VALUES (1)")
        shim.faults.clear()
        conn.close()
        return err
    finally:
        shim.unregister()


REAL = {
    "corrupt": (_corrupt_file, Cause.CORRUPT),
    "fts": (_fts_corrupt, Cause.FTS_INDEX),
    "notadb": (_not_a_db, Cause.CORRUPT),
    "busy": (_busy, Cause.LOCKED),
    "cantopen": (_cant_open, Cause.NOT_FOUND),
    "full": (_page_limit, Cause.DISK_FULL),
    "readonly": (_read_only, Cause.READONLY),
}


@pytest.mark.parametrize("name", sorted(REAL))
def test_real_errors_classify_by_class_and_code(name: str, tmp_path: Path) -> None:
    make, cause = REAL[name]
    err = make(tmp_path)
    assert classify(err) is cause
    assert from_apsw(err).cause is cause  # one mapping: classify goes through it


@pytest.mark.parametrize("name", sorted(REAL))
def test_text_fallback_agrees_on_real_messages(name: str, tmp_path: Path) -> None:
    make, cause = REAL[name]
    text = str(make(tmp_path))
    assert text, "SQLite gave this error a message"
    assert classify_text(text) is cause
    # As another process would report it, wrapped in its own words.
    assert classify_text(f"worker 3 failed: sqlite3.OperationalError: {text}") is cause


def test_malformed_is_corruption_never_disk_full() -> None:
    assert classify_text("database disk image is malformed") is Cause.CORRUPT
    assert classify_text("database or disk is full") is Cause.DISK_FULL
    assert classify_text("disk I/O error") is Cause.IO_ERROR
    # Loose words decide nothing.
    assert classify_text("the disk is making noises") is Cause.UNKNOWN
    assert classify_text("corrupted feelings") is Cause.UNKNOWN


def test_text_names_and_codes() -> None:
    assert classify_text("rc=SQLITE_CORRUPT_VTAB") is Cause.FTS_INDEX
    assert classify_text("SQLITE_CORRUPT (11)") is Cause.CORRUPT
    assert classify_text("SQLITE_IOERR_FSYNC") is Cause.IO_ERROR
    assert classify_text("SQLITE_READONLY_DBMOVED") is Cause.REPLACED
    assert classify_text("SQLITE_BUSY_SNAPSHOT") is Cause.LOCKED
    assert classify_text("hstate_agent said session_persistence_failed: storage_replaced") \
        is Cause.REPLACED
    assert classify_text("storage_fts_index") is Cause.FTS_INDEX


def test_extended_codes_decide() -> None:
    assert classify(apsw.exception_for(apsw.SQLITE_CORRUPT_VTAB)) is Cause.FTS_INDEX
    assert classify(apsw.exception_for(apsw.SQLITE_CORRUPT)) is Cause.CORRUPT
    assert classify(apsw.exception_for(apsw.SQLITE_IOERR_FSYNC)) is Cause.IO_ERROR
    assert classify(apsw.exception_for(apsw.SQLITE_READONLY_DBMOVED)) is Cause.REPLACED
    assert classify(apsw.exception_for(apsw.SQLITE_FULL)) is Cause.DISK_FULL


def test_typed_and_os_errors() -> None:
    assert classify(StoreCorrupt("x")) is Cause.CORRUPT
    assert classify(StoreLocked("x")) is Cause.LOCKED
    assert classify(StoreReplaced("x")) is Cause.REPLACED
    assert classify(OSError(errno.ENOSPC, "No space left on device")) is Cause.DISK_FULL
    assert classify(OSError(errno.EROFS, "Read-only file system")) is Cause.READONLY
    assert classify(OSError(errno.EIO, "Input/output error")) is Cause.IO_ERROR
    assert classify(ValueError("x")) is Cause.UNKNOWN


def test_store_open_of_non_database_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "junk.db"
    path.write_bytes(b"junk" * 2000)
    with pytest.raises(StoreCorrupt) as info:
        SessionDB(path)
    assert classify(info.value) is Cause.CORRUPT
    assert path.read_bytes() == b"junk" * 2000
