"""Generation stamp, replaced-file checks and the header descriptor."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import apsw
import pytest

from sessiondb import SessionDB, StoreReplaced
from sessiondb.engine.containment import GENERATION_KEY, disk_application_id, latched

# SQLite's shared lock on a database file is a POSIX read lock on the
# "shared" byte range; another process can write-lock it only if no one
# holds it (a second, closed descriptor would have cancelled ours).
PROBE = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
try:
    fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 510, 0x40000002)
    print("free")
except OSError:
    print("held")
"""

def stamp(db: SessionDB) -> tuple[int, str | None]:
    with db._read() as conn:
        (app_id,) = conn.execute("PRAGMA application_id").fetchone()
    return app_id, db.meta(GENERATION_KEY)


def test_new_stores_get_distinct_stamps_that_persist(tmp_path: Path) -> None:
    with SessionDB(tmp_path / "a.db") as a, SessionDB(tmp_path / "b.db") as b:
        app_a, meta_a = stamp(a)
        app_b, _ = stamp(b)
    assert app_a != 0 and str(app_a) == meta_a and app_a != app_b
    fd = os.open(tmp_path / "a.db", os.O_RDONLY)
    try:
        assert disk_application_id(fd) == app_a  # in the file's header, not only the -wal
    finally:
        os.close(fd)
    with SessionDB(tmp_path / "a.db") as again:
        assert stamp(again) == (app_a, meta_a)


def test_a_lost_stamp_is_restored_on_open(tmp_path: Path) -> None:
    path = tmp_path / "a.db"
    SessionDB(path).close()
    conn = apsw.Connection(str(path))  # nobody else has it open
    conn.execute("PRAGMA application_id = 0")
    conn.close()
    with SessionDB(path) as db:
        app_id, meta = stamp(db)
    assert app_id != 0 and str(app_id) == meta


def test_file_moved_over_the_path_is_refused(tmp_path: Path, open_store) -> None:
    path = tmp_path / "state.db"
    db = open_store(path)
    db.create_session("s1", source="test")
    other = tmp_path / "other.db"
    SessionDB(other).close()
    os.replace(other, path)  # a new inode under the same name
    with pytest.raises(StoreReplaced, match="replaced by another file") as info:
        db.create_session("s2", source="test")
    assert db.quarantined
    with SessionDB(info.value.rescued_to) as rescued:  # the store that was moved away
        assert [s.id for s in rescued.list_sessions()] == ["s1"]
    # The file that is there now is a different store: it opens and works.
    with SessionDB(path) as fresh:
        assert latched((path.stat().st_dev, path.stat().st_ino)) is None
        fresh.create_session("s3", source="test")


def test_deleted_database_file_is_refused(tmp_path: Path, open_store) -> None:
    path = tmp_path / "state.db"
    db = open_store(path)
    os.remove(path)
    with pytest.raises(StoreReplaced, match="deleted") as info:
        db.create_session("s1", source="test")
    assert not path.exists()  # nothing recreated it
    assert info.value.rescued_to and Path(info.value.rescued_to).is_file()


def test_copying_the_same_store_back_is_not_a_false_alarm(tmp_path: Path,
                                                          open_store) -> None:
    db = open_store(tmp_path / "state.db")
    db.create_session("s1", source="test")
    db.checkpoint()
    shutil.copyfile(tmp_path / "state.db", tmp_path / "copy.db")
    with SessionDB(tmp_path / "copy.db") as copy:
        copy.create_session("c1", source="test")  # a copy keeps working
    db.create_session("s2", source="test")
    assert not db.quarantined


def test_closing_one_handle_keeps_the_other_handles_locks(tmp_path: Path) -> None:
    path = tmp_path / "state.db"

    def probe() -> str:
        return subprocess.run([sys.executable, "-c", PROBE, str(path)], text=True,
                              capture_output=True, timeout=60, check=True).stdout.strip()

    keep, drop = SessionDB(path), SessionDB(path)
    try:
        with keep.atomic():
            assert probe() == "held"
            drop.close()  # must not close a descriptor that cancels keep's locks
            assert probe() == "held"
    finally:
        keep.close()
    assert probe() == "free"


# -- the view check is skipped only while nobody else committed ---------------

RESTAMP = """
import apsw, sys
conn = apsw.Connection(sys.argv[1])
conn.set_busy_timeout(20000)  # the store's indexer may hold the write lock for a batch
conn.execute("PRAGMA wal_autocheckpoint=0")  # the new stamp stays in the -wal only
conn.execute("PRAGMA application_id = 4242")
conn.close()
"""


def traced(db: SessionDB, fn) -> list[str]:
    seen: list[str] = []

    def tracer(_cursor, sql, _bindings):
        seen.append(sql)
        return True

    db._writer.exec_trace = tracer
    try:
        fn()
    finally:
        db._writer.exec_trace = None
    return seen


def test_a_stamp_committed_by_another_process_is_refused(tmp_path: Path,
                                                         open_store) -> None:
    path = tmp_path / "state.db"
    db = open_store(path)
    db.create_session("s1", source="test")
    db.append_message("s1", {"role": "user", "content": "kept"})  # the view is now trusted
    subprocess.run([sys.executable, "-c", RESTAMP, str(path)], check=True, timeout=60)
    fd = os.open(path, os.O_RDONLY)
    try:  # only SQLite's view changed: the header on disk is still ours
        assert disk_application_id(fd) == db._guard.generation
    finally:
        os.close(fd)
    with pytest.raises(StoreReplaced, match="generation"):
        db.append_message("s1", {"role": "user", "content": "refused"})
    assert db.quarantined
    assert [m["content"] for m in db.get_messages("s1")] == ["kept"]


def test_the_view_is_asked_again_after_another_writer_commits(tmp_path: Path,
                                                              open_store) -> None:
    path = tmp_path / "state.db"
    db, other = open_store(path), open_store(path)
    create = traced(db, lambda: db.create_session("s1", source="test"))
    assert "PRAGMA application_id" in create  # the first write after opening asks

    def append(text: str) -> list[str]:
        return traced(db, lambda: db.append_message("s1", {"role": "user", "content": text}))

    assert "PRAGMA application_id" not in append("first")  # only our own commit since
    assert "PRAGMA application_id" not in append("second")
    other.append_message("s1", {"role": "assistant", "content": "from the other handle"})
    assert "PRAGMA application_id" in append("third")  # someone else committed
    assert "PRAGMA application_id" not in append("fourth")
    with pytest.raises(RuntimeError):
        with db.atomic():
            raise RuntimeError("rolled back")
    assert "PRAGMA application_id" in append("fifth")  # a rollback forgets the view
    assert [m["content"] for m in db.get_messages("s1")] == [
        "first", "second", "from the other handle", "third", "fourth", "fifth"]
