"""Storage faults end to end: the cause, the explanation, what was kept,
what a quarantined handle did not touch, and the spool bringing the store
back to exactly the expected rows once the fault is gone.

Faults come from a real second process, bytes written to the file on disk,
or the apsw VFS shim in tests/helpers/faultvfs.py; the store itself is
never monkeypatched. The commands every description emits are parsed with
the real CLI in test_explain.py::test_every_emitted_command_parses.
"""
from __future__ import annotations

import hashlib
import itertools
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any, Iterator

import apsw
import pytest

from sessiondb import (Cause, DiskFull, SearchIndexCorrupt, SessionDB, StorageError,
                       StoreCorrupt, StoreIOError, StoreLocked, StoreReadOnly, StoreReplaced,
                       strip_markers)
from sessiondb.base.causes import classify
from sessiondb.base.explain import describe, describe_error
from sessiondb.importers.spool_import import import_spool, spool_dir_for
from tests.helpers.faultvfs import FaultVFS

ROOT = Path(__file__).resolve().parents[3]
_names = itertools.count()


@pytest.fixture
def vfs() -> Iterator[FaultVFS]:
    shim = FaultVFS(f"fault{os.getpid()}_{next(_names)}")
    opened: list[SessionDB] = []
    shim.opened = opened  # type: ignore[attr-defined]
    yield shim
    shim.faults.clear()  # a test that failed mid-fault must not fail closing too
    for db in opened:
        db.close()
    shim.unregister()


def msg(i: int) -> dict[str, Any]:
    return {"role": "user" if i % 2 else "assistant", "content": f"message {i}",
            "timestamp": 1_700_000_000.0 + i}


def rows(db: SessionDB, sid: str = "s1") -> list[dict[str, Any]]:
    return strip_markers(db.get_messages(sid))


def public(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return strip_markers(messages)


def bundle_bytes(path: Path) -> dict[str, str | None]:
    """Hashes of the database and its -wal/-shm (None: absent)."""
    out: dict[str, str | None] = {}
    for suffix in ("", "-wal", "-shm"):
        f = Path(f"{path}{suffix}")
        out[suffix] = hashlib.sha256(f.read_bytes()).hexdigest() if f.exists() else None
    return out


def new_store(path: Path, n: int, *, sid: str = "s1") -> list[dict[str, Any]]:
    """A closed store at ``path`` holding messages 0..n-1; returns them."""
    with SessionDB(path) as db:
        db.create_session(sid, source="test", model="m")
        acked = [msg(i) for i in range(n)]
        db.append_messages(sid, acked)
    return acked


def assert_explained(err: StorageError, cause: Cause, home: Path) -> None:
    """The cause is right and the description is the table's, pinned to home."""
    assert classify(err) is cause
    failure = describe_error(err, home=home)
    assert failure == describe(cause, db_path=err.path, home=home, spooled_to=err.spooled_to,
                               unsaved=len(err.unsaved))
    assert failure.code == f"storage_{cause.value}"
    assert failure.actions and all(f"--home {home}" in a for a in failure.actions)


def page_of(path: Path, table: str) -> tuple[int, int]:
    """(root page number, page size) of ``table`` in a closed store file."""
    with SessionDB(path) as db, db._read() as conn:
        (root,) = conn.execute("SELECT rootpage FROM sqlite_schema WHERE name = ?",
                               (table,)).fetchone()
        (size,) = conn.execute("PRAGMA page_size").fetchone()
    return root, size


def smash_page(path: Path, page: int, size: int) -> None:
    with open(path, "r+b") as f:
        f.seek((page - 1) * size)
        f.write(b"\xa5" * size)


# -- disk full, I/O error, read-only: spool, no quarantine ------------------


def test_disk_full_on_kth_write(hermes_home: Path, vfs: FaultVFS) -> None:
    db = SessionDB.open(vfs=vfs.name)
    vfs.opened.append(db)  # type: ignore[attr-defined]
    db.create_session("s1", source="test")
    # How many file writes one append costs depends on the schema (the
    # search triggers write both FTS indexes), so measure it, then let the
    # disk fill up in the middle of the fourth append from here.
    first = msg(0)
    vfs.faults.arm_full(10**9)
    db.append_message("s1", first)
    per_append = vfs.faults.writes
    assert per_append > 1
    vfs.faults.arm_full(3 * per_append + per_append // 2)
    acked, failed, errors = [first], [], []
    for i in range(1, 13):
        m = msg(i)
        try:
            db.append_message("s1", m)
            acked.append(m)
        except DiskFull as e:
            failed.append(m)
            errors.append(e)
    assert acked and failed, "the k-th write must fall inside the run"
    assert all(e.spooled_to == str(hermes_home / "spool" / "s1.jsonl") for e in errors)
    assert_explained(errors[0], Cause.DISK_FULL, hermes_home)
    assert not db.quarantined
    assert rows(db) == public(acked)  # what was acknowledged is there, nothing more
    vfs.faults.clear()
    report = import_spool(db)
    assert report.imported == len(failed)
    assert rows(db) == public(acked + failed)
    assert db.quick_check() == ["ok"]
    assert (hermes_home / "spool" / "imported").is_dir()
    assert list((hermes_home / "spool").glob("*.jsonl")) == []


def test_io_error_on_sync(hermes_home: Path, vfs: FaultVFS) -> None:
    # In WAL with synchronous=NORMAL commits do not sync; a rollback-journal
    # store syncs on every commit, so that is where a failing fsync bites.
    db = SessionDB.open(vfs=vfs.name, journal_mode="delete")
    vfs.opened.append(db)  # type: ignore[attr-defined]
    db.create_session("s1", source="test")
    acked = [msg(0), msg(1)]
    db.append_messages("s1", acked)
    vfs.faults.ioerr_on_sync = True
    lost = [msg(2), msg(3)]
    with pytest.raises(StoreIOError) as info:
        db.append_messages("s1", lost)
    assert info.value.sqlite_code == apsw.SQLITE_IOERR_FSYNC
    assert info.value.spooled_to is not None
    assert_explained(info.value, Cause.IO_ERROR, hermes_home)
    assert not db.quarantined
    vfs.faults.clear()
    assert rows(db) == public(acked)
    import_spool(db)
    assert rows(db) == public(acked + lost)
    assert db.quick_check() == ["ok"]


def test_io_error_on_sync_in_a_wal_checkpoint(hermes_home: Path, vfs: FaultVFS) -> None:
    db = SessionDB.open(vfs=vfs.name)
    vfs.opened.append(db)  # type: ignore[attr-defined]
    db.create_session("s1", source="test")
    acked = [msg(0), msg(1)]
    db.append_messages("s1", acked)
    vfs.faults.ioerr_on_sync = True
    with pytest.raises(StoreIOError) as info:
        db.checkpoint()  # WAL syncs before it copies frames back
    assert info.value.sqlite_code == apsw.SQLITE_IOERR_FSYNC
    assert_explained(info.value, Cause.IO_ERROR, hermes_home)
    assert rows(db) == public(acked)
    vfs.faults.clear()
    db.checkpoint()
    assert db.quick_check() == ["ok"] and rows(db) == public(acked)


def test_read_only_file(hermes_home: Path, vfs: FaultVFS) -> None:
    acked = new_store(hermes_home / "state.db", 3)
    # Another (normal) handle keeps the -wal/-shm alive, as a running agent would.
    keeper = SessionDB.open()
    vfs.opened.append(keeper)  # type: ignore[attr-defined]
    vfs.faults.readonly = True
    db = SessionDB.open(vfs=vfs.name)
    vfs.opened.append(db)  # type: ignore[attr-defined]
    before = (hermes_home / "state.db").read_bytes()
    late = [msg(10)]
    with pytest.raises(StoreReadOnly) as info:
        db.append_messages("s1", late)
    assert info.value.spooled_to is not None
    assert_explained(info.value, Cause.READONLY, hermes_home)
    assert rows(db) == public(acked)
    assert (hermes_home / "state.db").read_bytes() == before
    vfs.faults.clear()
    import_spool(keeper)
    assert rows(keeper) == public(acked + late)


# -- locked: a real second process holds the write lock ---------------------


def test_write_lock_held_by_another_process(hermes_home: Path, open_store) -> None:
    db = open_store(patience=0.3)
    db.create_session("s1", source="test")
    acked = [msg(0)]
    db.append_messages("s1", acked)
    holder = subprocess.Popen([sys.executable, "-m", "tests.helpers.lockholder",
                               str(db.path)], cwd=ROOT, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "locked"
        retry = msg(1)
        with pytest.raises(StoreLocked) as info:
            db.append_message("s1", retry)
        assert_explained(info.value, Cause.LOCKED, hermes_home)
        assert info.value.spooled_to is None  # transient: the caller keeps and retries
        assert not db.quarantined
        assert rows(db) == public(acked)
    finally:
        assert holder.stdin is not None
        holder.stdin.write("go\n")
        holder.stdin.close()
        assert holder.wait(timeout=30) == 0
    db.append_message("s1", retry)  # the same dict: same uid, written once
    db.append_message("s1", retry)
    assert import_spool(db).files == []
    assert rows(db) == public(acked + [retry])


# -- structural corruption: quarantine ---------------------------------------


def test_corrupt_messages_page_quarantines(hermes_home: Path, tmp_path: Path) -> None:
    path = hermes_home / "state.db"
    acked = new_store(path, 5)
    backup = tmp_path / "backup.db"
    shutil.copyfile(path, backup)  # what `recover` will salvage, for the last step
    root, size = page_of(path, "messages")
    other = SessionDB.open()  # a second handle of this process, opened before
    db = SessionDB.open()
    try:
        smash_page(path, root, size)
        lost = [msg(5)]
        with pytest.raises(StoreCorrupt) as info:
            db.append_messages("s1", lost)
        assert_explained(info.value, Cause.CORRUPT, hermes_home)
        assert info.value.spooled_to is not None
        assert db.quarantined
        frozen = bundle_bytes(path)
        later = [msg(6)]
        with pytest.raises(StoreCorrupt, match="quarantined"):
            db.append_messages("s1", later)  # fails fast, still spooled
        with pytest.raises(StoreCorrupt, match="quarantined"):
            other.append_messages("s1", [msg(7)])  # the latch told the other handle
        with pytest.raises(StoreCorrupt, match="quarantined"):
            SessionDB.open()  # and new handles in this process
        with pytest.raises(StoreCorrupt, match="quarantined"):
            db.checkpoint()
    finally:
        db.close()
        other.close()
    assert bundle_bytes(path) == frozen  # no write, no checkpoint on close
    (tmp_path / "restored").mkdir(mode=0o700)
    shutil.copyfile(backup, tmp_path / "restored" / "state.db")
    with SessionDB(tmp_path / "restored" / "state.db") as restored:
        report = import_spool(restored, spool_dir=spool_dir_for(path))
        assert report.imported == 3
        assert rows(restored) == public(acked + lost + later + [msg(7)])


def test_fts_only_damage_is_fts_index_without_quarantine(hermes_home: Path) -> None:
    """Junk over a search-index page: the guard scopes the corruption to the
    index (every canonical table checks clean), so nothing is quarantined;
    the append never touches the index and lands; the indexer meets the
    damage and marks the index stale."""
    path = hermes_home / "state.db"
    acked = new_store(path, 4)
    root, size = page_of(path, "messages_fts_data")
    smash_page(path, root, size)
    with SessionDB.open() as db:
        with pytest.raises(SearchIndexCorrupt) as info:  # an index-only write, unguarded
            with db.atomic() as conn:
                conn.execute("INSERT INTO messages_fts(messages_fts) VALUES ('optimize')")
        assert_explained(info.value, Cause.FTS_INDEX, hermes_home)
        assert not db.quarantined
        assert db.search_index_stale() is None
        retry = msg(4)
        db.append_message("s1", retry)  # the index is not written: no error, no spool
        assert not db.quarantined
        db.catch_up_index()
        stale = db.search_index_stale()
        assert stale is not None and stale["sqlite_code"] == apsw.SQLITE_CORRUPT
        assert rows(db) == public(acked + [retry])
        hits = db.search("message 4")
        assert [(h.message_id, h.via) for h in hits] == [
            (db.get_messages("s1")[-1]["_db_persisted"].id, "fallback")]
        assert not list(spool_dir_for(path).glob("*.jsonl"))  # only the space reserve
        assert import_spool(db).files == []


# -- replaced files ------------------------------------------------------------


def test_cp_of_another_store_over_the_live_file(hermes_home: Path, tmp_path: Path) -> None:
    path = hermes_home / "state.db"
    stranger = tmp_path / "stranger.db"
    new_store(stranger, 2, sid="x1")
    db = SessionDB.open()
    try:
        db.create_session("s1", source="test")
        acked = [msg(0), msg(1)]
        db.append_messages("s1", acked)
        db.checkpoint()
        backup = tmp_path / "backup.db"
        shutil.copyfile(path, backup)
        inode = path.stat().st_ino
        shutil.copyfile(stranger, path)  # cp: same inode, other contents
        assert path.stat().st_ino == inode
        lost = [msg(2)]
        with pytest.raises(StoreReplaced) as info:
            db.append_messages("s1", lost)
        assert "generation" in str(info.value)
        assert_explained(info.value, Cause.REPLACED, hermes_home)
        assert db.quarantined and info.value.spooled_to is not None
        frozen = bundle_bytes(path)
        with pytest.raises(StoreReplaced):
            db.append_messages("s1", [msg(3)])
    finally:
        db.close()
    assert bundle_bytes(path) == frozen
    restored_path = tmp_path / "restored" / "state.db"
    restored_path.parent.mkdir(mode=0o700)
    shutil.copyfile(backup, restored_path)
    with SessionDB(restored_path) as restored:
        import_spool(restored, spool_dir=spool_dir_for(path))
        assert rows(restored) == public(acked + lost + [msg(3)])


def test_deleted_wal_is_refused_and_rescued(hermes_home: Path, tmp_path: Path) -> None:
    path = hermes_home / "state.db"
    db = SessionDB.open()
    try:
        db.create_session("s1", source="test")
        acked = [msg(0), msg(1), msg(2)]
        db.append_messages("s1", acked)  # committed to the -wal, not yet to the file
        os.remove(f"{path}-wal")
        lost = [msg(3)]
        with pytest.raises(StoreReplaced, match="-wal") as info:
            db.append_messages("s1", lost)
        assert_explained(info.value, Cause.REPLACED, hermes_home)
        assert db.quarantined and info.value.spooled_to is not None
        rescued = Path(info.value.rescued_to or "")
        assert rescued.is_file() and oct(rescued.stat().st_mode & 0o777) == "0o600"
        frozen = bundle_bytes(path)
        with pytest.raises(StoreReplaced):
            db.append_messages("s1", [msg(4)])
    finally:
        db.close()
    assert bundle_bytes(path) == frozen
    assert not Path(f"{path}-wal").exists()  # closing did not recreate or fold it
    with SessionDB(rescued) as restored:
        assert rows(restored) == public(acked)  # the acknowledged rows survived
        import_spool(restored, spool_dir=spool_dir_for(path))
        assert rows(restored) == public(acked + lost + [msg(4)])
